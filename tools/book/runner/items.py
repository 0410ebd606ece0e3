"""The runner's pytest items and collectors: one item per Python fence of a page, per code cell of
a notebook, and per problem found on a page; the page and notebook files that collect them.

Under pytest-xdist (``--dist loadgroup``) all items of a page form one group, ``page:docs/x.md``,
run by one process: a chain reuses its namespace, and ``--update-outputs`` rewrites a file from
one process.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from ..pages import Fence, parse_page
from ..scheduling import PAGE_MARKER
from .compare import first_difference, unified_diff
from .execution import ChainBroken, CodeUnit, Result, UnitRaised, format_exception, register_source
from .notebooks import Cell, read_cells
from .runtime import UPDATE_HINT, runtime_of

MARKER = PAGE_MARKER  # every item of a page carries it: `pytest -m page` selects the page tests


class OutputMismatch(Exception):
    """What a fence or cell printed disagrees with what its page shows."""


class PageProblem(Exception):
    """A page breaks a rule of the runner (an uncollected fence, an orphan output block, ...)."""


def group_item(item: pytest.Item, page: pytest.File) -> None:
    """Mark ``item`` as a page test (``-m page``); book.scheduling puts the page's items in one
    xdist group."""
    item.add_marker(MARKER)


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
        runtime = runtime_of(self.config)
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
        hint = UPDATE_HINT.format(path=runtime_of(self.config).relative(self.path))
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
            runtime = runtime_of(self.config)
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
        path = runtime_of(self.config).relative(self.path)
        return f"{path}:{block.line}" if block else "(no output block)"

    def shown_line(self, line: int) -> str:
        block = self.fence.output
        if block is None:
            return ""
        path = runtime_of(self.config).relative(self.path)
        return f"{path}:{block.start + 1 + line} (line {line} of the output block)"

    @property
    def missing_text(self) -> str:
        return "no ```{.text .output} block follows it"

    @property
    def stale_text(self) -> str:
        return f"the output block at {self.shown_where} follows it"

    def record_update(self, result: Result) -> None:
        runtime_of(self.config).record(self.path, self.original).fences[self.fence] = result.text


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
        runtime_of(self.config).record(self.path, self.original).cells[self.cell.number] = result

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
        runtime = runtime_of(self.config)
        text = self.path.read_bytes().decode("utf-8")
        page = parse_page(text, MarkdownIt("commonmark"))
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
        runtime = runtime_of(self.config)
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
