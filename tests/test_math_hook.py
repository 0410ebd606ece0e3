"""The book's math: docs/hooks/math.py typesets it at build time with KaTeX, numbers equations with
anchors, links every "equation (x.y)" of the prose to its equation, and keeps TeX out of the search
index. The first tests call the hook's functions; the others read the built site.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urljoin, urlsplit

import pytest
from book.hooks import math as hook  

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"




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


def test_a_reference_to_no_equation_is_reported() -> None:
    hook._tags.clear()
    missing: list[str] = []
    assert hook.link_references("equation (9.99)", fake_page("x/"), missing) == "equation (9.99)"
    assert missing == ["9.99"]


# ---------------------------------------------------------------------------------------------
# The built site


def pages(site: Path) -> list[Path]:
    return sorted(path for path in site.rglob("index.html") if "assets" not in path.parts)


def article(html: str) -> str:
    return html[html.find("<article"):html.find("</article>")]


def test_every_numbered_equation_has_its_anchor(built_site: Path) -> None:
    checked = 0
    for source in sorted(DOCS.rglob("*.md")):
        tags = hook.TAG.findall(source.read_text("utf-8"))
        if not tags:
            continue
        rel = source.relative_to(DOCS).with_suffix("")
        page = built_site / (rel.parent if rel.name == "index" else rel) / "index.html"
        ids = re.findall(r'id="(eq-[^"]+)"', page.read_text("utf-8"))
        assert sorted(ids) == sorted(hook.anchor(tag) for tag in tags), page
        checked += len(tags)
    assert checked > 100, "too few numbered equations: nothing much was checked"


def test_every_equation_reference_is_a_link_to_its_equation(built_site: Path) -> None:
    unlinked, broken, links = [], [], 0
    ids = {page: set(re.findall(r'id="([^"]+)"', page.read_text())) for page in pages(built_site)}
    for page in ids:
        body = article(page.read_text("utf-8"))
        name = page.relative_to(built_site).as_posix()
        # Prose outside links, code and headings that still names an equation: not linked.
        hook._map_text(body, lambda text: unlinked.extend(
            f"{name}: {m.group(0)!r}" for m in hook.EQ_REFERENCE.finditer(text)) or text)
        for href in re.findall(r'<a class="eqref" href="([^"]*)"', body):
            links += 1
            url = urlsplit(urljoin(f"http://site/{name}", href))
            target = built_site / url.path.lstrip("/") / "index.html"
            if url.path.endswith(".html"):
                target = built_site / url.path.lstrip("/")
            if target not in ids or url.fragment not in ids[target]:
                broken.append(f"{name}: {href}")
    assert unlinked == [], "\n".join(unlinked)
    assert broken == [], "\n".join(broken)
    assert links > 100, f"only {links} equation references linked: the book has more"


# TeX that must not reach the search index (it is shown in the results): delimiters anywhere,
# and, outside code, any control word the book's math uses.
DELIMITERS = re.compile(r"\\[()\[\]]|\$\$")


def tex_commands() -> set[str]:
    words = set()
    for source in DOCS.rglob("*.md"):
        for math in re.findall(r"\$\$(.+?)\$\$|\$(.+?)\$", source.read_text("utf-8"), re.DOTALL):
            words |= set(re.findall(r"\\[A-Za-z]+", "".join(math)))
    return words


def test_the_search_index_holds_no_tex(built_site: Path) -> None:
    index = json.loads((built_site / "search" / "search_index.json").read_text("utf-8"))
    commands = tex_commands()
    assert {r"\frac", r"\top", r"\sum"} <= commands, "the book's TeX was not found"
    found = []
    for doc in index["docs"]:
        text = doc["title"] + " " + doc["text"]
        prose = re.sub(r"<(pre|code)>.*?</\1>", " ", text, flags=re.DOTALL)
        found += [f"{doc['location']}: {m.group(0)!r}" for m in DELIMITERS.finditer(text)]
        if "\u200b" in prose:  # KaTeX's zero-width spaces would split the words of a formula
            found.append(f"{doc['location']}: a zero-width space")
        found += [
            f"{doc['location']}: {word!r}"
            for word in set(re.findall(r"\\[A-Za-z]+", prose)) & commands
        ]
    assert found == [], f"{len(found)} pieces of TeX in the search index:\n" + "\n".join(found[:40])
    chapters = [doc for doc in index["docs"] if doc["location"].startswith("chapters/")]
    assert any("softmax" in doc["text"] for doc in chapters), "chapters no longer searchable"
