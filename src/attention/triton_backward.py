"""FlashAttention's backward pass as Triton kernels: dQ in a pass of its own (the default,
deterministic), or added up with atomics inside the dK/dV pass (FlashAttention-2's way).

Notation (see CONTRIBUTING.md):
    b        batch size
    h        query heads, h_kv key and value heads, G = h / h_kv query heads per key-value head
    t_q      number of queries, t_k number of keys
    d_h      head width
    BLOCK_M  query rows of a tile, BLOCK_N its key rows
    c        scale · log2(e)
    lse      the log-sum-exp of a row, saved by the forward pass in base 2 (chapter 7's
             lse · log2 e)
    D        rowsum(dZ ⊙ Z), one number per query
    P, dP    FlashAttention's names for the book's weights A and their gradient dA

Masks, block ranges and the tuning lists are those of :mod:`attention.triton_forward`.

- ``_preprocess``, grid (t_q / BLOCK_M, b·h): D = rowsum(dZ ⊙ Z), one float32 per query.
- ``_backward_dkdv``, grid (t_k / BLOCK_N, b·h_kv): a program holds one block of K and V and
  walks over the query blocks of the G query heads that share them, recomputing
  P = 2^(c·Q Kᵀ - lse) tile by tile, and accumulates dK and dV in registers; each is written
  once. No (t_q, t_k) matrix exists. With ``ATOMIC_DQ`` it also adds each tile's dS K to a
  float32 dQ in HBM with atomic additions, five products per tile in all, and dQ is rounded to
  the input type once at the end.
- ``_backward_dq`` (deterministic only), grid (t_q / BLOCK_M, b·h): a program holds one block
  of Q and dZ and walks over the key blocks again, accumulating dQ. It recomputes S and dP once
  more (7 products per tile instead of 5), but no two programs write the same memory, so the
  result does not depend on the order the programs run in and needs no float32 buffer; atomic
  additions of floats in a varying order give results that vary in their last bits
  from run to run.

Learned sinks need nothing in these kernels: the forward pass's lse includes the sink, so P is
right, and the sink's own gradient, -Σ_i P_sink,i · D_i over the rows of its head, is a sum in
PyTorch at the end.
"""

import torch
import triton
import triton.language as tl
from torch import Tensor

from .triton_forward import (
    DKDV_CONFIGS,
    DQ_CONFIGS,
    INTS,
    LOG2E,
    PREPROCESS_BLOCK,
    block_start,
    key_range,
    launch,
    launched_config,
    load_rows,
    mask_args,
    query_range,
    store_rows,
    tile_pointers,
    tuned,
    visible_mask,
)


@triton.jit
def _preprocess(O, DO, DELTA, stride_ob, stride_oh, stride_ot, stride_od,
                stride_dob, stride_doh, stride_dot, stride_dod, H, T_Q,
                D_H: tl.constexpr, BLOCK_M: tl.constexpr):
    """D = rowsum(dZ ⊙ Z) of one block of rows, in float32."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    bh = tl.program_id(1).to(tl.int64)
    batch, head = bh // H, bh % H
    dims = tl.arange(0, D_H)
    o = load_rows(O, batch, head, rows, dims, stride_ob, stride_oh, stride_ot, stride_od, T_Q)
    do = load_rows(DO, batch, head, rows, dims, stride_dob, stride_doh, stride_dot, stride_dod,
                   T_Q)  # (BLOCK_M, D_H) each
    o, do = o.to(tl.float32), do.to(tl.float32)
    tl.store(DELTA + bh * T_Q + rows, tl.sum(o * do, 1), mask=rows < T_Q)


@triton.jit
def _dkdv_loop(dk, dv, k, v, q_ptrs, do_ptrs, lse_ptrs, delta_ptrs, dq_ptrs, stride_qt,
               stride_dot, stride_dqt, keys, start, end, T_Q, T_K, OFFSET, WINDOW, qk_scale,
               sm_scale, IS_CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr,
               MASKED: tl.constexpr, BLOCK_M: tl.constexpr, ATOMIC_DQ: tl.constexpr):
    """dK and dV of one key block, summed over the query blocks in [start, end); with ATOMIC_DQ,
    each tile's share of dQ added to the float32 dQ at ``dq_ptrs``."""
    for start_m in range(start, end, BLOCK_M):
        rows = start_m + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
        if MASKED:
            q = tl.load(q_ptrs + start_m * stride_qt, mask=rows[:, None] < T_Q, other=0.0)
            do = tl.load(do_ptrs + start_m * stride_dot, mask=rows[:, None] < T_Q, other=0.0)
            lse = tl.load(lse_ptrs + start_m, mask=rows < T_Q, other=float("inf"))
            delta = tl.load(delta_ptrs + start_m, mask=rows < T_Q, other=0.0)
        else:
            q = tl.load(q_ptrs + start_m * stride_qt)  # (BLOCK_M, D_H)
            do = tl.load(do_ptrs + start_m * stride_dot)  # (BLOCK_M, D_H)
            lse = tl.load(lse_ptrs + start_m)  # (BLOCK_M,)
            delta = tl.load(delta_ptrs + start_m)  # (BLOCK_M,)
        s_t = tl.dot(k, tl.trans(q)) * qk_scale  # (BLOCK_N, BLOCK_M): Sᵀ, keys as rows
        p_t = tl.math.exp2(s_t - lse[None, :])  # (BLOCK_N, BLOCK_M), Pᵀ recomputed from lse
        if MASKED:
            seen = visible_mask(rows[None, :], keys[:, None], T_Q, T_K, OFFSET, WINDOW,
                                IS_CAUSAL, HAS_WINDOW)
            p_t = tl.where(seen, p_t, 0.0)
        dv += tl.dot(p_t.to(do.dtype), do)  # (BLOCK_N, D_H): dV += Pᵀ dZ
        dp_t = tl.dot(v, tl.trans(do))  # (BLOCK_N, BLOCK_M): dPᵀ = V dZᵀ
        ds_t = p_t * (dp_t - delta[None, :])  # (BLOCK_N, BLOCK_M): dSᵀ = Pᵀ ⊙ (dPᵀ - D)
        dk += tl.dot(ds_t.to(q.dtype), q)  # (BLOCK_N, D_H): dK += dSᵀ Q, scaled at the end
        # the fifth product: dQ += scale · dS K, added by every key block's program
        if ATOMIC_DQ:
            dq = tl.dot(tl.trans(ds_t.to(k.dtype)), k) * sm_scale  # (BLOCK_M, D_H)
            if MASKED:
                tl.atomic_add(dq_ptrs + start_m * stride_dqt, dq, mask=rows[:, None] < T_Q)
            else:
                tl.atomic_add(dq_ptrs + start_m * stride_dqt, dq)
    return dk, dv


@triton.jit(do_not_specialize=INTS)
def _backward_dkdv(Q, K, V, DO, LSE, DELTA, DK, DV, DQ_ACC,
                   stride_qb, stride_qh, stride_qt, stride_qd, stride_kb, stride_kh, stride_kt,
                   stride_kd, stride_vb, stride_vh, stride_vt, stride_vd, stride_dob,
                   stride_doh, stride_dot, stride_dod, stride_dkb, stride_dkh, stride_dkt,
                   stride_dkd, stride_dvb, stride_dvh, stride_dvt, stride_dvd, H_KV, G, T_Q,
                   T_K, OFFSET, WINDOW, qk_scale, sm_scale, D_H: tl.constexpr,
                   IS_CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, ATOMIC_DQ: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """dK and dV of one block of BLOCK_N keys of one key-value head, over its G query heads;
    with ATOMIC_DQ also their share of dQ, added into DQ_ACC,
    float32 (b, h, t_q, d_h) contiguous."""
    start_n = tl.program_id(0) * BLOCK_N
    bh_kv = tl.program_id(1).to(tl.int64)
    batch, kv_head = bh_kv // H_KV, bh_kv % H_KV
    keys = start_n + tl.arange(0, BLOCK_N)  # (BLOCK_N,)
    rows = tl.arange(0, BLOCK_M)  # (BLOCK_M,) row offsets in a query block
    dims = tl.arange(0, D_H)
    k = load_rows(K, batch, kv_head, keys, dims, stride_kb, stride_kh, stride_kt, stride_kd,
                  T_K)  # (BLOCK_N, D_H), kept all along
    v = load_rows(V, batch, kv_head, keys, dims, stride_vb, stride_vh, stride_vt, stride_vd,
                  T_K)  # (BLOCK_N, D_H), kept all along
    dk = tl.zeros([BLOCK_N, D_H], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, D_H], dtype=tl.float32)
    lo, mid_lo, mid_hi, hi = query_range(start_n, T_Q, T_K, OFFSET, WINDOW, IS_CAUSAL,
                                         HAS_WINDOW, BLOCK_M, BLOCK_N)
    for i in range(0, G):  # the query heads that share this key-value head, summed
        head = kv_head * G + i
        q_ptrs = tile_pointers(Q, batch, head, rows, dims,
                               stride_qb, stride_qh, stride_qt, stride_qd)
        do_ptrs = tile_pointers(DO, batch, head, rows, dims,
                                stride_dob, stride_doh, stride_dot, stride_dod)
        lse_ptrs = LSE + (batch * H_KV * G + head) * T_Q + rows
        delta_ptrs = DELTA + (batch * H_KV * G + head) * T_Q + rows
        dq_ptrs = (DQ_ACC + ((batch * H_KV * G + head) * T_Q + rows[:, None]) * D_H
                   + dims[None, :])
        # masked: the diagonal
        dk, dv = _dkdv_loop(dk, dv, k, v, q_ptrs, do_ptrs, lse_ptrs, delta_ptrs, dq_ptrs,
                            stride_qt, stride_dot, D_H, keys, lo, mid_lo, T_Q, T_K, OFFSET,
                            WINDOW, qk_scale, sm_scale, IS_CAUSAL, HAS_WINDOW,
                            True, BLOCK_M, ATOMIC_DQ)
        # every row sees every key of the block
        dk, dv = _dkdv_loop(dk, dv, k, v, q_ptrs, do_ptrs, lse_ptrs, delta_ptrs, dq_ptrs,
                            stride_qt, stride_dot, D_H, keys, mid_lo, mid_hi, T_Q, T_K, OFFSET,
                            WINDOW, qk_scale, sm_scale, IS_CAUSAL, HAS_WINDOW,
                            False, BLOCK_M, ATOMIC_DQ)
        # masked: the window's far edge, the last rows
        dk, dv = _dkdv_loop(dk, dv, k, v, q_ptrs, do_ptrs, lse_ptrs, delta_ptrs, dq_ptrs,
                            stride_qt, stride_dot, D_H, keys, mid_hi, hi, T_Q, T_K, OFFSET,
                            WINDOW, qk_scale, sm_scale, IS_CAUSAL, HAS_WINDOW,
                            True, BLOCK_M, ATOMIC_DQ)
    store_rows(DK, dk * sm_scale, batch, kv_head, keys, dims,
               stride_dkb, stride_dkh, stride_dkt, stride_dkd, T_K)
    store_rows(DV, dv, batch, kv_head, keys, dims,
               stride_dvb, stride_dvh, stride_dvt, stride_dvd, T_K)


@triton.jit
def _dq_loop(dq, q, do, lse, delta, k_ptrs, v_ptrs, stride_kt, stride_vt, rows, start, end,
             T_Q, T_K, OFFSET, WINDOW, qk_scale, IS_CAUSAL: tl.constexpr,
             HAS_WINDOW: tl.constexpr, MASKED: tl.constexpr, BLOCK_N: tl.constexpr):
    """dQ of one query block, summed over the key blocks in [start, end)."""
    for start_n in range(start, end, BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)  # (BLOCK_N,)
        if MASKED:
            k = tl.load(k_ptrs + start_n * stride_kt, mask=keys[:, None] < T_K, other=0.0)
            v = tl.load(v_ptrs + start_n * stride_vt, mask=keys[:, None] < T_K, other=0.0)
        else:
            k = tl.load(k_ptrs + start_n * stride_kt)  # (BLOCK_N, D_H)
            v = tl.load(v_ptrs + start_n * stride_vt)  # (BLOCK_N, D_H)
        s = tl.dot(q, tl.trans(k)) * qk_scale  # (BLOCK_M, BLOCK_N)
        p = tl.math.exp2(s - lse[:, None])  # (BLOCK_M, BLOCK_N)
        if MASKED:
            seen = visible_mask(rows[:, None], keys[None, :], T_Q, T_K, OFFSET, WINDOW,
                                IS_CAUSAL, HAS_WINDOW)
            p = tl.where(seen, p, 0.0)
        dp = tl.dot(do, tl.trans(v))  # (BLOCK_M, BLOCK_N): dP = dZ Vᵀ
        ds = p * (dp - delta[:, None])  # (BLOCK_M, BLOCK_N)
        dq += tl.dot(ds.to(k.dtype), k)  # (BLOCK_M, D_H): dQ += dS K, scaled at the end
    return dq


@triton.jit(do_not_specialize=INTS)
def _backward_dq(Q, K, V, DO, LSE, DELTA, DQ,
                 stride_qb, stride_qh, stride_qt, stride_qd, stride_kb, stride_kh, stride_kt,
                 stride_kd, stride_vb, stride_vh, stride_vt, stride_vd, stride_dob, stride_doh,
                 stride_dot, stride_dod, stride_dqb, stride_dqh, stride_dqt, stride_dqd, H, G,
                 T_Q, T_K, OFFSET, WINDOW, qk_scale, sm_scale, D_H: tl.constexpr,
                 IS_CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, LONGEST_FIRST: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """dQ of one block of BLOCK_M queries of one head."""
    start_m = block_start(BLOCK_M, LONGEST_FIRST)
    bh = tl.program_id(1).to(tl.int64)
    batch, head = bh // H, bh % H
    kv_head = head // G
    rows = start_m + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, D_H)
    q = load_rows(Q, batch, head, rows, dims, stride_qb, stride_qh, stride_qt, stride_qd,
                  T_Q)  # (BLOCK_M, D_H), kept all along
    do = load_rows(DO, batch, head, rows, dims, stride_dob, stride_doh, stride_dot, stride_dod,
                   T_Q)  # (BLOCK_M, D_H), kept all along
    lse = tl.load(LSE + bh * T_Q + rows, mask=rows < T_Q, other=float("inf"))  # (BLOCK_M,)
    delta = tl.load(DELTA + bh * T_Q + rows, mask=rows < T_Q, other=0.0)  # (BLOCK_M,)
    k_ptrs = tile_pointers(K, batch, kv_head, cols, dims,
                           stride_kb, stride_kh, stride_kt, stride_kd)
    v_ptrs = tile_pointers(V, batch, kv_head, cols, dims,
                           stride_vb, stride_vh, stride_vt, stride_vd)
    dq = tl.zeros([BLOCK_M, D_H], dtype=tl.float32)
    lo, mid_lo, mid_hi, hi = key_range(start_m, T_Q, T_K, OFFSET, WINDOW, IS_CAUSAL, HAS_WINDOW,
                                        BLOCK_M, BLOCK_N)
    dq = _dq_loop(dq, q, do, lse, delta, k_ptrs, v_ptrs, stride_kt, stride_vt, rows, lo, mid_lo,
                  T_Q, T_K, OFFSET, WINDOW, qk_scale, IS_CAUSAL, HAS_WINDOW, True, BLOCK_N)
    dq = _dq_loop(dq, q, do, lse, delta, k_ptrs, v_ptrs, stride_kt, stride_vt, rows,
                  mid_lo, mid_hi, T_Q, T_K, OFFSET, WINDOW, qk_scale, IS_CAUSAL, HAS_WINDOW,
                  False, BLOCK_N)
    dq = _dq_loop(dq, q, do, lse, delta, k_ptrs, v_ptrs, stride_kt, stride_vt, rows, mid_hi, hi,
                  T_Q, T_K, OFFSET, WINDOW, qk_scale, IS_CAUSAL, HAS_WINDOW, True, BLOCK_N)
    store_rows(DQ, dq * sm_scale, batch, head, rows, dims,
               stride_dqb, stride_dqh, stride_dqt, stride_dqd, T_Q)


_backward_dkdv_tuned = tuned(_backward_dkdv, DKDV_CONFIGS)
_backward_dkdv_atomic_tuned = tuned(_backward_dkdv, DKDV_CONFIGS, reset_to_zero=["DQ_ACC"])
_backward_dq_tuned = tuned(_backward_dq, DQ_CONFIGS, ("LONGEST_FIRST",))


Gradients = tuple[Tensor, Tensor, Tensor, Tensor | None]  # dQ, dK, dV, dsinks or None


def backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, grad_out: Tensor,
             sinks: Tensor | None, scale: float, causal: bool, offset: int, window: int | None,
             blocks: tuple[int, int] | None, deterministic: bool, longest_first: bool,
             ) -> tuple[Gradients, dict[str, tuple[int, int, int, int]]]:
    """(dQ, dK, dV, dsinks or None) and the (BLOCK_M, BLOCK_N, warps, stages) of each kernel
    that ran: D first, then the dK/dV kernel over key blocks, then (``deterministic``) the dQ
    kernel; without it, dQ is added up in float32 by the dK/dV kernel and rounded once.

    Other arguments as in :func:`~attention.triton_forward.forward`, whose Z and lse it takes;
    where the tensors must be, and what is not checked, as there.

    Args:
        out: Z (b, h, t_q, d_h) of the forward pass.
        lse: the forward pass's base-2 log-sum-exp (b, h, t_q), float32.
        grad_out: dZ (b, h, t_q, d_h).
        deterministic: dQ in a kernel of its own (the same bits every run).
        longest_first: start the query blocks with the most keys first (dQ kernel).

    Returns:
        ((dQ, dK, dV, dsinks), configs): the gradients shaped as q, k, v and sinks, and the
        configuration of each kernel by name.

    Examples:
        >>> from attention.triton_forward import forward
        >>> q = torch.randn(1, 2, 64, 64, device="cuda", dtype=torch.float16)  # doctest: +SKIP
        >>> args = (None, 0.125, True, 0, None, None)
        >>> out, lse, _ = forward(q, q, q, *args, False, False, False, False)  # doctest: +SKIP
        >>> (dq, dk, dv, _), configs = backward(q, q, q, out, lse, torch.ones_like(out), *args,
        ...                                     True, False)  # doctest: +SKIP
    """
    b, h, t_q, d_h = q.shape
    h_kv, t_k = k.shape[1], k.shape[2]
    delta = torch.empty_like(lse)  # (b, h, t_q), float32
    _preprocess[(triton.cdiv(t_q, PREPROCESS_BLOCK), b * h)](
        out, grad_out, delta, *out.stride(), *grad_out.stride(), H=h, T_Q=t_q, D_H=d_h,
        BLOCK_M=PREPROCESS_BLOCK)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    # float32 dQ that the atomic additions go to (deterministic: dk stands in, never touched)
    dq_acc = dk if deterministic else torch.zeros(b, h, t_q, d_h, dtype=torch.float32,
                                                  device=q.device)
    common = {"T_Q": t_q, "T_K": t_k, "qk_scale": scale * LOG2E, "sm_scale": scale, "D_H": d_h,
              **mask_args(causal, offset, window)}
    kernel, meta = launch(
        _backward_dkdv, _backward_dkdv_tuned if deterministic else _backward_dkdv_atomic_tuned,
        blocks)
    grid = lambda meta: (triton.cdiv(t_k, meta["BLOCK_N"]), b * h_kv)  # noqa: E731
    kernel[grid](q, k, v, grad_out, lse, delta, dk, dv, dq_acc, *q.stride(), *k.stride(),
                 *v.stride(), *grad_out.stride(), *dk.stride(), *dv.stride(), H_KV=h_kv,
                 G=h // h_kv, ATOMIC_DQ=not deterministic, **common, **meta)
    configs = {"dkdv": launched_config(kernel, meta)}
    if deterministic:
        dq = torch.empty_like(q)
        kernel, meta = launch(_backward_dq, _backward_dq_tuned, blocks)
        grid = lambda meta: (triton.cdiv(t_q, meta["BLOCK_M"]), b * h)  # noqa: E731
        kernel[grid](q, k, v, grad_out, lse, delta, dq, *q.stride(), *k.stride(), *v.stride(),
                     *grad_out.stride(), *dq.stride(), H=h, G=h // h_kv,
                     LONGEST_FIRST=longest_first, **common, **meta)
        configs["dq"] = launched_config(kernel, meta)
    else:
        dq = dq_acc.to(q.dtype)  # FlashAttention-2's conversion kernel
    dsinks = None
    # d sink = Σ over rows of P_sink · (dP_sink - D), and dP_sink = dZ · 0
    if sinks is not None:
        p_sink = torch.exp2(sinks.float()[None, :, None] * LOG2E - lse)  # (b, h, t_q)
        dsinks = -(p_sink * delta).sum(dim=(0, 2)).to(sinks.dtype)  # (h,)
    return (dq, dk, dv, dsinks), configs
