"""Multi-head causal self-attention, three ways: a wrapper, split heads, and a fused projection.

Notation (see CONTRIBUTING.md):
    b      batch size
    t      number of tokens, at most ``context_length``
    d_in   width of an input token vector
    d_out  width of the output (for the wrapper: of each head)
    h      number of heads (``num_heads``)
    d_h    width of one head, d_h = d_out / h; it is the d_k of each head's scale 1 / sqrt(d_h)

``MultiHeadAttentionWrapper`` runs h independent ``CausalAttention`` heads and concatenates
their outputs: width h * d_out. ``MultiHeadAttention`` projects once to d_out, splits the
columns into h heads of width d_h, attends within each head in one batched matmul, merges the
heads back and mixes them with an output projection. ``FusedMultiHeadAttention`` computes the
same thing with one (d_in, 3 * d_out) projection for queries, keys and values, as GPT-2 does,
and can hand the attention itself to ``torch.nn.functional.scaled_dot_product_attention``.

Two dropouts, both active only in training mode, as in Hugging Face's GPT-2 (``attn_dropout``
and ``resid_dropout``; OpenAI's released GPT-2 code has no dropout):

    dropout       drops attention weights A (b, h, t, t): a query ignores some keys
    proj_dropout  drops entries of the projected output out_proj(Z) (b, t, d_out)

``proj_dropout`` defaults to 0 (off), so that the book's printed outputs stay those of the
modules without it.
"""

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._checks import (
    check_context_length,
    check_dropout,
    check_heads,
    check_input,
    check_sizes,
)
from .causal import CausalAttention


class MultiHeadAttentionWrapper(nn.Module):
    """``num_heads`` causal heads side by side; output (..., t, num_heads * d_out)."""

    def __init__(
        self,
        d_in: int,
        d_out: int,
        context_length: int,
        dropout: float,
        num_heads: int,
        qkv_bias: bool = False,
    ) -> None:
        super().__init__()
        check_sizes(num_heads=num_heads)
        self.heads = nn.ModuleList(
            CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)
            for _ in range(num_heads)
        )

    def forward(self, x: Tensor) -> Tensor:
        """Concatenated context vectors (..., t, h * d_out) of the tokens x (..., t, d_in)."""
        return torch.cat([head(x) for head in self.heads], dim=-1)  # (..., t, h * d_out)


class MultiHeadAttention(nn.Module):
    """Causal multi-head self-attention with split heads and an output projection."""

    def __init__(
        self,
        d_in: int,
        d_out: int,
        context_length: int,
        dropout: float,
        num_heads: int,
        qkv_bias: bool = False,
        proj_dropout: float = 0.0,
    ) -> None:
        """Projections d_in → d_out split into num_heads heads, and the output projection.

        ``dropout`` is the probability of dropping an attention weight, ``proj_dropout`` that
        of dropping an entry of the output projection's result; both in [0, 1), used only in
        training mode. ``context_length`` (at least 1) is the longest sequence accepted.
        """
        super().__init__()
        check_sizes(d_in=d_in, d_out=d_out, context_length=context_length)
        check_heads(d_out, num_heads)
        check_dropout(dropout)
        check_dropout(proj_dropout, "proj_dropout")
        self.d_in = d_in
        self.d_out = d_out
        self.context_length = context_length
        self.num_heads = num_heads
        self.d_h = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)  # on the attention weights
        self.proj_dropout = nn.Dropout(proj_dropout)  # on out_proj's output
        self.register_buffer(
            "mask", torch.triu(torch.ones(context_length, context_length), diagonal=1)
        )

    def forward(self, x: Tensor, return_weights: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """Context vectors (b, t, d_out) of the tokens x (b, t, d_in).

        With ``return_weights=True`` also returns the attention weights (b, h, t, t) that were
        applied to the values (after dropout, so in training mode some are zeroed or rescaled).
        """
        check_input(x, self.d_in, ranks=(3,))
        b, t, _ = x.shape
        check_context_length(t, self.context_length)
        h, d_h = self.num_heads, self.d_h
        queries = self.W_query(x).view(b, t, h, d_h).transpose(1, 2)  # (b, h, t, d_h)
        keys = self.W_key(x).view(b, t, h, d_h).transpose(1, 2)  # (b, h, t, d_h)
        values = self.W_value(x).view(b, t, h, d_h).transpose(1, 2)  # (b, h, t, d_h)
        attn_scores = queries @ keys.transpose(2, 3)  # (b, h, t, t)
        future = self.mask.bool()[:t, :t]  # (t, t), True above the diagonal
        attn_scores = attn_scores.masked_fill(future, float("-inf"))
        attn_weights = torch.softmax(attn_scores / d_h**0.5, dim=-1)
        attn_weights = self.dropout(attn_weights)
        context = (attn_weights @ values).transpose(1, 2)  # (b, t, h, d_h)
        context = context.contiguous().view(b, t, self.d_out)  # (b, t, d_out)
        out = self.proj_dropout(self.out_proj(context))  # (b, t, d_out)
        return (out, attn_weights) if return_weights else out


class FusedMultiHeadAttention(nn.Module):
    """Causal multi-head self-attention with one fused QKV projection, as in GPT-2.

    ``use_sdpa`` chooses between the explicit computation and PyTorch's fused
    ``F.scaled_dot_product_attention`` (which picks a FlashAttention-style kernel when it can);
    both give the same result.
    """

    def __init__(
        self,
        d_in: int,
        d_out: int,
        context_length: int,
        dropout: float,
        num_heads: int,
        qkv_bias: bool = False,
        use_sdpa: bool = True,
        proj_dropout: float = 0.0,
    ) -> None:
        """One fused (d_in, 3 d_out) projection and the output projection.

        Arguments as in :class:`MultiHeadAttention`; ``use_sdpa`` picks the attention's path.
        """
        super().__init__()
        check_sizes(d_in=d_in, d_out=d_out, context_length=context_length)
        check_heads(d_out, num_heads)
        check_dropout(dropout)
        check_dropout(proj_dropout, "proj_dropout")
        self.d_in = d_in
        self.d_out = d_out
        self.context_length = context_length
        self.num_heads = num_heads
        self.d_h = d_out // num_heads
        self.use_sdpa = use_sdpa
        self.qkv = nn.Linear(d_in, 3 * d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)  # on the attention weights
        self.proj_dropout = nn.Dropout(proj_dropout)  # on out_proj's output
        self.register_buffer(
            "mask", torch.triu(torch.ones(context_length, context_length), diagonal=1)
        )

    def forward(self, x: Tensor) -> Tensor:
        """Context vectors (b, t, d_out) of the tokens x (b, t, d_in)."""
        check_input(x, self.d_in, ranks=(3,))
        b, t, _ = x.shape
        check_context_length(t, self.context_length)
        h, d_h = self.num_heads, self.d_h
        queries, keys, values = self.qkv(x).split(self.d_out, dim=2)  # 3 x (b, t, d_out)
        queries = queries.view(b, t, h, d_h).transpose(1, 2)  # (b, h, t, d_h)
        keys = keys.view(b, t, h, d_h).transpose(1, 2)  # (b, h, t, d_h)
        values = values.view(b, t, h, d_h).transpose(1, 2)  # (b, h, t, d_h)
        if self.use_sdpa:
            dropout_p = self.dropout.p if self.training else 0.0
            context = F.scaled_dot_product_attention(
                queries, keys, values, dropout_p=dropout_p, is_causal=True
            )  # (b, h, t, d_h)
        else:
            # As in MultiHeadAttention, with fewer passes over the (b h, t, t) scores: the
            # product applies the scale (alpha), and the mask is written into it in place.
            q, k, v = (y.reshape(b * h, t, d_h) for y in (queries, keys, values))  # (b h, t, d_h)
            attn_scores = torch.baddbmm(
                q.new_zeros(()), q, k.transpose(1, 2), beta=0, alpha=d_h**-0.5
            )  # (b h, t, t), Q Kᵀ / sqrt(d_h)
            future = self.mask[:t, :t].bool()  # (t, t), True above the diagonal
            attn_scores.masked_fill_(future, float("-inf"))  # (b h, t, t)
            attn_weights = self.dropout(torch.softmax(attn_scores, dim=-1))
            context = torch.bmm(attn_weights, v).view(b, h, t, d_h)  # (b, h, t, d_h)
        context = context.transpose(1, 2).contiguous().view(b, t, self.d_out)  # (b, t, d_out)
        return self.proj_dropout(self.out_proj(context))  # (b, t, d_out)

    @classmethod
    def from_multihead(cls, mha: MultiHeadAttention) -> "FusedMultiHeadAttention":
        """A fused module computing exactly what ``mha`` computes (its weights, stacked).

        The fused weight is W_query, W_key and W_value stacked along the output dimension, so
        that ``qkv(x)`` splits into the three projections; both dropout probabilities and the
        training mode are carried over. Draws (and discards) a fresh random initialization
        first, so it advances the global random number generator.
        """
        fused = cls(
            mha.d_in,
            mha.d_out,
            mha.context_length,
            mha.dropout.p,
            mha.num_heads,
            qkv_bias=mha.W_query.bias is not None,
            proj_dropout=mha.proj_dropout.p,
        ).to(device=mha.W_query.weight.device, dtype=mha.W_query.weight.dtype)
        projections = (mha.W_query, mha.W_key, mha.W_value)
        with torch.no_grad():
            fused.qkv.weight.copy_(torch.cat([p.weight for p in projections]))  # (3 d_out, d_in)
            if fused.qkv.bias is not None:
                fused.qkv.bias.copy_(torch.cat([p.bias for p in projections]))  # (3 d_out,)
            fused.out_proj.load_state_dict(mha.out_proj.state_dict())
        return fused.train(mha.training)
