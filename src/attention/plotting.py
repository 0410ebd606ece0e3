"""Heatmaps of attention weights, and the style of the book's figures.

Notation: t_q number of queries (rows of the heatmap), t_k number of keys (columns).
matplotlib is imported inside the functions, so ``import attention`` does not need it.

``BOOK_STYLE`` is the matplotlib style the site's figures are drawn in (docs/hooks/figures.py
applies it): text kept as SVG text, a transparent background, and two placeholder colours that
the site swaps for the page's own: ``INK`` (text, axes, ticks) becomes the text colour, ``PAPER``
(legend and label boxes) the background colour, so a figure reads in the light and the dark theme.
"""

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

if TYPE_CHECKING:
    from matplotlib.axes import Axes

INK = "#010101"  # near-black: the SVG's text colour, swapped for the page's (currentColor)
PAPER = "#fefefe"  # near-white: boxes behind text, swapped for the page's background colour
# Sizes in points; the site shows figures at about one SVG point per CSS pixel on a desktop.
BOOK_STYLE: dict[str, Any] = {
    "svg.fonttype": "none",  # text stays <text>: selectable, searchable, sharp at any zoom
    "savefig.transparent": True,  # no white panel on a dark page
    "font.size": 11,
    "axes.titlesize": 11,
    "axes.labelsize": 11,
    "xtick.labelsize": 10,
    "ytick.labelsize": 10,
    "legend.fontsize": 10,
    "figure.titlesize": 12,
    "text.color": INK,
    "axes.labelcolor": INK,
    "axes.edgecolor": INK,
    "axes.titlecolor": INK,
    "xtick.color": INK,
    "ytick.color": INK,
    "legend.labelcolor": INK,
    "legend.facecolor": PAPER,
    "legend.edgecolor": "none",
    "axes.facecolor": "none",
    "figure.facecolor": "none",
}


def plot_attention(
    weights: Tensor,
    row_labels: Sequence[str] | None = None,
    col_labels: Sequence[str] | None = None,
    ax: "Axes | None" = None,
    title: str | None = None,
    annotate: bool = True,
    cmap: str = "Blues",
) -> "Axes":
    """Draw a (t_q, t_k) weight matrix as a heatmap: row i is query i, column j is key j.

    The colour scale starts at 0 and ends at 1 (or at the largest weight, if dropout pushed one
    above 1), so figures of different chapters can be compared. With ``annotate`` each cell
    shows its weight to two decimals; without it a colour bar gives the scale. Masked weights
    (exact zeros) are drawn like any other zero. Returns the Axes drawn on; a new figure is
    made when ``ax`` is None. An empty matrix (no query or no key) has nothing to draw and is
    refused with a ``ValueError``.
    """
    matrix = torch.as_tensor(weights).detach().cpu().float()
    if matrix.dim() != 2:
        raise ValueError(
            f"weights must be a 2-d (t_q, t_k) matrix, got shape {tuple(matrix.shape)}"
        )
    t_q, t_k = matrix.shape
    if t_q == 0 or t_k == 0:
        raise ValueError(
            "weights must have at least one row (query) and one column (key), "
            f"got shape {tuple(matrix.shape)}"
        )
    for name, labels, n in (("row_labels", row_labels, t_q), ("col_labels", col_labels, t_k)):
        if labels is not None and len(labels) != n:
            raise ValueError(f"{name} must have {n} entries, got {len(labels)}")
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(0.6 * t_k + 1.5, 0.6 * t_q + 1.0), layout="constrained")
    vmax = max(1.0, matrix.max().item())
    image = ax.imshow(matrix.numpy(), cmap=cmap, vmin=0.0, vmax=vmax)
    ax.set_xticks(range(t_k), labels=col_labels if col_labels is not None else range(t_k))
    ax.set_yticks(range(t_q), labels=row_labels if row_labels is not None else range(t_q))
    ax.tick_params(axis="x", labelrotation=45 if col_labels is not None else 0)
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    if title is not None:
        ax.set_title(title)
    if annotate:
        for i in range(t_q):
            for j in range(t_k):
                value = matrix[i, j].item()
                color = "white" if value > 0.6 * vmax else "black"
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", color=color, fontsize=10)
    else:
        ax.figure.colorbar(image, ax=ax)
    return ax
