"""Sparsity the model chooses: attention over the keys that scores select, as mask programs.

Notation (see CONTRIBUTING.md):
    b      batch size, h heads, t_q queries, t_k keys (t_q = t_k = t in self-attention)
    i, j   a query's and a key's index, counted from 0; query i sits at position t_k - t_q + i
    B      ``block_size``: keys in a block, T_k = t_k / B key blocks
    k_top  ``top_k``: keys (or key blocks) each query keeps
    h_I    ``index_heads``, d_I ``index_dim``: heads and width of the lightning indexer

A selection is a boolean tensor computed from scores, wrapped as a mask rule ``mask_mod(b, h,
q_idx, kv_idx)`` (chapter 11): the same rule gives the dense mask (``attention.masks.to_dense``),
the explicit attention (``attention.masks.dense_attention``) and FlexAttention's ``BlockMask``.
Every selection here is made *after* the causal mask, so a query never selects a later key, and
a query with fewer than k visible keys keeps them all: ``torch.topk`` over the t_k keys, with k
clamped to t_k, as transformers' DeepSeek-V3.2 indexer does. Ties go as ``torch.topk`` breaks them.
For t_q != t_k the causal mask is aligned bottom-right, as for a query block at the end of a
cache: query i sees keys j <= i + t_k - t_q (torch's ``is_causal`` aligns it top-left).

Three selections of 2025 models:

    DSA   (DeepSeek-AI, 2025)  a lightning indexer scores every earlier token,
          I_ij = Σ_l η_il ReLU(q_il · k_j / sqrt(d_I)) / sqrt(h_I); query i keeps its top k tokens
    MoBA  (Lu et al., 2025)    query i scores each key block by q_i · mean(K_block) and keeps its
          top k blocks, its own block always among them
    NSA   (Yuan et al., 2025)  compressed blocks, selected blocks (ranked by the compressed
          branch's weights; NSA always keeps the first and two local blocks, this module the
          first and the own) and a sliding window, mixed by gates in [0, 1]
"""

import math

import torch
from torch import Tensor, nn
from torch.types import Device

from ._checks import (
    Factory,
    accumulation_dtype,
    attention_kernel,
    autocast_as_sdpa,
    check_batch_dims,
    check_flags,
    check_input,
    check_qkv,
    check_scale,
    check_sizes,
    renamed,
    shape_or_type,
)
from .functional import softmax
from .kv_cache import check_room, stored_tokens
from .latent import LatentKVCache
from .masks import MaskMod, and_masks, dense_attention, sliding_window, to_dense
from .masks import causal as causal_rule
from .positions import RotaryEmbedding
from .rope_scaling import RopeScaling

__all__ = [
    "IndexedLatentKVCache",
    "LightningIndexer",
    "block_topk_mask",
    "dsa_attention",
    "dsa_flops",
    "moba_attention",
    "moba_mask",
    "nsa_attention",
    "nsa_mask",
    "topk_mask",
]


def _check_scores(name: str, scores: Tensor) -> None:
    """Require a floating (t_q, t_k) or (b, h, t_q, t_k) tensor."""
    if not isinstance(scores, Tensor) or scores.dim() not in (2, 4) or not (
        scores.is_floating_point()
    ):
        got = (tuple(scores.shape), scores.dtype) if isinstance(scores, Tensor) else scores
        raise ValueError(f"{name} must be a floating (t_q, t_k) or (b, h, t_q, t_k) tensor, "
                         f"got {got!r}")


def _visible(t_q: int, t_k: int, device: torch.device) -> Tensor:
    """Chapter 11's causal mask (t_q, t_k), bottom-right: query i sits at t_k - t_q + i."""
    return to_dense(causal_rule("bottom_right", t_q, t_k), t_q, t_k, device=device)


def _selection_rule(selected: Tensor, block_size: int = 1) -> MaskMod:
    """The mask rule of a selection (…, t_q, t_k / block_size); size-1 b or h broadcast."""
    if selected.dim() == 2:

        def chosen(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            return selected[q_idx, kv_idx // block_size]

        return chosen
    rows, heads = selected.shape[:2]

    def chosen_bh(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        # a size of 1 broadcasts; a larger one is indexed as it is, so that a selection of fewer
        # sequences or heads than asked for fails (to_dense: ValueError) where b % rows wrapped
        return selected[b if rows > 1 else b * 0, h if heads > 1 else h * 0, q_idx,
                        kv_idx // block_size]

    return chosen_bh


def _rankable(scores: Tensor, allowed: Tensor, name: str) -> Tensor:
    """scores with the hidden ones -inf and an allowed -inf raised to the lowest finite value:
    every allowed key then ranks above every hidden one, so torch.topk cannot fill a row's k
    places with hidden keys while an allowed key scoring -inf, tied with them, is left out.

    An allowed NaN is refused: torch.topk ranks NaN above every number, so a query would keep a
    key whose score is undefined. A hidden NaN is never ranked and passes."""
    nan = scores.isnan() & allowed
    if not scores.is_meta and nan.any():  # a device sync, once per selection (meta: no values)
        at = tuple(nan.nonzero()[0].tolist())
        raise ValueError(f"{name} must be numbers where a query ranks them, not NaN (torch.topk "
                         f"ranks NaN first), got NaN at index {at}")
    lowest = torch.finfo(scores.dtype).min
    return scores.masked_fill(scores == -math.inf, lowest).masked_fill(~allowed, -math.inf)


def _top(scores: Tensor, k: int, allowed: Tensor, name: str) -> Tensor:
    """Boolean selection of the k highest allowed scores per row (all allowed, if fewer)."""
    masked = _rankable(scores, allowed, name)
    index = masked.topk(min(k, scores.shape[-1]), dim=-1).indices  # (…, t_q, k)
    return torch.zeros_like(allowed).expand_as(scores).scatter(-1, index, True) & allowed


@renamed(causal="is_causal")
def topk_mask(scores: Tensor, top_k: int, *, is_causal: bool = True) -> MaskMod:
    """Mask rule of the ``top_k`` highest scores of each query, chosen among its visible keys.

    With ``is_causal`` the later keys are hidden *before* the selection; a row with fewer visible
    keys than ``top_k`` keeps them all, those scoring -inf too (the clamp of transformers'
    DeepSeek-V3.2 indexer). For t_q != t_k the causal mask is aligned bottom-right, as for a
    query block at the end of a cache: query i sees keys j <= i + t_k - t_q (torch's
    ``is_causal`` aligns it top-left).

    Args:
        scores: (t_q, t_k), or (b, h, t_q, t_k) with b or h possibly 1 (shared).
        top_k: k, the keys each query keeps.
        is_causal: hide the later keys before the selection.

    Returns:
        The mask rule.

    Raises:
        ValueError: if scores has another rank or is NaN where a query ranks it (a key it
            sees), top_k is not an integer >= 1, or is_causal is not a bool.
        TypeError: flash-attn's keyword ``causal``, naming the one this function takes.

    Examples:
        >>> scores = torch.tensor([[0.0, 0.0, 0.0], [1.0, 3.0, 0.0], [5.0, 1.0, 2.0]])
        >>> to_dense(topk_mask(scores, top_k=2), 3, 3)
        tensor([[ True, False, False],
                [ True,  True, False],
                [ True, False,  True]])
    """
    _check_scores("scores", scores)
    check_sizes(top_k=top_k)
    check_flags(is_causal=is_causal)
    t_q, t_k = scores.shape[-2:]
    allowed = _visible(t_q, t_k, scores.device) if is_causal else torch.ones(
        t_q, t_k, dtype=torch.bool, device=scores.device)
    return _selection_rule(_top(scores, top_k, allowed, "scores"))


@renamed(causal="is_causal")
def block_topk_mask(
    block_scores: Tensor, top_k: int, block_size: int, *, is_causal: bool = True,
    keep_first: bool = False,
) -> MaskMod:
    """Mask rule of the ``top_k`` key blocks of each query, then causal inside the blocks.

    The query's own block (and the first with ``keep_first``) is always kept and counts among
    the ``top_k``; with ``is_causal`` a block after the query's own is never chosen, and the own
    block is cut at the query. For t_q != t_k the causal mask is aligned bottom-right, as for a
    query block at the end of a cache: query i sits at position i + t_k - t_q and sees keys
    j <= i + t_k - t_q (torch's ``is_causal`` aligns it top-left).

    Args:
        block_scores: (t_q, T_k) or (b, h, t_q, T_k): a score per query and key block of
            ``block_size`` keys, t_k = T_k · B.
        top_k: blocks each query keeps.
        block_size: B, keys per block.
        is_causal: never choose a later block; cut the own block at the query.
        keep_first: always keep the first block too.

    Returns:
        The mask rule.

    Raises:
        ValueError: if block_scores has another rank or is NaN where a query ranks it (a
            block it may choose, not one always kept), top_k or block_size is not an integer
            >= 1, top_k is below the blocks always kept (1, or 2 with keep_first), or is_causal
            or keep_first is not a bool.
        TypeError: flash-attn's keyword ``causal``, naming the one this function takes.

    Examples:
        >>> block_scores = torch.tensor([[1.0, 0.0, 0.0]]).expand(6, 3)  # block 0 ranks first
        >>> to_dense(block_topk_mask(block_scores, top_k=2, block_size=2), 6, 6)  # and its own
        tensor([[ True, False, False, False, False, False],
                [ True,  True, False, False, False, False],
                [ True,  True,  True, False, False, False],
                [ True,  True,  True,  True, False, False],
                [ True,  True, False, False,  True, False],
                [ True,  True, False, False,  True,  True]])
    """
    _check_scores("block_scores", block_scores)
    check_sizes(top_k=top_k, block_size=block_size)
    check_flags(is_causal=is_causal, keep_first=keep_first)
    always = 1 + int(keep_first)
    if top_k < always:
        raise ValueError(f"top_k must be at least the {always} always-kept blocks, got {top_k}")
    t_q, n_blocks = block_scores.shape[-2:]
    t_k = n_blocks * int(block_size)  # a Python int, as the causal rule takes (not NumPy's)
    position = torch.arange(t_q, device=block_scores.device)[:, None] + (t_k - t_q)  # (t_q, 1)
    block = torch.arange(n_blocks, device=block_scores.device)[None, :]  # (1, T_k)
    own = block == position // block_size  # (t_q, T_k)
    forced = own | (block == 0) if keep_first else own
    allowed = block * block_size <= position if is_causal else torch.ones_like(own)
    # forced blocks win every comparison: a +inf score counts as the largest finite one, below
    # the forced blocks' +inf (a forced block's NaN is overwritten; another ranked one refused)
    largest = torch.finfo(block_scores.dtype).max
    boosted = block_scores.clamp(max=largest).masked_fill(forced, math.inf)
    rule = _selection_rule(_top(boosted, top_k, allowed, "block_scores"), block_size)
    return and_masks(rule, causal_rule("bottom_right", t_q, t_k)) if is_causal else rule


class LightningIndexer(nn.Module):
    """DeepSeek Sparse Attention's indexer: cheap scores I_ij of query i against every token j.

    Per token: h_I index queries q_il = RoPE(c_Q^(i) W_IQ) from MLA's query latent c_Q (d_c',
    after MLA's RMSNorm, as DeepSeek and transformers pass it), one index key
    k_j = RoPE(LayerNorm(x^(j) W_IK)) shared by the heads, and per-head weights
    η_il = x^(i) W_w (the report's w; the book keeps w for a window); the scores are
    I_ij = Σ_l η_il ReLU(q_il · k_j / sqrt(d_I)) / sqrt(h_I), as in equation (14.2). RoPE
    rotates the first ``rope_dim`` features in two halves.
    Parameters as transformers' ``DeepseekV32Indexer``: W_IQ = ``wq_b``, W_IK = ``wk``,
    ``key_norm`` = ``k_norm``, W_w = ``weights_proj``. DeepSeek trains it apart from the
    model's loss (by distillation), so :meth:`forward` is usually called under ``no_grad``.

    Args:
        d_in: width of the tokens x.
        q_rank: d_c', width of MLA's query latent c_Q.
        index_heads: h_I, index heads.
        index_dim: d_I, width of an index query and key.
        rope_dim: features of each index query and key that RoPE rotates.
        base: RoPE's base.
        scaling: a rule of :mod:`attention.rope_scaling` for that RoPE (the model's own, as
            DeepSeek-V3.2 shares its rotary table with the indexer), or None.
        device: where the parameters are created (torch's default when None).
        dtype: their dtype (torch's default when None).

    Raises:
        ValueError: if a size is not an integer >= 1, index_dim or rope_dim is odd, or
            rope_dim > index_dim.

    Examples:
        >>> _ = torch.manual_seed(0)
        >>> indexer = LightningIndexer(d_in=8, q_rank=4, index_heads=2, index_dim=4, rope_dim=2)
        >>> with torch.no_grad():
        ...     scores = indexer(torch.randn(1, 5, 8), torch.randn(1, 5, 4))
        >>> scores.shape  # (b, t_q, t_k)
        torch.Size([1, 5, 5])
    """

    def __init__(
        self, d_in: int, q_rank: int, index_heads: int, index_dim: int, rope_dim: int,
        *, base: float = 10000.0, scaling: RopeScaling | None = None, device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        check_sizes(d_in=d_in, q_rank=q_rank, index_heads=index_heads, index_dim=index_dim,
                    rope_dim=rope_dim)  # None would rotate every feature, as RotaryEmbedding's
        if index_dim % 2 or rope_dim % 2:  # checked here, in this layer's names, not the rotary's
            raise ValueError(f"index_dim and rope_dim must be even (RoPE turns pairs of features), "
                             f"got index_dim={index_dim} and rope_dim={rope_dim}")
        if rope_dim > index_dim:
            raise ValueError(f"rope_dim must be at most index_dim={index_dim}, got {rope_dim}")
        factory = Factory(device=device, dtype=dtype)
        self.d_in, self.q_rank = d_in, q_rank
        self.index_heads, self.index_dim = index_heads, index_dim
        self.rotary = RotaryEmbedding(index_dim, base, rotary_dim=rope_dim, scaling=scaling,
                                      device=device)
        self.W_query = nn.Linear(q_rank, index_heads * index_dim, bias=False, **factory)  # W_IQ
        self.W_key = nn.Linear(d_in, index_dim, bias=False, **factory)  # W_IK
        self.key_norm = nn.LayerNorm(index_dim, eps=1e-6, **factory)
        self.W_weights = nn.Linear(d_in, index_heads, bias=False, **factory)  # W_w

    def forward(
        self, x: Tensor, q_latent: Tensor, start: int = 0,
        cache: "IndexedLatentKVCache | None" = None,
    ) -> Tensor:
        """Index scores (b, t, n + t) of the tokens x (b, t, d_in), query latents (b, t, d_c').

        The tokens sit at positions start .. start + t - 1 and score each other (n = 0), or,
        with a ``cache`` that held n tokens before this call, also the cached ones: their keys
        are appended after their latents (:meth:`IndexedLatentKVCache.append_index_keys`, so
        append the latents first) and sit at positions n .. n + t - 1 (the cache's length is
        n + t once the latents are appended; ``start`` is then ignored, the cache gives it).
        Unmasked: :func:`topk_mask` (or :func:`dsa_attention`) hides the later keys first.
        A half-precision indexer scores in float32 and returns float32 scores, as transformers'
        ``DeepseekV32Indexer`` ranks them.

        Raises:
            ValueError: if x is not (b, t, d_in) or q_latent not (b, t, q_rank), or cache is not
                an :class:`IndexedLatentKVCache` holding the latents of these t tokens after
                the indexed ones.
        """
        check_input(x, self.d_in, (3,), "x", "d_in")
        check_input(q_latent, self.q_rank, (3,), "q_latent", "q_rank")
        if q_latent.shape[:2] != x.shape[:2]:
            raise ValueError(f"q_latent must have x's (b, t) = {tuple(x.shape[:2])}, got "
                             f"{tuple(q_latent.shape[:2])}")
        b, t, _ = x.shape
        h_i, d_i = self.index_heads, self.index_dim
        if cache is not None:
            if not isinstance(cache, IndexedLatentKVCache):
                raise ValueError(f"cache must be an IndexedLatentKVCache, got {type(cache).__name__}")
            if cache.length != cache.index_length + t:
                raise ValueError(
                    f"cache must hold the latents of x's {t} tokens after its {cache.index_length} "
                    f"indexed ones (append them first): {cache.index_length + t} latents, got "
                    f"{cache.length}"
                )
            start = cache.length - t  # the latents of these tokens are already appended
        queries = self.W_query(q_latent).view(b, t, h_i, d_i).transpose(1, 2)  # (b, h_I, t, d_I)
        queries = self.rotary(queries, start=start)
        keys = self.rotary(self.key_norm(self.W_key(x)), start=start)  # (b, t, d_I)
        if cache is not None:
            keys = cache.append_index_keys(keys)  # (b, n + t, d_I)
        # half precision: scored in float32 and returned so, as transformers' indexer does;
        # scores rounded to bfloat16 tie keys that float32 ranks apart, and top-k then differs
        acc = accumulation_dtype(queries.dtype)
        queries, keys = queries.to(acc), keys.to(acc)
        # (b, h_I, t, n + t): each index head's ReLU scores
        per_head = torch.relu(queries @ keys[:, None].transpose(-2, -1) * d_i**-0.5)
        weights = self.W_weights(x).to(acc) * h_i**-0.5  # (b, t, h_I): η_il / sqrt(h_I)
        return torch.einsum("bih,bhij->bij", weights, per_head)  # (b, t, n + t)


class IndexedLatentKVCache(LatentKVCache):
    """Chapter 10's latent cache and, beside it, the lightning indexer's key of each token.

    DeepSeek Sparse Attention scores every earlier token at each step, so generating needs each
    token's index key k_j (d_I numbers, shared by the index heads) as MLA needs its latent:
    d_c + d_h^R + d_I numbers per token and layer. ``append(latents, rope_keys)`` stores a
    chunk's latents as in :class:`~attention.latent.LatentKVCache`; then
    ``append_index_keys(keys)`` stores the same tokens' index keys and returns all of them
    (a view, a copy while grad mode is on, so that gradients reach earlier calls' keys).
    (transformers' DeepSeek-V3.2 keeps them the same way, in its cache's indexed layers.)

    Args:
        batch_size: b.
        max_tokens: the most tokens it holds.
        kv_rank: d_c, width of a latent.
        rope_dim: d_h^R, width of a rotary key.
        index_dim: d_I, width of an index key.
        dtype: dtype of the storage (torch's default if None).
        device: device of the storage.

    Raises:
        ValueError: if a size is not an integer >= 1.

    Examples:
        >>> cache = IndexedLatentKVCache(1, max_tokens=8, kv_rank=4, rope_dim=2, index_dim=3)
        >>> _ = cache.append(torch.ones(1, 3, 4), torch.ones(1, 3, 2))
        >>> cache.append_index_keys(torch.ones(1, 3, 3)).shape, cache.nbytes
        (torch.Size([1, 3, 3]), 288)
    """

    def __init__(
        self, batch_size: int, max_tokens: int, kv_rank: int, rope_dim: int, index_dim: int,
        dtype: torch.dtype | None = None, device: Device = None,
    ) -> None:
        super().__init__(batch_size, max_tokens, kv_rank, rope_dim, dtype, device)
        check_sizes(index_dim=index_dim)
        self.index_keys = torch.zeros(batch_size, max_tokens, index_dim, dtype=dtype,
                                      device=device)  # (b, max_tokens, d_I)
        self.index_length = 0

    @property
    def nbytes(self) -> int:
        """Bytes of the latents, rotary keys and index keys (all max_tokens slots)."""
        return super().nbytes + self.index_keys.nbytes

    def append_index_keys(self, keys: Tensor) -> Tensor:
        """Store the index keys (b, t, d_I) of the t tokens whose latents were appended last.

        Returns all stored index keys (b, n + t, d_I), n + t = ``length``.

        Raises:
            ValueError: if keys is not (b, t, d_I) of the cache's dtype and device, does not
                follow the latents appended last, or overflows max_tokens.
        """
        b, _, width = self.index_keys.shape
        if not isinstance(keys, Tensor) or keys.dim() != 3 or (
            (keys.shape[0], keys.shape[2]) != (b, width) or keys.dtype != self.index_keys.dtype
        ):
            raise ValueError(
                f"keys must have shape (b, t, {width}) with b={b} and dtype "
                f"{self.index_keys.dtype}, got {shape_or_type(keys)}"
                + (f" and {keys.dtype}" if isinstance(keys, Tensor) else "")
            )
        if keys.device != self.index_keys.device:  # a slice assignment would copy it over
            raise ValueError(f"keys must be on the cache's device {self.index_keys.device}, got "
                             f"{keys.device}")
        start, end = self.index_length, self.index_length + keys.shape[1]
        check_room(start, keys.shape[1], self.max_tokens)
        if end != self.length:
            raise ValueError(
                f"index keys must follow the latents of the same tokens: {self.length} latents "
                f"are stored, and {start} + {keys.shape[1]} index keys would be"
            )
        self.index_keys[:, start:end] = keys
        self.index_length = end
        # (b, n + t, d_I): a view, a copy while grad mode is on (see stored_tokens)
        (stored,) = stored_tokens(self.index_keys[:, :end])
        return stored

    def reset(self) -> None:
        """Forget every token (the storage is kept and overwritten by the next append)."""
        super().reset()
        self.index_length = 0

    def to(
        self, device: Device = None, dtype: torch.dtype | None = None
    ) -> "IndexedLatentKVCache":
        """Move the latents, rotary keys and index keys, in place; returns the cache."""
        super().to(device, dtype)
        self.index_keys = self.index_keys.to(device=device, dtype=dtype)
        return self


@attention_kernel
def dsa_attention(
    query: Tensor, key: Tensor, value: Tensor, index_scores: Tensor, *, top_k: int,
    scale: float | None = None, gather: bool = False,
) -> Tensor:
    """Causal attention of each query over the ``top_k`` keys its index scores rank highest.

    One selection shared by all heads, as in DeepSeek-V3.2. The dense form masks the t_q × t_k
    scores (:func:`topk_mask`); ``gather=True`` gathers the selected keys and computes t_q × k
    scores only, the form whose cost grows like t k. Both give 0 to a query that sees no key, as
    torch's SDPA does, and compute half-precision inputs in float32, rounded once at the end.
    For t_q != t_k the causal mask is aligned bottom-right, as for a query block at the end of a
    cache: query i sees keys j <= i + t_k - t_q (torch's ``is_causal`` aligns it top-left), so
    the first t_q - t_k queries of a t_q > t_k call see no key.

    Args:
        query: (b, h, t_q, d_k); here and in key and value a batch or a head of 1 broadcasts.
        key: (b, h or 1, t_k, d_k).
        value: (b, h or 1, t_k, d_v).
        index_scores: (b, t_q, t_k), the indexer's scores, b the query's.
        top_k: k, the keys each query attends.
        scale: multiplies the scores; defaults to 1/sqrt(d_k).
        gather: gather the selected keys instead of masking the dense scores.

    Returns:
        Z (b, h, t_q, d_v).

    Raises:
        ValueError: if the tensors do not agree, index_scores is not a floating-point tensor on
            the query's device, has another shape or is NaN where a query ranks it (a key it
            sees), top_k is not an integer >= 1, scale is not None or a finite number, or
            gather is not a bool.
        TypeError: flash-attn's keywords and older names (``causal``, ``softmax_scale``,
            ``window_size``, ``causal_alignment``), with the keyword this function takes.

    Examples:
        >>> _ = torch.manual_seed(0)
        >>> q, k, v = torch.randn(3, 1, 2, 6, 4).unbind(0)
        >>> scores = torch.randn(1, 6, 6)
        >>> dense = dsa_attention(q, k, v, scores, top_k=3)
        >>> torch.allclose(dense, dsa_attention(q, k, v, scores, top_k=3, gather=True), atol=1e-6)
        True
    """
    scale = check_scale(scale)
    _check_4d(query=query, key=key, value=value)
    check_qkv(query, key, value)  # also on the gather path, which dense_attention does not see
    b, h = check_batch_dims(("query", query), ("key", key), ("value", value))  # broadcast (b, h)
    check_flags(gather=gather)
    expected = (query.shape[0], query.shape[-2], key.shape[-2])  # (b, t_q, t_k)
    if not isinstance(index_scores, Tensor) or not index_scores.is_floating_point() or (
        index_scores.device != query.device
    ):
        got = ((index_scores.dtype, str(index_scores.device)) if isinstance(index_scores, Tensor)
               else type(index_scores).__name__)
        raise ValueError(f"index_scores must be a floating-point tensor on the query's device "
                         f"{query.device}, got {got}")
    if tuple(index_scores.shape) != expected:
        raise ValueError(f"index_scores must have shape (b, t_q, t_k) = {expected}, "
                         f"got {tuple(index_scores.shape)}")
    check_sizes(top_k=top_k)
    t_q, t_k = expected[1:]
    visible = _visible(t_q, t_k, query.device)  # (t_q, t_k)
    if not gather:  # topk_mask's selection, with index_scores named in its errors
        chosen = _top(index_scores, top_k, visible, "index_scores")[:, None]  # (b, 1, t_q, t_k)
        return dense_attention(query, key, value, mask_mod=_selection_rule(chosen), scale=scale)
    # a batch or a head of 1 broadcasts against the others', as in the dense form
    query = query.expand(b, h, *query.shape[2:])
    d_k = query.shape[-1]
    acc = accumulation_dtype(query.dtype)  # float32 for half precision, rounded once at the end
    masked = _rankable(index_scores, visible, "index_scores")  # (b, t_q, t_k)
    index = masked.topk(min(top_k, t_k), dim=-1).indices  # (b, t_q, k)
    # (b, t_q, k): False where a clamped top-k returned a hidden key
    valid = visible.expand(index.shape[0], t_q, t_k).gather(-1, index)
    rows = torch.arange(b, device=query.device)[:, None, None]  # (b, 1, 1)
    keys = key.expand(b, h, t_k, d_k).transpose(1, 2)[rows, index].to(acc)  # (b, t_q, k, h, d_k)
    values = value.expand(b, h, t_k, value.shape[-1]).transpose(1, 2)[rows, index].to(acc)  # (…, d_v)
    scale = d_k**-0.5 if scale is None else scale
    scores = torch.einsum("bhqd,bqkhd->bhqk", query.to(acc), keys) * scale  # (b, h, t_q, k)
    # the package's softmax gives 0, not nan, to a query that sees no key
    weights = softmax(scores.masked_fill(~valid[:, None], -math.inf), dim=-1)  # (b, h, t_q, k)
    return torch.einsum("bhqk,bqkhd->bhqd", weights, values).to(value.dtype)  # (b, h, t_q, d_v)


def dsa_flops(
    t: int, top_k: int, num_heads: int, kv_rank: int, rope_dim: int, index_heads: int,
    index_dim: int, *, head_dim: int | None = None,
) -> tuple[int, int, int]:
    """FLOPs of one layer's causal prefill of t tokens: (indexer, selected attention, dense).

    Selected attention is MLA's absorbed form (chapter 10), the multi-query form DSA runs in:
    per query–key pair and head, a score of width d_c + d_h^R and a value of width d_c,
    2 (2 d_c + d_h^R) FLOPs, over min(i + 1, k) keys of query i. The indexer costs
    2 h_I (d_I + 1) per pair (its dot products, then the weighted sum of the ReLUs) over all
    t (t + 1) / 2 causal pairs. Dense attention runs over the same causal pairs, in the absorbed
    form by default (as decoding runs it), or, given ``head_dim``, in the expanded form that a
    dense prefill runs: keys of width d_h + d_h^R and values of width d_h, 2 (2 d_h + d_h^R)
    per pair and head. Projections, linear in t, are left out.

    Args:
        t: tokens of the prefill.
        top_k: k, keys each query attends.
        num_heads: h.
        kv_rank: d_c.
        rope_dim: d_h^R.
        index_heads: h_I.
        index_dim: d_I.
        head_dim: d_h, width of a head's content key and of its value, to price dense attention
            in the expanded form; None prices it in the absorbed form.

    Returns:
        (indexer, selected attention, dense attention) FLOPs.

    Raises:
        ValueError: if a size is not an integer >= 1.

    Examples:
        >>> dsa_flops(4, top_k=2, num_heads=1, kv_rank=1, rope_dim=1, index_heads=1, index_dim=1)
        (40, 42, 60)
        >>> dsa_flops(4, 2, 1, 1, 1, 1, 1, head_dim=2)[2]  # expanded: 2 (2·2 + 1) per pair
        100
    """
    t, top_k, num_heads, kv_rank, rope_dim, index_heads, index_dim = check_sizes(  # as ints
        t=t, top_k=top_k, num_heads=num_heads, kv_rank=kv_rank, rope_dim=rope_dim,
        index_heads=index_heads, index_dim=index_dim)
    if head_dim is not None:
        (head_dim,) = check_sizes(head_dim=head_dim)
    causal_pairs = t * (t + 1) // 2
    k = min(top_k, t)
    selected_pairs = k * (k + 1) // 2 + (t - k) * k  # Σ_i min(i + 1, k)
    absorbed = 2 * num_heads * (2 * kv_rank + rope_dim)  # per pair
    dense = absorbed if head_dim is None else 2 * num_heads * (2 * head_dim + rope_dim)
    indexer = 2 * index_heads * (index_dim + 1) * causal_pairs
    return indexer, absorbed * selected_pairs, dense * causal_pairs


def _check_4d(**tensors: Tensor) -> None:
    """Require each named tensor to be (b, h, t, d)."""
    for name, x in tensors.items():
        if not isinstance(x, Tensor) or x.dim() != 4:
            got = f"shape {tuple(x.shape)}" if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"{name} must be (b, h, t, d), got {got}")


def _block_means(x: Tensor, block_size: int, name: str) -> Tensor:
    """Mean of each block of B rows: (b, h, t, d) -> (b, h, t / B, d); B must divide t."""
    check_sizes(block_size=block_size)
    b, h, t, d = x.shape
    if t % block_size:
        raise ValueError(f"block_size must divide the {name}' t_k={t}, got block_size={block_size}")
    return x.view(b, h, t // block_size, block_size, d).mean(dim=3)  # (b, h, T_k, d)


@autocast_as_sdpa
def moba_mask(query: Tensor, key: Tensor, *, block_size: int, top_k: int) -> MaskMod:
    """MoBA's selection: query i keeps the ``top_k`` key blocks n with the highest q_i · mean(K_n).

    Causal: the query's own block is always kept (cut at the query), later blocks never. For
    t_q != t_k the causal mask is aligned bottom-right, as for a query block at the end of a
    cache: query i sees keys j <= i + t_k - t_q (torch's ``is_causal`` aligns it top-left).
    Half-precision inputs are scored in float32, where rounding would tie close blocks.

    Args:
        query: (b, h, t_q, d_k).
        key: (b, h, t_k, d_k).
        block_size: B, dividing t_k.
        top_k: blocks each query keeps.

    Returns:
        The mask rule.

    Raises:
        ValueError: if the tensors are not 4-d or do not agree in dtype, device, width d_k or
            batch and heads (which broadcast), B does not divide t_k, or top_k is not an
            integer >= 1.

    Examples:
        >>> q = k = torch.ones(1, 1, 4, 2)
        >>> to_dense(moba_mask(q, k, block_size=2, top_k=1), 4, 4)
        tensor([[ True, False, False, False],
                [ True,  True, False, False],
                [False, False,  True, False],
                [False, False,  True,  True]])
    """
    _check_4d(query=query, key=key)
    check_qkv(query, key)  # before the matmul, whose own error names neither
    check_batch_dims(("query", query), ("key", key))  # (b, h) broadcast, as in the matmul
    acc = accumulation_dtype(query.dtype)  # half precision would tie blocks that float32 ranks
    means = _block_means(key.to(acc), block_size, "keys")  # (b, h, T_k, d_k)
    gate = query.to(acc) @ means.transpose(-2, -1)  # (b, h, t_q, T_k)
    # a NaN in the query or a key makes NaN gates: such a block ranks first, so the rows that
    # see the NaN come out NaN, as torch's SDPA gives them (block_topk_mask refuses NaN)
    gate = gate.masked_fill(gate.isnan(), torch.finfo(gate.dtype).max)
    return block_topk_mask(gate, top_k, block_size)


@attention_kernel
def moba_attention(
    query: Tensor, key: Tensor, value: Tensor, *, block_size: int, top_k: int,
    scale: float | None = None,
) -> Tensor:
    """Mixture of Block Attention (Lu et al., 2025): softmax attention over :func:`moba_mask`.

    For t_q != t_k the causal mask is aligned bottom-right, as for a query block at the end of a
    cache: query i sees keys j <= i + t_k - t_q (torch's ``is_causal`` aligns it top-left).

    Args:
        query: (b, h, t_q, d_k).
        key: (b, h, t_k, d_k).
        value: (b, h, t_k, d_v).
        block_size: B, dividing t_k.
        top_k: blocks each query keeps.
        scale: multiplies the scores; defaults to 1/sqrt(d_k).

    Returns:
        Z (b, h, t_q, d_v).

    Raises:
        ValueError: as :func:`moba_mask`, or if query, key and value do not agree or scale is
            not None or a finite number.
        TypeError: flash-attn's keywords and older names (``causal``, ``softmax_scale``,
            ``window_size``, ``causal_alignment``), with the keyword this function takes.

    Examples:
        >>> _ = torch.manual_seed(0)
        >>> q, k, v = torch.randn(3, 1, 2, 8, 4).unbind(0)
        >>> out = moba_attention(q, k, v, block_size=2, top_k=4)  # every block: causal attention
        >>> sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        >>> torch.allclose(out, sdpa, atol=1e-6)
        True
    """
    scale = check_scale(scale)
    _check_4d(query=query, key=key, value=value)
    check_qkv(query, key, value)  # value too, before moba_mask's matmul
    check_batch_dims(("query", query), ("key", key), ("value", value))
    rule = moba_mask(query, key, block_size=block_size, top_k=top_k)
    return dense_attention(query, key, value, mask_mod=rule, scale=scale)


def _complete(block_size: int) -> MaskMod:
    """NSA's compressed branch: query q_idx sees block kv_idx once the block has ended."""

    def complete(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return (kv_idx + 1) * block_size <= q_idx + 1  # block kv_idx ends at or before q_idx

    return complete


def _check_self_attention(query: Tensor, key: Tensor) -> None:
    """NSA's branches need (b, h, t, d) tensors of one dtype and device, and t_k = t_q: its
    compressed branch puts query i at position i."""
    _check_4d(query=query, key=key)
    check_qkv(query, key)  # before the selection's matmul, whose own error names neither
    if key.shape[-2] != query.shape[-2]:
        raise ValueError(f"NSA is self-attention: key must hold t_k = t_q = {query.shape[-2]} "
                         f"tokens, got t_k={key.shape[-2]}")


@autocast_as_sdpa
def nsa_mask(
    query: Tensor, key: Tensor, *, block_size: int, top_k: int, scale: float | None = None,
) -> MaskMod:
    """NSA's selection: query i keeps the ``top_k`` blocks its compressed branch weighs most.

    The weights are the softmax of q_i · mean(K_n) · scale over the complete blocks up to the
    query, those ending at or before it (a query that sees none gives every block 0); the first
    and the query's own block are always kept and count among the ``top_k``, later blocks never.
    Half-precision inputs are scored in float32, where rounding would tie close blocks.

    Args:
        query: (b, h, t, d_k).
        key: (b, h, t, d_k).
        block_size: B, dividing t.
        top_k: blocks each query keeps, at least 2.
        scale: multiplies the scores; defaults to 1/sqrt(d_k).

    Returns:
        The mask rule.

    Raises:
        ValueError: if query or key is not 4-d, they do not agree in dtype, device, width d_k
            or batch and heads (which broadcast), they hold different numbers of tokens, B does
            not divide t, top_k is not an integer >= 2, or scale is not None or a finite
            number.

    Examples:
        >>> q = k = torch.ones(1, 1, 4, 2)
        >>> to_dense(nsa_mask(q, k, block_size=1, top_k=2), 4, 4)  # the first and the own
        tensor([[ True, False, False, False],
                [ True,  True, False, False],
                [ True, False,  True, False],
                [ True, False, False,  True]])
    """
    scale = check_scale(scale)
    _check_self_attention(query, key)  # the compressed branch puts query i at position i
    check_batch_dims(("query", query), ("key", key))  # (b, h) broadcast, as in the matmul
    acc = accumulation_dtype(query.dtype)  # half precision would tie blocks that float32 ranks
    keys_c = _block_means(key.to(acc), block_size, "keys")  # (b, h, T, d_k)
    t, n_blocks = query.shape[-2], keys_c.shape[-2]
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    scores_c = query.to(acc) @ keys_c.transpose(-2, -1) * scale  # (b, h, t, T)
    seen = to_dense(_complete(block_size), t, n_blocks, device=query.device)  # (t, T)
    p_cmp = scores_c.masked_fill(~seen, -math.inf).softmax(dim=-1).nan_to_num(0.0)  # row: 0
    return block_topk_mask(p_cmp, top_k, block_size, keep_first=True)


def _check_gates(gates: Tensor, query: Tensor) -> None:
    """NSA's gates: (b, h, t, 3) in [0, 1] (a sigmoid's outputs, in NSA and in chapter 14), of
    the query's dtype (or float32, in which half precision mixes them) and on its device: float64
    gates would silently turn a float32 output into float64."""
    b, h, t, _ = query.shape
    if not isinstance(gates, Tensor) or gates.shape != (b, h, t, 3):
        got = shape_or_type(gates)
        raise ValueError(f"gates must have shape (b, h, t, 3) = {(b, h, t, 3)}, got {got}")
    dtypes = dict.fromkeys((query.dtype, accumulation_dtype(query.dtype)))  # in that order
    if gates.dtype not in dtypes or gates.device != query.device:
        raise ValueError(f"gates must be {' or '.join(map(str, dtypes))} on {query.device}, as the "
                         f"query, got {gates.dtype} on {gates.device}")
    if not gates.is_meta and not ((gates >= 0) & (gates <= 1)).all():  # nan fails both
        found = "nan" if gates.isnan().any() else (
            f"values in [{gates.min().item():.4g}, {gates.max().item():.4g}]")
        raise ValueError(f"gates must be in [0, 1], got {found}")


@attention_kernel
def nsa_attention(
    query: Tensor, key: Tensor, value: Tensor, gates: Tensor, *, block_size: int, top_k: int,
    window: int, scale: float | None = None,
) -> Tensor:
    """Native Sparse Attention (Yuan et al., 2025): three causal branches mixed by gates.

    Compressed: attention over the means of the complete blocks of B keys and values up to the
    query, those ending at or before it (NSA learns this compression with an MLP; blocks here do
    not overlap). Selected: the ``top_k`` blocks that the compressed branch weighs most, the
    first and the query's own block always among them (NSA also keeps a second local block).
    Sliding: the ``window`` latest keys. The three branches share one set of keys and values and
    each head selects its own blocks; NSA gives each branch its own keys and values and shares one
    selection among the query heads of a GQA group. Half-precision inputs are computed in float32
    (block means, branches and their gated sum), rounded once at the end.

    Args:
        query: (b, h, t, d_k).
        key: (b, h, t, d_k).
        value: (b, h, t, d_v).
        gates: (b, h, t, 3) in [0, 1], for the compressed, selected and sliding branches; of
            the query's dtype (or float32 for a half-precision query), on its device.
        block_size: B, keys per block, dividing t.
        top_k: blocks each query selects.
        window: w, keys of the sliding branch.
        scale: multiplies the scores; defaults to 1/sqrt(d_k).

    Returns:
        Z (b, h, t, d_v), the gated sum of the three branches.

    Raises:
        ValueError: if query, key or value is not 4-d, they do not agree or t_k != t_q, gates
            has another shape, dtype or device or a value outside [0, 1], a size is not an
            integer >= 1, B does not divide t, top_k is below the 2 blocks always kept, or
            scale is not None or a finite number.
        TypeError: flash-attn's keywords and older names (``causal``, ``softmax_scale``,
            ``window_size``, ``causal_alignment``), with the keyword this function takes.

    Examples:
        >>> _ = torch.manual_seed(0)
        >>> q, k, v = torch.randn(3, 1, 2, 8, 4).unbind(0)
        >>> sliding_only = torch.tensor([0.0, 0.0, 1.0]).expand(1, 2, 8, 3)
        >>> out = nsa_attention(q, k, v, sliding_only, block_size=2, top_k=2, window=8)
        >>> sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        >>> torch.allclose(out, sdpa, atol=1e-6)  # a window of t keys is causal attention
        True
    """
    scale = check_scale(scale)
    _check_self_attention(query, key)
    _check_4d(value=value)
    check_qkv(query, key, value)  # before the upcast below, which would hide a dtype mismatch
    _check_gates(gates, query)
    check_sizes(window=window)
    dtype, acc = value.dtype, accumulation_dtype(value.dtype)
    # Half precision: means, branches and their gated sum in float32, rounded once at the end.
    query, key, value = (x.to(acc) for x in (query, key, value))
    keys_c = _block_means(key, block_size, "keys")  # (b, h, T, d_k)
    values_c = _block_means(value, block_size, "values")  # (b, h, T, d_v)
    compressed = dense_attention(query, keys_c, values_c, mask_mod=_complete(block_size),
                                 scale=scale)
    chosen = nsa_mask(query, key, block_size=block_size, top_k=top_k, scale=scale)
    selected = dense_attention(query, key, value, mask_mod=chosen, scale=scale)
    sliding = dense_attention(query, key, value, mask_mod=sliding_window(window), scale=scale)
    branches = torch.stack([compressed, selected, sliding], dim=-1)  # (b, h, t, d_v, 3)
    return (branches * gates.to(acc)[..., None, :]).sum(dim=-1).to(dtype)  # (b, h, t, d_v)
