"""MkDocs hook: the appendix page of measured timings, generated from the committed results files.

``python -m attention.bench`` writes one JSON file per run (see ``attention.bench.schema``) into
``docs/appendix/results/``. On every build this hook

- validates each file (a malformed one stops the build with the file's name and the field);
- draws, for each group of comparable rows (level, heads, head width, dtype), three SVG plots
  (time, TFLOP/s and peak memory against t, forward and forward+backward side by side) and adds
  them to the build as generated files ``appendix/timings/<run>-<group>-<kind>.svg``;
- draws, for each dtype whose peaks the file holds (measured on a CPU, from the datasheet on a
  GPU), a roofline with every kernel row on it (``attention.bench.roofline``):
  ``appendix/timings/<run>-roofline-<dtype>.svg``;
- replaces the marker ``<!-- timings:generated -->`` on ``appendix/kernel-timings.md`` with the
  peaks, the goals, the decode measurements, the tables (each with the hardware and versions it
  was measured on) and the plots; a file written before a part existed renders without it;
- says plainly when no GPU results exist yet, and how to produce them.

Only numbers from the results files appear on the page; nothing is typed in by hand.
"""

from __future__ import annotations

import io
import json
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # render without a display, before pyplot is imported anywhere

import matplotlib.pyplot as plt  # noqa: E402
from mkdocs.config.defaults import MkDocsConfig  # noqa: E402
from mkdocs.exceptions import PluginError  # noqa: E402
from mkdocs.structure.files import File, Files  # noqa: E402
from mkdocs.structure.pages import Page  # noqa: E402

from attention.bench.roofline import machine_roof, plot_roofline, roofline_points  # noqa: E402
from attention.bench.schema import validate_results  # noqa: E402

PAGE = "appendix/kernel-timings.md"
RESULTS = "appendix/results"
FIGURES = "appendix/timings"
MARKER = "<!-- timings:generated -->"
GPU_COMMAND = "python -m attention.bench --device cuda --output docs/appendix/results/cuda.json"
SVG_STYLE = {"svg.hashsalt": "attention-book", "svg.fonttype": "none"}  # text stays text: smaller, faster
ROOFLINE_STYLE = {"svg.hashsalt": "attention-book", "svg.fonttype": "none", "savefig.transparent": True}
MARKERS = "os^Dv<>ph*"
PASSES = ("forward", "forward+backward")
KINDS = {
    "time": ("time per call (ms)", "median_s", 1e3, "log"),
    "tflops": ("achieved TFLOP/s", "tflops", 1.0, "linear"),
    "memory": ("peak memory of one call", "peak_bytes", 1.0, "log"),
}

_runs: list[tuple[str, dict]] = []


def load_results(results_dir: Path) -> list[tuple[str, dict]]:
    """Every results file in ``results_dir`` as (file stem, validated contents), sorted by name."""
    runs = []
    for path in sorted(results_dir.glob("*.json")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            validate_results(doc)
        except ValueError as error:
            raise PluginError(f"{path}: {error}") from error
        runs.append((path.stem, doc))
    return runs


def groups(doc: dict) -> dict[tuple, list[dict]]:
    """Rows grouped by (level, h, d_h, dtype): the rows that one table or plot compares."""
    out: dict[tuple, list[dict]] = defaultdict(list)
    for row in doc["results"]:
        out[(row["level"], row["h"], row["d_h"], row["dtype"])].append(row)
    return dict(sorted(out.items(), key=lambda item: (item[0][0] != "layer", item[0][1:])))


def group_slug(key: tuple) -> str:
    """A file-name piece for a group: ``layer-h12-dh64-float32``."""
    level, h, d_h, dtype = key
    return f"{level}-h{h}-dh{d_h}-{dtype}"


def group_title(key: tuple, rows: list[dict], math: bool = True) -> str:
    """The heading of a group in the notation of the book: TeX math, or plain text for alt text."""
    level, h, d_h, dtype = key
    what = "Whole layers" if level == "layer" else "Attention kernels"
    if math:
        return f"{what}: $h = {h}$, $d_h = {d_h}$, $d = {h * d_h}$, {dtype}"
    return f"{what}: h = {h}, head width {d_h}, d = {h * d_h}, {dtype}"


def hardware(doc: dict) -> str:
    """One line naming the machine, the software and the date of a run."""
    p = doc["provenance"]
    line = f"{p['device_name']}"
    if p["device_type"] == "cuda":
        tf32 = "on" if p["tf32_matmul"] else "off"
        line += f", CUDA {p['cuda']}, driver {p['driver']}, TF32 matmul {tf32}"
    else:
        line += f", {p['torch_threads']} threads ({p['cpu_count']} CPUs)"
    triton = f", Triton {p['triton']}" if p.get("triton") else ""
    return f"{line}; torch {p['torch']}{triton}; measured {p['date_utc'][:10]}"


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.3g}" if ms < 1000 else f"{ms:,.0f}"


def _ratio(x: float) -> str:
    return f"{x:.2f}×" if x < 10 else f"{x:.0f}×"


def readable_bytes(nbytes: float | None) -> str:
    """Bytes in binary units, two or three significant digits: "6.1 GiB", "17 MiB", "512 B"."""
    if nbytes is None:
        return "—"
    value, unit = float(nbytes), "B"
    for next_unit in ("KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024:
            break
        value, unit = value / 1024, next_unit
    if unit == "B":
        return f"{value:.0f} B"
    return f"{value:.1f} {unit}" if abs(value) < 10 else f"{value:.0f} {unit}"


def _rate(value: float, unit: str) -> str:
    """A rate with a decimal prefix: 1.2e11 FLOP/s -> "120 GFLOP/s"."""
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3), ("", 1.0)):
        if value >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def time_table(rows: list[dict], caption: str) -> str:
    """Variants × t: the median time per call and its ratio to the fastest variant at that t."""
    ts = sorted({r["t"] for r in rows})
    ok = [r for r in rows if r["status"] == "ok"]
    variants = list(dict.fromkeys(r["variant"] for r in ok))
    cell = {(r["variant"], r["t"]): r for r in ok}
    fastest: dict[int, float] = {}
    for r in ok:
        fastest[r["t"]] = min(fastest.get(r["t"], r["median_s"]), r["median_s"])
    head = "| variant | " + " | ".join(f"$t = {t}$ (b = {_batch(rows, t)})" for t in ts) + " |"
    note = "Each cell: median ms per call (× the fastest variant at that $t$)"
    lines = [f"*{caption}. {note}.*", "", head, "|---|" + "---:|" * len(ts)]
    for name in variants:
        cells = []
        for t in ts:
            row = cell.get((name, t))
            if row is None:
                cells.append("—")
            else:
                ratio = row["median_s"] / fastest[t]
                text = f"{_ms(row['median_s'])} ({_ratio(ratio)})"
                cells.append(f"**{text}**" if ratio == 1.0 else text)
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _batch(rows: list[dict], t: int) -> int:
    return next(r["b"] for r in rows if r["t"] == t)


def detail_table(rows: list[dict], t: int, caption: str, peak: dict) -> str:
    """Every ok variant at one t: kernel that ran, time, spread, ratio, TFLOP/s, memory, error."""
    at = sorted((r for r in rows if r["t"] == t and r["status"] == "ok"), key=lambda r: r["median_s"])
    if not at:
        return ""
    fastest = at[0]["median_s"]
    if peak["tflops"] is None:
        peak_text = "unknown (no documented peak for this device), so no percentage of it"
    else:
        peak_text = f"{_rate(peak['tflops'] * 1e12, 'FLOP/s')}, {peak['source']}"
    with_peak = peak["tflops"] is not None
    head = "| variant | kernel that ran | median ms (IQR) | × fastest | TFLOP/s |"
    head += " % of peak |" if with_peak else ""
    head += " peak memory | max rel. error |"
    lines = [f"*{caption}, $t = {t}$, $b = {at[0]['b']}$. Device peak: {peak_text}.*", "", head,
             "|---|---|" + "---:|" * (head.count("|") - 3)]
    for r in at:
        cells = [f"`{r['variant']}`", r["backend"], f"{_ms(r['median_s'])} ({_ms(r['iqr_s'])})",
                 _ratio(r["median_s"] / fastest), f"{r['tflops']:.3g}"]
        if with_peak:
            cells.append("—" if r["pct_of_peak"] is None else f"{r['pct_of_peak']:.1f}")
        cells += [readable_bytes(r["peak_bytes"]), f"{r['max_rel_err']:.1e}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def not_run(rows: list[dict]) -> str:
    """The variants that produced no time, each reason once."""
    reasons = dict.fromkeys((r["variant"], r["status"], r["reason"]) for r in rows if r["status"] != "ok")
    if not reasons:
        return ""
    lines = ['??? note "Variants without a time in this group, and why"', ""]
    lines += [f"    - `{name}` ({status}): {reason}" for name, status, reason in reasons]
    return "\n".join(lines)


def plot(rows: list[dict], kind: str, title: str) -> bytes:
    """SVG of one quantity against t, forward and forward+backward side by side."""
    label, field, scale, yscale = KINDS[kind]
    names = list(dict.fromkeys(r["variant"] for r in rows))
    styles = {n: (plt.get_cmap("tab10")(i % 10), MARKERS[i % len(MARKERS)]) for i, n in enumerate(names)}
    with matplotlib.rc_context(SVG_STYLE):
        fig, axes = plt.subplots(1, 2, figsize=(8, 3.6), sharey=True, layout="constrained")
        if kind == "memory":
            axes[0].yaxis.set_major_formatter(lambda y, _: readable_bytes(y))
        for ax, pass_name in zip(axes, PASSES):
            for name in names:
                pts = sorted((r["t"], r[field] * scale) for r in rows
                             if r["variant"] == name and r["pass"] == pass_name and r["status"] == "ok"
                             and r.get(field) is not None)
                if pts:
                    colour, marker = styles[name]
                    ax.plot(*zip(*pts), marker=marker, markersize=4, label=name, color=colour)
            if yscale == "log" and kind == "memory":
                ax.set_yscale("log", base=2)
            else:
                ax.set_yscale(yscale)
            ax.set(xlabel="sequence length $t$", title=pass_name)
            ax.set_xscale("log", base=2)
            ax.grid(True, which="major", alpha=0.3)
        axes[0].set_ylabel(label)
        handles, labels = axes[0].get_legend_handles_labels()
        more = [(h, lab) for h, lab in zip(*axes[1].get_legend_handles_labels()) if lab not in labels]
        handles, labels = handles + [h for h, _ in more], labels + [lab for _, lab in more]
        if handles:
            fig.legend(handles, labels, loc="outside lower center", ncol=4, fontsize="small")
        fig.suptitle(title, fontsize="medium")
        buffer = io.BytesIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None})
        plt.close(fig)
    return buffer.getvalue()


def figures(stem: str, doc: dict) -> dict[str, bytes]:
    """Every plot of one run, by its path under ``appendix/timings/``."""
    out = {}
    for key, rows in groups(doc).items():
        title = f"{group_title(key, rows)} — {doc['provenance']['device_name']}"
        for kind in KINDS:
            out[f"{stem}-{group_slug(key)}-{kind}.svg"] = plot(rows, kind, title)
    return out | roofline_figures(stem, doc)


def _speed_verdict(g: dict) -> str:
    """The status of a speed goal, and for a miss what the measurements say about why."""
    if g["status"] == "met":
        return "met"
    spread = max(g["fused_sdpa_iqr_s"], g["torch_mha_iqr_s"])
    if g["fused_sdpa_s"] - g["torch_mha_s"] <= spread:
        return "missed, but by less than the run-to-run spread (IQR); rerun on a quiet machine"
    if g["fused_sdpa_backend"] == g["torch_mha_backend"]:
        return (f"missed: both ran {g['fused_sdpa_backend']}, so the gap lies outside the attention "
                "kernel (projections, head reshapes)")
    return f"missed: different kernels ran ({g['fused_sdpa_backend']} vs {g['torch_mha_backend']})"


def goals_markdown(doc: dict) -> str:
    """The goals of the benchmark, with the numbers measured in this run."""
    rows = []
    for g in doc["goals"]["speed"]:
        where = f"$t = {g['t']}$, $d = {g['d']}$, $h = {g['h']}$, {g['dtype']}, {g['pass']}"
        if g["status"] == "not measured":
            reason = f"not measured: {g['reason']}"
            rows.append([f"`fused-sdpa` ÷ `torch-mha`, {where}", "—", "≤ 1.05", reason])
            continue
        times = f"{_ms(g['fused_sdpa_s'])} ms vs {_ms(g['torch_mha_s'])} ms"
        ratio = f"**{g['ratio_fused_sdpa_to_torch_mha']:.3f}** ({times})"
        rows.append([f"`fused-sdpa` time ÷ `torch-mha` time, {where}, $b = {g['b']}$", ratio, "≤ 1.05",
                     _speed_verdict(g)])
        if "ratio_mha_to_fused_sdpa" in g:
            rows.append([f"book `mha` time ÷ `fused-sdpa` time, {where}",
                         f"**{_ratio(g['ratio_mha_to_fused_sdpa'])}** ({_ms(g['mha_s'])} ms); "
                         f"÷ `torch-mha`: {_ratio(g['ratio_mha_to_torch_mha'])}", "reported", "—"])
    m = doc["goals"].get("memory")
    if m:
        goal = (f"`flash_attention` peak memory ÷ `explicit`, forward, $t = {m['t']}$, $b = {m['b']}$, "
                f"$h = {m['h']}$, $d_h = {m['d_h']}$, {m['dtype']} ({m['method']})")
        if m["status"] == "not measured":
            rows.append([goal, "—", "≤ 5%", f"not measured: {m['reason']}"])
        else:
            measured = (f"**{100 * m['fraction']:.2f}%** ({readable_bytes(m['flash_attention_peak_bytes'])} vs "
                        f"{readable_bytes(m['explicit_peak_bytes'])}")
            if m.get("explicit_allocator_peak_bytes"):
                measured += (f"; the allocator's count: {readable_bytes(m['flash_attention_allocator_peak_bytes'])} vs "
                             f"{readable_bytes(m['explicit_allocator_peak_bytes'])}")
            rows.append([goal, measured + ")", "≤ 5%", m["status"]])
    for g in doc["goals"].get("ratios", []):
        shape = f"$b = {g['b']}$, $h = {g['h']}$, $t = {g['t']}$, $d_h = {g['d_h']}$"
        goal = f"`{g['variant']}` time ÷ `{g['baseline']}` time, {shape}, causal, {g['dtype']}, {g['pass']}"
        target = f"≤ {g['target']:g}"
        if g["status"] == "not measured":
            rows.append([goal, "—", target, f"not measured: {g['reason']}"])
            continue
        measured = (f"**{g['ratio']:.2f}** ({_ms(g['variant_s'])} ms vs {_ms(g['baseline_s'])} ms; "
                    f"{g['baseline']} ran {g['baseline_backend']})")
        rows.append([goal, measured, target, g["status"]])
    lines = ["| goal | measured | target | status |", "|---|---|---|---|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def peaks_markdown(doc: dict) -> str:
    """The peaks of the run's machine: measured (CPU) or from a datasheet (GPU), with their method."""
    peaks = doc["peaks"]
    compute = {k: v for k, v in peaks.items() if k != "bandwidth" and v.get("tflops")}
    if not compute and "bandwidth" not in peaks:
        return ("This results file holds no peaks of its machine (it was written before the benchmark "
                "measured them, or the device has no documented peak), so no roofline is drawn. "
                "`python -m attention.bench --parts peaks` measures them on a CPU.")
    lines = ["| peak | value | how it was obtained |", "|---|---:|---|"]
    for dtype, peak in compute.items():
        lines.append(f"| {dtype} arithmetic $P$ | {_rate(peak['tflops'] * 1e12, 'FLOP/s')} | {peak['source']} |")
        for size in peak.get("matmul", {}).get("sizes", []):
            lines.append(f"| `torch.mm`, $n = {size['n']}$ | {_rate(size['gflops'] * 1e9, 'FLOP/s')} | "
                         f"median of {size['repeats']} blocks, IQR {_ms(size['iqr_s'])} ms |")
    bandwidth = peaks.get("bandwidth")
    if bandwidth:
        lines.append(f"| memory bandwidth $\\beta$ | {_rate(bandwidth['bytes_per_s'], 'B/s')} | {bandwidth['source']} |")
        stream = bandwidth.get("stream", {})
        for kernel in ("copy", "triad"):
            if kernel in stream:
                k = stream[kernel]
                lines.append(f"| STREAM {kernel}, {readable_bytes(stream['array_bytes'])} arrays | "
                             f"{_rate(k['bytes_per_s'], 'B/s')} | {readable_bytes(k['bytes'])} per call, "
                             f"median of {k['repeats']} blocks |")
    return "\n".join(lines)


def roofline_figures(stem: str, doc: dict) -> dict[str, bytes]:
    """One roofline SVG per dtype whose peaks the file holds, by its path under ``appendix/timings/``."""
    out = {}
    for dtype in sorted({r["dtype"] for r in doc["results"] if r["level"] == "kernel"}):
        machine = machine_roof(doc, dtype)
        points = roofline_points(doc, [r for r in doc["results"] if r["dtype"] == dtype])
        if machine is None or not points:
            continue
        kind = "measured peaks" if machine["measured"] else "datasheet peaks"
        title = f"Roofline, {doc['provenance']['device_name']}, {dtype} ({kind})"
        with matplotlib.rc_context(ROOFLINE_STYLE):
            fig = plot_roofline(points, machine, title)
            buffer = io.BytesIO()
            fig.savefig(buffer, format="svg", metadata={"Date": None})
            plt.close(fig)
        out[f"{stem}-roofline-{dtype}.svg"] = buffer.getvalue()
    return out


def roofline_markdown(stem: str, doc: dict, t_detail: int | None) -> str:
    """The roofline plots and, at one t, every kernel's intensity, roof and bound."""
    out = []
    for dtype in sorted({r["dtype"] for r in doc["results"] if r["level"] == "kernel"}):
        machine = machine_roof(doc, dtype)
        points = roofline_points(doc, [r for r in doc["results"] if r["dtype"] == dtype])
        if machine is None or not points:
            continue
        ts = sorted({p["t"] for p in points})
        t = t_detail if t_detail in ts else ts[-1]
        ridge = machine["ridge"]
        out += [f"*Roofline, {dtype}: $P$ = {_rate(machine['peak_flops'], 'FLOP/s')} "
                f"({machine['flops_source']}), $\\beta$ = {_rate(machine['bandwidth'], 'B/s')} "
                f"({machine['bandwidth_source']}), ridge point $P / \\beta$ = {ridge:.3g} FLOP/byte. "
                f"Bytes are a lower bound (see above); kernels at $t = {t}$.*", "",
                "| variant | pass | $d_h$ | intensity (FLOP/byte) | achieved | roof | % of roof | bound |",
                "|---|---|---:|---:|---:|---:|---:|---|"]
        for p in sorted((p for p in points if p["t"] == t), key=lambda p: (p["pass"], p["d_h"], p["intensity"])):
            out.append(f"| `{p['variant']}` | {p['pass']} | {p['d_h']} | {p['intensity']:.3g} | "
                       f"{_rate(p['achieved'], 'FLOP/s')} | {_rate(p['roof'], 'FLOP/s')} | "
                       f"{100 * p['fraction_of_roof']:.0f} | {p['bound']} |")
        memory = sorted({p["variant"] for p in points if p["bound"] == "memory"})
        compute = sorted({p["variant"] for p in points if p["bound"] == "compute"})
        out += ["", f"Over every $t$ measured: memory-bound (intensity below {ridge:.3g}) "
                f"{', '.join(f'`{n}`' for n in memory) or 'none'}; compute-bound "
                f"{', '.join(f'`{n}`' for n in compute) or 'none'} (a variant can be both, at "
                "different $t$).", "",
                f"![Roofline of {doc['provenance']['device_name']} in {dtype}: attainable FLOP/s against "
                f"arithmetic intensity, with every attention kernel of this file placed at its intensity and "
                f"achieved FLOP/s](timings/{stem}-roofline-{dtype}.svg)", ""]
    return "\n".join(out)


def _decode_cell(row: dict | None) -> str:
    """Tokens/s, and how many calls it is the median of (the IQR only where there are several)."""
    if row is None:
        return "—"
    if row["repeats"] == 1:
        return f"{row['tokens_per_s']:.3g} (1 call)"
    return f"{row['tokens_per_s']:.3g} ({row['repeats']} calls, IQR {_ms(row['iqr_s'])} ms)"


def decode_markdown(doc: dict) -> str:
    """Greedy decoding: tokens/s without and with the KV cache, the speed-up, cache bytes."""
    by_model: dict[str, dict] = defaultdict(dict)
    for row in doc.get("decode", []):
        by_model[row["model"]][row["use_cache"]] = row
    lines = ["| model | $V$, $d$, $h$, layers | prompt + new tokens | tokens/s, no cache | tokens/s, cache "
             "| speed-up | cache: measured | cache: formula |", "|---|---|---|---:|---:|---:|---:|---:|"]
    for model, rows in by_model.items():
        off, on = rows.get(False), rows.get(True)
        any_row = on or off
        c = any_row["config"]
        config = f"{c['vocab_size']}, {c['d_model']}, {c['num_heads']}, {c['num_layers']}"
        tokens = f"{any_row['prompt_tokens']} + {any_row['new_tokens']}"
        cells = [f"`{model}`", config, tokens]
        cells += [_decode_cell(r) for r in (off, on)]
        cells.append(_ratio(on["tokens_per_s"] / off["tokens_per_s"]) if on and off else "—")
        cells += [readable_bytes(on["cache_bytes_measured"]) if on else "—",
                  readable_bytes(on["cache_bytes_formula"]) if on else "—"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run_markdown(stem: str, doc: dict) -> str:
    """The section of the page for one results file."""
    p, machine = doc["provenance"], hardware(doc)
    kind = "GPU" if p["device_type"] == "cuda" else "CPU"
    load = f"{p['load_average_start'][0]:g} at the start, {p['load_average_end'][0]:g} at the end"
    git = p["git"]
    commit = "unknown"
    if git.get("commit"):
        commit = f"`{git['commit'][:12]}`" + (" with local changes" if git["dirty"] else "")
    out = [
        f"## {kind}: {p['device_name']} ({stem})", "",
        f"**Measured on** {machine}. Commit {commit}; 1-minute load average {load}. "
        f"Raw results: [`results/{stem}.json`](results/{stem}.json).", "",
        '??? info "How these numbers were measured"', "",
        f"    - Command: `{p['command']}`",
        f"    - Timing: {doc['methods']['timing']}.",
        f"    - Memory: {doc['methods']['memory']}.",
        f"    - FLOPs: {doc['methods']['flops']}.",
        *([f"    - Decoding: {doc['methods']['decode']}."] if "decode" in doc["methods"] else []),
        "    - Every variant was first checked against a float64 reference (output and, for",
        "      forward+backward, input gradients); the last column of the detail tables is its error.",
        "",
    ]
    if doc["goals"]["speed"] or doc["goals"].get("memory") or doc["goals"].get("ratios"):
        out += ["### Goals", "", f"*{machine}.*", "", goals_markdown(doc), ""]
    goal_t = doc["goals"]["speed"][0]["t"] if doc["goals"]["speed"] else None
    out += ["### Peaks and the roofline", "", peaks_markdown(doc), "", roofline_markdown(stem, doc, goal_t)]
    if doc.get("decode"):
        out += ["### Decoding with and without the KV cache", "", f"*Greedy decoding, batch 1, float32; {machine}.*",
                "", decode_markdown(doc), ""]
    for key, rows in groups(doc).items():
        slug, title = f"{stem}-{group_slug(key)}", group_title(key, rows)
        out += [f"### {title}", ""]
        for pass_name in PASSES:
            these = [r for r in rows if r["pass"] == pass_name]
            if not these:
                continue
            ts = sorted({r["t"] for r in these})
            t_detail = goal_t if goal_t in ts else ts[-1]
            caption = f"{title}, {pass_name}; {machine}"
            peak = doc["peaks"][key[3]]
            body = [time_table(these, caption), "", detail_table(these, t_detail, caption, peak)]
            tab = ["    " + line if line else "" for line in "\n".join(body).splitlines()]
            out += [f'=== "{pass_name}"', "", *tab]
            out.append("")
        for kind_name, (label, *_rest) in KINDS.items():
            out += [f"![{label} against sequence length t, {group_title(key, rows, math=False)}, on {p['device_name']}]"
                    f"(timings/{slug}-{kind_name}.svg)", ""]
        out += [not_run(rows), ""]
    return "\n".join(out)


def page_markdown(runs: list[tuple[str, dict]]) -> str:
    """Everything the marker is replaced with: a GPU notice if needed, then every run."""
    out = []
    if not any(doc["provenance"]["device_type"] == "cuda" for _, doc in runs):
        out += [
            '!!! warning "No GPU results have been measured yet"', "",
            "    Every number on this page comes from a CPU. The GPU-only variants (the Triton kernel and",
            "    SDPA's memory-efficient and cuDNN backends) are listed as unsupported there, and the",
            "    variant `sdpa[flash]` ran PyTorch's CPU flash kernel, not the FlashAttention-2 kernels",
            "    that SDPA runs on NVIDIA GPUs. To measure those, run on a machine with an NVIDIA GPU,",
            "    from the repository root:", "",
            "    ```bash", f"    {GPU_COMMAND}", "    ```", "",
            "    and rebuild the site: this page picks up every file in `docs/appendix/results/`.", "",
        ]
    if not runs:
        out += ["No results files are in `docs/appendix/results/` yet."]
    for stem, doc in runs:
        out.append(run_markdown(stem, doc))
    return "\n".join(out)


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Load and validate the results and add every plot to the build."""
    global _runs
    _runs = load_results(Path(config.docs_dir) / RESULTS)
    for stem, doc in _runs:
        for name, svg in figures(stem, doc).items():
            files.append(File.generated(config, f"{FIGURES}/{name}", content=svg))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Replace the marker on the timings page with the generated tables and plots."""
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise PluginError(f"{PAGE}: expected the marker {MARKER} where the generated tables go")
    return markdown.replace(MARKER, page_markdown(_runs))
