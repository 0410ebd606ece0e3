"""Functional building blocks of attention: softmax, causal masks, scaled dot-product attention.

Notation (see CONTRIBUTING.md):
    b     batch size (any number of leading batch dimensions is written ``...``)
    t_q   number of queries, t_k number of keys and values (t_q = t_k = t in self-attention)
    d_k   width of queries and keys, the d_k in the scale 1 / sqrt(d_k)
    d_v   width of values (d_v = d_k in most modules; not in MultiHeadLatentAttention, whose keys
          carry d_h^R extra rotary dimensions, chapter 10)
    h     heads of queries, h_kv heads of keys and values (fewer with ``enable_gqa``)

Scaled dot-product attention, with an additive mask M (0 where allowed, -inf where not):

    A = softmax(Q K^T / sqrt(d_k) + M)      (..., t_q, t_k)   attention weights
    Z = A V                                 (..., t_q, d_v)   context vectors

Everything is written out explicitly so that each step can be read, printed and tested; the
result equals ``torch.nn.functional.scaled_dot_product_attention`` for the same arguments.
"""

from numbers import Integral
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.types import Device

from . import masks
from ._checks import (
    Alignment,
    accumulation_dtype,
    additive_mask,
    attention_kernel,
    check_alignment,
    check_attn_mask,
    check_batch_dims,
    check_counts,
    check_dropout,
    check_flags,
    check_kv_heads,
    check_mask,
    check_qkv,
    check_scale,
    check_sinks,
    check_sizes,
    is_causal_bias,
)


def softmax_naive(x: Tensor, dim: int) -> Tensor:
    """Softmax straight from the textbook formula exp(x) / sum(exp(x)).

    It fails on purpose. In float32, exp overflows to inf above about 88.7 (the sum of the
    exponentials overflows earlier), and below about -87.3 it becomes subnormal, losing
    precision until it is 0 below about -104. So extreme logits give nan, all-zero or silently
    wrong weights. Use :func:`softmax` for real work.

    Args:
        x: the logits, any shape.
        dim: the dimension that sums to 1.

    Returns:
        exp(x) / sum(exp(x)) along ``dim``, the shape of x.

    Examples:
        >>> softmax_naive(torch.tensor([1.0, 1000.0]), dim=0)
        tensor([0., nan])
    """
    exp_x = torch.exp(x)
    return exp_x / exp_x.sum(dim=dim, keepdim=True)


def softmax(x: Tensor, dim: int) -> Tensor:
    """Numerically stable softmax along ``dim``.

    Subtracting the row maximum leaves the result unchanged (the factor exp(-max) cancels) and
    keeps every exponent at most 0, so nothing overflows. A row that is entirely -inf (a query
    allowed to see no key) gives zeros instead of nan; an empty dimension gives an empty result.
    Half-precision logits are exponentiated and summed in float32 and rounded once at the end,
    as ``torch.softmax`` does.

    Args:
        x: the logits, any shape.
        dim: the dimension that sums to 1.

    Returns:
        The probabilities, the shape of x.

    Raises:
        ValueError: if x is not a floating-point tensor (``torch.softmax`` refuses integers too),
            or dim is not an integer that indexes one of its dimensions.

    Examples:
        >>> softmax(torch.tensor([[1.0, 1000.0], [float("-inf"), float("-inf")]]), dim=-1)
        tensor([[0., 1.],
                [0., 0.]])
    """
    if not isinstance(x, Tensor) or not x.is_floating_point():  # probabilities of its dtype
        got = x.dtype if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"x must be a floating-point tensor of logits, got {got}")
    ndim = max(x.dim(), 1)  # a 0-d tensor is one logit in one row, as torch.softmax takes it
    if isinstance(dim, bool) or not isinstance(dim, Integral) or not -ndim <= dim < ndim:
        raise ValueError(f"dim must be an integer in [{-ndim}, {ndim - 1}], got {dim!r}")
    if x.dim() == 0:
        return softmax(x.reshape(1), 0).reshape(())
    if x.shape[dim] == 0:
        return torch.exp(x)  # an empty row has nothing to normalize (and amax would raise)
    logits = x.to(accumulation_dtype(x.dtype))  # float16, bfloat16: in float32, rounded once
    row_max = logits.amax(dim=dim, keepdim=True)
    row_max = row_max.masked_fill(row_max == float("-inf"), 0.0)  # all -inf row: exp(-inf) = 0
    exp_x = torch.exp(logits - row_max)
    total = exp_x.sum(dim=dim, keepdim=True)
    return (exp_x / total.masked_fill(total == 0, 1.0)).to(x.dtype)  # 0 / 1 = 0: all -inf row



def causal_mask(
    t_q: int,
    t_k: int | None = None,
    device: Device = None,
    *,
    alignment: Alignment = "top_left",
) -> Tensor:
    """Boolean causal mask of shape (t_q, t_k): True where query i may attend to key j.

    ``alignment="top_left"`` (the default) lets query i see keys j <= i, as
    ``F.scaled_dot_product_attention(..., is_causal=True)`` aligns it: ``torch.ones(t_q,
    t_k).tril()``, also when t_q != t_k. ``alignment="bottom_right"`` puts query i at position
    t_k - t_q + i, as when the queries are the newest t_q of t_k cached tokens: it sees keys
    j <= t_k - t_q + i, as ``torch.nn.attention.bias.causal_lower_right``. With t_q = t_k the
    two are the same mask. It is the rule :func:`attention.masks.causal` made dense.

    Args:
        t_q: number of queries.
        t_k: number of keys (t_q if None).
        device: where to build the mask.
        alignment: ``"top_left"`` or ``"bottom_right"``.

    Returns:
        The mask (t_q, t_k), bool.

    Raises:
        ValueError: if t_q or t_k is not an integer >= 0, or alignment is neither
            ``"top_left"`` nor ``"bottom_right"``.

    Examples:
        >>> causal_mask(2, 3)
        tensor([[ True, False, False],
                [ True,  True, False]])
        >>> causal_mask(2, 3, alignment="bottom_right")
        tensor([[ True,  True, False],
                [ True,  True,  True]])
    """
    check_alignment(alignment)
    t_k = t_q if t_k is None else t_k
    check_counts(t_q=t_q, t_k=t_k)
    return masks.visible(
        masks.causal(), *_positions(t_q, t_k, alignment, device)
    )  # (t_q, t_k)


def _positions(t_q: int, t_k: int, alignment: Alignment, device: Device) -> tuple[
    Tensor, Tensor
]:
    """Query positions (t_q,) and key positions (t_k,): query i at i, or t_k - t_q + i."""
    offset = t_k - t_q if alignment == "bottom_right" else 0
    query_pos = torch.arange(offset, offset + t_q, device=device)  # (t_q,)
    return query_pos, torch.arange(t_k, device=device)  # (t_k,)


def sliding_window_mask(
    t_q: int,
    t_k: int,
    window: int,
    device: Device = None,
    *,
    alignment: Alignment = "top_left",
) -> Tensor:
    """Boolean mask (t_q, t_k) of causal attention over the last ``window`` tokens.

    Query i sits at position p (p = i top-left, the default; p = t_k - t_q + i bottom-right, as
    in :func:`causal_mask`) and sees the keys j with p - window < j <= p, itself and the
    window - 1 tokens before it (Mistral's sliding window; Longformer's is two-sided). The same
    mask as :func:`attention.masks.sliding_window` and ``flash_attention(..., is_causal=True,
    window=window)`` with the same alignment. flash-attn's ``window_size=(window - 1, 0)`` is
    always aligned bottom-right: it is the same mask with ``alignment="bottom_right"``, or when
    t_q = t_k. With window >= t_q (top-left) or window >= t_k (bottom-right) it is
    :func:`causal_mask`.

    Args:
        t_q: number of queries.
        t_k: number of keys.
        window: w, the keys each query sees, itself included.
        device: where to build the mask.
        alignment: ``"top_left"`` or ``"bottom_right"``.

    Returns:
        The mask (t_q, t_k), bool.

    Raises:
        ValueError: if t_q or t_k is not an integer >= 0 (0 gives an empty mask, as in
            :func:`causal_mask`), window is not an integer >= 1, or alignment is unknown.

    Examples:
        >>> sliding_window_mask(4, 4, window=2)
        tensor([[ True, False, False, False],
                [ True,  True, False, False],
                [False,  True,  True, False],
                [False, False,  True,  True]])
    """
    check_counts(t_q=t_q, t_k=t_k)
    check_sizes(window=window)
    check_alignment(alignment)
    return masks.visible(
        masks.sliding_window(window), *_positions(t_q, t_k, alignment, device)
    )  # (t_q, t_k)


def additive_causal_mask(
    t_q: int,
    t_k: int | None = None,
    dtype: torch.dtype = torch.float32,
    device: Device = None,
    *,
    alignment: Alignment = "top_left",
) -> Tensor:
    """The additive mask M of shape (t_q, t_k): 0 where attending is allowed, -inf where not.

    Args:
        t_q: number of queries.
        t_k: number of keys (t_q if None).
        dtype: dtype of M, a floating-point one.
        device: where to build M.
        alignment: ``"top_left"`` or ``"bottom_right"``, as in :func:`causal_mask`.

    Returns:
        M (t_q, t_k).

    Raises:
        ValueError: if dtype is not a floating-point one, or as :func:`causal_mask`.

    Examples:
        >>> additive_causal_mask(2)
        tensor([[0., -inf],
                [0., 0.]])
    """
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating-point dtype (M holds -inf), got {dtype}")
    return additive_mask(causal_mask(t_q, t_k, device=device, alignment=alignment), dtype)


def repeat_kv_heads(query: Tensor, kv: Tensor, name: str, dim: int = -3) -> Tensor:
    """``enable_gqa``: kv (..., h_kv, t_k, d) with each head repeated h / h_kv times.

    Query head i then meets key/value head i // (h / h_kv), as ``repeat_interleave`` on dim -3
    in PyTorch's ``scaled_dot_product_attention(..., enable_gqa=True)``.

    Args:
        query: (..., h, t_q, d_k), whose h the heads are repeated to.
        kv: keys or values (..., h_kv, t_k, d).
        name: kv's name in error messages (``"key"`` or ``"value"``).
        dim: the heads' dimension in both (1 in the varlen layout (t, h, d)).

    Returns:
        kv with h heads (..., h, t_k, d); kv itself when h_kv = h.

    Raises:
        ValueError: if a tensor has fewer than 3 dimensions or h_kv does not divide h.

    Examples:
        >>> kv = torch.arange(2.0).view(2, 1, 1)  # h_kv = 2 heads, one key of width 1
        >>> repeat_kv_heads(torch.zeros(4, 1, 1), kv, "key").flatten()
        tensor([0., 0., 1., 1.])
    """
    check_kv_heads(query, kv, name, dim)
    h, h_kv = query.shape[dim], kv.shape[dim]
    return kv if h == h_kv else kv.repeat_interleave(h // h_kv, dim=dim)  # (..., h, t_k, d)


def _causal_bias_mask(bias: Any, t_q: int, t_k: int, device: Device) -> Tensor:
    """The bool mask (t_q, t_k) of torch's ``causal_upper_left(t_q, t_k)`` or
    ``causal_lower_right(t_q, t_k)``, which torch's SDPA takes as its attn_mask: a Tensor
    subclass whose shape and values are not the mask's."""
    if (bias.seq_len_q, bias.seq_len_kv) != (t_q, t_k):
        raise ValueError(
            f"attn_mask, a CausalBias, must be made for (t_q, t_k) = ({t_q}, {t_k}), got "
            f"({bias.seq_len_q}, {bias.seq_len_kv})"
        )
    lower_right = bias.variant.name == "LOWER_RIGHT"  # torch's CausalVariant
    return causal_mask(t_q, t_k, device, alignment="bottom_right" if lower_right else "top_left")


def _weights(
    query: Tensor,
    key: Tensor,
    attn_mask: Tensor | None,
    dropout_p: float,
    is_causal: bool,
    scale: float | None,
    sinks: Tensor | None = None,
) -> Tensor:
    """Attention weights (..., t_q, t_k) in the accumulation dtype (float32 for half inputs).

    ``sinks`` (h,): a learned logit per head, one more term in each row's softmax denominator.
    """
    acc_dtype = accumulation_dtype(query.dtype)
    t_q, t_k = query.shape[-2], key.shape[-2]
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    # (..., t_q, t_k); the .to() are no-ops unless the inputs are half precision
    attn_scores = query.to(acc_dtype) @ key.to(acc_dtype).transpose(-2, -1) * scale
    if is_causal:
        if attn_mask is not None:
            raise ValueError("attn_mask must be None when is_causal=True, got a tensor")
        attn_mask = causal_mask(t_q, t_k, device=query.device)  # (t_q, t_k)
    if is_causal_bias(attn_mask):  # torch's causal_upper_left / causal_lower_right
        attn_mask = _causal_bias_mask(attn_mask, t_q, t_k, query.device)  # (t_q, t_k)
    if attn_mask is not None:
        check_attn_mask(attn_mask, query)
        check_mask(attn_mask, attn_scores.shape)
        if attn_mask.dtype == torch.bool:
            attn_scores = attn_scores.masked_fill(~attn_mask, float("-inf"))
        else:
            attn_scores = attn_scores + attn_mask.to(acc_dtype)
    if sinks is None:
        attn_weights = softmax(attn_scores, dim=-1)
    else:  # the sink is a column of its own in the softmax, dropped after it
        column = sinks.to(acc_dtype)[:, None, None].expand(*attn_scores.shape[:-1], 1)
        attn_weights = softmax(torch.cat([attn_scores, column], dim=-1), dim=-1)[..., :-1]
    if dropout_p > 0.0:
        attn_weights = F.dropout(attn_weights, p=dropout_p, training=True)
    return attn_weights


@attention_kernel
def attention_weights(
    query: Tensor,
    key: Tensor,
    *,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    """Attention weights A of shape (..., t_q, t_k): scores -> scale -> mask -> softmax -> dropout.

    Rows whose keys are all masked give zeros; with no keys (t_k = 0) A is empty. For float16 and
    bfloat16 inputs the scores and the softmax are computed in float32 and A is rounded once, to
    the input dtype.

    Args:
        query: (..., t_q, d_k), d_k >= 1.
        key: (..., t_k, d_k), same dtype as query.
        attn_mask: broadcastable to (..., t_q, t_k); ``bool`` (True = may attend) or a float
            added to the scaled scores, like M, of dtype float32 or the query's (torch's rule;
            an integer 0/1 mask is a ValueError, not silently added); or torch's
            ``causal_upper_left(t_q, t_k)`` / ``causal_lower_right(t_q, t_k)``, as torch takes.
        dropout_p: dropout probability, applied whenever it is > 0 (as torch's SDPA does).
        is_causal: apply :func:`causal_mask`; cannot be combined with ``attn_mask``.
        scale: factor on the scores; defaults to 1 / sqrt(d_k).
        enable_gqa: grouped-query attention, as in PyTorch: key (..., h_kv, t_k, d_k) with h_kv
            dividing the query's h (dim -3); query head i uses key head i // (h / h_kv).

    Returns:
        A (..., t_q, t_k) in the query's dtype.

    Raises:
        ValueError: if the tensors do not agree (dtype, device, widths, leading dimensions that
            do not broadcast) or are not floating point, the mask is not bool, float32 or the
            query's dtype (or has fewer than 2 dimensions, is on another device or does not
            broadcast, or is a causal bias made for other lengths), ``is_causal`` is combined
            with a mask, ``is_causal`` or ``enable_gqa`` is not a bool, dropout_p is outside
            [0, 1), scale is not None or a finite number, or h_kv does not divide h.
        TypeError: flash-attn's keywords and older names (``causal``, ``softmax_scale``,
            ``window_size``, ``causal_alignment``), with the keyword this function takes.

    Examples:
        >>> q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])  # (t_q, d_k)
        >>> attention_weights(q, q, is_causal=True)
        tensor([[1.0000, 0.0000],
                [0.3302, 0.6698]])
    """
    scale = check_scale(scale)
    check_dropout(dropout_p, "dropout_p")
    check_flags(is_causal=is_causal, enable_gqa=enable_gqa)
    check_qkv(query, key)
    if enable_gqa:  # repeated in the accumulation dtype: see scaled_dot_product_attention
        key = repeat_kv_heads(query, key.to(accumulation_dtype(key.dtype)), "key")
    check_batch_dims(("query", query), ("key", key), gqa=not enable_gqa)
    return _weights(query, key, attn_mask, dropout_p, is_causal, scale).to(query.dtype)


@attention_kernel
def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    sinks: Tensor | None = None,
) -> Tensor:
    """Context vectors Z = A V of shape (..., t_q, d_v), written out explicitly.

    Same arguments and semantics as ``torch.nn.functional.scaled_dot_product_attention``, the
    options keyword-only here (torch also takes ``attn_mask``, ``dropout_p`` and ``is_causal``
    by position); with ``enable_gqa=True``, key and value (..., h_kv, t_k, d) may each have
    fewer heads than the query, a number that divides h. Two differences: a bad argument raises
    a ValueError where torch raises a RuntimeError, TypeError or IndexError, and dropout_p = 1
    is refused, where torch takes it (every weight dropped, Z = 0).

    A query whose keys are all masked gets a zero context vector, never nan, and with no keys
    (t_k = 0) every context vector is zero; PyTorch's SDPA on the CPU does the same (its GPU
    kernels were not checked here). A nan or inf in a query, or in a key or value the
    query may see, propagates as in torch. The score of a key that a bool or causal mask hides
    is replaced by -inf, nan included, so a nan in a hidden key leaves the row finite (torch's
    math backend adds -inf to it and returns nan); a nan in a hidden value still reaches the row,
    through 0 · nan = nan in A V. Half-precision inputs: A and A V are computed in float32 and Z
    is rounded once.

    ``sinks`` (h,), the learned sinks of gpt-oss (beyond torch's arguments): each query head's
    softmax gets one more term exp(σ), σ the head's own logit, in its denominator, as if it saw
    one more key of score σ and value zero, so each row's weights sum to less than 1. Needs query
    (..., h, t_q, d_k).

    Args:
        query: (..., t_q, d_k).
        key: (..., t_k, d_k), the query's dtype and device.
        value: (..., t_k, d_v).
        attn_mask: broadcastable to (..., t_q, t_k): bool (True = may attend) or a float added to
            the scaled scores, or torch's causal bias, as in :func:`attention_weights`.
        dropout_p: dropout probability on A, applied whenever it is > 0 (as torch's SDPA does).
        is_causal: apply :func:`causal_mask`; cannot be combined with ``attn_mask``.
        scale: factor on the scores; defaults to 1 / sqrt(d_k).
        enable_gqa: grouped-query attention, as in PyTorch.
        sinks: (h,) learned sink logits, one per query head, or None.

    Returns:
        Z (..., t_q, d_v) in the value's dtype.

    Raises:
        ValueError: if the tensors do not agree (dtype, device, widths, lengths, leading
            dimensions that do not broadcast) or are not floating point, the mask is not bool,
            float32 or the query's dtype (or has fewer than 2 dimensions, is on another device
            or does not broadcast, or is a causal bias made for other lengths), ``is_causal``
            is combined with a mask, ``is_causal`` or ``enable_gqa`` is not a bool, dropout_p
            is outside [0, 1), scale is not None or a finite number, h_kv does not divide h, or
            sinks is not a float tensor of shape (h,) on the query's device.
        TypeError: flash-attn's keywords and older names (``causal``, ``softmax_scale``,
            ``window_size``, ``causal_alignment``), with the keyword this function takes.

    Examples:
        >>> _ = torch.manual_seed(123)
        >>> q, k, v = torch.randn(3, 2, 4, 6, 8).unbind(0)  # (b, h, t, d_k) each
        >>> z = scaled_dot_product_attention(q, k, v, is_causal=True)
        >>> sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        >>> torch.allclose(z, sdpa, atol=1e-6)
        True
    """
    scale = check_scale(scale)
    check_dropout(dropout_p, "dropout_p")
    check_flags(is_causal=is_causal, enable_gqa=enable_gqa)
    check_qkv(query, key, value)
    check_sinks(sinks, query)
    out_dtype = value.dtype
    if enable_gqa:
        # Upcast before repeating (float32 for half inputs): the repeat's backward then sums the
        # g query heads' gradients of a key or value head in float32, not g half-precision
        # roundings in half precision.
        acc_dtype = accumulation_dtype(key.dtype)
        key = repeat_kv_heads(query, key.to(acc_dtype), "key")  # (..., h, t_k, d_k)
        value = repeat_kv_heads(query, value.to(acc_dtype), "value")  # (..., h, t_k, d_v)
    check_batch_dims(("query", query), ("key", key), ("value", value), gqa=not enable_gqa)
    attn_weights = _weights(
        query, key, attn_mask, dropout_p, is_causal, scale, sinks
    )  # (..., t_q, t_k)
    return (attn_weights @ value.to(attn_weights.dtype)).to(out_dtype)  # (..., t_q, d_v)
