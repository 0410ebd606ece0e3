"""Normalizations of a token's features: LayerNorm and RMSNorm, and the choice between them.

Notation (see CONTRIBUTING.md):
    d        width of the normalized vectors (``d_model`` in a block, ``d_h`` for QK-norm)
    γ, β     learned gain and bias, one entry per feature
    ε        ``eps``, added to the mean square (RMSNorm) or the variance (LayerNorm)

    LayerNorm(x) = γ ⊙ (x - μ) / sqrt(σ² + ε) + β       μ, σ² the mean and variance of x
    RMSNorm(x)   = γ ⊙ x / sqrt(mean(x²) + ε)             (Zhang and Sennrich, 2019)

RMSNorm drops the mean and the bias β: it rescales x but does not re-centre it. With ε inside
the square root it computes what ``torch.nn.RMSNorm`` and Meta's Llama code compute.
"""

from typing import Literal, get_args

import torch
from torch import Tensor, nn
from torch.types import Device

from ._checks import accumulation_dtype, check_flags, check_number, check_sizes

__all__ = ["NORMS", "NormKind", "RMSNorm", "make_norm", "norm_matrix"]

NormKind = Literal["layer", "rms"]
NORMS: tuple[NormKind, ...] = get_args(NormKind)


class RMSNorm(nn.Module):
    """Root-mean-square normalization over the last dimension, with a learned gain γ (d,).

    ``RMSNorm(d, eps)`` computes what ``torch.nn.RMSNorm(d, eps=eps)`` computes; unlike it,
    ``eps`` has a fixed default (10⁻⁵, Llama 2's ``norm_eps``) instead of one that follows the
    input's dtype. γ starts at ones. Half-precision inputs are normalized in float32 and
    rounded once, as torch does.

    Args:
        d: width of the normalized vectors.
        eps: ε > 0, added to the mean square; keeps the division finite for x = 0.
        offset: the gain is ``offset + weight``: 0 (the weight is γ) or, for the norms of Gemma
            and Qwen3-Next, 1 (the weight stores γ - 1, starting at zeros); the sum is taken in
            the accumulation dtype, as transformers takes it, so a bfloat16 weight's 1 + γ is
            not rounded to bfloat16.
        device: where γ is created (torch's default when None).
        dtype: its dtype (torch's default when None).

    Raises:
        ValueError: if d is not an integer >= 1, eps is not a finite number > 0, or offset is
            not a finite number >= 0.

    Examples:
        >>> RMSNorm(2)(torch.tensor([[3.0, 4.0]])).detach()
        tensor([[0.8485, 1.1314]])
    """

    def __init__(
        self, d: int, eps: float = 1e-5, *, offset: float = 0.0, device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        check_sizes(d=d)
        self.d = d
        self.eps = check_number("eps", eps, 0.0, inclusive=False)  # 0 divides a constant row by 0
        self.offset = check_number("offset", offset, 0.0)
        # γ - offset, so that γ starts at ones
        self.weight = nn.Parameter(torch.full((d,), 1.0 - self.offset, device=device, dtype=dtype))

    def gain(self, dtype: torch.dtype | None = None) -> Tensor:
        """γ = offset + weight, (d,), the sum taken in ``dtype`` (the weight's when None)."""
        weight = self.weight if dtype is None else self.weight.to(dtype)
        return weight + self.offset if self.offset else weight

    def forward(self, x: Tensor) -> Tensor:
        """γ ⊙ x / sqrt(mean(x²) + ε) for x (..., d): shape (..., d).

        Raises:
            ValueError: if x is not floating point, or not (..., d).
        """
        if not isinstance(x, Tensor) or not x.is_floating_point():  # torch's RMSNorm refuses it
            got = x.dtype if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"x must be a floating-point tensor, got {got}")
        if x.dim() == 0 or x.shape[-1] != self.d:
            raise ValueError(f"x must have shape (..., d) with d={self.d}, got {tuple(x.shape)}")
        # x's dtype, as torch.nn.RMSNorm returns whatever γ's; half precision is computed in
        # float32 and rounded once, as torch does: in float16, x² overflows once |x| > 256
        acc = accumulation_dtype(torch.promote_types(x.dtype, self.weight.dtype))
        x_acc = x.to(acc)
        mean_square = x_acc.pow(2).mean(dim=-1, keepdim=True)  # (..., 1)
        y = self.gain(acc) * (x_acc * torch.rsqrt(mean_square + self.eps))  # (..., d)
        return y.to(x.dtype)


def make_norm(
    kind: NormKind, d: int, eps: float = 1e-5, bias: bool = True, *,
    device: Device = None, dtype: torch.dtype | None = None,
) -> nn.LayerNorm | RMSNorm:
    """``nn.LayerNorm(d)`` for ``kind="layer"`` (with β unless ``bias=False``), or RMSNorm.

    Args:
        kind: ``"layer"`` or ``"rms"``.
        d: width of the normalized vectors.
        eps: ε, added to the variance or the mean square.
        bias: with LayerNorm, keep its bias β.
        device: where the parameters are created (torch's default when None).
        dtype: their dtype (torch's default when None).

    Returns:
        The new normalization module.

    Raises:
        ValueError: if kind is neither ``"layer"`` nor ``"rms"``, d is not an integer >= 1,
            eps is not a finite number > 0, or bias is not a bool.

    Examples:
        >>> make_norm("rms", 4)
        RMSNorm()
    """
    if kind not in NORMS:
        raise ValueError(f"norm must be one of {NORMS}, got {kind!r}")
    # bias: with RMSNorm too, which has no β: "no" is an error either way
    check_flags(bias=bias)
    if kind == "rms":
        return RMSNorm(d, eps, device=device, dtype=dtype)
    check_sizes(d=d)  # the checks RMSNorm makes: torch's LayerNorm takes d = 0 and eps < 0
    # the float, as RMSNorm keeps: LayerNorm would keep a 0-d tensor or a NumPy scalar as given
    eps = check_number("eps", eps, 0.0, inclusive=False)
    return nn.LayerNorm(d, eps=eps, bias=bias, device=device, dtype=dtype)


def norm_matrix(norm: nn.Module) -> Tensor:
    """The linear part Γ of a normalization as a (d, d) matrix: x Γ is γ ⊙ x, re-centered or not.

    LayerNorm computes (x Γ) / σ + β with Γ = (I - 11ᵀ/d) diag(γ), which subtracts the mean and
    then applies γ; RMSNorm computes (x Γ) / σ with Γ = diag(γ). Left out is the division by σ,
    the token's own standard deviation or root mean square: one positive number per token.

    Args:
        norm: an :class:`RMSNorm`, or a ``torch.nn.RMSNorm`` or ``torch.nn.LayerNorm`` over one
            dimension.

    Returns:
        Γ (d, d), detached.

    Raises:
        ValueError: if norm is another module.

    Examples:
        >>> norm_matrix(torch.nn.LayerNorm(2))
        tensor([[ 0.5000, -0.5000],
                [-0.5000,  0.5000]])
    """
    if isinstance(norm, RMSNorm):
        return torch.diag(norm.gain().detach())  # (d, d)
    if isinstance(norm, nn.RMSNorm) and len(norm.normalized_shape) == 1:  # torch's, as ours
        d = norm.normalized_shape[0]
        return torch.diag(norm.weight.detach() if norm.weight is not None else torch.ones(d))
    if isinstance(norm, nn.LayerNorm) and len(norm.normalized_shape) == 1:
        d = norm.normalized_shape[0]
        weight = norm.weight.detach() if norm.weight is not None else torch.ones(d)
        centering = torch.eye(d, dtype=weight.dtype, device=weight.device) - 1.0 / d  # (d, d)
        return centering @ torch.diag(weight)  # (d, d)
    raise ValueError(f"norm must be an RMSNorm or a 1-d nn.RMSNorm or nn.LayerNorm, got {norm!r}")
