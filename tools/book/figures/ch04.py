"""Figures of chapter 4: the causal mask on the running example, and dropout on its weights.

Notation: t tokens (6 here), d_k width of queries and keys (2 here); Omega = Q K^T the (t, t)
scores, M the additive causal mask (0 on and below the diagonal, -inf above), A the weights.
"""

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from attention import (
    JOURNEY_TOKENS,
    SelfAttentionV2,
    additive_causal_mask,
    journey_inputs,
    plot_attention,
    softmax,
)
from book.figures import cell_text_colour, invert_in_dark


def running_example_scores() -> torch.Tensor:
    """Scaled scores Omega / sqrt(d_k), shape (t, t), of SelfAttentionV2 with seed 789."""
    inputs = journey_inputs()  # (t, d_in)
    torch.manual_seed(789)
    sa_v2 = SelfAttentionV2(d_in=3, d_out=2)
    with torch.no_grad():
        queries = sa_v2.W_query(inputs)  # (t, d_out)
        keys = sa_v2.W_key(inputs)  # (t, d_out)
    return queries @ keys.T / keys.shape[-1] ** 0.5  # (t, t)


def plot_scores(scores: torch.Tensor, ax: Axes, title: str) -> None:
    """Draw scores as an annotated heatmap; -inf cells are gray and labeled with -inf."""
    values = scores.numpy()
    finite = np.ma.masked_invalid(np.where(np.isinf(values), np.nan, values))
    cmap = plt.get_cmap("Oranges").with_extremes(bad="0.88")
    vmax = float(finite.max())
    invert_in_dark(ax.imshow(finite, cmap=cmap, vmin=0.0, vmax=vmax))
    t_q, t_k = values.shape
    for i in range(t_q):
        for j in range(t_k):
            value = values[i, j]
            if np.isinf(value):
                label, color = "$-\\infty$", cell_text_colour(0.0)  # on a light gray cell
            else:
                label, color = f"{value:.2f}", cell_text_colour(value / vmax)
            ax.text(j, i, label, ha="center", va="center", fontsize=10, color=color)
    ax.set_xticks(range(t_k), labels=JOURNEY_TOKENS)
    ax.set_yticks(range(t_q), labels=JOURNEY_TOKENS)
    ax.tick_params(axis="x", labelrotation=45)
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    ax.set_title(title)


def causal_mask_steps() -> Figure:
    """Scaled scores, scores plus the additive mask M, and the causal attention weights."""
    scores = running_example_scores()  # (t, t)
    masked = scores + additive_causal_mask(len(JOURNEY_TOKENS))  # (t, t)
    weights = softmax(masked, dim=-1)  # (t, t)
    fig, axes = plt.subplots(1, 3, figsize=(10.5, 4.4), layout="constrained")
    plot_scores(scores, axes[0], "1. Scores $\\Omega / √d_k$")
    plot_scores(masked, axes[1], "2. Masked scores $\\Omega / √d_k + M$")
    plot_attention(weights, JOURNEY_TOKENS, JOURNEY_TOKENS, ax=axes[2],
                   title="3. Weights $\\mathrm{softmax}(\\Omega / √d_k + M)$")
    fig.suptitle("Causal mask on the running example (untrained SelfAttentionV2, seed 789)")
    return fig


def dropout_weights() -> Figure:
    """Causal attention weights without dropout and after nn.Dropout(0.5), seed 123."""
    weights = softmax(running_example_scores() + additive_causal_mask(6), dim=-1)  # (t, t)
    torch.manual_seed(123)
    dropped = torch.nn.Dropout(0.5)(weights)  # (t, t)
    fig, axes = plt.subplots(1, 2, figsize=(9.4, 4.6), layout="constrained")
    plot_attention(weights, JOURNEY_TOKENS, JOURNEY_TOKENS, ax=axes[0],
                   title="Causal weights (rows sum to 1)")
    plot_attention(dropped, JOURNEY_TOKENS, JOURNEY_TOKENS, ax=axes[1],
                   title="After dropout, $p_\\mathrm{drop} = 0.5$ (survivors doubled)")
    fig.suptitle("Dropout on causal weights (untrained SelfAttentionV2, seed 789)")
    return fig


FIGURES = {
    "ch04-causal-mask": causal_mask_steps,
    "ch04-dropout": dropout_weights,
}
