"""Attention at inference time: grouped-query attention, sliding windows and attention sinks.

Notation (see CONTRIBUTING.md):
    b      batch size
    t      tokens of one call, its queries (t_q in chapter 10), which come after the
           ``cache.length`` tokens cached before the call; t_k keys attended to
    d_in   width of an input token vector, d_out width of the output
    h      query heads, h_kv key/value heads (h_kv divides h), G = h / h_kv queries per group
    d_h    width of one head, d_h = d_out / h
    w      sliding window: the token at position p sees positions p - w < j <= p
    n_sink attention sinks: the first n_sink tokens, which every later token also sees

A decoder generates one token at a time and keeps the keys and values of earlier tokens in a
cache (:mod:`attention.kv_cache`), of 2 · b · t_k · L · h_kv · d_h values for t_k cached tokens
and L layers (the book's equation (10.6)). Multi-query (h_kv = 1, Shazeer 2019) and grouped-query
attention (1 < h_kv < h, Ainslie et al. 2023) shrink it by h / h_kv: query head i uses key/value
head i // G. A sliding window of w tokens bounds it by w, whatever the length, and attention sinks
(StreamingLLM, Xiao et al. 2023) keep the first n_sink tokens visible beside the window.

The tokens of a call attend to every cached token and causally among themselves: the causal
mask of t queries against t_k = length + t keys, length = ``cache.length`` before the call, is
aligned bottom-right (query i, from 0, is at position length + i; the book's equation (10.5)).
"""

import torch
from torch import Tensor, nn
from torch.types import Device

from . import masks
from ._checks import (
    Alignment,
    Factory,
    autocast_off,
    check_alignment,
    check_cache,
    check_counts,
    check_dropout,
    check_flags,
    check_heads,
    check_input,
    check_sizes,
)
from .functional import causal_mask, scaled_dot_product_attention
from .kv_cache import Cache, KVCache, RollingKVCache, storage_dtype
from .multihead import MultiHeadAttention
from .positions import check_cache_rotary

__all__ = ["GroupedQueryAttention", "sink_window_mask"]


def window_visible(query_pos: Tensor, key_pos: Tensor, window: int, sinks: int) -> Tensor:
    """Bool (t_q, t_k): query at position i sees key j if j <= i and (i - w < j or j < n_sink),
    the rule :func:`attention.masks.sink_window` at these positions."""
    return masks.visible(masks.sink_window(window, sinks), query_pos, key_pos)  # (t_q, t_k)


def cached_visible(
    n: int, t: int, keys: Tensor, cache: Cache | None, window: int | None, sinks: int
) -> Tensor:
    """Bool (t, t_k): which of the keys (b, h_kv, t_k, d_h) that ``cache.append`` returned each of
    t new queries, after the ``n`` tokens cached before them, sees: causal, aligned bottom-right,
    or within a window (a rolling cache returns the visible keys only, and their positions say
    which)."""
    t_k = keys.shape[2]
    if window is None:
        return causal_mask(t, t_k, device=keys.device, alignment="bottom_right")  # (t, t_k)
    key_pos = (cache.key_positions if isinstance(cache, RollingKVCache)
               else torch.arange(t_k, device=keys.device))  # (t_k,)
    query_pos = torch.arange(n, n + t, device=keys.device)  # (t,)
    return window_visible(query_pos, key_pos.to(keys.device), window, sinks)  # (t, t_k)


def sink_window_mask(
    t_q: int, t_k: int, window: int, sinks: int = 0, device: Device = None,
    *, alignment: Alignment = "top_left",
) -> Tensor:
    """Bool mask (t_q, t_k) of a sliding window of ``window`` tokens plus ``sinks`` first tokens.

    Aligned like :func:`~attention.sliding_window_mask`: query i sits at position p = i
    (top-left, the default) or p = t_k - t_q + i (bottom-right, queries after a cache) and sees
    key j when j <= p and either p - window < j (the window, itself included) or j < sinks (the
    attention sinks of StreamingLLM). ``sinks=0`` is the plain sliding window.

    Args:
        t_q: number of queries: positions 0 .. t_q - 1 (top-left) or the last t_q positions
            (bottom-right).
        t_k: number of keys.
        window: w, the latest keys each query sees, itself included.
        sinks: n_sink, the first keys every query also sees.
        device: where to build the mask.
        alignment: ``"top_left"`` or ``"bottom_right"``.

    Returns:
        The mask (t_q, t_k), bool.

    Raises:
        ValueError: if window is not an integer >= 1, t_q, t_k or sinks is not an integer >= 0
            (t_q or t_k of 0 gives an empty mask, as in :func:`~attention.causal_mask`), or
            alignment is unknown.

    Examples:
        >>> sink_window_mask(2, 5, window=2, sinks=1, alignment="bottom_right")
        tensor([[ True, False,  True,  True, False],
                [ True, False, False,  True,  True]])
    """
    check_sizes(window=window)
    check_counts(t_q=t_q, t_k=t_k, sinks=sinks)
    check_alignment(alignment)
    offset = t_k - t_q if alignment == "bottom_right" else 0
    query_pos = torch.arange(offset, offset + t_q, device=device)  # (t_q,)
    key_pos = torch.arange(t_k, device=device)  # (t_k,)
    return window_visible(query_pos, key_pos, window, sinks)  # (t_q, t_k)


class GroupedQueryAttention(nn.Module):
    """Causal grouped-query self-attention, optionally within a sliding window, with a cache.

    h query heads share h_kv key/value heads: query head i uses key/value head i // (h / h_kv),
    as ``enable_gqa`` in PyTorch. h_kv = h is multi-head attention (:meth:`from_multihead`
    shows it equals :class:`~attention.MultiHeadAttention`), h_kv = 1 multi-query attention.
    ``window=w`` lets the token at position p see positions p - w < j <= p only, and
    ``sinks=n_sink`` (with a window) also the first n_sink positions, StreamingLLM's attention
    sinks (:func:`sink_window_mask`). The module has no position information of its own and no
    longest sequence. ``W_query`` maps d_in -> d_out, ``W_key`` and ``W_value`` d_in -> h_kv · d_h,
    ``out_proj`` d_out -> d_out.

    Args:
        d_in: width of an input token.
        d_out: width of the output, h heads of width d_h.
        num_heads: h.
        num_kv_heads: h_kv; must divide h.
        dropout: p_drop on the attention weights, in training mode.
        qkv_bias: give the projections a bias.
        window: w, an integer >= 1 (None: no window).
        sinks: n_sink, with a window only.
        device: where the parameters are created (torch's default when None).
        dtype: their dtype (torch's default when None).

    Raises:
        ValueError: if a size is not an integer >= 1, h_kv does not divide h, h does not divide
            d_out, dropout is outside [0, 1), qkv_bias is not a bool, or sinks is given without a
            window.

    Examples:
        >>> _ = torch.manual_seed(0)
        >>> gqa = GroupedQueryAttention(d_in=8, d_out=8, num_heads=4, num_kv_heads=2)
        >>> x = torch.randn(1, 5, 8)
        >>> cache = gqa.new_cache(batch_size=1, max_tokens=5)
        >>> prefill, step = gqa(x[:, :4], cache=cache), gqa(x[:, 4:], cache=cache)
        >>> torch.allclose(step, gqa(x)[:, 4:], atol=1e-6)
        True
        >>> cache.nbytes  # 2 · b · h_kv · max_tokens · d_h · 4 bytes
        160
    """

    def __init__(
        self, d_in: int, d_out: int, num_heads: int, num_kv_heads: int, dropout: float = 0.0,
        *, qkv_bias: bool = False, window: int | None = None, sinks: int = 0,
        device: Device = None, dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        check_sizes(d_in=d_in, d_out=d_out)
        check_heads(d_out, num_heads)
        check_sizes(num_kv_heads=num_kv_heads)
        if num_heads % num_kv_heads != 0:
            raise ValueError(
                f"num_heads must be divisible by num_kv_heads, got num_heads={num_heads} and "
                f"num_kv_heads={num_kv_heads}"
            )
        check_dropout(dropout)
        check_flags(qkv_bias=qkv_bias)
        if window is not None:
            check_sizes(window=window)
        check_counts(sinks=sinks)
        if sinks and window is None:
            raise ValueError(f"sinks={sinks} needs a window (sinks are kept beside it), got None")
        self.d_in, self.d_out, self.num_heads = d_in, d_out, num_heads
        self.num_kv_heads, self.d_h = num_kv_heads, d_out // num_heads
        self.window, self.sinks, self.dropout = window, sinks, dropout
        factory = Factory(device=device, dtype=dtype)
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias, **factory)
        self.W_key = nn.Linear(d_in, num_kv_heads * self.d_h, bias=qkv_bias, **factory)
        self.W_value = nn.Linear(d_in, num_kv_heads * self.d_h, bias=qkv_bias, **factory)
        self.out_proj = nn.Linear(d_out, d_out, **factory)

    def new_cache(self, batch_size: int, max_tokens: int) -> KVCache | RollingKVCache:
        """An empty cache on the module's device and dtype, for up to ``max_tokens`` tokens.

        Without a window: a :class:`KVCache` of 2 · b · h_kv · max_tokens · d_h values. With a
        window: a :class:`RollingKVCache` of 2 · b · h_kv · (n_sink + w) · d_h values, whatever
        max_tokens, which only bounds the positions. In autocast's dtype while autocast is on
        and the layer is not float64 (the keys come out in it).

        Raises:
            ValueError: if batch_size or max_tokens is not an integer >= 1.
        """
        check_sizes(max_tokens=max_tokens)  # a RollingKVCache would take None as no bound
        weight = self.W_key.weight
        dtype = storage_dtype(weight)  # the weights', or autocast's
        args = (batch_size, self.num_kv_heads)
        if self.window is None:
            return KVCache(*args, max_tokens, self.d_h, dtype=dtype, device=weight.device)
        return RollingKVCache(
            *args, self.window, self.d_h, max_tokens, dtype=dtype, device=weight.device,
            sinks=self.sinks,
        )

    def forward(self, x: Tensor, cache: Cache | None = None) -> Tensor:
        """Context vectors (b, t, d_out) of the tokens x (b, t, d_in).

        Without a cache: causal self-attention over x. With one: x holds the t newest tokens,
        their keys and values are appended to the cache, and each attends to every cached token
        and to the new ones up to itself (bottom-right causal; within the window and the
        sinks, if any). Under ``torch.autocast`` the scores stay float32, as in torch's SDPA.

        Raises:
            ValueError: if x is not (b, t, d_in), cache is not a KV cache (with a ``length``
                and an ``append``), a :class:`~attention.RollingKVCache` has another window
                or other sinks than the layer, or a
                :class:`~attention.StreamingKVCache` has a rotary (this module
                rotates no keys).
        """
        check_input(x, self.d_in, ranks=(3,))
        if cache is not None:
            check_cache(cache)
            check_cache_rotary(cache, None)  # the module rotates nothing
        if isinstance(cache, RollingKVCache) and (cache.window, cache.sinks) != (
            self.window, self.sinks
        ):
            raise ValueError(
                f"a RollingKVCache must have the module's window={self.window} and "
                f"sinks={self.sinks}, got window={cache.window} and sinks={cache.sinks}"
            )
        b, t, _ = x.shape
        h, h_kv, d_h = self.num_heads, self.num_kv_heads, self.d_h
        queries = self.W_query(x).view(b, t, h, d_h).transpose(1, 2)  # (b, h, t, d_h)
        keys = self.W_key(x).view(b, t, h_kv, d_h).transpose(1, 2)  # (b, h_kv, t, d_h)
        values = self.W_value(x).view(b, t, h_kv, d_h).transpose(1, 2)  # (b, h_kv, t, d_h)
        n = 0 if cache is None else cache.length  # position of x's first token
        if cache is not None:
            keys, values = cache.append(keys, values)  # (b, h_kv, t_k, d_h) each
        mask = cached_visible(n, t, keys, cache, self.window, self.sinks)  # (t, t_k)
        dropout_p = self.dropout if self.training else 0.0
        with autocast_off(x):  # which would run its float32 scores in float16 again (inf, nan)
            context = scaled_dot_product_attention(
                queries, keys, values, attn_mask=mask, dropout_p=dropout_p, enable_gqa=True
            )  # (b, h, t, d_h)
        context = context.transpose(1, 2).reshape(b, t, self.d_out)  # (b, t, d_out)
        return self.out_proj(context)  # (b, t, d_out)

    @classmethod
    def from_multihead(
        cls, mha: MultiHeadAttention, num_kv_heads: int | None = None, window: int | None = None
    ) -> "GroupedQueryAttention":
        """A grouped-query module made from ``mha``'s weights (Ainslie et al.'s conversion).

        Queries and the output projection are copied. Each group of G = h / h_kv key (and value)
        heads becomes one head, the mean of the group's projection weights and biases; with
        ``num_kv_heads`` = h (the default) nothing is averaged and the module computes exactly
        what ``mha`` computes. The attention dropout and the training mode are carried over; an
        ``mha`` with ``proj_dropout`` > 0 is refused (this module has none). Draws (and
        discards) a fresh random initialization first, advancing the global generator.

        Raises:
            ValueError: if mha is not the book's MultiHeadAttention or has proj_dropout > 0,
                num_kv_heads is not an integer >= 1 that divides mha's num_heads, or window is
                neither None nor an integer >= 1.
        """
        if not isinstance(mha, MultiHeadAttention):  # torch's has its own layout of weights
            raise ValueError(f"mha must be a MultiHeadAttention, got {type(mha).__name__}")
        h = mha.num_heads
        num_kv_heads = h if num_kv_heads is None else num_kv_heads
        if mha.proj_dropout.p != 0.0:
            raise ValueError(
                f"mha must have proj_dropout=0 (GroupedQueryAttention has none), got "
                f"{mha.proj_dropout.p}"
            )
        gqa = cls(
            mha.d_in, mha.d_out, h, num_kv_heads, mha.dropout.p,
            qkv_bias=mha.W_query.bias is not None, window=window,
        ).to(device=mha.W_query.weight.device, dtype=mha.W_query.weight.dtype)
        group, d_h = h // num_kv_heads, mha.d_h
        with torch.no_grad():
            for name in ("W_query", "out_proj"):
                getattr(gqa, name).load_state_dict(getattr(mha, name).state_dict())
            for name in ("W_key", "W_value"):
                pairs = zip(getattr(gqa, name).parameters(), getattr(mha, name).parameters())
                for param, source in pairs:  # weight (h · d_h, d_in), then bias (h · d_h,)
                    grouped = source.view(num_kv_heads, group, d_h, *source.shape[1:])
                    param.copy_(grouped.mean(dim=1).reshape(param.shape))  # (h_kv · d_h, ...)
        return gqa.train(mha.training)
