"""The attention sublayer of a Transformer block: fused projections, masks, RoPE, QK-norm, cache.

Notation (see CONTRIBUTING.md):
    b        batch size
    t        number of tokens (t_k keys: t without a cache, n + t with n cached tokens)
    d        model width ``d_model`` (d_in = d_out = d)
    h        number of heads, d_h = d / h the width of one head

    Q, K, V = x W_q, x W_k, x W_v                        (b, h, t, d_h) each, heads split
    Q, K    = norm(Q), norm(K)                            QK-norm over d_h, if ``qk_norm``
    Q, K    = Q R, K R                                    RoPE, if ``rotary``
    A       = drop(softmax(Q Kᵀ / sqrt(d_h) + M))         (b, h, t, t_k)
    SA(x)   = drop((A V, heads merged) W_o)               (b, t, d)
    or, with ``output_gate``, drop((A V ⊙ sigmoid(x W_g), heads merged) W_o)

:class:`~attention.TransformerBlock` keeps one of these as its submodule ``attn`` and calls
``attn(x, attn_mask, cache)``, which returns SA(x) and A. Any module with that call and that
return value, (b, t, d) and the weights or ``None``, can take its place.
"""

import torch
from torch import Tensor, nn
from torch.types import Device

from ._checks import (
    Factory,
    accumulation_dtype,
    additive_mask,
    autocast_off,
    check_attn_mask,
    check_cache,
    check_dropout,
    check_flags,
    check_heads,
    check_input,
    check_mask,
    check_sizes,
    renamed,
)
from .functional import additive_causal_mask, attention_weights
from .inference import window_visible
from .kv_cache import Cache, RollingKVCache
from .norms import NormKind, make_norm
from .positions import RotaryEmbedding, check_cache_rotary, check_rotary

__all__ = ["BlockAttention"]


class FusedHeads(nn.Module):
    """The first step of a block's attention sublayer, shared by :class:`BlockAttention` and
    :class:`~attention.linear_model.KernelBlockAttention`: one fused projection, split into
    heads, with the QK-norms."""

    d_model: int
    num_heads: int
    d_h: int
    qkv: nn.Linear  # W_q, W_k, W_v stacked: (d, 3d)
    qk_norm: NormKind | None
    q_norm: nn.Module  # present when qk_norm is not None
    k_norm: nn.Module

    def heads(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The queries, keys and values (b, h, t, d_h) of x (b, t, d), before any rotation.

        Args:
            x: the tokens (b, t, d).

        Returns:
            The queries, keys and values, (b, h, t, d_h) each; queries and keys are normalized
            by the QK-norms, if any.

        Raises:
            ValueError: if x is not (b, t, d).

        Examples:
            >>> queries, keys, values = BlockAttention(8, 2).heads(torch.randn(1, 3, 8))
            >>> queries.shape
            torch.Size([1, 2, 3, 4])
        """
        check_input(x, self.d_model, (3,), "x", "d_model")
        b, t, _ = x.shape
        h, d_h = self.num_heads, self.d_h
        queries, keys, values = self.qkv(x).split(self.d_model, dim=2)  # 3 x (b, t, d)
        queries = queries.view(b, t, h, d_h).transpose(1, 2)  # (b, h, t, d_h)
        keys = keys.view(b, t, h, d_h).transpose(1, 2)  # (b, h, t, d_h)
        values = values.view(b, t, h, d_h).transpose(1, 2)  # (b, h, t, d_h)
        if self.qk_norm is not None:
            queries, keys = self.q_norm(queries), self.k_norm(keys)  # (b, h, t, d_h) each
        return queries, keys, values


class BlockAttention(FusedHeads):
    """Multi-head self-attention with W_q, W_k, W_v fused in ``qkv``, as a block uses it.

    ``is_causal=True`` lets token i attend to tokens j <= i only; ``rotary`` rotates queries and
    keys by their positions; ``qk_norm`` ("layer" or "rms") normalizes each head's queries and
    keys over d_h, with one gain shared by all heads, before the rotation (Dehghani et al.,
    2023). ``bias=False`` drops the biases of the projections and of a LayerNorm.
    ``output_gate=True`` multiplies each head's context vector, feature by feature, by
    sigmoid(x W_g) before W_o: gated attention (Qiu et al., 2025), Qwen3-Next's gate, which
    lets a head output nothing without putting its weight anywhere. The call returns SA(x) and
    the attention weights.

    Args:
        d_model: d, the width of the tokens; h heads of width d / h.
        num_heads: h; must divide d_model.
        dropout: p_drop on the weights A and on SA(x), in [0, 1).
        is_causal: hide later tokens from each query.
        rotary: the rotary embedding of queries and keys (None: no RoPE).
        qk_norm: ``"layer"``, ``"rms"`` or None.
        bias: biases in the projections (and a LayerNorm's).
        norm_eps: ε of the QK-norms.
        output_gate: a sigmoid gate W_g (d, d) on the context vectors, made after the other
            parameters (so the others draw the same random numbers with or without it).
        device: where the parameters are created (torch's default when None).
        dtype: their dtype (torch's default when None).

    Raises:
        ValueError: if d_model or num_heads is not an integer >= 1, num_heads does not divide
            d_model, dropout is outside [0, 1), qk_norm is unknown, rotary is not a
            RotaryEmbedding of width d_model / num_heads (or None), norm_eps is not a finite
            number > 0 (with a qk_norm, which reads it), or is_causal, bias or output_gate is
            not a bool.

    Examples:
        >>> _ = torch.manual_seed(0)
        >>> attn = BlockAttention(8, 2, is_causal=True, rotary=RotaryEmbedding(4), qk_norm="rms")
        >>> out, weights = attn(torch.randn(1, 3, 8))
        >>> out.shape, weights[0, 0, 0].detach()
        (torch.Size([1, 3, 8]), tensor([1., 0., 0.]))
    """

    @renamed(causal="is_causal")
    def __init__(
        self,
        d_model: int,
        num_heads: int,
        dropout: float = 0.0,
        *,
        is_causal: bool = False,
        rotary: RotaryEmbedding | None = None,
        qk_norm: NormKind | None = None,
        bias: bool = True,
        norm_eps: float = 1e-5,
        output_gate: bool = False,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        check_sizes(d_model=d_model)
        check_heads(d_model, num_heads, width_name="d_model")
        check_dropout(dropout)
        check_flags(is_causal=is_causal, bias=bias, output_gate=output_gate)
        d_h = d_model // num_heads
        check_rotary(rotary, d_h)
        self.d_model, self.num_heads, self.d_h = d_model, num_heads, d_h
        self.dropout, self.is_causal, self.rotary = dropout, is_causal, rotary
        factory = Factory(device=device, dtype=dtype)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias, **factory)  # W_q, W_k, W_v stacked
        self.out_proj = nn.Linear(d_model, d_model, bias=bias, **factory)
        self.proj_dropout = nn.Dropout(dropout)  # on out_proj's output (torch's dropout1)
        self.qk_norm = qk_norm
        if qk_norm is not None:
            self.q_norm = make_norm(qk_norm, d_h, norm_eps, bias, **factory)
            self.k_norm = make_norm(qk_norm, d_h, norm_eps, bias, **factory)
        # W_g (d, d): one gate per feature of each head, from the block's (normed) input x
        self.gate = nn.Linear(d_model, d_model, bias=bias, **factory) if output_gate else None

    def _mask(
        self, t: int, t_k: int, attn_mask: Tensor | None, x: Tensor, cache: Cache | None
    ) -> Tensor | None:
        """The additive mask M (..., t, t_k): the causal mask plus ``attn_mask``, if any.

        ``attn_mask`` follows the package's one rule (bool True = may attend, a float is added,
        anything else is refused), causal or not; :meth:`forward` checks it.

        The causal mask is aligned bottom-right: the t queries are the last t of the t_k keys.
        A :class:`~attention.RollingKVCache` returns only the keys its window (and sinks) keep;
        their positions give the mask instead, so that every query of a chunk sees its own
        window, not the first one's.
        """
        if not self.is_causal:
            return attn_mask
        # in the accumulation dtype: a float32 attn_mask on half-precision x is added in float32,
        # as without is_causal (rounded to bfloat16 first, a bias of 100.7 became 100.5)
        dtype = accumulation_dtype(x.dtype)
        if isinstance(cache, RollingKVCache):
            query_pos = torch.arange(cache.length - t, cache.length, device=x.device)  # (t,)
            visible = window_visible(query_pos, cache.key_positions, cache.window, cache.sinks)
            causal = additive_mask(visible, dtype)  # (t, t_k)
        else:
            causal = additive_causal_mask(
                t, t_k, dtype=dtype, device=x.device, alignment="bottom_right"
            )  # (t, t_k)
        if attn_mask is None:
            return causal
        return causal + additive_mask(attn_mask, dtype)  # (..., t, t_k)

    def forward(
        self, x: Tensor, attn_mask: Tensor | None = None, cache: Cache | None = None
    ) -> tuple[Tensor, Tensor]:
        """SA(x) (b, t, d) and the attention weights A (b, h, t, t_k) it applied to the values.

        Without a cache t_k = t; with one, x's keys and values are appended to it and the t
        queries attend to all t_k = n + t cached tokens, x's first token at position n (to those
        within the window and the sinks of a :class:`~attention.RollingKVCache`).

        Args:
            x: the tokens (b, t, d).
            attn_mask: None, or a mask broadcastable to (b, h, t, t_k): bool (True = may
                attend) or a float added to the scaled scores; with ``is_causal`` it is
                combined with the causal mask (aligned bottom-right).
            cache: a KV cache that x's keys and values are appended to, or None.

        Returns:
            SA(x) (b, t, d) and A (b, h, t, t_k).

        Raises:
            ValueError: if x is not (b, t, d), attn_mask is neither bool nor a float of
                x's dtype or float32, or does not broadcast to (b, h, t, t_k), cache is not a
                KV cache (with a ``length`` and an ``append``), or a
                :class:`~attention.StreamingKVCache` rotates otherwise than
                ``rotary``.
        """
        if cache is not None:
            check_cache(cache)
            check_cache_rotary(cache, self.rotary)  # a StreamingKVCache turns its sinks
        queries, keys, values = self.heads(x)  # (b, h, t, d_h) each
        b, t, _ = x.shape
        start = 0 if cache is None else cache.length  # position of x's first token
        if attn_mask is not None:  # before the cache takes x's keys: a refused call keeps none
            # t_k: the keys the cache will return, only its window and sinks for a rolling one
            t_k = t + (len(cache.kept_positions()) if isinstance(cache, RollingKVCache) else start)
            check_attn_mask(attn_mask, x)
            check_mask(attn_mask, torch.Size((b, self.num_heads, t, t_k)))
        if self.rotary is not None:
            queries, keys = self.rotary(queries, start), self.rotary(keys, start)  # (b,h,t,d_h)
        if cache is not None:
            keys, values = cache.append(keys, values)  # (b, h, t_k, d_h) each
        dropout_p = self.dropout if self.training else 0.0
        mask = self._mask(t, keys.shape[2], attn_mask, x, cache)
        # half precision (or autocast's): the weights and A V in float32, the context rounded
        # once, as torch's SDPA (nn.TransformerEncoderLayer's path); autocast off, which would
        # round them again. The weights returned are in the values' dtype.
        acc = accumulation_dtype(values.dtype)
        mask = mask if mask is None or mask.dtype == torch.bool else mask.to(acc)
        with autocast_off(x):
            attn_weights = attention_weights(
                queries.to(acc), keys.to(acc), attn_mask=mask, dropout_p=dropout_p
            )  # (b, h, t, t_k)
            context = (attn_weights @ values.to(acc)).to(values.dtype)  # (b, h, t, d_h)
        context = context.transpose(1, 2).reshape(b, t, self.d_model)  # (b, t, d)
        attn_weights = attn_weights.to(values.dtype)
        if self.gate is not None:  # gated attention: each feature of each head scaled by (0, 1)
            context = context * torch.sigmoid(self.gate(x))  # (b, t, d)
        return self.proj_dropout(self.out_proj(context)), attn_weights
