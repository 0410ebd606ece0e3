"""The lists a new module of the package must join agree with each other: what ``__init__``
imports, its ``__all__``, and the modules the API reference's pages (docs/reference/) show."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import attention
from book.constants import REPO
from book.docstrings import reference_modules

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


def test_every_public_module_is_on_an_api_page_and_the_pages_name_no_other() -> None:
    shown = [name.removeprefix("attention.").split(".") for name in reference_modules()]
    modules = {p.stem for p in PACKAGE.glob("*.py") if not p.stem.startswith("_")}
    top = {parts[0] for parts in shown if len(parts) == 1}  # attention.x, of attention/x.py
    assert sorted(modules - top) == [], "modules missing from docs/reference/"
    missing = [".".join(parts) for parts in shown if not PACKAGE.joinpath(*parts).with_suffix(".py").is_file()]
    assert missing == [], "docs/reference/ shows modules that do not exist"
    imported, _ = init_imports()
    assert sorted(imported - modules) == [], "__init__ imports from a private or missing module"


class TestBadInput:
    def test_a_module_shown_on_two_pages_is_refused(self, tmp_path: Path) -> None:
        (tmp_path / "a.md").write_text("# A\n\n::: attention.causal\n", encoding="utf-8")
        (tmp_path / "b.md").write_text("# B\n\n::: attention.flash\n\n::: attention.causal\n",
                                       encoding="utf-8")
        with pytest.raises(ValueError, match=r"attention\.causal on a\.md and b\.md"):
            reference_modules(tmp_path)
