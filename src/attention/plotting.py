"""Heatmaps of attention weights.

Notation: t_q number of queries (rows of the heatmap), t_k number of keys (columns).
matplotlib is imported inside the functions, so ``import attention`` does not need it.

The heatmap is drawn in plain colours (black or white numbers, whichever contrasts with the
cell); its image, colour bar and numbers carry SVG ids (``WEIGHTS_GID``, ``LABEL_GID``)
by which a figure's style can restyle them, as the book's site does for its dark theme.
"""

from collections.abc import Mapping, Sequence, Set
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ._checks import check_flags

if TYPE_CHECKING:
    from matplotlib.axes import Axes
else:  # matplotlib stays unimported until a plot is drawn; typing.get_type_hints still resolves
    Axes = Any

# What the heatmap's artists are called (their SVG ids), so that a figure's style can find them.
WEIGHTS_GID = "attention-weights"  # the image and its colour bar
LABEL_GID = "attention-weight-label"  # the numbers in the cells


def _cell_text_colour(strength: float) -> str:
    """A number in a cell ``strength`` of the way (0 to 1) from the scale's white end to its dark
    end: white past 0.6, black below."""
    return "white" if strength > 0.6 else "black"


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
    (exact zeros) are drawn like any other zero; a NaN or an infinite weight is left blank (and
    written, with ``annotate``), and the scale is taken from the finite ones.

    Args:
        weights: the attention weights (t_q, t_k).
        row_labels: one label per query (default 0 .. t_q - 1).
        col_labels: one label per key (default 0 .. t_k - 1).
        ax: the Axes to draw on; None makes a new figure.
        title: the Axes' title.
        annotate: write each weight in its cell (else draw a colour bar).
        cmap: a matplotlib colour map.

    Returns:
        The Axes drawn on.

    Raises:
        ValueError: if weights is not a 2-d matrix of real numbers (a tensor on the meta
            device holds none) with a row and a column, labels are not None or a sequence of
            the right length, ax is not None or an Axes, or annotate is not a bool.

    Examples:
        >>> ax = plot_attention(torch.tensor([[1.0, 0.0], [0.4, 0.6]]), title="causal")
        >>> ax.get_title(), ax.get_xlabel(), ax.get_ylabel()
        ('causal', 'key', 'query')
        >>> import matplotlib.pyplot as plt; plt.close(ax.figure)
    """
    check_flags(annotate=annotate)
    try:
        matrix = torch.as_tensor(weights).detach().cpu()
    except (TypeError, ValueError, RuntimeError):  # a string, a ragged list, a meta tensor
        matrix = None
    if matrix is None or matrix.is_complex():  # .double() would drop the imaginary part
        meta = isinstance(weights, Tensor) and weights.is_meta  # no values to draw
        got = ("a tensor on the meta device, which holds no values" if meta
               else type(weights).__name__ if matrix is None else matrix.dtype)
        raise ValueError(f"weights must be a (t_q, t_k) matrix of real numbers, got {got}")
    matrix = matrix.double()  # float32 would draw a float64 weight past 3.4e38 as inf (blank)
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
        # a mapping would show its keys, a set labels in no order
        if labels is not None and (isinstance(labels, (Mapping, Set)) or not hasattr(labels, "__len__")):
            raise ValueError(
                f"{name} must be None or a sequence of {n} labels, got {type(labels).__name__}"
            )
        if labels is not None and len(labels) != n:
            raise ValueError(f"{name} must have {n} entries, got {len(labels)}")
    if ax is not None:
        from matplotlib.axes import Axes as MatplotlibAxes

        if not isinstance(ax, MatplotlibAxes):
            raise ValueError(f"ax must be None or a matplotlib Axes, got {type(ax).__name__}")
    else:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(0.6 * t_k + 1.5, 0.6 * t_q + 1.0), layout="constrained")
    finite = matrix[matrix.isfinite()]  # an inf would stretch the scale and blank every cell
    vmax = max(1.0, finite.max().item()) if finite.numel() else 1.0
    image = ax.imshow(matrix.numpy(), cmap=cmap, vmin=0.0, vmax=vmax)
    image.set_gid(WEIGHTS_GID)
    ax.set_xticks(range(t_k), labels=col_labels if col_labels is not None else [str(j) for j in range(t_k)])
    ax.set_yticks(range(t_q), labels=row_labels if row_labels is not None else [str(i) for i in range(t_q)])
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
                        color=_cell_text_colour(value / vmax), gid=LABEL_GID)
    else:
        solids = ax.figure.colorbar(image, ax=ax).solids  # drawn when the bar is made
        if solids is not None:
            solids.set_gid(WEIGHTS_GID)
    return ax
