"""FlashAttention as Triton GPU kernels, forward and backward: the algorithm of ``flash.py``
on a GPU.

Notation (see CONTRIBUTING.md):
    b      batch size
    h      query heads, h_kv key and value heads (h_kv divides h)
    t_q    number of queries, t_k number of keys
    d_h    head width (d_k = d_v = d_h)

:func:`triton_flash_attention` checks its arguments, runs the kernels of
:mod:`attention.triton_forward` and :mod:`attention.triton_backward`, and makes the result
differentiable: an ``autograd.Function`` whose forward pass saves Q, K, V, the output and the
log-sum-exp of each row (all O(t · d_h)) and whose backward pass recomputes each tile of
weights from them, as section 7.4 derives. The backward pass is itself not differentiable: a
second derivative raises. Like ``flash_attention`` it takes learned sinks (one logit per head,
differentiable); beyond its options, a choice of backward (``deterministic``: dQ in a pass of
its own, or by atomic additions) and :class:`TritonOptions`, speed choices off by default
(chapter 7 gives their H200 timings); :func:`triton_last_configs` says which tiles, warps and
stages the last call ran with.

This module imports Triton when it is imported (``import attention`` does not import it); the
kernels are defined when first used. On a machine without CUDA they can run in Triton's
interpreter, on CPU tensors, while the environment variable ``TRITON_INTERPRET=1`` is set, for
example inside :func:`triton_interpreter`; that is how the tests and the book check them.
:func:`triton_available` says whether, and how, the kernels can run here.
"""

import contextlib
import importlib
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any, NoReturn

import torch
from torch import Tensor

from ._checks import (
    Alignment,
    attention_kernel,
    check_causal_options,
    check_flags,
    check_qkv,
    check_scale,
    check_sinks,
    is_integer,
)

_IMPORT_ERROR: ImportError | None  # why Triton could not be imported, if it could not
try:
    import triton
except ImportError as error:  # the package works without Triton; this module explains why not
    triton, _IMPORT_ERROR = None, error
else:
    _IMPORT_ERROR = None

__all__ = ["TritonOptions", "triton_available", "triton_flash_attention", "triton_interpreter",
           "triton_last_configs"]

HEAD_DIMS = (16, 32, 64, 128)
DTYPES = (torch.float16, torch.bfloat16)
# CUDA's limit on a grid's second axis, which numbers the (batch, head) pairs
MAX_GRID_Y = 65535
MAX_INT32 = 2**31 - 1  # offsets inside one (batch, head) slice are int32 in the kernels
_last_configs: dict[str, tuple[int, int, int, int]] = {}


def _interpreting() -> bool:
    """Whether Triton would define a kernel now for its interpreter
    (TRITON_INTERPRET is set)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes", "y")


def triton_available() -> tuple[bool, str]:
    """Whether :func:`triton_flash_attention` can run here, and why (not).

    Returns:
        (available, reason): a bool, and a sentence naming the device, the interpreter, or what
        is missing.

    Examples:
        >>> available, reason = triton_available()
        >>> isinstance(available, bool) and isinstance(reason, str)
        True
    """
    if triton is None:
        return False, f"Triton is not installed ({_IMPORT_ERROR})"
    if _interpreting():
        return True, "Triton interpreter (TRITON_INTERPRET=1): runs on CPU tensors, slowly"
    if not torch.cuda.is_available():
        hint = "set TRITON_INTERPRET=1, or use triton_interpreter(), to run it on the CPU"
        return False, f"no CUDA device ({hint})"
    return True, f"CUDA device {torch.cuda.get_device_name()}"


@contextlib.contextmanager
def triton_interpreter() -> Iterator[None]:
    """Inside this block Triton kernels run in Triton's interpreter, on CPU tensors.

    Sets ``TRITON_INTERPRET=1`` and restores its previous value on exit. Kernels that
    ``triton.jit`` defines inside the block are interpreted kernels; this package's kernels are
    defined again when the variable has changed since they were. If Triton was imported before
    the variable was set, the functions of ``triton.language`` written in Triton (``tl.zeros``,
    ``tl.sum``, ...) were compiled-kernel functions, which refuse to be called from Python:
    inside the block they run in the interpreter too.

    Returns:
        A context manager; the block runs with ``TRITON_INTERPRET=1``.

    Raises:
        RuntimeError: if Triton is not installed.

    Examples:
        >>> q = torch.randn(1, 1, 16, 16, dtype=torch.float16)
        >>> with triton_interpreter():  # doctest: +SKIP
        ...     out = triton_flash_attention(q, q, q, is_causal=True)  # on the CPU, slowly
    """
    if triton is None:
        raise RuntimeError(f"Triton is not installed ({_IMPORT_ERROR})")
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    interpreted: dict[object, Any] = {}

    # a @triton.jit function called from an interpreted kernel
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self.fn not in interpreted:
            interpreted[self.fn] = InterpretedFunction(self.fn)
        return interpreted[self.fn](*args, **kwargs)

    before, compiled_call = os.environ.get("TRITON_INTERPRET"), JITFunction.__call__
    os.environ["TRITON_INTERPRET"] = "1"
    JITFunction.__call__ = call
    try:
        yield
    finally:
        JITFunction.__call__ = compiled_call
        if before is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = before


def _kernels() -> tuple[ModuleType, ModuleType]:
    """The forward and backward kernel modules, defined for the interpreter if TRITON_INTERPRET
    is set now, else compiled (``triton.jit`` decides when it defines a kernel:
    define them again)."""
    from . import triton_backward, triton_forward

    if triton_forward.INTERPRET != _interpreting():
        triton_forward = importlib.reload(triton_forward)
        # it imports the helpers of the new one
        triton_backward = importlib.reload(triton_backward)
    return triton_forward, triton_backward


@dataclass(frozen=True)
class TritonOptions:
    """Choices of the kernels that change their speed, not their result (up to rounding).

    None of them is on by default: each waits for a GPU run to show it faster.

    Args:
        longest_first: the query blocks with the most keys to visit (the last ones, under a
            causal mask) start first, in the forward and dQ kernels, so that short blocks
            fill the end.
        descriptors: the forward kernel reads Q, K and V through tensor descriptors
            (``tl.make_tensor_descriptor``, the Tensor Memory Accelerator on Hopper GPUs)
            instead of tiles of pointers; needs the last axis contiguous and 16-byte
            aligned rows.
        warp_specialize: the forward kernel's loops are warp-specialized
            (``tl.range(..., warp_specialize=True)``): some warps load, others compute.
            Needs a GPU of compute capability 10.0 or later (Blackwell): Triton 3.6 failed
            to compile it for an H200.

    Raises:
        ValueError: if longest_first, descriptors or warp_specialize is not a bool.

    Examples:
        >>> TritonOptions(longest_first=True)
        TritonOptions(longest_first=True, descriptors=False, warp_specialize=False)
    """

    longest_first: bool = False
    descriptors: bool = False
    warp_specialize: bool = False

    def __post_init__(self) -> None:
        """Refuse a choice that is not a bool: each becomes a constexpr of the kernels, where
        a string such as "no" would be compiled in as true."""
        check_flags(longest_first=self.longest_first, descriptors=self.descriptors,
                    warp_specialize=self.warp_specialize)


@dataclass(frozen=True)
class _Call:
    """What the kernels need besides the tensors."""

    scale: float
    causal: bool
    offset: int  # position of query 0: 0 (top-left) or t_k - t_q (bottom-right)
    window: int | None
    blocks: tuple[int, int] | None  # (block_m, block_n), or None to autotune
    deterministic: bool
    tuning: TritonOptions


def triton_last_configs() -> dict[str, tuple[int, int, int, int]]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) of each kernel the last call ran, by kernel:
    ``forward``, then after a backward pass ``dkdv`` and (deterministic) ``dq``.

    Returns:
        A copy of the configurations, by kernel name; empty before the first call.

    Examples:
        >>> q = torch.randn(1, 8, 1024, 64, device="cuda",
        ...                 dtype=torch.float16)  # doctest: +SKIP
        >>> _ = triton_flash_attention(q, q, q, is_causal=True)  # doctest: +SKIP
        >>> triton_last_configs()["forward"]  # doctest: +SKIP
    """
    return dict(_last_configs)


def _launches_nothing(query: Tensor, key: Tensor) -> bool:
    """Whether a call needs no kernel: no batch, head or query (the output is empty), no key
    (a row that sees none is 0, as in torch), or meta tensors (shapes only, as torch's SDPA)."""
    return query.numel() == 0 or key.shape[2] == 0 or query.is_meta


def _on_device(tensor: Tensor) -> contextlib.AbstractContextManager[object]:
    """Make the tensor's GPU current while its kernels launch: Triton launches on the current
    device, so tensors on cuda:1 while cuda:0 is current would be read from the wrong GPU
    (flash-attn's and torch's Triton callers guard the same way)."""
    return torch.cuda.device(tensor.device) if tensor.is_cuda else contextlib.nullcontext()


class _TritonFlashAttention(torch.autograd.Function):
    """Autograd wrapper: saves Q, K, V, O and lse (all O(t · d_h)), never the score matrix."""

    @staticmethod
    def forward(
        ctx: Any, query: Tensor, key: Tensor, value: Tensor, sinks: Tensor | None, call: _Call
    ) -> Tensor:
        _last_configs.clear()
        if _launches_nothing(query, key):
            out = torch.zeros_like(query)  # (b, h, t_q, d_h)
            lse = query.new_empty(query.shape[:3], dtype=torch.float32)  # (b, h, t_q), unread
        else:
            forward = _kernels()[0].forward
            with _on_device(query):
                out, lse, config = forward(query, key, value, sinks, call.scale, call.causal,
                                           call.offset, call.window, call.blocks,
                                           call.tuning.longest_first, call.tuning.descriptors,
                                           call.tuning.warp_specialize)
            _last_configs["forward"] = config
        ctx.save_for_backward(query, key, value, out, lse, sinks)
        ctx.call = call
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        query, key, value, out, lse, sinks = ctx.saved_tensors
        grads = _TritonFlashAttentionBackward.apply(grad_out, query, key, value, out, lse,
                                                    sinks, ctx.call)
        return *grads, None


class _TritonFlashAttentionBackward(torch.autograd.Function):
    """The kernels' backward pass as a graph node of its own, so that differentiating it raises.

    The kernels compute dQ, dK and dV from constants (O and lse), so autograd could not
    differentiate them; without this node a second derivative would silently be wrong or zero.
    """

    @staticmethod
    def forward(ctx: Any, grad_out: Tensor, query: Tensor, key: Tensor, value: Tensor,
                out: Tensor, lse: Tensor, sinks: Tensor | None,
                call: _Call) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        if _launches_nothing(query, key):  # the output is 0 or empty: every gradient is 0
            return (torch.zeros_like(query), torch.zeros_like(key), torch.zeros_like(value),
                    None if sinks is None else torch.zeros_like(sinks))
        backward = _kernels()[1].backward
        with _on_device(query):
            grads, configs = backward(query, key, value, out, lse, grad_out, sinks, call.scale,
                                      call.causal, call.offset, call.window, call.blocks,
                                      call.deterministic, call.tuning.longest_first)
        _last_configs.update(configs)
        return grads

    @staticmethod
    def backward(ctx: Any, *grads: Tensor | None) -> NoReturn:
        raise RuntimeError(
            "triton_flash_attention has first derivatives only: its backward kernels cannot be "
            "differentiated again; for second derivatives use scaled_dot_product_attention"
        )


def _check_tensors(query: Tensor, key: Tensor, value: Tensor, enable_gqa: bool) -> None:
    """ValueError for tensors the kernels do not take."""
    device = "cpu" if _interpreting() else "cuda"
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        if not isinstance(tensor, Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.dim() != 4:
            raise ValueError(
                f"{name} must have shape (b, h, t, d_h), got shape {tuple(tensor.shape)}"
            )
        if tensor.dtype not in DTYPES:
            raise ValueError(f"{name} must be float16 or bfloat16, got {tensor.dtype}")
        if tensor.device.type not in (device, "meta"):  # meta: shapes only, as in torch
            raise ValueError(f"{name} must be on {device} or meta, got {tensor.device}")
    # one dtype, one device, widths: every kernel's check
    check_qkv(query, key, value, min_dim=4)
    b, h, t_q, d_h = query.shape
    h_kv = key.shape[1]
    if enable_gqa and (key.shape[1] != value.shape[1] or h_kv == 0 or h % h_kv):
        raise ValueError(
            "with enable_gqa, key and value must have the same number of heads h_kv, and h "
            f"must be a multiple of it, got h = {h}, key heads {key.shape[1]} "
            f"and value heads {value.shape[1]}"
        )
    heads = "h_kv" if enable_gqa else str(h)
    if key.shape != value.shape or key.shape[0] != b or key.shape[3] != d_h or (
        not enable_gqa and h_kv != h
    ):
        shapes = f"{tuple(key.shape)} and {tuple(value.shape)}"
        raise ValueError(
            f"key and value must have shape ({b}, {heads}, t_k, {d_h}), got {shapes}"
        )
    if d_h not in HEAD_DIMS:
        raise ValueError(f"d_h must be one of {HEAD_DIMS}, got {d_h}")
    if b * h > MAX_GRID_Y:  # the grid's second axis numbers the (batch, head) pairs
        raise ValueError(
            f"b · h must be at most {MAX_GRID_Y} (CUDA's grid limit), "
            f"got b · h = {b} · {h} = {b * h}"
        )
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        _check_slice_offsets(name, tuple(tensor.shape), tensor.stride())


def _check_slice_offsets(name: str, shape: tuple[int, ...], strides: tuple[int, ...]) -> None:
    """ValueError unless every offset inside one (batch, head) slice of a (b, h, t, d_h) tensor
    fits in int32, as the kernels compute them (rows · stride_t + columns · stride_d)."""
    last = (shape[2] - 1) * strides[2] + (shape[3] - 1) * strides[3]
    if last > MAX_INT32:
        raise ValueError(
            f"{name}: the offset of the last element of a (batch, head) slice must be at most "
            f"{MAX_INT32} (int32), got (t - 1) · stride_t + (d_h - 1) · stride_d = {last}"
        )


def _check_tuning(options: TritonOptions, tensors: tuple[Tensor, ...],
                  capability: tuple[int, int] | None = None) -> None:
    """ValueError for a choice of :class:`TritonOptions` that these inputs, on a GPU of this
    compute capability (None: the tensors' GPU, if any, else the interpreter), do not allow."""
    if not isinstance(options, TritonOptions):
        raise ValueError(f"options must be a TritonOptions, got {type(options).__name__}")
    # Triton 3.6 failed to compile the warp-specialized loop for an H200 (9.0) in the run of
    # 2026-11-30; its tutorial warp-specializes on Blackwell (10.x) only. The device is asked
    # only then: every call's host time counts at small t.
    if options.warp_specialize and capability is None and tensors[0].is_cuda:
        capability = torch.cuda.get_device_capability(tensors[0].device)
    if options.warp_specialize and capability is not None and capability < (10, 0):
        raise ValueError(
            f"warp_specialize needs a GPU of compute capability 10.0 or later (Blackwell), "
            f"got {capability[0]}.{capability[1]}"
        )
    if options.descriptors:
        for name, tensor in zip(("query", "key", "value"), tensors):
            strides = tensor.stride()
            if strides[3] != 1 or any(s % 8 for s in strides[:3]) or tensor.data_ptr() % 16:
                raise ValueError(
                    f"descriptors need {name}'s last axis contiguous, its other strides "
                    f"multiples of 8 and its start 16-byte aligned, got strides {strides}, "
                    f"start at byte {tensor.data_ptr() % 16} of 16"
                )


def _check_options(
    is_causal: bool, block_m: int | None, block_n: int | None, alignment: Alignment,
    window: int | None
) -> tuple[int | None, int | None, int | None]:
    """ValueError for options the kernels do not take, each named; returns block_m, block_n
    and window as Python ints (a NumPy integer is taken, as sizes are) or None."""
    blocks: list[int | None] = []
    for name, block in (("block_m", block_m), ("block_n", block_n)):
        if block is not None and (not is_integer(block) or block < 16 or block & (block - 1)):
            raise ValueError(f"{name} must be a power of two >= 16, got {block!r}")
        blocks.append(None if block is None else int(block))
    return blocks[0], blocks[1], check_causal_options(is_causal, alignment, window)


@attention_kernel
def triton_flash_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
    enable_gqa: bool = False,
    alignment: Alignment = "top_left",
    window: int | None = None,
    sinks: Tensor | None = None,
    deterministic: bool = True,
    options: TritonOptions | None = None,
) -> Tensor:
    """softmax(Q Kᵀ · scale) V with our Triton kernels, differentiable (first derivatives).

    Args:
        query: (b, h, t_q, d_h), float16 or bfloat16, d_h in 16, 32, 64, 128.
        key: (b, h, t_k, d_h), same dtype and device; with ``enable_gqa``, (b, h_kv, t_k, d_h).
        value: the shape of ``key``.
        is_causal: query i attends keys j <= i (top-left aligned, as torch's SDPA), or as
            ``alignment`` says.
        scale: multiplies the scores; defaults to 1 / sqrt(d_h).
        block_m: queries per tile (a power of two, at least 16). With ``block_m`` and
            ``block_n`` both None (the default) the kernels choose their tiles, warps and
            pipeline stages by autotuning; with one of them given, the other is 64 and
            4 warps run a tile.
        block_n: keys per tile (a power of two, at least 16).
        enable_gqa: grouped-query attention as in torch: query head i uses key and value head
            i // (h // h_kv); K and V are read in place, never repeated.
        alignment: with ``is_causal``, ``"top_left"`` (query i at position i) or
            ``"bottom_right"`` (query i at position t_k - t_q + i, as
            ``torch.nn.attention.bias.causal_lower_right``).
        window: with ``is_causal``, each query sees only the ``window`` latest keys up to its
            own position p: keys j with p - window < j <= p.
        sinks: learned attention sinks, (h,): one logit per query head, added to each row's
            softmax denominator only, as a key with that score and a value of zero (as in
            gpt-oss); differentiable. It is not multiplied by ``scale``.
        deterministic: True (the default) computes dQ in a kernel of its own, so that the same
            inputs give the same bits; False adds each tile's share of dQ to a float32 dQ with
            atomic additions inside the dK, dV kernel (FlashAttention-2's way: 5 products a tile
            instead of 7, in an order that varies from run to run).
        options: speed choices of the kernels (:class:`TritonOptions`), none by default.

    Returns:
        (b, h, t_q, d_h) in the inputs' dtype (float32 sums inside, rounded once). A row that
        may see no key is zero, as in torch, and its gradients are zero. Key blocks that no
        query of a tile may see are never read, so a nan or inf there does not reach the output.

    Raises:
        RuntimeError: Triton is missing, or neither CUDA nor its interpreter is available; or a
            second derivative is asked for.
        ValueError: shapes, dtypes, devices, block sizes or options the kernels do not take,
            such as an is_causal, enable_gqa or deterministic that is not a bool; b · h above
            CUDA's grid limit of 65,535, or a (batch, head) slice too long for int32.
        TypeError: flash-attn's keywords and older names (``causal``, ``softmax_scale``,
            ``window_size``, ``causal_alignment``), with the keyword this function takes.

    Examples:
        >>> q = torch.randn(1, 8, 1024, 64, device="cuda",
        ...                 dtype=torch.float16)  # doctest: +SKIP
        >>> out = triton_flash_attention(q, q, q, is_causal=True)  # doctest: +SKIP
    """
    # a CUDA query means CUDA is here: the device is named only when something is missing,
    # since every call's host time counts at small t
    on_cuda = isinstance(query, Tensor) and query.is_cuda
    if triton is None or not (on_cuda or _interpreting()):
        ok, reason = triton_available()
        if not ok:
            raise RuntimeError(f"triton_flash_attention cannot run here: {reason}")
    check_flags(enable_gqa=enable_gqa, deterministic=deterministic)
    _check_tensors(query, key, value, enable_gqa)
    scale = check_scale(scale)
    block_m, block_n, window = _check_options(is_causal, block_m, block_n, alignment, window)
    check_sinks(sinks, query)
    t_q, t_k, d_h = query.shape[2], key.shape[2], query.shape[3]
    scale = 1.0 / math.sqrt(d_h) if scale is None else float(scale)
    options = TritonOptions() if options is None else options
    _check_tuning(options, (query, key, value))
    call = _Call(
        scale=scale,
        causal=bool(is_causal),
        offset=t_k - t_q if alignment == "bottom_right" else 0,
        # max(t_q, t_k) keys already hide none (positions are below it): a wider window, past
        # 2**63 say, would reach the kernels as an unsigned or too large integer
        window=window if window is None else min(window, max(t_q, t_k)),
        blocks=None if block_m is None and block_n is None else (block_m or 64, block_n or 64),
        deterministic=bool(deterministic),
        tuning=options,
    )
    return _TritonFlashAttention.apply(query, key, value, sinks, call)
