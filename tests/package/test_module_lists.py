"""The lists a new module of the package must join agree with each other: what ``__init__``
imports, its ``__all__``, and the modules the API reference page (docs/reference/api.md) shows."""

from __future__ import annotations

import ast
import re

import attention
from book.constants import DOCS, REPO

PACKAGE = REPO / "src" / "attention"


def init_imports() -> tuple[set[str], set[str]]:
    """(modules, names) that ``attention/__init__.py`` imports from its own modules."""
    modules, names = set(), set()
    for node in ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            modules.add(node.module.split(".")[0])
            names |= {alias.asname or alias.name for alias in node.names}
    return modules, names


def test_init_exports_exactly_what_it_imports() -> None:
    _, names = init_imports()
    assert sorted(set(attention.__all__) - names) == [], "in __all__ but not imported by __init__"
    assert sorted(names - set(attention.__all__)) == [], "imported by __init__ but not in __all__"
    assert len(attention.__all__) == len(set(attention.__all__)), "a name twice in __all__"


def test_every_public_module_is_on_the_api_page_and_the_page_names_no_other() -> None:
    shown = re.findall(r"^::: attention\.(\w+)\s*$", (DOCS / "reference" / "api.md").read_text(encoding="utf-8"),
                       flags=re.MULTILINE)
    modules = {p.stem for p in PACKAGE.glob("*.py") if not p.stem.startswith("_")}
    assert sorted(modules - set(shown)) == [], "modules missing from docs/reference/api.md"
    assert sorted(set(shown) - modules) == [], "docs/reference/api.md shows modules that do not exist"
    assert len(shown) == len(set(shown)), "a module twice on the API page"
    imported, _ = init_imports()
    assert sorted(imported - modules) == [], "__init__ imports from a private or missing module"
