"""Multi-head attention: the book's figures; each version equals the previous one and torch."""

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from _gradcheck import module_gradcheck
from _inputs import NON_BOOLS, randomize, refuses_non_bool, seeded_randn
from _reference import book_tensor

from attention import (
    CausalAttention,
    FusedMultiHeadAttention,
    GroupedQueryAttention,
    MultiHeadAttention,
    MultiHeadAttentionWrapper,
    additive_causal_mask,
    attention_weights,
    causal_mask,
    from_torch_state_dict,
    journey_batch,
    to_torch_state_dict,
)

# Printed by the book's notebook ("Approach #4" and exercise 3.3), both copies of the batch:
# tests/package/_reference.py.
BOOK_WRAPPER_OUTPUT = book_tensor("BOOK_WRAPPER_OUTPUT")
BOOK_MHA_OUTPUT = book_tensor("BOOK_MHA_OUTPUT")


@pytest.mark.parametrize(
    ("module", "printed"),
    [(MultiHeadAttentionWrapper, BOOK_WRAPPER_OUTPUT), (MultiHeadAttention, BOOK_MHA_OUTPUT)],
    ids=["MultiHeadAttentionWrapper", "MultiHeadAttention"],
)
def test_reproduces_book_with_seed_123(module, printed) -> None:
    torch.manual_seed(123)
    layer = module(3, 2, context_length=6, dropout=0.0, num_heads=2)
    with torch.no_grad():
        out = layer(journey_batch())
    torch.testing.assert_close(out, printed, atol=1e-4, rtol=0)


def expected_parameters(d_in: int, d_out: int, qkv_bias: bool) -> int:
    """Equation (5.9), written out by role: W_query, W_key, W_value (d_in -> d_out, biases only
    with qkv_bias) and the output projection (d_out -> d_out, always with a bias)."""
    return 3 * (d_in * d_out + qkv_bias * d_out) + d_out * d_out + d_out


@pytest.mark.parametrize("qkv_bias", [False, True])
@pytest.mark.parametrize(
    "d_in, d_out, num_heads, context_length",
    [(768, 768, 12, 1024), (5, 8, 2, 3), (5, 8, 4, 50), (7, 6, 1, 6)],
)
def test_parameter_count_is_equation_5_9(
    d_in: int, d_out: int, num_heads: int, context_length: int, qkv_bias: bool
) -> None:
    # Independent of the number of heads (they split d_out) and of context_length (the mask is a
    # buffer); d_in != d_out catches a projection built the wrong way round.
    # The fused module stacks the same three projections into one: the same count.
    expected = expected_parameters(d_in, d_out, qkv_bias)
    for cls in (MultiHeadAttention, FusedMultiHeadAttention):
        module = cls(d_in, d_out, num_heads, context_length, 0.0, qkv_bias=qkv_bias)
        assert sum(p.numel() for p in module.parameters()) == expected, cls.__name__


def test_gpt2_small_parameter_count_against_torch_and_the_gpt2_checkpoint() -> None:
    mha = MultiHeadAttention(768, 768, context_length=1024, dropout=0.0, num_heads=12)
    with_bias = MultiHeadAttention(768, 768, context_length=1024, dropout=0.0, num_heads=12, qkv_bias=True)
    count = sum(p.numel() for p in mha.parameters())
    count_with_bias = sum(p.numel() for p in with_bias.parameters())
    assert count == 2_360_064  # the exercise's answer (chapter 5, exercise 5.2)
    # torch.nn.MultiheadAttention(bias=True) has biases on all four projections, like qkv_bias=True;
    # with bias=False it drops the output projection's bias too, which ours always has.
    torch_count = {
        bias: sum(p.numel() for p in torch.nn.MultiheadAttention(768, 12, bias=bias).parameters())
        for bias in (False, True)
    }
    assert count_with_bias == torch_count[True] and count == torch_count[False] + 768
    # GPT-2 small's attention per layer, from the shapes of the released weights (as Hugging
    # Face's "gpt2" stores them): c_attn (768, 2304) with bias (2304,), c_proj (768, 768) with
    # bias (768,). The real GPT-2 has qkv_bias=True.
    assert count_with_bias == 768 * 2304 + 2304 + 768 * 768 + 768


def test_wrapper_has_independent_heads_each_a_causal_attention() -> None:
    d_in, d_out, h, t = 3, 2, 3, 5
    torch.manual_seed(0)
    wrapper = MultiHeadAttentionWrapper(d_in, d_out, context_length=6, dropout=0.0, num_heads=h)
    # h heads, each with its own W_query, W_key and W_value of d_in x d_out, registered (so an
    # optimizer sees them) and not one module repeated h times.
    assert sum(p.numel() for p in wrapper.parameters()) == h * 3 * d_in * d_out
    assert len({id(head) for head in wrapper.heads}) == h
    queries = [head.W_query.weight for head in wrapper.heads]
    assert not any(torch.equal(queries[0], w) for w in queries[1:])
    x = torch.randn(2, t, d_in)
    with torch.no_grad():
        out = wrapper(x)
        assert out.shape == (2, t, h * d_out)
        for i, head in enumerate(wrapper.heads):
            # columns i * d_out ... (i + 1) * d_out are head i: causal attention, computed here by
            # torch's own kernel from the head's projections
            q, k, v = head.W_query(x), head.W_key(x), head.W_value(x)  # (b, t, d_out) each
            expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (b, t, d_out)
            torch.testing.assert_close(out[..., i * d_out : (i + 1) * d_out], expected)


def test_single_head_multihead_is_causal_attention_plus_output_projection() -> None:
    ca = CausalAttention(4, 6, context_length=8, dropout=0.0)
    mha = MultiHeadAttention(4, 6, context_length=8, dropout=0.0, num_heads=1)
    missing, unexpected = mha.load_state_dict(ca.state_dict(), strict=False)
    assert missing == ["out_proj.weight", "out_proj.bias"] and not unexpected
    x = torch.randn(2, 7, 4)
    with torch.no_grad():
        torch.testing.assert_close(mha(x), mha.out_proj(ca(x)))


@pytest.mark.parametrize("float_mask", [False, True], ids=["bool mask", "float mask"])
def test_multihead_equals_torch_multihead_attention(float_mask: bool) -> None:
    d, h, t = 12, 3, 7
    mha = MultiHeadAttention(d, d, context_length=10, dropout=0.0, num_heads=h, qkv_bias=True)
    mha = mha.double()
    ref = torch.nn.MultiheadAttention(d, h, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        projections = (mha.W_query, mha.W_key, mha.W_value)
        ref.in_proj_weight.copy_(torch.cat([p.weight for p in projections]))
        ref.in_proj_bias.copy_(torch.cat([p.bias for p in projections]))
        ref.out_proj.load_state_dict(mha.out_proj.state_dict())
        # torch's boolean attn_mask marks the positions that may NOT be attended
        mask = additive_causal_mask(t, dtype=torch.float64) if float_mask else ~causal_mask(t)
        x = torch.randn(2, t, d, dtype=torch.float64)
        expected, expected_weights = ref(x, x, x, attn_mask=mask, average_attn_weights=False)
        out, weights = mha(x, return_weights=True)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(weights, expected_weights)


def test_float16_scores_beyond_its_range_give_torch_multihead_attention_s_answer() -> None:
    """Q Kᵀ was computed in float16: a score past 65504 became inf and its row nan, where
    torch's module, as FusedMultiHeadAttention, keeps the scores in float32."""
    d, h, t = 8, 2, 4
    mha = MultiHeadAttention(d, d, context_length=t, dropout=0.0, num_heads=h,
                             dtype=torch.float16)
    ref = torch.nn.MultiheadAttention(d, h, batch_first=True, dtype=torch.float16)
    with torch.no_grad():
        mha.W_query.weight.copy_(torch.eye(d))
        mha.W_key.weight.copy_(torch.eye(d))
        ref.load_state_dict(to_torch_state_dict(mha.state_dict()))
        x = torch.full((1, t, d), 150.0, dtype=torch.float16)  # q·k = 4 · 150² = 90000 > 65504
        expected, expected_weights = ref(x, x, x, attn_mask=~causal_mask(t),
                                         average_attn_weights=False)
        out, weights = mha(x, return_weights=True)
    assert out.isfinite().all()
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(weights, expected_weights)


@pytest.mark.parametrize("use_sdpa", [False, True], ids=["explicit", "sdpa"])
def test_fused_in_float16_answers_where_its_scores_pass_float16_s_range(use_sdpa: bool) -> None:
    """The explicit path (use_sdpa=False) computed Q Kᵀ in float16: a score past 65504 became
    inf and its row nan, where the SDPA path and MultiHeadAttention keep the scores in float32."""
    d, h, t = 8, 2, 4
    mha = MultiHeadAttention(d, d, context_length=t, dropout=0.0, num_heads=h,
                             dtype=torch.float16)
    with torch.no_grad():
        mha.W_query.weight.copy_(torch.eye(d))
        mha.W_key.weight.copy_(torch.eye(d))
        fused = FusedMultiHeadAttention.from_multihead(mha)
        fused.use_sdpa = use_sdpa
        x = torch.full((1, t, d), 200.0, dtype=torch.float16)  # q·k / sqrt(4) = 80000 > 65504
        out = fused(x)
        assert out.isfinite().all()
        torch.testing.assert_close(out, mha(x))


@pytest.mark.parametrize("build", [
    MultiHeadAttention,
    lambda *args, **kwargs: FusedMultiHeadAttention(*args, **kwargs, use_sdpa=False),
    lambda d_in, d_out, **kwargs: MultiHeadAttentionWrapper(d_in, d_out // 2, **kwargs),
], ids=["MultiHeadAttention", "fused-explicit", "wrapper"])
def test_float16_autocast_keeps_the_scores_in_float32_as_the_sdpa_path_does(build) -> None:
    """Under autocast the float32 product Q Kᵀ ran in float16 again: a score past 65504 was
    inf and its row nan, where FusedMultiHeadAttention's SDPA path under it answers."""
    torch.manual_seed(0)
    module = build(8, 8, context_length=4, dropout=0.0, num_heads=2)
    with torch.no_grad():
        for name, weight in module.named_parameters():  # queries and keys: scores past 10⁵
            if name.endswith(("W_query.weight", "W_key.weight")):
                weight.mul_(1000.0)
            elif name == "qkv.weight":
                weight[:16].mul_(1000.0)  # (3 d_out, d_in): the query and key rows
        x = seeded_randn(0, 2, 4, 8).float()
        with torch.autocast("cpu", dtype=torch.float16):
            out = module(x)
        expected = module.double()(x.double())
    assert out.dtype == torch.float16 and out.isfinite().all()
    torch.testing.assert_close(out.double(), expected, rtol=0.01, atol=0.01 * expected.abs().max().item())


@pytest.mark.parametrize("use_sdpa", [None, False], ids=["MultiHeadAttention", "fused-explicit"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_context_is_as_close_to_float64_as_float32_rounded_once(
    dtype, use_sdpa: bool | None
) -> None:
    """A V ran in half precision on rounded weights: with 64 tokens the float16 context was off
    by 1.43 times what torch's SDPA, float32 rounded once, is off by (bfloat16: 1.03 times)."""
    mha = MultiHeadAttention(8, 8, context_length=64, dropout=0.0, num_heads=2, dtype=dtype)
    with torch.no_grad():
        for p in (mha.W_query, mha.W_key, mha.W_value, mha.out_proj):
            p.weight.copy_(torch.eye(8))
        mha.out_proj.bias.zero_()  # the output is the context
        module = mha if use_sdpa is None else FusedMultiHeadAttention.from_multihead(mha)
        if use_sdpa is not None:
            module.use_sdpa = use_sdpa
        x = (1.5 * seeded_randn(0, 4, 64, 8)).to(dtype)
        out = module(x)
    heads = x.view(4, 64, 2, 4).transpose(1, 2)  # (b, h, t, d_h): queries = keys = values
    exact = F.scaled_dot_product_attention(*3 * [heads.double()], is_causal=True)
    once = F.scaled_dot_product_attention(*3 * [heads.float()], is_causal=True).to(dtype)
    out = out.view(4, 64, 2, 4).transpose(1, 2).double()
    assert (out - exact).abs().max() <= 1.01 * (once.double() - exact).abs().max()


@pytest.mark.parametrize("cls", [MultiHeadAttention, FusedMultiHeadAttention])
def test_a_meta_module_loaded_with_assign_builds_its_mask_on_the_tensors_device(cls: type) -> None:
    # the mask stayed on the meta device: "Tensor on device cpu is not on the expected device meta!"
    torch.manual_seed(0)
    trained = cls(4, 4, 2, 6, 0.0)
    if cls is FusedMultiHeadAttention:
        trained.use_sdpa = False  # the path that reads the mask
    loaded = cls(4, 4, 2, 6, 0.0, device="meta")
    loaded.load_state_dict(trained.state_dict(), assign=True)
    loaded.use_sdpa = False
    x = seeded_randn(0, 2, 5, 4).float()
    assert torch.equal(loaded.mask, trained.mask) and torch.equal(loaded(x), trained(x))


def test_the_wrapper_in_float16_answers_where_its_scores_pass_float16_s_range() -> None:
    """Each head is a CausalAttention, whose float16 scores past 65504 were inf, its rows nan."""
    wrapper = MultiHeadAttentionWrapper(8, 8, context_length=4, dropout=0.0, num_heads=2,
                                        dtype=torch.float16)
    with torch.no_grad():
        for head in wrapper.heads:
            for p in (head.W_query, head.W_key, head.W_value):
                p.weight.copy_(torch.eye(8))
        x = torch.full((1, 4, 8), 100.0, dtype=torch.float16)  # q·k = 80000
        assert torch.equal(wrapper(x), torch.cat([x, x], dim=-1))  # equal values: their mean


def test_returned_weights_are_each_heads_causal_weights() -> None:
    mha = MultiHeadAttention(4, 6, context_length=8, dropout=0.0, num_heads=2)
    x = torch.randn(3, 5, 4)
    with torch.no_grad():
        _, weights = mha(x, return_weights=True)
        q = mha.W_query(x).view(3, 5, 2, 3).transpose(1, 2)
        k = mha.W_key(x).view(3, 5, 2, 3).transpose(1, 2)
        torch.testing.assert_close(weights, attention_weights(q, k, is_causal=True))
    assert weights.shape == (3, 2, 5, 5)


@pytest.mark.parametrize("qkv_bias", [False, True])
@pytest.mark.parametrize("use_sdpa", [False, True], ids=["explicit", "sdpa"])
def test_fused_equals_multihead_with_same_weights(use_sdpa: bool, qkv_bias: bool) -> None:
    mha = MultiHeadAttention(5, 8, context_length=9, dropout=0.0, num_heads=4, qkv_bias=qkv_bias)
    mha = mha.double()
    fused = FusedMultiHeadAttention.from_multihead(mha)
    fused.use_sdpa = use_sdpa
    assert fused.qkv.weight.dtype == torch.float64
    x = torch.randn(2, 9, 5, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(fused(x), mha(x))


@pytest.mark.parametrize("training", [False, True])
def test_from_multihead_carries_over_the_training_mode(training: bool) -> None:
    """An eval-mode module must not turn into a fused one that drops out (a new module trains)."""
    mha = MultiHeadAttention(6, 6, context_length=8, dropout=0.5, num_heads=2, proj_dropout=0.25)
    fused = FusedMultiHeadAttention.from_multihead(mha.train(training))
    assert fused.training is training and fused.dropout.training is training
    assert (fused.dropout.p, fused.proj_dropout.p) == (0.5, 0.25)
    if not training:
        x = torch.randn(2, 8, 6)
        with torch.no_grad():
            torch.testing.assert_close(fused(x), mha(x))


def test_fused_paths_agree_and_ignore_dropout_in_eval() -> None:
    fused = FusedMultiHeadAttention(6, 6, context_length=8, dropout=0.3, num_heads=2).eval()
    x = torch.randn(2, 8, 6)
    with torch.no_grad():
        fast = fused(x)
        fused.use_sdpa = False
        torch.testing.assert_close(fused(x), fast)


def test_gradcheck_float64() -> None:
    """Smoke test, the only gradcheck of a module: MultiHeadAttention is plain PyTorch, so this
    checks that its gradients reach the input and every parameter (nothing detached or
    non-differentiable on the way), not our own backward. The hand-written backward of
    flash_attention is gradchecked in tests/package/test_flash.py."""
    x = torch.rand(2, 4, 3)
    assert module_gradcheck(MultiHeadAttention(3, 4, context_length=5, dropout=0.0, num_heads=2), x)


@pytest.mark.parametrize("cls", [MultiHeadAttention, FusedMultiHeadAttention])
def test_proj_dropout_drops_entries_of_the_projected_output_not_of_its_input(cls: type) -> None:
    """Each output entry is 0 or 2x its eval value (p = 0.5): dropping out_proj's input instead
    would leave its bias in every entry, and a dropped input would change whole rows."""
    module = randomize(cls(4, 6, 2, 8, 0.0, proj_dropout=0.5)).double()
    x = seeded_randn(0, 2, 7, 4)
    with torch.no_grad():
        clean = module.eval()(x)
        torch.manual_seed(0)
        dropped = module.train()(x)
    kept = dropped != 0
    assert 0 < kept.sum() < kept.numel()
    torch.testing.assert_close(dropped[kept], 2 * clean[kept])


def test_returned_weights_are_those_applied_after_dropout() -> None:
    """In training the returned weights carry the dropout: out = out_proj(merge(A V)) with them."""
    mha = randomize(MultiHeadAttention(4, 6, 2, 8, 0.5)).double().train()
    x = seeded_randn(1, 2, 7, 4)
    torch.manual_seed(0)
    with torch.no_grad():
        out, weights = mha(x, return_weights=True)
        values = mha.W_value(x).view(2, 7, 2, 3).transpose(1, 2)  # (b, h, t, d_h)
        context = (weights @ values).transpose(1, 2).reshape(2, 7, 6)
        clean = mha.eval()(x, return_weights=True)[1]
    assert torch.any((weights == 0) & (clean != 0))
    torch.testing.assert_close(out, mha.out_proj(context))


def test_fused_explicit_path_drops_attention_weights_as_multihead_does_in_training() -> None:
    """Same seed, same dropout draws over (b, h, t, t): the explicit fused path equals the module."""
    mha = randomize(MultiHeadAttention(4, 6, 2, 8, 0.5)).double().train()
    fused = FusedMultiHeadAttention.from_multihead(mha)
    fused.use_sdpa = False
    x = seeded_randn(2, 2, 7, 4)
    with torch.no_grad():
        torch.manual_seed(0)
        expected = mha(x)
        torch.manual_seed(0)
        out = fused(x)
        assert not torch.allclose(out, mha.eval()(x))
    torch.testing.assert_close(out, expected)


def causal_torch_output(torch_mha: torch.nn.MultiheadAttention, x: torch.Tensor) -> torch.Tensor:
    """torch's module on x with the causal mask (its bool attn_mask: True = may not attend)."""
    t = x.shape[1]
    return torch_mha(x, x, x, attn_mask=~causal_mask(t), need_weights=False)[0]


@pytest.mark.parametrize("qkv_bias", [False, True])
def test_to_torch_state_dict_makes_torch_multihead_attention_compute_the_same(qkv_bias: bool) -> None:
    mha = randomize(MultiHeadAttention(6, 6, 3, 8, 0.0, qkv_bias=qkv_bias)).double()
    state = to_torch_state_dict(mha.state_dict())
    assert state["in_proj_weight"].shape == (18, 6)
    if not qkv_bias:
        assert torch.equal(state["in_proj_bias"], torch.zeros(18, dtype=torch.float64))
    theirs = torch.nn.MultiheadAttention(6, 3, batch_first=True, dtype=torch.float64)
    theirs.load_state_dict(state)
    x = seeded_randn(3, 2, 5, 6)
    with torch.no_grad():
        torch.testing.assert_close(mha(x), causal_torch_output(theirs, x))


def test_to_torch_state_dict_puts_zeros_in_the_slot_of_each_missing_bias() -> None:
    """in_proj_bias is (b_q, b_k, b_v) in that order: a missing one is zeros in its own slot,
    so the biases that are there stay with their projection."""
    state = randomize(MultiHeadAttention(6, 6, 3, 8, 0.0, qkv_bias=True)).state_dict()
    del state["W_query.bias"], state["W_value.bias"]
    bias = to_torch_state_dict(state)["in_proj_bias"]
    torch.testing.assert_close(bias, torch.cat([torch.zeros(6), state["W_key.bias"], torch.zeros(6)]),
                               rtol=0, atol=0)


@pytest.mark.parametrize("bias", [False, True])
def test_from_torch_state_dict_computes_what_torch_multihead_attention_computes(bias: bool) -> None:
    """Q, K, V in torch's order; torch's biases, or zeros where its module has none."""
    theirs = randomize(torch.nn.MultiheadAttention(6, 3, bias=bias, batch_first=True)).double()
    state = from_torch_state_dict(theirs.state_dict(), qkv_bias=True)
    if not bias:
        assert all(torch.equal(state[f"{n}.bias"], torch.zeros(6, dtype=torch.float64))
                   for n in ("W_query", "W_key", "W_value", "out_proj"))
    mha = MultiHeadAttention(6, 6, 3, 8, 0.0, qkv_bias=True).double()
    mha.load_state_dict(state)
    x = seeded_randn(4, 2, 5, 6)
    with torch.no_grad():
        torch.testing.assert_close(mha(x), causal_torch_output(theirs, x))


def test_from_torch_state_dict_converts_a_meta_module_without_qkv_bias() -> None:
    # the zero check of in_proj_bias read a meta tensor: RuntimeError "Tensor.item() cannot be
    # called on meta tensors", where a meta state has no values to check, as with qkv_bias=True
    theirs = torch.nn.MultiheadAttention(6, 3, device="meta")
    state = from_torch_state_dict(theirs.state_dict(), qkv_bias=False)
    mha = MultiHeadAttention(6, 6, 3, 8, 0.0, device="meta")
    mha.load_state_dict(state, assign=True)
    assert sorted(state) == sorted(mha.state_dict()) and state["W_query.weight"].is_meta


MULTIHEAD_CLASSES = [MultiHeadAttention, FusedMultiHeadAttention, MultiHeadAttentionWrapper]


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    @pytest.mark.parametrize("cls", [MultiHeadAttention, FusedMultiHeadAttention])
    def test_d_out_must_be_divisible_by_num_heads(self, cls: type) -> None:
        with pytest.raises(ValueError, match=r"divisible by num_heads, got d_out=10 and num_heads=4"):
            cls(3, 10, num_heads=4, context_length=6, dropout=0.0)

    @pytest.mark.parametrize("cls", MULTIHEAD_CLASSES)
    def test_num_heads_must_be_at_least_one(self, cls: type) -> None:
        with pytest.raises(ValueError, match=r"num_heads must be at least 1, got 0"):
            cls(3, 4, num_heads=0, context_length=6, dropout=0.0)

    @pytest.mark.parametrize("dropout", [-0.1, 1.0, 1.5])
    @pytest.mark.parametrize("cls", MULTIHEAD_CLASSES)
    def test_dropout_must_be_in_the_unit_interval(self, cls: type, dropout: float) -> None:
        with pytest.raises(ValueError, match=rf"dropout must be in \[0, 1\), got {dropout}"):
            cls(3, 4, num_heads=2, context_length=6, dropout=dropout)

    @pytest.mark.parametrize("cls", MULTIHEAD_CLASSES)
    def test_sequence_must_fit_the_context_length(self, cls: type) -> None:
        with pytest.raises(ValueError, match=r"at most context_length=6, got 7"):
            cls(3, 4, num_heads=2, context_length=6, dropout=0.0)(torch.randn(2, 7, 3))

    @pytest.mark.parametrize("cls", MULTIHEAD_CLASSES)
    def test_last_dimension_must_be_d_in(self, cls: type) -> None:
        with pytest.raises(ValueError, match=r"last dimension d_in=3, got 5"):
            cls(3, 4, num_heads=2, context_length=6, dropout=0.0)(torch.randn(2, 4, 5))

    @pytest.mark.parametrize("cls", [MultiHeadAttention, FusedMultiHeadAttention], ids=["multihead", "fused"])
    def test_input_must_be_3d(self, cls: type) -> None:
        with pytest.raises(ValueError, match=r"must be 3-d, got a 2-d tensor"):
            cls(3, 4, num_heads=2, context_length=6, dropout=0.0)(torch.randn(4, 3))

    @pytest.mark.parametrize("context_length", [0, -1])
    @pytest.mark.parametrize("cls", MULTIHEAD_CLASSES)
    def test_context_length_must_be_at_least_one(self, cls: type, context_length: int) -> None:
        with pytest.raises(ValueError, match=f"context_length must be at least 1, got {context_length}"):
            cls(3, 4, num_heads=2, context_length=context_length, dropout=0.0)

    @pytest.mark.parametrize(
        ("num_heads", "message"),
        [(2.0, "2.0 of type float"), ("2", "'2' of type str"), (True, "True of type bool")],
    )
    @pytest.mark.parametrize("cls", MULTIHEAD_CLASSES, ids=["multihead", "fused", "wrapper"])
    def test_num_heads_must_be_an_integer(self, cls: type, num_heads: object, message: str) -> None:
        with pytest.raises(ValueError, match=f"num_heads must be an integer, got {message}"):
            cls(3, 4, num_heads=num_heads, context_length=6, dropout=0.0)

    @pytest.mark.parametrize(
        ("build", "message"),
        [
            (lambda: MultiHeadAttentionWrapper(3, 0, num_heads=2, context_length=6, dropout=0.0), "d_out must be at least 1, got 0"),
            (lambda: MultiHeadAttention(3, 0, num_heads=2, context_length=6, dropout=0.0), "d_out must be at least 1, got 0"),
            (lambda: FusedMultiHeadAttention(3, 0, num_heads=2, context_length=6, dropout=0.0), "d_out must be at least 1, got 0"),
            (lambda: MultiHeadAttention(0, 4, num_heads=2, context_length=6, dropout=0.0), "d_in must be at least 1, got 0"),
        ],
    )
    def test_sizes_must_be_positive_integers(self, build, message: str) -> None:
        with pytest.raises(ValueError, match=re.escape(message)):
            build()

    def test_sizes_of_any_integer_type_are_accepted(self) -> None:
        mha = MultiHeadAttention(np.int64(3), 4, num_heads=np.int32(2), context_length=6, dropout=0.0)
        assert mha(torch.randn(1, 5, 3)).shape == (1, 5, 4)

    @pytest.mark.parametrize("p", [-0.1, 1.0])
    @pytest.mark.parametrize("cls", [MultiHeadAttention, FusedMultiHeadAttention])
    def test_proj_dropout_must_be_in_the_unit_interval(self, cls: type, p: float) -> None:
        with pytest.raises(ValueError, match=rf"proj_dropout must be in \[0, 1\), got {p}"):
            cls(3, 4, num_heads=2, context_length=6, dropout=0.0, proj_dropout=p)

    # torch's module and GroupedQueryAttention have other weights: an AttributeError was raised
    @pytest.mark.parametrize(
        ("other", "name"),
        [(lambda: torch.nn.MultiheadAttention(8, 2), "MultiheadAttention"),
         (lambda: GroupedQueryAttention(8, 8, 2, 1), "GroupedQueryAttention")],
    )
    def test_from_multihead_needs_a_multihead_attention(self, other, name: str) -> None:
        with pytest.raises(ValueError, match=rf"mha must be a MultiHeadAttention, got {name}$"):
            FusedMultiHeadAttention.from_multihead(other())

    # the torch state-dict conversions refuse what torch's or our module could not load as the
    # same attention
    def test_to_torch_needs_d_in_equal_to_d_out(self) -> None:
        state = MultiHeadAttention(4, 6, 2, 8, 0.0).state_dict()
        with pytest.raises(ValueError, match="needs d_in = d_out, got 4 and 6"):
            to_torch_state_dict(state)

    def test_to_torch_needs_the_projections(self) -> None:
        state = MultiHeadAttention(6, 6, 2, 8, 0.0).state_dict()
        del state["W_key.weight"]
        with pytest.raises(ValueError, match=r"got no \['W_key.weight'\]"):
            to_torch_state_dict(state)

    @pytest.mark.parametrize(
        ("state", "message"),
        [
            # a GroupedQueryAttention's keys and values have h_kv · d_h rows: torch could not load
            # the (16, 8) in_proj_weight that came out
            (lambda: GroupedQueryAttention(8, 8, 2, 1).state_dict(),
             r"W_key.weight must have shape \(d_out, d_in\) = \(8, 8\), got \(4, 8\)"),
            (lambda: {k: v for k, v in MultiHeadAttention(8, 8, 2, 8, 0.0).state_dict().items()
                      if k != "out_proj.bias"},  # a KeyError
             r"got no \['out_proj.bias'\]"),
            (lambda: {**MultiHeadAttention(8, 8, 2, 8, 0.0, qkv_bias=True).state_dict(),
                      "W_value.bias": torch.zeros(3)},
             r"W_value.bias must have shape \(d_out,\) = \(8,\), got \(3,\)"),
            (lambda: {**MultiHeadAttention(8, 8, 2, 8, 0.0).state_dict(), "W_query.weight": torch.ones(8)},
             r"W_query.weight must be a \(d_out, d_in\) tensor, got \(8,\)"),
            (lambda: None, r"state must be a MultiHeadAttention state dict, got NoneType"),  # a TypeError
        ],
    )
    def test_to_torch_refuses_what_torch_could_not_load(self, state, message: str) -> None:
        with pytest.raises(ValueError, match=message):
            to_torch_state_dict(state())

    @pytest.mark.parametrize(
        ("state", "message"),
        [
            # 7 rows were split into 3, 3 and 1, and an out_proj.bias of shape (3,) invented
            ({"in_proj_weight": torch.randn(7, 8), "out_proj.weight": torch.randn(8, 8)},
             r"in_proj_weight must have shape \(3 embed_dim, embed_dim\) = \(24, 8\), got \(7, 8\)"),
            ({"in_proj_weight": torch.randn(24), "out_proj.weight": torch.randn(8, 8)},
             r"in_proj_weight must be a \(3 embed_dim, embed_dim\) tensor, got \(24,\)"),
            ({"in_proj_weight": torch.randn(24, 8), "out_proj.weight": torch.randn(8, 4)},
             r"out_proj.weight must have shape \(embed_dim, embed_dim\) = \(8, 8\), got \(8, 4\)"),
            ({"in_proj_weight": torch.randn(24, 8), "in_proj_bias": torch.randn(8),
              "out_proj.weight": torch.randn(8, 8)},
             r"in_proj_bias must have shape \(3 embed_dim,\) = \(24,\), got \(8,\)"),
            ({"in_proj_weight": torch.randn(24, 8), "out_proj.weight": torch.randn(8, 8), "out_proj.bias": [0.0]},
             r"out_proj.bias must have shape \(embed_dim,\) = \(8,\), got list"),
            ({"in_proj_weight": torch.randn(24, 8)}, r"state must hold out_proj.weight, got keys \['in_proj_weight'\]"),
            (None, r"state must be a torch.nn.MultiheadAttention state dict, got NoneType"),  # a TypeError
        ],
    )
    def test_from_torch_refuses_what_is_not_torchs_state(self, state, message: str) -> None:
        with pytest.raises(ValueError, match=message):
            from_torch_state_dict(state)

    def test_from_torch_refuses_a_nonzero_in_proj_bias_without_qkv_bias(self) -> None:
        state = randomize(torch.nn.MultiheadAttention(6, 2)).state_dict()
        with pytest.raises(ValueError, match="in_proj_bias must be zero"):
            from_torch_state_dict(state, qkv_bias=False)
        state["in_proj_bias"].zero_()
        assert "W_query.bias" not in from_torch_state_dict(state, qkv_bias=False)

    def test_use_sdpa_must_be_a_bool(self) -> None:
        with pytest.raises(ValueError, match=r"use_sdpa must be a bool, got 'no' of type str"):
            FusedMultiHeadAttention(4, 4, 2, 6, 0.0, use_sdpa="no")

    def test_from_torch_refuses_the_key_and_value_biases_this_module_lacks(self) -> None:
        state = torch.nn.MultiheadAttention(6, 2, add_bias_kv=True).state_dict()
        with pytest.raises(ValueError, match=r"only what MultiHeadAttention has, got also \['bias_k', 'bias_v'\]"):
            from_torch_state_dict(state)

    def test_from_torch_refuses_separate_projections(self) -> None:
        state = torch.nn.MultiheadAttention(6, 2, kdim=4, vdim=4).state_dict()
        with pytest.raises(ValueError, match="must hold in_proj_weight"):
            from_torch_state_dict(state)

    @pytest.mark.parametrize("value", NON_BOOLS)
    @pytest.mark.parametrize(
        ("flag", "call"),
        [
            ("qkv_bias", lambda value: MultiHeadAttentionWrapper(4, 2, 2, 6, 0.0, qkv_bias=value)),
            ("qkv_bias", lambda value: MultiHeadAttention(4, 4, 2, 6, 0.0, qkv_bias=value)),
            ("qkv_bias", lambda value: FusedMultiHeadAttention(4, 4, 2, 6, 0.0, qkv_bias=value)),
            ("qkv_bias", lambda value: from_torch_state_dict(
                torch.nn.MultiheadAttention(4, 2).state_dict(), qkv_bias=value)),
            ("return_weights",
             lambda value: MultiHeadAttention(4, 4, 2, 6, 0.0)(torch.randn(1, 3, 4), return_weights=value)),
        ],
        ids=["wrapper", "multihead", "fused", "from_torch_state_dict", "forward"],
    )
    def test_flags_must_be_bools(self, flag: str, call, value: object) -> None:
        with refuses_non_bool(flag, value):
            call(value)
