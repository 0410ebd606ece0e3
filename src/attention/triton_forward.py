"""FlashAttention's forward pass as a Triton kernel, and what the backward kernels share
with it.

Notation (see CONTRIBUTING.md):
    b        batch size
    h        query heads, h_kv key and value heads, G = h / h_kv query heads per key-value head
    t_q      number of queries, t_k number of keys
    d_h      head width (d_k = d_v = d_h)
    BLOCK_M  query rows of a tile (B_r in chapter 7), BLOCK_N its key rows (B_c)
    c        scale · log2(e): scores times c are in base 2
    w        window: query i, at position p = i + offset, sees keys p - w < j <= p

The offset is 0 for a causal mask aligned top-left and t_k - t_q for one aligned bottom-right;
without a window a causal query sees keys j <= p.

A kernel runs as a grid of *programs*, each one thread block on the GPU, told apart by
``tl.program_id``. ``_forward`` runs on the grid (t_q / BLOCK_M, b·h): a program owns one block
of queries of one head, walks over the key blocks with the online softmax of section 7.2 in
registers (in base 2: scores times c, ``exp2``), and writes its block of Z and the log-sum-exp
of each row, in base 2. Its loop over key blocks is cut in three: blocks the window's left edge
cuts (masked), blocks every row of the program sees whole (no mask, no bounds check: the causal
split's off-diagonal blocks), and blocks cut by the diagonal or the end of the keys (masked).
:mod:`attention.triton_backward` cuts its loops the same way, with the helpers defined here.
A learned sink (one logit per head) starts each row's running maximum and sum, as one more score
with a value of zero.

The constexpr flags LONGEST_FIRST, DESCRIPTORS and WARP_SPECIALIZE are the choices of
:class:`attention.triton_flash.TritonOptions`, all off by default (chapter 7 gives their
timings on an H200).

Block shapes, warps and pipeline stages are chosen by ``triton.autotune`` on the GPU, among the
configurations below, once per (t_q, t_k, d_h, causal), dtype and flags; Triton's interpreter
gets one fixed configuration. Importing this module defines the kernels, and ``triton.jit``
decides then whether they are compiled or interpreted (``TRITON_INTERPRET``).
"""

from typing import Any

import torch
import triton
import triton.language as tl
from torch import Tensor

# (BLOCK_M, BLOCK_N, num_warps, num_stages) the autotuner tries on a GPU. Chosen from what is
# known; the autotuner measures them on the GPU at hand, once per shape:
# - forward: 64 x 64 with 4 warps (and Triton's default 3 stages) was the fastest block shape of
#   an earlier forward-only kernel on an H200 at d_h = 64 and 128, and 128 x 128 with 4 warps
#   its slowest at d_h = 128 (docs/appendix/results/runs/h200-2026-11-26/
#   triton-check-forward.log, which records no commit; committed beside H200 runs of commit
#   409322d); not measured again for today's kernel. FlashAttention-2 runs
#   128 x 64 with 4 warps at d_h = 128 and 128 x 128 at d_h = 64 on A100 and H100
#   (csrc/flash_attn/src/flash_fwd_launch_template.h); 128 query rows with 8 warps are two
#   warpgroups, as FlashAttention-3's two consumer warpgroups on Hopper. Triton's tutorial
#   (python/tutorials/06-fused-attention.py, current version) tries BLOCK_M in {64, 128},
#   BLOCK_N in {32, 64, 128}, 2, 3 or 4 stages and 4 or 8 warps, drops 8 warps for tiles under
#   128 x 128 on Hopper, reads Q, K and V through tensor descriptors, and tries warp_specialize
#   on Blackwell only (here TritonOptions.descriptors and .warp_specialize). 64 x 32 is the
#   small one that fits an sm86/sm89 GPU at d_h = 128.
# - dK, dV (BLOCK_N keys kept, BLOCK_M queries streamed) and dQ (BLOCK_M queries kept, BLOCK_N
#   keys streamed): FlashAttention-2 keeps 128 keys against 64 queries at d_h = 128, with 8
#   warps (flash_bwd_launch_template.h); the tutorial 128 keys against 32 queries, and 128
#   queries against 32 keys, with 4 warps at d_h = 64. Here 128 kept rows get 8 warps: at
#   d_h = 128 the float32 dK and dV of 128 keys are 2 x 128 x 128 numbers, 256 registers a
#   thread with 4 warps (128 threads), more than the 255 a thread may have.
# Shared memory, estimated by shared_memory_bytes: every tile a program keeps, plus num_stages
# copies of every tile it streams, d_h numbers of 2 bytes a row. At d_h = 128 every
# configuration below needs at most 160 KiB, within the 163 KB a thread block may use on an A100
# (compute capability 8.0; 227 KB on an H100); the test module checks it. On sm86/sm89 GPUs
# (99 KB) Triton cannot compile the larger ones, and the autotuner times those as
# infinitely slow.
FORWARD_CONFIGS = ((64, 64, 4, 3), (64, 32, 4, 3), (128, 64, 4, 3), (128, 64, 8, 3),
                   (128, 128, 8, 2))
DKDV_CONFIGS = ((32, 64, 4, 3), (32, 128, 8, 3), (64, 128, 8, 2), (64, 64, 4, 3),
                (64, 128, 8, 3), (32, 64, 4, 4), (32, 128, 4, 3))
DQ_CONFIGS = ((64, 32, 4, 3), (128, 32, 8, 3), (128, 64, 8, 2))
# small tiles: the tests' short sequences span several blocks
INTERPRETER_CONFIG = (16, 16, 4, 1)
PREPROCESS_BLOCK = 64
TUNING_KEY = ["T_Q", "T_K", "D_H", "IS_CAUSAL"]
LOG2E = 1.4426950408889634  # scores times LOG2E are in base 2: e^x = 2^(x · LOG2E)
# never specialized: a value of 1 must not become a constant
INTS = ["T_Q", "T_K", "OFFSET", "WINDOW"]


def shared_memory_bytes(kernel: str, block_m: int, block_n: int, stages: int, d_h: int) -> int:
    """Estimated shared memory of one program: kept tiles, plus ``stages``
    copies of streamed ones.

    forward: Q (BLOCK_M rows) kept, K and V (BLOCK_N rows each) streamed; dkdv: K and V kept, Q
    and dZ streamed; dq: Q and dZ kept, K and V streamed. Each row is d_h numbers of 2 bytes.

    Args:
        kernel: ``"forward"``, ``"dkdv"`` or ``"dq"``.
        block_m: BLOCK_M, query rows of a tile.
        block_n: BLOCK_N, key rows of a tile.
        stages: pipeline stages (copies of each streamed tile).
        d_h: head width.

    Returns:
        Bytes of shared memory.

    Examples:
        >>> shared_memory_bytes("forward", 64, 64, stages=3, d_h=128) // 1024  # KiB
        112
    """
    kept, streamed = {"forward": (block_m, 2 * block_n), "dkdv": (2 * block_n, 2 * block_m),
                      "dq": (2 * block_m, 2 * block_n)}[kernel]
    return 2 * d_h * (kept + stages * streamed)


@triton.jit
def tile_pointers(base, batch, head, i, j, stride_b, stride_h, stride_i, stride_j):
    """Pointers to the (len(i), len(j)) tile of rows i, columns j of one (batch, head) slice."""
    return (base + batch * stride_b + head * stride_h + i[:, None] * stride_i
            + j[None, :] * stride_j)


@triton.jit
def load_rows(base, batch, head, rows, dims, stride_b, stride_h, stride_t, stride_d, T):
    """The (len(rows), len(dims)) tile of one (batch, head) slice, zeros in rows past T."""
    ptrs = tile_pointers(base, batch, head, rows, dims, stride_b, stride_h, stride_t, stride_d)
    return tl.load(ptrs, mask=rows[:, None] < T, other=0.0)


@triton.jit
def store_rows(base, tile, batch, head, rows, dims, stride_b, stride_h, stride_t, stride_d, T):
    """Write ``tile`` in base's dtype to rows ``rows`` (those below T) of one (batch, head)."""
    ptrs = tile_pointers(base, batch, head, rows, dims, stride_b, stride_h, stride_t, stride_d)
    tl.store(ptrs, tile.to(base.dtype.element_ty), mask=rows[:, None] < T)


@triton.jit
def in_order(lo, mid_lo, mid_hi, hi):
    """A loop's four ends, clamped so that lo <= mid_lo <= mid_hi <= hi."""
    hi = tl.maximum(hi, lo)
    mid_lo = tl.minimum(tl.maximum(mid_lo, lo), hi)
    mid_hi = tl.minimum(tl.maximum(mid_hi, mid_lo), hi)
    return lo, mid_lo, mid_hi, hi


@triton.jit
def key_range(start_m, T_Q, T_K, OFFSET, WINDOW, IS_CAUSAL: tl.constexpr,
              HAS_WINDOW: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Key blocks of the query block at start_m: [lo, mid_lo) masked, [mid_lo, mid_hi) whole,
    [mid_hi, hi) masked. Divisions only of numbers >= 0 (Triton rounds toward zero)."""
    last = tl.minimum(start_m + BLOCK_M, T_Q) - 1  # the block's last query row
    lo = start_m * 0
    mid_lo = lo
    hi = T_K + lo
    mid_hi = (T_K // BLOCK_N) * BLOCK_N  # key blocks inside the sequence
    if IS_CAUSAL:
        hi = tl.minimum(T_K, last + OFFSET + 1)  # past the last row's diagonal
        mid_hi = (tl.maximum(tl.minimum(T_K, start_m + OFFSET + 1), 0) // BLOCK_N) * BLOCK_N
        # the first row's window starts at its position - w + 1, the last row's later
        if HAS_WINDOW:
            first = tl.maximum(start_m + OFFSET - WINDOW + 1, 0)  # the first row's first key
            lo = (first // BLOCK_N) * BLOCK_N
            mid_lo = tl.cdiv(tl.maximum(last + OFFSET - WINDOW + 1, 0), BLOCK_N) * BLOCK_N
            # no row of the block sees a key (first >= hi: rows past the keys' end): no loop,
            # not even over the block lo rounds down to. seen is 1 if first < hi, else 0.
            seen = tl.minimum(tl.maximum(hi - first, 0), 1)
            hi = lo + (hi - lo) * seen
    return in_order(lo, mid_lo, mid_hi, hi)


@triton.jit
def query_range(start_n, T_Q, T_K, OFFSET, WINDOW, IS_CAUSAL: tl.constexpr,
                HAS_WINDOW: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Query blocks that see the key block at start_n: [lo, mid_lo) masked (the diagonal),
    [mid_lo, mid_hi) whole, [mid_hi, hi) masked (the window's edge, the last rows)."""
    last_key = tl.minimum(start_n + BLOCK_N, T_K) - 1
    lo = start_n * 0
    mid_lo = lo
    hi = T_Q + lo
    mid_hi = (T_Q // BLOCK_M) * BLOCK_M
    if IS_CAUSAL:
        # first row that sees key start_n
        lo = (tl.maximum(start_n - OFFSET, 0) // BLOCK_M) * BLOCK_M
        # first row sees the last key
        mid_lo = tl.cdiv(tl.maximum(last_key - OFFSET, 0), BLOCK_M) * BLOCK_M
        if HAS_WINDOW:  # row i sees key j while i + offset < j + w
            hi = tl.minimum(T_Q, last_key + WINDOW - OFFSET)
            mid_hi = (tl.maximum(tl.minimum(T_Q, start_n + WINDOW - OFFSET), 0)
                      // BLOCK_M) * BLOCK_M
        # no row sees a key of the block (its first row, start_n - offset, is past hi): no loop,
        # not even over the block lo rounds down to. seen is 1 if some row does, else 0.
        seen = tl.minimum(tl.maximum(hi - tl.maximum(start_n - OFFSET, 0), 0), 1)
        hi = lo + (hi - lo) * seen
    return in_order(lo, mid_lo, mid_hi, hi)


@triton.jit
def visible_mask(rows, keys, T_Q, T_K, OFFSET, WINDOW, IS_CAUSAL: tl.constexpr,
                 HAS_WINDOW: tl.constexpr):
    """True where query row ``rows`` may see key ``keys`` (any two shapes that broadcast)."""
    ok = (rows < T_Q) & (keys < T_K)
    if IS_CAUSAL:
        ok = ok & (keys <= rows + OFFSET)
        if HAS_WINDOW:
            ok = ok & (keys > rows + OFFSET - WINDOW)
    return ok


@triton.jit
def _forward_loop(acc, l, m, q, k_src, v_src, stride_kt, stride_vt, rows, start, end,
                  T_Q, T_K, OFFSET, WINDOW, qk_scale, IS_CAUSAL: tl.constexpr,
                  HAS_WINDOW: tl.constexpr, MASKED: tl.constexpr, BLOCK_N: tl.constexpr,
                  DESCRIPTORS: tl.constexpr, WARP_SPECIALIZE: tl.constexpr):
    """The online softmax over the key blocks in [start, end): m, l and acc stay in registers.

    ``k_src`` and ``v_src`` are pointer tiles (K read transposed) or, with DESCRIPTORS, tensor
    descriptors, whose loads are bounds-checked (zeros past the end) by the hardware (TMA).
    WARP_SPECIALIZE asks Triton to give the loads and the arithmetic warps of their own."""
    for start_n in tl.range(start, end, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        keys = start_n + tl.arange(0, BLOCK_N)  # (BLOCK_N,)
        if DESCRIPTORS:
            k_t = tl.trans(k_src.load([start_n, 0]))  # (D_H, BLOCK_N)
            v = v_src.load([start_n, 0])  # (BLOCK_N, D_H)
        elif MASKED:
            k_t = tl.load(k_src + start_n * stride_kt, mask=keys[None, :] < T_K, other=0.0)
            v = tl.load(v_src + start_n * stride_vt, mask=keys[:, None] < T_K, other=0.0)
        else:
            k_t = tl.load(k_src + start_n * stride_kt)  # (D_H, BLOCK_N), K transposed
            v = tl.load(v_src + start_n * stride_vt)  # (BLOCK_N, D_H)
        s = tl.dot(q, k_t) * qk_scale  # (BLOCK_M, BLOCK_N), in base 2
        if MASKED:
            seen = visible_mask(rows[:, None], keys[None, :], T_Q, T_K, OFFSET, WINDOW,
                                IS_CAUSAL, HAS_WINDOW)
            s = tl.where(seen, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))  # (BLOCK_M,), -inf for a row that saw nothing yet
        if MASKED:
            shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # 2^(-inf - 0) = 0, never nan
        else:
            shift = m_new
        p = tl.math.exp2(s - shift[:, None])  # (BLOCK_M, BLOCK_N)
        rescale = tl.math.exp2(m - shift)  # (BLOCK_M,), 0 while m = -inf
        l = l * rescale + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * rescale[:, None])  # (BLOCK_M, D_H), float32
        m = m_new
    return acc, l, m


@triton.jit
def block_start(BLOCK_M: tl.constexpr, LONGEST_FIRST: tl.constexpr):
    """First query row of this program's block; with LONGEST_FIRST the grid's first programs
    take the last blocks, which see the most keys under a causal mask
    (programs start in grid order)."""
    pid = tl.program_id(0)
    if LONGEST_FIRST:
        pid = tl.num_programs(0) - 1 - pid
    return pid * BLOCK_M


@triton.jit
def _slice_descriptor(base, T, stride_t, D_H: tl.constexpr, BLOCK: tl.constexpr):
    """A tensor descriptor of one (batch, head) slice, (T, D_H) with rows ``stride_t`` apart."""
    return tl.make_tensor_descriptor(base, shape=[T, D_H], strides=[stride_t, 1],
                                     block_shape=[BLOCK, D_H])


@triton.jit(do_not_specialize=INTS)
def _forward(Q, K, V, O, LSE, SINKS,
             stride_qb, stride_qh, stride_qt, stride_qd, stride_kb, stride_kh, stride_kt,
             stride_kd, stride_vb, stride_vh, stride_vt, stride_vd, stride_ob, stride_oh,
             stride_ot, stride_od, H, G, T_Q, T_K, OFFSET, WINDOW, qk_scale, D_H: tl.constexpr,
             IS_CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, HAS_SINKS: tl.constexpr,
             LONGEST_FIRST: tl.constexpr, DESCRIPTORS: tl.constexpr,
             WARP_SPECIALIZE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Z and lse (base 2) of one block of BLOCK_M queries of one head."""
    start_m = block_start(BLOCK_M, LONGEST_FIRST)
    # (batch, head) as one index; int64: offsets may pass 2**31
    bh = tl.program_id(1).to(tl.int64)
    batch, head = bh // H, bh % H
    kv_head = head // G  # grouped-query attention: G query heads read one key-value head
    rows = start_m + tl.arange(0, BLOCK_M)  # (BLOCK_M,) query indices
    cols = tl.arange(0, BLOCK_N)  # (BLOCK_N,) key offsets in a block
    dims = tl.arange(0, D_H)  # (D_H,)
    if DESCRIPTORS:
        q_desc = _slice_descriptor(Q + batch * stride_qb + head * stride_qh,
                                   T_Q, stride_qt, D_H, BLOCK_M)
        q = q_desc.load([start_m, 0])  # (BLOCK_M, D_H), zeros past T_Q
        k_src = _slice_descriptor(K + batch * stride_kb + kv_head * stride_kh,
                                  T_K, stride_kt, D_H, BLOCK_N)
        v_src = _slice_descriptor(V + batch * stride_vb + kv_head * stride_vh,
                                  T_K, stride_vt, D_H, BLOCK_N)
    else:
        q = load_rows(Q, batch, head, rows, dims, stride_qb, stride_qh, stride_qt, stride_qd,
                      T_Q)  # (BLOCK_M, D_H), kept all along
        # The first key block's pointers; block n adds n · stride. Swapping the roles of the
        # two strides reads K transposed, (D_H, BLOCK_N), with no copy.
        k_src = tile_pointers(K, batch, kv_head, dims, cols,
                              stride_kb, stride_kh, stride_kd, stride_kt)
        v_src = tile_pointers(V, batch, kv_head, cols, dims,
                              stride_vb, stride_vh, stride_vt, stride_vd)
    m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # running maximum, base 2
    l = tl.zeros([BLOCK_M], dtype=tl.float32)  # running sum of 2^(s - m)
    # the sink is one more score, with a value of zero: it starts the running sums
    if HAS_SINKS:
        sink = tl.load(SINKS + head).to(tl.float32) * 1.4426950408889634  # base 2
        # 2^(sink - m) = 1; nothing for a sink of -inf
        m = tl.zeros([BLOCK_M], dtype=tl.float32) + sink
        l = tl.where(m == float("-inf"), l, l + 1.0)
    acc = tl.zeros([BLOCK_M, D_H], dtype=tl.float32)  # running sum of 2^(s - m) v
    lo, mid_lo, mid_hi, hi = key_range(start_m, T_Q, T_K, OFFSET, WINDOW, IS_CAUSAL, HAS_WINDOW,
                                        BLOCK_M, BLOCK_N)
    # masked: the window's edge
    acc, l, m = _forward_loop(acc, l, m, q, k_src, v_src, stride_kt, stride_vt, rows,
                              lo, mid_lo,
                              T_Q, T_K, OFFSET, WINDOW, qk_scale, IS_CAUSAL, HAS_WINDOW,
                              True, BLOCK_N, DESCRIPTORS, WARP_SPECIALIZE)
    # every row sees every key
    acc, l, m = _forward_loop(acc, l, m, q, k_src, v_src, stride_kt, stride_vt, rows,
                              mid_lo, mid_hi,
                              T_Q, T_K, OFFSET, WINDOW, qk_scale, IS_CAUSAL, HAS_WINDOW,
                              False, BLOCK_N, DESCRIPTORS, WARP_SPECIALIZE)
    # masked: the diagonal, the end
    acc, l, m = _forward_loop(acc, l, m, q, k_src, v_src, stride_kt, stride_vt, rows,
                              mid_hi, hi,
                              T_Q, T_K, OFFSET, WINDOW, qk_scale, IS_CAUSAL, HAS_WINDOW,
                              True, BLOCK_N, DESCRIPTORS, WARP_SPECIALIZE)
    # a row that sees no key (nor a sink): output 0, lse = +inf (so P = 0 backward)
    empty = l == 0.0
    l = tl.where(empty, 1.0, l)
    out = acc / l[:, None]  # (BLOCK_M, D_H)
    # (BLOCK_M,), log2 of the row's sum
    lse = tl.where(empty, float("inf"), m + tl.math.log2(l))
    store_rows(O, out, batch, head, rows, dims, stride_ob, stride_oh, stride_ot, stride_od, T_Q)
    tl.store(LSE + bh * T_Q + rows, lse, mask=rows < T_Q)


# Triton decides when a kernel is defined whether it will run in its interpreter.
INTERPRET = type(_forward).__name__ == "InterpretedFunction"


def tuned(kernel: Any, configs: tuple[tuple[int, int, int, int], ...],
          options: tuple[str, ...] = (), reset_to_zero: list[str] | None = None) -> Any:
    """``kernel`` autotuned over ``configs`` on a GPU; with the one interpreter
    config otherwise.

    Tuned again for each value of TUNING_KEY and of the ``options`` (constexpr flags) it takes.

    Args:
        kernel: a ``triton.jit`` kernel with ``BLOCK_M`` and ``BLOCK_N`` parameters.
        configs: (BLOCK_M, BLOCK_N, num_warps, num_stages) to try.
        options: names of the constexpr flags that get a tuning of their own.
        reset_to_zero: buffers the kernel adds into, zeroed before each timed trial.

    Returns:
        The ``triton.autotune`` of the kernel.

    Examples:
        >>> tuned(_forward, FORWARD_CONFIGS).configs[0].kwargs  # doctest: +SKIP
    """
    chosen = (INTERPRETER_CONFIG,) if INTERPRET else configs
    return triton.autotune(
        [triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s)
         for m, n, w, s in chosen],
        key=TUNING_KEY + list(options), reset_to_zero=reset_to_zero,
    )(kernel)


_forward_tuned = tuned(_forward, FORWARD_CONFIGS, ("HAS_SINKS", "LONGEST_FIRST", "DESCRIPTORS",
                                                   "WARP_SPECIALIZE"))
FIXED_STAGES = 3  # Triton's default num_stages, which a launch with fixed blocks gets


def launch(kernel: Any, autotuned: Any,
           blocks: tuple[int, int] | None) -> tuple[Any, dict[str, int]]:
    """The autotuned kernel, or, for blocks (BLOCK_M, BLOCK_N) given, the kernel with 4 warps.

    Args:
        kernel: the plain kernel.
        autotuned: its :func:`tuned` version.
        blocks: (BLOCK_M, BLOCK_N), or None to autotune.

    Returns:
        (kernel to launch, its extra launch arguments).

    Examples:
        >>> launch("kernel", "autotuned", (64, 32))
        ('kernel', {'BLOCK_M': 64, 'BLOCK_N': 32, 'num_warps': 4, 'num_stages': 3})
    """
    if blocks is None:
        return autotuned, {}
    return kernel, {"BLOCK_M": blocks[0], "BLOCK_N": blocks[1], "num_warps": 4,
                    "num_stages": FIXED_STAGES}


def launched_config(kernel: Any, meta: dict[str, int]) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) of the launch of ``kernel`` just made: the
    fixed ``meta``, or the configuration the autotuner chose for this shape.

    Args:
        kernel: the kernel launched (autotuned when ``meta`` is empty).
        meta: the fixed launch arguments of :func:`launch`, or ``{}``.

    Returns:
        (BLOCK_M, BLOCK_N, num_warps, num_stages).

    Examples:
        >>> meta = {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 3}
        >>> launched_config(None, meta)
        (64, 32, 4, 3)
    """
    if meta:
        return meta["BLOCK_M"], meta["BLOCK_N"], meta["num_warps"], meta["num_stages"]
    best = kernel.best_config
    return best.kwargs["BLOCK_M"], best.kwargs["BLOCK_N"], best.num_warps, best.num_stages


def mask_args(causal: bool, offset: int, window: int | None) -> dict[str, Any]:
    """The kernels' arguments that say which keys each query sees.

    Args:
        causal: hide the keys after each query's position.
        offset: position of query 0.
        window: w, or None.

    Returns:
        The keyword arguments OFFSET, WINDOW, IS_CAUSAL and HAS_WINDOW.

    Examples:
        >>> mask_args(True, 0, None)
        {'OFFSET': 0, 'WINDOW': 0, 'IS_CAUSAL': True, 'HAS_WINDOW': False}
    """
    return {"OFFSET": offset, "WINDOW": window or 0, "IS_CAUSAL": causal,
            "HAS_WINDOW": window is not None}


def _allocate_descriptor_scratch(size: int, alignment: int, stream: int | None) -> Tensor:
    """Global memory in which a kernel builds its tensor descriptors on a GPU."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def forward(q: Tensor, k: Tensor, v: Tensor, sinks: Tensor | None, scale: float, causal: bool,
            offset: int, window: int | None, blocks: tuple[int, int] | None,
            longest_first: bool, descriptors: bool,
            warp_specialize: bool) -> tuple[Tensor, Tensor, tuple[int, int, int, int]]:
    """Z (b, h, t_q, d_h), the base-2 log-sum-exp (b, h, t_q) of q (b, h, t_q, d_h), k and v
    (b, h_kv, t_k, d_h), and the (BLOCK_M, BLOCK_N, warps, stages) that ran.

    The tensors must be where the kernels run: on a CUDA device, or on the CPU inside
    :func:`~attention.triton_flash.triton_interpreter` (with this module defined again there, as
    :func:`~attention.triton_flash.triton_flash_attention` does). Nothing is checked here.

    Args:
        q: queries (b, h, t_q, d_h), float16 or bfloat16.
        k: keys (b, h_kv, t_k, d_h).
        v: values (b, h_kv, t_k, d_h).
        sinks: learned sink logits (h,), or None.
        scale: multiplies the scores.
        causal: hide the keys after each query's position.
        offset: position of query 0 (0 top-left, t_k - t_q bottom-right).
        window: w, the keys each query sees up to its position (None: all).
        blocks: (BLOCK_M, BLOCK_N) fixes the tile; None autotunes on a GPU.
        longest_first: start the query blocks with the most keys first.
        descriptors: read Q, K and V through tensor descriptors.
        warp_specialize: warp-specialize the loops.

    Returns:
        (Z, lse, config), lse in base 2 and float32.

    Examples:
        >>> q = torch.randn(1, 2, 64, 64, device="cuda", dtype=torch.float16)  # doctest: +SKIP
        >>> out, lse, config = forward(q, q, q, None, 0.125, True, 0, None, None,
        ...                            False, False, False)  # doctest: +SKIP
    """
    b, h, t_q, d_h = q.shape
    out = torch.empty_like(q)  # (b, h, t_q, d_h)
    lse = torch.empty(b, h, t_q, dtype=torch.float32, device=q.device)  # (b, h, t_q)
    if descriptors and not INTERPRET:
        triton.set_allocator(_allocate_descriptor_scratch)
    # the kernel reads head i's sink at SINKS + i: a slice or expanded scalar is laid out first
    sink_logits = lse if sinks is None else sinks.contiguous()  # (h,); lse stands in, unread
    kernel, meta = launch(_forward, _forward_tuned, blocks)
    grid = lambda meta: (triton.cdiv(t_q, meta["BLOCK_M"]), b * h)  # noqa: E731
    kernel[grid](q, k, v, out, lse, sink_logits, *q.stride(),
                 *k.stride(), *v.stride(), *out.stride(), H=h, G=h // k.shape[1], T_Q=t_q,
                 T_K=k.shape[2], qk_scale=scale * LOG2E, D_H=d_h,
                 **mask_args(causal, offset, window), HAS_SINKS=sinks is not None,
                 LONGEST_FIRST=longest_first, DESCRIPTORS=descriptors,
                 WARP_SPECIALIZE=warp_specialize, **meta)
    return out, lse, launched_config(kernel, meta)
