"""Figures of chapter 10: the size of the KV cache, and the measured speed of decoding with it.

Notation: b batch size, t tokens (the context length), L layers, h query heads, h_kv key/value
heads, d_h head width, w window of sliding-window attention, s bytes per number. The cache
figure is computed from equation (10.6), ``kv_cache_bytes``; the speed figure reads the decode
rows that ``python -m attention.bench`` stores in ``docs/appendix/results/cpu.json`` (it says
"not measured yet" when there are none) and sets Raschka's reported figures, hatched and labelled
as cited, beside them. Both are cheap: no model runs during the build.
"""

import json
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from attention import kv_cache_bytes

RESULTS = Path(__file__).resolve().parents[1] / "appendix" / "results" / "cpu.json"
# A 7B-class shape, from the table of section 10.4: L = 32 layers, h = 32 heads of d_h = 128,
# 16-bit numbers; Mistral 7B's window w = 4096 (Jiang et al., 2023, table 1).
LAYERS, HEADS, D_H, BYTES, WINDOW = 32, 32, 128, 2, 4096
# Cited, not measured here: Raschka's KV-cache bonus material (ch04/03_kv-cache/README.md),
# 124M-parameter GPT, 200 new tokens, Apple M4 CPU: tokens/s without and with his cache.
RASCHKA = {"without cache": 27.0, "with cache": 144.0}


def cache_memory() -> Figure:
    """Cache bytes of one sequence against t, for MHA, GQA, MQA and GQA with a window."""
    lengths = [2**k for k in range(7, 18)]  # t from 128 to 131,072
    curves = (
        (f"MHA, h_kv = {HEADS} (Llama 2 7B)", HEADS, None, "#d95f02", "-"),
        ("GQA, h_kv = 8 (Llama 3 8B)", 8, None, "#1b9e77", "-"),
        (f"GQA, h_kv = 8, window w = {WINDOW:,} (Mistral 7B)", 8, WINDOW, "#1b9e77", "--"),
        ("MQA, h_kv = 1", 1, None, "#7570b3", "-"),
    )
    fig, ax = plt.subplots(figsize=(7.2, 4.4), layout="constrained")
    for label, kv_heads, window, color, style in curves:
        sizes = [
            kv_cache_bytes(1, t if window is None else min(t, window), LAYERS, kv_heads, D_H, BYTES)
            for t in lengths
        ]
        ax.plot(lengths, [size / 2**30 for size in sizes], style, marker="o", markersize=3.5,
                color=color, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xticks(lengths[::2], labels=[f"{t:,}" for t in lengths[::2]])
    ticks = [2.0**k for k in range(-10, 7, 2)]
    ax.set_yticks(ticks, labels=[f"{v * 1024:g} MiB" if v < 1 else f"{v:g} GiB" for v in ticks])
    ax.minorticks_off()
    ax.set_xlabel("context length t (tokens)")
    ax.set_ylabel("KV cache of one sequence")
    ax.set_title(f"Equation (10.6): L = {LAYERS} layers, h = {HEADS} heads, d_h = {D_H}, "
                 "16-bit, b = 1")
    ax.grid(True, which="major", alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(frameon=False, fontsize=8.5, loc="upper left")
    return fig


def decode_rows(path: Path) -> tuple[list[dict], dict]:
    """The decode rows of a results file and its provenance; no rows if it has none."""
    run = json.loads(path.read_text(encoding="utf-8"))
    return run.get("decode") or [], run.get("provenance", {})


def decode_speed() -> Figure:
    """Tokens/s with and without the cache, per model, from the results file; Raschka's cited."""
    rows, provenance = decode_rows(RESULTS)
    speed = {(row["model"], row["use_cache"]): row["tokens_per_s"] for row in rows}
    models = list(dict.fromkeys(row["model"] for row in rows)) or ["this book's models"]
    groups = [*models, "Raschka (cited)"]
    fig, ax = plt.subplots(figsize=(7.2, 4.2), layout="constrained")
    width = 0.38
    for offset, use_cache, color, name in ((-width / 2, False, "#d95f02", "without cache"),
                                           (width / 2, True, "#1b9e77", "with cache")):
        measured = [(k, speed[m, use_cache]) for k, m in enumerate(models)
                    if (m, use_cache) in speed]
        positions, values = zip(*measured, (len(models), RASCHKA[name]))  # cited bar last
        bars = ax.bar([k + offset for k in positions], values, width, color=color, label=name)
        bars[-1].set_hatch("//")
        bars[-1].set_alpha(0.6)
        ax.bar_label(bars, fmt="%.0f", fontsize=8, padding=2)
    ax.set_yscale("log")
    ax.minorticks_off()
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.set_ylim(top=4 * max(*speed.values(), *RASCHKA.values()))  # room for the legend
    ax.set_xticks(range(len(groups)), labels=groups)
    ax.set_xlim(-0.6, len(groups) - 0.4)  # every group, with or without bars
    ax.set_ylabel("tokens per second (greedy decoding)")
    ax.set_title("Decoding speed with and without the KV cache")
    ax.spines[["top", "right"]].set_visible(False)
    if rows:
        machine, torch_version = provenance.get("cpu_model", "?"), provenance.get("torch", "?")
        date = str(provenance.get("date_utc", "?"))[:10]
        source = f"measured: {machine}, torch {torch_version}, {date}"
    else:
        source = "the results file has no decode rows"
        middle = (RASCHKA["without cache"] * RASCHKA["with cache"]) ** 0.5  # halfway on a log axis
        ax.text(0, middle, "not measured yet", ha="center", va="center", fontsize=10)
    ax.text(0.0, -0.12, f"{source}\nhatched: Raschka's reported figures, Apple M4 CPU, not "
            "measured here", transform=ax.transAxes, fontsize=8, va="top")
    ax.legend(frameon=False, fontsize=8.5, loc="upper left", ncols=2)
    return fig


FIGURES = {
    "ch10-cache-memory": cache_memory,
    "ch10-decode-speed": decode_speed,
}
