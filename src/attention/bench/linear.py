"""Linear attention's three forms timed against causal softmax attention over t.

Notation (see CONTRIBUTING.md): b batch size, t tokens, h heads, d_h head width (d_k = d_v = d_h,
and the feature width r = d_h for elu(x) + 1), C chunk size.

Every kernel gets causal Q, K, V of shape (b, h, t, d_h), b = tokens // t and h = d_model / d_h as
in the sweep's kernel level. The variants:

- ``linear-parallel``, ``linear-recurrent``, ``linear-chunked``:
  :func:`attention.linear.linear_attention` with elu(x) + 1, in each form (C = ``chunk_size``);
- ``softmax-explicit``: the package's :func:`attention.scaled_dot_product_attention`, which
  builds the t x t weights, like the parallel form;
- ``softmax-sdpa``: ``torch.nn.functional.scaled_dot_product_attention``, PyTorch's fused kernel.

Linear attention is not softmax attention, so each is checked against its own definition in
float64 first: the linear forms against the written-out parallel sum (features, lower triangle,
row sums), the softmax variants against causal softmax attention. The largest error relative to
the reference's largest entry, in the output and, with the backward pass, in the gradients, must
stay under the sweep's tolerance, or the row is "failed" and not timed.

FLOPs: the linear forms count their matrix products
(:func:`attention.linear.linear_attention_flops`; 3 times that with the backward pass, which
computes two products of the same size per product); the softmax variants the sweep's
4 b h t^2 d_h, halved for causal (x 3.5 with the backward).
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor

from ..flops import attention_flops
from ..functional import scaled_dot_product_attention
from ..linear import Form as LinearForm
from ..linear import elu_plus_one, linear_attention, linear_attention_flops
from .rows import LinearRow
from .sweep import TOLERANCE, Settings, error_reason, exceeds, kernel_problems, relative_error, worst_error
from .timing import time_cpu, time_cuda

FORM_VARIANTS = ("linear-parallel", "linear-recurrent", "linear-chunked")
SOFTMAX_VARIANTS = ("softmax-explicit", "softmax-sdpa")
METHOD = (
    "causal attention on Q, K, V (b, h, t, d_h), b = tokens // t; each variant checked against its "
    "own float64 definition (linear: the parallel sum with elu(x) + 1; softmax: causal softmax "
    "attention) before it is timed as the sweep times; FLOPs: matrix products of the linear form "
    "(x 3 with backward), 4 b h t^2 d_h / 2 for softmax (x 3.5 with backward)"
)


def linear_reference(query: Tensor, key: Tensor, value: Tensor) -> Tensor:
    """Causal linear attention with elu(x) + 1, written out (call it in float64): (b, h, t, d_h)."""
    phi_q, phi_k = elu_plus_one(query), elu_plus_one(key)  # (b, h, t, d_h)
    kernel = (phi_q @ phi_k.transpose(-2, -1)).tril()  # (b, h, t, t)
    return (kernel @ value) / kernel.sum(dim=-1, keepdim=True)  # (b, h, t, d_h)


def qkv_inputs(b: int, h: int, t: int, d_h: int, generator: torch.Generator,
               device: torch.device) -> list[Tensor]:
    """Q, K, V (b, h, t, d_h) each, N(0, 1), in float32 (the caller casts)."""
    return [torch.randn(b, h, t, d_h, generator=generator, device=device) for _ in range(3)]


@dataclass(frozen=True)
class Form:
    """A variant as :func:`measure_variant` measures it: the call, its float64 reference, its FLOPs
    (b, h, t, d_h, backward) and its inputs; the first ``grad_inputs`` inputs get gradients."""

    fn: Callable[..., Tensor]
    reference: Callable[..., Tensor]
    flops: Callable[[int, int, int, int, bool], float]
    inputs: Callable[[int, int, int, int, torch.Generator, torch.device], list[Tensor]] = qkv_inputs
    grad_inputs: int = 3


def linear_form(name: str, chunk_size: int) -> Form:
    """The linear part's variants: a linear form with elu(x) + 1, or causal softmax attention."""
    softmax = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    causal = lambda b, h, t, d_h, backward: attention_flops(  # noqa: E731
        b, h, t, d_h, causal=True, backward=backward)
    if name in FORM_VARIANTS:
        form = cast(LinearForm, name.removeprefix("linear-"))  # a form name, as FORM_VARIANTS hold

        def flops(b: int, h: int, t: int, d_h: int, backward: bool) -> float:
            forward = b * h * linear_attention_flops(
                t, d_h, d_h, form, is_causal=True, chunk_size=chunk_size
            )
            return 3.0 * forward if backward else float(forward)

        return Form(lambda q, k, v: linear_attention(
            q, k, v, is_causal=True, form=form, chunk_size=chunk_size), linear_reference, flops)
    if name == "softmax-explicit":
        return Form(lambda q, k, v: scaled_dot_product_attention(q, k, v, is_causal=True),
                    softmax, causal)
    return Form(softmax, softmax, causal)


def measure_variant(
    name: str, form: Form, b: int, h: int, t: int, d_h: int, dtype: torch.dtype, backward: bool,
    settings: Settings, chunk_size: int = 64, seed: int = 123,
) -> LinearRow:
    """One row: check the variant against its float64 reference, then time it."""
    device = settings.device
    row = LinearRow(
        variant=name, pass_name="forward+backward" if backward else "forward", b=b, h=h, t=t,
        d_h=d_h, chunk_size=chunk_size, dtype=str(dtype).removeprefix("torch."), status="ok",
        reason=None, max_rel_err=None, median_s=None, iqr_s=None, repeats=None, number=None,
        flops=None, tflops=None,
    )
    generator = torch.Generator(device).manual_seed(seed)
    inputs = [x.to(dtype).requires_grad_(backward and i < form.grad_inputs)
              for i, x in enumerate(form.inputs(b, h, t, d_h, generator, device))]
    grad_out = None

    def call() -> Tensor:
        nonlocal grad_out
        out = form.fn(*inputs)
        if backward:
            if grad_out is None:  # the output's shape, drawn once
                grad_out = torch.randn(out.shape, generator=generator, device=device).to(dtype)
            out.backward(grad_out)
        return out

    try:
        began = time.perf_counter()
        out = call()  # the first call is checked, and sizes the timer
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - began
        double = [x.detach().double().requires_grad_(x.requires_grad) for x in inputs]
        want = form.reference(*double)
        errors = [relative_error(out.detach(), want.detach())]
        if backward:  # the gradients of the first call, against the reference's
            # the first call drew grad_out and filled the grads (torch types them Tensor | None)
            want.backward(cast(Tensor, grad_out).double())
            errors += [relative_error(cast(Tensor, x.grad), cast(Tensor, x64.grad))
                       for x, x64 in zip(inputs, double) if x.requires_grad]
        error = worst_error(errors)
        row = replace(row, max_rel_err=error)
        del out, want
        if exceeds(error, TOLERANCE[dtype]):
            reason = f"relative error {error:.2e} > {TOLERANCE[dtype]:.0e}"
            return replace(row, status="failed", reason=reason)
        if device.type == "cuda":
            timing = time_cuda(
                call, seconds, settings.repeats, settings.max_time, settings.warmup_s
            )
        else:
            timing = time_cpu(call, seconds, settings.repeats, settings.min_time, settings.max_time)
    except Exception as error:  # recorded in the results, never hidden
        status, reason = error_reason(error)
        return replace(row, status=status, reason=reason)
    flops = form.flops(b, h, t, d_h, backward)
    return replace(row, median_s=timing.median_s, iqr_s=timing.iqr_s, repeats=timing.repeats,
                   number=timing.number, flops=flops, tflops=flops / timing.median_s / 1e12)


def measure_linear(
    name: str, b: int, h: int, t: int, d_h: int, dtype: torch.dtype, backward: bool,
    settings: Settings, chunk_size: int = 64, seed: int = 123,
) -> LinearRow:
    """One row of the linear part: :func:`measure_variant` with the variant ``name``."""
    return measure_variant(name, linear_form(name, chunk_size), b, h, t, d_h, dtype, backward, settings,
                        chunk_size, seed)


def run_variants(
    settings: Settings, chunk_size: int, variants: tuple[str, ...],
    form_of: Callable[[str, int], Form],
) -> list[dict[str, Any]]:
    """:class:`~attention.bench.rows.LinearRow` s as JSON, one per head width of ``settings``,
    dtype, pass, t and variant, each ``form_of(variant, chunk_size)`` measured."""
    rows = []
    for p in kernel_problems(settings):
        for name in variants:
            row = measure_variant(name, form_of(name, chunk_size), p.b, p.h, p.t, p.d_h, p.dtype,
                                  p.backward, settings, chunk_size, settings.seed)
            rows.append(row.to_json())
    return rows


def run_linear(settings: Settings, chunk_size: int = 64) -> list[dict[str, Any]]:
    """The ``linear`` rows of a results file: every head width of ``settings``, dtype, pass, t
    and variant (:func:`run_variants`)."""
    return run_variants(settings, chunk_size, (*FORM_VARIANTS, *SOFTMAX_VARIANTS), linear_form)
