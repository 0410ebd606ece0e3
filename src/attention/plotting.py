"""Heatmaps of attention weights, and the style of the book's figures.

Notation: t_q number of queries (rows of the heatmap), t_k number of keys (columns).
matplotlib is imported inside the functions, so ``import attention`` does not need it.

``BOOK_STYLE`` is the matplotlib style the site's figures are drawn in (tools/book/hooks/figures.py
applies it): text kept as SVG text, a transparent background, and two placeholder colours that
the site swaps for the page's own: ``INK`` (text, axes, ticks) becomes the text colour, ``PAPER``
(legend and label boxes) the background colour, so a figure reads in the light and the dark theme.

Heatmaps whose colour scale starts at white (``Blues``, ``Oranges``, ``RdBu_r``) would be bright
panels on a dark page. :func:`invert_in_dark` marks such an image (or colour bar), and the dark
theme's stylesheet inverts its lightness and keeps its hue: low values turn dark, high values
light. The numbers written in the cells take :func:`cell_text_colour`, a placeholder that the site
swaps for black or white so that it contrasts with the cell in either theme.
"""

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

if TYPE_CHECKING:
    from matplotlib.axes import Axes

INK = "#010101"  # near-black: the SVG's text colour, swapped for the page's (currentColor)
PAPER = "#fefefe"  # near-white: boxes behind text, swapped for the page's background colour
ON_LIGHT_CELL = "#020202"  # text on a light cell: black; white in the dark theme (cell inverted)
ON_DARK_CELL = "#fdfdfd"  # text on a dark cell: white; black in the dark theme
DARK_INVERT = "dark-invert"  # id prefix of the images that the dark theme inverts
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


def cell_text_colour(strength: float) -> str:
    """Colour of a number written in a heatmap cell whose colour is ``strength`` of the way
    (0 to 1) from the scale's white end to its dark end: white text past 0.6, black below."""
    return ON_DARK_CELL if strength > 0.6 else ON_LIGHT_CELL


def invert_in_dark(*artists: Any) -> None:
    """Mark images (``imshow``) and colour bars (``Colorbar``) to be inverted in the dark theme.

    Each gets an SVG id ``dark-invert-<n>``, numbered within its figure so that the SVG stays
    reproducible; a colour bar's strip is drawn as vector paths so that it can carry the id (each
    path edged in its own colour, so that no seam shows between them).
    """
    for artist in artists:
        if hasattr(artist, "solids"):  # a Colorbar: its strip of colour, as paths without seams
            artist = artist.solids
            artist.set_edgecolor("face")
        artist.set_rasterized(False)
        figure = artist.get_figure(root=True)
        taken = sum(str(a.get_gid()).startswith(DARK_INVERT) for a in figure.findobj())
        artist.set_gid(f"{DARK_INVERT}-{taken}")


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
    invert_in_dark(image)
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
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=10,
                        color=cell_text_colour(value / vmax))
    else:
        invert_in_dark(ax.figure.colorbar(image, ax=ax))
    return ax
