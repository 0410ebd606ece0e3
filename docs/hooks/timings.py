"""MkDocs hook: the appendix page of measured timings, generated from the committed results files.

``python -m attention.bench`` writes one JSON file per run (see ``attention.bench.schema``) into
``docs/appendix/results/``. On every build this hook

- validates each file (a malformed one stops the build with the file's name and the field);
- draws, for each group of comparable rows (level, heads, head width, dtype), three SVG plots
  (time, TFLOP/s and peak memory against t, forward and forward+backward side by side) and adds
  them to the build as generated files ``appendix/timings/<run>-<group>-<kind>.svg``;
- replaces the marker ``<!-- timings:generated -->`` on ``appendix/kernel-timings.md`` with the
  goals, the tables (each with the hardware and versions it was measured on) and the plots;
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

from attention.bench.schema import validate_results  # noqa: E402

PAGE = "appendix/kernel-timings.md"
RESULTS = "appendix/results"
FIGURES = "appendix/timings"
MARKER = "<!-- timings:generated -->"
GPU_COMMAND = "python -m attention.bench --device cuda --output docs/appendix/results/cuda.json"
SVG_STYLE = {"svg.hashsalt": "attention-book", "svg.fonttype": "path"}
MARKERS = "os^Dv<>ph*"
PASSES = ("forward", "forward+backward")
KINDS = {
    "time": ("time per call (ms)", "median_s", 1e3, "log"),
    "tflops": ("achieved TFLOP/s", "tflops", 1.0, "linear"),
    "memory": ("peak memory of one call (MiB)", "peak_bytes", 1 / 2**20, "log"),
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


def group_title(key: tuple, rows: list[dict]) -> str:
    """The heading of a group in the notation of the book."""
    level, h, d_h, dtype = key
    what = "Whole layers" if level == "layer" else "Attention kernels"
    return f"{what}: h = {h}, d_h = {d_h}, d = {h * d_h}, {dtype}"


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


def _mib(nbytes: int | None) -> str:
    return "—" if nbytes is None else f"{nbytes / 2**20:.3g}"


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
        peak_text = f"{peak['tflops']:g} TFLOP/s, from {peak['source']}"
    with_peak = peak["tflops"] is not None
    head = "| variant | kernel that ran | median ms (IQR) | × fastest | TFLOP/s |"
    head += " % of peak |" if with_peak else ""
    head += " peak MiB | max rel. error |"
    lines = [f"*{caption}, $t = {t}$, $b = {at[0]['b']}$. Device peak: {peak_text}.*", "", head,
             "|---|---|" + "---:|" * (head.count("|") - 3)]
    for r in at:
        cells = [f"`{r['variant']}`", r["backend"], f"{_ms(r['median_s'])} ({_ms(r['iqr_s'])})",
                 _ratio(r["median_s"] / fastest), f"{r['tflops']:.3g}"]
        cells += [f"{r['pct_of_peak']:.1f}"] if with_peak else []
        cells += [_mib(r["peak_bytes"]), f"{r['max_rel_err']:.1e}"]
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
        for ax, pass_name in zip(axes, PASSES):
            for name in names:
                pts = sorted((r["t"], r[field] * scale) for r in rows
                             if r["variant"] == name and r["pass"] == pass_name and r["status"] == "ok"
                             and r.get(field) is not None)
                if pts:
                    colour, marker = styles[name]
                    ax.plot(*zip(*pts), marker=marker, markersize=4, label=name, color=colour)
            ax.set(yscale=yscale, xlabel="sequence length $t$", title=pass_name)
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
    return out


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
            measured = (f"**{100 * m['fraction']:.2f}%** ({_mib(m['flash_attention_peak_bytes'])} MiB vs "
                        f"{_mib(m['explicit_peak_bytes'])} MiB")
            if m.get("explicit_allocator_peak_bytes"):
                measured += (f"; the allocator's count: {_mib(m['flash_attention_allocator_peak_bytes'])} vs "
                             f"{_mib(m['explicit_allocator_peak_bytes'])} MiB")
            rows.append([goal, measured + ")", "≤ 5%", m["status"]])
    lines = ["| goal | measured | target | status |", "|---|---|---|---|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


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
        "    - Every variant was first checked against a float64 reference (output and, for",
        "      forward+backward, input gradients); the last column of the detail tables is its error.",
        "",
    ]
    if doc["goals"]["speed"] or doc["goals"].get("memory"):
        out += ["### Goals", "", f"*{machine}.*", "", goals_markdown(doc), ""]
    goal_t = doc["goals"]["speed"][0]["t"] if doc["goals"]["speed"] else None
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
            out += [f"![{label} against sequence length t, {title}, on {p['device_name']}]"
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
