"""The runner's session state: the chain engine, the pages' names, and the pending rewrites of
output blocks and notebook outputs (written once, at the end of the session)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ..pages import Fence, rewrite_outputs
from .execution import ChainEngine, Result
from .notebooks import rewrite_cells

PAGE_SUFFIXES = (".md", ".ipynb")
UPDATE_HINT = "Rewrite output blocks from the real output with: pytest {path} --update-outputs"
COUNTS_KEY = "book_pages_counts"


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


def runtime_of(config: pytest.Config) -> Runtime:
    """The session's runtime, made by ``pytest_configure``."""
    return config.stash[RUNTIME]
