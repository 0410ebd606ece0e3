"""MkDocs hook: the appendix pages, generated from the committed results files (book.appendix).

On every build the results files in ``docs/appendix/results/`` are loaded and validated (a
malformed one stops the build, naming the file and the field). On each appendix page the marker
``<!-- timings:run STEM -->`` becomes that run's section, ``<!-- timings:runs -->`` the table of
all runs, and every ``{{ query }}`` a number read from the results (book.appendix.facts). The
figures are drawn by the figure hook, from tools/book/figures/appendix.py.
"""

from __future__ import annotations

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

from book.appendix.facts import fill
from book.appendix.load import Run, load_runs
from book.appendix.page import fill_markers

APPENDIX = "appendix/"
_runs: dict[str, Run] = {}


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Load and validate every results file before any page is rendered."""
    global _runs
    try:
        _runs = load_runs()
    except ValueError as error:
        raise PluginError(str(error)) from error
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Fill an appendix page's markers and quoted numbers."""
    if not page.file.src_uri.startswith(APPENDIX):
        return markdown
    try:
        markdown, stem = fill_markers(markdown, _runs)
        return fill(markdown, _runs, stem)
    except ValueError as error:
        raise PluginError(f"{page.file.src_uri}: {error}") from error
