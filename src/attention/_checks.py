"""Shared input checks for every module of the package.

Each helper raises ``ValueError`` with a message that names the expected and the actual value,
and is called where the value enters: in a constructor or at the start of ``forward``. Modules
of the package (self_attention, causal, multihead, encoder, additive, flash, ...) import these
instead of writing their own.

Notation: b batch size, t tokens, d_in input width, d_out output width, h heads.
"""

from collections.abc import Sequence
from numbers import Integral, Real

import torch
from torch import Size, Tensor

ALIGNMENTS = ("top_left", "bottom_right")  # where a causal mask's diagonal sits when t_q != t_k


def check_dropout(p: float, name: str = "dropout") -> None:
    """Require a dropout probability: a number in [0, 1)."""
    if isinstance(p, bool) or not isinstance(p, Real) or not 0.0 <= p < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {p!r}")


def check_sizes(**sizes: int) -> None:
    """Require each named size (``d_in=3``, ``context_length=6``, ...) to be an integer >= 1.

    A bool or a float such as 2.0 is refused, even where it would compare equal to an integer:
    a size is a count, and PyTorch's layers (``nn.Linear``, ``Tensor.view``) take only integers.
    """
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, Integral):
            raise ValueError(
                f"{name} must be an integer, got {value!r} of type {type(value).__name__}"
            )
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")


def check_heads(d_out: int, num_heads: int, width_name: str = "d_out") -> None:
    """Require an integer ``num_heads >= 1`` that divides d_out (head width d_h = d_out / h).

    ``width_name`` is the width's name in the message (``d_out``, ``d_model``).
    """
    check_sizes(num_heads=num_heads)
    if d_out % num_heads != 0:
        raise ValueError(
            f"{width_name} must be divisible by num_heads, got {width_name}={d_out} and "
            f"num_heads={num_heads}"
        )


def check_rank(x: Tensor, ranks: Sequence[int] = (2, 3), name: str = "input") -> None:
    """Require ``x.dim()`` to be one of ``ranks``."""
    if x.dim() not in ranks:
        expected = " or ".join(f"{r}-d" for r in ranks)
        raise ValueError(
            f"{name} must be {expected}, got a {x.dim()}-d tensor of shape {tuple(x.shape)}"
        )


def check_input(
    x: Tensor,
    d_in: int,
    ranks: Sequence[int] = (2, 3),
    name: str = "input",
    width_name: str = "d_in",
) -> None:
    """Require a token tensor of rank in ``ranks`` whose last dimension is ``d_in``.

    ``width_name`` is the width's name in the message (``d_in``, ``d_kv``, ``d_key``, ...).
    """
    check_rank(x, ranks, name)
    if x.shape[-1] != d_in:
        raise ValueError(
            f"{name} must have last dimension {width_name}={d_in}, got {x.shape[-1]} "
            f"(shape {tuple(x.shape)})"
        )


def check_token_ids(x: Tensor, name: str) -> None:
    """Require a (b, t) tensor of integer token ids, what ``nn.Embedding`` looks up."""
    check_rank(x, (2,), name)
    if x.dtype not in (torch.int64, torch.int32):
        raise ValueError(
            f"{name} must hold integer token ids (torch.int64 or torch.int32), got {x.dtype}"
        )


def check_context_length(t: int, context_length: int) -> None:
    """Require a sequence no longer than the module's ``context_length``."""
    if t > context_length:
        raise ValueError(
            f"sequence length must be at most context_length={context_length}, got {t}"
        )


def check_mask(mask: Tensor, scores_shape: Size, name: str = "attn_mask") -> None:
    """Require a mask that broadcasts to the scores' shape (..., t_q, t_k) without growing it."""
    pairs = zip(reversed(mask.shape), reversed(scores_shape))
    if mask.dim() > len(scores_shape) or any(m not in (1, s) for m, s in pairs):
        raise ValueError(
            f"{name} must broadcast to the scores' shape {tuple(scores_shape)}, "
            f"got shape {tuple(mask.shape)}"
        )


def check_causal_options(is_causal: bool, causal_alignment: str, window: int | None) -> None:
    """The causal mask's alignment and window: known values, and only with ``is_causal``."""
    if causal_alignment not in ALIGNMENTS:
        raise ValueError(f"causal_alignment must be one of {ALIGNMENTS}, got {causal_alignment!r}")
    if window is not None and (type(window) is not int or window < 1):
        raise ValueError(f"window must be None or an integer >= 1, got {window!r}")
    if not is_causal and (window is not None or causal_alignment != "top_left"):
        raise ValueError(
            "window and causal_alignment apply to causal attention only: pass is_causal=True, "
            f"got is_causal={is_causal!r}, window={window!r}, causal_alignment={causal_alignment!r}"
        )
