"""Key/value caches: what a decoder keeps of earlier tokens, and how many bytes that is.

Notation (see CONTRIBUTING.md):
    b      batch size
    t      tokens per sequence: those cached, in the cache's size; in ``append``, those of one
           call, stored after the ``length`` tokens already cached
    t_k    keys that ``append`` returns: length + t, fewer when a window has dropped old ones
    h_kv   key/value heads, d_h the width of one head
    w      sliding window: the token at position p sees positions p - w < j <= p
    n_sink attention sinks: the first n_sink tokens, which every later token also sees

A decoder generates one token at a time. The keys and values of earlier tokens never change, so
they are stored once (the KV cache) instead of being recomputed at every step. Per model, the cache
holds

    2 · b · t · L · h_kv · d_h   values     (keys and values, each of L layers, every token)

which :func:`kv_cache_bytes` multiplies by the bytes of one value. A sliding window of w tokens
bounds it by w, whatever the length: :class:`RollingKVCache` keeps w slots, and n_sink more for
the first tokens when it keeps attention sinks (StreamingLLM, Xiao et al. 2023).
:class:`ModelKVCache` holds one cache per layer. The layers that read these caches are in
:mod:`attention.inference`; the paged cache of vLLM's PagedAttention (:mod:`attention.paged`)
stores many sequences in fixed-size blocks of one shared pool.
"""

from typing import Protocol

import torch
from torch import Tensor
from torch.types import Device

from ._checks import check_counts, check_sizes

__all__ = ["KVCache", "ModelKVCache", "RollingKVCache", "kv_cache_bytes"]


def kv_cache_bytes(
    batch_size: int, tokens: int, num_layers: int, num_kv_heads: int, d_h: int,
    bytes_per_value: int,
) -> int:
    """Bytes of a KV cache: 2 · b · t · L · h_kv · d_h · bytes_per_value.

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
    sizes = check_sizes(  # as ints: NumPy's np.int32 would wrap around past 2**31
        batch_size=batch_size, tokens=tokens, num_layers=num_layers, num_kv_heads=num_kv_heads,
        d_h=d_h, bytes_per_value=bytes_per_value,
    )
    batch_size, tokens, num_layers, num_kv_heads, d_h, bytes_per_value = sizes
    return 2 * batch_size * tokens * num_layers * num_kv_heads * d_h * bytes_per_value


def check_tokens(
    dims: str, dtype: torch.dtype, device: torch.device,
    **chunks: tuple[Tensor, tuple[int | str, ...]],
) -> None:
    """Require each named chunk of new tokens to have its expected shape, where ``"t"`` stands
    for any number of tokens, the same in every chunk, and the cache's dtype and device; ``dims``
    names the axes in the message."""
    for name, (tensor, expected) in chunks.items():
        if not isinstance(tensor, Tensor):
            raise ValueError(f"{name} must be a tensor {dims}, got {type(tensor).__name__}")
        shape = tuple(tensor.shape)
        if len(shape) != len(expected) or any(s != e for s, e in zip(shape, expected) if e != "t"):
            shown = ", ".join(map(str, expected))
            raise ValueError(f"{name} must have shape {dims} = ({shown}), got {shape}")
        if tensor.dtype != dtype:
            raise ValueError(f"{name} must have the cache's dtype {dtype}, got {tensor.dtype}")
        if tensor.device != device:  # a slice assignment would copy it over without a word
            raise ValueError(f"{name} must be on the cache's device {device}, got {tensor.device}")
    tokens = {name: tensor.shape[expected.index("t")] for name, (tensor, expected) in chunks.items()}
    if len(set(tokens.values())) > 1:
        raise ValueError(
            f"{' and '.join(tokens)} must hold the same number of tokens, got "
            f"{' and '.join(map(str, tokens.values()))}"
        )


def check_chunk(
    keys: Tensor, values: Tensor, expected: tuple[int, int, int], store: Tensor
) -> None:
    """Require keys and values (b, h_kv, t, d_h) of the cache's (b, h_kv, d_h), dtype and device."""
    b, h_kv, d_h = expected
    shape = (b, h_kv, "t", d_h)
    check_tokens("(b, h_kv, t, d_h)", store.dtype, store.device, keys=(keys, shape), values=(values, shape))


def check_room(length: int, t: int, max_tokens: int | None) -> None:
    """Require room for t more tokens after ``length`` (no bound when max_tokens is None)."""
    if max_tokens is not None and length + t > max_tokens:
        raise ValueError(
            f"the cache holds at most max_tokens={max_tokens} tokens, got {length + t} "
            f"({length} cached + {t} new)"
        )


def stored_tokens(*views: Tensor) -> list[Tensor]:
    """The views of a cache's storage that ``append`` returns, copied while autograd is on.

    The attention saves what ``append`` returns for its backward, and the next ``append`` writes
    into the same storage: autograd would then refuse that backward ("modified by an inplace
    operation"). It saves the keys for the queries' gradient even when the keys need none (only
    W_q trains), so a copy is made whenever grad mode is on. A copy keeps the gradient of every
    call, through the cache to the keys and values of earlier calls, as one call over all the
    tokens gives it; without autograd (decoding under ``torch.no_grad()``, as ``generate`` does)
    the views are returned as they are.
    """
    if torch.is_grad_enabled():
        return [view.clone() for view in views]
    return list(views)


def storage_dtype(weight: Tensor) -> torch.dtype:
    """The dtype of the keys that a layer with this projection ``weight`` makes: the weight's,
    or autocast's lower precision while autocast is on for the weight's device (its linear
    layers then give keys in that dtype, and a cache of the weight's dtype refused them).
    Autocast leaves float64 as it is, so a float64 layer's keys stay float64."""
    device_type = weight.device.type  # the meta device has no autocast to ask about
    if (weight.is_floating_point() and weight.dtype != torch.float64
            and torch.amp.is_autocast_available(device_type)
            and torch.is_autocast_enabled(device_type)):
        return torch.get_autocast_dtype(device_type)
    return weight.dtype


class Cache(Protocol):
    """What an attention layer needs of a cache: tokens so far, and appending new ones."""

    length: int

    def append(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]: ...


class KVCache:
    """Preallocated keys and values of one attention layer: (b, h_kv, max_tokens, d_h) each.

    ``append(keys, values)`` writes t new tokens after the ``length`` stored ones and returns
    views of every stored token, (b, h_kv, length, d_h); nothing is reallocated or copied (while
    grad mode is on, copies, so that gradients reach earlier calls' keys and values). More
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
        """Store keys, values (b, h_kv, t, d_h); return all stored ones, (b, h_kv, t_k, d_h).

        Raises:
            ValueError: if keys or values are not (b, h_kv, t, d_h) of the cache's dtype and
                device, or the tokens overflow max_tokens.
        """
        b, h_kv, _, d_h = self.keys.shape
        check_chunk(keys, values, (b, h_kv, d_h), self.keys)
        start, end = self.length, self.length + keys.shape[2]
        check_room(start, keys.shape[2], self.max_tokens)
        self.keys[:, :, start:end] = keys
        self.values[:, :, start:end] = values
        self.length = end
        # (b, h_kv, t_k, d_h) views, copies while grad mode is on
        keys, values = stored_tokens(self.keys[:, :, :end], self.values[:, :, :end])
        return keys, values

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
        check_counts(sinks=sinks)
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

    def kept_positions(self) -> Tensor:
        """The positions (k,) of the cached keys that the next token, at position ``length``,
        sees: the sinks cached so far and the last w - 1 tokens after them. ``append`` returns
        these k keys and then the t new ones, so a mask for the next call has k + t columns.

        Examples:
            >>> cache = RollingKVCache(1, 1, window=3, d_h=2, sinks=1)
            >>> _ = cache.append(torch.zeros(1, 1, 5, 2), torch.zeros(1, 1, 5, 2))
            >>> cache.kept_positions()  # the sink, then positions 3 and 4 for position 5
            tensor([0, 3, 4])
        """
        n, s, w, device = self.length, self.sinks, self.window, self.keys.device
        return torch.cat([
            torch.arange(min(n, s), device=device),  # the sinks cached so far
            torch.arange(min(n, max(s, n - (w - 1))), n, device=device),  # position n's window
        ])  # (k,)

    def append(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Store keys, values (b, h_kv, t, d_h); return the visible ones, (b, h_kv, t_k, d_h).

        Raises:
            ValueError: as :meth:`KVCache.append`, where it is the positions that may overflow
                max_tokens (the window keeps only the last w tokens).
        """
        b, h_kv, _, d_h = self.keys.shape
        check_chunk(keys, values, (b, h_kv, d_h), self.keys)
        n, t, s, w = self.length, keys.shape[2], self.sinks, self.window
        check_room(n, t, self.max_tokens)
        device = self.keys.device
        kept = self.kept_positions()  # (k,)
        slots = self._slots(kept)  # (k,)
        all_keys = torch.cat([self.keys[:, :, slots], keys], dim=2)  # (b, h_kv, k + t, d_h)
        all_values = torch.cat([self.values[:, :, slots], values], dim=2)
        new = torch.arange(n, n + t, device=device)  # (t,) positions of the new tokens
        # those a later token may still see, the sinks among them and the last w: ranges, not a
        # bool mask, whose True entries the meta device cannot count
        sink_end = max(n, min(n + t, s))  # the new sinks are positions n .. sink_end - 1
        stay = torch.cat([torch.arange(n, sink_end, device=device),
                          torch.arange(max(sink_end, n + t - w), n + t, device=device)])
        self.keys[:, :, self._slots(stay)] = keys[:, :, stay - n]
        self.values[:, :, self._slots(stay)] = values[:, :, stay - n]
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

    Raises:
        ValueError: if layers is not a list or tuple of at least one KVCache or RollingKVCache,
            holds one cache twice, or its layers differ in length, batch size or max_tokens.

    Examples:
        >>> cache = ModelKVCache([KVCache(1, 2, 16, 4) for _ in range(3)])
        >>> cache.length, cache.max_tokens, cache.nbytes
        (0, 16, 3072)
    """

    def __init__(self, layers: list[KVCache | RollingKVCache]) -> None:
        if not isinstance(layers, (list, tuple)):
            raise ValueError(f"layers must be a list of caches, got {type(layers).__name__}")
        if not layers:  # its length and size are its first layer's
            raise ValueError(f"layers must hold at least one cache, got {layers!r}")
        for i, cache in enumerate(layers):  # a PagedSequence has no max_tokens, reset or to of its own
            if not isinstance(cache, (KVCache, RollingKVCache)):
                raise ValueError(f"layers[{i}] must be a KVCache or a RollingKVCache, got {type(cache).__name__}")
        first_index: dict[int, int] = {}  # id of a cache -> the first layer that holds it
        for i, cache in enumerate(layers):  # [cache] * L: each layer would read the others' keys
            first = first_index.setdefault(id(cache), i)
            if first != i:
                raise ValueError(
                    f"layers[{first}] and layers[{i}] must be distinct caches (each layer appends "
                    f"its own keys), got the same {type(cache).__name__}"
                )
        # what every layer of one model shares: a layer that took tokens its successor refuses
        # would leave the layers at different lengths, and every later call wrong
        shared: dict[str, list[int | None]] = {
            "length": [c.length for c in layers], "batch size": [c.keys.shape[0] for c in layers],
            "max_tokens": [c.max_tokens for c in layers]}
        for name, found in shared.items():
            if any(value != found[0] for value in found):
                raise ValueError(f"layers must share one {name}, as a model's layers do, got {found}")
        self.layers = layers

    @property
    def length(self) -> int:
        """Tokens cached (the same in every layer): the position of the next token.

        Raises:
            ValueError: if the layers hold different numbers of tokens (one was appended to on
                its own): a model then has no one position for its next token.
        """
        lengths = [cache.length for cache in self.layers]
        if any(n != lengths[0] for n in lengths):
            raise ValueError(f"layers must share one length, as a model's layers do, got {lengths}")
        return lengths[0]

    @property
    def max_tokens(self) -> int | None:
        """Tokens each layer's cache can hold (None: rolling caches without a bound)."""
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
