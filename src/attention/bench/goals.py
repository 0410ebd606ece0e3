"""The targets of issue 5, measured in the same run as the sweep.

1. Speed: our fused layer through SDPA (``fused-sdpa``) within 5% of
   ``torch.nn.MultiheadAttention(need_weights=False)`` (``torch-mha``) on CPU at GPT-2-small
   (d = 768, h = 12), t = 1024; and how much slower the book's explicit ``MultiHeadAttention``
   (``mha``) is. Read off the sweep's own rows, so the sweep must include that point.
2. Memory: ``flash_attention``'s peak memory at t = 8192 at most 5% of the explicit path's
   (``attention.scaled_dot_product_attention``), forward, float32, each measured on its own.

A goal that was not measured says so and why; a goal that was missed says so too.
"""

import torch

from .memprobe import measure_in_subprocess
from .timing import cuda_peak_bytes
from .variants import Problem, get_variant, make_call, make_inputs

SPEED_TOLERANCE = 1.05
MEMORY_FRACTION = 0.05


def _find(rows: list[dict], variant: str, **where: object) -> dict | None:
    for row in rows:
        if row["variant"] == variant and row["status"] == "ok" and all(row[k] == v for k, v in where.items()):
            return row
    return None


def speed_goals(rows: list[dict], t: int = 1024, d: int = 768, h: int = 12) -> list[dict]:
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
    peaks: dict[str, object] = {}
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
