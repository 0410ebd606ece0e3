"""The book's math: tools/book/hooks/math.py typesets it at build time with KaTeX, numbers equations
with anchors, links every "equation (x.y)" of the prose to its equation, and keeps TeX out of the
search index: the hook's functions, called directly. The built site's math is checked in
tests/site/test_site_math.py, and what a browser shows in tests/browser/test_math.py.
"""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

from book.hooks import math as hook


def test_render_gives_katex_html_with_the_tex_kept_out_of_search() -> None:
    html = hook.render(r"\frac{a}{b} \tag{3.1}", display=True)
    assert html.startswith('<span class="katex-display">') and "katex-error" not in html
    assert '<span class="katex-mathml" data-search-exclude="math">' in html
    assert '<span class="katex-tag">' in html and "(3.1)" in html


@pytest.mark.parametrize(
    ("tex", "message"),
    [(r"\frac{1}{", "Unexpected end of input"), (r"\notAMacro{j}", r"Undefined control sequence")],
)
def test_tex_that_katex_cannot_parse_is_an_error(tex: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as error:
        hook.render(tex, display=False)
    assert repr(tex) in str(error.value)


def test_plain_text_is_what_the_reader_sees() -> None:
    assert hook.plain_text(r"XX^\top") == "XX⊤"


def test_tagged_equations_get_anchors() -> None:
    out = hook.typeset(r'<div class="arithmatex">\[ a = b \tag{7.3} \]</div>', "a page")
    assert out.startswith('<div class="arithmatex" id="eq-7-3"><span class="katex-display">')
    assert hook.anchor("10.12") == "eq-10-12"


def fake_page(url: str) -> SimpleNamespace:
    return SimpleNamespace(file=SimpleNamespace(url=url, src_uri=url + "index.md"))


@pytest.mark.parametrize(
    ("prose", "linked"),
    [
        ("see equation (7.3).", ["7.3"]),
        ("Equations (7.3) and (8.1) say", ["7.3", "8.1"]),
        ("equations (7.3), (7.4) and (8.1)", ["7.3", "7.4", "8.1"]),
        ("Equations (7.3) to (7.4)", ["7.3", "7.4"]),
        ("equation\n(8.1) wraps", ["8.1"]),
        ("in (7.3) alone, or <code>equation (7.3)</code>", []),
        ('<a href="x">equation (7.3)</a> <h2>Equation (7.3)</h2>', []),
    ],
)
def test_equation_references_link_to_their_page(prose: str, linked: list[str]) -> None:
    here, there = fake_page("chapters/07/"), fake_page("chapters/08/")
    hook._tags.clear()
    hook._tags.update({"7.3": here.file, "7.4": here.file, "8.1": there.file})
    missing: list[str] = []
    out = hook.link_references(prose, here, missing)
    found = re.findall(r'<a class="eqref" href="([^"]*)">\((\d+\.\d+)\)</a>', out)
    expected = {"7.3": "#eq-7-3", "7.4": "#eq-7-4", "8.1": "../08/#eq-8-1"}
    assert found == [(expected[key], key) for key in linked]
    assert missing == []
    assert re.sub(r"<a class=\"eqref\"[^>]*>(.*?)</a>", r"\1", out) == prose


WORD = re.compile(r"\bword\b")


@pytest.mark.parametrize(
    "fragment, expected",
    [
        ("a word <b>word</b> word", "a WORD <b>WORD</b> WORD"),
        ("<pre><code>word<a id=x></a>word</code></pre> word", "<pre><code>word<a id=x></a>word</code></pre> WORD"),
        ("<A HREF=x>word</A> word", "<A HREF=x>word</A> WORD"),  # tag names in any case
        ("<a/>word <code/>word", "<a/>WORD <code/>WORD"),  # elements that close themselves
        ("</code>word <a>word</b>word</a>word", "</code>WORD <a>word</b>word</a>WORD"),  # stray ends
        ("<code><a>word</code>word</a>word", "<code><a>word</code>word</a>word"),  # one close too few
        ("<!-- <code> -->word <!-- word -->", "<!-- <code> -->WORD <!-- word -->"),  # comments
        ('<span title="<code>">word</span> word', '<span title="<code>">WORD</span> WORD'),  # "<" in a tag
        ("<article>word<h2>word</h2>word", "<article>WORD<h2>word</h2>WORD"),
        ("<abbr>word</abbr> <annotation>word</annotation>", "<abbr>WORD</abbr> <annotation>WORD</annotation>"),
    ],
)
def test_text_is_changed_outside_links_code_headings_and_math_only(fragment: str, expected: str) -> None:
    assert hook.map_text(fragment, WORD, lambda m: m.group(0).upper()) == expected


def test_a_reference_to_no_equation_is_reported() -> None:
    hook._tags.clear()
    missing: list[str] = []
    assert hook.link_references("equation (9.99)", fake_page("x/"), missing) == "equation (9.99)"
    assert missing == ["9.99"]


@pytest.mark.parametrize(
    ("tex", "pieces"),
    [
        (r"A = \operatorname{softmax}(S) \tag{7.1}", ["A", r"= \operatorname{softmax}(S)"]),
        (r"a = b \qquad c \le d", ["a", "= b", "c", r"\le d"]),
        (r"\Bigl( a = b \Bigr) = c", [r"\Bigl( a = b \Bigr)", "= c"]),
        (r"\left( x + y \right) \approx z", [r"\left( x + y \right)", r"\approx z"]),
        (r"f = \begin{cases} 1 & x = 0 \\ 2 & x \le 1 \end{cases}",
         ["f", r"= \begin{cases} 1 & x = 0 \\ 2 & x \le 1 \end{cases}"]),
    ],
)
def test_a_display_breaks_only_between_equations_and_before_relations(tex, pieces) -> None:
    # The rendered display's flex items (.katex-base) are the pieces: a line may break only between
    # them, so never right after "=", nor inside a delimiter pair or an environment.
    html = hook.render(hook.breakable(tex), display=True)
    bases = re.findall(r'<span class="katex-base">', html)
    assert len(bases) == len(pieces), (hook.breakable(tex), len(bases))
    seen = [hook.plain_text(p if not p.startswith(("=", "\\le", "\\approx")) else "{}" + p)
            for p in pieces]
    text = hook.MARKUP.sub("", html.split('<span class="katex-html"', 1)[1]).replace("\u200b", "")
    for piece in seen:
        assert piece.replace(" ", "") in text.replace(" ", ""), (piece, text)


def test_a_sized_delimiter_pair_is_never_broken() -> None:
    tex = r"Y = \operatorname{dropout}\big(a + b\big) , \qquad Z = c"
    assert hook.breakable(tex) == (r"{Y}\allowbreak{{}= \operatorname{dropout}\big(a + b\big) ,}"
                                   r"\allowbreak\qquad{Z}\allowbreak{{}= c}")


@pytest.fixture
def fresh_process(tmp_path, monkeypatch):
    """The hook as a new build process finds it, with its typeset cache in ``tmp_path``."""

    def restart() -> None:
        hook._typeset_cache.cache_clear()
        hook.render.cache_clear()
        hook._unsaved.clear()

    monkeypatch.setattr(hook, "TYPESET_CACHE", tmp_path)
    restart()
    yield restart
    restart()


def test_typeset_formulas_are_kept_for_the_next_build_of_the_same_katex(fresh_process, monkeypatch) -> None:
    first = hook.render(r"\alpha_{ij}", False)
    hook.on_post_build(None)
    kept = hook.typeset_cache_file()
    assert json.loads(kept.read_text(encoding="utf-8"))[r"0\alpha_{ij}"].startswith('<span class="katex">')
    fresh_process()  # the next build reads the file, and KaTeX does not run for that formula
    monkeypatch.setattr(hook, "_katex", lambda: pytest.fail("KaTeX ran for a kept formula"))
    assert hook.render(r"\alpha_{ij}", False) == first
    # Other options (or another KaTeX) are another file; the old one goes at the next save.
    monkeypatch.setattr(hook, "OPTIONS", {**hook.OPTIONS, "output": "html"})
    assert hook.typeset_cache_file() != kept
    fresh_process()
    with pytest.raises(pytest.fail.Exception):
        hook.render(r"\alpha_{ij}", False)
    hook._unsaved.add("0x")
    hook.on_post_build(None)
    assert list(kept.parent.iterdir()) == [hook.typeset_cache_file()]
