"""A figure's phone layout: its panels stacked in one or two columns of a narrow figure.

The figure hook (book.hooks.figures) saves each figure as drawn, for a desktop, then lays the same
Figure out again with :func:`phone_layout` and saves it a second time, for a column under about
360 CSS pixels: the appendix's plots, drawn narrow and stacked from the start, fit a phone so.
Panels keep their order (row by row); a panel that spans columns gets a row of its own; a legend
beside the axes or below the panels goes below them, with its title, in two columns if they fit
the figure's width and in one if not; a title or x-axis label wider than the figure breaks at
spaces, never inside its math; a colour bar keeps room for the tick labels of its new height.

In both layouts, a legend inside an axes that covers that axes' data as saved goes under that
axes, and the figure is saved again (:func:`uncover_data`, which the hook calls after each save).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from matplotlib.axes import Axes
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.transforms import Bbox, ScaledTranslation

WORDS = re.compile(r"\S*\$[^$]*\$\S*|\S+")  # a word, or math with its spaces kept whole


def _share(ax: Axes) -> float:
    """The share of the figure's width that the columns of ``ax``'s subplot span (1 outside a
    grid)."""
    spec = ax.get_subplotspec()
    return len(spec.colspan) / spec.get_gridspec().ncols if spec is not None else 1.0


def _wrap(fig: Figure) -> None:
    """Break every title and x-axis label wider than (most of) the figure at spaces, never
    inside math."""
    renderer = fig.canvas.get_renderer()
    texts = [(fig._suptitle, fig.bbox.width * 0.85)]
    for ax in fig.axes:
        # An axes' title and x label are centred on the axes, which its column holds beside the
        # y axis's labels; the layout has not placed it yet, so its width is estimated.
        y_axis = ax.yaxis.get_tightbbox(renderer) if ax.yaxis.get_visible() else None
        limit = fig.bbox.width * _share(ax) * 0.85 - (y_axis.width if y_axis is not None else 0.0)
        texts += [(t, limit) for t in (ax.title, ax._left_title, ax.xaxis.label)]
    for text, limit in [(t, limit) for t, limit in texts if t is not None and t.get_text()]:
        if text.get_window_extent(renderer).width <= limit:
            continue
        lines: list[str] = []
        for word in WORDS.findall(text.get_text().replace("\n", " ")):
            candidate = f"{lines[-1]} {word}" if lines else word
            text.set_text(candidate)
            if lines and text.get_window_extent(renderer).width <= limit:
                lines[-1] = candidate
            else:
                lines.append(word)
        text.set_text("\n".join(lines))


def phone_layout(fig: Figure, width: float) -> Figure:
    """Lay ``fig`` out again ``width`` inches wide, its panels stacked; return it.

    As many columns as panels of the figure's own width fit (one, mostly); each row keeps the
    height of a row of the desktop layout. A figure without a grid of panels is only narrowed.
    """
    panels = [ax for ax in fig.axes if ax.get_subplotspec() is not None]
    if not panels:
        return fig
    old_w, old_h = fig.get_size_inches()
    grid = panels[0].get_subplotspec().get_gridspec()
    cols = max(1, min(grid.ncols, int(width / (old_w / grid.ncols)))) if len(panels) > 1 else 1
    rows: list[list] = []  # each row: its panels, or [None, panel] for a panel that spans it
    order = sorted(panels, key=lambda a: (a.get_subplotspec().rowspan.start,
                                          a.get_subplotspec().colspan.start))
    for ax in order:
        spans = len(ax.get_subplotspec().colspan) > 1 and cols < grid.ncols
        if spans or not rows or rows[-1][0] is None or len(rows[-1]) >= cols:
            rows.append([None, ax] if spans else [ax])
        else:
            rows[-1].append(ax)
    new = fig.add_gridspec(len(rows), cols)
    for r, row in enumerate(rows):
        if row[0] is None:
            row[1].set_subplotspec(new[r, :])
        else:
            for c, ax in enumerate(row):
                ax.set_subplotspec(new[r, c])
    for ax in panels:
        if cols == 1 and len(ax.get_shared_y_axes().get_siblings(ax)) > 1:
            ax.tick_params(labelleft=True)
        legend = ax.get_legend()
        anchor = legend and legend.get_bbox_to_anchor().transformed(ax.transAxes.inverted())
        if legend is not None and anchor.x0 >= 0.99:  # beside the axes: no room on a phone
            handles, labels = legend.legend_handles, [t.get_text() for t in legend.get_texts()]
            legend.remove()
            fig.legend(handles, labels, loc="outside lower center", frameon=False)
    fig.set_size_inches(width, old_h / grid.nrows * len(rows) + (0.6 if cols == 1 else 0))
    for legend in list(fig.legends):
        _below(fig, legend)
    _wrap(fig)
    if any(ax.get_label() == "<colorbar>" for ax in fig.axes):
        # A colour bar's ticks follow its height, which the new layout changes: lay the figure
        # out once with them, so that the layout made when it is saved has room for their labels.
        fig.draw_without_rendering()
    return fig


def _relaid(
    legend: Legend, place: Callable[..., Legend], limit: float
) -> tuple[Bbox, Bbox | None]:
    """Remove ``legend`` and make it again with ``place(handles, labels, **style)`` (its font size
    and title kept), in two columns if they are at most ``limit`` pixels wide, else in one; return
    the new legend's box, and the two-column box it replaced (None if two fit or never tried)."""
    handles, labels = legend.legend_handles, [t.get_text() for t in legend.get_texts()]
    title = legend.get_title()
    style = dict(frameon=False, fontsize=legend.get_texts()[0].get_fontsize() if labels else None,
                 title=title.get_text() or None, title_fontsize=title.get_fontsize())
    renderer = legend.figure.canvas.get_renderer()
    legend.remove()
    two_columns = None
    for ncols in (min(2, len(labels)), 1):
        new = place(handles, labels, ncols=ncols, **style)
        box = new.get_window_extent(renderer)
        if ncols == 1 or box.width <= limit:
            break
        two_columns = box
        new.remove()
    return box, two_columns


def _below(fig: Figure, legend: Legend) -> None:
    """Put the figure's ``legend`` below the panels, with its title, in two columns if they fit
    the figure's width, else in one; the figure grows by what one column adds, so that the panels
    keep their height."""
    box, two_columns = _relaid(
        legend, lambda *a, **k: fig.legend(*a, loc="outside lower center", **k), fig.bbox.width
    )
    if two_columns is not None:  # one column is taller
        w, h = fig.get_size_inches()
        fig.set_size_inches(w, h + (box.height - two_columns.height) / fig.dpi)


def covering_legends(fig: Figure) -> list[Legend]:
    """The legends of an axes that cover, inside that axes, a line or a scatter marker of it, as
    ``fig`` was last drawn."""
    renderer = fig.canvas.get_renderer()
    covering = []
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is None:
            continue
        box = Bbox.intersection(legend.get_window_extent(renderer), ax.bbox)
        if box is None:  # outside the axes, where lines are clipped away
            continue
        # A line in data coordinates is data; a reference line (axhline, axvline) is only hidden
        # by a legend that has a background, and crosses the text of one that has not.
        framed = legend.get_frame_on() and legend.get_frame().get_facecolor()[3] >= 0.5
        lines = (
            line.get_transform().transform_path(line.get_path()) for line in ax.get_lines()
            if not framed or line.get_transform() == ax.transData
        )
        marks = [c.get_offset_transform().transform(c.get_offsets())
                 for c in ax.collections if isinstance(c, PathCollection)]  # scatter's
        if any(path.intersects_bbox(box, filled=False) for path in lines) or any(
            ((x >= box.x0) & (x <= box.x1) & (y >= box.y0) & (y <= box.y1)).any()
            for x, y in (xy.T for xy in marks if len(xy))
        ):
            covering.append(legend)
    return covering


def _under_axes(fig: Figure, legend: Legend) -> None:
    """Put an axes' ``legend`` under that axes' x axis, with its title, in two columns if they
    fit the axes' column of the figure, else in one; the figure grows by its height, so that the
    panels keep theirs."""
    ax = legend.axes
    # Below the x axis's tick labels and label, by a distance that stays put when the layout
    # changes the axes' height.
    drop = (ax.bbox.y0 - ax.xaxis.get_tightbbox(fig.canvas.get_renderer()).y0) / fig.dpi
    under = ax.transAxes + ScaledTranslation(0, -drop, fig.dpi_scale_trans)
    box, _ = _relaid(
        legend,
        lambda *a, **k: ax.legend(*a, loc="upper center", bbox_to_anchor=(0.5, 0),
                                  bbox_transform=under, **k),
        fig.bbox.width * _share(ax),
    )
    w, h = fig.get_size_inches()
    fig.set_size_inches(w, h + box.height / fig.dpi)


def uncover_data(fig: Figure) -> bool:
    """Move each legend inside an axes that covers that axes' data, as ``fig`` was last drawn
    (saved), under that axes, the figure growing to hold it; True if one moved (draw it again)."""
    covering = covering_legends(fig)
    for legend in covering:
        _under_axes(fig, legend)
    return bool(covering)
