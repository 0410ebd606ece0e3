"""Attention weights from a fused kernel's saved log-sum-exp, any block of rows at a time.

Notation (see CONTRIBUTING.md): n query rows of a block, t_k keys, d_k width of queries and keys,
lse_i = log Σ_j exp(scale · q_i · k_j) the row's log-sum-exp, over the keys j the row may see. A
fused kernel never stores the (t_q, t_k) weights, but it can return lse
(``flash_attention(..., return_lse=True)``), and then

    α_ij = exp(scale · q_i · k_j - lse_i)

rebuilds any rows of them from Q, K and lse alone (chapter 11). With a mask rule chi and a
score rule xi (``mask_mod``, ``score_mod``, as FlexAttention takes them), the score is
xi(scale · q_i · k_j, b, h, i, j) and the hidden keys get weight 0, as in the kernel that made lse.
"""

import math

import torch
from torch import Tensor

from . import masks
from ._checks import (
    accumulation_dtype,
    autocast_as_sdpa,
    check_batch_dims,
    check_flags,
    check_qkv,
    check_rule,
    check_scale,
    is_integer,
    mask_answer,
)
from .masks import MaskMod, ScoreMod

__all__ = ["weights_from_lse"]


@autocast_as_sdpa
def weights_from_lse(
    query: Tensor,
    key: Tensor,
    lse: Tensor,
    *,
    scale: float | None = None,
    is_causal: bool = False,
    row_offset: int = 0,
    mask_mod: MaskMod | None = None,
    score_mod: ScoreMod | None = None,
) -> Tensor:
    """Rows of the attention weights, α_ij = exp(scale · q_i · k_j - lse_i), from the saved lse.

    Only the asked rows ever exist, never the (t_q, t_k) matrix. A row whose lse is not finite
    (it saw no key) is zero. Half-precision inputs are computed in float32 and the weights
    rounded once.

    ``mask_mod(b, h, q_idx, kv_idx)`` and ``score_mod(score, b, h, q_idx, kv_idx)`` are the rules
    of the kernel that returned lse (FlexAttention's ``AuxRequest(lse=True)``, or
    :func:`~attention.masks.dense_attention`); they need query (b, h, n, d_k), and see the
    rows' positions q_idx = row_offset .. row_offset + n - 1.

    Args:
        query: (..., n, d_k), any block of n query rows, the first of them at position
            ``row_offset``.
        key: (..., t_k, d_k), all keys.
        lse: (..., n), the rows' log-sum-exp from ``flash_attention(..., return_lse=True)`` with
            the same ``scale`` and masking: float32 or float64, on the query's device, its leading
            dimensions those of query and key broadcast (as the weights' are).
        scale: multiplies the scores; defaults to 1/sqrt(d_k).
        is_causal: query i sees keys j <= row_offset + i.
        row_offset: position of the first row: for rows r0 .. r0 + n - 1 pass r0 (top-left) or
            r0 + t_k - t_q (bottom-right).
        mask_mod: the mask rule of the kernel that returned lse (None: none).
        score_mod: its score rule (None: none).

    Returns:
        The weights (..., n, t_k).

    Raises:
        ValueError: if query and key do not agree (dtype, device, d_k) or their leading
            dimensions do not broadcast, lse is not float32 or float64 on the query's device or
            does not have the rows' shape, row_offset is not an integer, is_causal is not a
            bool, scale is not None or a finite number, or mask_mod or score_mod is given with
            a query that is not 4-d, is not callable, or indexes past a tensor it holds (a
            :func:`~attention.masks.document` rule made for fewer tokens), or mask_mod answers
            with numbers, not bools (as :func:`~attention.masks.dense_attention` refuses them).

    Examples:
        >>> _ = torch.manual_seed(0)
        >>> q, k = torch.randn(2, 1, 1, 6, 8).unbind(0)
        >>> _, lse = flash_attention(q, k, k, is_causal=True, return_lse=True)
        >>> rows = weights_from_lse(q[..., 4:, :], k, lse[..., 4:], is_causal=True, row_offset=4)
        >>> full = attention_weights(q, k, is_causal=True)
        >>> torch.allclose(rows, full[..., 4:, :], atol=1e-6)
        True
    """
    scale = check_scale(scale)
    check_qkv(query, key)
    leading = check_batch_dims(("query", query), ("key", key))  # the weights' leading dimensions
    check_flags(is_causal=is_causal)
    if not isinstance(lse, Tensor) or not lse.is_floating_point() or lse.device != query.device:
        got = f"{lse.dtype} on {lse.device}" if isinstance(lse, Tensor) else type(lse).__name__
        raise ValueError(
            f"lse must be floating point on the query's device {query.device}, got {got}"
        )  # an integer lse would give wrong weights silently
    if lse.dtype not in (torch.float32, torch.float64):
        raise ValueError(  # rounded to half, lse shifts every weight by up to |lse| 2^-11
            f"lse must be float32 or float64, as the kernels return it for half inputs too, got "
            f"{lse.dtype}"
        )
    rows_shape = (*leading, query.shape[-2])  # (..., n), as flash_attention returns lse
    if tuple(lse.shape) != rows_shape:
        raise ValueError(f"lse must have the shape of the weights' rows (..., n) = {rows_shape}, "
                         f"got {tuple(lse.shape)}")
    if not is_integer(row_offset):  # NumPy's taken
        raise ValueError(f"row_offset must be an integer, got {row_offset!r}")
    row_offset = int(row_offset)  # a Python int: arithmetic in np.int32 would wrap around
    if (mask_mod is not None or score_mod is not None) and query.dim() != 4:
        raise ValueError("mask_mod and score_mod need query (b, h, n, d_k), got shape "
                         f"{tuple(query.shape)}")
    acc_dtype = accumulation_dtype(query.dtype)
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    scores = query.to(acc_dtype) @ key.to(acc_dtype).transpose(-2, -1) * scale  # (..., n, t_k)
    rows = torch.arange(query.shape[-2], device=query.device)[:, None] + row_offset  # (n, 1)
    cols = torch.arange(key.shape[-2], device=query.device)  # (t_k,)
    if mask_mod is not None or score_mod is not None:
        b, h = scores.shape[:2]
        batch = torch.arange(b, device=query.device).view(-1, 1, 1, 1)  # (b, 1, 1, 1)
        head = torch.arange(h, device=query.device).view(1, -1, 1, 1)  # (1, h, 1, 1)
        for name, rule in (("mask_mod", mask_mod), ("score_mod", score_mod)):
            if rule is not None:
                check_rule(rule, name)  # checked as dense_attention, which made lse
        try:
            if score_mod is not None:  # the rule sees the scaled score, as FlexAttention's does
                modded = score_mod(scores, batch, head, rows, cols)  # broadcasts to the scores
                scores = modded.expand_as(scores)  # (b, h, n, t_k)
            if mask_mod is not None:  # a Python bool taken, numbers refused, as by to_dense
                visible = mask_answer(mask_mod(batch, head, rows, cols), query.device)
                scores = scores.masked_fill(~visible.expand_as(scores), -math.inf)  # (b, h, n, t_k)
        except IndexError as error:  # doc_ids or lengths shorter than the rows or keys asked for
            raise ValueError(
                f"mask_mod and score_mod must hold a value for every index of b={b}, h={h}, rows "
                f"{row_offset} .. {row_offset + query.shape[-2] - 1}, t_k={key.shape[-2]}, got a "
                f"rule that indexes past a tensor it holds ({error})"
            ) from error
    if is_causal:
        causal = masks.visible(masks.causal(), rows[:, 0], cols)  # (n, t_k): j <= row_offset + i
        scores = scores.masked_fill(~causal, -math.inf)
    lse = lse.to(acc_dtype)
    finite = lse.isfinite()  # (..., n); a row that saw no key has lse = -inf
    weights = torch.exp(scores - lse.masked_fill(~finite, 0.0)[..., None])  # (..., n, t_k)
    return weights.masked_fill(~finite[..., None], 0.0).to(query.dtype)
