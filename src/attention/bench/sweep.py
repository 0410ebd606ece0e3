"""Run the sweep: every problem, every variant; check, time, measure memory; collect JSON rows.

Notation (see CONTRIBUTING.md): b batch size, t tokens, h heads, d_h head width, d = h * d_h.

A sweep may be cut into stages (:class:`Stage`), run in order: a preset puts what matters most
first, so that a run stopped by its time budget (or killed) has measured that. After every row the
caller's ``save`` writes the document, so nothing finished is lost.

For each problem (level, t, dtype, pass) the inputs and a float64 reference are made once. Each
variant is then built and its first call, run under the profiler, is compared with the reference;
the profiler records the kernels that actually ran and the peak of tensor memory. (A compiled
variant's first call compiles it, so a second call is profiled.) Gradients are allocated, as zeros,
before that call, so that its memory is that of any later call. If the check passed, the variant
is timed. A variant that cannot run gets a row with its status and the reason instead of a number.
"""

import dataclasses
import functools
import gc
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, cast

import torch
from tqdm import tqdm

from ..flops import attention_flops, device_bandwidth, device_peak, projection_flops
from .provenance import load_average, provenance
from .rows import Row
from .schema import SCHEMA
from .timing import cuda_peak_bytes, profiled_call, time_cpu, time_cuda
from .variants import Inputs, Problem, Reference, Unsupported, Variant, make_call, make_inputs, reference, variants_for

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
TOLERANCE = {torch.float32: 2e-3, torch.bfloat16: 5e-2, torch.float16: 2e-2}
PASSES = {"forward": False, "forward+backward": True}


@dataclass(frozen=True)
class Stage:
    """A slice of the sweep: these dtypes, these t (None: all of the sweep's), and eager variants,
    compiled ones, or both (``compiled`` False, True or None)."""

    dtypes: tuple[str, ...]
    seq_lens: tuple[int, ...] | None = None
    compiled: bool | None = None


@dataclass(frozen=True)
class Settings:
    """Everything that defines a sweep (the command-line options, parsed)."""

    device: torch.device
    levels: tuple[str, ...]
    seq_lens: tuple[int, ...]
    d_model: int
    heads: int
    head_dims: tuple[int, ...]
    tokens: int
    batch: int | None
    dtypes: tuple[str, ...]
    passes: tuple[str, ...]
    variants: tuple[str, ...] | None
    compile: bool
    memory: bool
    repeats: int
    min_time: float
    max_time: float
    seed: int
    peak_tflops: float | None = None
    peak_source: str | None = None
    progress: bool = True
    stages: tuple[Stage, ...] | None = None
    warmup_s: float = 0.2
    cuda_graphs: bool = False  # GPU: time each call replayed from a CUDA graph (no host time)

    def batch_for(self, t: int) -> int:
        """b for sequence length t: ``batch`` if given, else ``tokens // t`` (at least 1)."""
        return self.batch if self.batch is not None else max(1, self.tokens // t)


def kernel_problems(settings: Settings) -> Iterator[Problem]:
    """The kernel problems of the sweep, whatever its levels: head widths × dtypes × passes ×
    sequence lengths, d_model / d_h heads each (the parts beside the main sweep measure these)."""
    return problems(replace(settings, levels=("kernel",)))


def problems(settings: Settings) -> Iterator[Problem]:
    """Every problem of the sweep: levels × head widths × dtypes × passes × sequence lengths.

    Layers use ``heads`` heads of width d_model / heads; kernels keep d = h * d_h = d_model, so
    every head width gets d_model / d_h heads and the same FLOPs.
    """
    s = settings
    for level in s.levels:
        if level == "layer":
            shapes = [(s.heads, s.d_model // s.heads)]
        else:
            shapes = [(s.d_model // d_h, d_h) for d_h in s.head_dims]
        for h, d_h in shapes:
            for dtype in s.dtypes:
                for pass_name in s.passes:
                    for t in s.seq_lens:
                        b, backward = s.batch_for(t), PASSES[pass_name]
                        yield Problem(level, b, t, h, d_h, DTYPES[dtype], s.device, backward)


def work(settings: Settings) -> list[tuple[Problem, list[Variant]]]:
    """Every problem of the sweep with the variants to run on it, stage by stage, in order."""
    names = list(settings.variants) if settings.variants else None
    stages = settings.stages or (Stage(settings.dtypes),)
    todo = []
    for stage in stages:
        part = dataclasses.replace(settings, dtypes=stage.dtypes, seq_lens=stage.seq_lens or settings.seq_lens)
        for problem in problems(part):
            chosen = [v for v in variants_for(problem.level, names)
                      if stage.compiled is None or v.compiled == stage.compiled]
            if chosen:
                todo.append((problem, chosen))
    return todo


def problem_flops(problem: Problem, out_proj: bool) -> float:
    """FLOPs of one call: attention core, plus the projections for a layer."""
    p = problem
    flops = attention_flops(p.b, p.h, p.t, p.d_h, causal=True, backward=p.backward)
    if p.level == "layer":
        flops += projection_flops(p.b, p.t, p.d, p.d, out_proj=out_proj, backward=p.backward)
    return flops


def _precision(problem: Problem) -> str:
    if problem.dtype == torch.float32:
        tf32 = problem.device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32
        return "tf32" if tf32 else "fp32"
    return {torch.bfloat16: "bf16", torch.float16: "fp16"}[problem.dtype]


def _peak(
    settings: Settings, problem: Problem, device_name: str, measured: dict[str, Any]
) -> dict[str, object]:
    if settings.peak_tflops is not None:
        source = settings.peak_source or "given on the command line"
        return {"tflops": settings.peak_tflops, "source": source}
    dtype = str(problem.dtype).removeprefix("torch.")
    if dtype in measured:
        return measured[dtype]
    peak = device_peak(device_name, _precision(problem))
    if peak is None:
        return {"tflops": None, "source": "peak unknown: no documented peak for this device is on file"}
    return {"tflops": peak.tflops, "source": peak.source}


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want).abs().max() / want.abs().max().clamp_min(1e-30))


def worst_error(errors: list[float]) -> float:
    """The largest of ``errors``; NaN if one is NaN (``max`` keeps or drops a NaN by its place)."""
    return math.nan if any(math.isnan(e) for e in errors) else max(errors)


def exceeds(error: float, tolerance: float) -> bool:
    """Whether a check failed: a NaN error fails it, which ``error > tolerance`` would pass."""
    return not error <= tolerance


def error_reason(error: BaseException) -> tuple[str, str]:
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    if isinstance(error, torch.OutOfMemoryError) or "out of memory" in message.lower():
        return "skipped", f"out of memory: {message}"
    return "unsupported", f"{type(error).__name__}: {message}"


def measure(
    variant: Variant, problem: Problem, inputs: Inputs, refs: Reference, settings: Settings,
    peak: dict[str, Any],
) -> Row:
    """One result row: check the variant against the reference, then profile, time, measure.

    ``refs`` caches the problem's reference (see :func:`~attention.bench.variants.reference`).
    """
    p = problem
    row = Row(
        level=p.level, variant=variant.name, summary=variant.summary,
        pass_name="forward+backward" if p.backward else "forward",
        b=p.b, t=p.t, h=p.h, d_h=p.d_h, d=p.d, dtype=str(p.dtype).removeprefix("torch."),
        status="ok", reason=None, backend=None, ops=[], max_rel_err=None, median_s=None, iqr_s=None,
        repeats=None, number=None, flops=None, tflops=None, peak_tflops=peak["tflops"], pct_of_peak=None,
        peak_bytes=None,
    )
    if variant.compiled and not settings.compile:
        return replace(row, status="skipped", reason="torch.compile turned off (--no-compile)")
    cuda = p.device.type == "cuda"
    try:
        built = variant.build(p, inputs)
        call = make_call(built, p, inputs)
        for tensor in (*inputs.tensors, *built.params):  # gradients exist before any call, as zeros
            tensor.grad = torch.zeros_like(tensor) if p.backward else None
        profile = functools.partial(profiled_call, call, memory=settings.memory and not cuda)
        if variant.compiled:
            out = call()  # the first call compiles: it is checked, and a second one is profiled
        else:
            out, seen, seconds, peak_bytes = profile()  # checked and profiled at once
        if not refs:
            refs |= reference(p, inputs)
        want_out, want_grads = refs[built.out_proj]
        errors = [relative_error(out, want_out)]
        # the backward pass filled each input's grad (torch types it Tensor | None)
        errors += [relative_error(cast(torch.Tensor, x.grad), g) for x, g in zip(inputs.tensors, want_grads)]
        del out
        if variant.compiled:
            _, seen, seconds, peak_bytes = profile()
        error = worst_error(errors)
        row = replace(row, max_rel_err=error, backend=seen["sdpa_backend"] or variant.path,
                      ops=seen["ops"], peak_bytes=peak_bytes, gpu_kernels=seen["gpu_kernels"])
        if exceeds(error, TOLERANCE[p.dtype]):
            return replace(row, status="failed", reason=f"relative error {error:.2e} > {TOLERANCE[p.dtype]:.0e}")
        if variant.compiled and not seen["compiled"]:
            return replace(row, status="failed", reason="no torch.compile region ran")
        if cuda:
            timing = time_cuda(call, seconds, settings.repeats, settings.max_time, settings.warmup_s,
                               graph=settings.cuda_graphs)
            row = replace(row, peak_bytes=cuda_peak_bytes(call) if settings.memory else None)
        else:
            timing = time_cpu(call, seconds, settings.repeats, settings.min_time, settings.max_time)
    except Unsupported as unsupported:
        return replace(row, status="unsupported", reason=str(unsupported))
    except Exception as error:  # recorded in the results, never hidden
        status, reason = error_reason(error)
        return replace(row, status=status, reason=reason)
    flops = problem_flops(p, built.out_proj)
    tflops = flops / timing.median_s / 1e12
    return replace(
        row, kernel_config=built.config() if built.config else None, median_s=timing.median_s, iqr_s=timing.iqr_s, repeats=timing.repeats, number=timing.number,
        flops=flops, tflops=tflops, pct_of_peak=None if peak["tflops"] is None else 100 * tflops / peak["tflops"],
    )


def start_document(
    settings: Settings, command: str, measured_peaks: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A results document with provenance, settings and peaks, and no rows yet.

    ``measured_peaks`` (from :func:`attention.bench.peaks.measure_peaks`) go into ``peaks``; on a
    GPU in the datasheet table, its documented bandwidth is added as ``peaks["bandwidth"]``.
    """
    record = provenance(settings.device, command)
    record["load_average_start"] = load_average()
    peaks = dict(measured_peaks or {})
    bandwidth = device_bandwidth(str(record["device_name"])) if settings.device.type == "cuda" else None
    if bandwidth is not None and "bandwidth" not in peaks:
        peaks["bandwidth"] = {"bytes_per_s": bandwidth.bytes_per_s, "source": bandwidth.source}
    return {"schema": SCHEMA, "provenance": record, "settings": settings_dict(settings), "peaks": peaks,
            "results": []}


def run_sweep(
    settings: Settings, command: str, measured_peaks: dict[str, Any] | None = None,
    doc: dict[str, Any] | None = None,
    save: Callable[[], None] | None = None, deadline: float | None = None,
) -> dict[str, Any]:
    """Run the whole sweep and return the results document (see :mod:`attention.bench.schema`).

    ``command`` is the command line that asked for it, recorded with the results; a dtype in
    ``measured_peaks`` is compared with that measured peak instead of a datasheet's. Rows are
    appended to ``doc`` (a new document if None) and ``save()`` is called after each. Once
    ``time.monotonic()`` passes ``deadline`` no further row is started, and ``doc["stopped"]``
    says so.
    """
    doc = doc if doc is not None else start_document(settings, command, measured_peaks)
    record, peaks, measured = doc["provenance"], doc["peaks"], measured_peaks or {}
    todo = work(settings)
    rows: list[dict[str, Any]] = doc["results"]
    bar = tqdm(total=sum(len(v) for _, v in todo), disable=not settings.progress, unit="variant")
    for problem, variants in todo:
        if deadline is not None and time.monotonic() > deadline:
            doc["stopped"] = f"time budget spent after {len(rows)} rows; the rest of the sweep was not run"
            break
        inputs = make_inputs(problem, settings.seed)
        refs: Reference = {}  # filled by the first variant measured
        peak = _peak(settings, problem, str(record["device_name"]), measured)
        peaks[str(problem.dtype).removeprefix("torch.")] = peak
        for variant in variants:
            bar.set_description(f"{problem.level} t={problem.t} {variant.name}")
            rows.append(measure(variant, problem, inputs, refs, settings, peak).to_json())
            if problem.device.type == "cuda":
                torch.cuda.empty_cache()  # what a variant (or its out-of-memory error) left cached
            if save is not None:
                save()
            bar.update()
        del inputs, refs
        gc.collect()
    bar.close()
    record["load_average_end"] = load_average()
    return doc


def settings_dict(settings: Settings) -> dict[str, object]:
    """The settings as JSON-ready values."""
    out = {k: v for k, v in settings.__dict__.items() if k != "progress"}
    out["device"] = str(settings.device)
    for key in ("levels", "seq_lens", "head_dims", "dtypes", "passes", "variants"):
        out[key] = None if out[key] is None else list(out[key])
    if settings.stages is not None:
        out["stages"] = [
            {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(stage).items()}
            for stage in settings.stages
        ]
    return out
