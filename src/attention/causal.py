"""Causal (masked) self-attention with dropout: a token attends only to itself and earlier tokens.

Notation (see CONTRIBUTING.md):
    b      batch size (optional: accepts (t, d_in) and (b, t, d_in))
    t      number of tokens, at most ``context_length``
    d_in   width of an input token vector
    d_out  width of queries, keys, values and context vectors; d_k = d_out

    A = dropout(softmax(Q K^T / sqrt(d_k) + M))   (..., t, t)
    Z = A V                                       (..., t, d_out)

M is 0 on and below the diagonal and -inf above it. The module keeps the upper triangle as a
buffer ``mask`` (1 above the diagonal): a buffer moves with ``.to(device)`` and is saved in the
state dict, but is not a trainable parameter.
"""

import torch
from torch import Tensor, nn

from ._checks import check_context_length, check_dropout, check_input, check_sizes


class CausalAttention(nn.Module):
    """Single-head causal self-attention with dropout on the attention weights."""

    def __init__(
        self, d_in: int, d_out: int, context_length: int, dropout: float, qkv_bias: bool = False
    ) -> None:
        super().__init__()
        check_sizes(d_in=d_in, d_out=d_out, context_length=context_length)
        check_dropout(dropout)
        self.d_in = d_in
        self.d_out = d_out
        self.context_length = context_length
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer(
            "mask", torch.triu(torch.ones(context_length, context_length), diagonal=1)
        )

    def forward(self, x: Tensor) -> Tensor:
        """Context vectors (..., t, d_out) of the tokens x (..., t, d_in)."""
        check_input(x, self.d_in)
        t = x.shape[-2]
        check_context_length(t, self.context_length)
        queries = self.W_query(x)  # (..., t, d_out)
        keys = self.W_key(x)  # (..., t, d_out)
        values = self.W_value(x)  # (..., t, d_out)
        attn_scores = queries @ keys.transpose(-2, -1)  # (..., t, t)
        future = self.mask.bool()[:t, :t]  # (t, t), True above the diagonal
        attn_scores = attn_scores.masked_fill(future, float("-inf"))
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        attn_weights = self.dropout(attn_weights)
        return attn_weights @ values  # (..., t, d_out)
