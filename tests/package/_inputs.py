"""Inputs shared by the edge-case and bad-input tests of the functional API."""

import torch


def qkv(b: int, t_q: int, t_k: int, d_k: int = 4, d_v: int = 3) -> list[torch.Tensor]:
    """float64 query (b, t_q, d_k), key (b, t_k, d_k), value (b, t_k, d_v) that require grad."""
    g = torch.Generator().manual_seed(0)
    shapes = [(b, t_q, d_k), (b, t_k, d_k), (b, t_k, d_v)]
    return [torch.randn(s, generator=g, dtype=torch.float64).requires_grad_() for s in shapes]
