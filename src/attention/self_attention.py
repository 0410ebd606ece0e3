"""Self-attention with trainable weights, the book's first two versions.

Notation (see CONTRIBUTING.md):
    b      batch size (optional: both classes accept (t, d_in) and (b, t, d_in))
    t      number of tokens
    d_in   width of an input token vector
    d_out  width of queries, keys, values and context vectors; d_k = d_out

    Q = X W_q,  K = X W_k,  V = X W_v          (..., t, d_out)
    A = softmax(Q K^T / sqrt(d_k))             (..., t, t)
    Z = A V                                    (..., t, d_out)

``SelfAttentionV1`` stores W_q, W_k, W_v as (d_in, d_out) parameters and multiplies x @ W.
``SelfAttentionV2`` uses ``nn.Linear``, which stores the transposed (d_out, d_in) weight and
initialises it better; with ``qkv_bias=False`` (the default), copying ``linear.weight.T``
into V1 makes both compute the same thing.
"""

import torch
from torch import Tensor, nn
from torch.types import Device

from ._checks import (
    Factory,
    accumulation_dtype,
    autocast_off,
    check_flags,
    check_input,
    check_sizes,
)


def _attend(queries: Tensor, keys: Tensor, values: Tensor) -> Tensor:
    """softmax(Q K^T / sqrt(d_k)) V (..., t, d_out): what the two versions share.

    Half precision (or autocast's): scores, softmax and A V in float32, as torch's kernels keep
    them (a float16 score past 65504 was inf, its row nan), and the context rounded once.
    """
    acc = accumulation_dtype(queries.dtype)
    with autocast_off(queries):  # which would round the float32 scores to its dtype again
        attn_scores = queries.to(acc) @ keys.to(acc).transpose(-2, -1)  # (..., t, t)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        return (attn_weights @ values.to(acc)).to(values.dtype)  # (..., t, d_out)


class SelfAttentionV1(nn.Module):
    """Self-attention with weight matrices of shape (d_in, d_out) drawn from U[0, 1).

    Args:
        d_in: width of an input token.
        d_out: width of queries, keys, values and context vectors.
        device: where the parameters are created (torch's default when None).
        dtype: their dtype (torch's default when None).

    Raises:
        ValueError: if d_in or d_out is not an integer >= 1.

    Examples:
        >>> _ = torch.manual_seed(123)
        >>> sa = SelfAttentionV1(d_in=3, d_out=2)
        >>> sa(journey_inputs()).detach()[1]  # the context vector of "journey"
        tensor([0.3061, 0.8210])
    """

    def __init__(
        self, d_in: int, d_out: int, *, device: Device = None, dtype: torch.dtype | None = None
    ) -> None:
        super().__init__()
        check_sizes(d_in=d_in, d_out=d_out)
        self.d_in = d_in
        factory = Factory(device=device, dtype=dtype)
        self.W_query = nn.Parameter(torch.rand(d_in, d_out, **factory))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out, **factory))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out, **factory))

    def forward(self, x: Tensor) -> Tensor:
        """Context vectors (..., t, d_out) of the tokens x (..., t, d_in).

        Raises:
            ValueError: if x is not (t, d_in) or (b, t, d_in).
        """
        check_input(x, self.d_in)
        queries = x @ self.W_query  # (..., t, d_out)
        keys = x @ self.W_key  # (..., t, d_out)
        values = x @ self.W_value  # (..., t, d_out)
        return _attend(queries, keys, values)  # (..., t, d_out)


class SelfAttentionV2(nn.Module):
    """Self-attention with ``nn.Linear`` projections (bias only if ``qkv_bias``).

    Other arguments as in :class:`SelfAttentionV1`.

    Args:
        qkv_bias: give the three projections a bias.

    Raises:
        ValueError: if d_in or d_out is not an integer >= 1, or qkv_bias is not a bool.

    Examples:
        >>> _ = torch.manual_seed(789)
        >>> sa = SelfAttentionV2(d_in=3, d_out=2)
        >>> sa(journey_batch()).shape  # (b, t, d_out)
        torch.Size([2, 6, 2])
    """

    def __init__(
        self, d_in: int, d_out: int, *, qkv_bias: bool = False, device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        check_sizes(d_in=d_in, d_out=d_out)
        check_flags(qkv_bias=qkv_bias)
        self.d_in = d_in
        factory = Factory(device=device, dtype=dtype)
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias, **factory)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias, **factory)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias, **factory)

    def forward(self, x: Tensor) -> Tensor:
        """Context vectors (..., t, d_out) of the tokens x (..., t, d_in).

        Raises:
            ValueError: if x is not (t, d_in) or (b, t, d_in).
        """
        check_input(x, self.d_in)
        queries = self.W_query(x)  # (..., t, d_out)
        keys = self.W_key(x)  # (..., t, d_out)
        values = self.W_value(x)  # (..., t, d_out)
        return _attend(queries, keys, values)  # (..., t, d_out)
