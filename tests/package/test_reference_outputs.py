"""The printed tensors the package must reproduce are read from one committed file,
tests/fixtures/reference/notebook-outputs.txt (tests/package/_reference.py): every entry parses
to the numbers it prints, is used by the test module it names, and every name a test asks for
is an entry."""

from __future__ import annotations

import re

from _reference import ENTRY, FIXTURE, book_tensor, entries

from book.constants import REPO

NUMBER = re.compile(r"-?\d+\.\d+")
ASKED = re.compile(r'book_tensor\("(BOOK_\w+)"\)')


def test_every_entry_parses_to_the_numbers_it_prints() -> None:
    text = FIXTURE.read_text(encoding="utf-8")
    assert len(entries()) == text.count("\n== ") >= 12, "an entry of the fixture was not parsed"
    for m in ENTRY.finditer(text):
        numbers = [float(x) for x in NUMBER.findall(m["printed"])]
        parsed = [round(x, 4) for x in book_tensor(m["name"]).flatten().tolist()]  # float32
        assert parsed == numbers, m["name"]


def test_each_entry_is_used_by_the_test_module_it_names_and_each_name_asked_is_an_entry() -> None:
    asked = {path.name: set(ASKED.findall(path.read_text(encoding="utf-8")))
             for path in (REPO / "tests" / "package").glob("test_*.py")}
    unused = [f"{file}: {name}" for name, (file, _) in entries().items()
              if name not in asked.get(file, set())]
    assert unused == []
    missing = sorted(name for names in asked.values() for name in names - set(entries()))
    assert missing == []
