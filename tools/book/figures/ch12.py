"""Figures of chapter 12: FAVOR+'s error against its derived variance, measured linear attention,
and sparse attention patterns.

Notation: t tokens, d_k width of queries and keys (d_h, one head), m random features, r feature
width, C chunk size. The error figure draws its own random inputs and features (seeded); the
timing figure reads the ``linear`` rows that ``python -m attention.bench --parts linear`` stored
in ``docs/appendix/results/cpu-linear.json`` (it says "not measured yet" when there are none).
The sparse patterns are chapter 11's mask rules (:mod:`attention.masks`), with the strided and
random rules written out as on the page.
"""

import json
from pathlib import Path

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from matplotlib.figure import Figure

from attention.favor import favor_attention, favor_error_variance, random_projection
from attention.masks import and_masks, causal, global_tokens, or_masks, sliding_window, to_dense
from book.constants import DOCS

from ._masks import mask_panels

RESULTS = DOCS / "appendix" / "results" / "cpu-linear.json"
FEATURES = (4, 8, 16, 32, 64, 128, 256, 512, 1024)
IID_COLOR, ORTHOGONAL_COLOR, PREDICTED_COLOR = "#d95f02", "#1b9e77", "#7570b3"
VARIANT_STYLES = {
    "softmax-sdpa": ("#7570b3", "-", "softmax, torch SDPA"),
    "softmax-explicit": ("#7570b3", "--", "softmax, explicit t x t"),
    "linear-parallel": ("#d95f02", "--", "linear, parallel"),
    "linear-chunked": ("#1b9e77", "-", "linear, chunked (C = 64)"),
    "linear-recurrent": ("#e7298a", ":", "linear, recurrent"),
}


def measured_error(scale: float, draws: int = 60, t: int = 16, d_k: int = 16) -> dict[str, list[float]]:
    """Mean squared error of FAVOR+'s output against softmax attention, and the predicted one.

    Queries and keys are N(0, scale^2) and values N(0, 1), non-causal; for each m the
    error is averaged over ``draws`` independent projections and over all t x d_k entries.
    """
    generator = torch.Generator().manual_seed(123)
    query, key = (torch.randn(t, d_k, generator=generator, dtype=torch.float64) * scale for _ in range(2))
    value = torch.randn(t, d_k, generator=generator, dtype=torch.float64)
    exact = F.scaled_dot_product_attention(query, key, value)
    curves: dict[str, list[float]] = {"independent": [], "orthogonal": [], "predicted": []}
    for m in FEATURES:
        for name, orthogonal in (("independent", False), ("orthogonal", True)):
            errors = [
                (favor_attention(query, key, value, num_features=m, projection=random_projection(
                    m, d_k, orthogonal, generator, torch.float64)) - exact).pow(2).mean()
                for _ in range(draws)
            ]
            curves[name].append(float(torch.stack(errors).mean()))
        curves["predicted"].append(float(favor_error_variance(query, key, value, num_features=m).mean()))
    return curves


def favor_error() -> Figure:
    """Two panels, small and larger scores: measured MSE against m, with equation (12.13)."""
    fig, axes = plt.subplots(1, 2, figsize=(7.4, 3.9), layout="constrained", sharey=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # thousands of tiny products: a second thread only waits, or spins
    try:
        panels = [measured_error(scale) for scale in (0.5, 0.75)]
    finally:
        torch.set_num_threads(threads)
    for ax, scale, curves in zip(axes, (0.5, 0.75), panels):
        ax.plot(FEATURES, curves["predicted"], "-", color=PREDICTED_COLOR, lw=2,
                label="predicted, eq. (12.13)")
        ax.plot(FEATURES, curves["independent"], "o", color=IID_COLOR, label="measured, independent")
        ax.plot(FEATURES, curves["orthogonal"], "s", color=ORTHOGONAL_COLOR, mfc="none",
                label="measured, orthogonal")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(FEATURES[::2], labels=[str(m) for m in FEATURES[::2]])
        ax.minorticks_off()
        ax.set_xlabel("random features m")
        ax.set_title(f"q, k ~ N(0, {scale:g}²), t = 16, d_k = 16", fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.spines[["top", "right"]].set_visible(False)
    axes[0].set_ylabel("mean squared error of the output")
    axes[0].legend(frameon=False, fontsize=8.5, loc="lower left")
    return fig


def linear_rows(path: Path) -> tuple[list[dict], dict, dict]:
    """The linear rows of a results file, its provenance and settings; no rows if it has none."""
    run = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    return run.get("linear") or [], run.get("provenance", {}), run.get("settings", {})


def linear_timings() -> Figure:
    """Measured forward time per call against t, every variant, from the results file."""
    rows, provenance, settings = linear_rows(RESULTS)
    rows = [r for r in rows if r["status"] == "ok" and r["pass"] == "forward"]
    shapes = sorted({(r["h"], r["d_h"]) for r in rows})[:1]  # one head shape, the first
    rows = [r for r in rows if (r["h"], r["d_h"]) in shapes]
    fig, ax = plt.subplots(figsize=(7.2, 4.4), layout="constrained")
    for variant, (color, style, label) in VARIANT_STYLES.items():
        points = sorted((r["t"], r["median_s"]) for r in rows if r["variant"] == variant)
        if points:
            ts, seconds = zip(*points)
            ax.plot(ts, [s * 1e3 for s in seconds], style, marker="o", markersize=3.5, color=color,
                    label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.minorticks_off()
    if rows:
        (h, d_h), tokens = shapes[0], settings.get("tokens", "?")
        ax.set_xlabel(f"tokens t (b = {tokens} / t sequences, h = {h} heads of d_h = {d_h})")
    else:
        ax.set_xlabel("tokens t")
    ax.set_ylabel("forward time per call (ms)")
    ax.set_title("Causal attention on one CPU: linear forms against softmax", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    if rows:
        ts = sorted({r["t"] for r in rows})
        ax.set_xticks(ts, labels=[f"{t:,}" for t in ts])
        machine, torch_version = provenance.get("cpu_model", "?"), provenance.get("torch", "?")
        date = str(provenance.get("date_utc", "?"))[:10]
        threads = provenance.get("torch_threads", "?")
        plural = "" if threads == 1 else "s"
        source = f"measured: {machine}, {threads} thread{plural}, torch {torch_version}, {date}"
        ax.legend(frameon=False, fontsize=8.5, loc="upper left")
    else:
        source = "the results file has no linear rows"
        ax.text(0.5, 0.5, "not measured yet", transform=ax.transAxes, ha="center", fontsize=10)
    # under the figure, so that the layout keeps it clear of the x label (two lines on a phone)
    fig.supxlabel(source, fontsize=8)
    return fig


def sparse_patterns() -> Figure:
    """Four causal sparse patterns on t = 64 tokens: window, strided, global tokens, BigBird."""
    t, w, stride, g, n_random = 64, 8, 8, 2, 3
    generator = torch.Generator().manual_seed(123)
    scores = torch.rand(t, t, generator=generator).masked_fill(~to_dense(causal(), t, t), -1.0)
    random_table = torch.zeros(t, t, dtype=torch.bool).scatter_(
        1, scores.topk(n_random, dim=1).indices, True
    )  # (t, t): n_random earlier keys per query
    window_or_global = or_masks(sliding_window(w), global_tokens(torch.arange(t) < g))
    rules = {
        f"sliding window, w = {w}": sliding_window(w),
        f"strided, stride {stride}": or_masks(
            sliding_window(stride), lambda b, h, q, kv: (kv <= q) & ((q - kv) % stride == 0)
        ),
        f"window {w} + {g} global": and_masks(causal(), window_or_global),
        f"BigBird: + {n_random} random": and_masks(
            causal(), or_masks(window_or_global, lambda b, h, q, kv: random_table[q, kv])
        ),
    }
    return mask_panels(rules, t)


FIGURES = {
    "ch12-favor-error": favor_error,
    "ch12-linear-timings": linear_timings,
    "ch12-sparse-patterns": sparse_patterns,
}
