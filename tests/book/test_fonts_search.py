"""The figures' font shipped with the site (tools/book/fonts.py), and a search index without
private-use characters (tools/book/hooks/search.py)."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

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


def test_the_search_plugin_indexes_its_lighter_copy_as_the_page() -> None:
    # A page with what the copy leaves out (KaTeX's MathML and zero-width spaces, a source
    # listing) and what it unwraps (the spans of highlighted code, whitespace between them):
    # Material's parser gives the same sections from both.
    import markdown
    from material.plugins.search.plugin import Parser

    from book.hooks import math as math_hook
    from book.hooks.search import SOURCE_LISTING, on_page_content, search_copy

    code = "```python\nx = softmax(q @ k.T, dim=-1)  # (t, t)\n\n\n    y = x @ v\n```\n"
    block = markdown.markdown(code, extensions=["pymdownx.highlight", "pymdownx.superfences"])
    formula = math_hook.render(r"\sqrt{d_k}\ \text{and}~ A_{ij} = \frac{a}{b}", False)
    display = math_hook.render(r"x \neq y", True)
    listing = f"{SOURCE_LISTING}<summary>Source</summary>{block}</details>"
    page = SimpleNamespace(file=SimpleNamespace(src_uri="chapters/x.md"), meta={})
    content = on_page_content(f'<h2 id="a">One {formula}</h2><p>Text {formula} and\n{display}</p>'
                              f"{block}{listing}<p>after</p>", page, None, None)

    def sections(html: str) -> list[tuple[str, str, str | None]]:
        parser = Parser()
        parser.feed(html)
        parser.close()
        return [("".join(s.title), "".join(s.text), s.id) for s in parser.data]

    light = search_copy(content)
    assert "katex-mathml" in content and "katex-mathml" not in light
    assert "<span" in content.split("<pre")[1] and "<span" not in light.split("<pre")[1]
    # KaTeX's spans go too, but for those around a no-break space (\ and ~ above), which the
    # parser reads as a space of its own
    kept = re.findall(r"<span\b[^>]*>", light)
    assert 0 < len(kept) < content.count("<span") / 10, (len(kept), content.count("<span"))
    assert sections(light) == sections(content)
    assert "softmax" in sections(content)[-1][1]
