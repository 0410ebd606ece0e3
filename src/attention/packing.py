"""Packing sequences of different lengths into one row instead of padding them to the longest.

Notation (see CONTRIBUTING.md): n sequences of lengths t_0 ... t_{n-1} (sequence m, counted from 0
as in code, has t_m tokens), t = t_0 + ... + t_{n-1} tokens in all, t_max the longest; h heads,
d_k and d_v the widths of keys and values.

A padded batch (n, t_max, ...) spends memory and work on t_max - t_m padding tokens in row m. A
packed batch lays the sequences end to end, (t, ...), and keeps where each starts in the
*cumulative sequence lengths* of flash-attention's variable-length ("varlen") interface:

    cu_seqlens = [0, t_0, t_0 + t_1, ..., t]      int32, shape (n + 1,)

so sequence m is rows ``cu_seqlens[m]:cu_seqlens[m + 1]``, as ``flash_attn_varlen_func``
(Dao-AILab/flash-attention, ``flash_attn/flash_attn_interface.py``) takes it, with queries, keys
and values of shape (t, h, d) (it also takes the longest lengths: ``max_seqlen_q``, which sizes its
grid of query blocks, and ``max_seqlen_k``, only a bound, since the loop over a sequence's key
blocks stops at that sequence's own length, read from ``cu_seqlens_k``). Attention must then stay
inside each sequence: either a kernel that visits only the diagonal blocks (:func:`varlen_attention`
does one sequence at a time), or one attention over the packed row with the document mask of
:func:`attention.masks.document`.
"""

import torch
import torch.nn.functional as F
from torch import Tensor

from ._checks import (
    attention_kernel,
    check_counts,
    check_flags,
    check_qkv,
    check_scale,
    shape_or_type,
    torch_takes_is_causal,
)
from .functional import causal_mask, repeat_kv_heads

__all__ = ["cu_seqlens_from_lengths", "document_ids", "pack", "unpack", "varlen_attention"]


def _check_lengths(lengths: Tensor) -> None:
    """Require a non-empty 1-d integer tensor of lengths >= 0 (a sequence may be empty)."""
    if not isinstance(lengths, Tensor) or lengths.dim() != 1 or lengths.is_floating_point() or (
        lengths.is_complex() or lengths.dtype == torch.bool
    ) or lengths.numel() == 0 or bool((lengths < 0).any()):
        got = lengths.tolist() if isinstance(lengths, Tensor) else lengths
        raise ValueError(
            f"lengths must be a non-empty 1-d integer tensor of values >= 0, got {got!r}"
        )


def _check_cu_seqlens(cu_seqlens: Tensor, total: int | None = None) -> None:
    """Require (n + 1,) integers that start at 0 and never fall (to ``total``, if given): an empty
    sequence repeats an entry, as flash-attention's varlen interface allows."""
    valid = (
        isinstance(cu_seqlens, Tensor) and cu_seqlens.dim() == 1 and cu_seqlens.numel() >= 2
        and not (cu_seqlens.is_floating_point() or cu_seqlens.is_complex())
        and cu_seqlens.dtype != torch.bool
        and int(cu_seqlens[0]) == 0 and bool((cu_seqlens.long().diff() >= 0).all())  # no wrap
        and (total is None or int(cu_seqlens[-1]) == total)
    )
    if not valid:
        got = cu_seqlens.tolist() if isinstance(cu_seqlens, Tensor) else cu_seqlens
        end = "" if total is None else f" ending at the number of packed tokens {total}"
        raise ValueError(
            f"cu_seqlens must be a 1-d integer tensor [0, t_0, t_0 + t_1, ...] that never "
            f"falls{end}, got {got!r}"
        )


def cu_seqlens_from_lengths(lengths: Tensor) -> Tensor:
    """[0, t_0, t_0 + t_1, ..., t] as int32, shape (n + 1,), from the lengths (n,).

    Args:
        lengths: t_0 .. t_{n-1}, a 1-d integer tensor of values >= 0.

    Returns:
        cu_seqlens (n + 1,), int32.

    Raises:
        ValueError: if lengths is not a non-empty 1-d integer tensor of values >= 0, or its
            sum does not fit int32.

    Examples:
        >>> cu_seqlens_from_lengths(torch.tensor([3, 2, 4]))
        tensor([0, 3, 5, 9], dtype=torch.int32)
    """
    _check_lengths(lengths)
    total = sum(lengths.tolist())  # Python ints: an int64 sum could wrap below the bound
    if total > torch.iinfo(torch.int32).max:  # cu_seqlens are int32, as flash-attn's
        raise ValueError(f"the lengths must sum to at most 2**31 - 1 (int32), got {total}")
    return F.pad(torch.cumsum(lengths, dim=0, dtype=torch.int32), (1, 0))  # (n + 1,)


def document_ids(cu_seqlens: Tensor) -> Tensor:
    """The sequence (document) of each packed token, shape (t,): [0, 0, 0, 1, 1, 2, ...].

    Args:
        cu_seqlens: [0, t_0, t_0 + t_1, ..., t], (n + 1,) integers that never fall from 0.

    Returns:
        The ids (t,), int64: token r belongs to sequence ids[r].

    Raises:
        ValueError: if cu_seqlens does not start at 0, or falls.

    Examples:
        >>> document_ids(torch.tensor([0, 3, 5, 6]))
        tensor([0, 0, 0, 1, 1, 2])
    """
    _check_cu_seqlens(cu_seqlens)
    lengths = cu_seqlens.diff().long()  # (n,)
    return torch.repeat_interleave(torch.arange(len(lengths), device=lengths.device), lengths)


def pack(x: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """The real tokens of a right-padded batch x (n, t_max, ...), end to end, and cu_seqlens.

    flash-attention's ``unpad_input``, with lengths instead of a padding mask.

    Args:
        x: the padded batch (n, t_max, ...); row m (from 0) holds t_m real tokens, then padding.
        lengths: t_0 .. t_{n-1} (n,).

    Returns:
        (packed, cu_seqlens): packed (t, ...) and cu_seqlens (n + 1,) int32.

    Raises:
        ValueError: if lengths is not valid, or x is not (n, t_max, ...) with t_max >= max t_m.

    Examples:
        >>> x = torch.tensor([[1, 2, 0], [3, 4, 5]])
        >>> pack(x, torch.tensor([2, 3]))
        (tensor([1, 2, 3, 4, 5]), tensor([0, 2, 5], dtype=torch.int32))
    """
    _check_lengths(lengths)
    if not isinstance(x, Tensor) or x.dim() < 2 or x.shape[0] != len(lengths) or (
        int(lengths.max()) > x.shape[1]
    ):
        shape = shape_or_type(x)
        raise ValueError(
            f"x must be (n, t_max, ...) with n = {len(lengths)} rows and t_max >= "
            f"{int(lengths.max())}, got shape {shape}"
        )
    real = torch.arange(x.shape[1], device=x.device) < lengths.to(x.device)[:, None]  # (n, t_max)
    return x[real], cu_seqlens_from_lengths(lengths)  # (t, ...), (n + 1,)


def unpack(packed: Tensor, cu_seqlens: Tensor, t_max: int | None = None) -> Tensor:
    """The inverse of :func:`pack`: a right-padded batch (n, t_max, ...), zeros in the padding.

    Args:
        packed: the packed tokens (t, ...).
        cu_seqlens: [0, t_0, ..., t] (n + 1,).
        t_max: the padded length (the longest t_m if None).

    Returns:
        The batch (n, t_max, ...).

    Raises:
        ValueError: if packed is not a tensor of one row per token, cu_seqlens does not rise
            from 0 to t without falling, or t_max is not an integer >= max t_m.

    Examples:
        >>> unpack(torch.tensor([1, 2, 3, 4, 5]), torch.tensor([0, 2, 5]))
        tensor([[1, 2, 0],
                [3, 4, 5]])
    """
    if not isinstance(packed, Tensor) or packed.dim() < 1:
        shape = shape_or_type(packed)
        raise ValueError(f"packed must be (t, ...), one row per packed token, got shape {shape}")
    _check_cu_seqlens(cu_seqlens, packed.shape[0])
    if t_max is not None:  # 0 when every sequence is empty, as pack of an (n, 0, ...) batch
        check_counts(t_max=t_max)
    lengths = cu_seqlens.diff().long().to(packed.device)  # (n,)
    t_max = int(lengths.max()) if t_max is None else t_max
    if t_max < int(lengths.max()):
        raise ValueError(
            f"t_max must be at least the longest length {int(lengths.max())}, got {t_max}"
        )
    out = packed.new_zeros(len(lengths), t_max, *packed.shape[1:])  # (n, t_max, ...)
    out[torch.arange(t_max, device=packed.device) < lengths[:, None]] = packed
    return out


@attention_kernel
def varlen_attention(
    query: Tensor, key: Tensor, value: Tensor, cu_seqlens_q: Tensor,
    cu_seqlens_k: Tensor | None = None, *, is_causal: bool = False, scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    """Attention within each packed sequence, in flash-attention's varlen layout.

    Sequence m's queries are rows ``cu_seqlens_q[m]:cu_seqlens_q[m + 1]`` and its keys
    ``cu_seqlens_k[m]:...``. Each sequence is attended alone, so the work is that of the diagonal
    blocks, the sum of t_m², never t². ``is_causal`` aligns each sequence's mask bottom-right, as
    ``flash_attn_varlen_func`` does since flash-attention 2.1 (the same as top-left when a
    sequence has as many queries as keys). A sequence may be empty, a repeated entry of
    cu_seqlens, as flash-attention allows; the queries of a sequence without keys give zeros,
    as there.

    Args:
        query: (t_q, h, d_k), t_q packed tokens.
        key: (t_k, h, d_k), t_k packed tokens; 1 head, shared, or h_kv dividing h with
            ``enable_gqa``.
        value: (t_k, h, d_v), the same.
        cu_seqlens_q: [0, t_0, t_0 + t_1, ..., t_q] (n + 1,), where each sequence's queries start.
        cu_seqlens_k: the same for the keys (the queries' when None).
        is_causal: causal within each sequence, aligned bottom-right.
        scale: multiplies the scores; defaults to 1/sqrt(d_k).
        enable_gqa: key and value may have h_kv heads, h_kv dividing h; query head i reads
            key-value head i // (h / h_kv), as in torch's SDPA and ``varlen_attn``.

    Returns:
        (t_q, h, d_v).

    Raises:
        ValueError: if a tensor is not (t, h, d), key or value has neither h heads nor 1 (nor,
            with enable_gqa, a number dividing h), the tensors do not agree (dtype, device,
            widths, key and value tokens), a cu_seqlens does not rise from 0 to its tensor's
            length without falling, the two count different sequences, scale is not None or a finite
            number, or is_causal or enable_gqa is not a bool.
        TypeError: flash-attn's keywords and older names (``causal``, ``softmax_scale``,
            ``window_size``, ``causal_alignment``), with the keyword this function takes.

    Examples:
        >>> _ = torch.manual_seed(0)
        >>> x = torch.randn(5, 1, 4)  # two sequences of 2 and 3 tokens, packed, h = 1
        >>> cu_seqlens = torch.tensor([0, 2, 5])
        >>> out = varlen_attention(x, x, x, cu_seqlens, is_causal=True)
        >>> alone = torch.nn.functional.scaled_dot_product_attention(
        ...     x[2:].transpose(0, 1), x[2:].transpose(0, 1), x[2:].transpose(0, 1), is_causal=True)
        >>> torch.allclose(out[2:], alone.transpose(0, 1), atol=1e-6)
        True
    """
    scale = check_scale(scale)
    cu_seqlens_k = cu_seqlens_q if cu_seqlens_k is None else cu_seqlens_k
    for name, x in (("query", query), ("key", key), ("value", value)):
        if not isinstance(x, Tensor) or x.dim() != 3:
            got = f"shape {tuple(x.shape)}" if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"{name} must be (t, h, d) in the varlen layout, got {got}")
    check_qkv(*(x.transpose(0, 1) for x in (query, key, value)))  # as (h, t, d): t_k, not h
    check_flags(enable_gqa=enable_gqa)
    h = query.shape[1]
    if enable_gqa:  # query head i reads head i // (h / h_kv), the heads being dimension 1
        key = repeat_kv_heads(query, key, "key", dim=1)  # (t_k, h, d_k)
        value = repeat_kv_heads(query, value, "value", dim=1)  # (t_k, h, d_v)
    if any(x.shape[1] not in (1, h) for x in (key, value)):
        raise ValueError(
            f"key and value must have the query's h={h} heads (or 1, shared; fewer that divide h "
            f"with enable_gqa=True), got {key.shape[1]} and {value.shape[1]}"
        )
    check_flags(is_causal=is_causal)
    _check_cu_seqlens(cu_seqlens_q, query.shape[0])
    _check_cu_seqlens(cu_seqlens_k, key.shape[0])
    if len(cu_seqlens_q) != len(cu_seqlens_k):
        raise ValueError(
            f"cu_seqlens_q and cu_seqlens_k must count the same sequences, got "
            f"{len(cu_seqlens_q) - 1} and {len(cu_seqlens_k) - 1}"
        )
    out = query.new_empty(*query.shape[:2], value.shape[-1])  # (t_q, h, d_v)
    bounds = zip(cu_seqlens_q.tolist(), cu_seqlens_q[1:].tolist(), cu_seqlens_k.tolist(),
                 cu_seqlens_k[1:].tolist())
    for q0, q1, k0, k1 in bounds:
        # 4-d (1, h, t_i, d): on a CPU, SDPA takes its fused kernel for 4-d inputs only
        q = query[q0:q1].transpose(0, 1)[None]  # (1, h, t_i, d_k)
        k, v = key[k0:k1].transpose(0, 1)[None], value[k0:k1].transpose(0, 1)[None]  # (1, h, .., d)
        flag = is_causal and torch_takes_is_causal(q1 - q0, k1 - k0, scale)
        mask = None
        if is_causal and not flag:
            mask = causal_mask(q1 - q0, k1 - k0, q.device, alignment="bottom_right")  # (t_i, t_k_i)
        z = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=flag, scale=scale
        )  # (1, h, t_i, d_v)
        out[q0:q1] = z[0].transpose(0, 1)
    return out
