"""FlashAttention's forward pass as a Triton GPU kernel: the algorithm of ``flash.py`` on a GPU.

Notation (see CONTRIBUTING.md): b batch size, h heads, t_q / t_k number of queries / keys,
d_h head width (d_k = d_v = d_h), BLOCK_M query rows and BLOCK_N key rows per tile.

Each program instance owns one block of BLOCK_M queries of one (batch, head) pair. It keeps
the running maximum m, the running sum l and the unnormalized output acc of its rows in
registers and walks over the keys BLOCK_N at a time, exactly as :func:`attention.flash_attention`
does in PyTorch (see that module for the online-softmax update). Two details differ:

- scores are kept in base 2: with c = scale · log2(e), softmax(scale · ω) = 2^(c·ω) / Σ 2^(c·ω),
  so ``exp2`` (one hardware instruction) replaces ``exp``;
- with a causal mask a query block stops at the diagonal: blocks of keys entirely in the
  future are never loaded, which halves the work.

Only the output (b, h, t_q, d_h) is written to memory; no (t_q, t_k) matrix ever exists.

This module imports Triton when it is imported (``import attention`` does not import it). On a
machine without CUDA the kernel can still run in Triton's interpreter, on CPU tensors, if the
environment variable ``TRITON_INTERPRET=1`` is set before Triton is first imported; that is how
the tests check it. :func:`triton_available` says whether, and how, the kernel can run here.
"""

import math

import torch
from torch import Tensor

try:
    import triton
    import triton.language as tl
except ImportError as error:  # the package works without Triton; this module explains why not
    triton, _IMPORT_ERROR = None, error
else:
    _IMPORT_ERROR = None

__all__ = ["triton_available", "triton_flash_attention"]

HEAD_DIMS = (16, 32, 64, 128)
DTYPES = (torch.float16, torch.bfloat16)


def triton_available() -> tuple[bool, str]:
    """Whether :func:`triton_flash_attention` can run here, and why (not)."""
    if triton is None:
        return False, f"Triton is not installed ({_IMPORT_ERROR})"
    if _INTERPRET:
        return True, "Triton interpreter (TRITON_INTERPRET=1): runs on CPU tensors, slowly"
    if not torch.cuda.is_available():
        hint = "set TRITON_INTERPRET=1 before importing Triton to use its CPU interpreter"
        return False, f"no CUDA device ({hint})"
    return True, f"CUDA device {torch.cuda.get_device_name()}"


if triton is not None:

    @triton.jit
    def _flash_forward_kernel(
        Q, K, V, O,
        stride_qb, stride_qh, stride_qt, stride_qd,
        stride_kb, stride_kh, stride_kt, stride_kd,
        stride_vb, stride_vh, stride_vt, stride_vd,
        stride_ob, stride_oh, stride_ot, stride_od,
        H, T_Q, T_K, qk_scale_log2,
        IS_CAUSAL: tl.constexpr, D_H: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    ):
        """One (BLOCK_M, D_H) block of outputs of one (batch, head) pair."""
        start_m = tl.program_id(0) * BLOCK_M
        batch, head = tl.program_id(1) // H, tl.program_id(1) % H
        rows = start_m + tl.arange(0, BLOCK_M)  # (BLOCK_M,) query indices
        cols = tl.arange(0, BLOCK_N)  # (BLOCK_N,) key offsets within a block
        dims = tl.arange(0, D_H)  # (D_H,)
        q_base = Q + batch * stride_qb + head * stride_qh
        q_ptrs = q_base + rows[:, None] * stride_qt + dims[None, :] * stride_qd  # (BLOCK_M, D_H)
        q = tl.load(q_ptrs, mask=rows[:, None] < T_Q, other=0.0)  # (BLOCK_M, D_H)
        k_base = K + batch * stride_kb + head * stride_kh
        v_base = V + batch * stride_vb + head * stride_vh

        m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # running maximum, base-2 units
        l = tl.zeros([BLOCK_M], dtype=tl.float32)  # running sum of 2^(s - m)
        acc = tl.zeros([BLOCK_M, D_H], dtype=tl.float32)  # running sum of 2^(s - m) v
        end_n = T_K
        if IS_CAUSAL:
            end_n = tl.minimum(start_m + BLOCK_M, T_K)  # keys from here on are all in the future
        for start_n in range(0, end_n, BLOCK_N):
            keys = start_n + cols  # (BLOCK_N,) key indices
            k_t = tl.load(k_base + keys[None, :] * stride_kt + dims[:, None] * stride_kd,
                          mask=keys[None, :] < T_K, other=0.0)  # (D_H, BLOCK_N), K transposed
            s = tl.dot(q, k_t) * qk_scale_log2  # (BLOCK_M, BLOCK_N) scores in base 2
            allowed = keys[None, :] < T_K  # (1, BLOCK_N)
            if IS_CAUSAL:
                allowed = allowed & (keys[None, :] <= rows[:, None])  # (BLOCK_M, BLOCK_N)
            s = tl.where(allowed, s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, axis=1))  # (BLOCK_M,), finite: key 0 is always allowed
            p = tl.math.exp2(s - m_new[:, None])  # (BLOCK_M, BLOCK_N)
            rescale = tl.math.exp2(m - m_new)  # (BLOCK_M,), 0 on the first block
            v = tl.load(v_base + keys[:, None] * stride_vt + dims[None, :] * stride_vd,
                        mask=keys[:, None] < T_K, other=0.0)  # (BLOCK_N, D_H)
            l = l * rescale + tl.sum(p, axis=1)
            acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v)  # (BLOCK_M, D_H)
            m = m_new
        out = acc / l[:, None]  # (BLOCK_M, D_H)
        o_base = O + batch * stride_ob + head * stride_oh
        o_ptrs = o_base + rows[:, None] * stride_ot + dims[None, :] * stride_od  # (BLOCK_M, D_H)
        tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=rows[:, None] < T_Q)

# Triton decides when a kernel is defined whether it will run in its interpreter.
_INTERPRET = triton is not None and type(_flash_forward_kernel).__name__ == "InterpretedFunction"


def triton_flash_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    is_causal: bool = False,
    scale: float | None = None,
    block_m: int = 64,
    block_n: int = 64,
) -> Tensor:
    """softmax(Q Kᵀ · scale) V with our Triton kernel, forward only (no autograd).

    Args:
        query: (b, h, t_q, d_h), float16 or bfloat16, d_h in 16, 32, 64, 128.
        key: (b, h, t_k, d_h), same dtype and device.
        value: (b, h, t_k, d_h), same dtype and device.
        is_causal: query i attends keys j <= i (top-left aligned, as torch's SDPA).
        scale: multiplies the scores; defaults to 1 / sqrt(d_h).
        block_m: queries per tile (a power of two, at least 16).
        block_n: keys per tile (a power of two, at least 16).

    Returns:
        (b, h, t_q, d_h) in the inputs' dtype.

    Raises:
        RuntimeError: Triton is missing, or neither CUDA nor its interpreter is available.
        ValueError: shapes, dtypes, devices or block sizes the kernel does not handle.
    """
    ok, reason = triton_available()
    if not ok:
        raise RuntimeError(f"triton_flash_attention cannot run here: {reason}")
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        if tensor.dim() != 4:
            raise ValueError(f"{name} must have shape (b, h, t, d_h), got shape {tuple(tensor.shape)}")
        if tensor.dtype not in DTYPES:
            raise ValueError(f"{name} must be float16 or bfloat16, got {tensor.dtype}")
        if tensor.device.type != ("cpu" if _INTERPRET else "cuda"):
            raise ValueError(f"{name} must be on {'cpu' if _INTERPRET else 'cuda'}, got {tensor.device}")
    if not (query.dtype == key.dtype == value.dtype):
        dtypes = f"{query.dtype}, {key.dtype}, {value.dtype}"
        raise ValueError(f"query, key and value must share one dtype, got {dtypes}")
    b, h, t_q, d_h = query.shape
    if key.shape != value.shape or key.shape[:2] != (b, h) or key.shape[3] != d_h:
        shapes = f"{tuple(key.shape)} and {tuple(value.shape)}"
        raise ValueError(f"key and value must have shape ({b}, {h}, t_k, {d_h}), got {shapes}")
    if d_h not in HEAD_DIMS:
        raise ValueError(f"d_h must be one of {HEAD_DIMS}, got {d_h}")
    for name, block in (("block_m", block_m), ("block_n", block_n)):
        if block < 16 or block & (block - 1):
            raise ValueError(f"{name} must be a power of two >= 16, got {block}")
    t_k = key.shape[2]
    if t_k == 0 or t_q == 0:
        raise ValueError(f"t_q and t_k must be positive, got t_q={t_q} and t_k={t_k}")
    scale = 1.0 / math.sqrt(d_h) if scale is None else float(scale)
    out = torch.empty_like(query)  # (b, h, t_q, d_h)
    grid = (triton.cdiv(t_q, block_m), b * h)
    _flash_forward_kernel[grid](
        query, key, value, out,
        *query.stride(), *key.stride(), *value.stride(), *out.stride(),
        h, t_q, t_k, scale * math.log2(math.e),
        IS_CAUSAL=is_causal, D_H=d_h, BLOCK_M=block_m, BLOCK_N=block_n,
    )
    return out
