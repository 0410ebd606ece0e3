"""Figures of chapter 10: the size of the KV cache, the measured speed of decoding with it, the
bound the memory bandwidth sets on that speed, and the cache of multi-head latent attention.

Notation: b batch size, t tokens (the context length), L layers, h query heads, h_kv key/value
heads, d_h head width, w window of sliding-window attention, s bytes per number, d_c and d_h^R
the latent and rotary widths of MLA, β memory bandwidth. The cache figures are computed from
equation (10.6), ``kv_cache_bytes``, and ``latent_cache_bytes``; the speed figures read the decode
rows that ``python -m attention.bench`` stores in ``docs/appendix/results/`` (the first says
"not measured yet" when there are none) and set Raschka's reported figures, hatched and labelled
as cited, beside them. All are cheap: no model runs during the build.
"""

import json
import textwrap
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from attention import TinyTransformer, kv_cache_bytes, latent_cache_bytes, weights_read_per_token
from book.constants import DOCS
from book.figures import PAPER

RESULTS_DIR = DOCS / "appendix" / "results"
RESULTS = RESULTS_DIR / "cpu.json"
# The runs with decode rows, and how the figure names their GPU; the CPU's name is its run's record
# (cpu_label).
DEVICES = {"cpu.json": None, "cuda-h100-quick.json": "H100", "cuda-h200.json": "H200"}
# DeepSeek-V2 (DeepSeek-AI 2024a, section 3.1.2): 60 layers, 128 heads of 128, d_c = 512,
# d_h^R = 64; 16-bit numbers.
DSV2_LAYERS, DSV2_HEADS, DSV2_D_H, DSV2_D_C, DSV2_D_R = 60, 128, 128, 512, 64
# A 7B-class shape, from the table of section 10.4: L = 32 layers, h = 32 heads of d_h = 128,
# 16-bit numbers; Mistral 7B's window w = 4096 (Jiang et al., 2023, table 1).
LAYERS, HEADS, D_H, BYTES, WINDOW = 32, 32, 128, 2, 4096
# Cited, not measured here: Raschka's KV-cache bonus material (ch04/03_kv-cache/README.md),
# 124M-parameter GPT, 200 new tokens, Apple M4 CPU: tokens/s without and with his cache.
RASCHKA = {"without cache": 27.0, "with cache": 144.0}


def plain_log_y(ax: Axes) -> None:
    """Give ``ax`` a log y axis whose decades read as plain numbers (1, 10, 100), without minor
    ticks: the bars carry their own values."""
    ax.set_yscale("log")
    ax.minorticks_off()
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))


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
        # the cited bar: hatched and paler, edged in the full colour (3:1 on either page)
        bars[-1].set(hatch="//", hatchcolor="black", facecolor=(color, 0.6), edgecolor=color)
        ax.bar_label(bars, fmt="%.0f", fontsize=8, padding=2)
    plain_log_y(ax)
    ax.set_ylim(top=4 * max(*speed.values(), *RASCHKA.values()))  # room for the legend
    # "gpt2-small-\nuntrained": three groups' names side by side fit a phone's column
    ax.set_xticks(range(len(groups)), labels=[textwrap.fill(g, 12) for g in groups])
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
    # as the x label, so that the layout keeps it clear of the tick labels
    ax.set_xlabel(f"{source}\nhatched: Raschka's reported figures, Apple M4 CPU,\nnot measured "
                  "here", fontsize=8)
    ax.legend(frameon=False, fontsize=8.5, loc="upper left", ncols=2)
    return fig


def cpu_label(provenance: dict) -> str:
    """A CPU run's machine as its provenance records it: the CPU model and the number of logical
    CPUs (``os.cpu_count()``), "AMD EPYC" over "2 CPUs"; "CPU" where it records neither."""
    model = textwrap.fill(provenance.get("cpu_model", "CPU"), 16)
    return f"{model}\n{provenance['cpu_count']} CPUs" if "cpu_count" in provenance else model


def decode_bound_rows() -> list[tuple[str, float, float, str]]:
    """(device, measured tokens/s, bandwidth bound, β's source) of GPT-2 small with the cache.

    The bound is equation (10.11): β / (s · weights read + mean cache bytes read), with s = 4
    (the rows are float32) and β the run's STREAM measurement, or its datasheet figure.
    """
    found = []
    for name, device in DEVICES.items():
        path = RESULTS_DIR / name
        if not path.is_file():
            continue
        run = json.loads(path.read_text(encoding="utf-8"))
        peaks = run.get("peaks", {})
        bandwidth = peaks.get("bandwidth_measured", peaks.get("bandwidth"))
        for row in run.get("decode") or []:
            if row["model"] != "gpt2-small-untrained" or not row["use_cache"] or not bandwidth:
                continue
            config = row["config"]
            with torch.device("meta"):
                weights = weights_read_per_token(TinyTransformer(**config))
            mean_cached = row["prompt_tokens"] + row["new_tokens"] // 2
            cache = kv_cache_bytes(1, mean_cached, config["num_layers"], config["num_heads"],
                                   config["d_model"] // config["num_heads"], 4)
            bound = bandwidth["bytes_per_s"] / (4 * weights + cache)
            source = "STREAM" if bandwidth.get("measured") else "datasheet"
            label = device or cpu_label(run.get("provenance", {}))
            found.append((label, row["tokens_per_s"], bound, source))
    return found


def decode_bound() -> Figure:
    """Measured tokens/s of GPT-2 small with the cache against the bandwidth bound, per device."""
    rows = decode_bound_rows()
    fig, ax = plt.subplots(figsize=(7.2, 4.0), layout="constrained")
    width = 0.38
    labels = [f"{device}\nβ from {source}" for device, _, _, source in rows]
    xs = range(len(rows))
    bound = ax.bar([x - width / 2 for x in xs], [r[2] for r in rows], width, color=PAPER,
                   edgecolor="#7570b3", hatch="//", label="bound: β / bytes read per token")
    measured = ax.bar([x + width / 2 for x in xs], [r[1] for r in rows], width, color="#1b9e77",
                      label="measured (greedy decoding, b = 1)")
    ax.bar_label(bound, fmt="%.0f", fontsize=8.5, padding=2)
    ax.bar_label(measured, fmt="%.0f", fontsize=8.5, padding=2)
    plain_log_y(ax)
    ax.set_xticks(list(xs), labels=labels)
    ax.set_ylim(1, 40 * max([r[2] for r in rows], default=10))  # room for the legend
    ax.set_ylabel("tokens per second")
    ax.set_title("Decoding GPT-2 small's shape (float32): measured speed and bandwidth bound")
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(frameon=False, fontsize=8.5, loc="upper left")
    if not rows:
        ax.text(0.5, 0.5, "not measured yet", transform=ax.transAxes, ha="center", fontsize=10)
    return fig


def mla_cache() -> Figure:
    """Cache per token of DeepSeek-V2's shape with MHA, GQA, MQA and MLA, on a log axis."""
    def per_token(kv_heads: int) -> int:
        return kv_cache_bytes(1, 1, DSV2_LAYERS, kv_heads, DSV2_D_H, 2)

    bars = [
        (f"MHA\nh_kv = {DSV2_HEADS}", per_token(DSV2_HEADS), "#d95f02"),
        ("GQA\nh_kv = 8", per_token(8), "#1b9e77"),
        ("MLA\n$d_c + d_h^R$ = 576", latent_cache_bytes(1, 1, DSV2_LAYERS, DSV2_D_C, DSV2_D_R, 2),
         "#e7298a"),
        ("MQA\nh_kv = 1", per_token(1), "#7570b3"),
    ]
    fig, ax = plt.subplots(figsize=(7.2, 3.8), layout="constrained")
    drawn = ax.bar([label for label, _, _ in bars], [size / 2**10 for _, size, _ in bars],
                   color=[color for _, _, color in bars], width=0.6)
    ax.bar_label(drawn, labels=[f"{size / 2**10:,.1f} KiB" for _, size, _ in bars],
                 fontsize=8.5, padding=2)
    plain_log_y(ax)
    ax.set(ylim=(None, 8 * bars[0][1] / 2**10), ylabel="cache per token, all layers (KiB)",
           title=f"DeepSeek-V2's shape: L = {DSV2_LAYERS}, h = {DSV2_HEADS}, d_h = {DSV2_D_H}, "
                 "16-bit numbers")
    ax.spines[["top", "right"]].set_visible(False)
    return fig


FIGURES = {
    "ch10-cache-memory": cache_memory,
    "ch10-decode-speed": decode_speed,
    "ch10-decode-bound": decode_bound,
    "ch10-mla-cache": mla_cache,
}
