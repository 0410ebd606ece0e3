"""Run chains of code units (page fences, notebook cells) in linear time, deterministically.

A *chain* is a ```` ```python ```` fence and the ```` ```{.python continuation} ```` fences
after it, or all code cells of a notebook. Its units share one namespace: a fresh ``__main__``
module.

The engine keeps the namespace of the chain it ran last. When unit ``k`` of a chain is asked for
and unit ``k - 1`` of the same chain was the last one to run, successfully, unit ``k`` runs in
that namespace: a chain of N units costs N executions. Otherwise (the unit is run alone, the
units before it were deselected, or tests run in another order) the engine replays units
``0 .. k - 1`` into a fresh namespace first, discarding what they print. Once a unit raises,
the rest of its chain is not run in this session: each reports the unit that broke the chain.

Every chain starts from the same state: one CPU thread for torch, torch's and numpy's default
print options, float32 as torch's default dtype, gradients enabled, matplotlib figures closed
(the backend is Agg, set by the plugin), and an empty temporary working directory. The random
number generators are *not* seeded here: pages seed visibly.
"""

from __future__ import annotations

import ast
import contextlib
import io
import linecache
import os
import shutil
import sys
import tempfile
import traceback
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy

_NUMPY_PRINT_DEFAULTS = numpy.get_printoptions()


@dataclass(frozen=True)
class CodeUnit:
    """One fence or cell: its source and where its first line sits in the file shown to readers.

    ``filename`` is what tracebacks name; ``first_line`` is the 1-based line of the source's first
    line in that file. ``label`` (``docs/x.md:42``) names the unit in messages. A notebook cell
    has ``display_last`` set: the value of its last expression is shown, as Jupyter does.
    """

    source: str
    filename: str
    first_line: int
    label: str
    display_last: bool = False


@dataclass(frozen=True)
class Result:
    """What a unit printed: its standard output, then the value of a displayed last expression."""

    stdout: str
    display: str | None

    @property
    def text(self) -> str:
        """Everything a reader would see under the code, in order."""
        return self.stdout if self.display is None else self.stdout + self.display + "\n"


class UnitRaised(Exception):
    """A unit, or an earlier unit of its chain that had to be replayed, raised an exception."""

    def __init__(self, unit: CodeUnit, error: BaseException, replayed: bool) -> None:
        super().__init__(unit.label)
        self.unit = unit
        self.error = error
        self.replayed = replayed


class ChainBroken(Exception):
    """An earlier unit of the chain raised in this session, so this unit cannot run."""

    def __init__(self, broken_at: CodeUnit) -> None:
        super().__init__(broken_at.label)
        self.broken_at = broken_at


def reset_state() -> None:
    """Put torch, numpy and matplotlib in the state every chain starts from."""
    import torch

    torch.set_num_threads(1)
    torch.set_printoptions(profile="default")
    torch.set_default_dtype(torch.float32)
    torch.set_grad_enabled(True)
    numpy.set_printoptions(**_NUMPY_PRINT_DEFAULTS)
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:
        pyplot.close("all")


@dataclass(frozen=True)
class _SavedState:
    """What :func:`reset_state` changes, as it was before the first chain ran."""

    threads: int
    dtype: object
    grad: bool
    numpy_print: dict

    @classmethod
    def now(cls) -> _SavedState:
        import torch

        return cls(
            torch.get_num_threads(),
            torch.get_default_dtype(),
            torch.is_grad_enabled(),
            numpy.get_printoptions(),
        )

    def restore(self) -> None:
        """Give the rest of the test session back the state it had (print options: default)."""
        import torch

        torch.set_num_threads(self.threads)
        torch.set_default_dtype(self.dtype)
        torch.set_grad_enabled(self.grad)
        torch.set_printoptions(profile="default")
        numpy.set_printoptions(**self.numpy_print)


@contextlib.contextmanager
def _as_main_program(module: types.ModuleType, workdir: Path) -> Iterator[None]:
    """Run as a script would: ``module`` is ``__main__`` and ``workdir`` the working directory."""
    saved_main, saved_cwd = sys.modules.get("__main__"), os.getcwd()
    sys.modules["__main__"] = module
    os.chdir(workdir)
    try:
        yield
    finally:
        os.chdir(saved_cwd)
        if saved_main is not None:
            sys.modules["__main__"] = saved_main


def _display(value: object) -> str:
    """The text/plain form Jupyter shows for a cell's value."""
    from IPython.lib.pretty import pretty

    return pretty(value)


def execute(unit: CodeUnit, module: types.ModuleType, workdir: Path) -> Result:
    """Execute ``unit`` in ``module``'s namespace; return what it printed.

    Line numbers in tracebacks are those of the file readers see: the source is compiled with
    ``first_line - 1`` blank lines in front of it.
    """
    padded = "\n" * (unit.first_line - 1) + unit.source
    try:
        tree = ast.parse(padded, filename=unit.filename)
        last = None
        if unit.display_last and tree.body and isinstance(tree.body[-1], ast.Expr):
            if not unit.source.rstrip().endswith(";"):
                last = ast.Expression(tree.body.pop().value)
        code = compile(tree, unit.filename, "exec", dont_inherit=True)
    except SyntaxError as error:
        _show_compiled_line(error, padded)
        raise
    stdout = io.StringIO()
    value = None
    with _as_main_program(module, workdir), contextlib.redirect_stdout(stdout):
        exec(code, module.__dict__)
        if last is not None:
            value = eval(compile(last, unit.filename, "eval", dont_inherit=True), module.__dict__)
    return Result(stdout.getvalue(), None if value is None else _display(value))


def _show_compiled_line(error: SyntaxError, padded: str) -> None:
    """Make a SyntaxError show the line as compiled (dedented), which its offset refers to.

    Python fills ``error.text`` from the file on disk when it can, and a fence inside an
    admonition is indented there, so the ``^`` marker would point at the wrong column.
    """
    lines = padded.splitlines()
    if error.lineno is not None and 0 < error.lineno <= len(lines):
        error.text = lines[error.lineno - 1] + "\n"


class ChainEngine:
    """Runs units of chains, reusing the namespace of the unit that ran just before."""

    def __init__(self) -> None:
        self._root: Path | None = None
        self._chain: object = None
        self._module: types.ModuleType | None = None
        self._workdir: Path | None = None
        self._last_ok = -1
        self._broken: dict[object, tuple[int, CodeUnit]] = {}
        self._saved: _SavedState | None = None
        self.executions = 0
        self.replays = 0

    def _fresh(self, chain: object) -> None:
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix="book-pages-"))
        if self._saved is None:
            self._saved = _SavedState.now()
        reset_state()
        self._chain, self._last_ok = chain, -1
        self._module = types.ModuleType("__main__")
        self._workdir = Path(tempfile.mkdtemp(dir=self._root))

    def _execute(self, unit: CodeUnit) -> Result:
        if self._module is None or self._workdir is None:
            raise RuntimeError(f"no namespace is open to run {unit.label} in")
        self.executions += 1
        return execute(unit, self._module, self._workdir)

    def run(self, chain: object, units: Sequence[CodeUnit], index: int) -> Result:
        """Run ``units[index]`` of the chain identified by ``chain`` and return its output.

        Raises :class:`ChainBroken` if an earlier unit of the chain raised in this session and
        :class:`UnitRaised` if this unit, or an earlier unit replayed for it, raises.
        """
        broken = self._broken.get(chain)
        if broken is not None and broken[0] < index:
            raise ChainBroken(broken[1])
        if self._chain != chain or self._last_ok != index - 1:
            self._fresh(chain)
            for earlier in range(index):
                self.replays += 1
                self._run_or_break(chain, units, earlier, replayed=True)
        result = self._run_or_break(chain, units, index, replayed=False)
        self._last_ok = index
        return result

    def _run_or_break(
        self, chain: object, units: Sequence[CodeUnit], index: int, replayed: bool
    ) -> Result:
        try:
            return self._execute(units[index])
        except (Exception, SystemExit) as error:
            self._broken[chain] = (index, units[index])
            self._chain = None
            raise UnitRaised(units[index], error, replayed) from error

    def close(self) -> None:
        """Delete the working directories, drop the namespace, restore threads and options."""
        self._chain = self._module = None
        if self._saved is not None:
            self._saved.restore()
            self._saved = None
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None


def register_source(filename: str, source: str) -> None:
    """Make ``source`` the text tracebacks show for ``filename`` (a notebook cell's pseudo-file)."""
    lines = [line if line.endswith("\n") else line + "\n" for line in source.splitlines(True)]
    linecache.cache[filename] = (len(source), None, lines, filename)


def format_exception(
    error: BaseException,
    own_files: Callable[[str], str | None],
    column_shift: Callable[[str, int], int | None],
) -> str:
    """A traceback of ``error`` that starts at the first frame in a page or notebook.

    ``own_files(filename)`` returns the name to show for a page's or notebook's file (a path
    relative to the repository) or ``None`` for other files. ``column_shift(filename, lineno)``
    says how far a dedented fence line sits to the right on the page, so that Python's ``^^^``
    markers point at the right columns; ``None`` drops the markers.
    """
    report = traceback.TracebackException.from_exception(error)
    for part in _chained(report):
        frames = list(part.stack)
        first = next((i for i, f in enumerate(frames) if own_files(f.filename)), len(frames))
        kept = frames[first:]
        for frame in kept:
            shown = own_files(frame.filename)
            if shown is None:
                continue
            _shift_markers(frame, column_shift(frame.filename, frame.lineno or 0))
            frame.filename = shown
        part.stack = traceback.StackSummary.from_list(kept)
        syntax_file = getattr(part, "filename", None)
        if syntax_file and own_files(syntax_file):
            part.filename = own_files(syntax_file)
    return "".join(report.format())


def _shift_markers(frame: traceback.FrameSummary, shift: int | None) -> None:
    """Move the ``^^^`` markers of a frame ``shift`` columns right; drop them if unknown.

    Column positions exist from Python 3.11; on older versions there is nothing to move.
    """
    if getattr(frame, "colno", None) is None or getattr(frame, "end_colno", None) is None:
        return
    if shift is None:
        frame.colno = frame.end_colno = None
    else:
        frame.colno += shift
        frame.end_colno += shift


def _chained(report: traceback.TracebackException) -> Iterator[traceback.TracebackException]:
    seen = set()
    todo = [report]
    while todo:
        part = todo.pop()
        if id(part) in seen:
            continue
        seen.add(id(part))
        yield part
        todo += [p for p in (part.__cause__, part.__context__) if p is not None]
