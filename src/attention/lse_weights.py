"""Attention weights from a fused kernel's saved log-sum-exp, any block of rows at a time.

Notation (see CONTRIBUTING.md): n query rows of a block, t_k keys, d_k width of queries and keys,
lse_i = log Σ_j exp(scale · q_i · k_j) the row's log-sum-exp. A fused kernel never stores the
(t_q, t_k) weights, but it can return lse (``flash_attention(..., return_lse=True)``), and then

    α_ij = exp(scale · q_i · k_j - lse_i)

rebuilds any rows of them from Q, K and lse alone (chapter 11).
"""

import math

import torch
from torch import Tensor

from .functional import _accumulation_dtype

__all__ = ["weights_from_lse"]


def weights_from_lse(
    query: Tensor,
    key: Tensor,
    lse: Tensor,
    scale: float | None = None,
    is_causal: bool = False,
    *,
    row_offset: int = 0,
) -> Tensor:
    """Rows of the attention weights, α_ij = exp(scale · q_i · k_j - lse_i), from the saved lse.

    ``query`` (..., n, d_k) holds any block of n query rows, the first of them at position
    ``row_offset`` (with ``is_causal``, query i sees keys j <= row_offset + i), ``key``
    (..., t_k, d_k) all keys and ``lse`` (..., n) the rows' log-sum-exp from
    ``flash_attention(..., return_lse=True)`` with the same ``scale`` and masking: for rows
    r0 .. r0 + n - 1 pass row_offset = r0 (top-left) or r0 + t_k - t_q (bottom-right).
    Returns (..., n, t_k): only these rows ever exist, never the (t_q, t_k) matrix. A row
    whose lse is not finite (it saw no key) is zero. Half-precision inputs are computed in
    float32 and the weights rounded once.
    """
    if query.dim() < 2 or key.dim() < 2 or query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"query and key must be (..., n, d_k) and (..., t_k, d_k), got {tuple(query.shape)} "
            f"and {tuple(key.shape)}"
        )
    if lse.shape != query.shape[:-1]:
        raise ValueError(f"lse must have the query rows' shape {tuple(query.shape[:-1])}, "
                         f"got {tuple(lse.shape)}")
    if type(row_offset) is not int:
        raise ValueError(f"row_offset must be an integer, got {row_offset!r}")
    acc_dtype = _accumulation_dtype(query.dtype)
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    scores = query.to(acc_dtype) @ key.to(acc_dtype).transpose(-2, -1) * scale  # (..., n, t_k)
    if is_causal:
        rows = torch.arange(query.shape[-2], device=query.device)[:, None] + row_offset  # (n, 1)
        hidden = torch.arange(key.shape[-2], device=query.device) > rows  # (n, t_k)
        scores = scores.masked_fill(hidden, -math.inf)
    lse = lse.to(acc_dtype)
    finite = lse.isfinite()  # (..., n); a row that saw no key has lse = +inf (or -inf)
    weights = torch.exp(scores - lse.masked_fill(~finite, 0.0)[..., None])  # (..., n, t_k)
    return weights.masked_fill(~finite[..., None], 0.0).to(query.dtype)
