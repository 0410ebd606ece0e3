"""Encoder attention: equals torch.nn.MultiheadAttention, padding hides keys, nothing is causal."""

import re

import pytest
import torch
from _inputs import NON_BOOLS, randomize, refuses_non_bool, seeded_randn
from hypothesis import given, settings
from hypothesis import strategies as st

from attention.encoder import BidirectionalSelfAttention, CrossAttention

PADDING = torch.tensor([[False, False, False, True, True], [False, False, False, False, False]])


def torch_mha_like(module: CrossAttention) -> torch.nn.MultiheadAttention:
    """A torch.nn.MultiheadAttention holding the same weights as ``module`` (float64)."""
    ref = torch.nn.MultiheadAttention(
        module.d_out, module.num_heads, kdim=module.d_kv, vdim=module.d_kv, batch_first=True
    ).double()
    projections = (module.W_query, module.W_key, module.W_value)
    with torch.no_grad():
        if ref.in_proj_weight is not None:  # same widths: torch packs W_q, W_k, W_v in one matrix
            ref.in_proj_weight.copy_(torch.cat([p.weight for p in projections]))
        else:
            for name, p in zip(("q_proj_weight", "k_proj_weight", "v_proj_weight"), projections):
                getattr(ref, name).copy_(p.weight)
        biases = [torch.zeros(module.d_out) if p.bias is None else p.bias for p in projections]
        ref.in_proj_bias.copy_(torch.cat(biases))
        ref.out_proj.weight.copy_(module.out_proj.weight)
        ref.out_proj.bias.copy_(module.out_proj.bias)
    return ref


def assert_equals_torch(
    module: CrossAttention, x: torch.Tensor, context: torch.Tensor,
    padding: torch.Tensor | None, got: tuple[torch.Tensor, torch.Tensor],
) -> None:
    """``got``, the module's output and weights, equals torch's MultiheadAttention with the same
    parameters, to 1e-12 in float64."""
    want = torch_mha_like(module)(
        x, context, context, key_padding_mask=padding, average_attn_weights=False
    )
    for got_tensor, want_tensor in zip(got, want, strict=True):
        torch.testing.assert_close(got_tensor, want_tensor, rtol=0, atol=1e-12)


@pytest.mark.parametrize("qkv_bias", [False, True])
@pytest.mark.parametrize("padding", [None, PADDING])
def test_self_attention_equals_torch_multihead_attention(qkv_bias, padding):
    torch.manual_seed(0)
    module = BidirectionalSelfAttention(6, 6, dropout=0.0, num_heads=3, qkv_bias=qkv_bias).double()
    x = torch.randn(2, 5, 6, dtype=torch.float64)
    assert_equals_torch(module, x, x, padding, module(x, key_padding_mask=padding, return_weights=True))


def test_padded_keys_get_zero_weight_and_cannot_change_real_tokens():
    torch.manual_seed(0)
    module = BidirectionalSelfAttention(4, 6, dropout=0.0, num_heads=2)
    x = torch.randn(2, 5, 4)
    out, weights = module(x, key_padding_mask=PADDING, return_weights=True)
    assert weights.shape == (2, 2, 5, 5)
    assert torch.all(weights[0, :, :, 3:] == 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, 5))
    x_changed = x.clone()
    x_changed[0, 3:] = 100 * torch.randn(2, 4)  # rewrite the padding tokens of sequence 0
    out_changed = module(x_changed, key_padding_mask=PADDING)
    torch.testing.assert_close(out_changed[0, :3], out[0, :3], rtol=0, atol=0)
    torch.testing.assert_close(out_changed[1], out[1], rtol=0, atol=0)


def test_all_padding_gives_finite_output():
    module = BidirectionalSelfAttention(4, 4, dropout=0.0, num_heads=2)
    out = module(torch.randn(1, 3, 4), key_padding_mask=torch.ones(1, 3, dtype=torch.bool))
    torch.testing.assert_close(
        out, module.out_proj.bias.expand(1, 3, 4)
    )  # zero context, then out_proj


def test_every_token_sees_later_tokens():
    torch.manual_seed(0)
    module = BidirectionalSelfAttention(4, 4, dropout=0.0, num_heads=2)
    x = torch.randn(1, 6, 4)
    x_changed = x.clone()
    x_changed[0, -1] += 1.0  # change only the LAST token
    difference = (module(x_changed) - module(x)).abs().amax(dim=-1)  # (1, t)
    assert torch.all(difference > 1e-4)  # ... and every output moves, the first one included


@settings(max_examples=15, deadline=None)
@given(t=st.integers(1, 7), num_heads=st.sampled_from([1, 2, 4]), seed=st.integers(0, 1000))
def test_permutation_equivariance(t, num_heads, seed):
    torch.manual_seed(seed)
    module = BidirectionalSelfAttention(3, 4, num_heads, 0.0).double()
    x = torch.randn(2, t, 3, dtype=torch.float64)
    perm = torch.randperm(t)
    torch.testing.assert_close(module(x[:, perm]), module(x)[:, perm], rtol=0, atol=1e-12)


def test_dropout_drops_weights_in_training_only():
    torch.manual_seed(0)
    module = BidirectionalSelfAttention(4, 4, dropout=0.5, num_heads=2)
    x = torch.randn(2, 5, 4)
    module.eval()
    _, clean = module(x, return_weights=True)
    module.train()
    _, dropped = module(x, return_weights=True)
    assert torch.any(dropped == 0)
    survivors = dropped != 0
    torch.testing.assert_close(dropped[survivors], 2 * clean[survivors])  # rescaled by 1 / (1 - p)


def test_cross_attention_shapes_for_different_lengths_and_widths():
    module = CrossAttention(d_q=3, d_kv=5, d_out=8, dropout=0.0, num_heads=4)
    out, weights = module(torch.randn(2, 4, 3), torch.randn(2, 7, 5), return_weights=True)
    assert out.shape == (2, 4, 8)
    assert weights.shape == (2, 4, 4, 7)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 4))


@pytest.mark.parametrize("qkv_bias", [False, True])
def test_cross_attention_equals_torch_multihead_attention(qkv_bias):
    torch.manual_seed(0)
    module = CrossAttention(
        d_q=6, d_kv=5, d_out=6, dropout=0.0, num_heads=2, qkv_bias=qkv_bias
    ).double()
    x, context = (
        torch.randn(2, 3, 6, dtype=torch.float64),
        torch.randn(2, 5, 5, dtype=torch.float64),
    )
    got = module(x, context, key_padding_mask=PADDING, return_weights=True)
    assert_equals_torch(module, x, context, PADDING, got)


@pytest.mark.parametrize("qkv_bias", [False, True])
@pytest.mark.parametrize("name", ["cross", "bidirectional"])
def test_qkv_bias_gives_all_three_projections_a_bias_or_none(name, qkv_bias):
    """qkv_bias sets W_q, W_k and W_v alike (torch_mha_like copies whatever the module has, so
    only this catches a stray bias); out_proj has one either way, as torch's."""
    module = (CrossAttention(4, 6, 8, 2, 0.0, qkv_bias=qkv_bias) if name == "cross"
              else BidirectionalSelfAttention(6, 8, 2, 0.0, qkv_bias=qkv_bias))
    for projection in (module.W_query, module.W_key, module.W_value):
        assert (projection.bias is not None) == qkv_bias
    assert module.out_proj.bias is not None


def test_cross_attention_padding_hides_context_tokens():
    torch.manual_seed(0)
    module = CrossAttention(3, 5, 4, dropout=0.0, num_heads=2)
    x, context = torch.randn(2, 4, 3), torch.randn(2, 5, 5)
    out, weights = module(x, context, key_padding_mask=PADDING, return_weights=True)
    assert torch.all(weights[0, :, :, 3:] == 0)
    context_changed = context.clone()
    context_changed[0, 3:] = 100 * torch.randn(2, 5)
    torch.testing.assert_close(
        module(x, context_changed, key_padding_mask=PADDING), out, rtol=0, atol=0
    )


def test_empty_context_gives_out_proj_bias_for_every_query():
    """Nothing to attend to: a zero context vector per query, then out_proj (torch's answer)."""
    module = randomize(CrossAttention(3, 5, 4, num_heads=2, dropout=0.0)).double()
    out = module(seeded_randn(0, 2, 4, 3), seeded_randn(1, 2, 0, 5))
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, module.out_proj.bias.detach().expand(2, 4, 4), rtol=0, atol=0)


@pytest.mark.parametrize("name", ["cross", "bidirectional"])
def test_dtype_argument_sets_every_parameters_dtype(name):
    module = {"cross": CrossAttention(3, 5, 4, 2, 0.0, dtype=torch.float64),
              "bidirectional": BidirectionalSelfAttention(3, 4, 2, 0.0, dtype=torch.float64)}[name]
    assert {p.dtype for p in module.parameters()} == {torch.float64}


HEADED_BUILDERS = {
    "cross": lambda h: CrossAttention(3, 5, 4, num_heads=h, dropout=0.0),
    "bidirectional": lambda h: BidirectionalSelfAttention(3, 4, num_heads=h, dropout=0.0),
}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("cross", [False, True])
def test_half_precision_context_is_as_close_to_float64_as_float32_rounded_once(cross, dtype):
    """A V ran in half precision on rounded weights: the bfloat16 context was off by 0.0183,
    the float16 one by 0.0025, where torch's nn.MultiheadAttention (its SDPA, float32 rounded
    once) is off by 0.0149 and 0.0018. The weights returned stay in x's dtype."""
    attn = CrossAttention(8, 8, 8, 1, 0.0, dtype=dtype) if cross else \
        BidirectionalSelfAttention(8, 8, 1, 0.0, dtype=dtype)
    with torch.no_grad():
        for p in attn.parameters():  # identity projections, zero bias
            p.copy_(torch.eye(8)) if p.dim() == 2 else p.zero_()
    x = (1.5 * seeded_randn(0, 4, 64, 8)).to(dtype)  # queries = keys = values = x
    out, weights = attn(x, x, return_weights=True) if cross else attn(x, return_weights=True)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    want = sdpa(x.double()[:, None], x.double()[:, None], x.double()[:, None])[:, 0]
    torch_error = (sdpa(x[:, None], x[:, None], x[:, None])[:, 0].double() - want).abs().max()
    assert out.dtype == weights.dtype == dtype
    assert (out.double() - want).abs().max() <= 1.05 * torch_error


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    @pytest.mark.parametrize(
        "build, message",
        [
            (lambda: BidirectionalSelfAttention(4, 6, dropout=0.0, num_heads=4),
             r"d_out must be divisible by num_heads.*got d_out=6 and num_heads=4"),
            (
                lambda: BidirectionalSelfAttention(4, 4, dropout=1.0, num_heads=2),
                r"dropout must be in \[0, 1\), got 1.0",
            ),
            (lambda: CrossAttention(4, 3, 4, dropout=-0.1, num_heads=2), r"\[0, 1\), got -0.1"),
            (lambda: CrossAttention(4, 3, 4, dropout=0.0, num_heads=0), "num_heads must be at least 1, got 0"),
        ],
    )
    def test_heads_must_divide_d_out_and_dropout_lie_in_the_unit_interval(self, build, message):
        with pytest.raises(ValueError, match=message):
            build()

    def test_input_and_padding_mask_must_fit_the_module(self):
        module = BidirectionalSelfAttention(4, 4, dropout=0.0, num_heads=2)
        with pytest.raises(ValueError, match="3-d, got a 2-d"):
            module(torch.randn(5, 4))
        with pytest.raises(ValueError, match="d_q=4, got 3"):
            module(torch.randn(2, 5, 3))
        with pytest.raises(
            ValueError, match=r"shape \(b, t_k\) = \(2, 5\), got torch.bool of shape \(2, 4\)"
        ):
            module(torch.randn(2, 5, 4), key_padding_mask=torch.zeros(2, 4, dtype=torch.bool))
        with pytest.raises(ValueError, match=r"bool tensor.*got torch\.float32 of shape \(2, 5\)"):
            module(torch.randn(2, 5, 4), key_padding_mask=torch.zeros(2, 5))
        # a list of flags raised an AttributeError ('list' object has no attribute 'dtype')
        with pytest.raises(ValueError, match=r"bool tensor of shape \(b, t_k\) = \(2, 5\) or None, got list"):
            module(torch.randn(2, 5, 4), key_padding_mask=[[False] * 5] * 2)

    def test_padding_mask_must_be_on_the_device_of_x(self):
        """It was refused as "attn_mask must be on the query's device", an argument the caller
        did not pass."""
        module = BidirectionalSelfAttention(4, 4, dropout=0.0, num_heads=2)
        padding = torch.zeros(2, 5, dtype=torch.bool, device="meta")
        with pytest.raises(ValueError, match=r"key_padding_mask must be on x's device cpu, got meta"):
            module(torch.randn(2, 5, 4), key_padding_mask=padding)

    def test_context_must_have_d_kv_and_the_querys_batch(self):
        module = CrossAttention(3, 5, 4, dropout=0.0, num_heads=2)
        with pytest.raises(ValueError, match="context must have last dimension d_kv=5, got 3"):
            module(torch.randn(2, 4, 3), torch.randn(2, 7, 3))
        with pytest.raises(ValueError, match="same batch size b, got 2 and 1"):
            module(torch.randn(2, 4, 3), torch.randn(1, 7, 5))

    @pytest.mark.parametrize(
        ("num_heads", "message"),
        [(2.0, "2.0 of type float"), ("2", "'2' of type str"), (True, "True of type bool")],
    )
    @pytest.mark.parametrize("name", HEADED_BUILDERS)
    def test_num_heads_must_be_an_integer(self, name: str, num_heads: object, message: str) -> None:
        with pytest.raises(ValueError, match=f"num_heads must be an integer, got {message}"):
            HEADED_BUILDERS[name](num_heads)

    @pytest.mark.parametrize(
        ("build", "message"),
        [
            (lambda: CrossAttention(3, 5, 0, num_heads=2, dropout=0.0), "d_out must be at least 1, got 0"),
            (lambda: BidirectionalSelfAttention(3, 0, num_heads=2, dropout=0.0), "d_out must be at least 1, got 0"),
            (lambda: BidirectionalSelfAttention(0, 4, num_heads=2, dropout=0.0), "d_in must be at least 1, got 0"),
            (lambda: CrossAttention(3, 0, 4, num_heads=2, dropout=0.0), "d_kv must be at least 1, got 0"),
        ],
    )
    def test_sizes_must_be_positive_integers(self, build, message: str) -> None:
        with pytest.raises(ValueError, match=re.escape(message)):
            build()

    @pytest.mark.parametrize("value", NON_BOOLS)
    @pytest.mark.parametrize(
        ("flag", "call"),
        [
            ("qkv_bias", lambda value: CrossAttention(4, 3, 4, 2, 0.0, qkv_bias=value)),
            ("qkv_bias", lambda value: BidirectionalSelfAttention(4, 4, 2, 0.0, qkv_bias=value)),
            ("return_weights", lambda value: CrossAttention(4, 3, 4, 2, 0.0)(
                torch.randn(1, 2, 4), torch.randn(1, 5, 3), return_weights=value)),
            ("return_weights", lambda value: BidirectionalSelfAttention(4, 4, 2, 0.0)(
                torch.randn(1, 2, 4), return_weights=value)),
        ],
        ids=["cross", "bidirectional", "cross forward", "bidirectional forward"],
    )
    def test_flags_must_be_bools(self, flag: str, call, value: object) -> None:
        with refuses_non_bool(flag, value):
            call(value)
