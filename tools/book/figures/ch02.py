"""Figures of chapter 2: self-attention without trainable weights on the running example.

Notation: t tokens (6 here), d_in width of a token vector (3 here); A is the (t, t) matrix of
attention weights softmax(X X^T) over the keys.
"""

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from attention import JOURNEY_TOKENS, journey_inputs, plot_attention, softmax
from book.figures import INK


def weights_heatmap() -> Figure:
    """Scores X X^T beside the weights A = softmax(X X^T): rows are queries, columns keys."""
    inputs = journey_inputs()  # (t, d_in)
    attn_scores = inputs @ inputs.T  # (t, t)
    attn_weights = softmax(attn_scores, dim=-1)  # (t, t)
    fig, (ax_scores, ax_weights) = plt.subplots(1, 2, figsize=(9.6, 4.6), layout="constrained")
    plot_attention(
        attn_scores,
        JOURNEY_TOKENS,
        JOURNEY_TOKENS,
        ax=ax_scores,
        title="Scores $\\Omega = XX^\\top$",
        cmap="Oranges",
    )
    plot_attention(
        attn_weights,
        JOURNEY_TOKENS,
        JOURNEY_TOKENS,
        ax=ax_weights,
        title="Weights $A = \\mathrm{softmax}(\\Omega)$, rows sum to 1",
    )
    fig.suptitle("Weight-free attention on the running example: nothing is trained")
    return fig


def query2_weights() -> Figure:
    """The weights of the query "journey": softmax beside dividing the scores by their sum."""
    inputs = journey_inputs()  # (t, d_in)
    attn_scores_2 = inputs @ inputs[1]  # (t,)
    by_sum = attn_scores_2 / attn_scores_2.sum()  # (t,)
    by_softmax = softmax(attn_scores_2, dim=0)  # (t,)
    positions = torch.arange(len(JOURNEY_TOKENS)).numpy()
    width = 0.38
    fig, ax = plt.subplots(figsize=(6.4, 3.6), layout="constrained")
    # edged in the softmax's blue: the edge, not the pale fill, reaches 3:1 on white
    ax.bar(positions - width / 2, by_sum.numpy(), width, label="divide by the sum",
           color="#9ecae1", edgecolor="#2171b5", linewidth=1)
    bars = ax.bar(positions + width / 2, by_softmax.numpy(), width, label="softmax",
                  color="#2171b5")
    ax.bar_label(bars, fmt="%.4f", fontsize=9, padding=2)
    ax.axhline(1 / len(JOURNEY_TOKENS), color=INK, alpha=0.6, linestyle=":", linewidth=1)
    ax.annotate("uniform $1/t$", (-0.5, 1 / len(JOURNEY_TOKENS) + 0.004), color=INK, alpha=0.75)
    ax.set_xticks(positions, labels=JOURNEY_TOKENS)
    ax.set_xlabel("key $x^{(j)}$")
    ax.set_ylabel("attention weight $\\alpha_{2j}$")
    ax.set_ylim(0, 0.28)
    ax.set_title('Weights of the query "journey" (weight-free attention, nothing trained)')
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(frameon=False, loc="upper right")
    return fig


FIGURES = {
    "ch02-weights-heatmap": weights_heatmap,
    "ch02-query2-weights": query2_weights,
}
