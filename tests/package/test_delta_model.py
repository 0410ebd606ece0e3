"""attention.delta_model: a TinyTransformer whose attention sublayers run the rules of
attention.delta, with the weights W (Z = W V) returned as attention weights are."""

import pytest
import torch
import torch.nn.functional as F
from _inputs import check_half_precision_copy

from attention import BlockAttention, TinyTransformer
from attention.delta import gated_delta_rule
from attention.delta_model import RECURRENT_KINDS, RecurrentBlockAttention, use_recurrent_attention


def _model() -> TinyTransformer:
    torch.manual_seed(0)
    return TinyTransformer(vocab_size=16, d_model=16, num_heads=2, num_layers=2, context_length=12,
                           positions="rope", mlp=False).double()


@pytest.mark.parametrize("kind", RECURRENT_KINDS)
def test_every_kind_gives_the_logits_shape_on_the_meta_device(kind):
    """A model built on meta (to size it, or to load it with to_empty) runs without values: the
    NaN checks of the sublayer and of the rule read them (Tensor.item() on meta tensors)."""
    model = TinyTransformer(16, 16, 2, 2, 12, positions="rope", mlp=False, device="meta")
    use_recurrent_attention(model, kind)
    logits = model(torch.zeros(1, 5, dtype=torch.long, device="meta"))
    assert logits.shape == (1, 5, 16) and logits.is_meta


@pytest.mark.parametrize("kind", RECURRENT_KINDS)
def test_every_kind_runs_and_returns_causal_weights(kind):
    model = use_recurrent_attention(_model(), kind)
    ids = torch.randint(16, (2, 12), generator=torch.Generator().manual_seed(1))
    logits, weights = model(ids, return_weights=True)
    assert logits.shape == (2, 12, 16) and len(weights) == 2
    for w in weights:  # (b, h, t, t), nothing above the diagonal
        assert w.shape == (2, 2, 12, 12) and torch.all(w.triu(1) == 0)


def test_the_gated_delta_sublayer_is_the_rule_on_its_convolved_inputs():
    model = use_recurrent_attention(_model(), "gated_delta", layers=[1])
    attn = model.blocks[1].attn
    assert isinstance(attn, RecurrentBlockAttention) and not isinstance(
        model.blocks[0].attn, RecurrentBlockAttention)  # a hybrid: layer 0 keeps softmax
    x = torch.randn(2, 7, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        out, _ = attn(x)
        qkv = F.silu(attn.conv(F.pad(attn.qkv(x).transpose(1, 2), (3, 0)))).transpose(1, 2)
        q, k, v = (y.view(2, 7, 2, 8).transpose(1, 2) for y in qkv.split(16, dim=2))
        beta = torch.sigmoid(attn.beta_proj(x)).transpose(1, 2)
        g = (-attn.A_log.exp() * F.softplus(attn.g_proj(x) + attn.dt_bias)).transpose(1, 2)
        rule = gated_delta_rule(F.normalize(q, dim=-1), F.normalize(k, dim=-1), v, g, beta)
        expected = attn.out_proj(rule.transpose(1, 2).reshape(2, 7, 16))
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", RECURRENT_KINDS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_half_precision_model_swaps_its_attention_and_stays_in_its_dtype(kind, dtype):
    # the rule's weights are computed in float32: the weighted sum too, rounded once
    model = use_recurrent_attention(_model(), kind)
    ids = torch.randint(16, (2, 12), generator=torch.Generator().manual_seed(1))
    check_half_precision_copy(model, ids, dtype)


@pytest.mark.parametrize("conv_size", [4, None])
def test_no_tokens_give_an_empty_output_as_softmax_attention_does(conv_size):
    # torch's convolution refused the w_conv - 1 zeros of padding alone (shorter than its kernel)
    model = use_recurrent_attention(_model(), "gated_delta", conv_size=conv_size)
    logits, weights = model(torch.zeros(2, 0, dtype=torch.long), return_weights=True)
    assert logits.shape == (2, 0, 16) and [w.shape for w in weights] == [(2, 2, 0, 0)] * 2


def test_a_hybrid_of_two_rules_is_built_one_rule_at_a_time():
    # the second call was refused: "model must have blocks whose attn is a BlockAttention, got
    # TinyTransformer", for block 0, which it was not asked to change
    model = use_recurrent_attention(_model(), "delta", layers=[0])
    use_recurrent_attention(model, "gated_delta", layers=[1])
    assert [block.attn.kind for block in model.blocks] == ["delta", "gated_delta"]


class TestBadInput:
    # qk_norm is a bool that takes the model's norm ("rms" was truth-tested: a LayerNorm q/k norm)
    @pytest.mark.parametrize("options", [{"output_gate": True}, {"qk_norm": True, "norm": "rms"}])
    def test_a_gated_or_qk_normed_sublayer_is_refused_not_dropped(self, options):
        model = TinyTransformer(16, 16, 2, 2, 8, positions="rope", mlp=False, **options)
        with pytest.raises(ValueError, match=r"without an output gate or QK-norm .*got output_gate="):
            use_recurrent_attention(model, "delta", layers=[0])

    def test_a_refused_layer_leaves_every_layer_as_it_was(self):
        model = _model()
        model.blocks[1].attn = BlockAttention(16, 2, is_causal=True, output_gate=True)
        with pytest.raises(ValueError, match=r"without an output gate or QK-norm"):
            use_recurrent_attention(model, "delta")
        assert [type(block.attn) for block in model.blocks] == [BlockAttention, BlockAttention]

    def test_kind_must_be_known_and_layers_must_exist(self):
        with pytest.raises(ValueError, match=r"kind must be one of .*got 'gla'"):
            use_recurrent_attention(_model(), "gla")
        with pytest.raises(ValueError, match=r"layers must be indices of the model's 2 blocks, got \[2\]"):
            use_recurrent_attention(_model(), "sum", layers=[2])

    def test_a_block_replaced_before_is_named(self):
        model = use_recurrent_attention(_model(), "delta", layers=[0])
        with pytest.raises(ValueError, match=r"block 0's attn must be a BlockAttention to replace, "
                                             r"got RecurrentBlockAttention"):
            use_recurrent_attention(model, "gated_delta")
        assert type(model.blocks[1].attn) is BlockAttention  # none replaced

    @pytest.mark.parametrize("conv_size", [0, -1, 1.5, True])
    def test_conv_size_must_be_an_integer_of_at_least_1_or_none(self, conv_size):
        # 0 built a convolution of no width that failed at the first call, inside torch
        attn = BlockAttention(16, 2, is_causal=True)
        with pytest.raises(ValueError, match=r"conv_size must be"):
            RecurrentBlockAttention(attn, "delta", conv_size=conv_size)
        with pytest.raises(ValueError, match=r"conv_size must be"):
            use_recurrent_attention(_model(), "delta", conv_size=conv_size)

    @pytest.mark.parametrize("attn", [torch.nn.Linear(16, 16), None])
    def test_the_sublayer_must_be_a_block_attention(self, attn):
        # its is_causal was read first: an AttributeError naming no argument
        with pytest.raises(ValueError, match=r"attn must be a BlockAttention, got (Linear|NoneType)"):
            RecurrentBlockAttention(attn, "delta")

    @pytest.mark.parametrize("kind", ["decay", "delta", "gated_delta"])
    def test_a_nan_input_is_refused_by_name(self, kind):
        # it reached the rule as a NaN g or beta: "beta must not be NaN", an argument the
        # caller never gave
        layer = RecurrentBlockAttention(BlockAttention(8, 2, is_causal=True), kind)
        x = torch.randn(1, 3, 8)
        x[0, 1, 2] = float("nan")
        with pytest.raises(ValueError, match=r"x gives a NaN write strength beta or log decay g"):
            layer(x)

    def test_x_must_be_b_t_d(self):
        # unchecked, a 2-d x failed to unpack its shape and a wrong width inside nn.Linear
        layer = RecurrentBlockAttention(BlockAttention(16, 2, is_causal=True), "delta")
        with pytest.raises(ValueError, match=r"x must have last dimension d_model=16, got 8"):
            layer(torch.randn(1, 5, 8))
        with pytest.raises(ValueError, match=r"x must be 3-d, got a 2-d tensor of shape \(5, 16\)"):
            layer(torch.randn(5, 16))

    @pytest.mark.parametrize("layers", [1, "0", [1.0], [True]])
    def test_layers_must_be_a_list_of_integer_indices(self, layers):
        # 1 and "0" raised a TypeError, [1.0] one from the ModuleList; [True] changed block 1
        model = _model()
        with pytest.raises(ValueError, match=r"layers must be indices of the model's 2 blocks"):
            use_recurrent_attention(model, "delta", layers=layers)
        assert [type(block.attn) for block in model.blocks] == [BlockAttention, BlockAttention]
