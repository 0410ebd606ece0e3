"""MkDocs hook: render the book's figures from code on every build.

Each script ``docs/figures/chNN.py`` defines ``FIGURES = {"name": make_fn}``, where ``make_fn()``
returns a ``matplotlib.figure.Figure`` drawn from the ``attention`` package. On every build this
hook imports each script, renders each figure to SVG and adds it to the build as the generated
file ``figures/<name>.svg``; a page links it as ``![alt text](../figures/<name>.svg)``, and
``mkdocs build --strict`` checks that link like any other. Nothing is written into docs/.

The SVG output is reproducible: no date in the metadata and a fixed salt for element ids, so the
same code gives the same bytes.
"""

from __future__ import annotations

import importlib.util
import io
import re
import sys
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # render without a display, before pyplot is imported anywhere

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from mkdocs.config.defaults import MkDocsConfig  # noqa: E402
from mkdocs.exceptions import PluginError  # noqa: E402
from mkdocs.structure.files import File, Files  # noqa: E402

FIGURE_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")
SVG_STYLE = {"svg.hashsalt": "attention-book", "svg.fonttype": "path"}

_command = "build"


def figure_scripts(figures_dir: Path) -> list[Path]:
    """Return the figure scripts ``chNN.py`` in ``figures_dir``, sorted by name."""
    return sorted(figures_dir.glob("ch*.py"))


def load_figures(figures_dir: Path) -> dict[str, Callable[[], Figure]]:
    """Import every figure script and return all their figure functions by figure name.

    Raises:
        PluginError: if a script has no ``FIGURES`` dict, a name is not a lowercase slug
            (``ch02-weights-heatmap``), a value is not callable, or two scripts use one name.
    """
    found: dict[str, Callable[[], Figure]] = {}
    for script in figure_scripts(figures_dir):
        # A fresh module on every call, so that `mkdocs serve` picks up an edited script.
        spec = importlib.util.spec_from_file_location(f"_book_figures_{script.stem}", script)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        figures = getattr(module, "FIGURES", None)
        if not isinstance(figures, dict):
            found_type = type(figures).__name__
            raise PluginError(
                f"{script}: expected a dict FIGURES = {{name: function}}, got {found_type}"
            )
        for name, make in figures.items():
            if not isinstance(name, str) or not FIGURE_NAME.fullmatch(name):
                raise PluginError(
                    f"{script}: expected a figure name like 'ch02-weights-heatmap', got {name!r}"
                )
            if not callable(make):
                raise PluginError(f"{script}: expected a function for {name!r}, got {make!r}")
            if name in found:
                raise PluginError(
                    f"{script}: figure name {name!r} is already used by another script"
                )
            found[name] = make
    return found


def figure_svg(fig: Figure) -> bytes:
    """Return ``fig`` as reproducible SVG bytes and close it."""
    with matplotlib.rc_context(SVG_STYLE):
        buffer = io.BytesIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    plt.close(fig)
    return buffer.getvalue()


def render_svg(name: str, make: Callable[[], Figure]) -> bytes:
    """Call ``make()`` and return its figure as SVG bytes.

    Raises:
        PluginError: if ``make()`` returns something other than a matplotlib Figure.
    """
    fig = make()
    if not isinstance(fig, Figure):
        raise PluginError(
            f"figure {name!r}: expected a matplotlib Figure, got {type(fig).__name__}"
        )
    return figure_svg(fig)


def on_startup(command: str, dirty: bool) -> None:
    """Remember whether this is `mkdocs serve`, which rebuilds in one long-lived process."""
    global _command
    _command = command


def on_pre_build(config: MkDocsConfig) -> None:
    """Under `mkdocs serve`, forget the imported package so figures follow edits to src/."""
    if _command == "serve":
        for module in [m for m in sys.modules if m == "attention" or m.startswith("attention.")]:
            del sys.modules[module]


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Render every figure and add it to the build as ``figures/<name>.svg``."""
    figures_dir = Path(config.docs_dir) / "figures"
    for name, make in load_figures(figures_dir).items():
        uri = f"figures/{name}.svg"
        if files.get_file_from_path(uri) is not None:
            raise PluginError(f"docs/{uri} exists: figures are made by code, delete the file")
        files.append(File.generated(config, uri, content=render_svg(name, make)))
    return files
