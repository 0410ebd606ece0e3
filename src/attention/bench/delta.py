"""Chapter 13's chunked rules timed against causal softmax attention over t.

Notation (see CONTRIBUTING.md): b batch size, t tokens, h heads, d_h head width (d_k = d_v = d_h),
C chunk size.

Variants, on Q, K, V (b, h, t, d_h) with b = tokens // t, as the linear part:

- ``decay-chunked``: :func:`attention.delta.decayed_linear_attention`, a log decay g per head
  and token (logsigmoid of a normal draw);
- ``gated-delta-chunked``: :func:`attention.delta.gated_delta_rule` with unit keys, the same g
  and beta in [0, 1];
- ``linear-chunked``: chapter 12's linear attention with elu(x) + 1, for comparison;
- ``softmax-sdpa``: ``torch.nn.functional.scaled_dot_product_attention``, PyTorch's fused kernel.

Each rule is checked against its own recurrence in float64 before it is timed (and softmax
against causal softmax attention); FLOPs count the matrix products
(:func:`attention.delta.delta_rule_flops`, 3 times that with the backward pass).
"""

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ..delta import DeltaForm, decayed_linear_attention, delta_rule_flops, gated_delta_rule
from .linear import Form, linear_form, run_variants
from .sweep import Settings

RULES = ("decay-chunked", "gated-delta-chunked")
VARIANTS = (*RULES, "linear-chunked", "softmax-sdpa")
METHOD = (
    "causal attention on Q, K, V (b, h, t, d_h), b = tokens // t; the chunked rules of chapter 13 "
    "(log decay g = logsigmoid(N(0, 1)); unit keys and beta ~ U(0, 1) for the gated delta rule) "
    "checked against their float64 recurrence, softmax against causal softmax attention, before "
    "they are timed as the sweep times; FLOPs: matrix products (x 3 with backward)"
)


def _rule_inputs(b: int, h: int, t: int, d_h: int, generator: torch.Generator,
                 device: torch.device) -> list[Tensor]:
    """Q, K (unit rows), V (b, h, t, d_h), then g and beta (b, h, t)."""
    q, k, v = (torch.randn(b, h, t, d_h, generator=generator, device=device) for _ in range(3))
    g = F.logsigmoid(torch.randn(b, h, t, generator=generator, device=device))
    beta = torch.rand(b, h, t, generator=generator, device=device)
    return [q, F.normalize(k, dim=-1), v, g, beta]


def delta_form(name: str, chunk_size: int) -> Form:
    """The ``delta`` part's variant ``name`` (see the module docstring)."""
    if name not in RULES:
        return linear_form(name, chunk_size)
    delta = name == "gated-delta-chunked"

    def fn(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, *, form: DeltaForm = "chunked") -> Tensor:
        if delta:
            return gated_delta_rule(q, k, v, g, beta, form=form, chunk_size=chunk_size)
        return decayed_linear_attention(q, k, v, g, form=form, chunk_size=chunk_size)

    def flops(b: int, h: int, t: int, d_h: int, backward: bool) -> float:
        forward = b * h * delta_rule_flops(t, d_h, d_h, chunk_size=chunk_size, delta=delta)
        return 3.0 * forward if backward else float(forward)

    return Form(fn, lambda *x: fn(*x, form="recurrent"), flops, _rule_inputs)


def run_delta(settings: Settings, chunk_size: int = 64) -> list[dict[str, Any]]:
    """The ``delta`` rows of a results file: every head width of ``settings``, dtype, pass, t
    and variant (:func:`~attention.bench.linear.run_variants`)."""
    return run_variants(settings, chunk_size, VARIANTS, delta_form)
