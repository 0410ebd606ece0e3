"""Code that fits its column on a desktop: no line of a code block, and no line of what the code
printed, is wider than the column the site shows it in, so no block scrolls sideways at 1280 px
and hides what the prose discusses.

The widths are measured in headless Chromium at 1280 px (wider screens scale the font with the
column): a ``pre > code`` box is 688 px wide, 16 px of padding each side, and shows 13.6 px
monospace (DejaVu Sans Mono there, 0.602 em a character), so 80 characters fit
(``book.constants.CODE_COLUMN``; tests/browser/test_any_screen.py checks it on the site). An
admonition (an exercise, its solution, a folded ``??? info``) sets its code in a smaller font: 97
characters fit at one level, 93 in a solution nested in an exercise. The check reads the
Markdown, not the site: every fence of every page (Python, its output block, ``text`` and
``bash`` alike) and every code cell of the exercise notebooks, with what it shows. Listings of
source files (``--8<--``) follow the package's own line length and are left out.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from book.constants import ADMONITION_CODE_COLUMN as BOX_COLUMN
from book.constants import CODE_COLUMN as COLUMN
from book.constants import DOCS
from book.pages import read_page, split_lines

ADMONITION = re.compile(r"(?:!!!|\?\?\?)\+?\s")
PAGES = sorted(DOCS.rglob("*.md"))
NOTEBOOKS = sorted(DOCS.rglob("*.ipynb"))


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _column(lines: list[str], opener: int) -> int:
    """The column of the fence opening at ``opener``: smaller font inside an admonition."""
    indent = _indent(lines[opener])
    for line in reversed(lines[:opener]):
        if line.strip() and _indent(line) < indent:
            return BOX_COLUMN if ADMONITION.match(line.lstrip(" ")) else COLUMN
    return COLUMN


def page_too_wide(path: Path) -> list[str]:
    """``page:line: width > column`` for each line of a code or output block too wide."""
    page = read_page(path)
    lines = [line.rstrip("\r\n") for line in split_lines(path.read_text(encoding="utf-8"))]
    spans = [(f.start, f.end) for f in page.fences]
    spans += [(o.start, o.end) for o in page.outputs] + page.other_fences
    wide = []
    for start, end in sorted(spans):
        body = lines[start + 1 : end - 1]
        if any("--8<--" in line for line in body):
            continue
        indent, column = _indent(lines[start]), _column(lines, start)
        wide += [f"{path.relative_to(DOCS)}:{start + 2 + k}: {len(line) - indent} > {column}"
                 for k, line in enumerate(body) if len(line) - indent > column]
    return wide


def notebook_too_wide(path: Path) -> list[str]:
    """``notebook cell N: width > column`` for each line of a code cell or its text output."""
    wide = []
    for number, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"], start=1):
        if cell["cell_type"] != "code":
            continue
        shown = ["".join(cell["source"])]
        for output in cell.get("outputs", []):
            plain = output.get("data", {}).get("text/plain", "")
            shown += ["".join(output.get("text", "")), "".join(plain)]
        wide += [f"{path.relative_to(DOCS)} cell {number}: {len(line)} > {COLUMN}"
                 for text in shown for line in text.splitlines() if len(line) > COLUMN]
    return wide


@pytest.mark.parametrize("path", PAGES + NOTEBOOKS, ids=lambda p: str(p.relative_to(DOCS)))
def test_code_fits_its_column_on_a_desktop(path: Path) -> None:
    wide = notebook_too_wide(path) if path.suffix == ".ipynb" else page_too_wide(path)
    assert not wide, f"{len(wide)} lines wider than the code column:\n" + "\n".join(wide)

