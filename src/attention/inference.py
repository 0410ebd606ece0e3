"""Attention at inference time: key/value caches, grouped-query attention, sliding windows.

Notation (see CONTRIBUTING.md):
    b      batch size
    t      number of new tokens in one call; n tokens cached before it, t_k keys attended to
    d_in   width of an input token vector, d_out width of the output
    h      query heads, h_kv key/value heads (h_kv divides h), g = h / h_kv queries per group
    d_h    width of one head, d_h = d_out / h
    w      sliding window: the token at position p sees positions p - w < j <= p
    n_sink attention sinks: the first n_sink tokens, which every later token also sees

A decoder generates one token at a time. The keys and values of earlier tokens never change, so
they are stored once (the KV cache) instead of being recomputed at every step. Per model, the cache
holds

    2 · b · t · n_layers · h_kv · d_h   values     (keys and values, every layer, every token)

which :func:`kv_cache_bytes` multiplies by the bytes of one value. Multi-query (h_kv = 1, Shazeer
2019) and grouped-query attention (1 < h_kv < h, Ainslie et al. 2023) shrink it by h / h_kv: query
head i uses key/value head i // g. A sliding window of w tokens bounds it by w, whatever the
length: :class:`RollingKVCache` keeps w slots, and n_sink more for the first tokens when it
keeps attention sinks (StreamingLLM, Xiao et al. 2023). The paged cache of vLLM's PagedAttention
(:mod:`attention.paged`) stores many sequences in fixed-size blocks of one shared pool.

New tokens attend to every cached token and causally among themselves: the causal mask of t
queries against t_k = n + t keys is aligned bottom-right (query i is at position n + i).
"""

from typing import Protocol

import torch
from torch import Tensor, nn
from torch.types import Device

from . import masks
from ._checks import Alignment, check_alignment, check_dropout, check_heads, check_input, check_sizes
from .functional import causal_mask, scaled_dot_product_attention
from .multihead import MultiHeadAttention

__all__ = [
    "GroupedQueryAttention",
    "KVCache",
    "ModelKVCache",
    "RollingKVCache",
    "kv_cache_bytes",
    "sink_window_mask",
]


def kv_cache_bytes(
    batch_size: int, tokens: int, num_layers: int, num_kv_heads: int, d_h: int,
    bytes_per_value: int,
) -> int:
    """Bytes of a KV cache: 2 · b · t · n_layers · h_kv · d_h · bytes_per_value.

    The 2 counts keys and values; ``bytes_per_value`` is 4 for float32, 2 for float16 and
    bfloat16 (``dtype.itemsize`` in PyTorch).

    Args:
        batch_size: b.
        tokens: t, tokens cached per sequence.
        num_layers: L.
        num_kv_heads: h_kv.
        d_h: head width.
        bytes_per_value: s.

    Returns:
        The size of the cache in bytes.

    Raises:
        ValueError: if a size is not an integer >= 1.

    Examples:
        >>> kv_cache_bytes(1, 4096, 32, 32, 128, 2) / 2**30  # Llama 2 7B, 4096 tokens, GiB
        2.0
    """
    check_sizes(
        batch_size=batch_size, tokens=tokens, num_layers=num_layers, num_kv_heads=num_kv_heads,
        d_h=d_h, bytes_per_value=bytes_per_value,
    )
    return 2 * batch_size * tokens * num_layers * num_kv_heads * d_h * bytes_per_value


def check_chunk(
    keys: Tensor, values: Tensor, expected: tuple[int, int, int], store: Tensor
) -> None:
    """Require keys and values (b, h_kv, t, d_h) of the cache's (b, h_kv, d_h) and dtype."""
    for name, tensor in (("keys", keys), ("values", values)):
        b, h_kv, d_h = expected
        if tensor.dim() != 4 or (tensor.shape[0], tensor.shape[1], tensor.shape[3]) != expected:
            raise ValueError(
                f"{name} must have shape (b, h_kv, t, d_h) = ({b}, {h_kv}, t, {d_h}), "
                f"got {tuple(tensor.shape)}"
            )
        if tensor.dtype != store.dtype:
            raise ValueError(
                f"{name} must have the cache's dtype {store.dtype}, got {tensor.dtype}"
            )
    if keys.shape[2] != values.shape[2]:
        raise ValueError(
            f"keys and values must hold the same number of tokens, got {keys.shape[2]} and "
            f"{values.shape[2]}"
        )


def check_room(length: int, t: int, max_tokens: int | None) -> None:
    """Require room for t more tokens after ``length`` (no bound when max_tokens is None)."""
    if max_tokens is not None and length + t > max_tokens:
        raise ValueError(
            f"the cache holds at most max_tokens={max_tokens} tokens, got {length + t} "
            f"({length} cached + {t} new)"
        )


def window_visible(query_pos: Tensor, key_pos: Tensor, window: int, sinks: int) -> Tensor:
    """Bool (t_q, t_k): query at position i sees key j if j <= i and (i - w < j or j < n_sink),
    the rule :func:`attention.masks.sink_window` at these positions."""
    return masks.visible(masks.sink_window(window, sinks), query_pos, key_pos)  # (t_q, t_k)


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
        t_q: number of queries, the last t_q positions.
        t_k: number of keys.
        window: w, the latest keys each query sees, itself included.
        sinks: n_sink, the first keys every query also sees.
        device: where to build the mask.
        alignment: ``"top_left"`` or ``"bottom_right"``.

    Returns:
        The mask (t_q, t_k), bool.

    Raises:
        ValueError: if a size is not an integer >= 1, sinks is not an integer >= 0, or alignment
            is unknown.

    Examples:
        >>> sink_window_mask(2, 5, window=2, sinks=1, alignment="bottom_right")
        tensor([[ True, False,  True,  True, False],
                [ True, False, False,  True,  True]])
    """
    check_sizes(t_q=t_q, t_k=t_k, window=window)
    _check_sinks(sinks)
    check_alignment(alignment)
    offset = t_k - t_q if alignment == "bottom_right" else 0
    query_pos = torch.arange(offset, offset + t_q, device=device)  # (t_q,)
    key_pos = torch.arange(t_k, device=device)  # (t_k,)
    return window_visible(query_pos, key_pos, window, sinks)  # (t_q, t_k)


def _check_sinks(sinks: int) -> None:
    """Require a number of sink tokens: an integer >= 0."""
    if isinstance(sinks, bool) or not isinstance(sinks, int) or sinks < 0:
        raise ValueError(f"sinks must be an integer >= 0, got {sinks!r}")


class Cache(Protocol):
    """What an attention layer needs of a cache: tokens so far, and appending new ones."""

    length: int

    def append(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]: ...


class KVCache:
    """Preallocated keys and values of one attention layer: (b, h_kv, max_tokens, d_h) each.

    ``append(keys, values)`` writes t new tokens after the ``length`` stored ones and returns
    views of every stored token, (b, h_kv, length, d_h); nothing is reallocated or copied. More
    than ``max_tokens`` tokens is a ValueError. The storage starts zero-filled.

    Args:
        batch_size: b.
        num_kv_heads: h_kv.
        max_tokens: the most tokens it holds.
        d_h: head width.
        dtype: dtype of the storage (torch's default if None).
        device: device of the storage.

    Raises:
        ValueError: if a size is not an integer >= 1.

    Examples:
        >>> cache = KVCache(batch_size=1, num_kv_heads=2, max_tokens=8, d_h=4)
        >>> keys, values = cache.append(torch.ones(1, 2, 3, 4), torch.ones(1, 2, 3, 4))
        >>> keys, values = cache.append(torch.ones(1, 2, 1, 4), torch.ones(1, 2, 1, 4))
        >>> cache.length, keys.shape, cache.nbytes
        (4, torch.Size([1, 2, 4, 4]), 512)
    """

    def __init__(
        self, batch_size: int, num_kv_heads: int, max_tokens: int, d_h: int,
        dtype: torch.dtype | None = None, device: Device = None,
    ) -> None:
        check_sizes(
            batch_size=batch_size, num_kv_heads=num_kv_heads, max_tokens=max_tokens, d_h=d_h
        )
        self.max_tokens = max_tokens
        shape = (batch_size, num_kv_heads, max_tokens, d_h)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)  # (b, h_kv, max_tokens, d_h)
        self.values = torch.zeros(shape, dtype=dtype, device=device)  # (b, h_kv, max_tokens, d_h)
        self.length = 0

    @property
    def nbytes(self) -> int:
        """Bytes of the allocated keys and values (all max_tokens slots, used or not)."""
        return self.keys.nbytes + self.values.nbytes

    def append(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Store keys, values (b, h_kv, t, d_h); return all stored ones, (b, h_kv, n + t, d_h)."""
        b, h_kv, _, d_h = self.keys.shape
        check_chunk(keys, values, (b, h_kv, d_h), self.keys)
        start, end = self.length, self.length + keys.shape[2]
        check_room(start, keys.shape[2], self.max_tokens)
        self.keys[:, :, start:end] = keys
        self.values[:, :, start:end] = values
        self.length = end
        return self.keys[:, :, :end], self.values[:, :, :end]  # (b, h_kv, n + t, d_h) views

    def reset(self) -> None:
        """Forget every token (the storage is kept and overwritten by the next append)."""
        self.length = 0

    def to(
        self, device: Device = None, dtype: torch.dtype | None = None
    ) -> "KVCache":
        """Move the storage (and the cached tokens) to ``device`` and ``dtype``, in place, as a
        module's ``.to()`` does; returns the cache."""
        self.keys = self.keys.to(device=device, dtype=dtype)
        self.values = self.values.to(device=device, dtype=dtype)
        return self


class RollingKVCache:
    """A rolling buffer of the last ``window`` tokens (Mistral's cache), and optional sinks.

    The token at position p >= n_sink is stored in slot n_sink + (p - n_sink) mod w, so it
    overwrites the token w places before it; with ``sinks=n_sink`` > 0 the first n_sink tokens
    keep slots of their own and are never overwritten (StreamingLLM's attention sinks).
    ``append(keys, values)`` of t new tokens returns, in order of position, the cached sinks,
    the last w - 1 cached tokens after them, and the t new ones: every key that a new token at
    position p can see, j <= p with p - w < j or j < n_sink. ``key_positions`` holds their
    positions, so that :func:`sink_window_mask` (or ``sliding_window_mask(t, t_k, w,
    alignment="bottom_right")`` without sinks) over them gives the same attention as over the
    whole sequence. ``length`` counts every token ever appended (the next position);
    ``max_tokens``, if given, bounds that count (positions), not the memory, which is
    n_sink + w zero-filled slots of keys and values.

    Args:
        batch_size: b.
        num_kv_heads: h_kv.
        window: w.
        d_h: head width.
        max_tokens: the most positions (None: no bound).
        dtype: dtype of the storage (torch's default if None).
        device: device of the storage.
        sinks: n_sink.

    Raises:
        ValueError: if a size is not an integer >= 1, sinks is not an integer >= 0, or
            max_tokens is not None or an integer >= 1.

    Examples:
        >>> cache = RollingKVCache(1, 1, window=3, d_h=2, sinks=1)
        >>> for p in range(6):  # keys hold their position
        ...     k = torch.full((1, 1, 1, 2), float(p))
        ...     keys, values = cache.append(k, k)
        >>> cache.key_positions, keys[0, 0, :, 0]
        (tensor([0, 3, 4, 5]), tensor([0., 3., 4., 5.]))
    """

    def __init__(
        self, batch_size: int, num_kv_heads: int, window: int, d_h: int,
        max_tokens: int | None = None, dtype: torch.dtype | None = None,
        device: Device = None, sinks: int = 0,
    ) -> None:
        check_sizes(batch_size=batch_size, num_kv_heads=num_kv_heads, window=window, d_h=d_h)
        _check_sinks(sinks)
        if max_tokens is not None:
            check_sizes(max_tokens=max_tokens)
        self.window, self.sinks, self.max_tokens = window, sinks, max_tokens
        shape = (batch_size, num_kv_heads, sinks + window, d_h)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)  # (b, h_kv, n_sink + w, d_h)
        self.values = torch.zeros(shape, dtype=dtype, device=device)  # (b, h_kv, n_sink + w, d_h)
        self.key_positions = torch.zeros(0, dtype=torch.long, device=device)  # (t_k,)
        self.length = 0

    @property
    def nbytes(self) -> int:
        """Bytes of the n_sink + w slots of keys and values."""
        return self.keys.nbytes + self.values.nbytes

    def _slots(self, positions: Tensor) -> Tensor:
        """The slot of each position: its own for a sink, n_sink + (p - n_sink) mod w after."""
        s, w = self.sinks, self.window
        return torch.where(positions < s, positions, s + (positions - s) % w)

    def append(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Store keys, values (b, h_kv, t, d_h); return the visible ones, (b, h_kv, t_k, d_h)."""
        b, h_kv, _, d_h = self.keys.shape
        check_chunk(keys, values, (b, h_kv, d_h), self.keys)
        n, t, s, w = self.length, keys.shape[2], self.sinks, self.window
        check_room(n, t, self.max_tokens)
        device = self.keys.device
        kept = torch.cat([
            torch.arange(min(n, s), device=device),  # the sinks cached so far
            torch.arange(min(n, max(s, n - (w - 1))), n, device=device),  # position n's window
        ])  # (k,) positions
        slots = self._slots(kept)  # (k,)
        all_keys = torch.cat([self.keys[:, :, slots], keys], dim=2)  # (b, h_kv, k + t, d_h)
        all_values = torch.cat([self.values[:, :, slots], values], dim=2)
        new = torch.arange(n, n + t, device=device)  # (t,) positions of the new tokens
        stay = (new < s) | (new >= n + t - w)  # those a later token may still see
        self.keys[:, :, self._slots(new[stay])] = keys[:, :, stay]
        self.values[:, :, self._slots(new[stay])] = values[:, :, stay]
        self.key_positions = torch.cat([kept, new])  # (k + t,)
        self.length = n + t
        return all_keys, all_values

    def reset(self) -> None:
        """Forget every token; positions start again at 0."""
        self.length = 0
        self.key_positions = self.key_positions[:0]

    def to(
        self, device: Device = None, dtype: torch.dtype | None = None
    ) -> "RollingKVCache":
        """Move the slots (and the positions) to ``device`` and ``dtype``, in place; returns
        the cache."""
        self.keys = self.keys.to(device=device, dtype=dtype)
        self.values = self.values.to(device=device, dtype=dtype)
        self.key_positions = self.key_positions.to(device=device)
        return self


class ModelKVCache:
    """One cache per layer of a model, with the model's totals.

    Args:
        layers: the caches of the layers, in order.

    Examples:
        >>> cache = ModelKVCache([KVCache(1, 2, 16, 4) for _ in range(3)])
        >>> cache.length, cache.max_tokens, cache.nbytes
        (0, 16, 3072)
    """

    def __init__(self, layers: list[KVCache]) -> None:
        self.layers = layers

    @property
    def length(self) -> int:
        """Tokens cached (the same in every layer): the position of the next token."""
        return self.layers[0].length

    @property
    def max_tokens(self) -> int:
        """Tokens each layer's cache can hold."""
        return self.layers[0].max_tokens

    @property
    def nbytes(self) -> int:
        """Bytes of every layer's keys and values."""
        return sum(cache.nbytes for cache in self.layers)

    def reset(self) -> None:
        """Forget every token of every layer."""
        for cache in self.layers:
            cache.reset()

    def to(
        self, device: Device = None, dtype: torch.dtype | None = None
    ) -> "ModelKVCache":
        """Move every layer's cache to ``device`` and ``dtype``, in place; returns the cache."""
        for cache in self.layers:
            cache.to(device=device, dtype=dtype)
        return self


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
            d_out, dropout is outside [0, 1), or sinks is given without a window.

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
        if window is not None:
            check_sizes(window=window)
        _check_sinks(sinks)
        if sinks and window is None:
            raise ValueError(f"sinks={sinks} needs a window (sinks are kept beside it), got None")
        self.d_in, self.d_out, self.num_heads = d_in, d_out, num_heads
        self.num_kv_heads, self.d_h = num_kv_heads, d_out // num_heads
        self.window, self.sinks, self.dropout = window, sinks, dropout
        factory = {"device": device, "dtype": dtype}
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias, **factory)
        self.W_key = nn.Linear(d_in, num_kv_heads * self.d_h, bias=qkv_bias, **factory)
        self.W_value = nn.Linear(d_in, num_kv_heads * self.d_h, bias=qkv_bias, **factory)
        self.out_proj = nn.Linear(d_out, d_out, **factory)

    def new_cache(self, batch_size: int, max_tokens: int) -> KVCache | RollingKVCache:
        """An empty cache on the module's device and dtype, for up to ``max_tokens`` tokens.

        Without a window: a :class:`KVCache` of 2 · b · h_kv · max_tokens · d_h values. With a
        window: a :class:`RollingKVCache` of 2 · b · h_kv · (n_sink + w) · d_h values, whatever
        max_tokens, which only bounds the positions.
        """
        weight = self.W_key.weight
        args = (batch_size, self.num_kv_heads)
        if self.window is None:
            return KVCache(*args, max_tokens, self.d_h, dtype=weight.dtype, device=weight.device)
        return RollingKVCache(
            *args, self.window, self.d_h, max_tokens, dtype=weight.dtype, device=weight.device,
            sinks=self.sinks,
        )

    def forward(self, x: Tensor, cache: Cache | None = None) -> Tensor:
        """Context vectors (b, t, d_out) of the tokens x (b, t, d_in).

        Without a cache: causal self-attention over x. With one: x holds the t newest tokens,
        their keys and values are appended to the cache, and each attends to every cached token
        and to the new ones up to itself (bottom-right causal; within the window and the
        sinks, if any).
        """
        check_input(x, self.d_in, ranks=(3,))
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
        t_k = keys.shape[2]
        if self.window is None:
            mask = causal_mask(t, t_k, device=x.device, alignment="bottom_right")  # (t, t_k)
        else:  # a rolling cache returns the visible keys only: their positions say which
            key_pos = (cache.key_positions if isinstance(cache, RollingKVCache)
                       else torch.arange(t_k, device=x.device))  # (t_k,)
            query_pos = torch.arange(n, n + t, device=x.device)  # (t,)
            mask = window_visible(query_pos, key_pos, self.window, self.sinks)  # (t, t_k)
        dropout_p = self.dropout if self.training else 0.0
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

        Queries and the output projection are copied. Each group of g = h / h_kv key (and value)
        heads becomes one head, the mean of the group's projection weights and biases; with
        ``num_kv_heads`` = h (the default) nothing is averaged and the module computes exactly
        what ``mha`` computes. The attention dropout and the training mode are carried over; an
        ``mha`` with ``proj_dropout`` > 0 is refused (this module has none). Draws (and
        discards) a fresh random initialization first, advancing the global generator.
        """
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
