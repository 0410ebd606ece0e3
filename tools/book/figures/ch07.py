"""Figures of chapter 7: what attention costs, how tiling avoids the score matrix, and why IO
matters.

Notation: b batch size, h heads, t tokens (t_q, t_k for queries and keys), d_h width of one
head, B the block size of the tiled kernel (``block_size``: B queries and B keys per tile),
T = t / B the number of blocks along each side, s the bytes of one number (4 in float32, 2 in
float16 and bfloat16).
"""

import json
from collections.abc import Callable

import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Polygon, Rectangle
from torch.utils.flop_counter import FlopCounterMode

from attention import flash_attention, scaled_dot_product_attention
from attention.flops import device_bandwidth, device_peak
from attention.memory import MemoryTracker
from attention.roofline import machine_roof, plot_roofline, roofline_points
from book.appendix.plots import style
from book.constants import DOCS
from book.figures import GUIDE, INK, PAPER

# Each kernel in its colour of the appendix's figures, as the measured roofline draws them
EXPLICIT_COLOR = style("explicit")["color"]
FLASH_COLOR = style("flash_attention")["color"]
TILE_FILL = "#dbc8a5"  # FLASH_COLOR at 40% on white: the tiles a query block does not read now
SKIPPED_COLOR = "0.93"
# The tiles' edges: the pale tiles reach 3:1 on the dark page, their edges on the light one.
TILE_EDGE, SKIPPED_EDGE = FLASH_COLOR, "0.55"

# NVIDIA's datasheet figures for the H100 SXM (dense BF16 on tensor cores, HBM3 bandwidth), kept
# with their sources in attention.flops.
_H100 = "NVIDIA H100 80GB HBM3"
H100_PEAK_FLOPS = device_peak(_H100, "bf16").tflops * 1e12
H100_HBM_BYTES_PER_S = device_bandwidth(_H100).bytes_per_s
# FlashAttention-3's reported FP16 throughput on an H100, reached in the forward pass without a
# causal mask, with heads of width 256 (Shah et al., 2024, abstract and figure 5, panel e): a
# cited figure.
FA3_FP16_FLOPS = 740e12


def _peak_bytes(fn: Callable[..., object], *args: object, **kwargs: object) -> tuple[int, int]:
    """Peak live bytes and largest tensor that ``fn(*args, **kwargs)`` allocates."""
    with torch.no_grad(), MemoryTracker() as mem:
        fn(*args, **kwargs)
    return mem.peak_bytes, mem.largest_bytes


def memory_vs_t() -> Figure:
    """Peak live bytes of explicit and tiled causal attention, one head of width 64, t from 128
    to 2048."""
    torch.manual_seed(123)
    lengths = [128, 256, 512, 1024, 2048]
    explicit, flash = [], []
    for t in lengths:
        q, k, v = torch.randn(3, 1, 1, t, 64).unbind(0)  # (b, h, t, d_h) each
        explicit.append(_peak_bytes(scaled_dot_product_attention, q, k, v, is_causal=True))
        flash.append(_peak_bytes(flash_attention, q, k, v, is_causal=True, block_size=128))
    kib = 1024.0

    fig, ax = plt.subplots(figsize=(6.8, 4.4), layout="constrained")
    curves = ((explicit, EXPLICIT_COLOR, "explicit"), (flash, FLASH_COLOR, "flash_attention"))
    for rows, color, name in curves:
        ax.plot(lengths, [p / kib for p, _ in rows], "o-", color=color,
                label=f"{name}: peak live bytes")
        ax.plot(lengths, [g / kib for _, g in rows], "s--", color=color,
                label=f"{name}: largest tensor")
    ratio = explicit[-1][0] / flash[-1][0]
    # In the empty corner under the curves: beside the point it names, it ran into the dashed
    # line on a phone.
    ax.text(0.98, 0.03, f"flash_attention's peak:\n{ratio:.0f}x smaller at t = {lengths[-1]}",
            transform=ax.transAxes, ha="right", va="bottom")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xticks(lengths, labels=[str(t) for t in lengths])
    ticks = [64, 256, 1024, 4096, 16384, 65536]
    ax.set_yticks(ticks, labels=[f"{k} KiB" if k < 1024 else f"{k // 1024} MiB" for k in ticks])
    ax.set_ylim(40, 100 * 1024)
    ax.set_xlabel("sequence length $t$")
    ax.set_ylabel("bytes (MemoryTracker, float32)")
    ax.set_title("Memory of causal attention, one head, $d_h = 64$")
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(frameon=False, loc="upper left", fontsize=9)
    return fig


def _visited_tiles(blocks: int, block_size: int, is_causal: bool) -> int:
    """Tiles that flash_attention computes, counted from its FLOPs: each tile costs
    4 B^2 d_h."""
    t, d_h = blocks * block_size, 2
    q = torch.randn(1, t, d_h)  # (b, t, d_h)
    with FlopCounterMode(display=False) as counter:
        flash_attention(q, q, q, is_causal=is_causal, block_size=block_size)
    return counter.get_total_flops() // (4 * block_size * block_size * d_h)


def _draw_grid(ax: Axes, blocks: int, is_causal: bool, highlight_row: int) -> None:
    """Draw a blocks x blocks grid of tiles: query blocks down, key blocks across."""
    for i in range(blocks):
        for j in range(blocks):
            if is_causal and j > i:
                ax.add_patch(Rectangle((j, i), 1, 1, facecolor=SKIPPED_COLOR,
                                       edgecolor=SKIPPED_EDGE, hatchcolor="0.75", hatch="///",
                                       linewidth=0.6))
                continue
            color = FLASH_COLOR if i == highlight_row else TILE_FILL
            ax.add_patch(Rectangle((j, i), 1, 1, facecolor=color, edgecolor=TILE_EDGE,
                                   linewidth=1.2))
            # a diagonal tile: computed, then masked above its diagonal
            if is_causal and i == j:
                ax.add_patch(Polygon([(j, i), (j + 1, i), (j + 1, i + 1)], closed=True,
                                     facecolor="white", alpha=0.75, edgecolor="none"))
    ax.set_xlim(0, blocks)
    ax.set_ylim(blocks, 0)
    ax.set_aspect("equal")
    ax.set_xticks([j + 0.5 for j in range(blocks)],
                  labels=[f"$K_{j + 1}$" for j in range(blocks)])
    ax.set_yticks([i + 0.5 for i in range(blocks)],
                  labels=[f"$Q_{i + 1}$" for i in range(blocks)])
    ax.tick_params(length=0)
    ax.xaxis.set_ticks_position("top")
    for spine in ax.spines.values():
        spine.set_visible(False)


def tiling() -> Figure:
    """The grid of (B, B) score tiles that flash_attention visits, without and with a causal
    mask."""
    torch.manual_seed(123)
    blocks, block_size, row = 8, 4, 5
    fig, axes = plt.subplots(1, 2, figsize=(8.6, 4.9), layout="constrained")
    for ax, is_causal in zip(axes, (False, True)):
        _draw_grid(ax, blocks, is_causal, row)
        last = row + 1 if is_causal else blocks
        ax.add_patch(FancyArrowPatch((0.15, row + 0.68), (last - 0.15, row + 0.68),
                                     arrowstyle="-|>", mutation_scale=14, color="black",
                                     linewidth=1.4))
        visited = _visited_tiles(blocks, block_size, is_causal)
        title = "causal: skip tiles above the diagonal" if is_causal else "full attention"
        ax.set_title(f"{title}\n{visited} of {blocks * blocks} tiles computed", fontsize=11)
        ax.set_xlabel("key blocks $K_j$, $V_j$ (streamed through SRAM)", labelpad=8)
    axes[0].set_ylabel("query blocks $Q_i$ (one per thread block)")
    # black: 6.2:1 on the row's green, in either theme (white would be 3.4:1)
    axes[0].text(blocks / 2, row + 0.3, "inner loop: update $m$, $\\ell$, $O_i$ tile by tile",
                 ha="center", va="center", fontsize=9, color="black")
    axes[1].annotate("diagonal tiles: computed,\nthen masked inside",
                     (blocks - 1.5, blocks - 1.5),
                     xytext=(blocks - 0.2, blocks - 5.6), ha="right",
                     bbox={"boxstyle": "round,pad=0.25", "facecolor": PAPER,
                           "edgecolor": "none"},
                     # black: the arrow lies on the tiles, light in either theme
                     arrowprops={"arrowstyle": "->", "color": "black", "linewidth": 0.8})
    return fig


def roofline() -> Figure:
    """Attainable throughput min(P, I * beta) on an H100 SXM, with the attention kernels placed
    on it.

    The tiled kernel is placed with K and V read from HBM once per query block (the two-level
    count, equation (7.16)), once per cluster of two query blocks that share each fetch (as
    FlashAttention-3's non-causal kernels do), and once per head, shared through the L2 cache
    (7.18). Each kernel has a marker of its own, named with its intensity in the legend below
    the axes: labels beside points 2x apart on a log axis would run into each other on a phone.
    """
    d_h, s, t = 64, 2, 4096
    flops = 4 * t * t * d_h  # equation (7.1), one head
    explicit_kernels = {  # name: (intensity, marker)
        "decode, $t_q = 1$": (4 * t * d_h / (s * (2 * t * d_h + 2 * d_h)), "v"),
        "softmax pass": (5 / (2 * s), "s"),  # 5 FLOPs per score, 2s bytes
        "explicit attention\n(whole)": (flops / (s * (4 * t * d_h + 4 * t * t)), "o"),
    }
    tiled_kernels = {
        "tiled, $B = 64$": (flops / (s * (2 * t * d_h + 2 * t * d_h * t / 64)), "P"),
        "tiled, $B = 128$,\n$K, V$ once per query block": (
            flops / (s * (2 * t * d_h + 2 * t * d_h * t / 128)), "D"),
        "cluster of $2 \\times 128$ rows": (
            flops / (s * (2 * t * d_h + 2 * t * d_h * t / 256)), "X"),
        "tiled, $K, V$ once per head\n(shared through L2)": (flops / (s * 4 * t * d_h), "^"),
    }
    beta = H100_HBM_BYTES_PER_S
    ridge = H100_PEAK_FLOPS / beta
    intensities = torch.logspace(-1, 4, 200)
    attainable = torch.minimum(torch.full_like(intensities, H100_PEAK_FLOPS),
                               intensities * beta) / 1e12

    fig, ax = plt.subplots(figsize=(7.6, 6.0), layout="constrained")
    ax.plot(intensities.numpy(), attainable.numpy(), color=INK, linewidth=1.8)
    ax.axvline(ridge, color=GUIDE, linestyle=":", linewidth=1)
    ax.annotate(f"ridge point\n{ridge:.0f} FLOP/byte", (ridge, 1.2), xytext=(6, 0),
                textcoords="offset points", fontsize=9, color=INK, alpha=0.75)
    ax.annotate("memory-bound: $I \\cdot \\beta$", (0.2, 0.2 * beta / 1e12), rotation=29,
                xytext=(4, -16), textcoords="offset points", fontsize=9, color=INK, alpha=0.8)
    ax.annotate("compute-bound: $P$", (4000, H100_PEAK_FLOPS / 1e12), xytext=(0, 6),
                textcoords="offset points", ha="center", fontsize=9, color=INK, alpha=0.8)
    needed = FA3_FP16_FLOPS / beta  # the intensity at which I * beta reaches 740 TFLOP/s
    fa3 = (f"FlashAttention-3, FP16, forward,\nnot causal, $d_h = 256$: "
           f"{FA3_FP16_FLOPS / 1e12:.0f} TFLOP/s\nreported; needs $I \\geq$ {needed:.0f}")
    ax.axhline(FA3_FP16_FLOPS / 1e12, color=FLASH_COLOR, linestyle="--", linewidth=1, label=fa3)
    ax.plot([needed], [FA3_FP16_FLOPS / 1e12], "|", color=FLASH_COLOR, markersize=12)
    for kernels, color in ((explicit_kernels, EXPLICIT_COLOR), (tiled_kernels, FLASH_COLOR)):
        for name, (intensity, marker) in kernels.items():
            bound = min(H100_PEAK_FLOPS, intensity * beta) / 1e12
            value = f"{intensity:.0f}" if intensity >= 10 else f"{intensity:.2f}"
            ax.plot([intensity], [bound], marker, color=color, markersize=7, linestyle="none",
                    label=f"{name}: {value}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(0.1, 1e4)
    ax.set_ylim(0.1, 3000)
    ax.set_xlabel("arithmetic intensity $I$ (FLOP per byte of HBM traffic)")
    ax.set_ylabel("attainable TFLOP/s")
    ax.set_title(f"Roofline of an H100 SXM (BF16), attention with $t = {t}$, $d_h = {d_h}$")
    ax.spines[["top", "right"]].set_visible(False)
    fig.legend(loc="outside lower center", ncols=2, frameon=False, fontsize=9,
               title="intensity $I$ of each kernel, FLOP/byte", title_fontsize=9)
    return fig


CPU_RESULTS = DOCS / "appendix" / "results" / "cpu.json"


def measured_roofline() -> Figure:
    """This machine's roofline from the committed CPU results: measured peaks, every kernel row.

    Without measured peaks in the results file, the figure says so instead of drawing a guess.
    """
    run = json.loads(CPU_RESULTS.read_text())
    machine = machine_roof(run, "float32")
    if machine is None:
        fig, ax = plt.subplots(figsize=(7.2, 2.0), layout="constrained")
        ax.text(0.5, 0.5, "not measured yet: docs/appendix/results/cpu.json has no peaks\n"
                "(python -m attention.bench --parts peaks measures them)", ha="center",
                va="center")
        ax.set_axis_off()
        return fig
    points = roofline_points(run, [r for r in run["results"] if r["dtype"] == "float32"])
    cpu = run["provenance"]["device_name"]
    # each kernel in its colour of the appendix's figures (tab10's orange is 2.5:1 on white)
    colours = {p["variant"]: style(p["variant"])["color"] for p in points}
    return plot_roofline(points, machine, f"Measured roofline: {cpu}, float32", colours)


FIGURES = {
    "ch07-memory-vs-t": memory_vs_t,
    "ch07-tiling": tiling,
    "ch07-roofline": roofline,
    "ch07-measured-roofline": measured_roofline,
}
