"""pytest hooks, collectors and items of the book's output-checking runner.

Loaded by the repository's root ``conftest.py``. Every ``.md`` page and ``.ipynb`` notebook under
the directories of the ``book_pages`` ini option (default ``docs``) is collected: one item per
Python fence (``docs/x.md::line-42``) or code cell (``docs/x.ipynb::cell-3``), plus one failing
item per problem found on a page (``docs/x.md::problem-line-7``).

Under pytest-xdist (``--dist loadgroup``) all items of a page form one group, ``page:docs/x.md``,
run by one process (book.scheduling, which this plugin loads, groups them and accepts ids printed
with their group). Each worker sends its execution counts to the controller, which prints the
run's total.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from .items import MARKER, MarkdownPage, NotebookPage
from .runtime import COUNTS_KEY, RUNTIME, Runtime, runtime_of

# The xdist groups of pages (and ids printed with them, accepted on the command line).
pytest_plugins = ["book.scheduling"]


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--update-outputs`` and the ``book_pages`` ini option."""
    group = parser.getgroup("book pages", "executed Markdown pages and notebooks")
    group.addoption(
        "--update-outputs",
        action="store_true",
        default=False,
        dest="update_outputs",
        help="rewrite output blocks (and notebook outputs) that disagree with the real output, "
        "insert missing ones, remove those of fences that print nothing",
    )
    parser.addini(
        "book_pages",
        type="args",
        default=["docs"],
        help="directories, relative to the ini file, whose .md and .ipynb files are executed",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register the page marker; set up state."""
    os.environ["MPLBACKEND"] = "Agg"
    if "matplotlib" in sys.modules:
        sys.modules["matplotlib"].use("Agg")
    config.addinivalue_line("markers", f"{MARKER}: a fence or cell of a book page")
    config.stash[RUNTIME] = Runtime(config)


def pytest_report_header(config: pytest.Config) -> str:
    """Say which pages are executed and whether outputs are rewritten."""
    runtime = runtime_of(config)
    dirs = ", ".join(runtime.relative(d) for d in runtime.page_dirs)
    mode = "rewritten (--update-outputs)" if runtime.update else "checked"
    return f"book pages: {dirs} (outputs {mode})"


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """Collect pages and notebooks under the ``book_pages`` directories."""
    if not runtime_of(parent.config).is_page(file_path):
        return None
    page_class = NotebookPage if file_path.suffix == ".ipynb" else MarkdownPage
    return page_class.from_parent(parent, path=file_path)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Apply pending rewrites, remove the working directories; an xdist worker sends its counts."""
    runtime = runtime_of(session.config)
    if runtime.update:
        runtime.apply_updates()
    runtime.engine.close()
    workeroutput = getattr(session.config, "workeroutput", None)  # set on xdist workers only
    if workeroutput is not None:
        workeroutput[COUNTS_KEY] = [runtime.engine.executions, runtime.engine.replays]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error: object) -> None:
    """On the xdist controller: add up the counts a worker sent when it finished."""
    counts = getattr(node, "workeroutput", {}).get(COUNTS_KEY)
    if counts is not None:
        runtime = runtime_of(node.config)
        runtime.worker_executions += counts[0]
        runtime.worker_replays += counts[1]


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """Count the executed fences and cells; list what ``--update-outputs`` changed."""
    runtime = runtime_of(config)
    executions = runtime.engine.executions + runtime.worker_executions
    replays = runtime.engine.replays + runtime.worker_replays
    if executions:
        terminalreporter.write_line(
            f"book pages: {executions} fences and cells executed, "
            f"{replays} of them replays of earlier fences for fences run alone"
        )
    if not runtime.update:
        return
    terminalreporter.section("updated outputs")
    for change in runtime.changes or ["nothing to update: every shown output was up to date"]:
        terminalreporter.write_line(change)
