"""MkDocs hook: render the book's figures from code on every build.

Each module of :mod:`book.figures` (``chNN``, and ``appendix`` for the appendix's measurements)
defines ``FIGURES = {"name": make_fn}``, where ``make_fn()`` returns a
``matplotlib.figure.Figure`` drawn from the ``attention`` package. On every build this
hook imports each module, renders each figure to SVG and adds it to the build as the generated
file ``figures/<name>.svg``; a page links it as ``![alt text](../figures/<name>.svg)``, and
``mkdocs build --strict`` checks that link like any other. Nothing is written into docs/.

Every figure is drawn in the book's style (``attention.plotting.BOOK_STYLE``): text stays SVG
text, the background is transparent, and the style's placeholder colours become ``currentColor``
(ink) and the page's background colour (paper). The SVG output is reproducible: no date in the
metadata and a fixed salt for element ids, so the same code gives the same bytes.

After the search index has read a page (so no tick label lands in it), ``on_post_page`` puts
each figure's SVG into the page itself, where the theme's colours reach it: in the dark theme the
ink turns light. The SVG is drawn at its natural size, never wider than the text, but never so
small that its smallest text falls under ``MIN_TEXT_PX`` CSS pixels: on a phone a wide figure
scrolls sideways in its own box instead (docs/stylesheets/figures.css).
"""

from __future__ import annotations

import importlib
import io
import math
import pkgutil
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import matplotlib

matplotlib.use("Agg")  # render without a display, before pyplot is imported anywhere

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from mkdocs.config.defaults import MkDocsConfig  # noqa: E402
from mkdocs.exceptions import PluginError  # noqa: E402
from mkdocs.structure.files import File, Files  # noqa: E402
from mkdocs.structure.pages import Page  # noqa: E402

from attention.plotting import BOOK_STYLE, INK, ON_DARK_CELL, ON_LIGHT_CELL, PAPER  # noqa: E402

from .. import figures  # noqa: E402
from ..constants import MIN_TEXT_PX  # noqa: E402  (the smallest text a figure may show, CSS px)

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
    r'<img alt="(?P<alt>[^"]*)" src="(?P<src>(?:\.\./)*figures/(?P<name>[a-z0-9-]+)\.svg)" ?/?>'
)
_svgs: dict[str, bytes] = {}  # this build's figures, by name
_child: tuple[subprocess.Popen, Path, list[str]] | None = None  # drawing them: on_files, on_env

_command = "build"


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


def load_figures(package: ModuleType = figures) -> dict[str, Callable[[], Figure]]:
    """Import every figure module of ``package`` and return their figure functions by name.

    Raises:
        PluginError: if a module has no ``FIGURES`` dict, a name is not a lowercase slug
            (``ch02-weights-heatmap``), a value is not callable, or two modules use one name.
    """
    found: dict[str, Callable[[], Figure]] = {}
    for module in figure_modules(package):
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


def figure_svg(fig: Figure) -> bytes:
    """Return ``fig`` as reproducible SVG bytes, its placeholder colours swapped, and close it."""
    with matplotlib.rc_context(SVG_STYLE):
        buffer = io.BytesIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    plt.close(fig)
    svg = buffer.getvalue().decode("utf-8")
    for placeholder, colour in COLOURS.items():
        svg = svg.replace(placeholder, colour)
    return svg.encode("utf-8")


def render_svg(name: str, make: Callable[[], Figure]) -> bytes:
    """Call ``make()`` in the book's style and return its figure as SVG bytes.

    Raises:
        PluginError: if ``make()`` returns something other than a matplotlib Figure.
    """
    with matplotlib.rc_context(SVG_STYLE):
        fig = make()
    if not isinstance(fig, Figure):
        raise PluginError(
            f"figure {name!r}: expected a matplotlib Figure, got {type(fig).__name__}"
        )
    return figure_svg(fig)


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


def inline_svg(name: str, svg: bytes, alt: str) -> str:
    """The markup that shows figure ``name`` in a page: its SVG, with ids made unique to it,
    named by ``alt`` for screen readers, sized so that its smallest text stays legible."""
    text = svg.decode("utf-8")
    text = text[text.index("<svg") :]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.DOTALL)
    text = re.sub(r"<defs>\s*<style[^>]*>.*?</style>\s*</defs>\s*", "", text, flags=re.DOTALL)
    text = re.sub(r'(\bid="|url\(#|href="#)', rf"\g<1>{name}-", text)
    width, smallest = text_sizes(text)
    natural = width * 4 / 3  # points to CSS pixels
    legible = width * MIN_TEXT_PX / smallest  # narrower, the smallest text is under MIN_TEXT_PX
    text = re.sub(
        r'<svg [^>]*?(viewBox="[^"]*")[^>]*>',
        lambda m: (
            f'<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" '
            f'{m.group(1)} role="img" aria-label="{alt}" '
            f'style="max-width: {natural:.0f}px; min-width: {math.ceil(min(legible, natural))}px">'
        ),
        text,
        count=1,
    )
    return f'<span class="attn-figure" data-figure="{name}">{text}</span>'


def on_startup(command: str, dirty: bool) -> None:
    """Remember whether this is `mkdocs serve`, which rebuilds in one long-lived process."""
    global _command
    _command = command


def on_pre_build(config: MkDocsConfig) -> None:
    """Under `mkdocs serve`, forget the imported package so figures follow edits to src/."""
    if _command == "serve":
        for module in [m for m in sys.modules if m == "attention" or m.startswith("attention.")]:
            del sys.modules[module]


def render_all(out_dir: Path) -> None:
    """Render every figure into ``out_dir/<name>.svg``."""
    for name, make in load_figures().items():
        (out_dir / f"{name}.svg").write_bytes(render_svg(name, make))


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Start rendering every figure, and add each to the build as ``figures/<name>.svg``.

    The figures are drawn in a child process (``python -P -m book.hooks.figures OUT_DIR``) while
    this one renders the pages, on another core: drawing them takes about half of the build's
    time. The modules are imported here too, so that a bad name fails at once, and the
    child's SVG files are read in ``on_env``, before any is copied or put into a page.
    """
    global _child
    names = list(load_figures())
    out_dir = Path(tempfile.mkdtemp(prefix="book-figures-"))
    log = (out_dir / "stderr.txt").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-P", "-m", "book.hooks.figures", str(out_dir)],
        stdout=log, stderr=subprocess.STDOUT,
    )
    _child = (process, out_dir, names)
    for name in names:
        uri = f"figures/{name}.svg"
        if files.get_file_from_path(uri) is not None:
            raise PluginError(f"docs/{uri} exists: figures are made by code, delete the file")
        files.append(File.generated(config, uri, abs_src_path=str(out_dir / f"{name}.svg")))
    return files


def on_env(env: object, config: MkDocsConfig, files: Files) -> object:
    """Wait for the figures, and keep each one's SVG for ``on_post_page``.

    Raises:
        PluginError: with the child's output, if drawing a figure failed.
    """
    process, out_dir, names = _child
    if process.wait() != 0:
        output = (out_dir / "stderr.txt").read_text(errors="replace")
        raise PluginError(f"drawing the figures failed:\n{output}")
    _svgs.clear()
    for name in names:
        _svgs[name] = (out_dir / f"{name}.svg").read_bytes()
    return env


def on_post_build(config: MkDocsConfig) -> None:
    """Remove the child's folder of SVG files, now copied into the site."""
    if _child is not None:
        shutil.rmtree(_child[1], ignore_errors=True)


def on_post_page(output: str, page: Page, config: MkDocsConfig) -> str:
    """Put every generated figure that the page shows as an image into the page itself."""

    def inline(match: re.Match[str]) -> str:
        svg = _svgs.get(match.group("name"))
        return match.group(0) if svg is None else inline_svg(match["name"], svg, match["alt"])

    return FIGURE_IMG.sub(inline, output)


if __name__ == "__main__":  # the child process started by on_files
    render_all(Path(sys.argv[1]))
