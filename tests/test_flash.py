"""flash_attention: exact against both references, FlashAttention's backward, tiles only."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.autograd import gradcheck
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from attention.flash import flash_attention
from attention.functional import scaled_dot_product_attention

TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-10}


def random_qkv(batch, t_q, t_k, d_k, d_v, dtype=torch.float64, seed=0, requires_grad=False):
    """Standard-normal query (..., t_q, d_k), key (..., t_k, d_k), value (..., t_k, d_v)."""
    g = torch.Generator().manual_seed(seed)
    shapes = [(*batch, t_q, d_k), (*batch, t_k, d_k), (*batch, t_k, d_v)]
    return [torch.randn(s, generator=g, dtype=dtype).requires_grad_(requires_grad) for s in shapes]


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
    q, k, v = random_qkv(batch, t_q, t_k, 8, 5, dtype)
    assert_matches_references(q, k, v, is_causal, block_size)


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("t_q, t_k", [(70, 65), (65, 130)])
def test_equals_sdpa_over_several_default_blocks(is_causal, t_q, t_k):
    q, k, v = random_qkv((2,), t_q, t_k, 8, 5, torch.float32)
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
    q, k, v = random_qkv(batch, t_q, t_k, d_k, d_v, dtype)
    assert_matches_references(q, k, v, is_causal, block_size)


def test_custom_scale_and_large_logits():
    q, k, v = random_qkv((2,), 11, 13, 4, 3, torch.float32)
    out = flash_attention(q, k, v, block_size=4, scale=30.0)  # scores in the hundreds: no overflow
    assert torch.isfinite(out).all()
    torch.testing.assert_close(
        out, F.scaled_dot_product_attention(q, k, v, scale=30.0), rtol=0, atol=1e-5
    )


def test_no_keys_gives_zeros_like_torch():
    q, k, v = random_qkv((2,), 5, 0, 4, 3)
    out = flash_attention(q, k, v, block_size=2)
    assert torch.equal(out, torch.zeros(2, 5, 3, dtype=torch.float64))
    assert torch.equal(out, F.scaled_dot_product_attention(q, k, v))


def test_leading_dimensions_broadcast():
    q, _, _ = random_qkv((2, 3), 7, 5, 4, 6)
    _, k, v = random_qkv((1, 3), 7, 5, 4, 6, seed=1)
    expected = F.scaled_dot_product_attention(q, k.expand(2, 3, 5, 4), v.expand(2, 3, 5, 6))
    torch.testing.assert_close(flash_attention(q, k, v, block_size=3), expected, rtol=0, atol=1e-10)


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("block_size, t_q, t_k", [(1, 3, 4), (2, 5, 3), (3, 7, 7), (4, 2, 6)])
def test_gradcheck(is_causal, block_size, t_q, t_k):
    q, k, v = random_qkv((2,), t_q, t_k, 3, 2, requires_grad=True)
    assert gradcheck(lambda q, k, v: flash_attention(q, k, v, is_causal, block_size), (q, k, v))


def test_second_derivatives_are_refused_not_silently_wrong():
    """The hand-written backward is not differentiable itself: a double backward must raise."""
    q, k, v = random_qkv((2,), 5, 6, 3, 2, requires_grad=True)
    out = flash_attention(q, k, v, block_size=2)
    grads = torch.autograd.grad(out.pow(2).sum(), (q, k, v), create_graph=True)
    expected = torch.autograd.grad(scaled_dot_product_attention(q, k, v).pow(2).sum(), (q, k, v))
    for grad, grad_expected in zip(grads, expected):  # first order still right under create_graph
        torch.testing.assert_close(grad, grad_expected, rtol=0, atol=1e-10)
    for second in (
        lambda: torch.autograd.grad(grads[0].sum(), q),
        lambda: torch.autograd.grad(grads[2].sum(), (q, k, v), allow_unused=True),
        lambda: torch.autograd.gradgradcheck(lambda *x: flash_attention(*x, False, 2), (q, k, v)),
    ):
        with pytest.raises(RuntimeError, match="flash_attention has first derivatives only"):
            second()


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("block_size", [1, 7, 64])
def test_backward_equals_autograd_through_reference(is_causal, block_size):
    q, k, v = random_qkv((2, 2), 13, 17, 4, 3, requires_grad=True)
    grad_out = torch.randn(2, 2, 13, 3, dtype=torch.float64)
    ours = torch.autograd.grad(flash_attention(q, k, v, is_causal, block_size), (q, k, v), grad_out)
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
    q, k, v = random_qkv((1,), t, t, 4, 4, requires_grad=True)
    with OpRecorder() as rec:
        out = flash_attention(q, k, v, is_causal=True, block_size=block)
        out.backward(torch.ones_like(out))
    assert rec.largest <= t * 4  # an output-sized (t, d) tensor at most, never (t, t) = 1024
    assert not any("scaled_dot_product" in op for op in rec.ops)


def test_causal_skips_key_blocks_above_the_diagonal():
    q, k, v = random_qkv((1,), 32, 32, 4, 4)  # 4 x 4 blocks of 8
    counts = {}
    for is_causal in (False, True):
        with OpRecorder() as rec:
            flash_attention(q, k, v, is_causal=is_causal, block_size=8)
        counts[is_causal] = sum("bmm" in op or "aten.mm" in op for op in rec.ops)
    assert (
        counts[True] * 16 == counts[False] * 10
    )  # 10 of the 16 tiles lie on or below the diagonal


@pytest.mark.parametrize(
    "shapes, kwargs, message",
    [
        (((5,), (3, 4), (3, 4)), {}, "query must have shape"),
        (((2, 5, 4), (2, 3, 6), (2, 3, 4)), {}, "same width d_k, got 4 and 6"),
        (((2, 5, 4), (2, 3, 4), (2, 2, 4)), {}, "same length t_k, got 3 and 2"),
        (((2, 5, 4), (3, 3, 4), (3, 3, 4)), {}, "must broadcast"),
        (
            ((2, 5, 4), (2, 3, 4), (2, 3, 4)),
            {"block_size": 0},
            "block_size must be an integer >= 1, got 0",
        ),
        (((2, 5, 4), (2, 3, 4), (2, 3, 4)), {"block_size": 2.5}, "got 2.5"),
    ],
)
def test_bad_input_raises(shapes, kwargs, message):
    q, k, v = (torch.randn(s) for s in shapes)
    with pytest.raises(ValueError, match=message):
        flash_attention(q, k, v, **kwargs)


def test_mixed_dtypes_raise():
    q, k, v = random_qkv((1,), 3, 3, 2, 2)
    with pytest.raises(ValueError, match="share one dtype"):
        flash_attention(q.float(), k, v)
