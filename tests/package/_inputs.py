"""Inputs and weights shared by several test modules."""

import copy
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import pytest
import torch
from hypothesis import settings
from hypothesis import strategies as st
from torch import nn

# The property tests' settings: few examples, no deadline (a 2-core machine, busy with the rest of
# the suite), and the seeds they draw inputs from.
FAST = settings(max_examples=25, deadline=None)
seeds = st.integers(min_value=0, max_value=2**31 - 1)

# (query dtype, mask dtype, whether torch's scaled_dot_product_attention takes the mask): a bool
# mask, or an additive one in float32 or the query's dtype; an integer mask or another float one
# it refuses (the package's attention follows it both ways).
MASK_DTYPES = [
    (torch.float64, torch.bool, True),
    (torch.float64, torch.float64, True),
    (torch.float64, torch.float32, True),
    (torch.bfloat16, torch.float32, True),
    (torch.bfloat16, torch.bfloat16, True),
    (torch.float32, torch.uint8, False),
    (torch.float32, torch.int32, False),
    (torch.float64, torch.int64, False),
    (torch.float32, torch.float64, False),
    (torch.float32, torch.float16, False),
    (torch.bfloat16, torch.float16, False),
]


def mask_dtypes(accepted: bool) -> list[tuple[torch.dtype, torch.dtype]]:
    """The (query dtype, mask dtype) pairs of :data:`MASK_DTYPES` that torch accepts, or refuses."""
    return [(query, mask) for query, mask, ok in MASK_DTYPES if ok == accepted]


def qkv(
    q_shape: Sequence[int],
    k_shape: Sequence[int] | None = None,
    v_shape: Sequence[int] | None = None,
    *,
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
    scale: float = 1.0,
    to: torch.dtype | None = None,
    requires_grad: bool = False,
    generator: torch.Generator | None = None,
) -> list[torch.Tensor]:
    """Query, key and value drawn N(0, scale²) in that order in ``dtype``, then rounded ``to``.

    The key takes the query's shape unless given, the value the key's: ``qkv((b, h, t, d))`` for
    self-attention, ``qkv((b, h, t_q, d_k), (b, h_kv, t_k, d_k), (b, h_kv, t_k, d_v))`` for
    grouped-query heads and another width of values. One generator seeded with ``seed`` draws
    them, or ``generator`` itself, so that a caller can draw more after them. Drawing in one
    dtype and rounding to another keeps the same draw for every ``to``.
    """
    k_shape = q_shape if k_shape is None else k_shape
    v_shape = k_shape if v_shape is None else v_shape
    g = torch.Generator().manual_seed(seed) if generator is None else generator
    drawn = [scale * torch.randn(tuple(s), generator=g, dtype=dtype) for s in (q_shape, k_shape, v_shape)]
    return [(x if to is None else x.to(to)).requires_grad_(requires_grad) for x in drawn]


def seeded_randn(seed: int, *shape: int) -> torch.Tensor:
    """One float64 standard-normal tensor from its own generator: ``seed`` alone fixes it."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def randomize(module: nn.Module) -> nn.Module:
    """Every parameter drawn anew, gains and biases included: nothing left at its initial value."""
    torch.manual_seed(1)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.normal_(0.0, 0.5)
    return module


# What a bool flag must refuse: a string from a config file ("no" is truthy, and truth-testing it
# would turn the flag on) and an int.
NON_BOOLS = ["no", 1]


def refuses_non_bool(flag: str, value: object) -> pytest.RaisesExc:
    """``pytest.raises`` for ``flag`` given the non-bool ``value``: a ValueError naming both."""
    return pytest.raises(ValueError, match=rf"\b{flag} must be a bool, got {re.escape(repr(value))} of type")


def check_refuses_non_bools(flag: str, call: Callable[[object], object]) -> None:
    """``call(value)`` raises :func:`refuses_non_bool`'s ValueError for every value of
    :data:`NON_BOOLS`: the whole test of a module's one flag."""
    for value in NON_BOOLS:
        with refuses_non_bool(flag, value):
            call(value)


@contextmanager
def uninitialized_memory_filled() -> Iterator[None]:
    """Within it, ``torch.empty`` (and ``to_empty``) fill their memory: NaN for floats, the largest
    value for integers and bools, so that a result read from uninitialized memory shows."""
    deterministic = torch.are_deterministic_algorithms_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(deterministic)
        torch.utils.deterministic.fill_uninitialized_memory = fill


def check_half_precision_copy(model: nn.Module, ids: torch.Tensor, dtype: torch.dtype) -> None:
    """A float64 language model copied to ``dtype`` returns logits and attention weights in that
    dtype, the logits within 5% (of the largest) of the float64 model's."""
    logits, weights = copy.deepcopy(model).to(dtype)(ids, return_weights=True)
    assert logits.dtype == dtype and {w.dtype for w in weights} == {dtype}
    want = model(ids)
    assert (logits.double() - want).abs().max() <= 0.05 * want.abs().max()


def gqa_half_grad_errors(attend, dtype: torch.dtype) -> tuple[list[float], list[float]]:
    """Max errors of dq, dk, dv against float64, of ``attend(q, k, v)`` (enable_gqa, h = 4 query
    heads on h_kv = 1) and of the plain computation in float32 from ``dtype`` inputs rounded
    once. The g = 4 query heads are nearly equal and their output gradients nearly cancel, so
    that a key-value head's gradient, the sum of the g heads', is far smaller than each term."""
    g = torch.Generator().manual_seed(0)
    q0 = torch.randn(1, 1, 8, 16, generator=g, dtype=torch.float64)
    q = torch.cat([q0 + 1e-3 * torch.randn(q0.shape, generator=g, dtype=torch.float64)
                   for _ in range(4)], dim=1)  # (1, 4, 8, 16)
    k, v = torch.randn(2, 1, 1, 8, 16, generator=g, dtype=torch.float64).unbind(0)
    do0 = torch.randn(1, 1, 8, 16, generator=g, dtype=torch.float64)
    d_out = torch.cat([do0, -do0, 1.01 * do0, -do0], dim=1)  # (1, 4, 8, 16)

    def grads(fn, in_dtype):
        leaves = [x.to(in_dtype).detach().clone().requires_grad_() for x in (q, k, v)]
        (fn(*leaves).double() * d_out).sum().backward()
        return [x.grad.double() for x in leaves]

    def plain(q, k, v, compute):
        qc, kc, vc = (x.to(compute) for x in (q, k, v))
        kc, vc = (x.expand(1, 4, 8, 16) for x in (kc, vc))
        return (torch.softmax(qc @ kc.transpose(-2, -1) / 4, dim=-1) @ vc).to(q.dtype)

    exact = grads(lambda q, k, v: plain(q, k, v, torch.float64), torch.float64)
    base = grads(lambda q, k, v: plain(q, k, v, torch.float32), dtype)
    ours = grads(attend, dtype)
    error = lambda got: [float((a - e).abs().max()) for a, e in zip(got, exact)]  # noqa: E731
    return error(ours), error(base)
