"""Encoder-style attention without a causal mask: cross-attention and bidirectional
self-attention.

Notation (see CONTRIBUTING.md): b batch size, t_q number of queries (tokens of x), t_k number of
keys and values (tokens of the context), d_q / d_kv widths of x / of the context (d_in for
self-attention), d_out output width, h heads, d_h = d_out / h width of one head.

Cross-attention lets every token of one sequence x (say, a decoder's) look at every token of
another sequence, the context (say, an encoder's output), which may differ in length and width:

    Q = x W_q,   K = context W_k,   V = context W_v,   Z = softmax(Q Kᵀ / sqrt(d_h)) V,

per head, followed by the output projection that mixes the heads. Self-attention is the special
case context = x. Unlike the causal modules, nothing hides later tokens: each token sees the
whole sequence in both directions, as in an encoder (BERT, the Transformer's encoder).

Padding: a ``key_padding_mask`` of shape (b, t_k) marks PADDING with True, the convention of
``torch.nn.MultiheadAttention``, which is the OPPOSITE of ``attn_mask`` in
``scaled_dot_product_attention`` (where True means "may attend").
"""

from typing import Literal, overload

import torch
from torch import Tensor, nn
from torch.types import Device

from ._checks import (
    Factory,
    accumulation_dtype,
    autocast_off,
    check_dropout,
    check_flags,
    check_heads,
    check_input,
    check_sizes,
)
from .functional import attention_weights

__all__ = ["CrossAttention", "BidirectionalSelfAttention"]


class CrossAttention(nn.Module):
    """Multi-head attention with queries from x and keys and values from a separate context.

    ``W_query`` maps d_q → d_out, ``W_key`` and ``W_value`` map d_kv → d_out, and ``out_proj``
    (with a bias) mixes the heads.

    Args:
        d_q: width of the tokens of x, which give the queries.
        d_kv: width of the tokens of the context, which give the keys and values.
        d_out: output width, split into num_heads heads of width d_h = d_out / num_heads.
        num_heads: number of heads h; must divide d_out.
        dropout: probability of dropping an attention weight while training, in [0, 1).
        qkv_bias: give W_query, W_key and W_value a bias (out_proj always has one).
        device: where the parameters are created (torch's default when None).
        dtype: their dtype (torch's default when None).

    Raises:
        ValueError: if a size is not an integer >= 1, d_out is not a multiple of num_heads,
            dropout is outside [0, 1), or qkv_bias is not a bool.

    Examples:
        >>> _ = torch.manual_seed(123)
        >>> cross = CrossAttention(d_q=3, d_kv=5, d_out=4, dropout=0.0, num_heads=2)
        >>> cross(torch.randn(2, 6, 3), torch.randn(2, 9, 5)).shape  # (b, t_q, d_out)
        torch.Size([2, 6, 4])
    """

    def __init__(
        self,
        d_q: int,
        d_kv: int,
        d_out: int,
        num_heads: int,
        dropout: float,
        *,
        qkv_bias: bool = False,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        check_sizes(d_q=d_q, d_kv=d_kv, d_out=d_out)
        check_heads(d_out, num_heads)
        check_dropout(dropout)
        check_flags(qkv_bias=qkv_bias)
        self.d_q, self.d_kv, self.d_out = d_q, d_kv, d_out
        self.num_heads, self.d_h = num_heads, d_out // num_heads
        factory = Factory(device=device, dtype=dtype)
        self.W_query = nn.Linear(d_q, d_out, bias=qkv_bias, **factory)
        self.W_key = nn.Linear(d_kv, d_out, bias=qkv_bias, **factory)
        self.W_value = nn.Linear(d_kv, d_out, bias=qkv_bias, **factory)
        self.out_proj = nn.Linear(d_out, d_out, **factory)
        self.dropout = nn.Dropout(dropout)

    @overload
    def forward(
        self, x: Tensor, context: Tensor, key_padding_mask: Tensor | None = None,
        return_weights: Literal[False] = False,
    ) -> Tensor: ...

    @overload
    def forward(
        self, x: Tensor, context: Tensor, key_padding_mask: Tensor | None = None, *,
        return_weights: Literal[True],
    ) -> tuple[Tensor, Tensor]: ...

    @overload
    def forward(
        self, x: Tensor, context: Tensor, key_padding_mask: Tensor | None = None,
        return_weights: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]: ...

    def forward(
        self, x: Tensor, context: Tensor, key_padding_mask: Tensor | None = None,
        return_weights: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Attend from x (b, t_q, d_q) to context (b, t_k, d_kv).

        Args:
            x: the sequence that asks, (b, t_q, d_q).
            context: the sequence that answers, (b, t_k, d_kv).
            key_padding_mask: (b, t_k) bool, **True marks a PADDING token** of the context (as
                in ``torch.nn.MultiheadAttention``); padded keys get attention weight 0. A query
                whose keys are all padding gets a zero context vector before ``out_proj`` and
                zero weights; torch's module returns nan for it, except with
                ``need_weights=False`` outside its inference fast path.
            return_weights: also return the attention weights (after dropout).

        Returns:
            (b, t_q, d_out), or that and the weights (b, h, t_q, t_k) if ``return_weights``.

        Empty sequences get PyTorch's answer (``nn.MultiheadAttention``'s): an empty context
        (t_k = 0) leaves nothing to attend to, so every query gets a zero context vector and
        the output is ``out_proj``'s bias; no queries (t_q = 0) give an empty (b, 0, d_out).

        Raises:
            ValueError: if x or context does not have the shape above, their batch sizes differ,
                key_padding_mask is not a (b, t_k) bool tensor on x's device, or return_weights
                is not a bool.
        """
        check_input(x, self.d_q, (3,), "x", "d_q")
        check_input(context, self.d_kv, (3,), "context", "d_kv")
        check_flags(return_weights=return_weights)
        (b, t_q, _), t_k = x.shape, context.shape[1]
        if context.shape[0] != b:
            raise ValueError(
                f"x and context must have the same batch size b, got {b} and {context.shape[0]}"
            )
        attn_mask = None
        if key_padding_mask is not None:
            if not isinstance(key_padding_mask, Tensor):
                raise ValueError(f"key_padding_mask must be a bool tensor of shape (b, t_k) = "
                                 f"{(b, t_k)} or None, got {type(key_padding_mask).__name__}")
            if key_padding_mask.dtype != torch.bool or key_padding_mask.shape != (b, t_k):
                raise ValueError(
                    f"key_padding_mask must be a bool tensor of shape (b, t_k) = {(b, t_k)}, "
                    f"got {key_padding_mask.dtype} of shape {tuple(key_padding_mask.shape)}"
                )
            if key_padding_mask.device != x.device:  # else refused below as an attn_mask
                raise ValueError(f"key_padding_mask must be on x's device {x.device}, "
                                 f"got {key_padding_mask.device}")
            attn_mask = ~key_padding_mask[:, None, None, :]  # (b, 1, 1, t_k), True = may attend
        h, d_h = self.num_heads, self.d_h
        queries = self.W_query(x).view(b, t_q, h, d_h).transpose(1, 2)  # (b, h, t_q, d_h)
        keys = self.W_key(context).view(b, t_k, h, d_h).transpose(1, 2)  # (b, h, t_k, d_h)
        values = self.W_value(context).view(b, t_k, h, d_h).transpose(1, 2)  # (b, h, t_k, d_h)
        # half precision (or autocast's): the weights and A V in float32, the context rounded
        # once, as torch's SDPA; autocast off, which would round them again
        acc = accumulation_dtype(values.dtype)
        with autocast_off(x):
            attn_weights = attention_weights(queries.to(acc), keys.to(acc), attn_mask=attn_mask)
            attn_weights = self.dropout(attn_weights)  # (b, h, t_q, t_k)
            context_vecs = (attn_weights @ values.to(acc)).to(values.dtype)  # (b, h, t_q, d_h)
        context_vecs = context_vecs.transpose(1, 2)  # (b, t_q, h, d_h)
        attn_weights = attn_weights.to(values.dtype)
        out = self.out_proj(context_vecs.reshape(b, t_q, self.d_out))  # (b, t_q, d_out)
        return (out, attn_weights) if return_weights else out


class BidirectionalSelfAttention(CrossAttention):
    """Encoder multi-head self-attention: every token attends to every (non-padding) token.

    It is :class:`CrossAttention` with the sequence as its own context, so it has the same
    parameters as the book's ``MultiHeadAttention`` (``W_query``, ``W_key``, ``W_value``,
    ``out_proj``) but no causal mask and no context_length.

    Other arguments as in :class:`CrossAttention`.

    Args:
        d_in: width of an input token, both CrossAttention's d_q and its d_kv.

    Raises:
        ValueError: as :class:`CrossAttention`, a qkv_bias that is not a bool among them.

    Examples:
        >>> _ = torch.manual_seed(123)
        >>> encoder = BidirectionalSelfAttention(d_in=3, d_out=4, dropout=0.0, num_heads=2)
        >>> padding = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])  # row 1: 2 pads
        >>> out, weights = encoder(journey_batch(), padding, return_weights=True)
        >>> weights[1, 0, 0].detach()  # no weight on the two padding tokens
        tensor([0.2644, 0.2511, 0.2509, 0.2336, 0.0000, 0.0000])
    """

    def __init__(
        self, d_in: int, d_out: int, num_heads: int, dropout: float, *, qkv_bias: bool = False,
        device: Device = None, dtype: torch.dtype | None = None,
    ) -> None:
        check_sizes(d_in=d_in)
        # qkv_bias: CrossAttention checks it too; this Raises names it
        check_flags(qkv_bias=qkv_bias)
        super().__init__(d_in, d_in, d_out, num_heads, dropout, qkv_bias=qkv_bias,
                         device=device, dtype=dtype)
        self.d_in = d_in

    @overload  # type: ignore[override]  # self-attention: no context, unlike CrossAttention
    def forward(
        self, x: Tensor, key_padding_mask: Tensor | None = None,
        return_weights: Literal[False] = False,
    ) -> Tensor: ...

    @overload
    def forward(
        self, x: Tensor, key_padding_mask: Tensor | None = None, *,
        return_weights: Literal[True],
    ) -> tuple[Tensor, Tensor]: ...

    @overload
    def forward(
        self, x: Tensor, key_padding_mask: Tensor | None = None, return_weights: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]: ...

    def forward(
        self, x: Tensor, key_padding_mask: Tensor | None = None, return_weights: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Self-attention over x (b, t, d_in) → (b, t, d_out) [, weights (b, h, t, t)].

        ``key_padding_mask`` is (b, t) bool with **True marking PADDING** (torch's
        ``nn.MultiheadAttention`` convention, not "may attend"): padded tokens get weight 0 as
        keys, so they cannot change the outputs of real tokens. No tokens (t = 0) give an empty
        (b, 0, d_out) and weights (b, h, 0, 0).
        """
        check_flags(return_weights=return_weights)
        return super().forward(x, x, key_padding_mask, return_weights)
