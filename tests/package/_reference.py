"""The tensors the study notebook printed, by name: the one copy of those numbers is the committed
tests/fixtures/reference/notebook-outputs.txt (see its header), which this module parses."""

import ast
import re
from functools import cache
from pathlib import Path

import torch

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "reference" / "notebook-outputs.txt"
# "== FILE NAME: what it is", then the printed tensor (a 3-d one has blank lines), to the next entry
ENTRY = re.compile(
    r"^== (?P<file>\S+) (?P<name>BOOK_\w+): .*?\n(?P<printed>tensor\(.*?)\s*(?=\n== |\Z)",
    flags=re.MULTILINE | re.DOTALL,
)


@cache
def entries() -> dict[str, tuple[str, torch.Tensor]]:
    """Every entry of the fixture by name: the test file it names, and the tensor printed."""
    found = {}
    for m in ENTRY.finditer(FIXTURE.read_text(encoding="utf-8")):
        printed = m["printed"]
        values = ast.literal_eval(printed[printed.index("[") : printed.rindex("]") + 1])
        found[m["name"]] = (m["file"], torch.tensor(values))
    return found


def book_tensor(name: str) -> torch.Tensor:
    """The tensor the notebook printed as ``name`` (4 decimals, float32)."""
    return entries()[name][1].clone()
