"""Figures of chapter 5: multi-head attention on the running example.

Notation: b batch size, t tokens (6 here), d_in input width (3), d_out output width (2),
h heads (2), d_h = d_out / h width of one head (1). The module is the chapter's
MultiHeadAttention(3, 2, context_length=6, dropout=0.0, num_heads=2) built right after
torch.manual_seed(123).
"""

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

from attention import JOURNEY_TOKENS, MultiHeadAttention, journey_batch, plot_attention
from book.figures import INK, cell_text_colour, invert_in_dark


def per_head_weights() -> Figure:
    """One heatmap per head of the (t, t) causal weights (first sequence), and their
    difference."""
    torch.manual_seed(123)
    mha = MultiHeadAttention(3, 2, context_length=6, dropout=0.0, num_heads=2)
    with torch.no_grad():
        _, attn_weights = mha(journey_batch(), return_weights=True)  # (b, h, t, t)
    fig, grid = plt.subplot_mosaic([["1", "2"], ["diff", "diff"]], figsize=(8.4, 8.6),
                                   layout="constrained")
    axes = [grid["1"], grid["2"], grid["diff"]]  # two rows: legible on a phone
    for head in range(2):
        plot_attention(
            attn_weights[0, head],
            JOURNEY_TOKENS,
            JOURNEY_TOKENS,
            ax=axes[head],
            title=f"head {head + 1}",
        )
        # Anchored right, as the colour bar anchors the difference's panel: where the layout
        # shrinks a square panel to fit its row (stacked on a phone), all three shrink to the
        # right, away from their y labels. Centred, the heads' "query" left the figure.
        axes[head].set_anchor("E")
    difference = attn_weights[0, 0] - attn_weights[0, 1]  # (t, t)
    t = len(JOURNEY_TOKENS)
    # (t, t), blank above the diagonal
    future = torch.ones(t, t, dtype=torch.bool).triu(diagonal=1)
    limit = difference.abs().max().item()
    image = axes[2].imshow(
        difference.masked_fill(future, float("nan")).numpy(), cmap="RdBu_r",
        vmin=-limit, vmax=limit
    )
    for i in range(t):
        for j in range(i + 1):
            value = round(difference[i, j].item(), 3) + 0.0  # + 0.0 turns -0.0 into 0.0
            color = cell_text_colour(abs(value) / limit)
            axes[2].text(j, i, f"{value:+.3f}", ha="center", va="center", fontsize=10,
                         color=color)
    axes[2].set_xticks(range(t), labels=JOURNEY_TOKENS)
    axes[2].set_yticks(range(t), labels=JOURNEY_TOKENS)
    axes[2].tick_params(axis="x", labelrotation=45)
    axes[2].set_xlabel("key")
    axes[2].set_ylabel("query")
    axes[2].set_title("head 1 minus head 2")
    invert_in_dark(image, fig.colorbar(image, ax=axes[2], shrink=0.9))
    fig.suptitle("Causal attention weights per head, untrained (seed 123, $h = 2$, $d_h = 1$)")
    return fig


# Fill colors by kind of step: projections, reshapes, products and the softmax.
_COLORS = {
    "input": "#f0f0f0",
    "linear": "#c6dbef",
    "reshape": "#ffffff",
    "matmul": "#fdd0a2",
    "softmax": "#c7e9c0",
}

# (x, y, code, shape in legend letters, shape in the running example, kind); y grows downward.
_BOXES = {
    "x": (3.6, 0.0, "x", "(b, t, d_in)", "(2, 6, 3)", "input"),
    "q1": (1.0, 1.1, "queries = W_query(x)", "(b, t, d_out)", "(2, 6, 2)", "linear"),
    "k1": (3.6, 1.1, "keys = W_key(x)", "(b, t, d_out)", "(2, 6, 2)", "linear"),
    "v1": (6.2, 1.1, "values = W_value(x)", "(b, t, d_out)", "(2, 6, 2)", "linear"),
    "q2": (1.0, 2.2, ".view(b, t, h, d_h)", "(b, t, h, d_h)", "(2, 6, 2, 1)", "reshape"),
    "k2": (3.6, 2.2, ".view(b, t, h, d_h)", "(b, t, h, d_h)", "(2, 6, 2, 1)", "reshape"),
    "v2": (6.2, 2.2, ".view(b, t, h, d_h)", "(b, t, h, d_h)", "(2, 6, 2, 1)", "reshape"),
    "q3": (1.0, 3.3, ".transpose(1, 2)", "(b, h, t, d_h)", "(2, 2, 6, 1)", "reshape"),
    "k3": (3.6, 3.3, ".transpose(1, 2)", "(b, h, t, d_h)", "(2, 2, 6, 1)", "reshape"),
    "v3": (6.2, 3.3, ".transpose(1, 2)", "(b, h, t, d_h)", "(2, 2, 6, 1)", "reshape"),
    "k4": (3.6, 4.4, "keys.transpose(2, 3)", "(b, h, d_h, t)", "(2, 2, 1, 6)", "reshape"),
    "s": (2.3, 5.5, "queries @ keys.transpose(2, 3)", "(b, h, t, t)", "(2, 2, 6, 6)", "matmul"),
    "a": (2.3, 6.6, "mask, / sqrt(d_h), softmax", "(b, h, t, t)", "(2, 2, 6, 6)", "softmax"),
    "z": (4.25, 7.7, "attn_weights @ values", "(b, h, t, d_h)", "(2, 2, 6, 1)", "matmul"),
    "z2": (4.25, 8.8, ".transpose(1, 2)", "(b, t, h, d_h)", "(2, 6, 2, 1)", "reshape"),
    "z3": (4.25, 9.9, ".contiguous().view(b, t, d_out)", "(b, t, d_out)", "(2, 6, 2)",
           "reshape"),
    "o": (4.25, 11.0, "out_proj(context)", "(b, t, d_out)", "(2, 6, 2)", "linear"),
}

_ARROWS = [
    ("x", "q1"), ("x", "k1"), ("x", "v1"),
    ("q1", "q2"), ("k1", "k2"), ("v1", "v2"),
    ("q2", "q3"), ("k2", "k3"), ("v2", "v3"),
    ("k3", "k4"), ("q3", "s"), ("k4", "s"), ("s", "a"),
    ("a", "z"), ("v3", "z"), ("z", "z2"), ("z2", "z3"), ("z3", "o"),
]

_BOX_W, _BOX_H = 2.3, 0.8


def shape_flow() -> Figure:
    """Boxes and arrows: the shape of every tensor in MultiHeadAttention's forward pass."""
    fig, ax = plt.subplots(figsize=(8.0, 10.4), layout="constrained")
    for x, y, code, letters, numbers, kind in _BOXES.values():
        width = _BOX_W + (0.5 if len(code) > 22 else 0.0)
        ax.add_patch(
            FancyBboxPatch(
                (x - width / 2, y - _BOX_H / 2),
                width,
                _BOX_H,
                boxstyle="round,pad=0.02,rounding_size=0.08",
                facecolor=_COLORS[kind],
                edgecolor="#4d4d4d",
                linewidth=0.9,
            )
        )
        ax.text(x, y - 0.22, code, ha="center", va="center", fontsize=9, family="monospace",
                color="black")
        ax.text(x, y + 0.03, letters, ha="center", va="center", fontsize=10, weight="bold",
                color="black")
        ax.text(x, y + 0.25, numbers, ha="center", va="center", fontsize=9, color="#4d4d4d")
    for start, end in _ARROWS:
        x0, y0 = _BOXES[start][:2]
        x1, y1 = _BOXES[end][:2]
        ax.annotate(
            "",
            xy=(x1, y1 - _BOX_H / 2 - 0.03),
            xytext=(x0, y0 + _BOX_H / 2 + 0.03),
            arrowprops={"arrowstyle": "-|>", "color": INK, "linewidth": 0.9,
                        "shrinkA": 0, "shrinkB": 0},
        )
    ax.text(-0.2, 11.0, "bold: legend letters\ngray: running example\n"
            "b=2, t=6, d_in=3,\nd_out=2, h=2, d_h=1",
            ha="left", va="center", fontsize=9, color=INK, alpha=0.75)
    ax.set_xlim(-0.3, 7.5)
    ax.set_ylim(11.5, -0.5)
    ax.axis("off")
    ax.set_title("Shapes in multi-head attention", fontsize=12)
    return fig


FIGURES = {
    "ch05-per-head-weights": per_head_weights,
    "ch05-shape-flow": shape_flow,
}
