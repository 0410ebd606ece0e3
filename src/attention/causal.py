"""Causal (masked) self-attention with dropout: a token attends only to itself and earlier
tokens.

Notation (see CONTRIBUTING.md):
    b      batch size (optional: accepts (t, d_in) and (b, t, d_in))
    t      number of tokens, at most ``context_length``
    d_in   width of an input token vector
    d_out  width of queries, keys, values and context vectors; d_k = d_out

    A = dropout(softmax(Q K^T / sqrt(d_k) + M))   (..., t, t)
    Z = A V                                       (..., t, d_out)

M is 0 on and below the diagonal and -inf above it. The module keeps the upper triangle as a
bool buffer ``mask`` (True above the diagonal): a buffer moves with ``.to(device)`` and is not a
trainable parameter. It is registered with ``persistent=False``, so checkpoints do not carry it
(it is rebuilt from ``context_length``, and a checkpoint loads at any context length); a
checkpoint saved when it was persistent still loads, its ``mask`` entry ignored. Because no
checkpoint carries it, it is built again after every move of the module: ``to_empty``, which
loading a model built on the meta device uses, would leave uninitialized memory in it; and
``load_state_dict(..., assign=True)``, the other way to load one, would leave it on the meta
device, so it is built on the device of the tensors loaded.
"""

from collections.abc import Callable
from typing import Any, Self

import torch
from torch import Tensor, nn
from torch.types import Device

from ._checks import (
    accumulation_dtype,
    autocast_off,
    check_context_length,
    check_dropout,
    check_flags,
    check_input,
    check_sizes,
)
from .functional import causal_mask

__all__ = ["CausalAttention", "register_causal_mask"]


def register_causal_mask(
    module: nn.Module, context_length: int, device: Device = None
) -> None:
    """Give ``module`` the bool buffer ``mask`` (context_length, context_length), True above the
    diagonal, not saved in the state dict; an old checkpoint's ``mask`` entry is dropped on
    load.

    Like every buffer it is uninitialized after ``module.to_empty(...)``, and no checkpoint
    restores it: call this again then, or derive the module from ``CausallyMasked``, which
    builds it again after every move (as this package's owners of the mask do). A module built
    on the meta device and given a checkpoint's tensors by ``load_state_dict(...,
    assign=True)`` gets its mask built on their device.

    Args:
        module: the module that gets the buffer.
        context_length: the most tokens a call may hold.
        device: where the mask is built.

    Raises:
        ValueError: if context_length is not an integer >= 1.

    Examples:
        >>> module = torch.nn.Module()
        >>> register_causal_mask(module, 3)
        >>> module.mask, list(module.state_dict())
        (tensor([[False,  True,  True],
                [False, False,  True],
                [False, False, False]]), [])
    """
    check_sizes(context_length=context_length)
    mask = ~causal_mask(context_length, device=device)  # (t, t), True above the diagonal
    module.register_buffer("mask", mask, persistent=False)
    module.register_load_state_dict_pre_hook(_drop_saved_mask)
    module.register_load_state_dict_post_hook(_build_meta_mask)  # type: ignore[no-untyped-call]


def _drop_saved_mask(_module: nn.Module, state_dict: dict[str, Any], prefix: str,
                     *args: Any) -> None:
    """A load hook: a checkpoint of an older version saved the mask; it is rebuilt, not loaded.
    (A module-level function, so that a module holding the hook still pickles.)"""
    state_dict.pop(prefix + "mask", None)


def _build_meta_mask(module: nn.Module, _incompatible_keys: object) -> None:
    """A load hook: ``load_state_dict(..., assign=True)`` gives a module built on the meta
    device the checkpoint's tensors but no mask, which no checkpoint carries; the mask is built
    on their device, once they share one. (Module-level, so that the module still pickles.)"""
    mask = module.get_buffer("mask")
    devices = {p.device for p in module.parameters() if not p.is_meta}
    if mask.is_meta and len(devices) == 1:
        module.mask = ~causal_mask(mask.shape[-1], device=devices.pop())  # (t, t)


class CausallyMasked(nn.Module):
    """A module whose buffer ``mask`` (from :func:`register_causal_mask`) is built again from
    ``context_length`` whenever a move replaces it (``.to(device)``, ``to_empty``): a model
    built on the meta device and moved with ``to_empty`` would otherwise mask with
    uninitialized memory."""

    context_length: int
    mask: Tensor

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> Self:
        before = self.mask
        super()._apply(fn, recurse)  # type: ignore[no-untyped-call]  # torch leaves it untyped
        if self.mask is not before:  # moved: its new memory holds nothing yet (to_empty)
            self.mask = ~causal_mask(self.context_length, device=self.mask.device)
        return self


class CausalAttention(CausallyMasked):
    """Single-head causal self-attention with dropout on the attention weights.

    The causal mask for ``context_length`` tokens is a bool buffer, not saved in the state dict.

    Args:
        d_in: width of an input token.
        d_out: width of queries, keys, values and context vectors.
        context_length: the most tokens a call may hold (the size of the mask buffer).
        dropout: p_drop, the probability of zeroing an attention weight in training.
        qkv_bias: give the three projections a bias.
        device: where the parameters are created (torch's default when None).
        dtype: their dtype (torch's default when None).

    Raises:
        ValueError: if a size is not an integer >= 1, dropout is outside [0, 1), or qkv_bias
            is not a bool.

    Examples:
        >>> _ = torch.manual_seed(123)
        >>> ca = CausalAttention(d_in=3, d_out=2, context_length=6, dropout=0.0)
        >>> ca(journey_batch()).shape
        torch.Size([2, 6, 2])
    """

    def __init__(
        self, d_in: int, d_out: int, context_length: int, dropout: float, *,
        qkv_bias: bool = False, device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        check_sizes(d_in=d_in, d_out=d_out, context_length=context_length)
        check_dropout(dropout)
        check_flags(qkv_bias=qkv_bias)
        self.d_in = d_in
        self.d_out = d_out
        self.context_length = context_length
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias, device=device, dtype=dtype)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias, device=device, dtype=dtype)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias, device=device, dtype=dtype)
        self.dropout = nn.Dropout(dropout)
        register_causal_mask(self, context_length, device)

    def forward(self, x: Tensor) -> Tensor:
        """Context vectors (..., t, d_out) of the tokens x (..., t, d_in).

        Half-precision projections (x's, or those ``torch.autocast`` gives) are attended in
        float32, scores, softmax and A V, and the context is rounded once, as torch's SDPA.

        Raises:
            ValueError: if x is not (t, d_in) or (b, t, d_in), or t exceeds context_length.
        """
        check_input(x, self.d_in)
        t = x.shape[-2]
        check_context_length(t, self.context_length)
        queries = self.W_query(x)  # (..., t, d_out)
        keys = self.W_key(x)  # (..., t, d_out)
        values = self.W_value(x)  # (..., t, d_out)
        # half precision: scores, softmax and A V in float32, as torch's kernels keep them (a
        # float16 score past 65504 was inf, its row nan); the context is rounded once
        acc = accumulation_dtype(queries.dtype)
        with autocast_off(x):  # which would round the float32 scores to its dtype again
            attn_scores = queries.to(acc) @ keys.to(acc).transpose(-2, -1)  # (..., t, t)
            future = self.mask[:t, :t]  # (t, t), True above the diagonal
            attn_scores = attn_scores.masked_fill(future, float("-inf"))
            attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
            attn_weights = self.dropout(attn_weights)  # (..., t, t)
            return (attn_weights @ values.to(acc)).to(values.dtype)  # (..., t, d_out)
