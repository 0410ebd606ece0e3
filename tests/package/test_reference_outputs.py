"""The printed tensors the package must reproduce are committed: every ``BOOK_*`` constant of the
tests that cite them equals its entry in tests/fixtures/reference/notebook-outputs.txt."""

from __future__ import annotations

import ast
import re

import pytest
import torch

from book.constants import REPO

FIXTURE = REPO / "tests" / "fixtures" / "reference" / "notebook-outputs.txt"
ENTRY = re.compile(r"^== (?P<file>\S+) (?P<name>BOOK_\w+): .*?\n(?P<printed>tensor\(.*?)(?=\n\n|\n== |\Z)",
                   flags=re.MULTILINE | re.DOTALL)
NUMBER = re.compile(r"-?\d+\.\d+")


def entries() -> dict[tuple[str, str], list[float]]:
    """(test file, constant) -> the numbers printed, in order."""
    text = FIXTURE.read_text(encoding="utf-8")
    return {(m["file"], m["name"]): [float(x) for x in NUMBER.findall(m["printed"])] for m in ENTRY.finditer(text)}


def constants(file: str) -> dict[str, torch.Tensor]:
    """The ``BOOK_*`` tensors a test module types in, read from its source (not imported)."""
    tree = ast.parse((REPO / "tests" / "package" / file).read_text(encoding="utf-8"))
    return {node.targets[0].id: eval(compile(ast.Expression(node.value), file, "eval"), {"torch": torch})
            for node in tree.body if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id.startswith("BOOK_")}


FILES = ("test_functional.py", "test_multihead.py", "test_self_attention.py")


@pytest.mark.parametrize("file", FILES)
def test_every_typed_in_reference_tensor_is_the_committed_printed_one(file: str) -> None:
    printed = entries()
    typed = constants(file)
    assert typed, f"{file} types in no BOOK_* tensor"
    for name, tensor in typed.items():
        assert (file, name) in printed, f"{file}: {name} has no entry in {FIXTURE.name}"
        numbers = printed[file, name][: tensor.numel()]  # a batch printed twice: its first copy
        assert numbers == [round(x, 4) for x in tensor.flatten().tolist()], f"{file}: {name} differs"


def test_every_entry_is_typed_in_by_its_test() -> None:
    typed = {(file, name) for file in FILES for name in constants(file)}
    assert sorted(set(entries()) - typed) == []
