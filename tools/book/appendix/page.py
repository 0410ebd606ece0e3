"""The appendix pages' generated parts: a run's section, and the list of runs.

An appendix page holds its prose and a marker; the build replaces the marker
``<!-- timings:run STEM -->`` with the run's section (where and how it was measured, goals,
peaks and roofline, decoding, then the kernels and the layers, each dtype with tables per pass and
figures), and ``<!-- timings:runs -->`` with a table of every run.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable

from attention.bench.parts import BY_NAME, ROW_KINDS, Part
from attention.roofline import machine_roof

from . import tables
from .format import cudnn_version, rate, readable_bytes, table, tex_count
from .load import PROVENANCE_FIELDS, RESULTS, Run, commit_words, file_provenance, pinned_version, results_files
from .plots import figure_names

RUN_MARKER = re.compile(r"<!-- timings:run (?P<stem>[a-z0-9-]+) -->")
RUNS_MARKER = "<!-- timings:runs -->"
FILES_MARKER = "<!-- timings:files -->"
PART_MARKER = re.compile(r"<!-- timings:(?P<part>[a-z_]+) (?P<stem>[a-z0-9-]+) -->")
PAGES = {"cpu": "cpu.md", "cpu-masks": "cpu.md", "cpu-linear": "cpu.md", "cpu-distributed": "cpu.md", "cpu-delta": "cpu.md", "cpu-sparse": "cpu.md", "cuda-h200": "gpu-h200.md", "cuda-h100-quick": "gpu-h100.md"}
# A part marker whose stem is listed here but has no results file yet says so (not_measured).
# The parts a run's section shows, in this order; any part can have a page of its own instead,
# with the marker <!-- timings:NAME STEM -->.
RUN_SECTIONS = ("goals", "peaks", "decode", "sweep")


def _commit(git: dict) -> str:
    words = commit_words(git)
    return "commit not recorded" if words == "not recorded" else f"commit {words}"


def timing_words(settings: dict, gpu: bool) -> str:
    """How a run timed each point, from its settings: repeats and time limits."""
    if gpu:
        return (f"up to {settings['repeats']} timed calls per point (fewer where they would take more than "
                f"{settings['max_time']:g} s as estimated from the first, profiled call, which includes the "
                "profiler's start-up and any plan building; never fewer than 5), each after a 256 MiB "
                "buffer is zeroed to flush the L2 cache")
    # time_cpu: a call slower than a third of max_time still gets three blocks, so only a faster
    # call's point is bounded by max_time
    return (f"blocks of calls for at least {settings['min_time']:g} s per point and at most "
            f"{settings['max_time']:g} s, except that a call slower than a third of that still gets "
            "at least three blocks, and takes longer (torch.utils.benchmark)")


def _contributed(run: Run, i: int) -> bool:
    """Whether source run ``i`` of a merged file gave any row, decoding row or goal it shows."""
    goals = run.doc["goals"]
    return (any((r.run or 0) == i for r in run.rows) or any((r.run or 0) == i for r in run.decode)
            or any(g.get("run", 0) == i for g in goals.get("ratios", []))
            or (goals.get("memory") or {}).get("run", -1) == i)


def _what(run: Run, i: int) -> str:
    """What source run ``i`` of a merged file measured, from the rows and goals it gave."""
    rows = [r for r in run.rows if (r.run or 0) == i]
    parts = []
    for level, name in (("kernel", "kernels"), ("layer", "layers")):
        mine = [r for r in rows if r.level == level]
        if mine:
            ts = ", ".join(str(t) for t in sorted({r.t for r in mine}))
            dtypes = ", ".join(dict.fromkeys(r.dtype for r in mine))
            timed = sum(r.status == "ok" for r in mine)
            parts.append(f"{name} in {dtypes} at $t$ = {ts} ({timed} of {len(mine)} rows with a time)")
    goals = run.doc["goals"]
    if any(g.get("run", 0) == i for g in goals.get("ratios", [])) or (goals.get("memory") or {}).get("run", -1) == i:
        parts.append("the goals")
    if any((r.run or 0) == i for r in run.decode):
        parts.append("decoding")
    return "; ".join(parts) or "nothing kept (every row it measured was measured again later)"


def settings_words(settings: dict, gpu: bool) -> str:
    """A run's timing settings in words, with its preset and whether compiled variants ran."""
    words = timing_words(settings, gpu)
    if settings.get("preset"):
        words = f"the `{settings['preset']}` preset: " + words
    if not settings.get("compile", True):
        words += "; the compiled variants off"
    return words


def threads_words(p: dict) -> str:
    """Torch's threads and the CPUs they had, from a provenance record: ``1 thread of 2 CPUs``,
    ``1 thread, the process pinned to 1 of 2 CPUs`` where its affinity left it fewer."""
    threads = f"{p['torch_threads']} thread{'' if p['torch_threads'] == 1 else 's'}"
    affinity = p.get("cpu_affinity")
    if affinity is not None and affinity < p["cpu_count"]:
        return f"{threads}, the process pinned to {affinity} of {p['cpu_count']} CPUs"
    return f"{threads} of {p['cpu_count']} CPUs"


def load_words(record: dict) -> str:
    """The machine's load average over the minute before a run started and before it ended, from
    a provenance record (a run's, or one source run's of a merged file); "" where it has none."""
    start, end = record.get("load_average_start"), record.get("load_average_end")
    if not start or not end:
        return ""
    return f"load average {start[0]:g} at the start and {end[0]:g} at the end (over one minute)"


def provenance_markdown(run: Run) -> str:
    """Where, when, with what and how the run was measured, in words."""
    p, pinned = run.provenance, pinned_version("torch")
    versions = f"torch {p['torch']}" + (f", Triton {p['triton']}" if p.get("triton") else "")
    if pinned and not p["torch"].startswith(pinned):
        versions += f" (the book pins torch {pinned}; that machine had {p['torch'].split('+')[0]})"
    if run.gpu:
        memory = readable_bytes(p.get("device_memory_bytes"))
        machine = (f"one {run.device} ({memory}, compute capability {p['compute_capability']}), driver "
                   f"{p['driver']}, CUDA {p['cuda']}, cuDNN {cudnn_version(p['cudnn'])}, with {p['cpu_count']} CPU cores; "
                   f"TF32 for float32 matmuls {'on' if p['tf32_matmul'] else 'off'}")
    else:
        machine = f"{run.device}, {threads_words(p)}"
    sources = run.sources
    # the commits of the runs whose rows are shown (a merged file's list below names every run's)
    commits = list(dict.fromkeys(_commit(s["git"]) for i, s in enumerate(sources)
                                 if len(sources) == 1 or _contributed(run, i)))
    days = sorted({source["date_utc"][:10] for source in sources})
    when = f"on {days[0]}" if len(days) == 1 else f"from {days[0]} to {days[-1]}"
    s = run.doc["settings"]
    lines = [
        f"**Measured** {when} on {machine}; {versions}; {' and '.join(commits)}. "
        f"Model width $d = {s['d_model']}$, {s['tokens']:,} tokens per batch ($b = {tex_count(s['tokens'])} / t$), "
        "every variant causal and checked against a float64 reference before it is timed.",
        "",
    ]
    timing = list(dict.fromkeys(settings_words(src["settings"], run.gpu) for src in sources
                                if any((r.run or 0) == sources.index(src) for r in run.rows)))
    if timing:
        lines += [f"**Timing**: {'; or '.join(timing)}.", ""]
    load = load_words(p)
    if len(sources) == 1 and load:
        lines += [f"**Load**: {load}, on {p['cpu_count']} CPUs.", ""]
    if len(sources) > 1:
        order = sorted(range(len(sources)), key=lambda i: sources[i]["date_utc"])
        loads = [load_words(source) for source in sources]
        lines += [f"**{len(sources)} runs**, merged into this file by `python -m attention.bench merge` "
                  "(where two runs measured the same row, the newer one's is kept):", ""]
        stamp = slice(0, 16) if len(days) > 1 else slice(11, 16)  # the day too, if they differ
        lines += [f"- {sources[i]['date_utc'][stamp].replace('T', ' ')} UTC: {_what(run, i)}"
                  + ("; **cut off before its end**" if not sources[i].get("complete", True) else "")
                  + f"; timing: {settings_words(sources[i]['settings'], run.gpu)}"
                  + (f"; {loads[i]}" if loads[i] else "")
                  + f"; {_commit(sources[i]['git'])}."
                  for i in order]
        lines.append("")
    if not run.doc.get("complete", True):
        lines += ['!!! warning "This run did not finish"', "",
                  f"    {run.doc.get('stopped', 'A source run was cut off before its end.')} "
                  "Every row it finished is shown.", ""]
    lines += ['??? info "Commands, methods and raw results"', ""]
    lines += [f"    - `{src['command']}` ({src['date_utc'][:16].replace('T', ' ')} UTC, "
              f"{_commit(src['git'])})" for src in sources]
    lines += [f"    - Timing: {run.doc['methods']['timing']}.", f"    - Memory: {run.doc['methods']['memory']}.",
              f"    - FLOPs: {run.doc['methods']['flops']}."]
    if "decode" in run.doc["methods"]:
        lines.append(f"    - Decoding: {run.doc['methods']['decode']}.")
    lines += [f"    - Raw results: [`results/{run.stem}.json`](results/{run.stem}.json).", ""]
    return "\n".join(lines)


def _figure(run: Run, name: str) -> str:
    alt, _ = figure_names(run)[name]
    caption = alt.replace('"', "'")  # the caption under the figure (the figure hook numbers it)
    return f'![{alt}](../figures/{name}.svg "{caption}")'


def _detail_t(run: Run, ts: list[int]) -> int:
    """The t of a group's detail table and of the roofline tables: on a GPU the longest, since the
    shortest calls there are the noisiest; on a CPU the speed goal's t where it was timed."""
    if run.gpu:
        return ts[-1]
    goal_t = run.doc["goals"]["speed"][0]["t"] if run.doc["goals"]["speed"] else None
    return goal_t if goal_t in ts else ts[-1]


def groups_markdown(run: Run, level: str) -> str:
    """Every group of one level: per dtype a heading, per head width tables per pass and figures."""
    names, out = figure_names(run), []
    what = "layers" if level == "layer" else "kernels"
    for dtype in run.dtypes:
        groups = run.groups(level, dtype)
        if not groups:
            continue
        out += [f"### The {what} in {dtype}", ""]
        for group in groups:
            if len(groups) > 1 or level == "kernel":
                out += [f"#### $d_h = {group.d_h}$, $h = {group.h}$", ""]
            for pass_name, rows in group.passes():
                ts = sorted({r.t for r in rows})
                peak = run.doc["peaks"].get(dtype, {})
                body = [tables.time_table(rows, pass_name), "", tables.detail_table(rows, _detail_t(run, ts), peak)]
                out += [f'=== "{pass_name}"', ""]
                out += ["    " + line if line else "" for line in "\n".join(body).splitlines()]
                out.append("")
            for kind in ("throughput", "time", "memory"):
                name = f"appendix-{run.stem}-{group.slug}-{kind}"
                if name in names:
                    out += [_figure(run, name), ""]
            out += [tables.not_run(group), ""]
    return "\n".join(out)


def _peak_text(flops: float, measured: bool) -> str:
    """A measured peak to three digits, a datasheet's as printed there (989.5 TFLOP/s)."""
    return rate(flops, "FLOP/s") if measured else f"{flops / 1e12:g} TFLOP/s"


def roofline_markdown(run: Run) -> str:
    """Per dtype with peaks: the machine's roofline, its figure, and a table at one t per pass."""
    out, names = [], figure_names(run)
    for dtype in run.dtypes:
        machine = machine_roof(run.doc, dtype)
        name = f"appendix-{run.stem}-roofline-{dtype}"
        if machine is None or name not in names:
            continue
        kernels = [r for r in run.rows if r.level == "kernel" and r.dtype == dtype and r.status == "ok"]
        t = _detail_t(run, sorted({r.t for r in kernels}))
        out += [f"#### Roofline, {dtype}", "",
                f"$P$ = {_peak_text(machine['peak_flops'], machine['measured'])}, $\\beta$ = "
                f"{rate(machine['bandwidth'], 'B/s')} ({'measured' if machine['measured'] else 'datasheet'}), "
                f"ridge point $P / \\beta$ = {machine['ridge']:.3g} FLOP per byte.", "", _figure(run, name), ""]
        for pass_name in ("forward", "forward+backward"):
            body = tables.roofline_table(run, dtype, t, pass_name)
            if body:
                out += [f'=== "{pass_name}"', ""] + ["    " + ln if ln else "" for ln in body.splitlines()] + [""]
    return "\n".join(out)


def goals_markdown(run: Run) -> str:
    """The goals part: every goal, then the GPU goals."""
    goals, out = run.doc["goals"], []
    if goals["speed"] or goals.get("memory") or goals.get("ratios"):
        out += ["## Goals", "", tables.goals_table(run), ""]
    gpu_goals = tables.gpu_goals_table(run) if run.gpu else ""
    if gpu_goals:
        out += ["### GPU goals", "", gpu_goals, ""]
    return "\n".join(out)


def peaks_markdown(run: Run) -> str:
    """The peaks part: the peaks, and the roofline per dtype."""
    return "\n".join(["## Peaks and the roofline", "", tables.peaks_table(run), "", roofline_markdown(run)])


def decode_markdown(run: Run) -> str:
    """The decode part: tokens/s without and with the cache, and the models."""
    if not run.doc.get("decode"):
        return ""
    return "\n".join(["## Decoding with and without the KV cache", "", tables.decode_table(run), "",
                      tables.models_table(run), ""])


def sweep_markdown(run: Run) -> str:
    """The sweep part: the kernels, then the layers."""
    out = []
    for level, heading in (("kernel", "## Attention kernels"), ("layer", "## Whole layers")):
        body = groups_markdown(run, level)
        if body:
            out += [heading, "", body]
    return "\n".join(out)


def renderer(part: Part) -> Callable[[Run], str]:
    """The function its record names (``module:function``) that renders ``part`` of a run."""
    module, _, name = part.renderer.partition(":")
    return getattr(importlib.import_module(module), name)


def run_markdown(run: Run) -> str:
    """The generated part of a run's page: where and how, then the parts in :data:`RUN_SECTIONS`."""
    sections = [renderer(BY_NAME[name])(run) for name in RUN_SECTIONS]
    return "\n".join(["## Where and how", "", provenance_markdown(run), *filter(None, sections)])


def part_markdown(run: Run, part: str) -> str:
    """One part of a run on its own: how it was measured, then what its renderer shows."""
    p = run.provenance
    threads = threads_words(p)
    method = run.doc["methods"].get(part)
    how = f"; {method.rstrip('.')}" if method else ""
    load = load_words(p)
    load = f", {load}" if load else ""
    body = renderer(BY_NAME[part])(run)
    return (f"*Measured on {run.date} on {run.device}, {threads}{load}, torch {p['torch']}, "
            f"{_commit(p.get('git'))}{how}. "
            f"Command: `{p['command']}`.*\n\n{body}\n")


def not_measured(part: str, stem: str) -> str:
    """What a page shows for a part whose results file, listed in :data:`PAGES`, is not there yet."""
    return (f'!!! note "Not measured yet"\n\n    There is no results file `results/{stem}.json` yet: the '
            f"`{part}` part has not been run on this machine. `python -m attention.bench --parts {part}` "
            "measures it (`--help` lists its options).\n")


def runs_table(runs: dict[str, Run]) -> str:
    """One row per results file: the device, when, torch, how many rows, and its page."""
    body = []
    for stem, run in runs.items():
        counts = []
        for kind in ROW_KINDS:
            rows = kind.read(run.doc) if kind.label else []
            if rows:
                counts.append(f"{sum(r['status'] == 'ok' for r in rows)} of {len(rows)} {kind.label}")
        page = PAGES.get(stem)
        where = f"[{run.device}]({page})" if page else run.device
        days = sorted({source["date_utc"][:10] for source in run.sources})
        when = days[0] if len(days) == 1 else f"{days[0]} to {days[-1]}"  # a merged file's runs
        body.append([where, when, run.provenance["torch"], "; ".join(counts) or "—",
                     f"[`{stem}.json`](results/{stem}.json)"])
    return table(["device", "measured", "torch", "with a time", "results"], body,
                 [False, False, False, False, False])


def files_table() -> str:
    """Every file of the results folder with what it records of its provenance, each of date,
    commit, torch, Triton, device and command shown or marked "not recorded"."""
    body = []
    for path in results_files():
        p = file_provenance(path)
        name = path.relative_to(RESULTS).as_posix()
        body.append([f"[`{name}`](results/{name})", *(p[field] for field in PROVENANCE_FIELDS)])
    return table(["file", "measured (UTC)", "commit", "torch", "Triton", "device", "command"], body,
                 [False] * 7, "What each results file records of where it came from; a commit "
                 "marked \"unverified tree\" was never compared with the tree that ran.")


def fill_markers(markdown: str, runs: dict[str, Run]) -> tuple[str, str | None]:
    """``markdown`` with its markers replaced, and the stem of the run its page is about."""
    stems = [m["stem"] for m in RUN_MARKER.finditer(markdown)]
    for stem in stems:
        if stem not in runs:
            raise ValueError(f"no results file {stem}.json for the marker of run {stem}; there are {sorted(runs)}")
    for m in PART_MARKER.finditer(markdown):
        if m["part"] == "run":
            continue
        if m["part"] not in BY_NAME:
            raise ValueError(f"no benchmark part {m['part']!r} for the marker {m.group(0)}; there are {sorted(BY_NAME)}")
        if m["stem"] not in runs and m["stem"] in PAGES:
            continue  # a file the appendix expects that has not been measured yet: said so below
        if m["stem"] not in runs or not any(k.read(runs[m["stem"]].doc) for k in BY_NAME[m["part"]].kinds):
            raise ValueError(f"no {m['part']} rows in {m['stem']}.json for the marker {m.group(0)}")

    def part(m: re.Match) -> str:
        if m["part"] == "run":
            return m.group(0)
        return part_markdown(runs[m["stem"]], m["part"]) if m["stem"] in runs else not_measured(m["part"], m["stem"])

    markdown = PART_MARKER.sub(part, markdown)
    markdown = RUN_MARKER.sub(lambda m: run_markdown(runs[m["stem"]]), markdown)
    if FILES_MARKER in markdown:
        markdown = markdown.replace(FILES_MARKER, files_table())
    return markdown.replace(RUNS_MARKER, runs_table(runs)), (stems[0] if stems else None)

