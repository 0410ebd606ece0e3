"""Functional building blocks of attention: softmax, causal masks, scaled dot-product attention.

Notation (see CONTRIBUTING.md):
    b     batch size (any number of leading batch dimensions is written ``...``)
    t_q   number of queries, t_k number of keys and values (t_q = t_k = t in self-attention)
    d_k   width of queries and keys, the d_k in the scale 1 / sqrt(d_k)
    d_v   width of values (d_v = d_k in every module of the book)

Scaled dot-product attention, with an additive mask M (0 where allowed, -inf where not):

    A = softmax(Q K^T / sqrt(d_k) + M)      (..., t_q, t_k)   attention weights
    Z = A V                                 (..., t_q, d_v)   context vectors

Everything is written out explicitly so that each step can be read, printed and tested; the
result equals ``torch.nn.functional.scaled_dot_product_attention`` for the same arguments.
"""

import torch
import torch.nn.functional as F
from torch import Tensor

from ._checks import check_dropout, check_mask


def softmax_naive(x: Tensor, dim: int) -> Tensor:
    """Softmax straight from the textbook formula exp(x) / sum(exp(x)).

    It overflows on purpose: exp(1000) is inf in float32, so large logits give nan.
    Use :func:`softmax` for real work.
    """
    exp_x = torch.exp(x)
    return exp_x / exp_x.sum(dim=dim, keepdim=True)


def softmax(x: Tensor, dim: int) -> Tensor:
    """Numerically stable softmax along ``dim``.

    Subtracting the row maximum leaves the result unchanged (the factor exp(-max) cancels) and
    keeps every exponent at most 0, so nothing overflows. A row that is entirely -inf (a query
    allowed to see no key) gives zeros instead of nan.
    """
    row_max = x.amax(dim=dim, keepdim=True)
    row_max = row_max.masked_fill(row_max == float("-inf"), 0.0)  # all -inf row: exp(-inf) = 0
    exp_x = torch.exp(x - row_max)
    total = exp_x.sum(dim=dim, keepdim=True)
    return exp_x / total.masked_fill(total == 0, 1.0)  # 0 / 1 = 0 for an all -inf row


def causal_mask(t_q: int, t_k: int | None = None, device: torch.device | None = None) -> Tensor:
    """Boolean causal mask of shape (t_q, t_k): True where query i may attend to key j (j <= i).

    Aligned top-left, as ``F.scaled_dot_product_attention(..., is_causal=True)`` aligns it:
    ``torch.ones(t_q, t_k).tril()``, also when t_q != t_k.
    """
    t_k = t_q if t_k is None else t_k
    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril()  # (t_q, t_k)


def additive_causal_mask(
    t_q: int,
    t_k: int | None = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | None = None,
) -> Tensor:
    """The additive mask M of shape (t_q, t_k): 0 where attending is allowed, -inf where not."""
    allowed = causal_mask(t_q, t_k, device=device)  # (t_q, t_k)
    return torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill(
        ~allowed, float("-inf")
    )


def attention_weights(
    query: Tensor,
    key: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
) -> Tensor:
    """Attention weights A of shape (..., t_q, t_k): scores -> scale -> mask -> softmax -> dropout.

    Args:
        query: (..., t_q, d_k).
        key: (..., t_k, d_k).
        attn_mask: broadcastable to (..., t_q, t_k); boolean (True = may attend) or float
            (added to the scaled scores, like M).
        dropout_p: dropout probability, applied whenever it is > 0 (as torch's SDPA does).
        is_causal: apply :func:`causal_mask`; cannot be combined with ``attn_mask``.
        scale: factor on the scores; defaults to 1 / sqrt(d_k).

    Rows whose keys are all masked give zeros.
    """
    check_dropout(dropout_p, "dropout_p")
    for name, tensor in (("query", query), ("key", key)):
        if tensor.dim() < 2:
            raise ValueError(
                f"{name} must have at least 2 dimensions (..., t, d_k), "
                f"got a {tensor.dim()}-d tensor of shape {tuple(tensor.shape)}"
            )
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"query and key must have the same last dimension d_k, "
            f"got {query.shape[-1]} and {key.shape[-1]}"
        )
    t_q, t_k = query.shape[-2], key.shape[-2]
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    attn_scores = query @ key.transpose(-2, -1) * scale  # (..., t_q, t_k)
    if is_causal:
        if attn_mask is not None:
            raise ValueError("attn_mask must be None when is_causal=True, got a tensor")
        attn_mask = causal_mask(t_q, t_k, device=query.device)  # (t_q, t_k)
    if attn_mask is not None:
        check_mask(attn_mask, attn_scores.shape)
        if attn_mask.dtype == torch.bool:
            attn_scores = attn_scores.masked_fill(~attn_mask, float("-inf"))
        else:
            attn_scores = attn_scores + attn_mask.to(attn_scores.dtype)
    attn_weights = softmax(attn_scores, dim=-1)
    if dropout_p > 0.0:
        attn_weights = F.dropout(attn_weights, p=dropout_p, training=True)
    return attn_weights


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
) -> Tensor:
    """Context vectors Z = A V of shape (..., t_q, d_v), written out explicitly.

    Same arguments and semantics as ``torch.nn.functional.scaled_dot_product_attention``:
    query (..., t_q, d_k), key (..., t_k, d_k), value (..., t_k, d_v); see
    :func:`attention_weights` for the mask, dropout, causal and scale arguments.

    A query whose keys are all masked gets a zero context vector, never nan. PyTorch's CPU
    reference does the same, but its fused GPU kernels may return nan for such rows.
    """
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"key and value must have the same number of tokens t_k, "
            f"got {key.shape[-2]} and {value.shape[-2]}"
        )
    attn_weights = attention_weights(query, key, attn_mask, dropout_p, is_causal, scale)
    return attn_weights @ value  # (..., t_q, d_v)
