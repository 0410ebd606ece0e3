"""The book's figures, drawn from the ``attention`` package: one module per chapter (``chNN``,
``ch07_io``) and one for the appendix's measurements (``appendix``).

Each module defines ``FIGURES = {"name": make}``, where ``make()`` returns a matplotlib Figure;
the figure hook (:mod:`book.hooks.figures`) draws each into the site as ``figures/<name>.svg``,
and chapters 1 to 7 and 9 show their module's source under their figures.

The site's style lives here too: ``BOOK_STYLE``, the matplotlib style every figure is drawn in
(the figure hook applies it): text kept as SVG text, a transparent background, and two
placeholder colours that the site swaps for the page's own: ``INK`` (text, axes, ticks) becomes
the text colour, ``PAPER`` (legend and label boxes) the background colour, so a figure reads in
the light and the dark theme.

Heatmaps whose colour scale starts at white (``Blues``, ``Oranges``, ``RdBu_r``) would be bright
panels on a dark page. :func:`invert_in_dark` marks such an image (or colour bar), and the dark
theme's stylesheet inverts its lightness and keeps its hue: low values turn dark, high values
light. The numbers written in the cells take :func:`cell_text_colour`, a placeholder that the site
swaps for black or white so that it contrasts with the cell in either theme.
:func:`theme_heatmaps` does both for the heatmaps of :func:`attention.plot_attention`.

A log axis labels its ticks in mathtext (``$\\mathdefault{10^{-1}}$``), which the SVG writes as
one positioned text per character: a reader who copies "10⁻¹" gets "1 0 − 1", and matplotlib
parses each label again for every drawing. :func:`plain_log_labels` has the same labels written
as plain text with Unicode superscripts, which the site's font has; the figure hook applies it.
"""

import re
from typing import Any

from matplotlib.axis import Axis
from matplotlib.figure import Figure
from matplotlib.ticker import Formatter, LogFormatterMathtext

from attention.plotting import LABEL_GID, WEIGHTS_GID

INK = "#010101"  # near-black: the SVG's text colour, swapped for the page's (currentColor)
PAPER = "#fefefe"  # near-white: boxes behind text, swapped for the page's background colour
ON_LIGHT_CELL = "#020202"  # text on a light cell: black; white in the dark theme (cell inverted)
ON_DARK_CELL = "#fdfdfd"  # text on a dark cell: white; black in the dark theme
# Reference and guide lines (a ridge, c = 1, a chance level): a mid grey, 3.9:1 on the light page
# and 4.1:1 on the dark one (WCAG asks 3:1 of graphics; "0.6" was 2.8:1 on white).
GUIDE = "0.5"
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


def _plotted(artist: Any) -> list[Any]:
    """Every artist under ``artist`` and itself, in ``findobj``'s order, but an axis's own (its
    label and ticks, which carry no gid): ``Axis.get_children`` makes a tick object for every
    tick location, 6% of the time the figures take to draw."""
    found = [a for child in artist.get_children() if not isinstance(child, Axis)
             for a in _plotted(child)]
    return [*found, artist]


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
        taken = sum(str(a.get_gid()).startswith(DARK_INVERT) for a in _plotted(figure))
        artist.set_gid(f"{DARK_INVERT}-{taken}")


def theme_heatmaps(figure: Any) -> None:
    """Give every heatmap of :func:`attention.plot_attention` in ``figure`` the site's theme: its
    image and colour bar inverted in the dark theme, its numbers in the cell placeholders."""
    for artist in [a for a in _plotted(figure) if a.get_gid() in (WEIGHTS_GID, LABEL_GID)]:
        if artist.get_gid() == LABEL_GID:
            artist.set_color(ON_DARK_CELL if artist.get_color() == "white" else ON_LIGHT_CELL)
            artist.set_gid(None)
            continue
        if hasattr(artist, "set_edgecolor"):  # a colour bar's strip: no seam between its paths
            artist.set_edgecolor("face")
        artist.set_gid(None)
        invert_in_dark(artist)


SUPERSCRIPTS = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")
# A log formatter's label: $\mathdefault{10^{3}}$, $\mathdefault{2\times10^{-1}}$, $\mathdefault{0.5}$
LOG_LABEL = re.compile(r"\$\\mathdefault\{(?P<sign>-?)(?:(?P<coefficient>[^\\{}]+)\\times)?"
                       r"(?P<base>[^\\^{}]+)(?:\^\{(?P<exponent>-?\d+)\})?\}\$")


def plain_label(label: str) -> str:
    """A log formatter's mathtext label as plain text: ``$\\mathdefault{2\\times10^{-1}}$`` gives
    "2×10⁻¹"; any other label is returned as it is."""
    m = LOG_LABEL.fullmatch(label)
    if m is None:
        return label
    sign = "\u2212" if m["sign"] else ""  # the minus sign mathtext sets
    coefficient = f"{m['coefficient']}×" if m["coefficient"] else ""
    exponent = (m["exponent"] or "").translate(SUPERSCRIPTS)
    return f"{sign}{coefficient}{m['base']}{exponent}"


class PlainLogLabels(Formatter):
    """An axis's log formatter, its labels written by :func:`plain_label`: it still chooses
    which ticks are labelled (decades only, or some between them when the axis spans few)."""

    def __init__(self, mathtext: LogFormatterMathtext) -> None:
        self.mathtext = mathtext

    def set_axis(self, axis: Axis | None) -> None:
        super().set_axis(axis)
        self.mathtext.set_axis(axis)

    def set_locs(self, locs: Any) -> None:
        self.mathtext.set_locs(locs)

    def __call__(self, x: float, pos: int | None = None) -> str:
        return plain_label(self.mathtext(x, pos))


def plain_log_labels(figure: Figure) -> None:
    """Give every axis of ``figure`` whose ticks a log formatter labels in mathtext (major or
    minor) the same labels in plain text (:class:`PlainLogLabels`)."""
    for ax in figure.axes:
        for axis in (ax.xaxis, ax.yaxis):
            if isinstance(axis.get_major_formatter(), LogFormatterMathtext):
                axis.set_major_formatter(PlainLogLabels(axis.get_major_formatter()))
            if isinstance(axis.get_minor_formatter(), LogFormatterMathtext):
                axis.set_minor_formatter(PlainLogLabels(axis.get_minor_formatter()))
