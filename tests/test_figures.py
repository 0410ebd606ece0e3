"""The book's figures: every function in docs/figures/chNN.py draws a figure with Axes, which the
build hook (docs/hooks/figures.py) puts into the built site as reproducible SVG."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from matplotlib.figure import Figure
from mkdocs.exceptions import PluginError

REPO = Path(__file__).resolve().parents[1]
FIGURES_DIR = REPO / "docs" / "figures"


def load_hook():
    """Import docs/hooks/figures.py as a module (it is not part of a package)."""
    spec = importlib.util.spec_from_file_location(
        "book_figures_hook", REPO / "docs/hooks/figures.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hook = load_hook()
FIGURES = hook.load_figures(FIGURES_DIR)


def test_every_chapter_script_is_found() -> None:
    scripts = hook.figure_scripts(FIGURES_DIR)
    assert scripts, "no figure script docs/figures/chNN.py"
    assert {s.name for s in scripts} == {p.name for p in FIGURES_DIR.glob("ch*.py")}


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_figure_is_in_the_site(name: str, built_site: Path) -> None:
    # The build drew it: the hook calls each function and fails the build unless it gets a
    # matplotlib Figure, which it writes as figures/<name>.svg.
    built = built_site / "figures" / f"{name}.svg"
    assert built.is_file(), f"the build did not produce figures/{name}.svg"
    svg = built.read_bytes()
    assert svg.lstrip().startswith(b"<?xml") and b"<svg" in svg
    assert b'<g id="axes_1">' in svg, f"figures/{name}.svg has no Axes: nothing is drawn"


def test_a_figure_redrawn_gives_the_same_bytes_as_the_site(built_site: Path) -> None:
    # The quickest figure to draw stands for all: the hook's SVG has no date and fixed element
    # ids, so the same code gives the same file (every figure is drawn by the build already).
    name = "ch02-query2-weights"
    fig = FIGURES[name]()
    assert isinstance(fig, Figure) and fig.axes, f"{name} returned {fig!r}"
    assert hook.figure_svg(fig) == (built_site / "figures" / f"{name}.svg").read_bytes()


def write_script(folder: Path, name: str, body: str) -> None:
    (folder / name).write_text(
        "import matplotlib.pyplot as plt\n\n"
        "def good():\n    fig, ax = plt.subplots()\n    return fig\n\n" + body,
        encoding="utf-8",
    )


def test_hook_rejects_a_script_without_figures(tmp_path: Path) -> None:
    write_script(tmp_path, "ch01.py", "")
    with pytest.raises(PluginError, match="expected a dict FIGURES"):
        hook.load_figures(tmp_path)


def test_hook_rejects_a_name_used_twice(tmp_path: Path) -> None:
    write_script(tmp_path, "ch01.py", 'FIGURES = {"ch01-a": good}\n')
    write_script(tmp_path, "ch02.py", 'FIGURES = {"ch01-a": good}\n')
    with pytest.raises(PluginError, match="'ch01-a' is already used"):
        hook.load_figures(tmp_path)


def test_hook_rejects_a_function_that_returns_no_figure(tmp_path: Path) -> None:
    write_script(tmp_path, "ch01.py", 'FIGURES = {"ch01-a": good, "ch01-b": lambda: None}\n')
    figures = hook.load_figures(tmp_path)
    assert hook.render_svg("ch01-a", figures["ch01-a"]).lstrip().startswith(b"<?xml")
    with pytest.raises(PluginError, match="'ch01-b': expected a matplotlib Figure, got NoneType"):
        hook.render_svg("ch01-b", figures["ch01-b"])
