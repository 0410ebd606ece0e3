"""Edge cases of scaled_dot_product_attention, attention_weights and flash_attention.

Empty sequences, d_k = 0, mask and input dtypes, nan and inf: each answered as torch's
``F.scaled_dot_product_attention`` answers it, or with a ValueError naming expected and actual.
"""

import pytest
import torch
import torch.nn.functional as F

from attention import attention_weights, flash_attention, scaled_dot_product_attention

NAN, INF = float("nan"), float("inf")

OURS = {
    "sdpa": lambda q, k, v, causal: scaled_dot_product_attention(q, k, v, is_causal=causal),
    "flash": lambda q, k, v, causal: flash_attention(q, k, v, causal, block_size=2),
}


def qkv(b: int, t_q: int, t_k: int, d_k: int = 4, d_v: int = 3) -> list[torch.Tensor]:
    """float64 query (b, t_q, d_k), key (b, t_k, d_k), value (b, t_k, d_v) that require grad."""
    g = torch.Generator().manual_seed(0)
    shapes = [(b, t_q, d_k), (b, t_k, d_k), (b, t_k, d_v)]
    return [torch.randn(s, generator=g, dtype=torch.float64).requires_grad_() for s in shapes]


# --- empty sequences and batches --------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("b, t_q, t_k", [(2, 3, 0), (2, 0, 5), (2, 0, 0), (0, 3, 5)])
def test_empty_inputs_give_torchs_outputs_and_gradients(b, t_q, t_k, causal) -> None:
    """No keys: zero rows. No queries, or no batch: empty outputs. Gradients: zeros, no crash."""
    q, k, v = qkv(b, t_q, t_k)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    expected_grads = torch.autograd.grad(expected, (q, k, v), torch.ones_like(expected))
    for name, fn in OURS.items():
        out = fn(q, k, v, causal)
        assert out.shape == (b, t_q, 3) and torch.equal(out, expected), name
        grads = torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
        for grad, grad_expected in zip(grads, expected_grads):
            assert torch.equal(grad, grad_expected), name
    weights = attention_weights(q, k, is_causal=causal)
    assert weights.shape == (b, t_q, t_k)


def test_no_keys_gives_zero_rows_also_in_half_precision() -> None:
    q, k, v = (x.detach().bfloat16() for x in qkv(2, 3, 0))
    for name, fn in OURS.items():
        out = fn(q, k, v, False)
        assert out.dtype == torch.bfloat16 and torch.equal(out, torch.zeros(2, 3, 3)), name


# --- bad input -------------------------------------------------------------------------------


def test_zero_width_queries_and_keys_raise() -> None:
    """d_k = 0 has no scale 1/sqrt(d_k); it used to raise ZeroDivisionError."""
    q, k, v = (x.detach() for x in qkv(2, 3, 5, d_k=0))
    for fn in (
        lambda: scaled_dot_product_attention(q, k, v),
        lambda: attention_weights(q, k),
        lambda: flash_attention(q, k, v),
    ):
        with pytest.raises(ValueError, match="d_k must be at least 1.*got d_k = 0"):
            fn()


@pytest.mark.parametrize(
    "dtypes", [(torch.float32, torch.float64, torch.float64), (torch.float64,) * 2 + (torch.half,)]
)
def test_mixed_dtypes_raise(dtypes) -> None:
    q, k, v = (x.detach().to(dt) for x, dt in zip(qkv(2, 3, 5), dtypes))
    listed = ", ".join(str(dt) for dt in dtypes)
    with pytest.raises(ValueError, match=f"query, key, value must share one dtype, got {listed}"):
        scaled_dot_product_attention(q, k, v)
    if dtypes[0] != dtypes[1]:
        with pytest.raises(ValueError, match="query, key must share one dtype"):
            attention_weights(q, k)


@pytest.mark.parametrize(
    "query_dtype, mask_dtype",
    [
        (torch.float32, torch.uint8),
        (torch.float32, torch.int32),
        (torch.float64, torch.int64),
        (torch.float32, torch.float64),
        (torch.float32, torch.float16),
        (torch.bfloat16, torch.float16),
    ],
)
def test_masks_torch_refuses_raise_value_error(query_dtype, mask_dtype) -> None:
    """An integer 0/1 mask used to be added to the scores as if it were additive."""
    q, k, v = (x.detach().to(query_dtype) for x in qkv(2, 3, 5))
    mask = torch.ones(3, 5, dtype=mask_dtype)
    with pytest.raises(RuntimeError, match="Expected attn_mask dtype"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # torch refuses it too
    message = f"torch.float32 or the query's {query_dtype}, got {mask_dtype}"
    with pytest.raises(ValueError, match=message):
        scaled_dot_product_attention(q, k, v, attn_mask=mask)
    with pytest.raises(ValueError, match=message):
        attention_weights(q, k, attn_mask=mask)


@pytest.mark.parametrize(
    "query_dtype, mask_dtype",
    [
        (torch.float64, torch.bool),
        (torch.float64, torch.float64),
        (torch.float64, torch.float32),
        (torch.bfloat16, torch.float32),
        (torch.bfloat16, torch.bfloat16),
    ],
)
def test_masks_torch_accepts_give_torchs_answer(query_dtype, mask_dtype) -> None:
    q, k, v = (x.detach().to(query_dtype) for x in qkv(2, 3, 5))
    mask = torch.randn(3, 5, generator=torch.Generator().manual_seed(1)).to(mask_dtype)
    if mask_dtype == torch.bool:
        mask[:, 0] = True
    ours = scaled_dot_product_attention(q, k, v, attn_mask=mask)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    tol = 1e-12 if query_dtype == torch.float64 else 1e-2
    torch.testing.assert_close(ours, theirs, rtol=0, atol=tol)


# --- nan and inf ------------------------------------------------------------------------------


def nan_rows(out: torch.Tensor) -> list[bool]:
    return torch.isnan(out[0]).any(dim=-1).tolist()


@pytest.mark.parametrize(
    "tensor, index, value, expected_nan_rows",
    [
        ("q", (0, 1, 0), NAN, [False, True, False, False, False, False]),  # only its own row
        ("q", (0, 1, 0), INF, [False, True, False, False, False, False]),  # inf - inf in row 1
        ("k", (0, 2, 0), NAN, [True] * 6),  # every row sees key 2
        ("v", (0, 2, 1), NAN, [True] * 6),  # column 1 of every row
        ("k", (0, 2, 0), INF, None),  # nan exactly where q_i0 > 0: score +inf, inf - inf
    ],
)
def test_nan_and_inf_propagate_as_in_torch(tensor, index, value, expected_nan_rows) -> None:
    q, k, v = (x.detach() for x in qkv(1, 6, 6))
    {"q": q, "k": k, "v": v}[tensor][index] = value
    expected = F.scaled_dot_product_attention(q, k, v)
    if expected_nan_rows is None:
        expected_nan_rows = (q[0, :, 0] > 0).tolist()
    assert nan_rows(expected) == expected_nan_rows
    for name, fn in OURS.items():
        out = fn(q, k, v, False)
        assert torch.equal(torch.isnan(out), torch.isnan(expected)), name
        torch.testing.assert_close(out, expected, rtol=0, atol=1e-12, equal_nan=True)


def test_inf_in_a_value_gives_inf_where_its_weight_is_positive() -> None:
    q, k, v = (x.detach() for x in qkv(1, 6, 6))
    v[0, 2, 1] = INF
    expected = F.scaled_dot_product_attention(q, k, v)
    assert torch.isinf(expected[0, :, 1]).all() and torch.isfinite(expected[0, :, [0, 2]]).all()
    for name, fn in OURS.items():
        torch.testing.assert_close(fn(q, k, v, False), expected, rtol=0, atol=1e-12, msg=name)


def test_rows_whose_scores_are_all_minus_inf_give_zeros() -> None:
    """Not a mask but the data: every score -inf. torch answers 0; online softmax needs care,
    since exp(s - m) with s = m = -inf is nan (FlashAttention-2 shifts such rows by 0)."""
    q, k, v = (x.detach() for x in qkv(1, 6, 6))
    q[..., 0] = q[..., 0].abs() + 0.1  # > 0
    k[..., 0] = -INF
    k[..., 1:] = 0.0  # so that q_i · k_j = -inf exactly
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    expected = F.scaled_dot_product_attention(q, k, v)
    assert torch.equal(expected, torch.zeros_like(expected))
    expected_grads = torch.autograd.grad(expected, (q, k, v), torch.ones_like(expected))
    for name, fn in OURS.items():
        out = fn(q, k, v, False)
        assert torch.equal(out, expected), name
        # dV = Pᵀ dO = 0 needs P = 0 in the backward too: flash stores L = +inf for these rows
        grads = torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
        for grad, grad_expected in zip(grads, expected_grads):  # dQ: 0 · (-inf) = nan, as torch
            torch.testing.assert_close(grad, grad_expected, rtol=0, atol=0, equal_nan=True)


def test_a_key_hidden_by_causality_does_not_reach_the_rows_that_cannot_see_it() -> None:
    """Ours replace a hidden score by -inf, nan included, so rows 0 and 1 stay finite with a
    nan in key 2; torch's math backend adds -inf to the nan and makes every row nan."""
    q, k, v = (x.detach() for x in qkv(1, 6, 6))
    k[0, 2, 0] = NAN
    for name, fn in OURS.items():
        assert nan_rows(fn(q, k, v, True)) == [False, False, True, True, True, True], name
    mask = torch.ones(6, 6, dtype=torch.bool).tril()
    out = scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert nan_rows(out) == [False, False, True, True, True, True]


def test_plus_inf_in_an_additive_mask_makes_its_row_nan_like_torch() -> None:
    q, k, v = (x.detach() for x in qkv(1, 6, 6))
    mask = torch.zeros(6, 6, dtype=torch.float64)
    mask[3, 1] = INF
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert nan_rows(expected) == [False, False, False, True, False, False]
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, attn_mask=mask), expected, equal_nan=True
    )


@pytest.mark.parametrize("bad", [NAN, INF])
@pytest.mark.parametrize("block_size", [1, 2, 4, 64])
def test_a_bad_value_hidden_by_causality_reaches_every_row_in_both(bad, block_size) -> None:
    """In A V a hidden value meets a weight of exactly 0, and 0 · nan = 0 · inf = nan; flash
    must not lose it by skipping the tiles above the diagonal, whatever the tiling."""
    q, k, v = (x.detach() for x in qkv(1, 6, 6))
    v[0, 4, 1] = bad
    expected = scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.isnan(expected[0, :4, 1]).all()  # rows 0-3 cannot see key 4: weight 0
    out = flash_attention(q, k, v, is_causal=True, block_size=block_size)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12, equal_nan=True)
