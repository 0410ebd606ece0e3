"""attention.functional: softmax, masks and scaled dot-product attention vs the book and torch."""

import re

import pytest
import torch
import torch.nn.functional as F
from _inputs import NON_BOOLS, gqa_half_grad_errors, mask_dtypes, qkv, refuses_non_bool
from _reference import book_tensor
from torch import Tensor
from torch.autograd import gradcheck

from attention import (
    SelfAttentionV1,
    SelfAttentionV2,
    additive_causal_mask,
    attention_weights,
    causal_mask,
    journey_inputs,
    scaled_dot_product_attention,
    sliding_window_mask,
    softmax,
    softmax_naive,
)

# Printed by the book's notebook ("Approach #1" and "Approach #3"): tests/package/_reference.py.
BOOK_SIMPLE_WEIGHTS = book_tensor("BOOK_SIMPLE_WEIGHTS")
BOOK_SIMPLE_CONTEXT = book_tensor("BOOK_SIMPLE_CONTEXT")
BOOK_CAUSAL_WEIGHTS = book_tensor("BOOK_CAUSAL_WEIGHTS")
BOOK_CAUSAL_WEIGHTS_DROPOUT = book_tensor("BOOK_CAUSAL_WEIGHTS_DROPOUT")
BOOK_CAUSAL_CONTEXT = book_tensor("BOOK_CAUSAL_CONTEXT")


def book_causal_qkv() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Queries and keys of seed-789 SelfAttentionV2, values of seed-123 SelfAttentionV1.

    The book's causal example mixes them this way, so its printed context vectors do too.
    """
    inputs = journey_inputs()
    torch.manual_seed(123)
    v1 = SelfAttentionV1(3, 2)
    torch.manual_seed(789)
    v2 = SelfAttentionV2(3, 2)
    with torch.no_grad():
        return v2.W_query(inputs), v2.W_key(inputs), inputs @ v1.W_value


# --- softmax ---------------------------------------------------------------------------------


def test_softmax_naive_matches_book_on_small_scores() -> None:
    inputs = journey_inputs()
    scores = inputs @ inputs[1]  # the book's omega_2
    expected = torch.tensor([0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581])
    torch.testing.assert_close(softmax_naive(scores, dim=0), expected, atol=1e-4, rtol=0)


def test_naive_softmax_overflows_where_stable_softmax_does_not() -> None:
    logits = torch.tensor([1000.0, 1001.0, 1002.0])
    assert torch.isnan(softmax_naive(logits, dim=0)).all()
    stable = softmax(logits, dim=0)
    assert torch.isfinite(stable).all()
    torch.testing.assert_close(stable, torch.softmax(logits, dim=0))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_equals_torch(dim: int) -> None:
    x = torch.randn(4, 5, 6, dtype=torch.float64) * 30
    torch.testing.assert_close(softmax(x, dim=dim), torch.softmax(x, dim=dim))


@pytest.mark.parametrize("dim", [0, -1])
def test_softmax_of_a_0d_tensor_is_torchs_one(dim: int) -> None:
    x = torch.tensor(2.5, dtype=torch.float64)
    assert softmax(x, dim=dim).shape == () and softmax(x, dim=dim).item() == torch.softmax(x, dim).item() == 1.0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_softmax_is_computed_in_float32_and_rounded_once(dtype: torch.dtype) -> None:
    # as torch.softmax computes it; rounded at every step, the small weights lost most digits
    torch.manual_seed(0)
    x = (torch.randn(256, 64, dtype=torch.float64) * 3).to(dtype)
    ours = softmax(x, dim=-1)
    assert ours.dtype == dtype
    torch.testing.assert_close(ours, torch.softmax(x.float(), dim=-1).to(dtype))


def test_softmax_of_all_minus_inf_row_is_zero_with_finite_gradient() -> None:
    x = torch.tensor([[1.0, 2.0, float("-inf")], [float("-inf")] * 3], requires_grad=True)
    out = softmax(x, dim=-1)
    torch.testing.assert_close(out[1], torch.zeros(3))
    torch.testing.assert_close(out[0], torch.softmax(x[0].detach(), dim=-1))
    out.sum().backward()
    assert torch.isfinite(x.grad).all()


# --- masks -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("t_q", "t_k"), [(4, 4), (3, 5), (5, 3), (1, 4)])
def test_causal_mask_aligned_like_torch_is_causal(t_q: int, t_k: int) -> None:
    q, k, v = (torch.randn(2, t, 4, dtype=torch.float64) for t in (t_q, t_k, t_k))
    mask = causal_mask(t_q, t_k)
    assert mask.dtype == torch.bool and mask.shape == (t_q, t_k)
    torch.testing.assert_close(
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        F.scaled_dot_product_attention(q, k, v, is_causal=True),
    )


@pytest.mark.parametrize(("t_q", "t_k"), [(4, 6), (6, 4), (5, 5), (1, 3)])
def test_masks_equal_the_definition_j_at_most_i(t_q: int, t_k: int) -> None:
    """Query i may attend to key j exactly when j <= i, written out entry by entry."""
    expected = [[j <= i for j in range(t_k)] for i in range(t_q)]
    assert causal_mask(t_q, t_k).tolist() == expected
    m = additive_causal_mask(t_q, t_k, dtype=torch.float64)
    assert m.dtype == torch.float64 and m.shape == (t_q, t_k)
    assert m.tolist() == [[0.0 if ok else float("-inf") for ok in row] for row in expected]


@pytest.mark.parametrize(("t_q", "t_k"), [(0, 3), (3, 0), (0, 0)])
@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
def test_window_mask_of_no_queries_or_no_keys_is_empty_as_the_causal_mask(
    t_q: int, t_k: int, alignment: str
) -> None:
    mask = sliding_window_mask(t_q, t_k, 2, alignment=alignment)
    assert mask.dtype == torch.bool and mask.shape == causal_mask(t_q, t_k).shape == (t_q, t_k)


# --- the book's figures ----------------------------------------------------------------------


def test_simplified_attention_reproduces_book() -> None:
    inputs = journey_inputs()
    weights = attention_weights(inputs, inputs, scale=1.0)
    context = scaled_dot_product_attention(inputs, inputs, inputs, scale=1.0)
    torch.testing.assert_close(weights, BOOK_SIMPLE_WEIGHTS, atol=1e-4, rtol=0)
    torch.testing.assert_close(context, BOOK_SIMPLE_CONTEXT, atol=1e-4, rtol=0)


def test_causal_attention_reproduces_book() -> None:
    queries, keys, values = book_causal_qkv()
    weights = attention_weights(queries, keys, is_causal=True)
    torch.testing.assert_close(weights, BOOK_CAUSAL_WEIGHTS, atol=1e-4, rtol=0)
    context = scaled_dot_product_attention(queries, keys, values, is_causal=True)
    torch.testing.assert_close(context, BOOK_CAUSAL_CONTEXT, atol=1e-4, rtol=0)
    torch.manual_seed(123)  # the book seeds its dropout with 123
    dropped = attention_weights(queries, keys, is_causal=True, dropout_p=0.5)
    torch.testing.assert_close(dropped, BOOK_CAUSAL_WEIGHTS_DROPOUT, atol=1e-4, rtol=0)


# --- equal to torch's scaled_dot_product_attention --------------------------------------------


def _f64(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.float64)


SDPA_CASES = {
    "no mask, 4-d": dict(q=(2, 3, 5, 8), k=(2, 3, 7, 8), v=(2, 3, 7, 4)),
    "3-d": dict(q=(2, 5, 8), k=(2, 7, 8), v=(2, 7, 8)),
    "2-d": dict(q=(5, 8), k=(7, 8), v=(7, 3)),
    "bool mask (t_q, t_k)": dict(q=(2, 3, 5, 8), k=(2, 3, 7, 8), v=(2, 3, 7, 8), bool_mask=(5, 7)),
    "bool mask (b, 1, 1, t_k)": dict(
        q=(2, 3, 5, 8), k=(2, 3, 7, 8), v=(2, 3, 7, 8), bool_mask=(2, 1, 1, 7)
    ),
    "float mask (b, h, t_q, t_k)": dict(
        q=(2, 3, 5, 8), k=(2, 3, 7, 8), v=(2, 3, 7, 8), float_mask=(2, 3, 5, 7)
    ),
    "float mask (1, t_k)": dict(q=(2, 5, 8), k=(2, 7, 8), v=(2, 7, 8), float_mask=(1, 7)),
    "causal": dict(q=(2, 3, 6, 8), k=(2, 3, 6, 8), v=(2, 3, 6, 8), is_causal=True),
    "causal t_q < t_k": dict(q=(2, 3, 4, 8), k=(2, 3, 9, 8), v=(2, 3, 9, 8), is_causal=True),
    "causal t_q > t_k": dict(q=(2, 3, 9, 8), k=(2, 3, 4, 8), v=(2, 3, 4, 8), is_causal=True),
    "custom scale": dict(q=(2, 5, 8), k=(2, 7, 8), v=(2, 7, 8), scale=0.37),
    "causal, custom scale": dict(q=(3, 5, 8), k=(3, 5, 8), v=(3, 5, 8), is_causal=True, scale=2.0),
}


@pytest.mark.parametrize("case", SDPA_CASES.values(), ids=SDPA_CASES.keys())
def test_sdpa_equals_torch_in_float64(case: dict) -> None:
    torch.manual_seed(0)
    q, k, v = _f64(*case["q"]), _f64(*case["k"]), _f64(*case["v"])
    kwargs = {"is_causal": case.get("is_causal", False), "scale": case.get("scale")}
    if "bool_mask" in case:
        kwargs["attn_mask"] = torch.rand(case["bool_mask"]) > 0.3
    if "float_mask" in case:
        kwargs["attn_mask"] = _f64(*case["float_mask"])
    ours = scaled_dot_product_attention(q, k, v, **kwargs)
    theirs = F.scaled_dot_product_attention(q, k, v, **kwargs)
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)


def test_fully_masked_rows_give_zeros_not_nan() -> None:
    q, k, v = _f64(2, 4, 8), _f64(2, 5, 8), _f64(2, 5, 8)
    mask = torch.ones(4, 5, dtype=torch.bool)
    mask[2] = False  # query 2 may see no key
    out = scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert not torch.isnan(out).any()
    torch.testing.assert_close(out[:, 2], torch.zeros(2, 8, dtype=torch.float64))
    float_mask = torch.zeros(4, 5, dtype=torch.float64).masked_fill(~mask, float("-inf"))
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v, attn_mask=float_mask), out)


def test_attention_weights_are_what_sdpa_applies_to_the_values() -> None:
    q, k, v = _f64(2, 3, 5, 8), _f64(2, 3, 5, 8), _f64(2, 3, 5, 4)
    weights = attention_weights(q, k, is_causal=True)
    assert weights.shape == (2, 3, 5, 5)
    torch.testing.assert_close(weights @ v, scaled_dot_product_attention(q, k, v, is_causal=True))


def test_dropout_is_applied_whenever_dropout_p_is_positive() -> None:
    q, k, v = _f64(1, 16, 8), _f64(1, 16, 8), _f64(1, 16, 8)
    torch.manual_seed(1)
    first = scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    second = scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    assert not torch.allclose(first, second)
    torch.manual_seed(1)
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v, dropout_p=0.5), first)


def test_sdpa_gradcheck_float64() -> None:
    q = _f64(2, 4, 3).requires_grad_()
    k = _f64(2, 5, 3).requires_grad_()
    v = _f64(2, 5, 2).requires_grad_()
    mask = _f64(4, 5).requires_grad_()
    def masked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return scaled_dot_product_attention(q, k, v, attn_mask=m)

    def causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return scaled_dot_product_attention(q, k, v, is_causal=True)

    assert gradcheck(masked, (q, k, v, mask))
    assert gradcheck(causal, (q, k, v))


# --- grouped-query attention (enable_gqa) and bottom-right causal alignment --------------------


@pytest.mark.parametrize(("h_k", "h_v"), [(6, 6), (3, 3), (1, 1), (2, 3)])
def test_enable_gqa_equals_torch(h_k: int, h_v: int) -> None:
    """Key and value heads each divide the query's 6; torch repeats each separately too."""
    torch.manual_seed(0)
    q = torch.randn(2, 6, 4, 5, dtype=torch.float64)
    k = torch.randn(2, h_k, 7, 5, dtype=torch.float64)
    v = torch.randn(2, h_v, 7, 3, dtype=torch.float64)
    mask = torch.randn(6, 4, 7, dtype=torch.float64)  # a float mask with one row per query head
    for kwargs in ({}, {"is_causal": True}, {"attn_mask": mask}):
        expected = F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kwargs)
        ours = scaled_dot_product_attention(q, k, v, enable_gqa=True, **kwargs)
        torch.testing.assert_close(ours, expected, atol=1e-12, rtol=0)
    weights = attention_weights(q, k, enable_gqa=True)  # (2, 6, 4, 7)
    for i in range(6):  # query head i uses key head i // (6 / h_k)
        expected = attention_weights(q[:, i], k[:, i // (6 // h_k)])
        torch.testing.assert_close(weights[:, i], expected, atol=0, rtol=0)


@pytest.mark.parametrize(("t_q", "t_k"), [(3, 5), (5, 3), (4, 4), (1, 6)])
def test_bottom_right_causal_mask_puts_the_queries_last(t_q: int, t_k: int) -> None:
    """The t_q queries are the last t_q of t_k positions (torch's ``causal_lower_right``).

    For t_q <= t_k that is torch's ``is_causal=True`` over all t_k positions, keeping the last
    t_q rows. (``torch.nn.attention.bias`` itself is not imported: it loads torch._dynamo, ~3 s.)
    """
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, t, 4, dtype=torch.float64) for t in (t_q, t_k, t_k))
    mask = causal_mask(t_q, t_k, alignment="bottom_right")
    if t_q <= t_k:
        earlier = torch.randn(2, t_k - t_q, 4, dtype=torch.float64)  # queries before ours
        full = F.scaled_dot_product_attention(torch.cat([earlier, q], 1), k, v, is_causal=True)
        torch.testing.assert_close(
            scaled_dot_product_attention(q, k, v, attn_mask=mask), full[:, -t_q:], atol=1e-12,
            rtol=0,
        )
    i, j = torch.arange(t_q)[:, None], torch.arange(t_k)
    assert torch.equal(mask, j <= t_k - t_q + i)  # t_q > t_k: the first rows see no key
    assert torch.equal(causal_mask(t_q, t_k), j <= i)  # top-left, as is_causal=True
    assert torch.equal(additive_causal_mask(t_q, t_k, alignment="bottom_right") == 0, mask)


@pytest.mark.filterwarnings("ignore:Lower right causal bias will produce NaNs")  # t_q > t_k
@pytest.mark.parametrize(("t_q", "t_k"), [(2, 5), (5, 2), (3, 3)])
def test_torchs_causal_bias_as_attn_mask_gives_torchs_answer(t_q: int, t_k: int) -> None:
    """torch's SDPA takes causal_upper_left / causal_lower_right as attn_mask. It is a Tensor
    subclass whose shape and values are not the mask's: upper-left (2, 5) used to pass the checks
    and give a silently wrong Z, lower-right to be refused for a shape it does not have. (The
    module is imported here only: it loads torch._dynamo.)"""
    from torch.nn.attention.bias import causal_lower_right, causal_upper_left

    q, k, v = qkv((2, 3, t_q, 4), (2, 3, t_k, 4), (2, 3, t_k, 6))
    for make, alignment in ((causal_upper_left, "top_left"), (causal_lower_right, "bottom_right")):
        bias, mask = make(t_q, t_k), causal_mask(t_q, t_k, alignment=alignment)
        torch.testing.assert_close(scaled_dot_product_attention(q, k, v, attn_mask=bias),
                                   F.scaled_dot_product_attention(q, k, v, attn_mask=bias),
                                   rtol=0, atol=1e-12)
        torch.testing.assert_close(attention_weights(q, k, attn_mask=bias),
                                   attention_weights(q, k, attn_mask=mask), rtol=0, atol=0)


@pytest.mark.parametrize(("t_q", "t_k"), [(3, 7), (7, 3), (5, 5)])
@pytest.mark.parametrize("window", [1, 2, 4])
@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
def test_sliding_window_mask_is_the_definition_in_either_alignment(
    t_q: int, t_k: int, window: int, alignment: str
) -> None:
    """Query i at p = i (top-left) or t_k - t_q + i (bottom-right) sees keys p - w < j <= p."""
    p = torch.arange(t_q)[:, None] + (t_k - t_q if alignment == "bottom_right" else 0)
    j = torch.arange(t_k)[None, :]
    mask = sliding_window_mask(t_q, t_k, window, alignment=alignment)
    assert torch.equal(mask, (j <= p) & (j > p - window))


def test_masks_default_to_top_left_alignment_as_is_causal() -> None:
    """Without ``alignment``, query i sits at i (torch's is_causal), also when t_q != t_k."""
    i, j = torch.arange(2)[:, None], torch.arange(5)
    assert torch.equal(causal_mask(2, 5), j <= i)
    assert torch.equal(sliding_window_mask(2, 5, window=2), (j <= i) & (j > i - 2))
    assert torch.equal(additive_causal_mask(2, 5) == 0, j <= i)


def test_a_scale_of_zero_is_a_scale_not_the_default() -> None:
    """scale=0.0 makes every score 0: uniform weights, each output the mean value, as in torch."""
    q, k, v = qkv((2, 4, 5), (2, 6, 5), (2, 6, 3))
    weights = attention_weights(q, k, scale=0.0)
    torch.testing.assert_close(weights, torch.full((2, 4, 6), 1 / 6, dtype=torch.float64))
    out = scaled_dot_product_attention(q, k, v, scale=0.0)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, scale=0.0), rtol=0, atol=1e-12)
    torch.testing.assert_close(out, v.mean(dim=-2, keepdim=True).expand(2, 4, 3), rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gqa_half_precision_gradients_sum_the_heads_in_float32(dtype: torch.dtype) -> None:
    # flash-attn's rule: at most 2x the error of the plain float32 computation rounded once;
    # repeating K and V in half precision summed g rounded gradients in half precision
    ours, base = gqa_half_grad_errors(
        lambda q, k, v: scaled_dot_product_attention(q, k, v, enable_gqa=True), dtype)
    assert all(o <= 2 * b for o, b in zip(ours, base)), (ours, base)


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    @pytest.mark.parametrize("x", [torch.tensor([1, 2, 3]), [1.0, 2.0]], ids=["int64", "list"])
    def test_softmax_takes_floating_point_logits(self, x: object) -> None:
        # integer logits became integer probabilities, all 0, once the result took x's dtype
        with pytest.raises(ValueError, match=r"x must be a floating-point tensor of logits, got"):
            softmax(x, dim=-1)

    @pytest.mark.parametrize(
        ("x", "dim", "message"),
        [
            (torch.zeros(2, 3), 2, r"dim must be an integer in \[-2, 1\], got 2"),
            (torch.zeros(2, 3), -3, r"dim must be an integer in \[-2, 1\], got -3"),
            (torch.zeros(2, 3), None, r"dim must be an integer in \[-2, 1\], got None"),
            (torch.zeros(2, 3), 1.0, r"dim must be an integer in \[-2, 1\], got 1\.0"),
            (torch.zeros(2, 3), True, r"dim must be an integer in \[-2, 1\], got True"),
            (torch.tensor(1.0), 1, r"dim must be an integer in \[-1, 0\], got 1"),
        ],
    )
    def test_softmax_dim_must_index_a_dimension(self, x: Tensor, dim: object, message: str) -> None:
        # an IndexError or a TypeError from x.shape[dim]; a 0-d x raised for every dim
        with pytest.raises(ValueError, match=message):
            softmax(x, dim=dim)

    @pytest.mark.parametrize(
        ("q_shape", "k_shape", "message"),
        [
            ((2, 6, 4, 5), (2, 4, 7, 5), r"key's number of heads \(dim -3\) must divide .* h=6, got 4"),
            ((6, 4, 5), (4, 7, 5), r"must divide the query's h=6, got 4"),
            ((4, 5), (7, 5), r"query must have at least 3 dimensions \(\.\.\., heads, t, d\), got"),
        ],
    )
    def test_enable_gqa_bad_heads(self, q_shape: tuple, k_shape: tuple, message: str) -> None:
        q, k = torch.randn(q_shape), torch.randn(k_shape)
        with pytest.raises(ValueError, match=message):
            scaled_dot_product_attention(q, k, k, enable_gqa=True)
        with pytest.raises(ValueError, match=message):
            attention_weights(q, k, enable_gqa=True)

    @pytest.mark.parametrize(
        ("q_shape", "kv_shape", "message"),
        [
            ((3, 4, 5, 6), (2, 4, 5, 6), r"must broadcast, got \(3, 4\), \(2, 4\)"),
            ((2, 4, 5, 6), (2, 2, 5, 6), r"must broadcast, got \(2, 4\), \(2, 2\).* enable_gqa=True"),
        ],
    )
    def test_leading_dimensions_must_broadcast(self, q_shape: tuple, kv_shape: tuple, message: str) -> None:
        q, k = torch.randn(q_shape), torch.randn(kv_shape)
        with pytest.raises(ValueError, match=r"leading dimensions of query, key.* " + message):
            scaled_dot_product_attention(q, k, k)
        with pytest.raises(ValueError, match=r"leading dimensions of query and key " + message):
            attention_weights(q, k)

    @pytest.mark.parametrize(
        ("call", "message"),
        [
            (lambda: causal_mask(-1), r"t_q must be an integer >= 0, got -1"),
            (lambda: causal_mask(2.0), r"t_q must be an integer >= 0, got 2\.0"),
            (lambda: causal_mask(2, -3), r"t_k must be an integer >= 0, got -3"),
            (lambda: additive_causal_mask(2, dtype=torch.int64),
             r"dtype must be a floating-point dtype \(M holds -inf\), got torch\.int64"),
        ],
    )
    def test_mask_sizes_and_dtype(self, call, message: str) -> None:
        with pytest.raises(ValueError, match=message):
            call()

    @pytest.mark.parametrize("is_causal", ["False", 1, torch.tensor(False)])
    def test_is_causal_must_be_a_bool(self, is_causal: object) -> None:
        """A truthy non-bool such as the string "False" would otherwise mask silently."""
        q, k, v = qkv((2, 4, 3))
        expected = rf"is_causal must be a bool, got {re.escape(repr(is_causal))} of type"
        with pytest.raises(ValueError, match=expected):
            attention_weights(q, k, is_causal=is_causal)
        with pytest.raises(ValueError, match=expected):
            scaled_dot_product_attention(q, k, v, is_causal=is_causal)

    @pytest.mark.parametrize(
        ("sizes", "message"),
        [((-1, 4, 2), "t_q must be an integer >= 0, got -1"),
         ((4, -1, 2), "t_k must be an integer >= 0, got -1"),
         ((4, 4, 0), "window must be at least 1, got 0")],
    )
    def test_sliding_window_mask_counts_and_window_must_be_valid(self, sizes: tuple, message: str) -> None:
        with pytest.raises(ValueError, match=message):
            sliding_window_mask(*sizes)

    @pytest.mark.parametrize(
        "make", [causal_mask, additive_causal_mask, lambda t_q, t_k, **kw: sliding_window_mask(t_q, t_k, 2, **kw)]
    )
    def test_masks_refuse_a_bad_alignment(self, make) -> None:
        """Not silently top-left: every dense mask with an alignment checks it."""
        expected = r"alignment must be one of \('top_left', 'bottom_right'\), got 'left'"
        with pytest.raises(ValueError, match=expected):
            make(3, 5, alignment="left")

    @pytest.mark.parametrize("dropout_p", [-0.5, 1.0])
    def test_dropout_p_must_be_in_the_unit_interval(self, dropout_p: float) -> None:
        x = torch.randn(2, 4, 3)
        with pytest.raises(ValueError, match=rf"dropout_p must be in \[0, 1\), got {dropout_p}"):
            scaled_dot_product_attention(x, x, x, dropout_p=dropout_p)

    @pytest.mark.parametrize(
        ("mask_shape", "scores_shape"),
        [((4, 5), (2, 3, 5, 7)), ((5, 1, 7), (2, 3, 5, 7)), ((1, 2, 3, 5, 7), (2, 3, 5, 7))],
    )
    def test_mask_must_broadcast_to_the_scores(self, mask_shape: tuple, scores_shape: tuple) -> None:
        b, h, t_q, t_k = scores_shape
        q, k = torch.randn(b, h, t_q, 8), torch.randn(b, h, t_k, 8)
        expected = re.escape(f"broadcast to the scores' shape {scores_shape}, got shape {mask_shape}")
        for mask in (torch.ones(mask_shape, dtype=torch.bool), torch.zeros(mask_shape)):
            with pytest.raises(ValueError, match=expected):
                scaled_dot_product_attention(q, k, k, attn_mask=mask)

    @pytest.mark.parametrize("mask", [torch.ones(5, dtype=torch.bool), torch.tensor(0.0)], ids=["1-d", "0-d"])
    def test_a_mask_needs_a_query_and_a_key_dimension(self, mask: Tensor) -> None:
        """torch raises an IndexError; broadcasting a (t_k,) mask over every query was silent."""
        q, k = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 5, 8)
        expected = re.escape(f"attn_mask must have at least 2 dimensions (..., t_q, t_k), got shape {tuple(mask.shape)}")
        with pytest.raises(ValueError, match=expected):
            scaled_dot_product_attention(q, k, k, attn_mask=mask)

    def test_query_key_and_value_must_agree_in_d_k_and_t_k(self) -> None:
        with pytest.raises(ValueError, match=r"same last dimension d_k, got 4 and 5"):
            attention_weights(torch.randn(3, 4), torch.randn(3, 5))
        with pytest.raises(ValueError, match=r"same number of tokens t_k, got 3 and 2"):
            scaled_dot_product_attention(torch.randn(3, 4), torch.randn(3, 4), torch.randn(2, 4))
        expected = r"query must have at least 2 dimensions .*got a 1-d tensor of shape \(4,\)"
        with pytest.raises(ValueError, match=expected):
            attention_weights(torch.randn(4), torch.randn(3, 4))

    def test_a_causal_bias_for_other_lengths_is_refused(self) -> None:
        from torch.nn.attention.bias import causal_lower_right

        q, k, v = qkv((1, 2, 4), (1, 5, 4), (1, 5, 3))
        with pytest.raises(ValueError, match=r"CausalBias, must be made for \(t_q, t_k\) = "
                                             r"\(2, 5\), got \(2, 2\)"):
            scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(2, 2))

    def test_a_mask_and_is_causal_are_exclusive(self) -> None:
        x = torch.randn(4, 3)
        with pytest.raises(ValueError, match=r"attn_mask must be None when is_causal=True.*got a tensor"):
            scaled_dot_product_attention(x, x, x, attn_mask=torch.ones(4, 4) > 0, is_causal=True)

    def test_zero_width_queries_and_keys_are_refused(self) -> None:
        """d_k = 0 has no scale 1/sqrt(d_k); it used to raise ZeroDivisionError."""
        q, k, v = qkv((2, 3, 0), (2, 5, 0), (2, 5, 3))
        for fn in (lambda: scaled_dot_product_attention(q, k, v), lambda: attention_weights(q, k)):
            with pytest.raises(ValueError, match="d_k must be at least 1.*got d_k = 0"):
                fn()

    @pytest.mark.parametrize(
        "dtypes", [(torch.float32, torch.float64, torch.float64), (torch.float64,) * 2 + (torch.half,)]
    )
    def test_query_key_and_value_must_share_one_dtype(self, dtypes) -> None:
        q, k, v = (x.to(dt) for x, dt in zip(qkv((2, 3, 4), (2, 5, 4), (2, 5, 3)), dtypes))
        listed = ", ".join(f"{name} {dt} on cpu" for name, dt in zip(("query", "key", "value"), dtypes))
        with pytest.raises(ValueError, match=f"query, key, value must share one dtype, got {listed}"):
            scaled_dot_product_attention(q, k, v)
        if dtypes[0] != dtypes[1]:
            with pytest.raises(
                ValueError, match=r"query, key must share one dtype.*got query torch\.float32 on cpu, key torch\.float64 on cpu"
            ):
                attention_weights(q, k)

    @pytest.mark.parametrize("query_dtype, mask_dtype", mask_dtypes(accepted=False))
    def test_masks_torch_refuses_are_refused(self, query_dtype, mask_dtype) -> None:
        """An integer 0/1 mask used to be added to the scores as if it were additive."""
        q, k, v = (x.to(query_dtype) for x in qkv((2, 3, 4), (2, 5, 4), (2, 5, 3)))
        mask = torch.ones(3, 5, dtype=mask_dtype)
        with pytest.raises(RuntimeError, match="Expected attn_mask dtype"):
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # torch refuses it too
        message = f"torch.float32 or the query's {query_dtype}, got {mask_dtype}"
        with pytest.raises(ValueError, match=message):
            scaled_dot_product_attention(q, k, v, attn_mask=mask)
        with pytest.raises(ValueError, match=message):
            attention_weights(q, k, attn_mask=mask)

    @pytest.mark.parametrize("value", NON_BOOLS)
    @pytest.mark.parametrize(
        ("flag", "call"),
        [
            ("enable_gqa", lambda q, value: attention_weights(q, q, enable_gqa=value)),
            ("enable_gqa", lambda q, value: scaled_dot_product_attention(q, q, q, enable_gqa=value)),
        ],
        ids=["attention_weights", "scaled_dot_product_attention"],
    )
    def test_flags_must_be_bools(self, flag: str, call, value: object) -> None:
        q, _, _ = qkv((1, 2, 4, 3))
        with refuses_non_bool(flag, value):
            call(q, value)
