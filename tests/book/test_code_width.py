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
``bash`` alike), every line of a source file a fence lists whole (``--8<-- "src/..."``, in a box
of its own: ``LISTING_CODE_COLUMN``), and every code cell of the exercise notebooks, with what
it shows.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from book.constants import ADMONITION_CODE_COLUMN as BOX_COLUMN
from book.constants import CODE_COLUMN as COLUMN
from book.constants import DOCS, LISTING_CODE_COLUMN, REPO
from book.pages import read_page, split_lines

ADMONITION = re.compile(r"(?:!!!|\?\?\?)\+?\s")
LISTING = re.compile(r'\s*--8<-- "(?P<path>[^":]+)"\s*')  # a whole file; pymdownx.snippets
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
        indent, column = _indent(lines[start]), _column(lines, start)
        for number, line in enumerate(body, start=start + 2):
            if "--8<--" in line:
                listed = LISTING_CODE_COLUMN if column == BOX_COLUMN else COLUMN
                wide += [f"{path.relative_to(DOCS)}:{number}: {problem}"
                         for problem in listing_too_wide(line, listed)]
            elif len(line) - indent > column:
                wide.append(f"{path.relative_to(DOCS)}:{number}: {len(line) - indent} > {column}")
    return wide


def listing_too_wide(line: str, column: int) -> list[str]:
    """``file:line: width > column`` for each line of the file that ``line`` lists (a fence line
    ``--8<-- "src/attention/flash.py"``) wider than ``column``."""
    listing = LISTING.fullmatch(line)
    if listing is None:
        return [f"expected a whole file, --8<-- \"path\", got {line.strip()!r}"]
    source = REPO / listing["path"]
    if not source.is_file():
        return [f"expected a file of the repository, got {listing['path']!r}"]
    shown = source.read_text(encoding="utf-8").splitlines()
    return [f"{listing['path']}:{number}: {len(text)} > {column}"
            for number, text in enumerate(shown, start=1) if len(text) > column]


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

