"""The goals the benchmark holds the package to, measured in the same run as the sweep.

1. Speed: our fused layer through SDPA (``fused-sdpa``) within 5% of
   ``torch.nn.MultiheadAttention(need_weights=False)`` (``torch-mha``) on CPU at GPT-2-small
   (d = 768, h = 12), t = 1024; and how much slower the book's explicit ``MultiHeadAttention``
   (``mha``) is. Read off the sweep's own rows, so the sweep must include that point.
2. Memory: ``flash_attention``'s peak memory at t = 8192 at most 5% of the explicit path's
   (``attention.scaled_dot_product_attention``), forward, float32, each measured on its own.

And two speed goals measured on their own (``--parts goals``, without the sweep):

3. ``flash_attention`` at most 1.5 times the time of ``F.scaled_dot_product_attention`` (torch
   picks the backend) at (b, h, t, d_h) = (1, 12, 2048, 64), causal, float32, forward and
   forward+backward.
4. The fused explicit path (``fused-explicit``) not slower than the book's unfused
   ``MultiHeadAttention`` (``mha``), at the point of goal 1 (t = 1024, d = 768, h = 12, b = 4).

Goals 1 to 4 are CPU goals: on a GPU ``flash_attention``'s tiles are PyTorch operations, each a
kernel launch, and cannot compete with a fused kernel. The GPU's goals, the Triton kernel's speed
against cuDNN and SDPA's FlashAttention-2 backend (``book.appendix.tables.GPU_GOALS``), are read
off the sweep's rows by the appendix.

A goal that was not measured says so and why; a goal that was missed says so too.
"""

from typing import Any, cast

import torch
import torch.nn.functional as F

from .memprobe import measure_in_subprocess
from .sweep import Settings, measure
from .timing import cuda_peak_bytes
from .variants import Built, Inputs, Problem, Reference, Variant, get_variant, make_call, make_inputs

SPEED_TOLERANCE = 1.05
MEMORY_FRACTION = 0.05
FLASH_TARGET = 1.5
FUSED_TARGET = 1.0
FLASH_GOAL_SHAPE = (1, 12, 2048, 64)  # (b, h, t, d_h)
FUSED_GOAL_SHAPE = (4, 12, 1024, 64)  # (b, h, t, d_h), d = 768


def _sdpa_default(p: Problem, inp: Inputs) -> Built:
    q, k, v = inp.tensors
    return Built(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))


SDPA_DEFAULT = Variant("sdpa", "kernel", "F.scaled_dot_product_attention, torch picks the backend",
                       _sdpa_default, "sdpa: no fused kernel seen")


def _find(rows: list[dict[str, Any]], variant: str, **where: object) -> dict[str, Any] | None:
    for row in rows:
        if row["variant"] == variant and row["status"] == "ok" and all(row[k] == v for k, v in where.items()):
            return row
    return None


def speed_goals(
    rows: list[dict[str, Any]], t: int = 1024, d: int = 768, h: int = 12
) -> list[dict[str, Any]]:
    """For each dtype and pass measured at the goal's point: the time ratios of the goal."""
    points = sorted({(r["dtype"], r["pass"]) for r in rows if r["level"] == "layer"})
    goals = []
    for dtype, pass_name in points:
        where = {"level": "layer", "t": t, "d": d, "h": h, "dtype": dtype, "pass": pass_name}
        fused, torch_mha, book = (_find(rows, n, **where) for n in ("fused-sdpa", "torch-mha", "mha"))
        goal: dict[str, object] = {"t": t, "d": d, "h": h, "dtype": dtype, "pass": pass_name}
        if fused is None or torch_mha is None:
            reason = f"the sweep has no ok fused-sdpa and torch-mha rows at t={t}, d={d}, h={h}"
            goals.append(goal | {"status": "not measured", "reason": reason})
            continue
        ratio = fused["median_s"] / torch_mha["median_s"]
        goal |= {
            "b": fused["b"],
            "fused_sdpa_s": fused["median_s"], "torch_mha_s": torch_mha["median_s"],
            "fused_sdpa_iqr_s": fused["iqr_s"], "torch_mha_iqr_s": torch_mha["iqr_s"],
            "fused_sdpa_backend": fused["backend"], "torch_mha_backend": torch_mha["backend"],
            "ratio_fused_sdpa_to_torch_mha": ratio,
            "status": "met" if ratio <= SPEED_TOLERANCE else "missed",
        }
        if book is not None:
            goal |= {
                "mha_s": book["median_s"],
                "ratio_mha_to_fused_sdpa": book["median_s"] / fused["median_s"],
                "ratio_mha_to_torch_mha": book["median_s"] / torch_mha["median_s"],
            }
        goals.append(goal)
    return goals


def memory_goal(device: torch.device, t: int, b: int, h: int, d_h: int, seed: int) -> dict[str, object]:
    """Peak bytes of ``flash_attention`` and of the explicit path on one float32 forward problem.

    On CPU the goal is judged on the rise of peak RSS, each variant in its own fresh process
    (:mod:`attention.bench.memprobe`), with the allocator's count of tensor bytes recorded next
    to it. On GPU: ``torch.cuda.max_memory_allocated``.
    """
    problem = Problem("kernel", b, t, h, d_h, torch.float32, device, backward=False)
    goal: dict[str, object] = {"t": t, "b": b, "h": h, "d_h": d_h, "dtype": "float32", "pass": "forward"}
    peaks: dict[str, Any] = {}  # bytes, or why the measure failed
    for name in ("explicit", "flash_attention"):
        if device.type == "cpu":
            measured = measure_in_subprocess(problem, name, seed)
            peaks[name] = measured.get("rss_peak_bytes", measured.get("error"))
            goal[f"{name}_allocator_peak_bytes"] = measured.get("allocator_peak_bytes")
            continue
        inputs = make_inputs(problem, seed)
        call = make_call(get_variant(name).build(problem, inputs), problem, inputs)
        try:
            call()  # warm-up
            peaks[name] = cuda_peak_bytes(call)
        except torch.OutOfMemoryError as error:
            peaks[name] = f"out of memory: {str(error).splitlines()[0]}"
        del inputs, call
        torch.cuda.empty_cache()
    method = "rise of peak RSS, a fresh process each" if device.type == "cpu" else "max_memory_allocated"
    goal |= {"method": method, "explicit_peak_bytes": peaks["explicit"],
             "flash_attention_peak_bytes": peaks["flash_attention"]}
    if not all(isinstance(v, int) for v in peaks.values()):
        return goal | {"status": "not measured", "reason": f"a measurement failed: {peaks}"}
    if min(peaks.values()) == 0:
        reason = "a reading of 0 bytes is below the measure's resolution"
        return goal | {"status": "not measured", "reason": reason}
    fraction = peaks["flash_attention"] / peaks["explicit"]
    return goal | {"fraction": fraction, "status": "met" if fraction <= MEMORY_FRACTION else "missed"}


def _ratio_goal(name: str, variant: Variant, baseline: Variant, problem: Problem, target: float,
                settings: Settings) -> dict[str, object]:
    """One measured ratio: ``variant``'s median time over ``baseline``'s, in the same run."""
    p = problem
    goal: dict[str, object] = {
        "name": name, "variant": variant.name, "baseline": baseline.name, "level": p.level,
        "b": p.b, "h": p.h, "t": p.t, "d_h": p.d_h, "dtype": str(p.dtype).removeprefix("torch."),
        "pass": "forward+backward" if p.backward else "forward", "target": target,
    }
    inputs = make_inputs(p, settings.seed)
    refs: Reference = {}  # filled by the first variant measured
    peak = {"tflops": None, "source": ""}
    rows = {v.name: measure(v, p, inputs, refs, settings, peak) for v in (variant, baseline)}
    bad = {n: r.reason for n, r in rows.items() if r.status != "ok"}
    if bad:
        return goal | {"status": "not measured", "reason": f"a variant did not run: {bad}"}
    mine, base = rows[variant.name], rows[baseline.name]
    ratio = cast(float, mine.median_s) / cast(float, base.median_s)  # an ok row is timed
    return goal | {
        "variant_s": mine.median_s, "variant_iqr_s": mine.iqr_s, "variant_backend": mine.backend,
        "baseline_s": base.median_s, "baseline_iqr_s": base.iqr_s, "baseline_backend": base.backend,
        "ratio": ratio, "status": "met" if ratio <= target else "missed",
    }


def ratio_goals(
    settings: Settings, flash_shape: tuple[int, int, int, int] = FLASH_GOAL_SHAPE,
    fused_shape: tuple[int, int, int, int] = FUSED_GOAL_SHAPE,
) -> list[dict[str, object]]:
    """Goals 3 and 4 (above), forward and forward+backward, each pair timed in the same run.

    Shapes are (b, h, t, d_h); the layer's width is d = h · d_h.
    """
    goals = []
    for pass_name in settings.passes:
        backward = pass_name == "forward+backward"
        b, h, t, d_h = flash_shape
        problem = Problem("kernel", b, t, h, d_h, torch.float32, settings.device, backward)
        goals.append(_ratio_goal("flash_attention ÷ SDPA", get_variant("flash_attention"), SDPA_DEFAULT,
                                 problem, FLASH_TARGET, settings))
        b, h, t, d_h = fused_shape
        problem = Problem("layer", b, t, h, d_h, torch.float32, settings.device, backward)
        goals.append(_ratio_goal("fused explicit ÷ unfused MultiHeadAttention", get_variant("fused-explicit"),
                                 get_variant("mha"), problem, FUSED_TARGET, settings))
    return goals
