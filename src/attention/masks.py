"""Masks as programs: one predicate per mask, from which every form a kernel takes is derived.

Notation (see CONTRIBUTING.md):
    b      batch size, h heads
    t_q    number of queries, t_k number of keys (t_q = t_k = t in self-attention)
    i, j   a query's and a key's index (``q_idx``, ``kv_idx``), counted from 0
    B      block size of a block mask; T_q = ceil(t_q / B), T_k = ceil(t_k / B) blocks

A *mask rule* is a function ``mask_mod(b, h, q_idx, kv_idx) -> bool tensor``, True where query
``q_idx`` of batch row ``b`` and head ``h`` may attend to key ``kv_idx``. A *score rule* is a
function ``score_mod(score, b, h, q_idx, kv_idx) -> tensor`` that returns the new value of a
scaled score. These are exactly the ``mask_mod`` and ``score_mod`` of PyTorch's FlexAttention
(``torch.nn.attention.flex_attention``), so every rule below can be passed to it as it is. The
same rule also gives, with the arguments broadcast against each other instead of one score at a
time:

    to_dense(mask_mod, t_q, t_k)       the boolean (t_q, t_k) mask SDPA takes, True = may attend
    to_bias(score_mod, t_q, t_k, h)    the additive (h, t_q, t_k) bias, for a rule that adds a term
    block_sparsity(mask_mod, ..., B)   which (B, B) tiles are empty, partial or full (a BlockMask)
    dense_attention(q, k, v, ...)      the explicit softmax(mod(S), -inf where hidden) V

Rules only use tensor operations (comparisons, ``&``, ``|``, indexing a captured tensor), never a
Python ``if`` on a value, so that the same code runs one score at a time under ``torch.vmap``
(FlexAttention's eager path), broadcast over whole index grids (``to_dense``), and inside the
kernel that ``torch.compile`` generates from it.
"""

import math
import operator
from collections.abc import Callable
from typing import Literal, overload

import torch
from torch import Tensor
from torch.types import Device

from ._checks import (
    Alignment,
    accumulation_dtype,
    attention_kernel,
    check_alignment,
    check_batch_dims,
    check_block_size,
    check_counts,
    check_flags,
    check_number,
    check_qkv,
    check_rule,
    check_scale,
    check_sizes,
    is_integer,
    mask_answer,
    shape_or_type,
)
from .positions import alibi_slopes64

__all__ = [
    "alibi",
    "and_masks",
    "apply_score_mod",
    "block_sparsity",
    "causal",
    "dense_attention",
    "document",
    "global_tokens",
    "or_masks",
    "padding",
    "prefix_lm",
    "sink_window",
    "sinks",
    "sliding_window",
    "soft_cap",
    "t5_bias",
    "t5_buckets",
    "to_bias",
    "to_dense",
    "visible",
]

MaskMod = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]
ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]


def _offset(alignment: Alignment, t_q: int | None, t_k: int | None) -> int:
    """Position of query 0: 0 aligned top-left, t_k - t_q aligned bottom-right."""
    check_alignment(alignment)
    if alignment == "top_left":
        return 0
    if t_q is None or t_k is None:
        raise ValueError(
            f"alignment='bottom_right' needs t_q and t_k (query i sits at t_k - t_q + i), "
            f"got t_q={t_q!r}, t_k={t_k!r}"
        )
    check_counts(t_q=t_q, t_k=t_k)
    return t_k - t_q


def causal(
    alignment: Alignment = "top_left",
    t_q: int | None = None,
    t_k: int | None = None,
) -> MaskMod:
    """Query i sees key j when j <= i + offset: offset 0 top-left (SDPA's
    ``is_causal``), or t_k - t_q bottom-right (``causal_lower_right``, queries
    after a cache; needs t_q and t_k).

    Args:
        alignment: ``"top_left"`` or ``"bottom_right"``.
        t_q: number of queries (needed bottom-right).
        t_k: number of keys (needed bottom-right).

    Returns:
        The mask rule.

    Raises:
        ValueError: if alignment is unknown, or bottom-right lacks t_q or t_k.

    Examples:
        >>> to_dense(causal("bottom_right", t_q=2, t_k=3), 2, 3)
        tensor([[ True,  True, False],
                [ True,  True,  True]])
    """
    offset = _offset(alignment, t_q, t_k)

    def causal_mask(
        b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor
    ) -> Tensor:
        return kv_idx <= q_idx + offset

    return causal_mask


def sliding_window(
    window: int, alignment: Alignment = "top_left", t_q: int | None = None, t_k: int | None = None
) -> MaskMod:
    """Causal attention over the ``window`` latest keys: the query at position p sees keys
    p - window < j <= p, as ``flash_attention(..., is_causal=True, window=window)``.
    The window counts the query's own key: attention-gym's ``generate_sliding_window(n)``,
    whose n is the look-back (i - j <= n), is ``sliding_window(n + 1)``.

    Args:
        window: w, the keys each query sees, itself included.
        alignment: ``"top_left"`` or ``"bottom_right"``, as in :func:`causal`.
        t_q: number of queries (needed bottom-right).
        t_k: number of keys (needed bottom-right).

    Returns:
        The mask rule.

    Raises:
        ValueError: if window is not an integer >= 1, alignment is unknown, or bottom-right lacks
            t_q or t_k.

    Examples:
        >>> to_dense(sliding_window(2), 4, 4)
        tensor([[ True, False, False, False],
                [ True,  True, False, False],
                [False,  True,  True, False],
                [False, False,  True,  True]])
    """
    check_sizes(window=window)
    offset = _offset(alignment, t_q, t_k)

    def sliding_window_mask(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        position = q_idx + offset
        return (kv_idx <= position) & (kv_idx > position - window)

    return sliding_window_mask


def _check_ids(name: str, ids: Tensor, ranks: tuple[int, ...]) -> None:
    """Require an integer tensor of one of the given ranks."""
    if not isinstance(ids, Tensor) or ids.dim() not in ranks or ids.is_floating_point() or (
        ids.dtype == torch.bool
    ):
        got = f"{tuple(ids.shape)} of {ids.dtype}" if isinstance(ids, Tensor) else shape_or_type(ids)
        expected = " or ".join(f"{r}-d" for r in ranks)
        raise ValueError(f"{name} must be a {expected} integer tensor, got {got}")


def document(doc_ids: Tensor) -> MaskMod:
    """Packed documents: a query sees a key of its own document only (in both directions).

    Combine with :func:`causal` (:func:`and_masks`) for causal packing.

    Args:
        doc_ids: each token's document, (t,) or (b, t), for example from
            :func:`attention.packing.document_ids`.

    Returns:
        The mask rule.

    Raises:
        ValueError: if doc_ids is not a 1-d or 2-d integer tensor.

    Examples:
        >>> to_dense(document(torch.tensor([0, 0, 1])), 3, 3)
        tensor([[ True,  True, False],
                [ True,  True, False],
                [False, False,  True]])
    """
    _check_ids("doc_ids", doc_ids, (1, 2))

    if doc_ids.dim() == 1:

        def document_mask(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            return doc_ids[q_idx] == doc_ids[kv_idx]

    else:

        def document_mask(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            return doc_ids[b, q_idx] == doc_ids[b, kv_idx]

    return document_mask


def prefix_lm(prefix_length: int) -> MaskMod:
    """Prefix LM: causal, and every query also sees the first ``prefix_length`` keys, so the
    prefix attends to itself in both directions (T5's prefix LM, Raffel et al., 2020).

    Args:
        prefix_length: tokens of the prefix, >= 0.

    Returns:
        The mask rule.

    Raises:
        ValueError: if prefix_length is not an integer >= 0.

    Examples:
        >>> to_dense(prefix_lm(2), 3, 3)
        tensor([[ True,  True, False],
                [ True,  True, False],
                [ True,  True,  True]])
    """
    check_counts(prefix_length=prefix_length)
    return or_masks(causal(), sinks(prefix_length))


def sinks(num_sinks: int) -> MaskMod:
    """Every query sees the first ``num_sinks`` keys, earlier or later (StreamingLLM's attention
    sinks, Xiao et al.). For a causal stream, combine it as :func:`sink_window` does,
    ``or_masks(sliding_window(w), and_masks(causal(), sinks(n)))``: with a plain ``or`` a query
    before the last sink would see the sinks after it.

    Args:
        num_sinks: n_sink, the first keys every query sees, >= 0.

    Returns:
        The mask rule.

    Raises:
        ValueError: if num_sinks is not an integer >= 0.

    Examples:
        >>> to_dense(sinks(1), 2, 3)
        tensor([[ True, False, False],
                [ True, False, False]])
    """
    check_counts(num_sinks=num_sinks)

    def sink_mask(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return kv_idx < num_sinks

    return sink_mask


def sink_window(window: int, num_sinks: int = 0) -> MaskMod:
    """A sliding window of ``window`` keys plus the first ``num_sinks`` keys, causal: the query at
    position p sees key j <= p when p - window < j or j < num_sinks (StreamingLLM's window with
    its attention sinks; ``num_sinks=0`` is :func:`sliding_window`).

    Args:
        window: w, the latest keys each query sees, itself included.
        num_sinks: n_sink, the first keys every query also sees.

    Returns:
        The mask rule.

    Raises:
        ValueError: if window is not an integer >= 1 or num_sinks not an integer >= 0.

    Examples:
        >>> to_dense(sink_window(2, num_sinks=1), 4, 4)
        tensor([[ True, False, False, False],
                [ True,  True, False, False],
                [ True,  True,  True, False],
                [ True, False,  True,  True]])
    """
    return or_masks(sliding_window(window), and_masks(causal(), sinks(num_sinks)))


def global_tokens(is_global: Tensor) -> MaskMod:
    """Longformer's global attention: a global token sees every key and every query sees it.

    Args:
        is_global: (t,) bool, True at the global positions (a [CLS] token, a question).

    Returns:
        The mask rule.

    Raises:
        ValueError: if is_global is not a 1-d bool tensor.

    Examples:
        >>> is_global = torch.tensor([True, False, False])
        >>> to_dense(or_masks(sliding_window(1), global_tokens(is_global)), 3, 3)
        tensor([[ True,  True,  True],
                [ True,  True, False],
                [ True, False,  True]])
    """
    if not isinstance(is_global, Tensor) or is_global.dim() != 1 or is_global.dtype != torch.bool:
        got = (tuple(is_global.shape), is_global.dtype) if isinstance(is_global, Tensor) else (
            is_global)
        raise ValueError(f"is_global must be a 1-d bool tensor, got {got!r}")

    def global_mask(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return is_global[q_idx] | is_global[kv_idx]

    return global_mask


def padding(lengths: Tensor) -> MaskMod:
    """Right-padded batch: key j of batch row b is real when j < lengths[b] (a key padding mask).

    Padded *queries* keep attending to the real keys; their outputs are discarded later (section
    6.2).

    Args:
        lengths: (b,) the real length of each row.

    Returns:
        The mask rule.

    Raises:
        ValueError: if lengths is not a 1-d integer tensor.

    Examples:
        >>> to_dense(padding(torch.tensor([2, 3])), 1, 3, b=2)[:, 0, 0]  # (b, t_k)
        tensor([[ True,  True, False],
                [ True,  True,  True]])
    """
    _check_ids("lengths", lengths, (1,))

    def padding_mask(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return kv_idx < lengths[b]

    return padding_mask


def and_masks(*mask_mods: MaskMod) -> MaskMod:
    """A key is visible when every rule allows it (no rule: all visible).

    Args:
        *mask_mods: the rules.

    Returns:
        The mask rule of their conjunction.

    Raises:
        ValueError: if a rule is not callable.

    Examples:
        >>> to_dense(and_masks(causal(), sliding_window(2)), 3, 3)
        tensor([[ True, False, False],
                [ True,  True, False],
                [False,  True,  True]])
    """
    return _combine(mask_mods, operator.and_, none=True)


def or_masks(*mask_mods: MaskMod) -> MaskMod:
    """A key is visible when at least one rule allows it (no rule: none visible).

    Args:
        *mask_mods: the rules.

    Returns:
        The mask rule of their disjunction.

    Raises:
        ValueError: if a rule is not callable.

    Examples:
        >>> to_dense(or_masks(sliding_window(1), sinks(1)), 3, 3)
        tensor([[ True, False, False],
                [ True,  True, False],
                [ True, False,  True]])
    """
    return _combine(mask_mods, operator.or_, none=False)


def _combine(mask_mods: tuple[MaskMod, ...], combine: Callable[[Tensor, Tensor], Tensor],
             none: bool) -> MaskMod:
    """The rule whose answer folds the answers of ``mask_mods`` with ``combine`` (``&`` or ``|``,
    which also take a rule's Python bool); ``none`` without rules."""
    for i, mask_mod in enumerate(mask_mods):
        check_rule(mask_mod, f"mask_mods[{i}]")

    def combined(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        allowed = torch.full((), none, dtype=torch.bool, device=q_idx.device)
        for mask_mod in mask_mods:
            allowed = combine(allowed, mask_mod(b, h, q_idx, kv_idx))
        return allowed

    return combined


def _check_heads(h: Tensor, num_heads: int, rule: str, hint: str = "") -> None:
    """Refuse a per-head score rule made for ``num_heads`` heads on scores with another number.

    apply_score_mod passes the heads as (1, h, 1, 1): a rule indexed by head would be wrong, or
    out of range; FlexAttention passes one head at a time, a 0-d h, which this leaves alone.
    ``hint`` may name the right call, with ``{h}`` for the scores' number of heads.
    """
    if h.dim() == 4 and h.shape[1] != num_heads:
        n = h.shape[1]
        raise ValueError(f"{rule} applied to scores with h={n} heads{hint.format(h=n)}")


def alibi(num_heads: int, offset: int = 0) -> ScoreMod:
    """ALiBi (Press et al., 2022): add -m_h (i + offset - j) to the score of head h, with the slopes
    of :func:`~attention.alibi_slopes`; ``offset`` = t_k - t_q puts queries after a cache.
    attention-gym's ``generate_alibi_bias`` adds the same term with slopes 2^(-8 (h + 1) / num_heads)
    (head h counted from 0), which are ALiBi's only when num_heads is a power of two.

    Args:
        num_heads: h, one slope per head.
        offset: position of query 0.

    Returns:
        The score rule.

    Raises:
        ValueError: if num_heads is not an integer >= 1 or offset not an integer; and, from the
            rule, if it is applied (:func:`apply_score_mod`, :func:`to_bias`,
            :func:`dense_attention`) to scores whose number of heads h is not num_heads.

    Examples:
        >>> to_bias(alibi(1), 2, 2, h=1)
        tensor([[[ 0.0000,  0.0039],
                 [-0.0039,  0.0000]]])
    """
    slopes = alibi_slopes64(num_heads)  # (h,), float64
    # a position, negative too (t_k < t_q): 1.5 gave fractional distances, True was 1
    if not is_integer(offset):
        raise ValueError(f"offset must be an integer (the position of query 0), got {offset!r}")
    rule = f"alibi(num_heads={num_heads})"  # built here: FlexAttention traces the score rule

    def alibi_score(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        _check_heads(h, num_heads, rule, ": pass alibi({h})")
        distance = (q_idx + offset - kv_idx).to(score.dtype)
        return score - slopes.to(score.device, score.dtype)[h] * distance

    return alibi_score


def t5_buckets(
    relative_position: Tensor, num_buckets: int = 32, max_distance: int = 128,
    bidirectional: bool = False,
) -> Tensor:
    """T5's bucket of each offset j - i (equation 8.11; Mesh TensorFlow's
    ``_relative_position_bucket``): exact buckets for near offsets, log-spaced ones up to
    ``max_distance``. A decoder (not ``bidirectional``) puts every later key in bucket 0; an
    encoder gives later keys the upper half of the buckets.

    Args:
        relative_position: offsets j - i, an integer tensor of any shape.
        num_buckets: number of buckets.
        max_distance: the distance from which every offset shares the last bucket.
        bidirectional: an encoder's buckets (later keys apart from earlier ones).

    Returns:
        The bucket of each offset (int64), the shape of relative_position.

    Raises:
        ValueError: if relative_position is not an integer tensor, num_buckets is not an
            integer >= 2 (>= 4 if bidirectional), max_distance is not an integer above the
            exact buckets' reach (num_buckets // 2, or num_buckets // 4 if bidirectional), or
            bidirectional is not a bool.

    Examples:
        >>> t5_buckets(-torch.arange(0, 40, 8), num_buckets=8, max_distance=32)
        tensor([0, 5, 6, 7, 7])
    """
    if (not isinstance(relative_position, Tensor) or relative_position.is_floating_point()
            or relative_position.is_complex() or relative_position.dtype == torch.bool):
        got = relative_position.dtype if isinstance(relative_position, Tensor) else relative_position
        raise ValueError(f"relative_position must be an integer tensor, got {got!r}")
    _check_t5(num_buckets, max_distance, bidirectional)
    # in int64: negating an unsigned offset wrapped it (2 in uint8 became 254, a far bucket),
    # -(-128) stayed -128 in int8, and an encoder's upper buckets overflowed a small dtype
    n = -relative_position.long()  # distance i - j, > 0 for a key before its query
    bucket = torch.zeros_like(n)
    if bidirectional:
        num_buckets //= 2
        bucket = bucket + (n < 0).to(n.dtype) * num_buckets
        n = n.abs()
    else:
        n = n.clamp(min=0)
    exact = num_buckets // 2
    # in float32, as Mesh TensorFlow and transformers take it: a trained table is indexed by
    # their buckets, and where the ratio is a whole bucket float64 fell just below it
    log_ratio = torch.log(n.clamp(min=1).float() / exact) / math.log(max_distance / exact)
    large = (exact + (log_ratio * (num_buckets - exact)).to(n.dtype)).clamp(max=num_buckets - 1)
    return bucket + torch.where(n < exact, n, large)


def _check_t5(num_buckets: int, max_distance: int, bidirectional: bool) -> None:
    """Require settings for which T5's buckets are defined: an exact bucket at least, and a
    max_distance past the exact ones (log(max_distance / exact) > 0)."""
    check_flags(bidirectional=bidirectional)
    least = 4 if bidirectional else 2
    check_sizes(num_buckets=num_buckets, max_distance=max_distance)
    if num_buckets < least:
        raise ValueError(f"num_buckets must be at least {least}"
                         f"{' (bidirectional)' if bidirectional else ''}, got {num_buckets}")
    exact = num_buckets // (4 if bidirectional else 2)
    if max_distance <= exact:
        raise ValueError(f"max_distance must exceed the {exact} exact buckets, got {max_distance}")


def t5_bias(
    table: Tensor, num_buckets: int = 32, max_distance: int = 128, bidirectional: bool = False
) -> ScoreMod:
    """T5's learned relative bias: add ``table[bucket(j - i), h]`` to the score of head h.

    Args:
        table: the learned biases (num_buckets, h).
        num_buckets: number of buckets, table's rows.
        max_distance: the distance from which every offset shares the last bucket.
        bidirectional: an encoder's buckets, as in :func:`t5_buckets`.

    Returns:
        The score rule.

    Raises:
        ValueError: if table is not a (num_buckets, h) tensor, bidirectional is not a bool or
            the other bucket settings are those :func:`t5_buckets` refuses; and, from the rule,
            if it is applied (:func:`apply_score_mod`, :func:`to_bias`, :func:`dense_attention`)
            to scores whose number of heads is not the table's h.

    Examples:
        >>> table = torch.arange(4.0)[:, None]  # (num_buckets, h) = (4, 1)
        >>> to_bias(t5_bias(table, num_buckets=4, max_distance=8), 3, 3, h=1)
        tensor([[[0., 0., 0.],
                 [1., 0., 0.],
                 [2., 1., 0.]]])
    """
    _check_t5(num_buckets, max_distance, bidirectional)
    if not isinstance(table, Tensor) or table.dim() != 2 or table.shape[0] != num_buckets:
        got = shape_or_type(table)
        raise ValueError(f"table must have shape (num_buckets={num_buckets}, h), got {got}")

    rule = f"t5_bias(table of h={table.shape[1]} heads)"  # built here: FlexAttention traces it

    def t5_score(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        _check_heads(h, table.shape[1], rule)
        bucket = t5_buckets(kv_idx - q_idx, num_buckets, max_distance, bidirectional)
        return score + table.to(score.device, score.dtype)[bucket, h]

    return t5_score


def soft_cap(cap: float | Tensor) -> ScoreMod:
    """Gemma 2's soft cap of each scaled score s_ij: cap · tanh(s_ij / cap), smooth, in (-cap, cap)
    (Gemma 2 caps its attention scores at 50).

    Args:
        cap: the bound, > 0: a number, or a 0-d tensor (a learnable cap gets its gradient).

    Returns:
        The score rule.

    Raises:
        ValueError: if cap is not a finite number > 0 (an infinite cap would give inf · 0).

    Examples:
        >>> apply_score_mod(torch.tensor([-100.0, 0.0, 1.0, 100.0]).view(1, 1, 1, 4), soft_cap(50))
        tensor([[[[-48.2014,   0.0000,   0.9999,  48.2014]]]])
    """
    # an infinite cap would give inf · 0; a learnable one (a 0-d tensor) keeps its gradient
    check_number("cap", cap, 0.0, inclusive=False, learnable=True)

    def soft_cap_score(
        score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor
    ) -> Tensor:
        return cap * torch.tanh(score / cap)

    return soft_cap_score


def _grid(
    t_q: int, t_k: int, b: int | None, h: int | None, device: Device
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Index tensors that broadcast to (b, h, t_q, t_k), with b and h 1 (batch row and head 0)
    where they are None. Any size may be 0, as in ``causal_mask``: the masks are then empty."""
    check_counts(t_q=t_q, t_k=t_k, **({"b": b} if b is not None else {}),
                 **({"h": h} if h is not None else {}))
    batch = torch.arange(1 if b is None else b, device=device).view(-1, 1, 1, 1)  # (b, 1, 1, 1)
    head = torch.arange(1 if h is None else h, device=device).view(1, -1, 1, 1)  # (1, h, 1, 1)
    q_idx = torch.arange(t_q, device=device).view(1, 1, -1, 1)  # (1, 1, t_q, 1)
    kv_idx = torch.arange(t_k, device=device).view(1, 1, 1, -1)  # (1, 1, 1, t_k)
    return batch, head, q_idx, kv_idx


def visible(mask_mod: MaskMod, query_pos: Tensor, key_pos: Tensor) -> Tensor:
    """The rule at given positions: bool (t_q, t_k), True where the query at ``query_pos[i]``
    may see the key at ``key_pos[j]`` (batch row and head 0).

    The one place a causal, window or sink rule becomes a dense mask for positions that are not
    0 .. t - 1: a query block of a tiled kernel, the keys a rolling cache kept. Zero positions
    give an empty mask.

    Args:
        mask_mod: the rule.
        query_pos: positions of the queries (t_q,).
        key_pos: positions of the keys (t_k,).

    Returns:
        The mask (t_q, t_k), bool.

    Raises:
        ValueError: if mask_mod is not callable or answers with numbers, not bools, or a
            position tensor is not a 1-d integer tensor.

    Examples:
        >>> visible(sliding_window(2), torch.tensor([5, 6]), torch.tensor([4, 5, 6]))
        tensor([[ True,  True, False],
                [False,  True,  True]])
    """
    check_rule(mask_mod, "mask_mod")
    # a list had no .device, (t, 1) positions broadcast to a wrong shape, 0.5 was a position
    _check_ids("query_pos", query_pos, (1,))
    _check_ids("key_pos", key_pos, (1,))
    zero = torch.zeros((), dtype=torch.long, device=query_pos.device)
    dense = mask_mod(zero, zero, query_pos[:, None], key_pos[None, :])  # (t_q, t_k)
    return mask_answer(dense, query_pos.device).expand(len(query_pos), len(key_pos))


def to_dense(
    mask_mod: MaskMod, t_q: int, t_k: int, b: int | None = None, h: int | None = None,
    device: Device = None,
) -> Tensor:
    """The boolean mask of a rule, True = may attend, as SDPA's ``attn_mask`` takes it.

    (t_q, t_k) when b and h are None (batch row 0 and head 0 are asked, as torch's
    ``create_mask`` does with ``B=None, H=None``), else (b or 1, h or 1, t_q, t_k).

    Args:
        mask_mod: the rule.
        t_q: number of queries.
        t_k: number of keys.
        b: batch rows to ask the rule about (None: row 0 only).
        h: heads to ask the rule about (None: head 0 only).
        device: where to build the mask.

    Returns:
        The mask, bool; empty where a size is 0.

    Raises:
        ValueError: if a size is not an integer >= 0, mask_mod is not callable or answers with
            numbers, not bools, or the rule indexes past a tensor it holds (a rule made for
            fewer tokens or sequences, such as :func:`document` or :func:`padding`).

    Examples:
        >>> to_dense(causal(), 3, 3)
        tensor([[ True, False, False],
                [ True,  True, False],
                [ True,  True,  True]])
    """
    check_rule(mask_mod, "mask_mod")
    batch, head, q_idx, kv_idx = _grid(t_q, t_k, b, h, device)
    shape = (batch.shape[0], head.shape[1], t_q, t_k)
    try:
        dense = mask_answer(mask_mod(batch, head, q_idx, kv_idx), q_idx.device)
    except IndexError as error:  # doc_ids or lengths shorter than the grid asked for
        raise ValueError(
            f"mask_mod must hold a value for every index of b={b}, h={h}, t_q={t_q}, t_k={t_k}, "
            f"got a rule that indexes past a tensor it holds ({error})"
        ) from error
    dense = dense.expand(shape)  # (b, h, t_q, t_k); a rule may return fewer dims
    return dense[0, 0] if b is None and h is None else dense


def apply_score_mod(scores: Tensor, score_mod: ScoreMod) -> Tensor:
    """``score_mod`` applied to every entry of the scaled scores (b, h, t_q, t_k) at once.

    Args:
        scores: the scaled scores (b, h, t_q, t_k).
        score_mod: the rule.

    Returns:
        The modified scores (b, h, t_q, t_k).

    Raises:
        ValueError: if scores is not a 4-d tensor, or score_mod is not callable.

    Examples:
        >>> apply_score_mod(torch.zeros(1, 1, 2, 2), alibi(1))
        tensor([[[[ 0.0000,  0.0039],
                  [-0.0039,  0.0000]]]])
    """
    if not isinstance(scores, Tensor) or scores.dim() != 4:
        shape = shape_or_type(scores)
        raise ValueError(f"scores must be (b, h, t_q, t_k), got shape {shape}")
    check_rule(score_mod, "score_mod")
    b, h, t_q, t_k = scores.shape
    batch, head, q_idx, kv_idx = _grid(t_q, t_k, b, h, scores.device)
    return score_mod(scores, batch, head, q_idx, kv_idx).expand_as(scores)  # (b, h, t_q, t_k)


ADDITIVITY_PROBES = (-30.0, -1.0, 0.5, 2.0, 30.0)  # scores at which to_bias checks that a rule adds


def to_bias(
    score_mod: ScoreMod, t_q: int, t_k: int, h: int, b: int | None = None,
    dtype: torch.dtype = torch.float32, device: Device = None,
) -> Tensor:
    """The additive bias (h, t_q, t_k), or (b, h, t_q, t_k), of a rule s_ij -> s_ij + bias.

    Read off as the rule applied to scores of 0. What is checked first, at every (b, h, i, j):
    that xi(s) - xi(0) = s, to the dtype's rounding, for each probe of ``ADDITIVITY_PROBES``
    (the same score everywhere) and for scores from -24 to 24 that differ from pair to pair. A
    rule that fails (soft-capping, s**2, a scaling by position) has no bias (use
    :func:`apply_score_mod` for it); a rule that adds only at these probes is not caught.

    Args:
        score_mod: the rule.
        t_q: number of queries.
        t_k: number of keys.
        h: number of heads.
        b: batch rows (None: a bias without a batch dimension).
        dtype: dtype of the bias.
        device: where to build it.

    Returns:
        The bias (h, t_q, t_k), or (b, h, t_q, t_k) when b is given.

    Raises:
        ValueError: if the rule changes the score by more than an added term, a size is not an
            integer >= 0, or dtype is not a floating-point dtype.

    Examples:
        >>> to_bias(alibi(2), 2, 2, h=2)[1]  # head 1, slope 1/256
        tensor([[ 0.0000,  0.0039],
                [-0.0039,  0.0000]])
    """
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:  # a bias is a score
        raise ValueError(f"dtype must be a floating-point dtype, got {dtype}")
    check_counts(t_q=t_q, t_k=t_k, h=h, **({"b": b} if b is not None else {}))  # before zeros()
    b_rows = 1 if b is None else b
    zeros = torch.zeros(b_rows, h, t_q, t_k, dtype=dtype, device=device)  # (b, h, t_q, t_k)
    bias = apply_score_mod(zeros, score_mod)
    varied = torch.linspace(-24, 24, zeros.numel(), dtype=torch.float64).view_as(zeros)
    varied = varied.flip(-1).to(dtype=dtype, device=zeros.device)  # a different score per pair
    tolerance = 16 * torch.finfo(dtype).eps
    for probe in (*(zeros + s for s in ADDITIVITY_PROBES), varied):
        added = apply_score_mod(probe, score_mod) - bias  # (b, h, t_q, t_k): s, if the rule adds
        wrong = (added - probe).abs() > tolerance * (1 + bias.abs() + probe.abs())
        if wrong.any():
            at = tuple(int(i) for i in wrong.nonzero()[0])
            raise ValueError(
                "score_mod must add a term that does not depend on the score, got "
                f"xi(s) - xi(0) = {added[at].item():.6g} for s = {probe[at].item():.6g} at "
                f"(b, h, i, j) = {at} (apply such a rule with apply_score_mod)")
    return bias if b is not None else bias[0]


def block_sparsity(
    mask_mod: MaskMod, t_q: int, t_k: int, block_size: int | tuple[int, int] = 128,
    b: int | None = None, h: int | None = None,
) -> Tensor:
    """What a block-sparse kernel does with each tile: 0 skip it (nothing visible), 1 compute it
    and mask inside (partly visible), 2 compute it without a mask (all visible).

    The tiles are (B_q, B_k) = ``block_size`` (one int for both). The sequences are padded to
    whole tiles, and padding counts as hidden, as in FlexAttention's ``create_block_mask``: a
    tile that overhangs the end is never full. The result holds the information of a
    ``BlockMask`` (its ``kv_num_blocks`` counts the partial tiles of each query block,
    ``full_kv_num_blocks`` the full ones).

    Args:
        mask_mod: the rule.
        t_q: number of queries.
        t_k: number of keys.
        block_size: B, or (B_q, B_k).
        b: batch rows to ask the rule about (None: row 0 only).
        h: heads to ask the rule about (None: head 0 only).

    Returns:
        The kinds (T_q, T_k), or (b or 1, h or 1, T_q, T_k) when b or h is given.

    Raises:
        ValueError: if a size is not an integer >= 0 or a block size not an integer >= 1.

    Examples:
        >>> block_sparsity(causal(), 8, 8, block_size=2)
        tensor([[1, 0, 0, 0],
                [2, 1, 0, 0],
                [2, 2, 1, 0],
                [2, 2, 2, 1]])
    """
    size = check_block_size(block_size)  # (2,) or (1, 2, 3) failed in the unpacking below
    if size is None:  # a kernel's default elsewhere; here the tiles must be named
        raise ValueError("block_size must be an integer >= 1 or a pair of them, got None")
    block_q, block_k = size if isinstance(size, tuple) else (size, size)
    b_rows, heads = 1 if b is None else b, 1 if h is None else h
    dense = to_dense(mask_mod, t_q, t_k, b_rows, heads)  # (b, h, t_q, t_k)
    n_q, n_k = -(-t_q // block_q), -(-t_k // block_k)  # T_q, T_k: ceil
    padded = dense.new_zeros(*dense.shape[:2], n_q * block_q, n_k * block_k)
    padded[..., :t_q, :t_k] = dense  # (b, h, T_q B_q, T_k B_k), False in the padding
    tiles = padded.view(*dense.shape[:2], n_q, block_q, n_k, block_k)
    visible = tiles.sum(dim=(3, 5))  # (b, h, T_q, T_k): visible pairs in each tile
    kinds = (visible > 0).long() + (visible == block_q * block_k).long()  # 0, 1 or 2
    return kinds[0, 0] if b is None and h is None else kinds


@overload
def dense_attention(
    query: Tensor, key: Tensor, value: Tensor, *, score_mod: ScoreMod | None = None,
    mask_mod: MaskMod | None = None, scale: float | None = None, return_lse: Literal[False] = False,
) -> Tensor: ...


@overload
def dense_attention(
    query: Tensor, key: Tensor, value: Tensor, *, score_mod: ScoreMod | None = None,
    mask_mod: MaskMod | None = None, scale: float | None = None, return_lse: Literal[True],
) -> tuple[Tensor, Tensor]: ...


@overload
def dense_attention(
    query: Tensor, key: Tensor, value: Tensor, *, score_mod: ScoreMod | None = None,
    mask_mod: MaskMod | None = None, scale: float | None = None, return_lse: bool = False,
) -> Tensor | tuple[Tensor, Tensor]: ...


@attention_kernel
def dense_attention(
    query: Tensor, key: Tensor, value: Tensor, *, score_mod: ScoreMod | None = None,
    mask_mod: MaskMod | None = None, scale: float | None = None, return_lse: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """The explicit computation that FlexAttention fuses: softmax(mod(Q Kᵀ · scale) | mask) V.

    Hidden scores are set to -inf after ``score_mod``; a query that sees no key gets 0 and
    log-sum-exp -inf, as FlexAttention gives it. Half-precision inputs are computed in float32.

    Args:
        query: (b, h, t_q, d_k).
        key: (b, h, t_k, d_k).
        value: (b, h, t_k, d_v).
        score_mod: a score rule applied to the scaled scores (None: none).
        mask_mod: a mask rule (None: every key visible).
        scale: multiplies the scores; defaults to 1/sqrt(d_k).
        return_lse: also return the log-sum-exp of each row's modified scores.

    Returns:
        Z (b, h, t_q, d_v); with ``return_lse``, (Z, lse) with lse (b, h, t_q).

    Raises:
        ValueError: if a tensor is not 4-d, query, key and value do not agree in dtype, device
            or shape (their b and h must broadcast), scale is not None or a finite number, a
            rule is not callable, mask_mod answers with numbers, not bools, or return_lse is
            not a bool.
        TypeError: flash-attn's keywords and older names (``causal``, ``softmax_scale``,
            ``window_size``, ``causal_alignment``), with the keyword this function takes.

    Examples:
        >>> q = torch.randn(1, 2, 4, 8)
        >>> out = dense_attention(q, q, q, mask_mod=causal())
        >>> sdpa = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
        >>> torch.allclose(out, sdpa, atol=1e-6)
        True
    """
    scale = check_scale(scale)
    check_flags(return_lse=return_lse)
    for name, x in (("query", query), ("key", key), ("value", value)):
        if isinstance(x, Tensor) and x.dim() != 4:
            raise ValueError(f"{name} must be (b, h, t, d), got shape {tuple(x.shape)}")
    check_qkv(query, key, value)
    check_batch_dims(("query", query), ("key", key), ("value", value))  # b and h broadcast
    acc = accumulation_dtype(query.dtype)
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    scores = query.to(acc) @ key.to(acc).transpose(-2, -1) * scale  # (b, h, t_q, t_k)
    if score_mod is not None:
        scores = apply_score_mod(scores, score_mod)
    if mask_mod is not None:
        b, h, t_q, t_k = scores.shape
        allowed = to_dense(mask_mod, t_q, t_k, b, h, device=scores.device)  # (b, h, t_q, t_k)
        scores = scores.masked_fill(~allowed, -math.inf)
    lse = torch.logsumexp(scores, dim=-1)  # (b, h, t_q); -inf for a row that sees nothing
    # The stable softmax, not exp(scores - lse): past |s| = 2^24 a float32 lse cannot hold
    # log t_k, and weights made from it would sum to up to t_k. A row that sees nothing gives 0
    # (its scores are replaced first, so that no nan reaches the gradients).
    no_key = (lse == -math.inf)[..., None]  # (b, h, t_q, 1)
    weights = torch.softmax(scores.masked_fill(no_key, 0.0), dim=-1).masked_fill(no_key, 0.0)
    out = (weights @ value.to(acc)).to(value.dtype)  # (b, h, t_q, d_v)
    return (out, lse) if return_lse else out
