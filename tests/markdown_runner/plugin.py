"""pytest hooks, collectors and items of the book's output-checking runner.

Loaded by the repository's root ``conftest.py``. Every ``.md`` page and ``.ipynb`` notebook under
the directories of the ``book_pages`` ini option (default ``docs``) is collected: one item per
Python fence (``docs/x.md::line-42``) or code cell (``docs/x.ipynb::cell-3``), plus one failing
item per problem found on a page (``docs/x.md::problem-line-7``).

Under pytest-xdist (``--dist loadgroup``) all items of a page form one group, ``page:docs/x.md``,
run by one process: a chain reuses its namespace, and ``--update-outputs`` rewrites a file from one
process. xdist appends the group to the ids it reports (``docs/x.md::line-42@page:docs/x.md``);
such an id, copied from a FAILED line, is accepted on the command line. Each worker sends its
execution counts to the controller, which prints the run's total.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .compare import first_difference, unified_diff
from .execution import (
    ChainBroken,
    ChainEngine,
    CodeUnit,
    Result,
    UnitRaised,
    format_exception,
    register_source,
)
from .notebooks import Cell, read_cells, rewrite_cells
from .pages import Fence, parse_page, rewrite_outputs
from .upstream import MARKER, markdown_parser, stock_collection_requested

PAGE_SUFFIXES = (".md", ".ipynb")
UPDATE_HINT = "Rewrite output blocks from the real output with: pytest {path} --update-outputs"
GROUP_PREFIX = "page:"
# What xdist appends to a page item's id under --dist loadgroup: "@page:" and the page's path.
_GROUP_SUFFIX = re.compile(r"@" + re.escape(GROUP_PREFIX) + r"[^@]*$")
COUNTS_KEY = "book_pages_counts"


class OutputMismatch(Exception):
    """What a fence or cell printed disagrees with what its page shows."""


class PageProblem(Exception):
    """A page breaks a rule of the runner (an uncollected fence, an orphan output block, ...)."""


@dataclass
class _PendingFile:
    original: str
    fences: dict[Fence, str] = field(default_factory=dict)
    cells: dict[int, Result] = field(default_factory=dict)


class Runtime:
    """Session state: the chain engine, the pages' names and column shifts, pending rewrites."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.update = bool(config.getoption("update_outputs"))
        base = config.inipath.parent if config.inipath else config.rootpath
        self.page_dirs = [(base / d).resolve() for d in config.getini("book_pages")]
        self.engine = ChainEngine()
        self.shown_names: dict[str, str] = {}
        self.column_shifts: dict[str, dict[int, int]] = {}
        self.pending: dict[Path, _PendingFile] = {}
        self.changes: list[str] = []
        # Counts reported by xdist workers (the controller executes nothing itself).
        self.worker_executions = 0
        self.worker_replays = 0

    def is_page(self, path: Path) -> bool:
        """Whether ``path`` is a page or notebook the runner executes."""
        if path.suffix not in PAGE_SUFFIXES or ".ipynb_checkpoints" in path.parts:
            return False
        resolved = path.resolve()
        return any(resolved.is_relative_to(d) for d in self.page_dirs)

    def relative(self, path: Path) -> str:
        """``path`` as shown in messages: relative to the root directory where possible."""
        try:
            return path.resolve().relative_to(self.config.rootpath.resolve()).as_posix()
        except ValueError:
            return str(path)

    def own_file(self, filename: str) -> str | None:
        """The name to show for a page or notebook cell file, or ``None`` for other files."""
        return self.shown_names.get(filename)

    def column_shift(self, filename: str, lineno: int) -> int | None:
        """How far line ``lineno`` (1-based) of ``filename`` was dedented before it ran."""
        shifts = self.column_shifts.get(filename)
        return None if shifts is None else shifts.get(lineno - 1)

    def record(self, path: Path, original: str) -> _PendingFile:
        """The pending rewrite of ``path``, read as ``original`` at collection."""
        return self.pending.setdefault(path, _PendingFile(original))

    def apply_updates(self) -> None:
        """Write the rewritten output blocks and notebook outputs; note each change."""
        for path, pending in sorted(self.pending.items()):
            shown = self.relative(path)
            if path.read_bytes().decode("utf-8") != pending.original:
                self.changes.append(f"{shown}: changed on disk during the run; not rewritten")
                continue
            if path.suffix == ".ipynb":
                text = rewrite_cells(pending.original, pending.cells)
                changes = [
                    f"{shown}, cell {n}: rewrote the stored outputs" for n in sorted(pending.cells)
                ]
            else:
                text, edits = rewrite_outputs(pending.original, pending.fences)
                changes = [f"{shown}:{line}: {change}" for line, change in edits]
            if text != pending.original:
                path.write_bytes(text.encode("utf-8"))
                self.changes += changes


RUNTIME = pytest.StashKey[Runtime]()


def _runtime(config: pytest.Config) -> Runtime:
    return config.stash[RUNTIME]


def group_item(item: pytest.Item, page: pytest.File) -> None:
    """Put ``item`` in its page's xdist group and mark it as a page test (``-m markdown-docs``)."""
    item.add_marker(MARKER)
    if item.config.pluginmanager.hasplugin("xdist"):
        item.add_marker(pytest.mark.xdist_group(GROUP_PREFIX + page.nodeid))


def without_group(arg: str) -> str:
    """A test id as xdist reports it under ``--dist loadgroup``, without the page's group."""
    return _GROUP_SUFFIX.sub("", arg) if "::" in arg else arg


class _CheckedItem(pytest.Item):
    """Runs one unit of a chain through the engine and checks what it printed.

    Subclasses say where the unit and its shown output are, and how to record a rewrite.
    """

    kind = "fence"

    def __init__(
        self,
        *,
        units: list[CodeUnit],
        index: int,
        chain: tuple[str, int],
        original: str,
        **kwargs: object,
    ) -> None:
        super().__init__(**kwargs)
        self.units, self.index, self.chain, self.original = units, index, chain, original

    @property
    def where(self) -> str:
        """``docs/x.md:42`` or ``docs/x.ipynb, cell 3``."""
        return self.units[self.index].label

    @property
    def shown(self) -> str | None:
        """The output text the page shows for this unit, ``None`` if it shows none."""
        raise NotImplementedError

    @property
    def shown_where(self) -> str:
        """Where the shown output is, for messages."""
        raise NotImplementedError

    def shown_line(self, line: int) -> str:
        """Where line ``line`` (1-based) of the shown output is, for messages."""
        raise NotImplementedError

    @property
    def missing_text(self) -> str:
        """How to say that the page shows no output for this unit."""
        raise NotImplementedError

    @property
    def stale_text(self) -> str:
        """How to say that the page shows output for this unit."""
        raise NotImplementedError

    def record_update(self, result: Result) -> None:
        """Queue the rewrite of the shown output from ``result``."""
        raise NotImplementedError

    def setup(self) -> None:
        """Nothing to set up: fences take no pytest fixtures (they are programs, not tests)."""

    def runtest(self) -> None:
        """Run the unit (replaying its chain if needed) and compare its output with the page."""
        runtime = _runtime(self.config)
        result = runtime.engine.run(self.chain, self.units, self.index)
        actual = result.text
        if "grad_fn=" in actual:
            raise OutputMismatch(
                f"{self.where}: the output shows a tensor's grad_fn=, which readers should not "
                "see: print .detach() or compute under torch.no_grad()"
            )
        shown = self.shown
        printed = bool(actual.strip())
        if shown is None and not printed:
            return
        if shown is not None and printed:
            difference = first_difference(shown, actual)
            if difference is None:
                return
        if runtime.update:
            self.record_update(result)
            return
        raise OutputMismatch(self._mismatch_message(shown, actual, printed))

    def _mismatch_message(self, shown: str | None, actual: str, printed: bool) -> str:
        printed_by = f"printed by the {self.kind} at {self.where}"
        if shown is None:
            head = f"{self.where}: the {self.kind} prints output, but {self.missing_text}"
            diff = unified_diff("", actual, "(no output shown)", printed_by)
        elif not printed:
            head = f"{self.where}: the {self.kind} prints nothing, but {self.stale_text}"
            diff = unified_diff(
                shown, "", f"shown at {self.shown_where}", f"(nothing {printed_by})"
            )
        else:
            difference = first_difference(shown, actual)
            head = f"{self.where}: the printed output differs from the output shown at "
            head += self.shown_where
            if difference is not None:
                head += "\n" + difference.describe(self.shown_line(difference.line))
            diff = unified_diff(shown, actual, f"shown at {self.shown_where}", printed_by)
        hint = UPDATE_HINT.format(path=_runtime(self.config).relative(self.path))
        return f"{head}\n{diff}\n{hint}"

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style=None) -> str:
        """A failure message naming file and line, with a diff or a page-relative traceback."""
        error = excinfo.value
        if isinstance(error, OutputMismatch):
            return str(error)
        if isinstance(error, ChainBroken):
            return (
                f"{self.where}: not run, because the {self.kind} at {error.broken_at.label}, "
                "which this one continues, raised an exception (see its failure)"
            )
        if isinstance(error, UnitRaised):
            runtime = _runtime(self.config)
            trace = format_exception(error.error, runtime.own_file, runtime.column_shift)
            if error.replayed:
                head = (
                    f"{self.where}: could not run, because the earlier {self.kind} at "
                    f"{error.unit.label} raised when it was replayed to rebuild the namespace"
                )
            else:
                head = f"{self.where}: the {self.kind} raised {type(error.error).__name__}"
            return f"{head}\n{trace}"
        return str(pytest.Item.repr_failure(self, excinfo, style=style))

    def reportinfo(self) -> tuple[Path, int, str]:
        """Location shown in reports: the file, the 0-based line of the fence, its label."""
        return self.path, self.units[self.index].first_line - 2, self.where


class FenceItem(_CheckedItem):
    """A Python fence of a Markdown page."""

    def __init__(self, *, fence: Fence, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.fence = fence

    @property
    def shown(self) -> str | None:
        return None if self.fence.output is None else self.fence.output.text

    @property
    def shown_where(self) -> str:
        block = self.fence.output
        path = _runtime(self.config).relative(self.path)
        return f"{path}:{block.line}" if block else "(no output block)"

    def shown_line(self, line: int) -> str:
        block = self.fence.output
        if block is None:
            return ""
        path = _runtime(self.config).relative(self.path)
        return f"{path}:{block.start + 1 + line} (line {line} of the output block)"

    @property
    def missing_text(self) -> str:
        return "no ```{.text .output} block follows it"

    @property
    def stale_text(self) -> str:
        return f"the output block at {self.shown_where} follows it"

    def record_update(self, result: Result) -> None:
        _runtime(self.config).record(self.path, self.original).fences[self.fence] = result.text


class CellItem(_CheckedItem):
    """A code cell of a notebook."""

    kind = "cell"

    def __init__(self, *, cell: Cell, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.cell = cell

    @property
    def shown(self) -> str | None:
        return self.cell.shown

    @property
    def shown_where(self) -> str:
        return f"{self.where} (stored outputs)"

    def shown_line(self, line: int) -> str:
        return f"line {line} of the stored outputs of {self.where}"

    @property
    def missing_text(self) -> str:
        return "its stored outputs show nothing"

    @property
    def stale_text(self) -> str:
        return "its stored outputs show text"

    def record_update(self, result: Result) -> None:
        _runtime(self.config).record(self.path, self.original).cells[self.cell.number] = result

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, self.where


class ProblemItem(pytest.Item):
    """A failing item for a problem found while reading a page."""

    def __init__(self, *, where: str, message: str, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.where, self.message = where, message

    def runtest(self) -> None:
        """Fail with the problem."""
        raise PageProblem(f"{self.where}: {self.message}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style=None) -> str:
        """The problem, naming file and line."""
        return str(excinfo.value)

    def reportinfo(self) -> tuple[Path, int, str]:
        """Location shown in reports."""
        return self.path, 0, self.where


class MarkdownPage(pytest.File):
    """A Markdown page: its fences, chained, and its problems."""

    def collect(self):
        """One item per Python fence and one per problem, in page order."""
        runtime = _runtime(self.config)
        text = self.path.read_bytes().decode("utf-8")
        page = parse_page(text, markdown_parser(self.config))
        shown, filename = runtime.relative(self.path), str(self.path)
        runtime.shown_names[filename] = shown
        runtime.column_shifts[filename] = page.column_shift
        units = [
            CodeUnit(f.source, filename, f.start + 2, f"{shown}:{f.line}") for f in page.fences
        ]
        members: dict[int, list[int]] = {}
        for index, start in enumerate(page.chains):
            members.setdefault(start, []).append(index)
        items: list[tuple[int, pytest.Item]] = []
        for problem in page.problems:
            item = ProblemItem.from_parent(
                self,
                name=f"problem-line-{problem.line}",
                where=f"{shown}:{problem.line}",
                message=problem.message,
            )
            items.append((problem.line, item))
        for index, fence in enumerate(page.fences):
            chain = members[page.chains[index]]
            item = FenceItem.from_parent(
                self,
                name=f"line-{fence.line}",
                fence=fence,
                units=[units[i] for i in chain],
                index=chain.index(index),
                chain=(filename, page.chains[index]),
                original=text,
            )
            items.append((fence.line, item))
        for _, item in items:
            group_item(item, self)
        return [item for _, item in sorted(items, key=lambda pair: pair[0])]


class NotebookPage(pytest.File):
    """A notebook: its code cells form one chain."""

    def collect(self):
        """One item per code cell and one per problem, in notebook order."""
        runtime = _runtime(self.config)
        text = self.path.read_bytes().decode("utf-8")
        cells, problems = read_cells(text)
        shown = runtime.relative(self.path)
        units = []
        for cell in cells:
            filename = f"{shown} (cell {cell.number})"
            register_source(filename, cell.source)
            runtime.shown_names[filename] = filename
            runtime.column_shifts[filename] = dict.fromkeys(range(cell.source.count("\n") + 1), 0)
            units.append(CodeUnit(cell.source, filename, 1, f"{shown}, cell {cell.number}", True))
        items: list[pytest.Item] = []
        for number, message in problems:
            items.append(
                ProblemItem.from_parent(
                    self,
                    name=f"problem-cell-{number}",
                    where=f"{shown}, cell {number}",
                    message=message,
                )
            )
        for index, cell in enumerate(cells):
            items.append(
                CellItem.from_parent(
                    self,
                    name=f"cell-{cell.number}",
                    cell=cell,
                    units=units,
                    index=index,
                    chain=(str(self.path), 0),
                    original=text,
                )
            )
        for item in items:
            group_item(item, self)
        return items


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
    """Refuse the stock plugin's collection (it would run every fence twice); accept test ids
    copied from xdist's reports; set up state."""
    if stock_collection_requested(config):
        raise pytest.UsageError(
            "--markdown-docs is replaced by the book's runner (tests/markdown_runner): "
            "run plain `pytest` or `pytest docs`"
        )
    os.environ["MPLBACKEND"] = "Agg"
    if "matplotlib" in sys.modules:
        sys.modules["matplotlib"].use("Agg")
    config.addinivalue_line("markers", f"{MARKER}: a fence or cell of a book page")
    config.args[:] = [without_group(arg) for arg in config.args]
    config.stash[RUNTIME] = Runtime(config)


def pytest_report_header(config: pytest.Config) -> str:
    """Say which pages are executed and whether outputs are rewritten."""
    runtime = _runtime(config)
    dirs = ", ".join(runtime.relative(d) for d in runtime.page_dirs)
    mode = "rewritten (--update-outputs)" if runtime.update else "checked"
    return f"book pages: {dirs} (outputs {mode})"


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """Collect pages and notebooks under the ``book_pages`` directories."""
    if not _runtime(parent.config).is_page(file_path):
        return None
    page_class = NotebookPage if file_path.suffix == ".ipynb" else MarkdownPage
    return page_class.from_parent(parent, path=file_path)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Apply pending rewrites, remove the working directories; an xdist worker sends its counts."""
    runtime = _runtime(session.config)
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
        runtime = _runtime(node.config)
        runtime.worker_executions += counts[0]
        runtime.worker_replays += counts[1]


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """Count the executed fences and cells; list what ``--update-outputs`` changed."""
    runtime = _runtime(config)
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
