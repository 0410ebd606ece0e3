"""StreamingLLM: a bounded KV cache that keeps attention sinks, with positions within the cache.

Notation (see CONTRIBUTING.md):
    b      batch size; h_kv key/value heads of width d_h
    w      window: the newest w tokens, the new one included
    n_sink attention sinks: the first n_sink tokens of the stream, never evicted
    i      position of the new token in the text; t_k keys in the cache when it attends

Xiao et al. (2023) keep the first n_sink tokens and a window of recent ones, and give every
cached token its position *within the cache*: keys 0 .. t_k - 1 and the new token t_k - 1,
whatever its position i in the text (their section 3.2; their code caches keys before the
rotation and rotates all of them by their index in the cache at every step). With rotary
positions a score depends only on the difference of the two positions (RoPE's relative
property). The window is contiguous and ends at the new token, so each of its keys is as far
from the new token in the cache as in the text; only the sinks move, from i - j to t_k - 1 - j.
:class:`StreamingKVCache` therefore stores keys as the model rotates them, by their position in
the text, and hands the sinks back rotated by a further

    δ = i - (t_k - 1) >= 0

which gives exactly the scores of StreamingLLM's re-rotation, at the cost of rotating n_sink
keys instead of all t_k. Before the first eviction δ = 0 and nothing changes.
"""

from collections.abc import Iterable
from typing import cast

import torch
from torch import Tensor
from torch.types import Device

from .kv_cache import ModelKVCache, RollingKVCache, check_chunk, storage_dtype
from .positions import RotaryEmbedding, check_rotary
from .rope_scaling import DynamicNTKScaling
from .transformer import TinyTransformer, TransformerBlock

__all__ = ["StreamingKVCache", "streaming_cache"]


class StreamingKVCache(RollingKVCache):
    """A :class:`~attention.RollingKVCache` with sinks whose keys sit at positions in the cache.

    Keys arrive rotated by their position in the text (``rotary`` rotated them, as the attention
    of a :class:`~attention.TransformerBlock` does before it appends). ``append`` returns the sinks,
    the window and the new keys as the rolling cache does, the sinks rotated by δ more (see the
    module docstring), so that a query rotated by its position i in the text scores every key at
    its distance within the cache. Once a token has been evicted the queries of one call would
    each need their own δ, so tokens must then come one at a time. ``rotary=None`` (a model
    without rotary positions) leaves the keys as they are. The cache has n_sink + w slots of keys
    and values (b, h_kv, n_sink + w, d_h) and no bound on positions.

    Args:
        batch_size: b.
        num_kv_heads: h_kv, key/value heads.
        window: w, the newest tokens kept (the new one included).
        d_h: width of one head.
        sinks: n_sink, the first tokens of the stream, never evicted.
        rotary: the rotary embedding the keys were rotated with (None: no rotary positions).
        dtype: dtype of the cache (torch's default if None).
        device: device of the cache.

    Raises:
        ValueError: if a size is out of range, or rotary is neither None nor a
            RotaryEmbedding of width d_h.

    Examples:
        >>> cache = StreamingKVCache(1, 1, window=2, d_h=2, sinks=1, rotary=RotaryEmbedding(2))
        >>> for i in range(5):
        ...     keys, values = cache.append(torch.ones(1, 1, 1, 2), torch.ones(1, 1, 1, 2))
        >>> cache.length, keys.shape
        (5, torch.Size([1, 1, 3, 2]))
    """

    def __init__(
        self, batch_size: int, num_kv_heads: int, window: int, d_h: int, sinks: int,
        rotary: RotaryEmbedding | None = None, dtype: torch.dtype | None = None,
        device: Device = None,
    ) -> None:
        super().__init__(batch_size, num_kv_heads, window, d_h, None, dtype, device, sinks=sinks)
        check_rotary(rotary, d_h, "keys")
        if rotary is not None and isinstance(rotary.scaling, DynamicNTKScaling):
            raise ValueError(
                "rotary must have fixed frequencies: with DynamicNTKScaling they change with the "
                "length, and keys cached after rotation cannot be turned to the new ones"
            )
        self.rotary = rotary

    def append(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Store keys, values (b, h_kv, t, d_h); return the cache's, (b, h_kv, t_k, d_h) each.

        Raises:
            ValueError: if keys or values are not (b, h_kv, t, d_h) of the cache's dtype and
                device, or a chunk of t > 1 tokens overflows the n_sink + w slots.
        """
        b, h_kv, _, d_h = self.keys.shape
        check_chunk(keys, values, (b, h_kv, d_h), self.keys)
        n, t = self.length, keys.shape[2]
        if t > 1 and n + t > self.sinks + self.window:
            raise ValueError(
                f"once tokens are evicted (after n_sink + w = {self.sinks + self.window} tokens) "
                f"they must come one at a time, got {t} tokens after {n}"
            )
        all_keys, all_values = super().append(keys, values)  # (b, h_kv, t_k, d_h) each
        shift = n + t - all_keys.shape[2]  # δ = i - (t_k - 1) for the last new token i
        if self.rotary is None or shift == 0:
            return all_keys, all_values
        # the sinks come first, all of them cached (never evicted): a count, not a sum over a
        # bool mask, which the meta device cannot read
        k = min(self.length, self.sinks)
        sinks = self.rotary.shift(all_keys[:, :, :k, None], shift)  # (b, h_kv, k, 1, d_h)
        return torch.cat([sinks[:, :, :, 0], all_keys[:, :, k:]], dim=2), all_values


def streaming_cache(
    model: TinyTransformer, batch_size: int, window: int, sinks: int = 0
) -> ModelKVCache:
    """One :class:`StreamingKVCache` per layer of ``model``, for ``model(idx, cache=cache)``.

    Feed the stream one token at a time (or a first chunk of at most n_sink + w tokens): each
    layer then keeps n_sink + w keys and values whatever the length of the stream, and attends
    as StreamingLLM does. Only rotary positions, or none, can be moved into the cache: a model
    with learned, sinusoidal or ALiBi positions is refused.

    Args:
        model: the model the cache is for.
        batch_size: b.
        window: w, the newest tokens kept per layer.
        sinks: n_sink, the first tokens kept per layer.

    Returns:
        The per-layer caches, on the model's device and dtype (autocast's, while autocast is
        on and the model is not float64).

    Raises:
        ValueError: if model is not a TinyTransformer, its positions are learned, sinusoidal or
            ALiBi, window is not an integer >= 1, or sinks is not an integer >= 0.

    Examples:
        >>> model = TinyTransformer(8, 8, 2, 1, context_length=4, positions="rope")
        >>> cache = streaming_cache(model, batch_size=1, window=3, sinks=1)
        >>> for token in range(6):  # longer than the window and the context length
        ...     logits = model(torch.tensor([[token]]), cache=cache)
        >>> cache.length, logits.shape
        (6, torch.Size([1, 1, 8]))
    """
    if not isinstance(model, TinyTransformer):
        raise ValueError(f"model must be a TinyTransformer, got {type(model).__name__}")
    if model.positions not in ("rope", None):
        raise ValueError(
            f"model must use positions='rope' or None (positions within the cache), got "
            f"{model.positions!r}"
        )
    weight = model.lm_head.weight
    return ModelKVCache([
        StreamingKVCache(batch_size, block.num_heads, window, block.d_h, sinks, block.attn.rotary,
                         dtype=storage_dtype(weight), device=weight.device)
        for block in cast(Iterable[TransformerBlock], model.blocks)  # torch types them Module
    ])
