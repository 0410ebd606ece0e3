"""attention.masks: one rule per mask, equal in every form (dense, FlexAttention, block mask).

FlexAttention runs uncompiled (its eager form, which materializes the scores) on tiny shapes:
compiling it costs seconds per call on a CPU, and the benchmark times the compiled form.
"""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from _inputs import NON_BOOLS, qkv, refuses_non_bool
from torch.nn.attention.flex_attention import (
    AuxRequest,
    create_block_mask,
    create_mask,
    flex_attention,
)

from attention import alibi_bias, causal_mask, sliding_window_mask
from attention import masks as M

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")

T = 12
DOCS = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2, 2, 3, 3])
RULES = {
    "causal": M.causal(),
    "causal bottom-right": M.causal("bottom_right", T, T),
    "sliding window 4": M.sliding_window(4),
    "causal documents": M.and_masks(M.causal(), M.document(DOCS)),
    "documents": M.document(DOCS),
    "prefix LM 5": M.prefix_lm(5),
    "window 3 + 2 sinks": M.and_masks(M.causal(), M.or_masks(M.sliding_window(3), M.sinks(2))),
    "global tokens": M.global_tokens(torch.arange(T) % 6 == 0),
}


def written_out(name: str) -> torch.Tensor:
    """Each rule's (T, T) mask, written out element by element from its definition."""
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    same_doc = DOCS[:, None] == DOCS[None, :]
    is_global = torch.arange(T) % 6 == 0
    return {
        "causal": j <= i,
        "causal bottom-right": j <= i,
        "sliding window 4": (j <= i) & (j > i - 4),
        "causal documents": (j <= i) & same_doc,
        "documents": same_doc,
        "prefix LM 5": (j <= i) | (j < 5),
        "window 3 + 2 sinks": (j <= i) & ((j > i - 3) | (j < 2)),
        "global tokens": is_global[:, None] | is_global[None, :],
    }[name]


@pytest.mark.parametrize("name", sorted(RULES))
def test_dense_mask_is_the_definition_and_torchs_create_mask(name):
    dense = M.to_dense(RULES[name], T, T)
    assert dense.dtype == torch.bool and dense.shape == (T, T)
    assert torch.equal(dense, written_out(name))
    assert torch.equal(dense, create_mask(RULES[name], None, None, T, T, device="cpu")[0, 0])


def test_causal_rules_equal_the_package_masks_when_t_q_differs_from_t_k():
    for alignment in ("top_left", "bottom_right"):
        rule = M.causal(alignment, 5, 9)
        assert torch.equal(M.to_dense(rule, 5, 9), causal_mask(5, 9, alignment=alignment))
    window = M.sliding_window(3, "bottom_right", 5, 9)
    assert torch.equal(M.to_dense(window, 5, 9), sliding_window_mask(5, 9, 3, alignment="bottom_right"))


def test_batch_dependent_rules_give_one_mask_per_row():
    lengths = torch.tensor([3, 7])
    dense = M.to_dense(M.padding(lengths), 7, 7, b=2)  # (b, 1, t, t)
    assert dense.shape == (2, 1, 7, 7)
    assert torch.equal(dense[:, 0, 0], torch.arange(7)[None, :] < lengths[:, None])
    docs = torch.stack([DOCS, DOCS.flip(0)])  # (b, t)
    dense = M.to_dense(M.document(docs), T, T, b=2)
    assert torch.equal(dense[1, 0], docs[1][:, None] == docs[1][None, :])
    assert torch.equal(dense, create_mask(M.document(docs), 2, None, T, T, device="cpu"))


@pytest.mark.parametrize("name", ["causal", "causal documents", "prefix LM 5",
                                  "window 3 + 2 sinks", "global tokens"])
def test_flex_attention_with_block_mask_equals_sdpa_with_dense_mask(name):
    q, k, v = qkv((2, 3, T, 8))
    rule = RULES[name]
    block_mask = create_block_mask(rule, None, None, T, T, device="cpu", BLOCK_SIZE=4)
    flex = flex_attention(q, k, v, block_mask=block_mask)
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=M.to_dense(rule, T, T))
    torch.testing.assert_close(flex, sdpa, rtol=0, atol=1e-12)
    torch.testing.assert_close(M.dense_attention(q, k, v, mask_mod=rule), sdpa, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", sorted(RULES))
@pytest.mark.parametrize("block_size", [4, 5])
def test_block_sparsity_is_the_block_mask(name, block_size):
    kinds = M.block_sparsity(RULES[name], T, T, block_size)  # (T_q, T_k): 0, 1, 2
    block_mask = create_block_mask(RULES[name], None, None, T, T, device="cpu",
                                   BLOCK_SIZE=block_size)
    assert kinds.shape == (math.ceil(T / block_size),) * 2
    assert torch.equal((kinds == 1).sum(-1), block_mask.kv_num_blocks[0, 0].long())
    assert torch.equal((kinds == 2).sum(-1), block_mask.full_kv_num_blocks[0, 0].long())


def test_block_sparsity_of_causal_by_hand():
    assert M.block_sparsity(M.causal(), 8, 8, 4).tolist() == [[1, 0], [2, 1]]
    # t = 6 in tiles of 4: the last tiles overhang the end, so none of them is full
    assert M.block_sparsity(M.causal(), 6, 6, 4).tolist() == [[1, 0], [1, 1]]


def test_score_mods_equal_flex_attention_and_the_written_out_computation():
    q, k, v = qkv((2, 3, T, 8))
    g = torch.Generator().manual_seed(1)
    table = torch.randn(32, 3, generator=g, dtype=torch.float64)
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    biases = {"alibi": alibi_bias(3, T, T).double(),
              "t5": table[M.t5_buckets(j - i)].permute(2, 0, 1)}  # (h, t, t)
    for name, mod in (("alibi", M.alibi(3)), ("t5", M.t5_bias(table))):
        sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=biases[name])
        torch.testing.assert_close(flex_attention(q, k, v, score_mod=mod), sdpa, rtol=0, atol=1e-12)
        torch.testing.assert_close(M.to_bias(mod, T, T, 3, dtype=torch.float64), biases[name],
                                   rtol=0, atol=1e-12)
    for dtype in (torch.float32, torch.bfloat16):  # a rule that adds passes in every dtype
        M.to_bias(M.alibi(3), 64, 64, 3, b=2, dtype=dtype)
    scores = q @ k.transpose(-2, -1) / math.sqrt(8)
    capped = torch.softmax(2.0 * torch.tanh(scores / 2.0), dim=-1) @ v
    torch.testing.assert_close(flex_attention(q, k, v, score_mod=M.soft_cap(2.0)), capped,
                               rtol=0, atol=1e-12)


def test_a_learnable_soft_cap_gets_its_gradient():
    q, k, v = qkv((1, 2, 5, 4), dtype=torch.float64, seed=0)
    cap = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    M.dense_attention(q, k, v, score_mod=M.soft_cap(cap)).sum().backward()
    scores = (q @ k.transpose(-2, -1) / 2.0).detach()  # d_k = 4
    fixed = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    (torch.softmax(fixed * torch.tanh(scores / fixed), dim=-1) @ v).sum().backward()
    torch.testing.assert_close(cap.grad, fixed.grad, rtol=1e-12, atol=0)
    assert cap.grad != 0


def test_alibi_offset_puts_the_queries_after_a_cache():
    """alibi(h, offset=t_k - t_q) is alibi_bias's bottom-right bias: query i sits at t_k - t_q + i."""
    t_q, t_k = 3, 7
    bias = M.to_bias(M.alibi(3, offset=t_k - t_q), t_q, t_k, 3, dtype=torch.float64)
    torch.testing.assert_close(bias, alibi_bias(3, t_q, t_k).double(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_t5_bias_follows_the_scores_dtype_not_the_tables(dtype):
    """A float64 table added to float32 scores must not promote them (nor to_bias) to float64."""
    table = torch.randn(32, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    bias = M.to_bias(M.t5_bias(table), 4, 6, 2, dtype=dtype)
    i, j = torch.arange(4)[:, None], torch.arange(6)[None, :]
    assert bias.dtype == dtype
    assert torch.equal(bias, table.to(dtype)[M.t5_buckets(j - i)].permute(2, 0, 1))


def test_score_and_mask_together_with_the_log_sum_exp():
    q, k, v = qkv((2, 3, T, 8))
    rule = RULES["causal documents"]
    block_mask = create_block_mask(rule, None, None, T, T, device="cpu", BLOCK_SIZE=4)
    out, aux = flex_attention(q, k, v, score_mod=M.alibi(3), block_mask=block_mask,
                              return_aux=AuxRequest(lse=True))
    ours, lse = M.dense_attention(q, k, v, score_mod=M.alibi(3), mask_mod=rule, return_lse=True)
    torch.testing.assert_close(out, ours, rtol=0, atol=1e-12)
    torch.testing.assert_close(aux.lse, lse, rtol=0, atol=1e-12)


def test_a_query_that_sees_nothing_gets_zero_and_minus_infinite_lse():
    q, k, v = qkv((2, 3, 4, 8))
    nothing_for_row_1 = M.and_masks(M.causal(), lambda b, h, q_idx, kv_idx: q_idx != 1)
    out, lse = M.dense_attention(q, k, v, mask_mod=nothing_for_row_1, return_lse=True)
    assert torch.equal(out[:, :, 1], torch.zeros_like(out[:, :, 1]))
    assert bool((lse[:, :, 1] == -math.inf).all()) and bool(lse[:, :, [0, 2, 3]].isfinite().all())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_dense_attention_in_half_precision_is_the_exact_answer_rounded_once(dtype):
    """float32 scores, softmax and sums, rounded once, as test_half_precision asks of the kernels.

    The reference is torch's SDPA in float64 on the same rounded inputs; the bound is 1.2x the
    error of rounding that reference once to ``dtype`` (a bfloat16 softmax and sum miss it).
    """
    q, k, v = qkv((1, 2, 113, 32), (1, 2, 203, 32), dtype=torch.float32, to=dtype)
    out, lse = M.dense_attention(q, k, v, mask_mod=M.causal(), return_lse=True)
    exact = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    assert out.dtype == dtype
    error, rounding = ((x.double() - exact).abs().max().item() for x in (out, exact.to(dtype)))
    assert error <= 1.2 * rounding, f"error {error:.3g} > 1.2 x rounding once {rounding:.3g}"
    scores = q.double() @ k.double().transpose(-2, -1) / math.sqrt(32)
    exact_lse = scores.masked_fill(~causal_mask(113, 203), -math.inf).logsumexp(-1)
    assert (lse.double() - exact_lse).abs().max().item() <= 1e-5


def page_bucket(n: int, num_buckets: int = 32, max_distance: int = 128) -> int:
    """Equation (8.11) as chapter 8 writes it: the bucket of a key n >= 0 tokens back."""
    exact = num_buckets // 2
    if n < exact:
        return n
    log_ratio = math.log(n / exact) / math.log(max_distance / exact)
    return min(num_buckets - 1, exact + int(log_ratio * (num_buckets - exact)))


def test_t5_buckets_follow_equation_8_11():
    n = torch.arange(1000)
    assert M.t5_buckets(-n).tolist() == [page_bucket(x) for x in range(1000)]
    assert M.t5_buckets(n[1:]).tolist() == [0] * 999  # a decoder: later keys share bucket 0
    both = M.t5_buckets(torch.arange(-200, 201), bidirectional=True)
    assert both[200 - 5].item() == page_bucket(5, 16) and both[200 + 5].item() == 16 + 5
    assert set(both.tolist()) == set(range(32)) - {16}  # offset 0 is in the first half


@pytest.mark.parametrize(("offsets", "num_buckets", "max_distance", "bidirectional", "expected"), [
    ([-64, -16, -8], 9, 128, False, [8, 6, 5]),  # exact = 4: log(64 / 4) / log(128 / 4) · 5 = 4
    ([-12], 19, 16, False, [14]),
    ([-16, 8, 16], 18, 128, True, [6, 14, 15]),
])
def test_t5_buckets_are_those_of_transformers_float32_logarithm(
        offsets, num_buckets, max_distance, bidirectional, expected):
    """Mesh TensorFlow and transformers take the logarithm in float32; where the ratio is a whole
    number of buckets, float64's log(a) / log(b) fell just below it and int() gave the bucket
    before (7, 5, 4 for the first row)."""
    got = M.t5_buckets(torch.tensor(offsets), num_buckets, max_distance, bidirectional)
    assert got.tolist() == expected


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16])
def test_t5_buckets_of_small_integer_offsets_are_those_of_int64(dtype: torch.dtype) -> None:
    # Computed in the input's dtype, a uint8 offset 2 was negated to 254 (a far bucket instead
    # of a decoder's 0), -128 stayed -128 in int8, and an encoder's 300 buckets wrapped in int8.
    low = 0 if dtype == torch.uint8 else int(torch.iinfo(dtype).min)
    offsets = torch.arange(low, int(torch.iinfo(dtype).max) + 1).clamp(-1000, 1000)
    for num_buckets, bidirectional in [(32, False), (300, True)]:
        expected = M.t5_buckets(offsets, num_buckets, 1000, bidirectional)
        got = M.t5_buckets(offsets.to(dtype), num_buckets, 1000, bidirectional)
        assert torch.equal(got.long(), expected) and got.dtype == torch.int64


@pytest.mark.parametrize(("b", "h"), [(None, None), (2, None), (None, 3), (2, 3)])
def test_to_dense_keeps_the_batch_and_head_dimensions_whenever_one_is_asked_for(b, h):
    """(t_q, t_k) only when b and h are both None; else (b or 1, h or 1, t_q, t_k), row by row."""
    per_row_and_head = lambda bb, hh, i, j: j <= i + hh - bb  # noqa: E731  # a rule of b and h
    dense = M.to_dense(per_row_and_head, 4, 6, b=b, h=h)
    i, j = torch.arange(4)[:, None], torch.arange(6)[None, :]
    if b is None and h is None:
        assert torch.equal(dense, j <= i)
        return
    assert dense.shape == (b or 1, h or 1, 4, 6)
    for bb in range(b or 1):
        for hh in range(h or 1):
            assert torch.equal(dense[bb, hh], j <= i + hh - bb)


def test_and_masks_intersect_and_or_masks_unite():
    rule_a, rule_b = RULES["sliding window 4"], RULES["prefix LM 5"]
    dense_a, dense_b = M.to_dense(rule_a, T, T), M.to_dense(rule_b, T, T)
    assert torch.equal(M.to_dense(M.and_masks(rule_a, rule_b), T, T), dense_a & dense_b)
    assert torch.equal(M.to_dense(M.or_masks(rule_a, rule_b), T, T), dense_a | dense_b)
    assert bool(M.to_dense(M.and_masks(), 3, 3).all()) and not M.to_dense(M.or_masks(), 3, 3).any()
    # a rule may answer with a Python bool, as torch's own and_masks and or_masks take
    everyone, no_one = (lambda b, h, q, k: True), (lambda b, h, q, k: False)
    assert torch.equal(M.to_dense(M.and_masks(everyone, rule_a), T, T), dense_a)
    assert torch.equal(M.to_dense(M.or_masks(no_one, rule_a), T, T), dense_a)


@pytest.mark.parametrize(("b", "t_q", "t_k"), [(2, 0, 5), (2, 5, 0), (2, 0, 0), (0, 5, 5)])
def test_empty_sizes_give_empty_masks_and_sdpas_answer_as_causal_mask_does(b, t_q, t_k):
    """No queries, no keys or no batch rows: every form of a rule is empty, as causal_mask is,
    and dense_attention gives SDPA's answer (rows of 0 where there is no key)."""
    assert M.to_dense(M.causal(), t_q, t_k).shape == causal_mask(t_q, t_k).shape == (t_q, t_k)
    assert M.to_dense(M.causal("bottom_right", t_q, t_k), t_q, t_k, b=b).shape == (b, 1, t_q, t_k)
    assert M.to_dense(M.sliding_window(2), t_q, t_k).shape == (t_q, t_k)
    assert M.block_sparsity(M.causal(), t_q, t_k, 2, b=b).shape == (b, 1, -(-t_q // 2), -(-t_k // 2))
    assert M.to_bias(M.alibi(3), t_q, t_k, 3, b=b).shape == (b, 3, t_q, t_k)
    q, k, v = qkv((b, 3, t_q, 8), (b, 3, t_k, 8))
    want = F.scaled_dot_product_attention(q, k, v)
    got = M.dense_attention(q, k, v, score_mod=M.alibi(3), mask_mod=M.sliding_window(2))
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_alibi_follows_the_scores_device():
    """The slopes move to the scores' device (meta here; a GPU in use), not only to their dtype."""
    scores = torch.zeros(1, 2, 3, 3, device="meta")
    assert M.apply_score_mod(scores, M.alibi(2)).device == scores.device
    assert M.apply_score_mod(scores, M.t5_bias(torch.zeros(32, 2))).device == scores.device
    q = torch.zeros(1, 2, 3, 8, device="meta")
    assert M.dense_attention(q, q, q, score_mod=M.alibi(2)).device == scores.device


def test_sink_window_is_the_definition_and_no_query_sees_a_later_sink():
    """Query i sees key j <= i when i - w < j or j < n_sink: query 0 does not see sinks 1 and 2."""
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    expected = (j <= i) & ((j > i - 2) | (j < 3))
    assert torch.equal(M.to_dense(M.sink_window(2, num_sinks=3), T, T), expected)
    assert torch.equal(M.to_dense(M.sink_window(2), T, T), M.to_dense(M.sliding_window(2), T, T))


def test_block_sparsity_with_a_pair_of_block_sizes_is_the_block_mask():
    """block_size=(B_q, B_k): query tiles of B_q rows, key tiles of B_k columns, as in torch."""
    t_q, t_k = 6, 12
    kinds = M.block_sparsity(M.causal(), t_q, t_k, block_size=(2, 4))
    assert kinds.tolist() == [[1, 0, 0], [1, 0, 0], [2, 1, 0]]  # (T_q, T_k) = (3, 3)
    block_mask = create_block_mask(M.causal(), None, None, t_q, t_k, device="cpu", BLOCK_SIZE=(2, 4))
    assert torch.equal((kinds == 1).sum(-1), block_mask.kv_num_blocks[0, 0].long())
    assert torch.equal((kinds == 2).sum(-1), block_mask.full_kv_num_blocks[0, 0].long())


def test_counts_may_be_numpy_integers_as_sizes_may():
    # check_sizes took np.int64 and check_counts refused it: "num_sinks must be an integer >= 0,
    # got np.int64(2)", a message that named an integer.
    n, t = np.int64(2), np.int64(5)
    assert torch.equal(M.to_dense(M.sinks(n), t, t), M.to_dense(M.sinks(2), 5, 5))
    assert torch.equal(M.to_dense(M.prefix_lm(n), t, t), M.to_dense(M.prefix_lm(2), 5, 5))
    assert torch.equal(causal_mask(n, t), causal_mask(2, 5))
    assert torch.equal(sliding_window_mask(n, t, 2), sliding_window_mask(2, 5, 2))


def test_dense_attention_scale_multiplies_the_scores():
    q, k, v = qkv((2, 3, T, 8))
    out, lse = M.dense_attention(q, k, v, mask_mod=M.causal(), scale=0.3, return_lse=True)
    torch.testing.assert_close(
        out, F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3), rtol=0, atol=1e-12
    )
    scores = (q @ k.transpose(-2, -1) * 0.3).masked_fill(~causal_mask(T, T), -math.inf)
    torch.testing.assert_close(lse, scores.logsumexp(-1), rtol=0, atol=1e-12)


def test_dense_attention_default_scale_is_one_over_sqrt_d_k_not_d_v():
    q, k, v = qkv((2, 3, T, 16), (2, 3, T, 16), (2, 3, T, 4))  # d_k = 16, d_v = 4
    out, lse = M.dense_attention(q, k, v, mask_mod=M.causal(), return_lse=True)
    torch.testing.assert_close(
        out, F.scaled_dot_product_attention(q, k, v, is_causal=True), rtol=0, atol=1e-12
    )
    scores = (q @ k.transpose(-2, -1) / 4.0).masked_fill(~causal_mask(T, T), -math.inf)
    torch.testing.assert_close(lse, scores.logsumexp(-1), rtol=0, atol=1e-12)


def test_dense_attention_hides_keys_after_the_score_mod_not_before():
    """A soft cap of -inf is -cap, a finite score: masking first would let hidden keys back in."""
    q, k, v = qkv((2, 3, T, 8))
    out = M.dense_attention(q, k, v, score_mod=M.soft_cap(2.0), mask_mod=M.causal())
    scores = 2.0 * torch.tanh(q @ k.transpose(-2, -1) / math.sqrt(8) / 2.0)
    expected = torch.softmax(scores.masked_fill(~causal_mask(T, T), -math.inf), dim=-1) @ v
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
    block_mask = create_block_mask(M.causal(), None, None, T, T, device="cpu", BLOCK_SIZE=4)
    flex = flex_attention(q, k, v, score_mod=M.soft_cap(2.0), block_mask=block_mask)
    torch.testing.assert_close(out, flex, rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_dense_attention_weights_sum_to_one_past_float32_lse_precision(dtype):
    """Four tied scores of 1e8: a float32 lse of 1e8 + log 4 rounds to 1e8, so weights
    exp(s - lse) of 1 each would give the sum of the values (6), not their mean (1.5)."""
    q, k = torch.full((1, 1, 1, 1), 1e4, dtype=dtype), torch.full((1, 1, 4, 1), 1e4, dtype=dtype)
    v = torch.arange(4.0, dtype=dtype).view(1, 1, 4, 1)
    out = M.dense_attention(q, k, v, scale=1.0)
    assert out.item() == F.scaled_dot_product_attention(q, k, v, scale=1.0).item() == 1.5


def test_block_sparsity_takes_numpy_block_sizes():
    want = M.block_sparsity(M.causal(), 8, 8, block_size=(2, 4))
    assert torch.equal(M.block_sparsity(M.causal(), 8, 8, block_size=(np.int64(2), np.int32(4))), want)


class TestBadInput:
    @pytest.mark.parametrize(
        ("call", "message"),
        [
            (lambda: M.to_dense(None, 2, 2), r"mask_mod must be a callable rule.*got NoneType"),
            (lambda: M.and_masks(M.causal(), None), r"mask_mods\[1\] must be a callable rule.*got NoneType"),
            (lambda: M.or_masks("causal"), r"mask_mods\[0\] must be a callable rule.*got str"),
            (lambda: M.visible(None, torch.arange(2), torch.arange(2)), r"mask_mod must be a callable"),
            (lambda: M.apply_score_mod(torch.zeros(1, 1, 2, 2), 3.0), r"score_mod must be a callable rule.*float"),
            # i - j: a number, not an answer; it was read as "nonzero is visible"
            (lambda: M.to_dense(lambda b, h, i, j: i - j, 3, 3), r"mask_mod must answer True or False.*torch\.int64"),
            (lambda: M.visible(lambda b, h, i, j: i - j, torch.arange(2), torch.arange(2)),
             r"mask_mod must answer True or False.*torch\.int64"),
        ],
    )
    def test_rules_are_callables_and_mask_rules_answer_with_bools(self, call, message):
        # None raised Python's TypeError ("'NoneType' object is not callable")
        with pytest.raises(ValueError, match=message):
            call()

    @pytest.mark.parametrize(
        ("sizes", "message"),
        [
            ({"h": -1}, r"h must be an integer >= 0, got -1"),
            ({"t_q": 2.0}, r"t_q must be an integer >= 0, got 2\.0"),
            ({"b": -1}, r"b must be an integer >= 0, got -1"),
        ],
    )
    def test_to_bias_sizes_must_be_counts(self, sizes, message):
        # torch.zeros raised its RuntimeError or TypeError before any check
        with pytest.raises(ValueError, match=message):
            M.to_bias(M.alibi(1), **({"t_q": 2, "t_k": 2, "h": 1} | sizes))

    @pytest.mark.parametrize("block_size", [(2,), (1, 2, 3), None, 2.0])
    def test_block_sparsity_block_size_is_an_integer_or_a_pair(self, block_size):
        # (2,) and (1, 2, 3) failed in tuple unpacking, with a message naming neither
        with pytest.raises(ValueError, match=r"block_size must be an integer >= 1 or a pair of them, got "):
            M.block_sparsity(M.causal(), 4, 4, block_size)

    @pytest.mark.parametrize("rule", [
        lambda s, b, h, i, j: s * s,  # 0 at s = 0 and 1 at s = 1: a probe of 0 and 1 alone passes it
        lambda s, b, h, i, j: s * (i + 1),  # adds at query 0 only
        lambda s, b, h, i, j: s + (s > 1.0) * 0.5,  # adds a term that depends on the score
        M.soft_cap(50.0),
        # adds exactly at every probe of ADDITIVITY_PROBES (sin(2 pi s) = 0 there): only the
        # scores that differ from pair to pair catch it
        lambda s, b, h, i, j: s + torch.sin(2 * math.pi * s),
    ])
    def test_to_bias_refuses_a_rule_that_does_not_add(self, rule):
        with pytest.raises(ValueError, match=r"score_mod must add a term .* got xi\(s\) - xi\(0\) = "):
            M.to_bias(rule, 5, 7, 2)

    @pytest.mark.parametrize("call, message", [
        (lambda: M.causal("bottom_left"), r"alignment must be one of .*got 'bottom_left'"),
        (lambda: M.causal("bottom_right"), r"needs t_q and t_k.*got t_q=None"),
        (lambda: M.sliding_window(0), r"window must be at least 1, got 0"),
        (lambda: M.document(torch.zeros(2, 2, 2, dtype=torch.long)),
         r"doc_ids must be a 1-d or 2-d.*got \(2, 2, 2\) of torch\.int64"),
        (lambda: M.document(torch.zeros(4)), r"doc_ids must be .* integer tensor, got \(4,\) of torch.float32"),
        (lambda: M.padding(torch.tensor([[3]])), r"lengths must be a 1-d integer tensor.*got \(1, 1\) of torch\.int64"),
        (lambda: M.prefix_lm(-1), r"prefix_length must be an integer >= 0, got -1"),
        (lambda: M.sinks(1.5), r"num_sinks must be an integer >= 0, got 1.5"),
        # a position: 1.5 gave fractional distances, True was 1, a str failed in the rule
        (lambda: M.alibi(2, offset=1.5), r"offset must be an integer \(the position of query 0\), got 1\.5"),
        (lambda: M.alibi(2, offset=True), r"offset must be an integer .*got True"),
        (lambda: M.alibi(2, offset="3"), r"offset must be an integer .*got '3'"),
        (lambda: M.global_tokens(torch.tensor([0, 1])),
         r"is_global must be a 1-d bool tensor.*got \(\(2,\), torch\.int64\)"),
        (lambda: M.soft_cap(0), r"cap must be a finite number > 0, got 0"),
        (lambda: M.to_bias(M.alibi(2), 2, 2, h=2, dtype=torch.int64), r"dtype must be a floating-point dtype, got torch.int64"),
        (lambda: M.apply_score_mod([[0.0]], M.alibi(1)), r"scores must be \(b, h, t_q, t_k\), got shape list"),
        # a rule made for fewer tokens (doc_ids of 3) or sequences (lengths of 2)
        (lambda: M.to_dense(M.document(torch.tensor([0, 0, 1])), 5, 5),
         r"mask_mod must hold a value for every index of b=None, h=None, t_q=5, t_k=5, got a rule"),
        (lambda: M.to_dense(M.padding(torch.tensor([1, 2])), 2, 2, b=3),
         r"every index of b=3, h=None, t_q=2, t_k=2, got a rule that indexes past a tensor"),
        (lambda: M.soft_cap(math.inf), r"cap must be a finite number > 0, got inf"),
        (lambda: M.t5_bias(torch.zeros(16, 2)), r"table must have shape \(num_buckets=32, h\), got \(16, 2\)"),
        # log(max_distance / exact) = 0: buckets of -9.2e18; one bucket: a division by zero
        (lambda: M.t5_buckets(-torch.arange(20), 32, 16), r"max_distance must exceed the 16 exact buckets, got 16"),
        (lambda: M.t5_buckets(-torch.arange(5), 1), r"num_buckets must be at least 2, got 1"),
        (lambda: M.t5_bias(torch.zeros(2, 1), 2, 8, bidirectional=True),
         r"num_buckets must be at least 4 \(bidirectional\), got 2"),
        (lambda: M.t5_buckets(-torch.arange(5.0), 8, 32), r"relative_position must be an integer tensor, got torch.float32"),
        (lambda: M.t5_buckets(torch.arange(5) > 2, 8, 32), r"relative_position must be an integer tensor, got torch.bool"),
        (lambda: M.to_dense(M.causal(), -1, 3), r"t_q must be an integer >= 0, got -1"),
        (lambda: M.causal("bottom_right", 2, -3), r"t_k must be an integer >= 0, got -3"),
        (lambda: M.apply_score_mod(torch.zeros(1, 4, 2, 2), M.alibi(2)),
         r"alibi\(num_heads=2\) applied to scores with h=4 heads"),
        (lambda: M.to_bias(M.alibi(1), 2, 2, h=2), r"alibi\(num_heads=1\) applied to scores with h=2"),
        (lambda: M.dense_attention(*qkv((1, 2, 4, 8)), score_mod=M.alibi(4)),
         r"alibi\(num_heads=4\) applied to scores with h=2 heads"),
        (lambda: M.to_bias(M.t5_bias(torch.zeros(32, 2)), 3, 3, h=4),
         r"t5_bias\(table of h=2 heads\) applied to scores with h=4 heads"),
        (lambda: M.block_sparsity(M.causal(), 4, 4, 0), r"block_size must be an integer >= 1 or a pair of them, got 0"),
        (lambda: M.to_bias(M.soft_cap(5.0), 3, 3, 1),
         r"score_mod must add a term.*got xi\(s\) - xi\(0\) = -4\.99994 for s = -30"),
        (lambda: M.apply_score_mod(torch.zeros(3, 3), M.alibi(1)),
         r"scores must be \(b, h, t_q, t_k\).*got shape \(3, 3\)"),
        (lambda: M.dense_attention(*qkv((2, 3, T, 8), (2, 3, 5, 8))[:2], torch.zeros(2, 3, 4, 8, dtype=torch.float64)),
         r"same number of tokens t_k, got 5 and 4"),
        (lambda: M.dense_attention(*qkv((2, 4, T, 8), (2, 2, T, 8))),
         r"leading dimensions of query, key and value must broadcast, got \(2, 4\), \(2, 2\)"),
        (lambda: M.dense_attention(*qkv((3, T, 8))), r"query must be \(b, h, t, d\), got shape \(3, 12, 8\)"),
        # a list was an AttributeError, (t, 1) positions broadcast to (2, 3), 0.5 was a position
        (lambda: M.visible(M.causal(), [0, 1], torch.arange(3)),
         r"query_pos must be a 1-d integer tensor, got list"),
        (lambda: M.visible(M.causal(), torch.arange(2), torch.arange(3)[:, None]),
         r"key_pos must be a 1-d integer tensor, got \(3, 1\) of torch\.int64"),
        (lambda: M.visible(M.causal(), torch.tensor([0.5, 1.5]), torch.arange(3)),
         r"query_pos must be a 1-d integer tensor, got \(2,\) of torch\.float32"),
    ])
    def test_each_rule_checks_its_arguments(self, call, message):
        with pytest.raises(ValueError, match=message):
            call()

    @pytest.mark.parametrize("value", NON_BOOLS)
    @pytest.mark.parametrize(
        ("flag", "call"),
        [
            ("return_lse", lambda value: M.dense_attention(*qkv((1, 2, 4, 8)), return_lse=value)),
            ("bidirectional", lambda value: M.t5_buckets(torch.arange(4), bidirectional=value)),
            ("bidirectional", lambda value: M.t5_bias(torch.zeros(32, 2), bidirectional=value)),
        ],
        ids=["dense_attention", "t5_buckets", "t5_bias"],
    )
    def test_flags_must_be_bools(self, flag: str, call, value: object) -> None:
        with refuses_non_bool(flag, value):
            call(value)
