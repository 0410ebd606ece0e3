"""The Transformer block: equal to torch.nn.TransformerEncoderLayer, and today's variants (RMSNorm,
SwiGLU, parallel sublayers, QK-norm, no biases) equal to a Llama block written out."""

import math

import pytest
import torch
import torch.nn.functional as F
from _inputs import NON_BOOLS, randomize, refuses_non_bool
from torch import nn

from attention import (
    RotaryEmbedding,
    TransformerBlock,
    alibi_bias,
    swiglu_width,
)


def _torch_layer(norm_first: bool, activation: str, dropout: float = 0.0) -> nn.Module:
    torch.manual_seed(0)
    return nn.TransformerEncoderLayer(
        8, 2, 16, dropout=dropout, activation=activation, batch_first=True,
        norm_first=norm_first, dtype=torch.float64,
    )


def _causal_src_mask(t: int) -> torch.Tensor:
    return nn.Transformer.generate_square_subsequent_mask(t, dtype=torch.float64)


# --- the block against torch.nn.TransformerEncoderLayer ----------------------------------------


def test_torch_s_bool_masks_inverted_give_the_layer_s_answer() -> None:
    """from_torch's docstring: torch's bool masks mark what is hidden, the block's what may be
    attended. Inverted, a padding mask and a bool src_mask give the layer's outputs; passed
    unchanged they are taken and give others (a convention, not something a check can see)."""
    layer = _torch_layer(True, "gelu", dropout=0.0).eval()
    block = TransformerBlock.from_torch(layer)
    x = torch.randn(3, 5, 8, dtype=torch.float64)
    padding = torch.zeros(3, 5, dtype=torch.bool)
    padding[1, 3:] = padding[2, 1:] = True  # True: a padding token, in torch's convention
    hidden = torch.ones(5, 5, dtype=torch.bool).triu(1)  # torch's bool causal src_mask
    real = ~padding
    with torch.no_grad():
        expected = layer(x, src_key_padding_mask=padding)
        got = block(x, ~padding[:, None, None, :])
        torch.testing.assert_close(got[real], expected[real], atol=1e-10, rtol=0)
        torch.testing.assert_close(block(x, ~hidden), layer(x, src_mask=hidden), atol=1e-10,
                                   rtol=0)
        assert not torch.allclose(block(x, hidden), layer(x, src_mask=hidden))


@pytest.mark.parametrize("activation", ["gelu", "relu"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("norm_first", [True, False])
def test_block_equals_torch_encoder_layer(norm_first: bool, causal: bool, activation: str) -> None:
    layer = _torch_layer(norm_first, activation, dropout=0.1).eval()
    block = TransformerBlock.from_torch(layer, is_causal=causal)
    assert not block.training and block.norm_first == norm_first
    x = torch.randn(3, 5, 8, dtype=torch.float64)
    mask = _causal_src_mask(5) if causal else None
    with torch.no_grad():
        expected = layer(x, src_mask=mask, is_causal=causal)
        torch.testing.assert_close(block(x), expected, atol=1e-10, rtol=0)


@pytest.mark.parametrize("activation", ["gelu", "relu"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("norm_first", [True, False])
def test_block_drops_what_torch_drops_in_training(
    norm_first: bool, causal: bool, activation: str
) -> None:
    """Same seed, same four dropout masks (attention weights, both residual branches, FFN).

    One sequence (b = 1): torch's attention output is laid out (t, b, d) in memory and its
    dropout mask is drawn in that order, which for b = 1 is our (b, t, d) order.
    """
    layer = _torch_layer(norm_first, activation, dropout=0.2)
    block = TransformerBlock.from_torch(layer, is_causal=causal)
    assert block.training
    x = torch.randn(1, 6, 8, dtype=torch.float64)
    mask = _causal_src_mask(6) if causal else None
    torch.manual_seed(5)
    expected = layer(x, src_mask=mask, is_causal=causal)
    torch.manual_seed(5)
    ours = block(x)
    torch.testing.assert_close(ours, expected, atol=1e-10, rtol=0)
    torch.testing.assert_close(block.eval()(x), layer.eval()(x, src_mask=mask, is_causal=causal))
    assert not torch.allclose(ours, block(x))  # dropout was on in training mode


def test_attention_weights_are_torchs_per_head_weights() -> None:
    layer = _torch_layer(True, "gelu").eval()
    block = TransformerBlock.from_torch(layer, is_causal=True)
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    _, weights = block(x, return_weights=True)
    normed = layer.norm1(x)
    _, expected = layer.self_attn(
        normed, normed, normed, attn_mask=_causal_src_mask(5), average_attn_weights=False
    )
    assert weights.shape == (2, 2, 5, 5)
    torch.testing.assert_close(weights, expected, atol=1e-10, rtol=0)


def test_a_float_mask_is_added_per_head_as_torch_adds_it() -> None:
    """ALiBi's bias (h, t, t) as attn_mask equals torch's layer given the same (b h, t, t) mask.

    Outside ``torch.no_grad()``: torch's inference fast path does not apply a 3-d mask per head
    (pytorch/pytorch#102333), its reference path does.
    """
    layer = _torch_layer(True, "gelu").eval()
    block = TransformerBlock.from_torch(layer, is_causal=True)
    x = torch.randn(3, 5, 8, dtype=torch.float64)
    bias = alibi_bias(2, 5, 5).double() * 8  # (h, t, t), steep enough to matter
    torch_mask = (bias + _causal_src_mask(5)).repeat(3, 1, 1)  # (b h, t, t)
    expected = layer(x, src_mask=torch_mask).detach()
    torch.testing.assert_close(block(x, attn_mask=bias).detach(), expected, atol=1e-10, rtol=0)
    assert not torch.allclose(block(x).detach(), expected)


def test_a_bool_mask_keeps_what_is_true_and_adds_to_the_causal_mask() -> None:
    block = TransformerBlock(8, 2, 16, is_causal=True).double()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    keep = torch.ones(5, 5, dtype=torch.bool)
    keep[:, 0] = False  # nobody may look at token 0 ...
    keep[0, 0] = True  # ... except token 0 itself
    _, weights = block(x, attn_mask=keep, return_weights=True)
    assert (weights[..., 1:, 0] == 0).all() and (weights.triu(1) == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, 5, dtype=torch.float64))


def test_self_attention_without_positions_is_permutation_equivariant() -> None:
    torch.manual_seed(0)
    x, perm = torch.randn(2, 6, 8), torch.randperm(6)
    plain = TransformerBlock(8, 2, 16).eval()
    torch.testing.assert_close(plain(x[:, perm]), plain(x)[:, perm], atol=1e-6, rtol=0)
    for block in (
        TransformerBlock(8, 2, 16, is_causal=True),  # the mask breaks it ...
        TransformerBlock(8, 2, 16, rotary=RotaryEmbedding(4)),  # ... and so do rotations
    ):
        block.load_state_dict(plain.state_dict())
        assert not torch.allclose(block.eval()(x[:, perm]), block(x)[:, perm], atol=1e-3)


def test_an_attention_only_block_has_no_feed_forward_network() -> None:
    torch.manual_seed(0)
    block = TransformerBlock(8, 2, 16, mlp=False).eval()
    assert not hasattr(block, "linear1")
    x = torch.randn(2, 4, 8)
    torch.testing.assert_close(block(x), x + block.attn(block.norm1(x))[0])


# --- today's variants: RMSNorm, SwiGLU, parallel, QK-norm, no biases ------------------------------


def _llama_reference(block: TransformerBlock, x: torch.Tensor) -> torch.Tensor:
    """A Llama block in plain tensor ops, with the block's weights (Meta's llama/model.py).

    RMSNorm before each sublayer, complex-number RoPE on neighbouring pairs, causal attention,
    SwiGLU w2(silu(w1 x) * w3 x), no biases.
    """
    b, t, d = x.shape
    h, d_h, eps = block.num_heads, block.d_h, block.norm1.eps

    def rms_norm(v: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps) * weight

    def rope(v: torch.Tensor) -> torch.Tensor:  # (b, t, h, d_h)
        freqs = 1.0 / 10000.0 ** (torch.arange(0, d_h, 2, dtype=torch.float64) / d_h)
        angles = torch.outer(torch.arange(t, dtype=torch.float64), freqs)  # (t, d_h / 2)
        pairs = torch.view_as_complex(v.reshape(b, t, h, d_h // 2, 2).contiguous())
        rotated = pairs * torch.polar(torch.ones_like(angles), angles)[None, :, None]
        return torch.view_as_real(rotated).flatten(3)

    w_q, w_k, w_v = block.attn.qkv.weight.split(d)  # (d, d) each, as nn.Linear stores them
    normed = rms_norm(x, block.norm1.weight)
    q = rope((normed @ w_q.T).view(b, t, h, d_h)).transpose(1, 2)  # (b, h, t, d_h)
    k = rope((normed @ w_k.T).view(b, t, h, d_h)).transpose(1, 2)
    v = (normed @ w_v.T).view(b, t, h, d_h).transpose(1, 2)
    scores = q @ k.transpose(2, 3) / math.sqrt(d_h)
    scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    context = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, t, d)
    x = x + context @ block.attn.out_proj.weight.T
    normed = rms_norm(x, block.norm2.weight)
    gated = F.silu(normed @ block.linear1.weight.T) * (normed @ block.linear3.weight.T)
    return x + gated @ block.linear2.weight.T


def _llama_block(d: int = 16, h: int = 2, d_ff: int = 40) -> TransformerBlock:
    rotary = RotaryEmbedding(d // h, interleaved=True)  # Meta's pairing: (2i, 2i + 1)
    block = TransformerBlock(d, h, d_ff, is_causal=True, activation="swiglu", rotary=rotary,
                             norm="rms", bias=False)
    return randomize(block.double())


def test_llama_style_block_equals_llama_written_out_in_float64() -> None:
    block = _llama_block()
    assert all(not name.endswith("bias") for name, _ in block.named_parameters())
    x = torch.randn(3, 7, 16, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(block(x), _llama_reference(block, x), atol=1e-12, rtol=0)


def test_swiglu_feed_forward_is_silu_gate_times_linear() -> None:
    block = randomize(TransformerBlock(8, 2, 12, activation="swiglu").double())
    x = torch.randn(2, 3, 8, dtype=torch.float64)
    gated = F.silu(block.linear1(x)) * block.linear3(x)
    torch.testing.assert_close(block.feed_forward(x), block.linear2(gated), atol=1e-13, rtol=0)
    swapped = F.silu(block.linear3(x)) * block.linear1(x)  # w1 and w3 are not interchangeable
    assert not torch.allclose(block.feed_forward(x), block.linear2(swapped), atol=1e-3)


def test_swiglu_width_follows_llama_rounding() -> None:
    assert swiglu_width(4096) == 11008  # int(2 * 16384 / 3) = 10922, up to a multiple of 256
    assert swiglu_width(8192, multiple_of=4096, ffn_dim_multiplier=1.3) == 28672
    assert swiglu_width(32, multiple_of=1) == 85  # int(256 / 3)
    d = 4096
    gelu_weights, swiglu_weights = 2 * d * 4 * d, 3 * d * swiglu_width(d)
    assert abs(swiglu_weights / gelu_weights - 1) < 0.01  # the 2/3 keeps the count


@pytest.mark.parametrize("norm", ["layer", "rms"])
def test_parallel_block_adds_both_sublayers_of_one_normalized_input(norm: str) -> None:
    block = randomize(TransformerBlock(8, 2, 16, is_causal=True, norm=norm, parallel=True).double())
    assert not hasattr(block, "norm2")
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    normed = block.norm1(x)
    expected = x + block.attn(normed)[0] + block.feed_forward(normed)
    torch.testing.assert_close(block(x), expected, atol=1e-13, rtol=0)
    sequential = TransformerBlock(8, 2, 16, is_causal=True, norm=norm).double()
    sequential.load_state_dict(block.state_dict(), strict=False)  # all but norm2
    assert not torch.allclose(sequential(x), block(x), atol=1e-3)


@pytest.mark.parametrize("norm", ["layer", "rms"])
def test_qk_norm_normalizes_each_head_s_queries_and_keys(norm: str) -> None:
    block = randomize(TransformerBlock(8, 2, 16, is_causal=True, norm=norm, qk_norm=True).double())
    attn = block.attn
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    q, k, _ = attn.qkv(x).split(8, dim=2)
    q = attn.q_norm(q.view(2, 5, 2, 4).transpose(1, 2))  # (b, h, t, d_h), one gain for all heads
    k = attn.k_norm(k.view(2, 5, 2, 4).transpose(1, 2))
    scores = (q @ k.transpose(2, 3) / 2.0).masked_fill(torch.ones(5, 5).triu(1).bool(), -torch.inf)
    _, weights = attn(x)
    torch.testing.assert_close(weights, torch.softmax(scores, dim=-1), atol=1e-13, rtol=0)
    assert attn.q_norm.weight.shape == (4,)


def test_bias_false_leaves_no_bias_anywhere() -> None:
    for norm in ("layer", "rms"):
        block = TransformerBlock(8, 2, 16, norm=norm, qk_norm=True, activation="swiglu",
                                 bias=False)
        assert [name for name, _ in block.named_parameters() if "bias" in name] == []
    with_bias = TransformerBlock(8, 2, 16, qk_norm=True)
    assert {"attn.qkv.bias", "attn.q_norm.bias", "norm1.bias"} <= dict(
        with_bias.named_parameters()).keys()


def test_the_attention_sublayer_can_be_replaced() -> None:
    """Any module called as attn(x, attn_mask, cache) -> (output, weights) can take attn's place."""

    class Silent(nn.Module):
        def forward(self, x: torch.Tensor, attn_mask=None, cache=None) -> tuple:
            return torch.zeros_like(x), None

    block = TransformerBlock(8, 2, 16, is_causal=True).eval()
    block.attn = Silent()
    x = torch.randn(2, 4, 8)
    torch.testing.assert_close(block(x), x + block.feed_forward(block.norm2(x)))
    assert block(x, return_weights=True)[1] is None


def test_defaults_build_the_same_block_and_random_draws_as_before_the_variants() -> None:
    """The default block's parameters in their old order (the tiny model's seed gives its run)."""
    names = [name for name, _ in TransformerBlock(8, 2, 16).named_parameters()]
    assert names == [
        "attn.qkv.weight", "attn.qkv.bias", "attn.out_proj.weight", "attn.out_proj.bias",
        "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias",
        "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias",
    ]
    torch.manual_seed(123)
    block = TransformerBlock(8, 2, 16)
    torch.manual_seed(123)
    qkv, out_proj = nn.Linear(8, 24), nn.Linear(8, 8)
    nn.LayerNorm(8), nn.LayerNorm(8)
    linear1, linear2 = nn.Linear(8, 16), nn.Linear(16, 8)
    for ours, theirs in ((block.attn.qkv, qkv), (block.attn.out_proj, out_proj),
                         (block.linear1, linear1), (block.linear2, linear2)):
        assert torch.equal(ours.weight, theirs.weight) and torch.equal(ours.bias, theirs.bias)


def test_swiglu_width_truncates_the_multiplied_width_as_llama_does() -> None:
    """int(multiplier · width), not round: 1.3 · int(2 · 384 / 3) = 1.3 · 256 = 332.8 -> 332."""
    assert swiglu_width(96, multiple_of=1, ffn_dim_multiplier=1.3) == 332
    assert swiglu_width(96, multiple_of=4, ffn_dim_multiplier=1.3) == 332
    # a multiplier so small that the width truncates to 0 keeps one multiple, not a width of 0
    assert swiglu_width(1, multiple_of=1, ffn_dim_multiplier=0.1) == 1


def test_from_torch_carries_the_layer_norm_eps() -> None:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, layer_norm_eps=0.5,
                                       dtype=torch.float64).eval()
    layer.norm2.eps = 0.25  # each norm's own, which a state dict does not hold
    block = TransformerBlock.from_torch(layer)
    assert (block.norm1.eps, block.norm2.eps) == (0.5, 0.25)
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(block(x), layer(x), atol=1e-12, rtol=0)


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    @pytest.mark.parametrize(
        ("make", "message"),
        [
            (lambda: TransformerBlock(10, 4, 16),
             r"d_model must be divisible by num_heads.*got d_model=10 and num_heads=4"),
            (lambda: TransformerBlock(8, 2, 0), r"d_ff must be at least 1, got 0"),
            (lambda: TransformerBlock(8, 2, 16, dropout=1.0), r"dropout must be in \[0, 1\).*got 1\.0"),
            (
                lambda: TransformerBlock(8, 2, 16, activation="tanh"),
                r"one of \('gelu', 'relu', 'swiglu'\), got 'tanh'",
            ),
            (lambda: TransformerBlock(8, 2, 16, rotary=RotaryEmbedding(8)), r"d_h=4, got d_h=8"),
            (lambda: TransformerBlock(8, 2, 16, norm_eps=0.0), r"eps must be a finite number > 0, got 0\.0"),
            (lambda: TransformerBlock(8, 2, 16, norm="batch"), r"\('layer', 'rms'\), got 'batch'"),
            (
                lambda: TransformerBlock(8, 2, 16, norm_first=False, parallel=True),
                r"parallel=True needs a pre-norm block .* got norm_first=False, mlp=True",
            ),
            (
                lambda: TransformerBlock(8, 2, 16, mlp=False, parallel=True),
                r"got norm_first=True, mlp=False",
            ),
            (lambda: swiglu_width(0), r"d_model must be at least 1, got 0"),
            (lambda: swiglu_width(64, ffn_dim_multiplier=0), r"ffn_dim_multiplier must be a finite number.*got 0"),
            (lambda: swiglu_width(64, ffn_dim_multiplier=math.inf), r"finite number > 0, got inf"),
            (lambda: TransformerBlock(8, 2, 16)(torch.zeros(2, 4, 6)), r"d_model=8, got 6"),
            (lambda: TransformerBlock.from_torch(nn.Linear(2, 2)), r"TransformerEncoderLayer, got"),
            (
                lambda: TransformerBlock.from_torch(nn.TransformerEncoderLayer(8, 2, 16)),
                r"batch_first=True .* got False",
            ),
            (
                lambda: TransformerBlock.from_torch(
                    nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, bias=False)
                ),
                r"must have biases.*got bias=False",
            ),
            (
                lambda: TransformerBlock.from_torch(
                    nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, activation=torch.tanh)
                ),
                r"gelu or relu, got",
            ),
            (
                lambda: TransformerBlock.from_torch(
                    nn.TransformerEncoderLayer(
                        8, 2, 16, batch_first=True, activation=nn.GELU(approximate="tanh")
                    )
                ),
                r"GELU must be exact \(approximate='none'\), got approximate='tanh'",
            ),
        ],
    )
    def test_block_sizes_options_and_torch_layers_must_be_valid(self, make: object, message: str) -> None:
        with pytest.raises(ValueError, match=message):
            make()  # type: ignore[operator]

    @pytest.mark.parametrize("value", NON_BOOLS)
    @pytest.mark.parametrize(
        ("flag", "call"),
        [
            *[(flag, lambda value, flag=flag: TransformerBlock(8, 2, 16, **{flag: value}))
              for flag in ("norm_first", "is_causal", "mlp", "parallel", "qk_norm", "bias", "output_gate")],
            ("return_weights", lambda value: TransformerBlock(8, 2, 16)(torch.randn(1, 3, 8), return_weights=value)),
            ("is_causal", lambda value: TransformerBlock.from_torch(
                nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), is_causal=value)),
        ],
    )
    def test_flags_must_be_bools(self, flag: str, call, value: object) -> None:
        with refuses_non_bool(flag, value):
            call(value)
