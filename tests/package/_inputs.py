"""Inputs and weights shared by several test modules."""

import torch
from torch import nn


def qkv(b: int, t_q: int, t_k: int, d_k: int = 4, d_v: int = 3) -> list[torch.Tensor]:
    """float64 query (b, t_q, d_k), key (b, t_k, d_k), value (b, t_k, d_v) that require grad."""
    g = torch.Generator().manual_seed(0)
    shapes = [(b, t_q, d_k), (b, t_k, d_k), (b, t_k, d_v)]
    return [torch.randn(s, generator=g, dtype=torch.float64).requires_grad_() for s in shapes]


def scaled_qkv(*shape: int, scale: float = 1.0, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """float64 query, key and value of one ``shape``, drawn from N(0, scale²) (no grad)."""
    generator = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*shape, generator=generator, dtype=torch.float64) * scale
                 for _ in range(3))


def randomize(module: nn.Module) -> nn.Module:
    """Every parameter drawn anew, gains and biases included: nothing left at its initial value."""
    torch.manual_seed(1)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.normal_(0.0, 0.5)
    return module
