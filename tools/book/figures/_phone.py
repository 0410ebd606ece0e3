"""A figure's phone layout: its panels stacked in one or two columns of a narrow figure.

The figure hook (book.hooks.figures) saves each figure as drawn, for a desktop, then lays the same
Figure out again with :func:`phone_layout` and saves it a second time, for a column under about
360 CSS pixels: the appendix's plots, drawn narrow and stacked from the start, fit a phone so.
Panels keep their order (row by row); a panel that spans columns gets a row of its own; a legend
beside the axes or below the panels goes below them, with its title, in two columns if they fit
the figure's width and in one if not; a title or x-axis label wider than the figure breaks at
spaces, never inside its math; a colour bar keeps room for the tick labels of its new height.
"""

from __future__ import annotations

import re

from matplotlib.figure import Figure

WORDS = re.compile(r"\S*\$[^$]*\$\S*|\S+")  # a word, or math with its spaces kept whole


def _wrap(fig: Figure) -> None:
    """Break every title and x-axis label wider than (most of) the figure at spaces, never
    inside math."""
    renderer = fig.canvas.get_renderer()
    texts = [(fig._suptitle, fig.bbox.width * 0.85)]
    for ax in fig.axes:
        # An axes' title and x label are centred on the axes, which its column holds beside the
        # y axis's labels; the layout has not placed it yet, so its width is estimated.
        spec = ax.get_subplotspec()
        share = len(spec.colspan) / spec.get_gridspec().ncols if spec is not None else 1.0
        y_axis = ax.yaxis.get_tightbbox(renderer) if ax.yaxis.get_visible() else None
        limit = fig.bbox.width * share * 0.85 - (y_axis.width if y_axis is not None else 0.0)
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
    for legend in list(fig.legends):  # below the panels, in two columns if they fit, else one
        handles, labels = legend.legend_handles, [t.get_text() for t in legend.get_texts()]
        size = legend.get_texts()[0].get_fontsize() if labels else None
        title = legend.get_title()
        legend.remove()
        renderer, two_columns = fig.canvas.get_renderer(), None
        for ncols in (min(2, len(labels)), 1):
            new = fig.legend(handles, labels, loc="outside lower center", ncols=ncols,
                             frameon=False, fontsize=size, title=title.get_text() or None,
                             title_fontsize=title.get_fontsize())
            box = new.get_window_extent(renderer)
            if ncols == 1 or box.width <= fig.bbox.width:
                break
            two_columns = box
            new.remove()
        if two_columns is not None:  # one column is taller: the panels keep their height
            w, h = fig.get_size_inches()
            fig.set_size_inches(w, h + (box.height - two_columns.height) / fig.dpi)
    _wrap(fig)
    if any(ax.get_label() == "<colorbar>" for ax in fig.axes):
        # A colour bar's ticks follow its height, which the new layout changes: lay the figure
        # out once with them, so that the layout made when it is saved has room for their labels.
        fig.draw_without_rendering()
    return fig
