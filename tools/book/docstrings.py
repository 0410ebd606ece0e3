"""Griffe extension (mkdocs.yml, mkdocstrings ``extensions``): docstrings as the API reference
shows them.

The package's docstrings are read in three places: ``help()`` in a terminal, the source, and the
API reference pages. They are written for the first two, in plain text with Sphinx roles; this
extension rewrites them, for the pages only and when the site is built, so that the source stays
plain:

- A Sphinx role, ``:func:`softmax```, ``:class:`~attention.CrossAttention```, ``:mod:`x```,
  becomes a mkdocstrings cross-reference to the object's entry, on its page (mkdocstrings does not
  read Sphinx roles; it would show them as literal text). The name is looked up as Python would
  see it from the docstring's object: its own members, then those of the enclosing class and
  module, then the package's. A name that resolves to nothing stops the strict build.
- A module's notation legend, ``Notation (see CONTRIBUTING.md):`` followed by an indented list
  of symbols and meanings, becomes a table (Markdown would run the lines into one paragraph);
  ``see CONTRIBUTING.md``, a file that is not on the site, becomes a link to the notation table
  of the preface.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from griffe import Alias, Extension, Module, Object

from .constants import DOCS

# mkdocs counts warnings of loggers under "mkdocs": --strict then fails the build.
log = logging.getLogger("mkdocs.plugins.docstrings")

ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|exc|obj):`(~?)([\w.]+)`")
# The API reference: an overview (index.md) and a page per part of the book, each showing its
# modules with mkdocstrings' ``::: attention.x`` lines.
REFERENCE = DOCS / "reference"
SHOWN = re.compile(r"^::: (attention(?:\.\w+)+)[ \t]*$", re.MULTILINE)
# The notation table of the preface (docs/index.md, heading "Notation"), linked from the API
# pages (docs/reference/*.md); MkDocs checks the link and its anchor like any other.
LEGEND_LINK = "see the book's [notation](../index.md#notation)"
LEGEND_HEAD = re.compile(r"^Notation \(see CONTRIBUTING\.md\):[ \t]*$", re.MULTILINE)
# One row of an indented legend: the symbols, two or more spaces, the meaning.
LEGEND_ROW = re.compile(r"^(\s+)(\S(?:.*?\S)?)\s{2,}(\S.*)$")


def lookup(name: str, obj: Object | Alias, pkg: Module) -> str | None:
    """The canonical path of ``name`` as seen from ``obj``, or None if nothing has that name."""
    first, _, rest = name.partition(".")
    scopes = [obj, *iter_parents(obj)]
    if first == pkg.name:
        scopes, first, _, rest = [pkg], *rest.partition(".")
    for scope in scopes:
        members = getattr(scope, "members", {})
        if first in members:
            target: Any = members[first]
            try:
                target = target[rest] if rest else target
            except (KeyError, ValueError):
                return None
            return target.target_path if isinstance(target, Alias) else target.path
    return None


def iter_parents(obj: Object | Alias) -> Iterator[Object]:
    """The enclosing class and module of ``obj``, innermost first, then its package."""
    parent = obj.parent
    while parent is not None:
        yield parent
        parent = parent.parent


def link_roles(text: str, obj: Object | Alias, pkg: Module) -> str:
    """Replace each Sphinx role in ``text`` with a cross-reference to its object."""

    def link(match: re.Match[str]) -> str:
        tilde, name = match.groups()
        path = lookup(name, obj, pkg)
        if path is None:
            log.warning(f"{obj.path}: {match.group(0)} names no object of the package")
            return f"`{name}`"
        shown = name.rsplit(".", 1)[-1] if tilde else name
        return f"[`{shown}`][{path}]"

    return ROLE.sub(link, text)


def legend_table(text: str) -> str:
    """Turn the indented notation legend under a ``Notation (see CONTRIBUTING.md):`` line into
    a Markdown table, and link the legend of the book instead of CONTRIBUTING.md."""
    head = LEGEND_HEAD.search(text)
    if head is None:
        return text.replace("(see CONTRIBUTING.md)", f"({LEGEND_LINK})")
    lines = text[head.end() + 1 :].split("\n")
    rows: list[list[str]] = []
    indent = 0
    for used, line in enumerate(lines):  # rows end at a blank line or a line that is no row
        row = LEGEND_ROW.match(line)
        if row and (not rows or len(row.group(1)) == indent):
            indent = len(row.group(1))
            rows.append([f"`{row.group(2)}`", row.group(3)])
        elif rows and line.strip() and len(line) - len(line.lstrip()) > indent:
            rows[-1][1] += " " + line.strip()  # a meaning continued on the next line
        else:
            break
    else:
        used = len(lines)
    if not rows:
        return text.replace("(see CONTRIBUTING.md)", f"({LEGEND_LINK})")
    cells = [[cell.replace("``", "`").replace("|", "\\|") for cell in row] for row in rows]
    table = ["| symbol | meaning |", "|---|---|", *(f"| {s} | {m} |" for s, m in cells)]
    rest = "\n".join(lines[used:])
    legend = "\n".join([f"Notation ({LEGEND_LINK}):", "", *table, "", rest])
    return text[: head.start()] + legend


def reference_modules(folder: Path = REFERENCE) -> dict[str, Path]:
    """The page of the API reference (the pages in ``folder``) that shows each module, by the
    module's dotted name, page by page in file-name order and in each page's order.

    Raises:
        ValueError: if two pages, or two lines of one page, show the same module.
    """
    shown: dict[str, Path] = {}
    for page in sorted(folder.glob("*.md")):
        for name in SHOWN.findall(page.read_text(encoding="utf-8")):
            if name in shown:
                raise ValueError(f"expected each module on one page, got {name} on "
                                 f"{shown[name].name} and {page.name}")
            shown[name] = page
    return shown


class SiteDocstrings(Extension):
    """Rewrite the package's docstrings for the API reference (see the module docstring)."""

    def on_package(self, *, pkg: Module, **kwargs: Any) -> None:
        for obj in walk(pkg):
            if obj.docstring is not None:
                value = obj.docstring.value
                if isinstance(obj, Module):
                    value = legend_table(value)
                obj.docstring.value = link_roles(value, obj, pkg)


def walk(obj: Object) -> Iterator[Object]:
    """``obj`` and every object defined in it (aliases, the package's re-exports, are skipped)."""
    yield obj
    for member in obj.members.values():
        if not isinstance(member, Alias):
            yield from walk(member)
