"""The Transformer block equals PyTorch's; the tiny model, its training and its head scores."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attention import (
    BlockAttention,
    KVCache,
    RMSNorm,
    RotaryEmbedding,
    TinyTransformer,
    TransformerBlock,
    alibi_bias,
    head_scores,
    induction_data,
    kv_cache_bytes,
    lookback_data,
    next_token_accuracy,
    swiglu_width,
    train_lm,
)

POSITIONS = [None, "learned", "sinusoidal", "rope", "alibi"]


def _torch_layer(norm_first: bool, activation: str, dropout: float = 0.0) -> nn.Module:
    torch.manual_seed(0)
    return nn.TransformerEncoderLayer(
        8, 2, 16, dropout=dropout, activation=activation, batch_first=True,
        norm_first=norm_first, dtype=torch.float64,
    )


def _causal_src_mask(t: int) -> torch.Tensor:
    return nn.Transformer.generate_square_subsequent_mask(t, dtype=torch.float64)


# --- the block against torch.nn.TransformerEncoderLayer ----------------------------------------


@pytest.mark.parametrize("activation", ["gelu", "relu"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("norm_first", [True, False])
def test_block_equals_torch_encoder_layer(norm_first: bool, causal: bool, activation: str) -> None:
    layer = _torch_layer(norm_first, activation, dropout=0.1).eval()
    block = TransformerBlock.from_torch(layer, causal=causal)
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
    block = TransformerBlock.from_torch(layer, causal=causal)
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
    block = TransformerBlock.from_torch(layer, causal=True)
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
    block = TransformerBlock.from_torch(layer, causal=True)
    x = torch.randn(3, 5, 8, dtype=torch.float64)
    bias = alibi_bias(2, 5, 5).double() * 8  # (h, t, t), steep enough to matter
    torch_mask = (bias + _causal_src_mask(5)).repeat(3, 1, 1)  # (b h, t, t)
    expected = layer(x, src_mask=torch_mask).detach()
    torch.testing.assert_close(block(x, attn_mask=bias).detach(), expected, atol=1e-10, rtol=0)
    assert not torch.allclose(block(x).detach(), expected)


def test_a_bool_mask_keeps_what_is_true_and_adds_to_the_causal_mask() -> None:
    block = TransformerBlock(8, 2, 16, causal=True).double()
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
        TransformerBlock(8, 2, 16, causal=True),  # the mask breaks it ...
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


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: TransformerBlock(10, 4, 16), r"d_model=10 and num_heads=4"),
        (lambda: TransformerBlock(8, 2, 0), r"d_ff must be at least 1, got 0"),
        (lambda: TransformerBlock(8, 2, 16, dropout=1.0), r"dropout must be in \[0, 1\)"),
        (
            lambda: TransformerBlock(8, 2, 16, activation="tanh"),
            r"one of \('gelu', 'relu', 'swiglu'\), got 'tanh'",
        ),
        (lambda: TransformerBlock(8, 2, 16, rotary=RotaryEmbedding(8)), r"d_h=4, got d_h=8"),
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
        (lambda: swiglu_width(64, ffn_dim_multiplier=0), r"ffn_dim_multiplier must be a number"),
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
            r"must have biases",
        ),
        (
            lambda: TransformerBlock.from_torch(
                nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, activation=torch.tanh)
            ),
            r"gelu or relu, got",
        ),
    ],
)
def test_block_bad_input(make: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()  # type: ignore[operator]


# --- today's variants: RMSNorm, SwiGLU, parallel, QK-norm, no biases ------------------------------


def _randomize(module: nn.Module) -> nn.Module:
    """Every parameter drawn anew, gains and biases included: nothing left at its initial value."""
    torch.manual_seed(1)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.normal_(0.0, 0.5)
    return module


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
    block = TransformerBlock(d, h, d_ff, causal=True, activation="swiglu", rotary=rotary,
                             norm="rms", bias=False)
    return _randomize(block.double())


def test_llama_style_block_equals_llama_written_out_in_float64() -> None:
    block = _llama_block()
    assert all(not name.endswith("bias") for name, _ in block.named_parameters())
    x = torch.randn(3, 7, 16, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(block(x), _llama_reference(block, x), atol=1e-12, rtol=0)


def test_swiglu_feed_forward_is_silu_gate_times_linear() -> None:
    block = _randomize(TransformerBlock(8, 2, 12, activation="swiglu").double())
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
    block = _randomize(TransformerBlock(8, 2, 16, causal=True, norm=norm, parallel=True).double())
    assert not hasattr(block, "norm2")
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    normed = block.norm1(x)
    expected = x + block.attn(normed)[0] + block.feed_forward(normed)
    torch.testing.assert_close(block(x), expected, atol=1e-13, rtol=0)
    sequential = TransformerBlock(8, 2, 16, causal=True, norm=norm).double()
    sequential.load_state_dict(block.state_dict(), strict=False)  # all but norm2
    assert not torch.allclose(sequential(x), block(x), atol=1e-3)


@pytest.mark.parametrize("norm", ["layer", "rms"])
def test_qk_norm_normalizes_each_head_s_queries_and_keys(norm: str) -> None:
    block = _randomize(TransformerBlock(8, 2, 16, causal=True, norm=norm, qk_norm=True).double())
    attn = block.attn
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    q, k, _ = attn.qkv(x).split(8, dim=2)
    q = attn.q_norm(q.view(2, 5, 2, 4).transpose(1, 2))  # (b, h, t, d_h), one gain for all heads
    k = attn.k_norm(k.view(2, 5, 2, 4).transpose(1, 2))
    scores = (q @ k.transpose(2, 3) / 2.0).masked_fill(torch.ones(5, 5).triu(1).bool(), -torch.inf)
    _, weights = attn(x)
    torch.testing.assert_close(weights, torch.softmax(scores, dim=-1), atol=1e-13, rtol=0)
    assert attn.q_norm.weight.shape == (4,)


def test_qk_norm_bounds_the_scores_however_large_the_weights() -> None:
    """|q̂ · k̂| <= max|γ_q| max|γ_k| d_h for RMS-normalized rows (exercise 9.7), so with gains
    of 1 a scaled score is at most d_h / sqrt(d_h) = 2 here."""
    torch.manual_seed(0)
    x = torch.randn(1, 6, 8, dtype=torch.float64)
    for qk_norm in (False, True):
        attn = BlockAttention(8, 2, qk_norm="rms" if qk_norm else None, bias=False).double()
        with torch.no_grad():
            attn.qkv.weight.mul_(1000.0)
        q, k, _ = attn.qkv(x).split(8, dim=2)
        if qk_norm:
            q, k = attn.q_norm(q.view(1, 6, 2, 4)), attn.k_norm(k.view(1, 6, 2, 4))
        scores = torch.einsum("bihd,bjhd->bhij", q.view(1, 6, 2, 4), k.view(1, 6, 2, 4)) / 2.0
        assert (scores.abs().max() <= 4 / 2.0 + 1e-9) == qk_norm


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

    block = TransformerBlock(8, 2, 16, causal=True).eval()
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


# --- the tiny language model ------------------------------------------------------------------


@pytest.mark.parametrize("positions", POSITIONS)
def test_tiny_transformer_is_causal(positions: str | None) -> None:
    """Changing the tokens after position 3 leaves the logits up to position 3 unchanged."""
    torch.manual_seed(0)
    model = TinyTransformer(11, 8, 2, 2, context_length=8, positions=positions).eval()
    idx = torch.randint(11, (2, 8))
    other = idx.clone()
    other[:, 4:] = (other[:, 4:] + 1) % 11
    logits, weights = model(idx, return_weights=True)
    assert logits.shape == (2, 8, 11) and [w.shape for w in weights] == [(2, 2, 8, 8)] * 2
    torch.testing.assert_close(model(other)[:, :4], logits[:, :4])
    assert not torch.allclose(model(other)[:, 4:], logits[:, 4:])


@pytest.mark.parametrize("positions", POSITIONS)
def test_only_learned_positions_stop_at_the_context_length(positions: str | None) -> None:
    model = TinyTransformer(11, 8, 2, 1, context_length=4, positions=positions)
    idx = torch.zeros(1, 6, dtype=torch.long)
    if positions == "learned":
        with pytest.raises(ValueError, match=r"at most context_length=4, got 6"):
            model(idx)
    else:
        assert model(idx).shape == (1, 6, 11)


def test_positions_tell_tokens_apart_only_when_there_are_some() -> None:
    """With no positions and the same token everywhere, every position gets the same logits."""
    idx = torch.full((1, 5), 3)
    schemes = [(None, True), ("learned", False), ("sinusoidal", False), ("rope", True)]
    for positions, same in [*schemes, ("alibi", True)]:  # rope, alibi: where to look, not what
        torch.manual_seed(0)
        logits = TinyTransformer(11, 8, 2, 1, 5, positions=positions).eval()(idx)
        assert torch.allclose(logits, logits[:, :1].expand_as(logits), atol=1e-6) == same


@pytest.mark.parametrize("positions", POSITIONS[1:])
def test_each_scheme_changes_the_logits(positions: str) -> None:
    """The same weights without positions give other logits: the scheme is used."""
    torch.manual_seed(0)
    model = TinyTransformer(11, 8, 2, 2, 6, positions=positions).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_()  # scores far from 0, so that attention is far from uniform
    plain = TinyTransformer(11, 8, 2, 2, 6, positions=None).eval()
    plain.load_state_dict(model.state_dict(), strict=False)  # all but a learned table
    idx = torch.randint(11, (2, 6))
    assert not torch.allclose(model(idx), plain(idx), atol=1e-4)


def test_train_lm_is_deterministic_and_learns_to_look_back() -> None:
    def run(seed: int = 0) -> tuple[list[float], TinyTransformer]:
        torch.manual_seed(0)
        model = TinyTransformer(8, 16, 2, 1, context_length=8, positions="rope", mlp=False)
        losses = train_lm(model, lambda g: lookback_data(16, 8, 8, g), 60, lr=1e-2, seed=seed)
        return losses, model

    losses, model = run()
    assert losses == run()[0] and len(losses) == 60 and not model.training
    assert run(seed=1)[0][0] != losses[0]  # the seed draws the batches
    assert losses[-1] < 0.3 * losses[0]
    test = lookback_data(64, 8, 8, torch.Generator().manual_seed(1))
    assert next_token_accuracy(model, *test) > 0.9


def test_induction_data_repeats_a_segment_and_scores_only_the_repeat() -> None:
    inputs, targets = induction_data(50, 12, 10, torch.Generator().manual_seed(0), 3, 6)
    assert inputs.shape == targets.shape == (50, 12)
    periods = set()
    for row, target in zip(inputs.tolist(), targets.tolist(), strict=True):
        period = row.index(row[0], 1)  # where the segment starts again
        periods.add(period)
        assert len(set(row[:period])) == period and 3 <= period <= 6
        assert all(row[i] == row[i % period] for i in range(12))
        assert target[:period] == [-100] * period
        assert target[period:] == [row[(i + 1) % period] for i in range(period, 12)]
    assert periods == {3, 4, 5, 6}


def test_lookback_data_targets_are_the_earlier_tokens() -> None:
    inputs, targets = lookback_data(4, 7, 5, torch.Generator().manual_seed(0), offset=2)
    assert (targets[:, :2] == -100).all() and (targets[:, 2:] == inputs[:, :-2]).all()


class _FixedAttention(nn.Module):
    """A stand-in model whose single layer attends with a given pattern (t, t)."""

    def __init__(self, pattern: torch.Tensor) -> None:
        super().__init__()
        self.pattern = pattern

    def forward(self, idx: torch.Tensor, return_weights: bool = False) -> object:
        b, t = idx.shape
        return None, [self.pattern.expand(b, 1, t, t)]


def test_head_scores_recognise_previous_token_and_induction_patterns() -> None:
    tokens = torch.tensor([[5, 1, 7, 2, 5, 1, 7, 2]])  # period 4
    previous = torch.eye(8).roll(-1, dims=1).tril()  # query i on key i - 1 (query 0 on itself)
    previous[0, 0] = 1.0
    induction = torch.zeros(8, 8)
    for i in range(4, 8):
        induction[i, i - 3] = 1.0  # token i occurred at i - 4: look at what came next
    induction[:4] = previous[:4]
    prev_scores, ind_scores = head_scores(_FixedAttention(previous), tokens)
    assert prev_scores.tolist() == [[1.0]] and ind_scores.tolist() == [[0.0]]
    prev_scores, ind_scores = head_scores(_FixedAttention(induction), tokens)
    assert ind_scores.tolist() == [[1.0]] and prev_scores.item() == pytest.approx(3 / 7)
    with pytest.raises(ValueError, match=r"must repeat a token"):
        head_scores(_FixedAttention(previous), torch.arange(8)[None])


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: TinyTransformer(11, 8, 2, 1, 4, positions="absolute"), r"got 'absolute'"),
        (lambda: TinyTransformer(11, 8, 3, 1, 4), r"d_model=8 and num_heads=3"),
        (lambda: TinyTransformer(11, 8, 2, 1, 4)(torch.zeros(1, 3)), r"idx must hold integer"),
        (lambda: TinyTransformer(11, 8, 2, 1, 4)(torch.tensor([[1, 11]])), r"from 1 to 11"),
        (lambda: train_lm(nn.Linear(2, 2), lambda g: None, steps=0), r"steps must be at least 1"),
        (lambda: train_lm(nn.Linear(2, 2), lambda g: None, 5, lr=0), r"lr must be .* got 0"),
        (lambda: induction_data(4, 12, 5, max_period=6), r"max_period=6, vocab_size=5"),
        (lambda: induction_data(4, 12, 16, min_period=5, max_period=4), r"min_period=5"),
        (lambda: lookback_data(4, 3, 5, offset=3), r"offset must be less than seq_len=3, got 3"),
        (
            lambda: next_token_accuracy(
                TinyTransformer(5, 8, 2, 1, 4), torch.zeros(1, 3, dtype=torch.long),
                torch.full((1, 3), -100),
            ),
            r"with 0 scored",
        ),
    ],
)
def test_model_and_training_bad_input(make: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()  # type: ignore[operator]


# --- decoding with a KV cache --------------------------------------------------------------------


def _decoder(positions: str | None, dtype: torch.dtype = torch.float64) -> TinyTransformer:
    torch.manual_seed(0)
    model = TinyTransformer(11, 8, 2, 2, context_length=9, positions=positions).to(dtype).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_()  # far from uniform attention, so that positions matter
    return model


@pytest.mark.parametrize("chunks", [(3, 1, 1, 1, 1, 1, 1), (4, 5)])
@pytest.mark.parametrize("positions", POSITIONS)
def test_cached_forward_equals_the_full_pass(positions: str | None, chunks: tuple) -> None:
    model = _decoder(positions)
    idx = torch.randint(11, (2, 9))
    full, full_weights = model(idx, return_weights=True)
    cache = model.new_cache(2, 9)
    outputs = []
    for part in idx.split(chunks, dim=1):
        logits, weights = model(part, return_weights=True, cache=cache)
        outputs.append(logits)
    torch.testing.assert_close(torch.cat(outputs, dim=1), full, atol=1e-10, rtol=0)
    t = chunks[-1]  # the last chunk's weights are the last t rows of the full ones: (b, h, t, 9)
    for ours, expected in zip(weights, full_weights):
        torch.testing.assert_close(ours, expected[:, :, -t:], atol=1e-10, rtol=0)
    assert cache.length == 9


@pytest.mark.parametrize("positions", POSITIONS)
def test_generate_gives_the_same_tokens_with_and_without_the_cache(positions: str | None) -> None:
    model = _decoder(positions, torch.float32)
    prompt = torch.randint(11, (3, 2))
    cached = model.generate(prompt, 7)
    assert cached.shape == (3, 9) and torch.equal(cached[:, :2], prompt)
    assert torch.equal(cached, model.generate(prompt, 7, use_cache=False))
    assert torch.equal(model.generate(prompt, 0), prompt)
    assert len(cached.unique()) > 3  # not one token repeated


VARIANTS = [
    {"norm": "rms", "activation": "swiglu", "bias": False},  # Llama's block
    {"parallel": True, "qk_norm": True, "tie_weights": True},
    {"norm": "rms", "qk_norm": True, "mlp": False},
]


@pytest.mark.parametrize("options", VARIANTS)
def test_cached_decoding_equals_the_full_pass_for_today_s_blocks(options: dict) -> None:
    torch.manual_seed(0)
    model = TinyTransformer(11, 8, 2, 2, context_length=9, positions="rope", **options)
    _randomize(model.double()).eval()
    idx = torch.randint(11, (2, 9))
    cache = model.new_cache(2, 9)
    parts = [model(part, cache=cache) for part in idx.split((4, 1, 1, 3), dim=1)]
    torch.testing.assert_close(torch.cat(parts, dim=1), model(idx), atol=1e-10, rtol=0)


def test_tied_weights_share_one_matrix_and_its_gradient() -> None:
    torch.manual_seed(0)
    untied = TinyTransformer(11, 8, 2, 1, context_length=4, positions=None)
    tied = TinyTransformer(11, 8, 2, 1, context_length=4, positions=None, tie_weights=True)
    assert tied.lm_head.weight is tied.tok_emb.weight
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(untied) - count(tied) == 11 * 8
    idx = torch.tensor([[1, 2, 3]])
    logits = tied(idx)
    final = tied.final_norm(tied.blocks[0](tied.tok_emb(idx)))
    torch.testing.assert_close(logits, final @ tied.tok_emb.weight.T)
    logits[0, -1, 5].backward()  # the logit of token 5 reaches its row through both uses
    assert tied.tok_emb.weight.grad[5].abs().sum() > 0 and tied.lm_head.weight.grad is not None


def test_tiny_model_options_reach_every_block() -> None:
    model = TinyTransformer(11, 32, 2, 2, context_length=4, norm="rms", activation="swiglu",
                            parallel=True, qk_norm=True, bias=False)
    assert isinstance(model.final_norm, RMSNorm)
    for block in model.blocks:
        assert block.linear1.out_features == 85 and block.parallel  # int(2 * 4 * 32 / 3)
        assert isinstance(block.attn.q_norm, RMSNorm) and block.attn.qkv.bias is None
    assert TinyTransformer(11, 32, 2, 1, 4).blocks[0].linear1.out_features == 128  # 4 d


def _cache(batch_size: int, max_tokens: int) -> object:
    return _decoder(None).new_cache(batch_size, max_tokens)


def test_model_cache_memory_is_the_formula() -> None:
    model = TinyTransformer(11, 8, 2, 3, context_length=9)
    cache = model.new_cache(2, 7)
    assert all(isinstance(layer, KVCache) for layer in cache.layers)
    assert cache.nbytes == kv_cache_bytes(2, 7, 3, 2, 4, 4) == 2 * 2 * 7 * 3 * 2 * 4 * 4
    model(torch.zeros(2, 3, dtype=torch.long), cache=cache)
    cache.reset()
    assert cache.length == 0


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: _decoder("learned").generate(torch.zeros(1, 3, dtype=torch.long), 8),
         r"context_length=9 with learned positions, got 3 \+ 8 - 1 = 10"),
        (lambda: _decoder("learned").new_cache(1, 10), r"max_tokens must be at most context_len"),
        (lambda: _decoder(None).generate(torch.zeros(1, 3, dtype=torch.long), -1),
         r"max_new_tokens must be an integer >= 0, got -1"),
        (lambda: _decoder(None).generate(torch.zeros(1, 0, dtype=torch.long), 2),
         r"at least one token per sequence, got shape \(1, 0\)"),
        (lambda: _decoder(None)(torch.zeros(1, 4, dtype=torch.long), cache=_cache(1, 3)),
         r"max_tokens=3 tokens, got 4"),
        (lambda: _decoder(None)(torch.zeros(2, 1, dtype=torch.long), cache=_cache(1, 3)),
         r"\(1, 2, t, 4\), got \(2, 2, 1, 4\)"),
        (lambda: _decoder(None)(torch.zeros(1, 1, dtype=torch.long), cache=KVCache(1, 2, 3, 4)),
         r"cache must be a ModelKVCache of 2 layers"),
        (lambda: TransformerBlock(8, 2, 16)(torch.randn(1, 2, 8), cache=KVCache(1, 2, 3, 4)),
         r"a cache needs a causal block \(causal=True\), got causal=False"),
    ],
)
def test_cache_bad_input(make: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()  # type: ignore[operator]
