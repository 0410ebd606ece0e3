"""Shared helpers have public names, and pages use the public API only.

A name with a leading underscore belongs to its module: another module of the package that
needs it imports a public name instead, from ``attention._checks`` (the module meant for
sharing) or from the module that defines it. Pages, notebooks and the book's tools never reach
into the package's private names or private modules.
"""

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "src" / "attention"
PRIVATE_PACKAGE = re.compile(
    r"from attention(?:\.\w+)* import [^\n#]*(?<![\w.])_[a-z]\w*|attention(?:\.\w+)*\._[a-z]\w*"
)


def private_imports(path: Path) -> list[str]:
    """'module.name' for each underscore name that ``path`` imports from the package."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (
            node.level or (node.module or "").split(".")[0] == "attention"
        ):
            found += [f"{node.module}.{alias.name}" for alias in node.names
                      if alias.name.startswith("_") and not alias.name.startswith("__")]
    return found


def test_modules_import_no_private_name_of_another_module():
    found = {str(p.relative_to(PACKAGE)): private_imports(p) for p in PACKAGE.rglob("*.py")}
    assert {name: hits for name, hits in found.items() if hits} == {}


def test_pages_and_tools_use_the_public_api():
    files = [*(REPO / "docs").rglob("*.md"), *(REPO / "docs").rglob("*.ipynb"),
             *(REPO / "tools").rglob("*.py")]
    found = [f"{f.relative_to(REPO)}: {m.group(0)}"
             for f in files for m in PRIVATE_PACKAGE.finditer(f.read_text())]
    assert found == []


def test_the_rules_catch_what_they_should(tmp_path):
    for text in ("from attention.triton_forward import _key_range",
                 "from attention.functional import softmax, _accumulation_dtype",
                 "attention.inference._visible(q, k, 3, 0)", "from attention._checks import x"):
        assert PRIVATE_PACKAGE.search(text), text
    for text in ("from attention import flash_attention", "attention.masks.causal()",
                 "from attention.inference import KVCache  # _private in a comment"):
        assert not PRIVATE_PACKAGE.search(text), text
    module = tmp_path / "m.py"
    module.write_text("from .functional import softmax, _accumulation_dtype\n"
                      "from . import __version__\nfrom attention.inference import _visible\n")
    assert private_imports(module) == ["functional._accumulation_dtype", "attention.inference._visible"]
