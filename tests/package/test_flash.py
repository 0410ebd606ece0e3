"""flash_attention: exact against both references, FlashAttention's backward, tiles only."""

import itertools
import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from _inputs import qkv
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.autograd import gradcheck
from torch.nn.attention.flex_attention import AuxRequest, create_block_mask, flex_attention
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from attention import masks
from attention.flash import default_block_sizes, flash_attention
from attention.functional import scaled_dot_product_attention

TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-10}


def assert_matches_references(q, k, v, is_causal, block_size):
    out = flash_attention(q, k, v, is_causal=is_causal, block_size=block_size)
    tol = TOLERANCE[q.dtype]
    ours = scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    torchs = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    assert out.shape == torchs.shape
    torch.testing.assert_close(out, ours, rtol=0, atol=tol)
    torch.testing.assert_close(out, torchs, rtol=0, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("block_size", [1, 7, 64])
@pytest.mark.parametrize(
    "batch, t_q, t_k",
    [((2,), 19, 19), ((2, 3), 19, 19), ((2,), 10, 23), ((2, 3), 23, 10), ((1,), 1, 9)],
)
def test_equals_sdpa(dtype, is_causal, block_size, batch, t_q, t_k):
    q, k, v = qkv((*batch, t_q, 8), (*batch, t_k, 8), (*batch, t_k, 5), dtype=dtype)
    assert_matches_references(q, k, v, is_causal, block_size)


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("t_q, t_k", [(70, 65), (65, 130)])
def test_equals_sdpa_over_several_default_blocks(is_causal, t_q, t_k):
    q, k, v = qkv((2, t_q, 8), (2, t_k, 8), (2, t_k, 5), dtype=torch.float32)
    assert_matches_references(q, k, v, is_causal, block_size=64)


@settings(max_examples=40, deadline=None)
@given(
    batch=st.lists(st.integers(1, 3), min_size=0, max_size=2),
    t_q=st.integers(1, 17),
    t_k=st.integers(1, 17),
    d_k=st.integers(1, 6),
    d_v=st.integers(1, 6),
    block_size=st.integers(1, 9),
    is_causal=st.booleans(),
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
def test_equals_sdpa_on_random_shapes(batch, t_q, t_k, d_k, d_v, block_size, is_causal, dtype):
    q, k, v = qkv((*batch, t_q, d_k), (*batch, t_k, d_k), (*batch, t_k, d_v), dtype=dtype)
    assert_matches_references(q, k, v, is_causal, block_size)


def test_custom_scale_and_large_logits():
    q, k, v = qkv((2, 11, 4), (2, 13, 4), (2, 13, 3), dtype=torch.float32)
    out = flash_attention(q, k, v, block_size=4, scale=30.0)  # scores in the hundreds: no overflow
    assert torch.isfinite(out).all()
    torch.testing.assert_close(
        out, F.scaled_dot_product_attention(q, k, v, scale=30.0), rtol=0, atol=1e-5
    )


def test_no_keys_gives_zeros_like_torch():
    q, k, v = qkv((2, 5, 4), (2, 0, 4), (2, 0, 3))
    out = flash_attention(q, k, v, block_size=2)
    assert torch.equal(out, torch.zeros(2, 5, 3, dtype=torch.float64))
    assert torch.equal(out, F.scaled_dot_product_attention(q, k, v))


def test_leading_dimensions_broadcast():
    q, _, _ = qkv((2, 3, 7, 4), (2, 3, 5, 4), (2, 3, 5, 6))
    _, k, v = qkv((1, 3, 7, 4), (1, 3, 5, 4), (1, 3, 5, 6), seed=1)
    expected = F.scaled_dot_product_attention(q, k.expand(2, 3, 5, 4), v.expand(2, 3, 5, 6))
    torch.testing.assert_close(flash_attention(q, k, v, block_size=3), expected, rtol=0, atol=1e-10)


# Every way a tensor's leading dimensions can broadcast to (2, 3): each dimension full, 1 or
# absent (a tensor of lower rank).
BROADCAST_LEADS = [(2, 3), (1, 3), (2, 1), (1, 1), (3,), (1,), ()]


@pytest.mark.parametrize("enable_gqa", [False, True])
def test_every_broadcast_pattern_gives_torchs_output_and_gradients(enable_gqa):
    """All 343 combinations of BROADCAST_LEADS for query, key and value (torch accepts each):
    the output equals torch's SDPA, and each gradient has its input's own shape (summed over the
    dimensions that were broadcast) and equals torch's. With GQA, 4 query heads share 2."""
    heads = ((4,), (2,), (2,)) if enable_gqa else ((), (), ())
    g = torch.Generator().manual_seed(0)
    for leads in itertools.product(BROADCAST_LEADS, repeat=3):
        shapes = [(*lead, *h, t, 2) for lead, h, t in zip(leads, heads, (3, 4, 4))]
        q, k, v = (torch.randn(s, generator=g, dtype=torch.float64) for s in shapes)
        q, k, v = (x.requires_grad_() for x in (q, k, v))
        assert_output_and_grads_equal(
            lambda q, k, v: flash_attention(q, k, v, block_size=2, enable_gqa=enable_gqa),
            lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=enable_gqa),
            (q, k, v),
        )


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("block_size, t_q, t_k", [(1, 3, 4), (2, 5, 3), (3, 7, 7), (4, 2, 6)])
def test_backward_matches_finite_differences(is_causal, block_size, t_q, t_k):
    q, k, v = qkv((2, t_q, 3), (2, t_k, 3), (2, t_k, 2), requires_grad=True)
    kernel = lambda q, k, v: flash_attention(q, k, v, is_causal=is_causal, block_size=block_size)  # noqa: E731
    assert gradcheck(kernel, (q, k, v))


def test_second_derivatives_are_refused_not_silently_wrong():
    """The hand-written backward is not differentiable itself: a double backward must raise."""
    q, k, v = qkv((2, 5, 3), (2, 6, 3), (2, 6, 2), requires_grad=True)
    out = flash_attention(q, k, v, block_size=2)
    grads = torch.autograd.grad(out.pow(2).sum(), (q, k, v), create_graph=True)
    expected = torch.autograd.grad(scaled_dot_product_attention(q, k, v).pow(2).sum(), (q, k, v))
    for grad, grad_expected in zip(grads, expected):  # first order still right under create_graph
        torch.testing.assert_close(grad, grad_expected, rtol=0, atol=1e-10)
    for second in (
        lambda: torch.autograd.grad(grads[0].sum(), q),
        lambda: torch.autograd.grad(grads[2].sum(), (q, k, v), allow_unused=True),
        lambda: torch.autograd.gradgradcheck(lambda *x: flash_attention(*x, block_size=2), (q, k, v)),
    ):
        with pytest.raises(RuntimeError, match="flash_attention has first derivatives only"):
            second()


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("block_size", [1, 7, 64])
def test_backward_equals_autograd_through_reference(is_causal, block_size):
    q, k, v = qkv((2, 2, 13, 4), (2, 2, 17, 4), (2, 2, 17, 3), requires_grad=True)
    grad_out = torch.randn(2, 2, 13, 3, dtype=torch.float64)
    ours = torch.autograd.grad(flash_attention(q, k, v, is_causal=is_causal, block_size=block_size), (q, k, v), grad_out)
    ref = torch.autograd.grad(
        scaled_dot_product_attention(q, k, v, is_causal=is_causal), (q, k, v), grad_out
    )
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)


class OpRecorder(TorchDispatchMode):
    """Records the name of every ATen operation and the size of the largest tensor it creates."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops.append(str(func))
        sizes = [t.numel() for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        self.largest = max([self.largest, *sizes])
        return out


def test_only_tiles_are_materialised_and_sdpa_is_never_called():
    t, block = 32, 8
    q, k, v = qkv((1, t, 4), (1, t, 4), (1, t, 4), requires_grad=True)
    with OpRecorder() as rec:
        out = flash_attention(q, k, v, is_causal=True, block_size=block)
        out.backward(torch.ones_like(out))
    assert rec.largest <= t * 4  # an output-sized (t, d) tensor at most, never (t, t) = 1024
    assert not any("scaled_dot_product" in op for op in rec.ops)


def test_causal_skips_key_blocks_above_the_diagonal():
    q, k, v = qkv((1, 32, 4), (1, 32, 4), (1, 32, 4))  # 4 x 4 blocks of 8
    counts = {}
    for is_causal in (False, True):
        with OpRecorder() as rec:
            flash_attention(q, k, v, is_causal=is_causal, block_size=8)
        counts[is_causal] = sum("bmm" in op or "aten.mm" in op for op in rec.ops)
    assert (
        counts[True] * 16 == counts[False] * 10
    )  # 10 of the 16 tiles lie on or below the diagonal


# ---------------------------------------------------------------- GQA, alignment, windows


def allowed(t_q, t_k, alignment="top_left", window=None):
    """(t_q, t_k) boolean mask, written independently: query i at position p_i sees key j when
    j <= p_i and, with a window w, j > p_i - w; p_i = i top-left, t_k - t_q + i bottom-right."""
    pos = torch.arange(t_q)[:, None] + (0 if alignment == "top_left" else t_k - t_q)  # (t_q, 1)
    cols = torch.arange(t_k)[None, :]  # (1, t_k)
    mask = cols <= pos
    return mask if window is None else mask & (cols > pos - window)


def assert_output_and_grads_equal(ours_fn, torch_fn, tensors, atol=1e-10):
    """Output and dQ, dK, dV of ours_fn equal torch_fn's (float64 inputs)."""
    out, expected = ours_fn(*tensors), torch_fn(*tensors)
    assert out.shape == expected.shape
    torch.testing.assert_close(out, expected, rtol=0, atol=atol)
    grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(7), dtype=out.dtype)
    ours = torch.autograd.grad(out, tensors, grad_out)
    theirs = torch.autograd.grad(expected, tensors, grad_out)
    for name, a, b in zip(("dQ", "dK", "dV"), ours, theirs):
        torch.testing.assert_close(a, b, rtol=0, atol=atol, msg=name)


@pytest.mark.parametrize("h, h_kv", [(6, 3), (6, 1), (4, 4), (6, 2)])
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("block_size", [3, (4, 7), None])
def test_gqa_equals_torch(h, h_kv, is_causal, block_size):
    g = torch.Generator().manual_seed(h * 10 + h_kv)
    shapes = [(2, h, 11, 5), (2, h_kv, 13, 5), (2, h_kv, 13, 3)]
    q, k, v = (torch.randn(s, generator=g, dtype=torch.float64, requires_grad=True) for s in shapes)
    assert_output_and_grads_equal(
        lambda q, k, v: flash_attention(q, k, v, is_causal=is_causal, block_size=block_size, enable_gqa=True),
        lambda q, k, v: F.scaled_dot_product_attention(
            q, k, v, is_causal=is_causal, enable_gqa=True
        ),
        (q, k, v),
    )


def test_gqa_with_broadcast_batch_and_different_key_and_value_heads_like_torch():
    g = torch.Generator().manual_seed(3)
    shapes = [(2, 6, 7, 4), (1, 3, 9, 4), (2, 2, 9, 5)]  # torch repeats key and value separately
    q, k, v = (torch.randn(s, generator=g, dtype=torch.float64, requires_grad=True) for s in shapes)
    assert_output_and_grads_equal(
        lambda q, k, v: flash_attention(q, k, v, is_causal=True, block_size=4, enable_gqa=True),
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
        (q, k, v),
    )


@pytest.mark.parametrize("t_q, t_k", [(7, 7), (5, 13), (13, 5), (1, 9), (16, 16)])
@pytest.mark.parametrize("block_size", [1, 4, (3, 5), (8, 2), 64])
def test_bottom_right_equals_causal_lower_right(t_q, t_k, block_size):
    from torch.nn.attention.bias import causal_lower_right

    q, k, v = qkv((2, 3, t_q, 4), (2, 3, t_k, 4), (2, 3, t_k, 3), requires_grad=True)
    with warnings.catch_warnings():  # torch warns of nan rows for t_q > t_k; it returns zeros
        warnings.simplefilter("ignore")
        bias = causal_lower_right(t_q, t_k)
    assert_output_and_grads_equal(
        lambda q, k, v: flash_attention(q, k, v, is_causal=True, block_size=block_size, alignment="bottom_right"),
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=bias),
        (q, k, v),
    )


@settings(max_examples=40, deadline=None)
@given(
    t_q=st.integers(1, 20),
    t_k=st.integers(1, 20),
    window=st.one_of(st.none(), st.integers(1, 22)),
    alignment=st.sampled_from(["top_left", "bottom_right"]),
    block_q=st.integers(1, 9),
    block_k=st.integers(1, 9),
    gqa=st.booleans(),
)
def test_masks_equal_torch_with_an_explicit_mask(
    t_q, t_k, window, alignment, block_q, block_k, gqa
):
    h_kv = 1 if gqa else 2
    g = torch.Generator().manual_seed(t_q * 100 + t_k)
    shapes = [(2, 2, t_q, 3), (2, h_kv, t_k, 3), (2, h_kv, t_k, 2)]
    q, k, v = (torch.randn(s, generator=g, dtype=torch.float64, requires_grad=True) for s in shapes)
    mask = allowed(t_q, t_k, alignment, window)
    assert_output_and_grads_equal(
        lambda q, k, v: flash_attention(
            q, k, v, is_causal=True, block_size=(block_q, block_k), enable_gqa=gqa, alignment=alignment,
            window=window,
        ),
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa),
        (q, k, v),
    )


@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
@pytest.mark.parametrize("window", [1, 3, 7])
@pytest.mark.parametrize("block_size", [(4, 6), 5, (3, 2)])
@pytest.mark.parametrize("t_q, t_k", [(16, 16), (9, 20), (20, 9)])  # (20, 9): rows see no key
def test_window_equals_torch_with_an_explicit_mask(alignment, window, block_size, t_q, t_k):
    g = torch.Generator().manual_seed(window)
    shapes = [(2, 4, t_q, 3), (2, 2, t_k, 3), (2, 2, t_k, 2)]
    q, k, v = (torch.randn(s, generator=g, dtype=torch.float64, requires_grad=True) for s in shapes)
    mask = allowed(t_q, t_k, alignment, window)
    assert_output_and_grads_equal(
        lambda q, k, v: flash_attention(
            q, k, v, is_causal=True, block_size=block_size, enable_gqa=True, alignment=alignment, window=window
        ),
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True),
        (q, k, v),
    )


@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
def test_window_backward_matches_finite_differences(alignment):
    q, k, v = qkv((2, 6, 3), (2, 9, 3), (2, 9, 2), requires_grad=True)
    assert gradcheck(
        lambda q, k, v: flash_attention(
            q, k, v, is_causal=True, block_size=(2, 3), alignment=alignment, window=3
        ),
        (q, k, v),
    )


def count_tile_products(**kwargs) -> int:
    q, k, v = qkv((1, 64, 4), (1, 64, 4), (1, 64, 4))  # 8 x 8 blocks of 8
    with OpRecorder() as rec:
        flash_attention(q, k, v, block_size=8, **kwargs)
    return sum("bmm" in op for op in rec.ops)


def test_tiles_outside_the_window_are_skipped():
    full, causal = count_tile_products(), count_tile_products(is_causal=True)
    windowed = count_tile_products(is_causal=True, window=8)
    assert full == 2 * 64 and causal == 2 * 36  # two products per tile
    # query block i sees keys 8i - 7 .. 8i + 7: its diagonal block and 7 keys of the one before
    assert windowed == 2 * (1 + 7 * 2)


def test_a_bad_value_outside_the_window_reaches_every_row_as_in_a_v():
    q, k, v = qkv((1, 8, 4), (1, 8, 4), (1, 8, 3))
    v[0, 1, 0] = float("nan")  # hidden from rows 0 and 4 .. 7 by the window of 3
    mask = allowed(8, 8, window=3)
    expected = scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.isnan(expected[0, :, 0]).all()  # 0 · nan = nan in A V
    for block_size in (1, 2, 8):
        out = flash_attention(q, k, v, is_causal=True, block_size=block_size, window=3)
        torch.testing.assert_close(out, expected, rtol=0, atol=1e-12, equal_nan=True)


def clean_reference(q, k, v, rows, keys, **kwargs):
    """Output and gradients of rows ``:rows`` of batch 1 computed from keys ``:keys`` alone."""
    q, k, v = (x[1:2].detach().requires_grad_() for x in (q[:, :rows], k[:, :keys], v[:, :keys]))
    out = F.scaled_dot_product_attention(q, k, v, **kwargs)
    return out, torch.autograd.grad(out, (q, k, v), torch.ones_like(out))


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("block_size", [(8, 3), (4, 8), (6, 2)])
def test_a_hidden_bad_score_stays_hidden(bad, block_size):
    """Hidden scores are set to -inf by adding a bias of -inf; a nan or +inf score would turn
    into nan that way, so a tile that meets one must be masked by filling instead."""
    q, k, v = qkv((2, 8, 4), (2, 8, 4), (2, 8, 3))
    k[1, 5, 0] = bad  # queries 0 .. 4 of batch 1 cannot see key 5
    out = flash_attention(q, k, v, is_causal=True, block_size=block_size)
    expected, _ = clean_reference(q, k, v, 5, 5, is_causal=True)
    torch.testing.assert_close(out[1:2, :5], expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(out[0], F.scaled_dot_product_attention(q, k, v, is_causal=True)[0])


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("block_size, window", [((4, 8), None), (3, None), ((2, 4), 3)])
def test_a_key_no_query_sees_is_never_touched_forward_or_backward(bad, block_size, window):
    """t_q = 4 < t_k = 8, top-left: no query sees keys 4 .. 7 (nor, with a window, old keys).
    The backward's key blocks straddle them, and must stop where the forward's tiles stop."""
    q, k, v = qkv((2, 4, 4), (2, 8, 4), (2, 8, 3))
    k[1, 6, 0] = bad
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    out = flash_attention(q, k, v, is_causal=True, block_size=block_size, window=window)
    grads = torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
    mask = allowed(4, 4, window=window)
    expected, expected_grads = clean_reference(q, k, v, 4, 4, attn_mask=mask)
    torch.testing.assert_close(out[1:2], expected, rtol=0, atol=1e-12)
    for grad, grad_expected in zip(grads, expected_grads):  # dQ, dK and dV of keys 0 .. 3
        torch.testing.assert_close(grad[1:2, :4], grad_expected, rtol=0, atol=1e-10)
    for grad in grads[1:]:  # dK and dV of the keys no query sees
        assert torch.equal(grad[:, 4:], torch.zeros_like(grad[:, 4:]))


def test_compiles_into_one_graph_with_is_causal():
    """A data-dependent test (a finite sum of the values) broke fullgraph capture; under
    torch.compile every tile is visited and masks are filled instead. The eager backend checks
    the capture without code generation (about 5 s on the book's CPU, most of it dynamo's setup).
    """
    q, k, v = (torch.randn(1, 1, 4, 4, generator=torch.Generator().manual_seed(i))
               for i in range(3))
    compiled = torch.compile(flash_attention, fullgraph=True, backend="eager")
    out = compiled(q, k, v, is_causal=True, block_size=2)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, want, rtol=0, atol=1e-6)



@pytest.mark.parametrize("options", [{}, {"is_causal": True}, {"is_causal": True, "window": 2}],
                         ids=["full", "causal", "window"])
def test_meta_tensors_give_sdpas_shapes_forward_and_backward(options):
    """Meta tensors have shapes and no values: the finite-values test before skipping tiles
    raised "Tensor.item() cannot be called on meta tensors"; torch's SDPA gives the shapes."""
    q = torch.empty(2, 3, 5, 8, device="meta", requires_grad=True)
    k, v = torch.empty(2, 3, 7, 8, device="meta"), torch.empty(2, 3, 7, 4, device="meta")
    out, lse = flash_attention(q, k, v, block_size=2, return_lse=True, **options)
    out.sum().backward()
    assert (out.device.type, out.shape, lse.shape) == ("meta", (2, 3, 5, 4), (2, 3, 5))
    assert q.grad.shape == q.shape

# --- the log-sum-exp it returns (return_lse=True) --------------------------------------------


def explicit_lse(q, k, visible, scale):
    scores = (q @ k.transpose(-2, -1) * scale).masked_fill(~visible, -math.inf)
    return torch.logsumexp(scores, dim=-1)


@pytest.mark.parametrize("is_causal, alignment, window", [
    (False, "top_left", None), (True, "top_left", None), (True, "bottom_right", None),
    (True, "top_left", 4)])
@pytest.mark.parametrize("t_q, t_k", [(13, 13), (7, 13)])
def test_lse_is_the_log_sum_exp_of_the_visible_scores(is_causal, alignment, window, t_q, t_k):
    q, k, v = qkv((2, 3, t_q, 8), (2, 3, t_k, 8))
    kwargs = {"alignment": alignment, "window": window} if is_causal else {}
    kwargs |= {"is_causal": is_causal, "block_size": 4, "scale": 0.3}
    out, lse = flash_attention(q, k, v, return_lse=True, **kwargs)
    torch.testing.assert_close(out, flash_attention(q, k, v, **kwargs), rtol=0, atol=0)
    offset = t_k - t_q if alignment == "bottom_right" else 0
    rows, cols = torch.arange(t_q)[:, None] + offset, torch.arange(t_k)[None, :]
    visible = (cols <= rows) & (cols > rows - (window or t_k)) if is_causal else cols >= 0
    assert lse.shape == (2, 3, t_q) and not lse.requires_grad
    torch.testing.assert_close(lse, explicit_lse(q, k, visible, 0.3), rtol=0, atol=1e-12)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_lse_equals_flex_attentions():
    q, k, v = qkv((1, 2, 12, 8))
    block_mask = create_block_mask(masks.causal(), None, None, 12, 12, device="cpu", BLOCK_SIZE=4)
    _, aux = flex_attention(q, k, v, block_mask=block_mask, return_aux=AuxRequest(lse=True))
    torch.testing.assert_close(flash_attention(q, k, v, is_causal=True, block_size=4, return_lse=True)[1], aux.lse,
                               rtol=0, atol=1e-12)


def test_lse_is_differentiable():
    """d lse_i / d s_ij = P_ij: the backward adds dlse to dS = P ⊙ (dP - (D - dlse))."""
    q, k, v = qkv((2, 3, 5, 8), (2, 3, 7, 8), requires_grad=True)
    for kwargs in ({}, {"is_causal": True, "alignment": "bottom_right", "window": 3}):
        assert torch.autograd.gradcheck(
            lambda q, k, v: flash_attention(q, k, v, block_size=2, return_lse=True, **kwargs),
            (q[:1, :1], k[:1, :1], v[:1, :1]),
        )
    lse = flash_attention(q, k, v, block_size=2, return_lse=True)[1]
    scores = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5  # (b, h, t_q, t_k)
    want = torch.autograd.grad(torch.logsumexp(scores, dim=-1).sum(), (q, k))
    got = torch.autograd.grad(lse.sum(), (q, k))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_default_block_sizes_switch_at_t_k_2048_and_never_exceed_the_sequence():
    """128 x 512 from t_k = 2048 on, 128 x 128 below; no block longer than its sequence, none 0."""
    assert default_block_sizes(2048, 2048) == (128, 512)
    assert default_block_sizes(2047, 2047) == (128, 128)
    assert default_block_sizes(5, 3000) == (5, 512)
    assert default_block_sizes(0, 0) == (1, 1)


@pytest.mark.parametrize("t_q, t_k", [(0, 5), (0, 0), (3, 0)])
def test_no_queries_or_no_keys_with_default_blocks_give_torchs_answer(t_q, t_k):
    q, k, v = qkv((2, 3, t_q, 4), (2, 3, t_k, 4), (2, 3, t_k, 2), requires_grad=True)
    assert_output_and_grads_equal(
        lambda q, k, v: flash_attention(q, k, v, is_causal=True), lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
        (q, k, v),
    )


def test_a_pair_of_block_sizes_is_query_rows_then_key_rows():
    """block_size=(9, 4) with t_q = 9, t_k = 4 is one tile, (4, 9) three: two products each."""
    q, k, v = qkv((1, 9, 4), (1, 4, 4), (1, 4, 4))
    for block_size, tiles in (((9, 4), 1), ((4, 9), 3)):
        with OpRecorder() as rec:
            flash_attention(q, k, v, block_size=block_size)
        assert sum("bmm" in op for op in rec.ops) == 2 * tiles, block_size


def test_a_scale_of_zero_is_a_scale_not_the_default():
    """scale=0.0 makes every score 0: uniform weights over the visible keys, as in torch."""
    q, k, v = qkv((2, 5, 4), (2, 7, 4), (2, 7, 3), requires_grad=True)
    assert_output_and_grads_equal(
        lambda q, k, v: flash_attention(q, k, v, is_causal=True, block_size=3, scale=0.0),
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.0),
        (q, k, v),
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_half_inputs_give_the_output_in_their_dtype_and_lse_in_float32(dtype):
    """lse is a statistic, kept in the accumulation dtype (float32), as FlashAttention stores it;
    rounded to bfloat16 it would be off by up to 2^-9 relative, about 0.03 at lse = 8."""
    q, k, v = qkv((1, 2, 40, 16), (1, 2, 60, 16), dtype=torch.float32, scale=2.0, to=dtype)
    out, lse = flash_attention(q, k, v, is_causal=True, block_size=16, return_lse=True)
    assert out.dtype == dtype and lse.dtype == torch.float32
    visible = torch.arange(60)[None, :] <= torch.arange(40)[:, None]
    exact = explicit_lse(q.double(), k.double(), visible, 0.25)
    assert (lse.double() - exact).abs().max().item() <= 1e-5


def test_numpy_integers_are_taken_for_the_tiles_and_the_window():
    # the package takes NumPy integers for sizes (check_sizes); window and block_size refused them
    q, k, v = qkv((1, 2, 9, 4))  # (b, h, t, d) each, float64
    want = flash_attention(q, k, v, is_causal=True, window=3, block_size=(2, 4))
    got = flash_attention(q, k, v, is_causal=True, window=np.int64(3),
                          block_size=(np.int32(2), np.int64(4)))
    assert torch.equal(got, want)
    assert torch.equal(flash_attention(q, k, v, block_size=np.int64(4)), flash_attention(q, k, v, block_size=4))


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    @pytest.mark.parametrize(
        "shapes, kwargs, message",
        [
            (((5,), (3, 4), (3, 4)), {}, r"query must have at least 2 dimensions.*got a 1-d tensor of shape \(5,\)"),
            (((2, 5, 4), (2, 3, 6), (2, 3, 4)), {}, "same last dimension d_k, got 4 and 6"),
            (((2, 5, 4), (2, 3, 4), (2, 3, 4)), {"return_lse": "no"}, "return_lse must be a bool, got 'no'"),
            (((2, 5, 4), (2, 3, 4), (2, 3, 4)), {"enable_gqa": "no"}, "enable_gqa must be a bool, got 'no'"),
            (((2, 5, 4), (2, 3, 4), (2, 2, 4)), {}, "same number of tokens t_k, got 3 and 2"),
            (((2, 5, 4), (3, 3, 4), (3, 3, 4)), {}, r"must broadcast.*got \(2,\), \(3,\), \(3,\)"),
            (
                ((2, 5, 4), (2, 3, 4), (2, 3, 4)),
                {"block_size": 0},
                "block_size must be an integer >= 1 or a pair of them, got 0",
            ),
            (((2, 5, 4), (2, 3, 4), (2, 3, 4)), {"block_size": 2.5}, "got 2.5"),
        ],
    )
    def test_shapes_must_agree_and_block_size_be_positive(self, shapes, kwargs, message):
        q, k, v = (torch.randn(s) for s in shapes)
        with pytest.raises(ValueError, match=message):
            flash_attention(q, k, v, **kwargs)

    def test_query_key_and_value_must_share_one_dtype(self):
        q, k, v = qkv((1, 3, 2), (1, 3, 2), (1, 3, 2))
        with pytest.raises(ValueError, match=r"share one dtype.*got query torch\.float32 on cpu, key torch\.float64"):
            flash_attention(q.float(), k, v)

    @pytest.mark.parametrize(
        "shapes, kwargs, message",
        [
            (((2, 6, 5, 4), (2, 4, 3, 4), (2, 4, 3, 4)), {},
             "must divide the query's h=6, got 4"),
            (((2, 3, 5, 4), (2, 6, 3, 4), (2, 6, 3, 4)), {},
             "must divide the query's h=3, got 6"),
            (((2, 6, 5, 4), (2, 3, 3, 4), (2, 4, 3, 4)), {}, r"value\'s number of heads \(dim -3\) must divide the query\'s h=6"),
            (((5, 4), (3, 4), (3, 4)), {},
             r"at least 3 dimensions \(\.\.\., h, t, d\).*got a 2-d tensor of shape \(5, 4\)"),
        ],
    )
    def test_query_heads_must_be_a_multiple_of_key_heads(self, shapes, kwargs, message):
        q, k, v = (torch.randn(s) for s in shapes)
        with pytest.raises(ValueError, match=message):
            flash_attention(q, k, v, enable_gqa=True, **kwargs)

    @pytest.mark.parametrize(
        "kwargs, message",
        [
            ({"is_causal": True, "window": 0}, "window must be None or an integer >= 1, got 0"),
            ({"is_causal": True, "window": True}, "got True"),
            ({"is_causal": True, "window": 2.0}, "got 2.0"),
            ({"window": 2}, "pass is_causal=True, got is_causal=False, window=2"),
            ({"alignment": "bottom_right"},
             r"apply to causal attention only.*got is_causal=False, window=None, alignment='bottom_right'"),
            ({"is_causal": True, "alignment": "lower_right"}, "got 'lower_right'"),
            ({"block_size": (2, 0)}, "or a pair of them, got \\(2, 0\\)"),
            ({"block_size": (2, 3, 4)}, "got \\(2, 3, 4\\)"),
            ({"block_size": (2,)}, "got \\(2,\\)"),
        ],
    )
    def test_window_alignment_and_block_size_must_be_valid(self, kwargs, message):
        q, k, v = qkv((2, 5, 4), (2, 5, 4), (2, 5, 4))
        with pytest.raises(ValueError, match=message):
            flash_attention(q, k, v, **kwargs)

    def test_zero_width_queries_and_keys_are_refused(self) -> None:
        """d_k = 0 has no scale 1/sqrt(d_k); it used to raise ZeroDivisionError."""
        q, k, v = qkv((2, 3, 0), (2, 5, 0), (2, 5, 3))
        with pytest.raises(ValueError, match="d_k must be at least 1.*got d_k = 0"):
            flash_attention(q, k, v)
