"""MkDocs hook: render the book's figures from code on every build.

Each module of :mod:`book.figures` (``chNN``, and ``appendix`` for the appendix's measurements)
defines ``FIGURES = {"name": make_fn}``, where ``make_fn()`` returns a
``matplotlib.figure.Figure`` drawn from the ``attention`` package. On every build this
hook imports each module, renders each figure to SVG and adds it to the build as the generated
file ``figures/<name>.svg``; a page links it as ``![alt text](../figures/<name>.svg)``, and
``mkdocs build --strict`` checks that link like any other. Nothing is written into docs/.

Every figure is drawn in the book's style (``book.figures.BOOK_STYLE``): text stays SVG
text, the background is transparent, and the style's placeholder colours become ``currentColor``
(ink) and the page's background colour (paper). The SVG output is reproducible: no date in the
metadata and a fixed salt for element ids, so the same code gives the same bytes.

Drawing them is most of a build's time, so they are cached (``.cache/figures/KEY/``, git-ignored):
KEY hashes everything a figure is drawn from (every module of the package and of the book's tooling
that the figure modules import, the results files, and the versions of Python, matplotlib, NumPy
and torch). A build that changed none of them, such
as one after editing a chapter's text, copies the cached SVG files instead of drawing them again.
A build that draws some writes its pages while a child process draws, and puts the figures into
the pages that show them once all are drawn (``on_post_build``): no core waits on the other.

Matplotlib's SVG is made lighter before it is cached (:func:`lighten`: two decimals of a point,
the font named once, no ids or groups that nothing needs), the same to the eye: a page carries a
wide figure twice, and a chapter page must stay under ``MAX_PAGE_BYTES``.

After the search index has read a page (so no tick label lands in it), ``on_post_page`` puts
each figure's SVG into the page itself, where the theme's colours reach it: in the dark theme the
ink turns light. The SVG is drawn at its natural size, never wider than the text, but never so
small that its smallest text falls under ``MIN_TEXT_PX`` CSS pixels. A figure that would not fit
a phone's column so is laid out a second time for phones (book.figures._phone: its panels
stacked), and the page carries both drawings: a container query in the page's head shows the
phone one wherever the column is narrower than the desktop one needs (docs/stylesheets/figures.css).

Every figure is numbered and captioned: the image's title (``![alt](../figures/x.svg "Caption")``)
is its caption, "Figure 7.2 — Caption" in a ``<figure id="fig-7-2">`` (chapter 7, its second
figure, counted across the chapter's section pages; a page outside the chapters numbers its figures 1, 2, ...), and every "Figure 7.2" or
"Figures 7.2 and 7.3" in the prose of any page links to it, as equation references do.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import html
import importlib
import importlib.metadata
import io
import logging
import math
import os
import pkgutil
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import matplotlib

matplotlib.use("Agg")  # render without a display, before pyplot is imported anywhere

import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.text  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.font_manager import FontManager, FontProperties, get_font  # noqa: E402
from matplotlib.mathtext import MathTextParser  # noqa: E402
from mkdocs.config.defaults import MkDocsConfig  # noqa: E402
from mkdocs.exceptions import PluginError  # noqa: E402
from mkdocs.structure.files import File, Files  # noqa: E402
from mkdocs.structure.pages import Page  # noqa: E402
from mkdocs.utils import get_relative_url  # noqa: E402

from .. import figures  # noqa: E402
from ..chapters import chapter_number, chapters  # noqa: E402
from ..constants import MIN_TEXT_PX, PHONE_COLUMN_PX, REPO  # noqa: E402  (CSS px)
from ..figures import BOOK_STYLE, INK, ON_DARK_CELL, ON_LIGHT_CELL, PAPER, plain_log_labels, theme_heatmaps  # noqa: E402
from ..figures._phone import phone_layout, uncover_data  # noqa: E402
from .math import NO_LINKS, link_references, map_text  # noqa: E402

log = logging.getLogger("mkdocs.hooks.figures")

FIGURE_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")
SVG_STYLE = {**BOOK_STYLE, "svg.hashsalt": "attention-book"}
# The placeholder colours, as matplotlib writes them, and what the page puts in their place.
COLOURS = {
    INK: "currentColor",
    PAPER: "var(--md-default-bg-color, #fff)",
    ON_LIGHT_CELL: "var(--attn-on-light-cell, #000)",  # swapped in the dark theme (figures.css)
    ON_DARK_CELL: "var(--attn-on-dark-cell, #fff)",
}
# An image of a generated figure, as Markdown writes it: <img alt="..." src="../figures/x.svg" />
FIGURE_IMG = re.compile(
    r'<img alt="(?P<alt>[^"]*)" src="(?P<src>(?:\.\./)*figures/(?P<name>[a-z0-9-]+)\.svg)"'
    r'(?: title="(?P<title>[^"]*)")? ?/?>'
)
FIGURE_PARAGRAPH = re.compile(rf"<p>\s*(?P<img>{FIGURE_IMG.pattern})\s*</p>")
SOURCE_FIGURE = re.compile(r"\]\((?:\.\./)*figures/([a-z0-9-]+)\.svg")
# "Figure 7.2", "Figures 7.2 and 7.3", "figures 10.1, 10.2 and 10.4"
FIG_NUMBER = r"\d+\.\d+"
FIG_REFERENCE = re.compile(
    rf"\b[Ff]igures?\s+{FIG_NUMBER}(?:(?:,\s*|,?\s+(?:and|or|to)\s+|\s*[–-]\s*){FIG_NUMBER})*"
)
PHONE_WIDTH_IN = 5.4  # the widest phone layout, inches: 10-point text is 9 px in PHONE_COLUMN_PX
CACHE = REPO / ".cache" / "figures"
# What every figure is drawn from besides its own module: (folder, pattern) of files (the figure
# modules themselves left out), and the distributions that draw.
SOURCES = ("src", "tools")  # the repository's code: a module imported from these is an input
RESULTS = ("docs/appendix/results", "*.json")  # the measurements some figures draw
FIGURE_SOURCES = Path(figures.__file__).parent
FONT_CSS = REPO / "docs" / "stylesheets" / "figures.css"  # its @font-face rules: the fonts shipped
DRAWN_BY = ("matplotlib", "numpy", "torch")
NAMES = "names.txt"  # written last into a cache entry: the entry is complete
CLAIMED = "claimed"  # made by the process that draws a cache entry's figures
# Processes that draw the figures missing from the cache, beside the build's own, which joins them
# once its pages are written. One: with two, three processes drew on two cores, and slower.
CHILDREN = 1
_svgs: dict[str, bytes] = {}  # this build's figures, by name
_phone_svgs: dict[str, bytes] = {}  # the phone layouts of those too wide for a phone
_numbers: dict[str, tuple[str, File]] = {}  # chapter figures: name -> ("7.2", its page)
_entries: dict[str, Path] = {}  # this build's cache entry of each figure module
_children: list[tuple[subprocess.Popen, Path]] = []  # drawing the missing ones, and their logs
_missing: dict[str, list[str]] = {}  # figure module -> its figures' names, for those drawn now
_waiting: list[str] = []  # pages written before their figures were drawn: their site files
_figure_files: list[FigureFile] = []  # this build's figures as files of the site
PHONE_RULES = "<!-- attn-phone-figures -->"  # where a waiting page's phone rules will go

_command = "build"


def _parse_math_once(parser: MathTextParser, *key: object) -> object:
    key = (parser._output_type, *key)  # type: ignore[attr-defined]
    if key not in _MATH_PARSES:
        _MATH_PARSES[key] = _PARSE_MATH(parser, *key[1:])
    return _MATH_PARSES[key]


# Matplotlib keeps a figure's parsed math per renderer (``MathTextParser._parse_cached`` is keyed on
# the parser, and every renderer makes a parser of its own), so each of a figure's five or so draws
# parsed every label again: 1,199 parses of 152 strings, a sixth of the drawing time. The parse
# depends on the parser's output type and the arguments only (its string, dpi, a copy of the font,
# flags), so one cache keyed on those serves every renderer, and the SVG bytes are the same.
_PARSE_MATH = MathTextParser._parse_cached.__wrapped__  # type: ignore[attr-defined]
_MATH_PARSES: dict[tuple[object, ...], object] = {}  # a few thousand at most: the book's labels
MathTextParser._parse_cached = _parse_math_once  # type: ignore[method-assign]


def _shared_text_metrics(renderer: object) -> Callable[..., tuple[float, float, float]]:
    def metrics(text: str, fontprop: object, ismath: bool | str, dpi: float) -> tuple[float, float, float]:
        drawing = getattr(renderer, "_renderer", renderer)  # a MixedModeRenderer's current one
        key = (type(drawing), getattr(drawing, "dpi", None), text, fontprop, ismath, dpi)
        if key not in _TEXT_METRICS:
            _TEXT_METRICS[key] = renderer.get_text_width_height_descent(  # type: ignore[attr-defined]
                text, fontprop, ismath=ismath)
        return _TEXT_METRICS[key]

    return metrics


# The same holds for the size of a piece of text: matplotlib keeps it per renderer (9,564 sizes
# measured for 1,575 different ones, 2.5 s), though it depends only on the kind of renderer, its
# dpi, the text, a copy of its font and whether it is math. One cache serves every renderer.
_TEXT_METRICS: dict[tuple[object, ...], tuple[float, float, float]] = {}
_PER_RENDERER_METRICS = matplotlib.text._get_text_metrics_function  # type: ignore[attr-defined]
matplotlib.text._get_text_metrics_function = _shared_text_metrics  # type: ignore[attr-defined]


class _FontLookup:
    """matplotlib.text's ``fontManager``, answering ``_find_fonts_by_props`` once per font."""

    def __init__(self, manager: FontManager) -> None:
        self._manager = manager
        self._paths: dict[tuple[object, ...], tuple[object, ...]] = {}

    def __getattr__(self, name: str) -> object:
        return getattr(self._manager, name)

    def _find_fonts_by_props(self, prop: FontProperties) -> tuple[object, ...]:
        key = tuple(vars(prop).values())  # what FontProperties hashes and compares
        if key not in self._paths:
            self._paths[key] = tuple(self._manager._find_fonts_by_props(prop))
        return self._paths[key]


class _FontTables:
    """A font as matplotlib.text reads it (``get_font(paths).get_sfnt_table(name)``), each table
    read once: the font's own method builds a new dict on every call."""

    def __init__(self, paths: tuple[object, ...]) -> None:
        self._font, self._tables = get_font(paths), {}

    def get_sfnt_table(self, name: str) -> object:
        if name not in self._tables:
            self._tables[name] = self._font.get_sfnt_table(name)
        return self._tables[name]


# Laying out a text, matplotlib looks up its font and reads the font's height from two of its
# tables, each time: 55,000 layouts, about 1.4 s of the drawing. The answer depends on the font
# alone, so these two names of matplotlib.text (and only there) answer from a cache; the SVG
# bytes are the same.
matplotlib.text.fontManager = _FontLookup(matplotlib.text.fontManager)  # type: ignore[attr-defined]
matplotlib.text.get_font = functools.cache(_FontTables)  # type: ignore[attr-defined]


def figure_modules(package: ModuleType = figures) -> list[str]:
    """Return the names of the modules of ``package`` (``book.figures.chNN``, ...), sorted."""
    return sorted(
        f"{package.__name__}.{m.name}"
        for m in pkgutil.iter_modules(package.__path__)
        if not m.name.startswith("_")
    )


def load_module(name: str) -> ModuleType:
    """Import the figure module ``name``, afresh under `mkdocs serve` (so that edits show)."""
    module = importlib.import_module(name)
    return importlib.reload(module) if _command == "serve" else module


def load_figures(
    package: ModuleType = figures, modules: list[str] | None = None,
) -> dict[str, Callable[[], Figure]]:
    """Import every figure module of ``package`` (or the ``modules`` named) and return their
    figure functions by name.

    Raises:
        PluginError: if a module has no ``FIGURES`` dict, a name is not a lowercase slug
            (``ch02-weights-heatmap``), a value is not callable, or two modules use one name.
    """
    found: dict[str, Callable[[], Figure]] = {}
    for module in figure_modules(package) if modules is None else modules:
        figures_ = getattr(load_module(module), "FIGURES", None)
        if not isinstance(figures_, dict):
            found_type = type(figures_).__name__
            raise PluginError(
                f"{module}: expected a dict FIGURES = {{name: function}}, got {found_type}"
            )
        for name, make in figures_.items():
            if not isinstance(name, str) or not FIGURE_NAME.fullmatch(name):
                raise PluginError(
                    f"{module}: expected a figure name like 'ch02-weights-heatmap', got {name!r}"
                )
            if not callable(make):
                raise PluginError(f"{module}: expected a function for {name!r}, got {make!r}")
            if name in found:
                raise PluginError(
                    f"{module}: figure name {name!r} is already used by another module"
                )
            found[name] = make
    return found


def figure_svg(fig: Figure, close: bool = True) -> bytes:
    """Return ``fig`` as reproducible SVG bytes, its placeholder colours swapped, and close it
    (unless not to ``close``)."""
    with matplotlib.rc_context(SVG_STYLE):
        buffer = io.BytesIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    if close:
        plt.close(fig)
    return _swap_colours(buffer.getvalue())


def render_svg(name: str, make: Callable[[], Figure]) -> bytes:
    """Call ``make()`` in the book's style and return its figure as SVG bytes."""
    return render_svgs(name, make)[0]


def legible_px(svg: bytes | str) -> float:
    """The narrowest a figure may be shown, CSS px: its smallest text at ``MIN_TEXT_PX``."""
    width, smallest = text_sizes(svg.decode("utf-8") if isinstance(svg, bytes) else svg)
    return width * MIN_TEXT_PX / smallest


def render_svgs(name: str, make: Callable[[], Figure]) -> tuple[bytes, bytes | None]:
    """Call ``make()`` in the book's style; return its figure as SVG bytes, and its phone
    layout's (None for a figure that fits a phone's column as drawn).

    Raises:
        PluginError: if ``make()`` returns something other than a matplotlib Figure.
    """
    with matplotlib.rc_context(SVG_STYLE):
        fig = make()
        if not isinstance(fig, Figure):
            raise PluginError(
                f"figure {name!r}: expected a matplotlib Figure, got {type(fig).__name__}"
            )
        theme_heatmaps(fig)
        plain_log_labels(fig)
        wide = _uncovered_svg(fig)
        refuse_foreign_fonts(name, wide)
        if legible_px(wide) <= PHONE_COLUMN_PX:
            plt.close(fig)
            return wide, None
        smallest = text_sizes(wide.decode("utf-8"))[1]  # points: 10 gives 5.4 in, 8.5 gives 4.7
        width = min(PHONE_WIDTH_IN, PHONE_COLUMN_PX * smallest / MIN_TEXT_PX / 72)
        phone = _uncovered_svg(phone_layout(fig, width))
        plt.close(fig)
    return wide, phone


def _uncovered_svg(fig: Figure) -> bytes:
    """``fig`` as :func:`figure_svg` writes it, left open; saved a second time if a legend covered
    its axes' data as first saved, and moved under that axes (book.figures._phone.uncover_data)."""
    svg = figure_svg(fig, close=False)
    return figure_svg(fig, close=False) if uncover_data(fig) else svg


def shipped_fonts(css: Path = FONT_CSS) -> set[str]:
    """The font families the site ships for figures: those of the ``@font-face`` rules of
    docs/stylesheets/figures.css."""
    return set(re.findall(r'@font-face\s*\{[^}]*?font-family:\s*"([^"]+)"', css.read_text("utf-8")))


def refuse_foreign_fonts(name: str, svg: bytes) -> None:
    """Refuse a figure whose text names a font the site does not ship.

    Mathtext sets a few symbols in fonts of its own: ``\\sqrt`` in STIX's size variants, ``'``
    (``\\prime``) in Computer Modern's cmsy10, where the prime is the glyph of the character "0".
    A reader's browser has neither, so it drew a tiny radical and "p0" for "p′".

    Raises:
        PluginError: naming the figure, each such font and the characters set in it.
    """
    shipped = shipped_fonts()
    found = re.findall(r"font-family: ?'([^']+)'[^>]*>([^<]*)<", svg.decode("utf-8"))
    foreign = sorted({(font, text) for font, text in found if font not in shipped})
    if foreign:
        listed = ", ".join(f"{text!r} in {font!r}" for font, text in foreign)
        raise PluginError(
            f"figure {name!r}: expected text in the fonts the site ships "
            f"({', '.join(sorted(shipped))}), got {listed}: write the character itself "
            f"(√ for \\sqrt, ′ for a prime) so that it is set in DejaVu Sans"
        )


def _swap_colours(svg: bytes) -> bytes:
    text = svg.decode("utf-8")
    for placeholder, colour in COLOURS.items():
        text = text.replace(placeholder, colour)
    return lighten(text).encode("utf-8")


def lighten(svg: str) -> str:
    """``svg`` as matplotlib wrote it, in fewer bytes and elements and the same to the eye.

    A page carries a wide figure twice (its phone layout too), and matplotlib writes every
    coordinate with six decimals of a point, every text's font list in full and a group with an
    id around every artist. Here coordinates keep two decimals (a hundredth of a point, under a
    hundredth of a CSS pixel at the figure's natural size; the factors of a ``scale`` keep
    theirs), a path's repeated points and command letters go, the text's font is named once on
    the ``<svg>`` (``SVG_FONT``), comments go, groups lose the ids matplotlib made up and nothing
    refers to (the tests' ``figure_1``, ``patch_1`` and ``axes_N`` stay, as does a gid such as
    ``dark-invert-2``, which the dark theme's style finds) and a group left with no attribute is
    dissolved into its parent. A math text's characters no longer repeat the fill of the group
    around them, and elements in a row with one clip path share a group that has it (a colour
    bar's strip is 256 paths). Whitespace between tags goes, except inside a ``<text>``, where
    each run becomes the one space it shows as.
    """
    svg = re.sub(r"<!--.*?-->", "", svg, flags=re.DOTALL)
    svg = _NUMERIC_ATTRIBUTE.sub(_numeric_attribute, svg)
    svg = _TEXT_FONT.sub("", svg)
    svg = re.sub(r"<svg\b", f'<svg style="font-family: {SVG_FONT}"', svg, count=1)
    referenced = set(re.findall(r"(?:url\(#|href=\"#)([^\")]+)", svg))
    svg = re.sub(
        r'<g id="([^"]+)"',
        lambda m: "<g" if _AUTO_ID.fullmatch(m[1]) and not (
            m[1] in referenced or _KEPT_ID.fullmatch(m[1])) else m[0],
        svg,
    )
    svg = _dissolve_bare_groups(svg)
    svg = _MATH_TEXT.sub(_math_text, svg)
    parts = re.split(r"(<text\b.*?</text>)", svg, flags=re.DOTALL)
    # Inside a text a run of spaces shows as one space, and matplotlib indents with several.
    svg = "".join(re.sub(r">[ \t]*\n[ \t]+<", "> <", p) if i % 2
                  else re.sub(r"^\s+(?=<)|(?<=>)\s+$", "", re.sub(r">\s+<", "><", p))
                  for i, p in enumerate(parts))
    return _CLIPPED_RUN.sub(_clip_once, svg)


SVG_FONT = "'DejaVu Sans', sans-serif"  # the site ships DejaVu Sans (docs/stylesheets/figures.css)
_DECIMAL = re.compile(r"-?\d+\.\d+")
_NUMERIC_ATTRIBUTE = re.compile(r'\s(d|x|y|transform)="([^"]*)"')
# The font of text in the book's font: the <svg>'s, where the page ships it. Others stay.
_TEXT_FONT = re.compile(r"font-family: 'DejaVu Sans'(?:, [^;\"]*sans-serif)?; |"
                        r"; font-family: 'DejaVu Sans'(?:, [^;\"]*sans-serif)?(?=\")")
_AUTO_ID = re.compile(r"[A-Za-z][\w.]*_\d+")  # the ids matplotlib makes up: ``text_12``, ...
_KEPT_ID = re.compile(r"figure_1|patch_1|axes_\d+")  # ... but these, which the tests look for
_PATH_COMMAND = re.compile(r"([MLQCz])([^MLQCz]*)")


# Math text: a group gives the fill, a <text> without style holds one <tspan> per character,
# each repeating the group's fill.
_MATH_TEXT = re.compile(r'(<g style="fill: ([^;"]+)"(?: transform="[^"]*")?>\s*<text>)(.*?)(</text>)',
                        flags=re.DOTALL)
# Two or more elements in a row, each clipped by the same path: a colour bar's strip, a
# histogram's bars, a matrix of cells.
_CLIPPED = r'<(?:path|use) [^>]*? clip-path="url\(#([^)]+)\)"[^>]*/>'
_CLIPPED_RUN = re.compile(rf"(?:{_CLIPPED.replace('([^)]+)', '(?P<clip>[^)]+)', 1)})"
                          rf"(?:{_CLIPPED.replace('([^)]+)', '(?P=clip)')})+")


def _math_text(m: re.Match[str]) -> str:
    """A math text's tspans without the fill they inherit from the group around their text."""
    inner = m[3].replace(f"; fill: {m[2]}\"", '"')
    return m[1] + inner + m[4]


def _clip_once(m: re.Match[str]) -> str:
    """A run of elements clipped by one path as one clipped group of them."""
    clip = f' clip-path="url(#{m["clip"]})"'
    return f"<g{clip}>{m[0].replace(clip, '')}</g>"


def _round(m: re.Match[str]) -> str:
    text = f"{float(m.group(0)):.2f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def _numeric_attribute(m: re.Match[str]) -> str:
    name, value = m.groups()
    if name == "transform":  # a scale or a matrix multiplies: only translations are rounded
        value = re.sub(r"translate\(([^)]*)\)",
                       lambda t: f"translate({_DECIMAL.sub(_round, t[1])})", value)
    elif name == "d":
        value = _path_data(_DECIMAL.sub(_round, value))
    else:
        value = _DECIMAL.sub(_round, value)
    return f' {name}="{value}"'


def _path_data(d: str) -> str:
    """Path data with a line to the point it starts from dropped, and each command letter that
    repeats the one before it (or a line after a move) left implicit."""
    out: list[str] = []
    previous, point = "", ""
    for command, args in _PATH_COMMAND.findall(d):
        args = " ".join(args.split())
        if command == "L" and previous == "L" and args == point:
            continue  # a line of no length, between two lines
        implicit = command == previous != "z" or (command, previous) == ("L", "M")
        out.append(f" {args}" if implicit else command + args)
        previous, point = command, " ".join(args.split()[-2:])
    return "".join(out).strip()


def _dissolve_bare_groups(svg: str) -> str:
    """``svg`` with every ``<g>`` that has no attribute replaced by what it holds (nothing, for
    ``<g/>``)."""
    out: list[str] = []
    bare: list[bool] = []
    last = 0
    for m in re.finditer(r"<g\b[^>]*>|</g>", svg):
        out.append(svg[last : m.start()])
        last = m.end()
        if m.group(0).endswith("/>"):  # an empty group: gone, unless it has attributes
            out.append("" if m.group(0) == "<g/>" else m.group(0))
        elif m.group(0) == "</g>":
            if not bare.pop():
                out.append(m.group(0))
        else:
            bare.append(m.group(0) == "<g>")
            if not bare[-1]:
                out.append(m.group(0))
    out.append(svg[last:])
    return "".join(out)


def text_sizes(svg: str) -> tuple[float, float]:
    """(width of the drawing, size of its smallest text), both in the SVG's own units.

    The size of a text is that of its largest characters: the base size of a label with math in
    it, whose sub- and superscripts matplotlib draws at 70 percent.
    """
    width = float(re.search(r'viewBox="0 0 ([\d.]+) [\d.]+"', svg).group(1))
    sizes = [
        max(float(size) for size in re.findall(r"font(?:-size)?: ?(?:[a-z]+ )*([\d.]+)px", text))
        for text in re.findall(r"<text\b.*?</text>", svg, flags=re.DOTALL)
    ]
    return width, min(sizes, default=MIN_TEXT_PX)


def _svg_element(svg: bytes, prefix: str, alt: str, layout: str) -> str:
    text = svg.decode("utf-8")
    text = text[text.index("<svg") :]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.DOTALL)
    text = re.sub(r"<defs>\s*<style[^>]*>.*?</style>\s*</defs>\s*", "", text, flags=re.DOTALL)
    text = re.sub(r'(\bid="|url\(#|href="#)', rf"\g<1>{prefix}-", text)
    width, smallest = text_sizes(text)
    natural = width * 4 / 3  # points to CSS pixels
    legible = width * MIN_TEXT_PX / smallest  # narrower, the smallest text is under MIN_TEXT_PX
    return re.sub(
        r'<svg [^>]*?(viewBox="[^"]*")[^>]*>',
        lambda m: (
            f'<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" '
            f'{m.group(1)} class="attn-{layout}" role="img" aria-label="{alt}" '
            f'style="font-family: {SVG_FONT}; max-width: {natural:.0f}px; '
            f'min-width: {math.ceil(min(legible, natural))}px">'
        ),
        text,
        count=1,
    )


def inline_svg(name: str, svg: bytes, alt: str, phone: bytes | None = None) -> str:
    """The markup that shows figure ``name`` in a page: its SVG (and its phone layout's), with ids
    made unique to it, named by ``alt`` for screen readers, sized so that its smallest text
    stays legible."""
    text = _svg_element(svg, name, alt, "wide")
    if phone is not None:
        text += _svg_element(phone, f"{name}-phone", alt, "narrow")
    return f'<span class="attn-figure" data-figure="{name}">{text}</span>'


def phone_rule(name: str, svg: bytes) -> str:
    """The CSS that swaps figure ``name`` for its phone layout where its box is narrower than
    the desktop drawing needs (its min-width)."""
    need = math.ceil(min(legible_px(svg), text_sizes(svg.decode("utf-8"))[0] * 4 / 3))
    figure = f'.md-typeset .attn-figure[data-figure="{name}"]'
    return (f"@container (max-width: {need - 0.02:.2f}px) {{ {figure} > .attn-wide {{ display: none }}"
            f" {figure} > .attn-narrow {{ display: block }} }}")


class FigureFile(File):
    """A figure's SVG file in the site, copied there once drawn: by mkdocs with the other files
    when it is cached, by :func:`on_post_build` when this build draws it."""

    def copy_file(self, dirty: bool = False) -> None:
        if not _missing:
            super().copy_file(dirty)


def on_startup(command: str, dirty: bool) -> None:
    """Remember whether this is `mkdocs serve`, which rebuilds in one long-lived process."""
    global _command
    _command = command


def on_pre_build(config: MkDocsConfig) -> None:
    """Under `mkdocs serve`, forget the imported package so figures follow edits to src/."""
    if _command == "serve":
        for module in [m for m in sys.modules if m == "attention" or m.startswith("attention.")]:
            del sys.modules[module]


def render_all(jobs: list[tuple[str, Path]]) -> None:
    """Render the figures of each (module, folder) that no other process has claimed into
    ``folder/<name>.svg`` (each file replaced in one step), and the phone layout of each that has
    one into ``folder/phone/<name>.svg``. Every drawing process is given every job and claims
    them one at a time (``folder/CLAIMED``, made only if absent): none waits while another still
    has several modules to draw."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the drawing processes share the cores; torch's threads would too
    try:
        for module, out_dir in jobs:
            try:
                os.close(os.open(out_dir / CLAIMED, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                continue
            (out_dir / "phone").mkdir(exist_ok=True)
            for name, make in load_figures(modules=[module]).items():
                wide, phone = render_svgs(name, make)
                if phone is not None:  # the phone layout, where there is one, first
                    (out_dir / "phone" / f"{name}.svg").write_bytes(phone)
                partial = out_dir / f".{name}.svg.partial"
                partial.write_bytes(wide)
                os.replace(partial, out_dir / f"{name}.svg")
    finally:
        torch.set_num_threads(threads)


def drawn_from(repo: Path = REPO) -> list[Path]:
    """The repository's modules that the figure modules import, directly or not (the figure
    modules themselves aside), found from their import statements: editing any other file, such
    as a test helper or another hook, keeps the cache."""
    roots = [repo / folder for folder in SOURCES]

    def module_file(name: str) -> Path | None:
        for root in roots:
            for path in (root / name.replace(".", "/") / "__init__.py",
                         root / (name.replace(".", "/") + ".py")):
                if path.is_file():
                    return path
        return None

    def imported(path: Path, name: str) -> set[str]:
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                found |= {base} | {f"{base}.{alias.name}" for alias in node.names}
        # importing a.b.c runs a/__init__.py and a/b/__init__.py first
        return {".".join(n.split(".")[:i]) for n in found for i in range(1, n.count(".") + 2)}

    names = figure_modules() + [__name__]
    seen: dict[str, Path] = {}
    while names:
        name = names.pop()
        path = module_file(name)
        if path is None or name in seen:
            continue
        seen[name] = path
        names += sorted(imported(path, name) - seen.keys())
    return sorted(path for path in seen.values()
                  if path.parent != FIGURE_SOURCES or path.name.startswith("_"))


def inputs_key(repo: Path = REPO, sources: list[Path] | None = None) -> hashlib._Hash:
    """A hash of every file and version all figures are drawn from (their modules aside):
    ``sources`` (by default :func:`drawn_from`) and the results files."""
    digest = hashlib.sha256()
    for distribution in DRAWN_BY:
        digest.update(f"{distribution}=={importlib.metadata.version(distribution)}\n".encode())
    digest.update(sys.version.encode())
    folder, pattern = RESULTS
    results = sorted((repo / folder).rglob(pattern))
    for path in (drawn_from(repo) if sources is None else sources) + results:
        digest.update(f"\n{path.relative_to(repo).as_posix()}\n".encode())
        digest.update(path.read_bytes())
    return digest


def cache_entry(module: str, common: hashlib._Hash) -> Path:
    """The cache folder of a figure module's SVG files: named by the module and a hash of what
    all figures are drawn from (``common``) and of the module's own source."""
    digest = common.copy()
    short = module.rpartition(".")[2]
    digest.update((FIGURE_SOURCES / f"{short}.py").read_bytes())
    return CACHE / f"{short}-{digest.hexdigest()[:16]}"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add every figure to the build as ``figures/<name>.svg``: from the cache, or drawn now.

    A module whose figures are not cached has them drawn in child processes (``python -P -m
    book.hooks.figures MODULE=FOLDER ...``, :data:`CHILDREN` of them) while this one renders the
    pages, and then by this one too (``on_post_build``), each module by whichever process claims it
    first. Those modules are imported here too, so that a bad name fails at once; the SVG files
    are read once all are drawn, and then copied and put into the pages.
    """
    number_figures(files, config["nav"])
    common = inputs_key()
    _entries.clear()
    _missing.clear()
    _children.clear()
    _figure_files.clear()
    names: dict[str, list[str]] = {}
    for module in figure_modules():
        entry = _entries[module] = cache_entry(module, common)
        if (entry / NAMES).is_file():
            names[module] = (entry / NAMES).read_text(encoding="utf-8").split()
        else:
            names[module] = _missing[module] = list(load_figures(modules=[module]))
            entry.mkdir(parents=True, exist_ok=True)
    seen: dict[str, str] = {}
    for module, module_names in names.items():
        for name in module_names:
            if name in seen:
                raise PluginError(f"{module}: figure name {name!r} is already used by {seen[name]}")
            seen[name] = module
    # The modules with the most figures first, so that the last to be drawn are quick ones: a
    # module's time grows with its figures (the appendix's 40 take a quarter of the drawing).
    missing = sorted(_missing, key=lambda m: -len(_missing[m]))
    for module in missing:
        (_entries[module] / CLAIMED).unlink(missing_ok=True)  # left by a build that stopped
    for i in range(min(CHILDREN, len(missing))):
        log = _entries[missing[i]] / "stderr.txt"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-P", "-m", "book.hooks.figures", *(f"{m}={_entries[m]}" for m in missing)],
                stdout=out, stderr=subprocess.STDOUT,
            )
        _children.append((process, log))
    for module, module_names in names.items():
        for name in module_names:
            uri = f"figures/{name}.svg"
            if files.get_file_from_path(uri) is not None:
                raise PluginError(f"docs/{uri} exists: figures are made by code, delete the file")
            file = FigureFile.generated(config, uri, abs_src_path=str(_entries[module] / f"{name}.svg"))
            files.append(file)
            _figure_files.append(file)
    return files


def on_env(env: object, config: MkDocsConfig, files: Files) -> object:
    """Keep each figure's SVG for ``on_post_page``, when all are cached; when some are being
    drawn, leave them to :func:`on_post_build`, so that this process writes the pages first."""
    _waiting.clear()
    if not _missing:
        read_svgs()
    return env


def finish_drawing() -> None:
    """Draw the figures no child has started on yet, wait for the children, and mark each cache
    entry complete.

    Raises:
        PluginError: with a child's output, if drawing a figure failed.
    """
    render_all([(module, _entries[module]) for module in _missing])
    for process, log in _children:
        if process.wait() != 0:
            output = log.read_text(errors="replace")
            raise PluginError(f"drawing the figures failed:\n{output}")
    for module, module_names in _missing.items():
        (_entries[module] / NAMES).write_text("\n".join(module_names) + "\n", encoding="utf-8")
    _missing.clear()


def read_svgs() -> None:
    """Read every figure's SVG, and its phone layout's, from the cache."""
    _svgs.clear()
    _phone_svgs.clear()
    for module, entry in _entries.items():
        for name in (entry / NAMES).read_text(encoding="utf-8").split():
            _svgs[name] = (entry / f"{name}.svg").read_bytes()
            if (phone := entry / "phone" / f"{name}.svg").is_file():
                _phone_svgs[name] = phone.read_bytes()


def on_build_error(error: Exception) -> None:
    """Stop the children drawing figures: a failed build would leave them running."""
    for process, _ in _children:
        if process.poll() is None:
            process.kill()
            process.wait()


def on_post_build(config: MkDocsConfig) -> None:
    """Finish the figures drawn in this build: put them into the pages written while they were
    drawn, and copy their files into the site. Then keep only this build's cache entries: older
    ones are drawn from files that changed since."""
    if _missing:
        finish_drawing()
        read_svgs()
        for path in _waiting:
            page = Path(path)
            page.write_text(inline_figures(page.read_text(encoding="utf-8")), encoding="utf-8")
        for file in _figure_files:
            file.copy_file()
    if CACHE.is_dir():
        for entry in CACHE.iterdir():
            if entry not in _entries.values():
                shutil.rmtree(entry, ignore_errors=True)


def figure_anchor(number: str) -> str:
    """The id of figure ``number``: ``7.2`` gives ``fig-7-2``."""
    return "fig-" + number.replace(".", "-")


def number_figures(files: Files, nav: object) -> None:
    """Number the figures of every chapter in the order its pages show them, in reading order
    (``nav``, the nav of mkdocs.yml: a chapter of section pages numbers across them)."""
    _numbers.clear()
    for chapter, uris in chapters(nav).items():
        shown: dict[str, File] = {}
        for uri in uris:
            file = files.get_file_from_path(uri)
            if file is None or not file.abs_src_path:
                continue
            for name in SOURCE_FIGURE.findall(Path(file.abs_src_path).read_text(encoding="utf-8")):
                shown.setdefault(name, file)
        for k, (name, file) in enumerate(shown.items(), start=1):
            _numbers[name] = (f"{chapter_number(file.src_uri)}.{k}", file)


def caption_figures(fragment: str, page: Page) -> str:
    """Put each figure that is a paragraph of its own into a numbered, captioned ``<figure>``.

    Raises:
        PluginError: if a chapter's figure has no caption (the image's title).
    """
    count = 0

    def one(m: re.Match[str]) -> str:
        nonlocal count
        count += 1
        name, title = m["name"], html.unescape(m["title"] or "")
        number = _numbers[name][0] if name in _numbers else str(count)
        if not title.strip():
            if name in _numbers:
                raise PluginError(
                    f"{page.file.src_uri}: figure {name} has no caption: write it as the image's "
                    f'title, ![alt](../figures/{name}.svg "Caption")'
                )
            title = m["alt"]
        missing: list[str] = []  # an equation the caption names is linked as in the prose
        caption = (f"<strong>Figure {number}</strong> — "
                   f"{link_references(_caption_math(html.escape(title)), page, missing)}")
        return (f'<figure class="attn-figure-box" id="{figure_anchor(number)}">{m["img"]}'
                f"<figcaption>{caption}</figcaption></figure>")

    return FIGURE_PARAGRAPH.sub(one, fragment)


def _caption_math(caption: str) -> str:
    """A caption's math, which arithmatex leaves in the image's title as ``\\(d_k\\)``, as it
    writes inline math in the text: the math hook then typesets it with the page's."""
    return re.sub(r"\\\((.+?)\\\)", r'<span class="arithmatex">\\(\1\\)</span>', caption)


def link_figure_references(fragment: str, page: Page, missing: list[str]) -> str:
    """Link each number of every "Figure(s) x.y ..." in the prose to its figure."""
    pages = {number: file for number, file in _numbers.values()}

    def number(m: re.Match[str]) -> str:
        key = m.group(0)
        target = pages.get(key)
        if target is None:
            missing.append(key)
            return key
        url = get_relative_url(target.url, page.file.url) if target is not page.file else ""
        return f'<a class="figref" href="{url}#{figure_anchor(key)}">{key}</a>'

    def reference(m: re.Match[str]) -> str:
        return re.sub(FIG_NUMBER, number, m.group(0))

    return map_text(fragment, FIG_REFERENCE, reference, skip=NO_LINKS | {"figcaption"})


def on_page_content(html_text: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Number and caption the page's figures; link its references to figures."""
    if not _numbers:
        number_figures(files, config["nav"])
    missing: list[str] = []
    html_text = link_figure_references(caption_figures(html_text, page), page, missing)
    for key in dict.fromkeys(missing):
        log.warning(f"{page.file.src_uri}: Figure {key} is referenced, but no chapter shows it")
    return html_text


def on_post_page(output: str, page: Page, config: MkDocsConfig) -> str:
    """Put every generated figure that the page shows as an image into the page itself, with
    its phone layout and the rule that swaps them in the page's head (after the build, when the
    figures are still being drawn)."""
    if not FIGURE_IMG.search(output):
        return output
    output = output.replace("</head>", PHONE_RULES + "</head>", 1)
    if _missing:
        _waiting.append(page.file.abs_dest_path)
        return output
    return inline_figures(output)


def inline_figures(output: str) -> str:
    """``output`` with every figure image replaced by its SVG, and :data:`PHONE_RULES` by the rules
    that swap in the phone layouts it has (or by nothing)."""
    rules: list[str] = []

    def inline(match: re.Match[str]) -> str:
        name = match.group("name")
        svg = _svgs.get(name)
        if svg is None:
            return match.group(0)
        phone = _phone_svgs.get(name)
        if phone is not None:
            rules.append(phone_rule(name, svg))
        return inline_svg(name, svg, match["alt"], phone)

    output = FIGURE_IMG.sub(inline, output)
    style = ('<style id="attn-phone-figures">' + "\n".join(dict.fromkeys(rules)) + "</style>"
             if rules else "")
    return output.replace(PHONE_RULES, style, 1)


def child(args: list[str]) -> None:
    """A drawing child's life (``MODULE=FOLDER`` arguments, see :func:`on_files`): draw, then
    end at once. Every file is written and closed by then; the interpreter's teardown of torch
    and matplotlib (0.7 s) would only delay the build, which waits for the child to end. A
    figure that fails raises, and the traceback ends the child with status 1."""
    render_all([(module, Path(folder)) for module, _, folder in (arg.partition("=") for arg in args)])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":  # a child process started by on_files
    child(sys.argv[1:])
