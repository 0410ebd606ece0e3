"""The appendix's tables, as Markdown, from one run (:class:`~book.appendix.load.Run`).

Each table answers one question and carries its units in its header, not in every cell: a
table per pass, the ratio to the fastest variant in a column of its own, the variant's code name
first (it stays in view while a wide table scrolls on a phone).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from attention.bench.masks import scores_formed
from attention.bench.rows import DistributedRow, LinearRow, MaskRow, Row, SparseRow
from attention.bench.timing import PROFILED_LABELS
from attention.roofline import machine_roof, roofline_points

from .format import code, digits3, ms, rate, ratio, readable_bytes, source, table, tex_count, tflops
from .load import Group, Run


def _ok(rows: list[Row]) -> list[Row]:
    return [r for r in rows if r.status == "ok"]


def batch_note(rows: list[Row]) -> str:
    """``$b = 16$ at $t = 1024$ … $b = 1$ at $t = 16384$`` (b·t fixed), or the one b."""
    by_t = sorted({(r.t, r.b) for r in rows})
    if len({b for _, b in by_t}) == 1:
        return f"$b = {by_t[0][1]}$"
    (t0, b0), (t1, b1) = by_t[0], by_t[-1]
    return f"$b \\cdot t = {tex_count(b0 * t0)}$ tokens: $b = {b0}$ at $t = {t0}$ … $b = {b1}$ at $t = {t1}$"


# A time whose interquartile range exceeds this fraction of its median is marked noisy (†) in the
# grids that show medians alone: a reader should not rank it against a neighbour a few % away.
NOISY_IQR = 0.10
NOISY_NOTE = f"† a noisy time, its IQR more than {100 * NOISY_IQR:g}% of the median"


def noisy(row) -> bool:
    """Whether an ok row's spread (IQR) exceeds :data:`NOISY_IQR` of its median."""
    return row.iqr_s is not None and row.iqr_s > NOISY_IQR * row.median_s


def noisy_note(ok: list) -> str:
    """``; † a noisy time: ...`` for a caption whose grid marks any time, else ``""``."""
    return f"; {NOISY_NOTE}" if any(noisy(r) for r in ok) else ""


def time_grid(variants: Iterable[str], ts: list[int], ok: list) -> list[list[str]]:
    """One table row per variant: its median ms at each t ("—" where it has none), the fastest
    ok row at each t in bold, a noisy one (:func:`noisy`) marked †."""
    fastest = {t: min((r.median_s for r in ok if r.t == t), default=None) for t in ts}
    cell = {(r.variant, r.t): r for r in ok}
    body = []
    for name in variants:
        cells = []
        for t in ts:
            row = cell.get((name, t))
            text = "—" if row is None else ms(row.median_s)
            text = f"**{text}**" if row is not None and row.median_s == fastest[t] else text
            cells.append(text + "†" if row is not None and noisy(row) else text)
        body.append([code(name), *cells])
    return body


def time_table(rows: list[Row], pass_name: str) -> str:
    """Variants × t: median milliseconds per call, the fastest at each t in bold."""
    ok = _ok(rows)
    ts = sorted({r.t for r in rows})
    body = time_grid(dict.fromkeys(r.variant for r in ok), ts, ok)
    caption = (f"Median time per call in ms, {pass_name}; the fastest at each $t$ in bold; {batch_note(rows)}"
               f"{noisy_note(ok)}.")
    return table(["variant", *(f"$t = {t}$" for t in ts)], body, [False] + [True] * len(ts), caption)


def kernel_that_ran(row: Row) -> str:
    """The row's backend as the profiler named it, or the variant's own name for itself, marked
    "(declared)", where the profiler saw no fused kernel it could name."""
    if all(part in PROFILED_LABELS for part in row.backend.split(" + ")):
        return row.backend
    return f"{row.backend} (declared)"


def detail_table(rows: list[Row], t: int, peak: dict) -> str:
    """Every ok variant at one t, fastest first: time, spread, ratio, throughput, memory, error,
    GPU kernels launched per call (where counted) and the kernel that ran."""
    at = sorted((r for r in _ok(rows) if r.t == t), key=lambda r: r.median_s)
    if not at:
        return ""
    fastest = at[0].median_s
    launches = any(r.gpu_kernels is not None for r in at)
    header = ["variant", "ms", "IQR (ms)", "× fastest", "TFLOP/s"]
    header += ["% of peak"] if peak.get("tflops") else []
    header += ["peak memory", "max rel. error"] + (["GPU kernels"] if launches else []) + ["kernel that ran"]
    body = []
    for r in at:
        cells = [code(r.variant), ms(r.median_s), ms(r.iqr_s), ratio(r.median_s / fastest),
                 tflops(r.tflops)]
        if peak.get("tflops"):
            cells.append("—" if r.pct_of_peak is None else f"{r.pct_of_peak:.1f}")
        cells += [readable_bytes(r.peak_bytes), f"{r.max_rel_err:.1e}"]
        if launches:
            cells.append("—" if r.gpu_kernels is None else f"{r.gpu_kernels:,}")
        cells.append(kernel_that_ran(r))
        body.append(cells)
    numeric = [False, True, True, True, True] + ([True] if peak.get("tflops") else [])
    numeric += [True, True] + ([True] if launches else []) + [False]
    if peak.get("tflops") and peak.get("measured"):
        where = f"% of the peak measured on this machine, {rate(peak['tflops'] * 1e12, 'FLOP/s')}"
    elif peak.get("tflops"):
        where = f"% of the datasheet's peak, {peak['tflops']:g} TFLOP/s"
    else:
        where = "no documented peak for this device, so no percentage of one"
    caption = (f"Every variant at $t = {t}$, $b = {at[0].b}$, fastest first; {where}. Kernel that ran: "
               "read from the profiler, or the variant's own name where marked (declared).")
    return table(header, body, numeric, caption)


def not_run(group: Group) -> str:
    """The variants of a group without a time, each reason once, in a collapsed note."""
    reasons = dict.fromkeys((r.variant, r.status, r.reason) for r in group.rows if r.status != "ok")
    if not reasons:
        return ""
    lines = ['??? note "Variants without a time here, and why"', ""]
    lines += [f"    - `{name}` ({status}): {reason}" for name, status, reason in reasons]
    return "\n".join(lines)


def _speed_verdict(g: dict) -> str:
    if g["status"] == "met":
        return "met"
    spread = max(g["fused_sdpa_iqr_s"], g["torch_mha_iqr_s"])
    if g["fused_sdpa_s"] - g["torch_mha_s"] <= spread:
        return "missed, by less than the spread (IQR)"
    if g["fused_sdpa_backend"] == g["torch_mha_backend"]:
        return f"missed; both ran {g['fused_sdpa_backend']}: the gap is outside the kernel"
    return f"missed; different kernels ran ({g['fused_sdpa_backend']} vs {g['torch_mha_backend']})"


def _shape(g: dict, *names: str) -> str:
    return ", ".join(f"${n} = {g[n]}$" for n in names)


def goals_table(run: Run) -> str:
    """The goals measured in the run, one short row each (goal, pass, measured, target, status),
    and below the table the shape each was measured at and the kernel its baseline ran."""
    goals, body, notes = run.doc["goals"], [], []
    dtypes = list(dict.fromkeys(g["dtype"] for g in goals["speed"]))
    for g in goals["speed"]:
        # a run that measured the layer goal in several dtypes names each row's
        of = f", {g['dtype']}" if len(dtypes) > 1 else ""
        if g["status"] == "not measured":
            body.append([f"`fused-sdpa` ÷ `torch-mha`{of}", g["pass"], "—", "≤ 1.05",
                         f"not measured: {g['reason']}"])
            continue
        body.append([f"`fused-sdpa` ÷ `torch-mha`{of}", g["pass"], f"{g['ratio_fused_sdpa_to_torch_mha']:.3f}",
                     "≤ 1.05", _speed_verdict(g)])
        if "ratio_mha_to_fused_sdpa" in g:
            body.append([f"`mha` ÷ `fused-sdpa`{of}", g["pass"], ratio(g["ratio_mha_to_fused_sdpa"]), "—",
                         "reported"])
    if goals["speed"]:
        g = goals["speed"][0]
        notes.append(f"`fused-sdpa` ÷ `torch-mha`: whole layers, {_shape(g, 't', 'd', 'h', 'b')}, "
                     f"{', '.join(dtypes)}; `mha`, the book's explicit layer, is reported beside them.")
    m = goals.get("memory")
    if m:
        measured = "—" if m["status"] == "not measured" else f"{100 * m['fraction']:.2f}%"
        status = f"not measured: {m['reason']}" if m["status"] == "not measured" else m["status"]
        body.append(["`flash_attention` ÷ `explicit`, memory", "forward", measured, "≤ 5%", status])
        if m["status"] != "not measured":
            notes.append(f"Memory: peak bytes of one call ({m['method']}), {_shape(m, 't', 'b', 'h', 'd_h')}, "
                         f"{m['dtype']}: {readable_bytes(m['flash_attention_peak_bytes'])} against "
                         f"{readable_bytes(m['explicit_peak_bytes'])}.")
    for g in goals.get("ratios", []):
        name = f"`{g['variant']}` ÷ `{g['baseline']}`"
        if g["status"] == "not measured":
            body.append([name, g["pass"], "—", f"≤ {g['target']:g}", f"not measured: {g['reason']}"])
            continue
        cpu_goal = run.gpu and g["variant"] == "flash_attention"  # tiles in PyTorch: a CPU goal
        status = f"{g['status']} (a CPU goal)" if cpu_goal else g["status"]
        body.append([name, g["pass"], f"{g['ratio']:.2f}", f"≤ {g['target']:g}", status])
        if g["pass"] == "forward":
            notes.append(f"{name}: {_shape(g, 'b', 'h', 't', 'd_h')}, causal, {g['dtype']}; "
                         f"`{g['baseline']}` ran {g['baseline_backend']}.")
    lines = [table(["goal", "pass", "measured", "target", "status"], body, [False, False, True, False, False],
                   "Ratios of median times (or of peak memory), both measured in the same run.")]
    return "\n".join(lines + [""] + [f"- {n}" for n in notes])


# The GPU's goals for the Triton kernel, each a speed ratio (the baseline's time over
# the kernel's, both measured in the same run) over every t from ``t_min`` on, head width and
# 16-bit dtype. Below t = 4096 a run without CUDA graphs times host work too (chapter 7).
GPU_GOALS = (
    # (baseline, pass, target, t_min)
    ("sdpa[cudnn]", "forward", 0.9, 4096),  # within 10% of cuDNN at long sequences
    ("sdpa[cudnn]", "forward+backward", 0.8, 4096),  # training: within 20% of cuDNN
    ("sdpa[flash]", "forward+backward", 1.2, 4096),  # and 1.2x SDPA's FlashAttention-2 backend
)


def gpu_goals_table(run: Run) -> str:
    """The GPU's goals, read off the sweep: the Triton kernel's speed against SDPA's
    FlashAttention-2 backend and cuDNN (:data:`GPU_GOALS`); the lowest ratio decides."""
    body = []
    for baseline, pass_name, target, t_min in GPU_GOALS:
        speeds = []
        for row in run.rows:
            if (row.variant == "triton" and row.pass_name == pass_name and row.status == "ok"
                    and row.dtype in ("bfloat16", "float16") and row.t >= t_min):
                base = run.row(baseline, pass_name, dtype=row.dtype, t=row.t, d_h=row.d_h, b=row.b)
                if base is not None:
                    speeds.append(base.median_s / row.median_s)
        where = f"$t \\geq {t_min}$" if t_min else "every $t$"
        goal = f"`triton` ÷ `{baseline}`, speed, {pass_name}, {where}"
        if not speeds:
            body.append([goal, "—", f"≥ {target:g}", "not measured in this run"])
            continue
        measured = f"**{min(speeds):.3f}** … {max(speeds):.3f} ({len(speeds)} points)"
        body.append([goal, measured, f"≥ {target:g}", "met" if min(speeds) >= target else "missed"])
    return table(["goal", "measured", "target", "status"], body)


def peaks_table(run: Run) -> str:
    """The machine's peaks: measured (their method) and from a datasheet (its source)."""
    body = []
    for name, peak in run.doc["peaks"].items():
        measured = "measured" if peak.get("measured") else "datasheet"
        if peak.get("tflops"):
            what = name.removesuffix("_measured")
            value = rate(peak["tflops"] * 1e12, "FLOP/s") if peak.get("measured") else f"{peak['tflops']:g} TFLOP/s"
            body.append([f"{what} arithmetic", value, measured, source(peak["source"])])
            for size in peak.get("matmul", {}).get("sizes", []):
                body.append([f"`torch.mm`, $n = {size['n']}$", rate(size["gflops"] * 1e9, "FLOP/s"), "measured",
                             f"median of {size['repeats']}, IQR {ms(size['iqr_s'])} ms"])
        elif peak.get("bytes_per_s"):
            body.append(["memory bandwidth", rate(peak["bytes_per_s"], "B/s"), measured, source(peak["source"])])
            stream = peak.get("stream", {})
            for kernel in ("copy", "triad"):
                if kernel in stream:
                    k = stream[kernel]
                    body.append([f"STREAM {kernel}", rate(k["bytes_per_s"], "B/s"), "measured",
                                 f"{readable_bytes(stream['array_bytes'])} arrays, "
                                 f"{readable_bytes(k['bytes'])} per call, median of {k['repeats']}"])
    return table(["peak", "value", "from", "how"], body, [False, True, False, False])


def roofline_table(run: Run, dtype: str, t: int, pass_name: str) -> str:
    """Every kernel of one dtype and pass at one t: intensity, achieved, roof and the bound."""
    machine = machine_roof(run.doc, dtype)
    if machine is None:
        return ""
    points = [p for p in roofline_points(run.doc, run.json_rows(dtype))
              if p["t"] == t and p["pass"] == pass_name]
    unit, scale = ("TFLOP/s", 1e12) if machine["peak_flops"] >= 1e13 else ("GFLOP/s", 1e9)
    body = [[code(p["variant"]), str(p["d_h"]), digits3(p["intensity"]), digits3(p["achieved"] / scale),
             digits3(p["roof"] / scale), f"{100 * p['fraction_of_roof']:.0f}", p["bound"]]
            for p in sorted(points, key=lambda p: (p["d_h"], p["intensity"]))]
    caption = (f"Kernels at $t = {t}$, {pass_name}: intensity in FLOP per byte (bytes a lower bound), "
               f"achieved and roof in {unit}.")
    return table(["variant", "$d_h$", "intensity", "achieved", "roof", "% of roof", "bound"], body,
                 [False, True, True, True, True, True, False], caption)


def decode_table(run: Run) -> str:
    """Greedy decoding: tokens/s without and with the KV cache, the speed-up, the cache's bytes."""
    by_model: dict[str, dict] = {}
    for row in run.decode:
        by_model.setdefault(row.model, {})[row.use_cache] = row
    body = []
    for model, rows in by_model.items():
        off, on = rows.get(False), rows.get(True)
        cells = [code(model)]
        cells += ["—" if r is None else digits3(r.tokens_per_s) for r in (off, on)]
        cells.append(ratio(on.tokens_per_s / off.tokens_per_s) if on and off else "—")
        cells.append(readable_bytes(on.cache_bytes_measured) if on else "—")
        cells.append(readable_bytes(on.cache_bytes_formula) if on else "—")
        body.append(cells)
    any_row = next(iter(run.decode), None)
    if any_row is None:
        return ""
    caption = (f"Greedy decoding, batch 1, float32, {any_row.prompt_tokens} prompt tokens and "
               f"{any_row.new_tokens} new ones; tokens per second, median over the timed calls.")
    return table(["model", "no cache", "KV cache", "speed-up", "cache", "equation (10.6)"], body,
                 [False, True, True, True, True, True], caption)


def models_table(run: Run) -> str:
    """The decode models' shapes: vocabulary, width, heads, layers."""
    seen = {}
    for row in run.decode:
        seen.setdefault(row.model, row.config)
    body = [[code(m), f"{c['vocab_size']:,}", str(c["d_model"]), str(c["num_heads"]), str(c["num_layers"])]
            for m, c in seen.items()]
    return table(["model", "$V$", "$d$", "$h$", "layers"], body, [False, True, True, True, True])


def masks_table(run: Run) -> str:
    """Chapter 11's causal document mask, four ways, per length t: the scores each forms (counted
    from the lengths by :func:`~attention.bench.masks.scores_formed`, one convention for every
    form), its time, its ratio to the fastest, and its error against float64."""
    rows = [MaskRow.from_json(r, f"{run.stem}.json: masks[{i}]") for i, r in enumerate(run.doc.get("masks", []))]
    out = []
    for t in sorted({r.t for r in rows}):
        at = [r for r in rows if r.t == t]
        ok = sorted((r for r in at if r.status == "ok"), key=lambda r: r.median_s)
        fastest = ok[0].median_s if ok else None
        body = [[code(r.variant), f"{scores_formed(r.variant, torch.tensor(r.lengths)):,}", ms(r.median_s), ms(r.iqr_s), ratio(r.median_s / fastest),
                 f"{r.max_rel_err:.1e}"] for r in ok]
        body += [[code(r.variant), "—", "—", "—", "—", f"{r.status}: {r.reason}"] for r in at if r.status != "ok"]
        lengths = ", ".join(str(n) for n in at[0].lengths)
        caption = (f"$t = {t}$ tokens packed from {len(at[0].lengths)} documents of {lengths} tokens; "
                   f"$h = {at[0].h}$, $d_h = {at[0].d_h}$, {at[0].dtype}, {at[0].pass_name}; fastest first. "
                   "Scores formed per head: each form's score matrices (FlexAttention's tiles) counted "
                   "whole, before any causal skipping.")
        stale = sorted(r.variant for r in ok if r.scores_formed != scores_formed(r.variant, torch.tensor(r.lengths)))
        if stale:  # a file written before the one convention keeps its own counts
            caption += (f" The results file's own `scores_formed` for {', '.join(f'`{v}`' for v in stale)} "
                        "was written under an earlier convention (tiles counted after the causal skipping); "
                        "the table recounts it from the lengths.")
        out.append(table(["form", "scores formed", "ms", "IQR (ms)", "× fastest", "max rel. error"], body,
                         [False, True, True, True, True, False], caption))
    return "\n\n".join(out)


def _forms_table(run: Run, key: str, what: str) -> str:
    """Forms of one part (``key``) of ``run`` against softmax attention: median ms per call at
    every t (b·t fixed), the fastest at each t in bold."""
    rows = [LinearRow.from_json(r, f"{run.stem}.json: {key}[{i}]") for i, r in enumerate(run.doc.get(key, []))]
    ok = [r for r in rows if r.status == "ok"]
    ts = sorted({r.t for r in rows})
    body = time_grid(dict.fromkeys(r.variant for r in rows), ts, ok)
    first = rows[0]
    by_t = sorted({(r.t, r.b) for r in rows})
    tokens = tex_count(by_t[0][0] * by_t[0][1])
    caption = (f"Median time per call in ms, {first.pass_name}, causal, $h = {first.h}$, $d_h = {first.d_h}$, "
               f"{first.dtype}, chunks of {first.chunk_size} tokens; $b \\cdot t = {tokens}$; "
               f"the fastest at each $t$ in bold{noisy_note(ok)}.")
    failed = [f"`{r.variant}` at $t = {r.t}$: {r.status}, {r.reason}" for r in rows if r.status != "ok"]
    note = ("\n\n" + "; ".join(failed) + ".") if failed else ""
    return table([what, *(f"$t = {t}$" for t in ts)], body, [False] + [True] * len(ts), caption) + note


def linear_table(run: Run) -> str:
    """Chapter 12's linear attention in its three forms against softmax attention."""
    return _forms_table(run, "linear", "form")


def delta_table(run: Run) -> str:
    """Chapter 13's chunked rules against chapter 12's chunked form and softmax attention."""
    return _forms_table(run, "delta", "rule")


def distributed_table(run: Run) -> str:
    """Chapter 11's ring and Ulysses attention on N gloo processes: per N, each scheme and pass, its
    time per call and per ring step, a step's compute and transfer alone, and the bytes rank 0 sent
    against the model's count."""
    rows = [DistributedRow.from_json(r, f"{run.stem}.json: distributed[{i}]")
            for i, r in enumerate(run.doc.get("distributed", []))]
    out = []
    for world in sorted({r.world_size for r in rows}):
        at = [r for r in rows if r.world_size == world]
        body = []
        for r in at:
            name = code(r.scheme if r.scheme == "ulysses" else f"{r.scheme}-{r.sharding}")
            if r.status != "ok":
                body.append([name, r.pass_name, "—", "—", "—", "—", "—", f"{r.status}: {r.reason}"])
                continue
            body.append([name, r.pass_name, ms(r.median_s), ms(r.iqr_s), ms(r.step_s) if r.step_s else "—",
                         ms(r.compute_step_s) if r.compute_step_s else "—",
                         ms(r.transfer_step_s) if r.transfer_step_s else "—",
                         f"{readable_bytes(r.bytes_sent)} ({readable_bytes(r.bytes_predicted)})"])
        first = at[0]
        caption = (f"$N = {world}$ processes, $t = {first.t}$ ($t_{{\\text{{shard}}}} = {first.t // world}$ per rank), $b = {first.b}$, "
                   f"$h = {first.h}$, $h_{{kv}} = {first.h_kv}$, $d_h = {first.d_h}$, {first.dtype}, causal; "
                   "ms per call (the slowest rank), per ring step, and a step's compute and transfer alone; "
                   "bytes rank 0 sent, the model's count in brackets.")
        out.append(table(["scheme", "pass", "ms", "IQR (ms)", "ms per step", "compute alone", "transfer alone",
                          "bytes sent (model)"], body, [False, False, True, True, True, True, True, True], caption))
    return "\n\n".join(out)


def sparse_table(run: Run) -> str:
    """Chapter 14's selections against causal softmax attention, per pass: median ms at every t
    (b·t fixed), then each form's time as a multiple of ``softmax-sdpa``'s at the same t, and the
    largest error of its float64 check."""
    rows = [SparseRow.from_json(r, f"{run.stem}.json: sparse[{i}]") for i, r in enumerate(run.doc.get("sparse", []))]
    out = []
    for pass_name in dict.fromkeys(r.pass_name for r in rows):
        at = [r for r in rows if r.pass_name == pass_name]
        ok = [r for r in at if r.status == "ok"]
        ts = sorted({r.t for r in at})
        variants = list(dict.fromkeys(r.variant for r in at))
        first, by_t = at[0], sorted({(r.t, r.b) for r in at})
        tokens = tex_count(by_t[0][0] * by_t[0][1])
        blocks = first.top_k // first.block_size
        shape = (f"{pass_name}, causal, $h = {first.h}$, $d_h = {first.d_h}$, {first.dtype}, "
                 f"$b \\cdot t = {tokens}$; $k_{{\\text{{top}}}} = {first.top_k}$ keys per query (MoBA and "
                 f"NSA: {blocks} blocks of {first.block_size}; NSA's window: {first.window} keys)")
        out.append(table(["form", *(f"$t = {t}$" for t in ts)], time_grid(variants, ts, ok),
                         [False] + [True] * len(ts),
                         f"Median time per call in ms, {shape}; the fastest at each $t$ in bold"
                         f"{noisy_note(ok)}."))
        cell = {(r.variant, r.t): r for r in ok}
        body = []
        for name in variants:
            cells = [code(name)]
            for t in ts:
                row, base = cell.get((name, t)), cell.get(("softmax-sdpa", t))
                cells.append("—" if row is None or base is None else ratio(row.median_s / base.median_s))
            errors = [r.max_rel_err for r in ok if r.variant == name]
            cells.append(f"{max(errors):.1e}" if errors else "—")
            body.append(cells)
        out.append(table(["form", *(f"$t = {t}$" for t in ts), "max rel. error"], body,
                         [False] + [True] * (len(ts) + 1),
                         f"Time per call as a multiple of `softmax-sdpa`'s at the same $t$, {pass_name}; "
                         "max rel. error: the largest of the form's float64 checks over $t$."))
        failed = [f"`{r.variant}` at $t = {r.t}$: {r.status}, {r.reason}" for r in at if r.status != "ok"]
        if failed:
            out.append("; ".join(failed) + ".")
    return "\n\n".join(out)
