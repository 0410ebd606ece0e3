"""Read the code cells of a notebook with their stored outputs, and rewrite those outputs.

A notebook is one chain: its code cells share a namespace, in order. What a cell shows is its
``stdout`` stream outputs followed by the ``text/plain`` form of its ``execute_result``; that text
is checked against the cell's real output with the same rule as page output blocks. Images
(``display_data``) are kept as stored and not checked; ``stderr`` streams are not checked.

Cells are numbered from 1 over all cells of the notebook, markdown cells included, as a reader
counts them on the rendered page. Notebooks are read and written with :mod:`json`, formatted as
Jupyter formats them; importing nbformat would cost seconds (its schema validator) per run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..pages import PYTHON_FENCE_OPENER
from .execution import Result


@dataclass(frozen=True)
class Cell:
    """A code cell: its 1-based number, its source and the text its stored outputs show."""

    number: int
    source: str
    shown: str | None


def _joined(text: str | list[str]) -> str:
    """A multiline notebook field, which JSON stores as a string or a list of lines."""
    return text if isinstance(text, str) else "".join(text)


def shown_text(outputs: list[dict]) -> str | None:
    """The checked text of stored outputs, or ``None`` when they show nothing checked."""
    parts = [
        _joined(o["text"])
        for o in outputs
        if o["output_type"] == "stream" and o["name"] == "stdout"
    ]
    parts += [
        _joined(o["data"]["text/plain"]) + "\n"
        for o in outputs
        if o["output_type"] == "execute_result" and "text/plain" in o.get("data", {})
    ]
    return "".join(parts) if parts else None


def read_cells(text: str) -> tuple[list[Cell], list[tuple[int, str]]]:
    """The code cells of the notebook JSON ``text``, and problems as (cell number, message)."""
    notebook = json.loads(text)
    if notebook.get("nbformat") != 4:
        raise ValueError(
            f"expected a notebook in nbformat 4, got nbformat {notebook.get('nbformat')}"
        )
    cells, problems = [], []
    for number, cell in enumerate(notebook["cells"], start=1):
        source = _joined(cell["source"])
        if cell["cell_type"] == "code":
            cells.append(Cell(number, source, shown_text(cell.get("outputs", []))))
        elif cell["cell_type"] == "markdown":
            if any(PYTHON_FENCE_OPENER.match(line) for line in source.splitlines()):
                problems.append(
                    (
                        number,
                        "a Python fence in a markdown cell is shown but never run: make it a "
                        "code cell, or use another language for code that must not run",
                    )
                )
    return cells, problems


def _lines(text: str) -> list[str]:
    """A multiline field as Jupyter writes it: a list of lines, each keeping its newline."""
    return text.splitlines(keepends=True)


def rewrite_cells(text: str, results: dict[int, Result]) -> str:
    """The notebook JSON ``text`` with the outputs of the given cells replaced by real ones.

    ``results`` maps a cell number to what it printed. A cell's ``stdout`` streams,
    ``execute_result``, ``stderr`` streams and ``error`` outputs are replaced; its images stay.
    The JSON is written as Jupyter writes it (sorted keys, one-space indent, lines as lists), so
    a notebook saved by Jupyter changes only in the rewritten outputs.
    """
    notebook = json.loads(text)
    for number, result in results.items():
        cell = notebook["cells"][number - 1]
        outputs = []
        if result.stdout:
            outputs.append(
                {"name": "stdout", "output_type": "stream", "text": _lines(result.stdout)}
            )
        outputs += [o for o in cell["outputs"] if o["output_type"] == "display_data"]
        if result.display is not None:
            outputs.append(
                {
                    "data": {"text/plain": _lines(result.display)},
                    "execution_count": cell.get("execution_count"),
                    "metadata": {},
                    "output_type": "execute_result",
                }
            )
        cell["outputs"] = outputs
    written = json.dumps(
        notebook, indent=1, sort_keys=True, ensure_ascii=False, separators=(",", ": ")
    )
    return written + "\n"
