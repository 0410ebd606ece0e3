"""Figures of chapter 5: multi-head attention on the running example.

Notation: b batch size, t tokens (6 here), d_in input width (3), d_out output width (2),
h heads (2), d_h = d_out / h width of one head (1). The module is the chapter's
MultiHeadAttention(3, 2, context_length=6, dropout=0.0, num_heads=2) built right after
torch.manual_seed(123).
"""

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure
from matplotlib.offsetbox import AnnotationBbox, DrawingArea, TextArea, VPacker

from attention import JOURNEY_TOKENS, MultiHeadAttention, journey_batch, plot_attention
from book.figures import INK, cell_text_colour, invert_in_dark


def per_head_weights() -> Figure:
    """One heatmap per head of the (t, t) causal weights (first sequence), and their
    difference."""
    torch.manual_seed(123)
    mha = MultiHeadAttention(3, 2, context_length=6, dropout=0.0, num_heads=2)
    with torch.no_grad():
        _, attn_weights = mha(journey_batch(), return_weights=True)  # (b, h, t, t)
    fig, grid = plt.subplot_mosaic([["1", "2"], ["diff", "diff"]], figsize=(8.4, 8.4),
                                   layout="constrained")
    # Two rows, not three panels in one: in one row the differences' numbers (+0.021) overflow
    # their cells at the width a desktop column shows.
    axes = [grid["1"], grid["2"], grid["diff"]]
    for head in range(2):
        plot_attention(
            attn_weights[0, head],
            JOURNEY_TOKENS,
            JOURNEY_TOKENS,
            ax=axes[head],
            title=f"head {head + 1}",
        )
        # Anchored right: where the layout shrinks a square panel to fit its row (stacked on a
        # phone), the heads shrink to the right, away from their y labels. Centred, the heads'
        # "query" left the figure.
        axes[head].set_anchor("E")
    difference = attn_weights[0, 0] - attn_weights[0, 1]  # (t, t)
    t = len(JOURNEY_TOKENS)
    # (t, t), blank above the diagonal
    future = torch.ones(t, t, dtype=torch.bool).triu(diagonal=1)
    limit = difference.abs().max().item()
    # Cells wider than tall (aspect "auto"): the difference fills its row, which a square panel
    # left half empty beside the heads above it.
    image = axes[2].imshow(
        difference.masked_fill(future, float("nan")).numpy(), cmap="RdBu_r",
        vmin=-limit, vmax=limit, aspect="auto"
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

# (column, row, code, shape in legend letters, shape in the running example, kind); a column
# is a center in points from the drawing's left edge, a row counts down from the top. The
# drawing is narrow enough to fit a phone's column as it is (no phone layout, which would
# narrow the space between the boxes and not the text in them); a view's code is broken the
# way Python allows, so that three boxes fit side by side.
_Q, _K, _V = 61.0, 174.5, 288.0  # the columns of the queries, keys and values
# .view(b, t, h, d_h) on two lines, the second under the first argument: no-break spaces, which
# an SVG text keeps (it shows a run of spaces as one).
_VIEW = ".view(b, t,\n" + "\N{NO-BREAK SPACE}" * 6 + "h, d_h)"
_BOXES = {
    "x": (_K, 0, "x", "(b, t, d_in)", "(2, 6, 3)", "input"),
    "q1": (_Q, 1, "queries = W_query(x)", "(b, t, d_out)", "(2, 6, 2)", "linear"),
    "k1": (_K, 1, "keys = W_key(x)", "(b, t, d_out)", "(2, 6, 2)", "linear"),
    "v1": (_V, 1, "values = W_value(x)", "(b, t, d_out)", "(2, 6, 2)", "linear"),
    "q2": (_Q, 2, _VIEW, "(b, t, h, d_h)", "(2, 6, 2, 1)", "reshape"),
    "k2": (_K, 2, _VIEW, "(b, t, h, d_h)", "(2, 6, 2, 1)", "reshape"),
    "v2": (_V, 2, _VIEW, "(b, t, h, d_h)", "(2, 6, 2, 1)", "reshape"),
    "q3": (_Q, 3, ".transpose(1, 2)", "(b, h, t, d_h)", "(2, 2, 6, 1)", "reshape"),
    "k3": (_K, 3, ".transpose(1, 2)", "(b, h, t, d_h)", "(2, 2, 6, 1)", "reshape"),
    "v3": (_V, 3, ".transpose(1, 2)", "(b, h, t, d_h)", "(2, 2, 6, 1)", "reshape"),
    "k4": (_K, 4, "keys.transpose(2, 3)", "(b, h, d_h, t)", "(2, 2, 1, 6)", "reshape"),
    "s": (118.0, 5, "queries @ keys.transpose(2, 3)", "(b, h, t, t)", "(2, 2, 6, 6)", "matmul"),
    "a": (118.0, 6, "mask, / sqrt(d_h), softmax", "(b, h, t, t)", "(2, 2, 6, 6)", "softmax"),
    "z": (222.0, 7, "attn_weights @ values", "(b, h, t, d_h)", "(2, 2, 6, 1)", "matmul"),
    "z2": (222.0, 8, ".transpose(1, 2)", "(b, t, h, d_h)", "(2, 6, 2, 1)", "reshape"),
    "z3": (222.0, 9, ".contiguous().view(b, t, d_out)", "(b, t, d_out)", "(2, 6, 2)",
           "reshape"),
    "o": (222.0, 10, "out_proj(context)", "(b, t, d_out)", "(2, 6, 2)", "linear"),
}

_ARROWS = [
    ("x", "q1"), ("x", "k1"), ("x", "v1"),
    ("q1", "q2"), ("k1", "k2"), ("v1", "v2"),
    ("q2", "q3"), ("k2", "k3"), ("v2", "v3"),
    ("k3", "k4"), ("q3", "s"), ("k4", "s"), ("s", "a"),
    ("a", "z"), ("v3", "z"), ("z", "z2"), ("z2", "z3"), ("z3", "o"),
]

# Points: the drawing's width (4.85 in: its 9-point text is 9 CSS px in PHONE_COLUMN_PX), the
# narrowest a box is (it grows with its text), the space between two rows and above the first.
_WIDTH, _MIN_BOX_W, _ROW_GAP, _TOP = 349.0, 90.0, 18.0, 26.0


def shape_flow() -> Figure:
    """Boxes and arrows: the shape of every tensor in MultiHeadAttention's forward pass.

    Each box is sized to its text, in points, so no text leaves its box; the arrows join the
    boxes' edges."""
    fig = plt.figure(figsize=(_WIDTH / 72, 10.0))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.axis("off")
    boxes = {}
    for key, (x, _, code, letters, numbers, kind) in _BOXES.items():
        content = VPacker(children=[
            TextArea(code, textprops={"fontsize": 9, "family": "monospace", "color": "black"}),
            TextArea(letters, textprops={"fontsize": 10, "weight": "bold", "color": "black"}),
            TextArea(numbers, textprops={"fontsize": 9, "color": "#4d4d4d"}),
            DrawingArea(_MIN_BOX_W - 8, 0),  # a box's least width, less its padding
        ], align="center", pad=1, sep=2)
        boxes[key] = AnnotationBbox(
            content, (x, 0), box_alignment=(0.5, 1), fontsize=10,
            bboxprops={"boxstyle": "round,pad=0.3,rounding_size=0.5",
                       "facecolor": _COLORS[kind], "edgecolor": "#4d4d4d", "linewidth": 0.9},
        )
        ax.add_artist(boxes[key])
    # Rows top down, each as tall as its tallest box (points: the figure's dpi is not 72).
    renderer = fig.canvas.get_renderer()
    points = 72 / fig.dpi
    heights: dict[int, float] = {}
    for key, box in boxes.items():
        row = _BOXES[key][1]
        height = box.get_window_extent(renderer).height * points
        heights[row] = max(heights.get(row, 0.0), height)
    tops = [_TOP]
    for row in sorted(heights):
        tops.append(tops[-1] + heights[row] + _ROW_GAP)
    for key, box in boxes.items():
        box.xy = box.xybox = (_BOXES[key][0], tops[_BOXES[key][1]])
    height = tops[-1] - _ROW_GAP + 4.0
    fig.set_size_inches(_WIDTH / 72, height / 72)
    ax.set_xlim(0, _WIDTH)
    ax.set_ylim(height, 0)
    for start, end in _ARROWS:
        ax.annotate(
            "", xy=(0.5, 1), xycoords=boxes[end], xytext=(0.5, 0), textcoords=boxes[start],
            arrowprops={"arrowstyle": "-|>", "color": INK, "linewidth": 0.9,
                        "shrinkA": 1, "shrinkB": 1},
        )
    # Beside the last box, left of it.
    ax.text(4.0, tops[10] + heights[10] / 2, "bold: legend letters\ngray: running example\n"
            "b=2, t=6, d_in=3,\nd_out=2, h=2, d_h=1",
            ha="left", va="center", fontsize=9, color=INK, alpha=0.75)
    ax.text(_WIDTH / 2, _TOP / 2, "Shapes in multi-head attention", ha="center", va="center",
            fontsize=12, color=INK)
    return fig


FIGURES = {
    "ch05-per-head-weights": per_head_weights,
    "ch05-shape-flow": shape_flow,
}
