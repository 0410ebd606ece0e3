"""Multi-head latent attention (MLA, DeepSeek-V2): a cache of one small latent per token.

Notation (see CONTRIBUTING.md):
    b      batch size; t tokens of one call, after the cache's ``length`` tokens cached before
           it; t_k = length + t keys attended to
    d_in   width of an input token vector x, d_out width of the output
    h      heads, d_h = d_out / h the width of each head's content query, key and value
    d_c    ``kv_rank``: width of the latent c that keys and values are made from
    d_c'   ``q_rank``: width of the query latent c_Q (no query compression if None)
    d_h^R  ``rope_dim``: width of the rotary part of each query and of the one shared rotary key
    L      layers

DeepSeek-AI (2024a, section 2.1) write n_h for h, c^KV for c and h_t for x, with column vectors.
Per token, for each head (its own W_UK, W_UV, W_UQ and W_QR; the head's index is left off), with
row vectors as everywhere in the book:

    c^(j) = x^(j) W_DKV                      (d_c)     the only content that is cached
    k_C^(j) = c^(j) W_UK,  v^(j) = c^(j) W_UV  (d_h each)
    k_R^(j) = RoPE_j(x^(j) W_KR)             (d_h^R)   one rotary key shared by all heads, cached
    c_Q^(i) = x^(i) W_DQ (or x^(i) itself)    (d_c')
    q_C^(i) = c_Q^(i) W_UQ,  q_R^(i) = RoPE_i(c_Q^(i) W_QR)   (d_h and d_h^R)
    s_ij = [q_C^(i) ; q_R^(i)] · [k_C^(j) ; k_R^(j)] / sqrt(d_h + d_h^R)
    z^(i) = Σ_j softmax_j(s_ij) v^(j),   output = [z^(i) of heads 1 .. h] W_o

The expanded form computes k_C and v for every cached token. The absorbed form never does: the
content score q_C^(i) · (c^(j) W_UK) equals (q_C^(i) W_UKᵀ) · c^(j), so W_UK moves to the query
side, and Σ_j α_ij c^(j) W_UV = (Σ_j α_ij c^(j)) W_UV, so W_UV moves to the output side.
What is left is multi-query attention of h queries of width d_c + d_h^R against one key
[c^(j) ; k_R^(j)] and one value c^(j): the cache holds d_c + d_h^R numbers per token and layer,
against 2 h d_h for multi-head attention. The rotary key is kept apart because a rotation between
W_UQ and W_UK would depend on the query's and the key's positions and could not be absorbed.
DeepSeek-V2 also normalizes the latents (RMSNorm); this module, like the paper's section 2.1,
does not.
"""
import torch
from torch import Tensor, nn
from torch.types import Device

from ._checks import Factory, check_flags, check_heads, check_input, check_sizes
from .functional import causal_mask, scaled_dot_product_attention
from .kv_cache import check_room, check_tokens, storage_dtype, stored_tokens
from .positions import RotaryEmbedding

__all__ = ["LatentKVCache", "MultiHeadLatentAttention", "latent_cache_bytes"]


def latent_cache_bytes(
    batch_size: int, tokens: int, num_layers: int, kv_rank: int, rope_dim: int,
    bytes_per_value: int,
) -> int:
    """Bytes of an MLA cache: b · t · L · (d_c + d_h^R) · bytes_per_value.

    One latent of d_c numbers and one shared rotary key of d_h^R numbers per token and layer
    (DeepSeek-AI 2024a, table 1), to compare with :func:`~attention.kv_cache_bytes`.

    Args:
        batch_size: b.
        tokens: t, tokens cached per sequence.
        num_layers: L.
        kv_rank: d_c, width of the key–value latent.
        rope_dim: d_h^R, width of the shared rotary key.
        bytes_per_value: s, 2 in float16 and bfloat16, 4 in float32.

    Returns:
        The size of the cache in bytes.

    Raises:
        ValueError: if a size is not an integer >= 1.

    Examples:
        >>> latent_cache_bytes(1, 4096, 60, kv_rank=512, rope_dim=64, bytes_per_value=2)
        283115520
    """
    sizes = check_sizes(  # as ints: NumPy's np.int32 would wrap around past 2**31
        batch_size=batch_size, tokens=tokens, num_layers=num_layers, kv_rank=kv_rank,
        rope_dim=rope_dim, bytes_per_value=bytes_per_value,
    )
    batch_size, tokens, num_layers, kv_rank, rope_dim, bytes_per_value = sizes
    return batch_size * tokens * num_layers * (kv_rank + rope_dim) * bytes_per_value


class LatentKVCache:
    """Preallocated latents (b, max_tokens, d_c) and rotary keys (b, max_tokens, d_h^R) of a layer.

    ``append(latents, rope_keys)`` writes t new tokens after the ``length`` stored ones and
    returns views of every stored token (copies while grad mode is on, so that gradients
    reach earlier calls' tokens); more than ``max_tokens`` tokens is a ValueError. The storage
    starts zero-filled.

    Args:
        batch_size: b.
        max_tokens: the most tokens it holds.
        kv_rank: d_c, width of a latent.
        rope_dim: d_h^R, width of a rotary key.
        dtype: dtype of the storage (torch's default if None).
        device: device of the storage.

    Raises:
        ValueError: if a size is not an integer >= 1.

    Examples:
        >>> cache = LatentKVCache(batch_size=1, max_tokens=8, kv_rank=4, rope_dim=2)
        >>> latents, rope_keys = cache.append(torch.ones(1, 3, 4), torch.ones(1, 3, 2))
        >>> cache.length, latents.shape, rope_keys.shape
        (3, torch.Size([1, 3, 4]), torch.Size([1, 3, 2]))
    """

    def __init__(
        self, batch_size: int, max_tokens: int, kv_rank: int, rope_dim: int,
        dtype: torch.dtype | None = None, device: Device = None,
    ) -> None:
        check_sizes(
            batch_size=batch_size, max_tokens=max_tokens, kv_rank=kv_rank, rope_dim=rope_dim
        )
        self.max_tokens = max_tokens
        self.latents = torch.zeros(batch_size, max_tokens, kv_rank, dtype=dtype, device=device)
        self.rope_keys = torch.zeros(batch_size, max_tokens, rope_dim, dtype=dtype, device=device)
        self.length = 0

    @property
    def nbytes(self) -> int:
        """Bytes of the allocated latents and rotary keys (all max_tokens slots)."""
        return self.latents.nbytes + self.rope_keys.nbytes

    def append(self, latents: Tensor, rope_keys: Tensor) -> tuple[Tensor, Tensor]:
        """Store latents (b, t, d_c), rope_keys (b, t, d_h^R); return all, (b, t_k, ·) each.

        Raises:
            ValueError: if latents or rope_keys do not have the cache's shape, dtype and device, or the
                tokens overflow max_tokens.
        """
        b, _, d_c = self.latents.shape
        rope_dim = self.rope_keys.shape[2]
        check_tokens("(b, t, width)", self.latents.dtype, self.latents.device,
                     latents=(latents, (b, "t", d_c)), rope_keys=(rope_keys, (b, "t", rope_dim)))
        start, end = self.length, self.length + latents.shape[1]
        check_room(start, latents.shape[1], self.max_tokens)
        self.latents[:, start:end] = latents
        self.rope_keys[:, start:end] = rope_keys
        self.length = end
        # (b, t_k, d_c), (b, t_k, d_h^R): views, copies while grad mode is on
        latents, rope_keys = stored_tokens(self.latents[:, :end], self.rope_keys[:, :end])
        return latents, rope_keys

    def reset(self) -> None:
        """Forget every token (the storage is kept and overwritten by the next append)."""
        self.length = 0

    def to(
        self, device: Device = None, dtype: torch.dtype | None = None
    ) -> "LatentKVCache":
        """Move the latents and rotary keys to ``device`` and ``dtype``, in place; returns the
        cache."""
        self.latents = self.latents.to(device=device, dtype=dtype)
        self.rope_keys = self.rope_keys.to(device=device, dtype=dtype)
        return self


class MultiHeadLatentAttention(nn.Module):
    """Causal multi-head latent attention with decoupled rotary keys, and its cache.

    ``forward(x, cache=None, absorbed=False)`` is causal self-attention like
    :class:`~attention.GroupedQueryAttention`; ``absorbed=True`` computes the same function with
    W_UK folded into the queries and W_UV into the output (see the module docstring), attending
    over the cached latents directly. Positions: queries and the shared key are rotated by their
    position (length + i for token i of a call, from 0, after the cache's ``length`` tokens). No
    bias and no dropout.

    Args:
        d_in: width of the input tokens.
        d_out: width of the output, h heads of d_h = d_out / h.
        num_heads: h.
        kv_rank: d_c, width of the key–value latent.
        rope_dim: d_h^R, width of the rotary part of each query and of the shared rotary key; even.
        q_rank: d_c', width of the query latent; None projects queries from x directly.
        base: RoPE's base.
        device: where the parameters are created (torch's default when None).
        dtype: their dtype (torch's default when None).

    Raises:
        ValueError: if a size is not an integer >= 1, d_out is not a multiple of num_heads,
            rope_dim is odd, or base is not a finite number > 1.

    Examples:
        >>> _ = torch.manual_seed(0)
        >>> mla = MultiHeadLatentAttention(d_in=8, d_out=8, num_heads=2, kv_rank=4, rope_dim=2)
        >>> x = torch.randn(1, 5, 8)
        >>> torch.allclose(mla(x), mla(x, absorbed=True), atol=1e-6)
        True
    """

    def __init__(
        self, d_in: int, d_out: int, num_heads: int, kv_rank: int, rope_dim: int,
        *, q_rank: int | None = None, base: float = 10000.0,
        device: Device = None, dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        check_sizes(d_in=d_in, d_out=d_out, kv_rank=kv_rank, rope_dim=rope_dim)
        if rope_dim % 2:  # RoPE turns pairs of features (its own message would name d_h)
            raise ValueError(f"rope_dim must be even, got {rope_dim}")
        check_heads(d_out, num_heads)
        if q_rank is not None:
            check_sizes(q_rank=q_rank)
        self.d_in, self.d_out, self.num_heads, self.d_h = d_in, d_out, num_heads, d_out // num_heads
        self.kv_rank, self.rope_dim, self.q_rank = kv_rank, rope_dim, q_rank
        self.rotary = RotaryEmbedding(rope_dim, base, device=device)
        f = Factory(device=device, dtype=dtype)
        self.W_down_kv = nn.Linear(d_in, kv_rank, bias=False, **f)  # W_DKV: x -> c
        self.W_up_key = nn.Linear(kv_rank, d_out, bias=False, **f)  # W_UK: c -> h content keys
        self.W_up_value = nn.Linear(kv_rank, d_out, bias=False, **f)  # W_UV: c -> h values
        self.W_key_rope = nn.Linear(d_in, rope_dim, bias=False, **f)  # W_KR: x -> shared k_R
        self.W_down_query = None if q_rank is None else nn.Linear(d_in, q_rank, bias=False, **f)
        width = d_in if q_rank is None else q_rank
        self.W_up_query = nn.Linear(width, d_out, bias=False, **f)  # W_UQ: c_Q -> h content queries
        self.W_query_rope = nn.Linear(width, num_heads * rope_dim, bias=False, **f)  # W_QR
        self.out_proj = nn.Linear(d_out, d_out, bias=False, **f)  # W_o

    def new_cache(self, batch_size: int, max_tokens: int) -> LatentKVCache:
        """An empty :class:`LatentKVCache` on the module's device and dtype.

        It holds b · max_tokens · (d_c + d_h^R) values, whatever the number of heads; in
        autocast's dtype while autocast is on and the module is not float64 (the latents come
        out in it).

        Raises:
            ValueError: if batch_size or max_tokens is not an integer >= 1.
        """
        weight = self.W_down_kv.weight
        return LatentKVCache(batch_size, max_tokens, self.kv_rank, self.rope_dim,
                             dtype=storage_dtype(weight), device=weight.device)

    def forward(
        self, x: Tensor, cache: LatentKVCache | None = None, *, absorbed: bool = False
    ) -> Tensor:
        """Context vectors (b, t, d_out) of the tokens x (b, t, d_in), expanded or absorbed.

        With a cache, x holds the t newest tokens: their latents and rotary keys are appended
        and each attends to every cached token and to the new ones up to itself.

        Raises:
            ValueError: if x is not (b, t, d_in), cache is not a :class:`LatentKVCache`, the
                new tokens do not fit it (its batch size, dtype or max_tokens), or absorbed is not
                a bool.
        """
        check_input(x, self.d_in, ranks=(3,))
        # absorbed: before the cache takes the new tokens
        check_flags(absorbed=absorbed)
        if cache is not None and not isinstance(cache, LatentKVCache):
            raise ValueError(f"cache must be a LatentKVCache from new_cache(), got {cache!r}")
        b, t, _ = x.shape
        h, d_h, d_r = self.num_heads, self.d_h, self.rope_dim
        n = 0 if cache is None else cache.length  # position of x's first token
        latents = self.W_down_kv(x)  # (b, t, d_c)
        rope_keys = self.rotary(self.W_key_rope(x), start=n)  # (b, t, d_h^R)
        c_q = x if self.W_down_query is None else self.W_down_query(x)  # (b, t, d_c')
        q_content = self.W_up_query(c_q).view(b, t, h, d_h).transpose(1, 2)  # (b, h, t, d_h)
        q_rope = self.W_query_rope(c_q).view(b, t, h, d_r).transpose(1, 2)  # (b, h, t, d_h^R)
        q_rope = self.rotary(q_rope, start=n)
        if cache is not None:
            latents, rope_keys = cache.append(latents, rope_keys)  # (b, t_k, d_c), (b, t_k, d_h^R)
        mask = causal_mask(t, latents.shape[1], device=x.device, alignment="bottom_right")
        scale = (d_h + d_r) ** -0.5  # the scores have d_h + d_h^R terms, whatever the form
        attend = self._absorbed if absorbed else self._expanded
        context = attend(q_content, q_rope, latents, rope_keys, mask, scale)  # (b, h, t, d_h)
        return self.out_proj(context.transpose(1, 2).reshape(b, t, self.d_out))  # (b, t, d_out)

    def _expanded(
        self, q_content: Tensor, q_rope: Tensor, latents: Tensor, rope_keys: Tensor,
        mask: Tensor, scale: float,
    ) -> Tensor:
        """Multi-head attention over keys and values up-projected from every latent."""
        (b, h, _, d_h), t_k = q_content.shape, latents.shape[1]
        keys = self.W_up_key(latents).view(b, t_k, h, d_h).transpose(1, 2)  # (b, h, t_k, d_h)
        values = self.W_up_value(latents).view(b, t_k, h, d_h).transpose(1, 2)  # (b,h,t_k,d_h)
        shared = rope_keys[:, None].expand(b, h, t_k, self.rope_dim)  # (b, h, t_k, d_h^R)
        keys = torch.cat([keys, shared], dim=-1)  # (b, h, t_k, d_h + d_h^R)
        queries = torch.cat([q_content, q_rope], dim=-1)  # (b, h, t, d_h + d_h^R)
        return scaled_dot_product_attention(queries, keys, values, attn_mask=mask, scale=scale)

    def _absorbed(
        self, q_content: Tensor, q_rope: Tensor, latents: Tensor, rope_keys: Tensor,
        mask: Tensor, scale: float,
    ) -> Tensor:
        """Multi-query attention over the latents: W_UK on the query side, W_UV after."""
        h, d_h, d_c = self.num_heads, self.d_h, self.kv_rank
        w_uk = self.W_up_key.weight.view(h, d_h, d_c)  # each head's W_UKᵀ (nn.Linear: out, in)
        q_latent = q_content @ w_uk  # (b, h, t, d_c): q_C W_UKᵀ per head
        queries = torch.cat([q_latent, q_rope], dim=-1)  # (b, h, t, d_c + d_h^R)
        keys = torch.cat([latents, rope_keys], dim=-1)[:, None]  # (b, 1, t_k, d_c + d_h^R)
        context = scaled_dot_product_attention(
            queries, keys, latents[:, None], attn_mask=mask, scale=scale, enable_gqa=True
        )  # (b, h, t, d_c): Σ_j α_ij c^(j), one key/value head for all h queries
        w_uv = self.W_up_value.weight.view(h, d_h, d_c)  # each head's W_UVᵀ
        return context @ w_uv.transpose(1, 2)  # (b, h, t, d_h): (Σ_j α_ij c^(j)) W_UV
