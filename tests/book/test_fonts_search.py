"""The figures' font shipped with the site (tools/book/fonts.py), and a search index without
private-use characters (tools/book/hooks/search.py)."""

from __future__ import annotations

from pathlib import Path

from book.fonts import FACES, FONTS, write_fonts
from book.hooks.search import plain


def test_the_shipped_fonts_are_the_subsets_the_tool_writes(tmp_path: Path) -> None:
    written = write_fonts(tmp_path)
    assert {p.name for p in written} == {f"{face}.woff" for face in FACES} | {"LICENSE_DEJAVU"}
    for path in written:
        assert (FONTS / path.name).read_bytes() == path.read_bytes(), (
            f"docs/assets/fonts/{path.name} is stale: run `python -m book fonts`"
        )
        assert path.stat().st_size < 80_000, f"{path.name}: not a subset"
    css = (FONTS.parents[1] / "stylesheets" / "figures.css").read_text(encoding="utf-8")
    for face in FACES:
        assert f'url("../assets/fonts/{face}.woff")' in css, f"figures.css does not load {face}"


def test_search_text_has_no_private_use_characters() -> None:
    # KaTeX's negation slash (U+E020) before a relation becomes the negated relation.
    assert plain("Causal alignment when tq\ue020=tk") == "Causal alignment when tq≠tk"
    assert plain("a \ue020\u2208 b \ue001") == "a ∉ b "
