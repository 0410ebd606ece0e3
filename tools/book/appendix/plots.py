"""The appendix's figures: functions that draw a run's measurements as matplotlib Figures.

They go through the book's figure pipeline like every chapter's figure
(tools/book/figures/appendix.py lists them; tools/book/hooks/figures.py draws them in the book's
style, keeps their text as text, gives them the dark theme's colours and sizes them so that their
smallest text is legible on a phone).
So they are drawn narrow, 5.4 inches, the two passes one above the other, and every variant keeps
one colour and marker on every figure of the appendix.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from attention.bench.variants import VARIANTS
from attention.roofline import machine_roof, plot_roofline, roofline_points

from .format import readable_bytes
from .load import Group, Run

WIDTH = 5.4  # inches: the 10-point ticks stay at 9 CSS px or more on a 390 px phone
# Dark2 (ColorBrewer), each colour 3:1 or more on white and on the dark theme's slate (WCAG's
# minimum for graphics): its green a little darker than #66a61e (2.98:1 on white), its yellow
# #e6ab02 (2.1:1) a blue (a dark gold was too close to Dark2's brown, and Dark2 has no blue),
# its grey #666666 (2.8:1 on slate) a mid grey; then dashed lines.
COLOURS = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#5f9c1c", "#1a6ce8", "#a6761d", "#808080")
MARKERS = "os^Dv<>ph*"
KINDS = {
    "throughput": ("TFLOP/s", "tflops", 1.0, "linear"),
    "time": ("time per call (ms)", "median_s", 1e3, "log"),
    "memory": ("peak memory of one call", "peak_bytes", 1.0, "log"),
}


def style(variant: str) -> dict:
    """One colour, marker and line style per variant, the same on every figure (variants are
    numbered within their level, in the harness's order)."""
    level = next((v.level for v in VARIANTS if v.name == variant), None)
    names = [v.name for v in VARIANTS if v.level == level]
    i = names.index(variant) if variant in names else len(COLOURS) + sum(map(ord, variant))
    return {"color": COLOURS[i % len(COLOURS)], "marker": MARKERS[i % len(MARKERS)],
            "linestyle": "-" if i < len(COLOURS) else "--"}


def _t_axis(ax, ts: list[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(ts))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda t, _: f"{t:.0f}"))
    ax.xaxis.set_minor_locator(NullLocator())


def passes_figure(run: Run, group: Group, kind: str) -> Figure:
    """One quantity of a group against t: forward above, forward+backward below."""
    label, field, scale, yscale = KINDS[kind]
    passes = group.passes()
    ts = sorted({r.t for r in group.rows})
    fig, axes = plt.subplots(len(passes), 1, figsize=(WIDTH, 1.0 + 2.6 * len(passes)), sharex=True,
                             layout="constrained", squeeze=False)
    for ax, (pass_name, rows) in zip(axes[:, 0], passes):
        for name in dict.fromkeys(r.variant for r in rows):
            pts = sorted((r.t, getattr(r, field) * scale) for r in rows
                         if r.variant == name and r.status == "ok" and getattr(r, field) is not None)
            if pts:
                ax.plot(*zip(*pts), markersize=4.5, label=name, **style(name))
        if kind == "memory":
            ax.set_yscale("log", base=2)
            ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: readable_bytes(y)))
        else:
            ax.set_yscale(yscale)
        ax.set_title(pass_name, loc="left")
        ax.set_ylabel(label)
        ax.grid(True, which="major", alpha=0.3)
        ax.spines[["top", "right"]].set_visible(False)
        _t_axis(ax, ts)
    axes[-1, 0].set_xlabel("sequence length t")
    handles = {}
    for ax in axes[:, 0]:
        for handle, name in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(name, handle)
    fig.legend(handles.values(), handles.keys(), loc="outside lower center", ncol=2, frameon=False)
    fig.suptitle(f"{group.dtype}, $d_h = {group.d_h}$, $h = {group.h}$: {run.device}", fontsize=11)
    return fig


def roofline_figure(run: Run, dtype: str) -> Figure:
    """Every kernel of one dtype on the machine's roofline."""
    points = roofline_points(run.doc, run.json_rows(dtype))
    machine = machine_roof(run.doc, dtype)
    kind = "measured peaks" if machine["measured"] else "datasheet peaks"
    colours = {p["variant"]: style(p["variant"])["color"] for p in points}
    return plot_roofline(points, machine, f"{run.device}, {dtype} ({kind})", colours)


def figure_names(run: Run) -> dict[str, tuple[str, Callable[[], Figure]]]:
    """Every figure of a run: name -> (alt text, function that draws it).

    Kernels: throughput per dtype and head width, memory in the first dtype; layers: time per
    dtype, memory in the first dtype; a roofline per dtype whose peaks the run has. A group
    measured at one t only (a run cut off early) has its tables and no figure: nothing to draw
    against t.
    """
    out: dict[str, tuple[str, Callable[[], Figure]]] = {}
    first = run.dtypes[0] if run.dtypes else None
    for group in run.groups():
        if len({r.t for r in group.rows}) < 2:
            continue
        kinds = ["throughput" if group.level == "kernel" else "time"]
        kinds += ["memory"] if group.dtype == first else []
        for kind in kinds:
            label = KINDS[kind][0]
            alt = (f"{label} against sequence length t, forward and forward+backward, of every variant: "
                   f"{group.title(math=False)}, {group.dtype}, on {run.device}")
            out[f"appendix-{run.stem}-{group.slug}-{kind}"] = (alt, partial(passes_figure, run, group, kind))
    for dtype in run.dtypes:
        if machine_roof(run.doc, dtype) and roofline_points(run.doc, run.json_rows(dtype)):
            alt = (f"Roofline of {run.device} in {dtype}: attainable FLOP/s against arithmetic intensity, "
                   "with every attention kernel of this run at its intensity and achieved FLOP/s")
            out[f"appendix-{run.stem}-roofline-{dtype}"] = (alt, partial(roofline_figure, run, dtype))
    return out
