"""Figure of chapter 7, section 7.8: slow-memory traffic counted by the simulator, against the
formulas.

Notation: t tokens, d_h width of one head, M = M_SRAM the fast memory in elements. Markers are
counts from :mod:`attention.io_model`'s simulator; solid lines its exact closed forms; dotted
lines the leading terms of the two counts, 4 t^2 (standard) and 6 t^2 d_h^2 / M (tiled), of the
orders that Dao et al.'s Theorem 2 states, Theta(t d_h + t^2) and Theta(t^2 d_h^2 / M): the
theorem gives no constants, and 4 and 6 are the simulator's.
"""

from collections.abc import Callable

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from attention.io_model import (
    standard_attention_io,
    standard_io_formula,
    tiled_attention_io,
    tiled_io_formula,
)
from book.figures import INK

STANDARD_COLOR = "#d95f02"
TILED_COLOR = "#1b9e77"


def _panel(ax: Axes, xs: list[int], sizes: Callable[[int], tuple[int, int, int]],
           xlabel: str, title: str) -> None:
    """Simulated counts (markers), exact formulas (lines) and their leading terms (dotted)
    over xs."""
    runs = (
        ("standard", standard_attention_io, standard_io_formula, STANDARD_COLOR,
         lambda t, d_h, m: 4 * t * t),
        ("tiled", tiled_attention_io, tiled_io_formula, TILED_COLOR,
         lambda t, d_h, m: 6 * t * t * d_h * d_h / m),
    )
    for name, simulate, formula, color, leading in runs:
        ax.plot(xs, [formula(*sizes(x)) for x in xs], color=color, linewidth=1.5)
        ax.plot(xs, [simulate(*sizes(x)).total for x in xs], "o", color=color, markersize=5,
                label=f"{name}: simulated (o), formula (line)")
        ax.plot(xs, [leading(*sizes(x)) for x in xs], ":", color=color, linewidth=1.2)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.spines[["top", "right"]].set_visible(False)


def io_counts() -> Figure:
    """Slow-memory elements moved by standard and tiled attention over t, d_h and M."""
    t0, d0, m0 = 1024, 64, 16 * 64 * 64
    fig, axes = plt.subplots(1, 3, figsize=(10.5, 4.2), layout="constrained")
    _panel(axes[0], [2**k for k in range(7, 14)], lambda t: (t, d0, m0), "tokens $t$",
           f"over $t$ ($d_h = {d0}$, $M_{{\\mathrm{{SRAM}}}} = {m0:,}$)")
    _panel(axes[1], [2**k for k in range(4, 9)], lambda d: (t0, d, m0), "head width $d_h$",
           f"over $d_h$ ($t = {t0}$, $M_{{\\mathrm{{SRAM}}}} = {m0:,}$)")
    _panel(axes[2], [2**k for k in range(11, 19)], lambda m: (t0, d0, m),
           r"fast memory $M_{\mathrm{SRAM}}$ (elements)",
           f"over $M_{{\\mathrm{{SRAM}}}}$ ($t = {t0}$, $d_h = {d0}$)")
    axes[2].axvline(d0 * d0, color="0.5", linestyle="--", linewidth=1)
    axes[2].annotate(r"$M_{\mathrm{SRAM}} = d_h^2$", (d0 * d0, axes[2].get_ylim()[1]),
                     xytext=(4, -12), textcoords="offset points", color=INK, alpha=0.75)
    axes[0].set_ylabel("elements read + written in slow memory")
    axes[0].plot([], [], ":", color=INK, alpha=0.6, label="leading term (Theorem 2's order)")
    axes[0].legend(frameon=False, loc="upper left")
    return fig


FIGURES = {"ch07-io-counts": io_counts}
