"""The built site's math: KaTeX's stylesheet and fonts served by the site, every formula of every
page typeset at build time, every numbered equation anchored, every "equation (x.y)" linked to its
equation, and no TeX in the search index. (The hook's functions are tested in
tests/book/test_math_hook.py; what a browser shows, in tests/browser/test_math.py.)
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest
from _html import resolves_to, scan

from book.constants import DOCS
from book.hooks import math as hook


def test_katex_stylesheet_and_fonts_are_served_by_the_site(built_site: Path) -> None:
    katex = built_site / "assets" / "katex"
    css = (katex / "katex.min.css").read_text(encoding="utf-8")
    fonts = re.findall(r"url\(([^)]+)\)", css)
    assert fonts, "katex.min.css names no font"
    missing = [url for url in fonts if not (katex / url).is_file()]
    assert missing == [], f"fonts named by katex.min.css but not in the site: {missing}"
    # KaTeX's script typesets at build time only, and the note on the files is for maintainers.
    assert not (katex / "katex.min.js").exists(), "katex.min.js is for the build, not the reader"
    assert not (katex / "README.txt").exists()
    assert (katex / "LICENSE").is_file(), "KaTeX's licence must travel with its files"
    assert not (built_site / "assets" / "mathjax").exists()


@pytest.mark.parametrize("kind", ["chapters", "exercises", "appendix", "reference"])
def test_every_page_has_its_math_typeset_at_build_time(built_site: Path, kind: str) -> None:
    pages = sorted((built_site / kind).rglob("index.html"))
    assert pages, f"no built pages under {kind}/"
    typeset = 0
    for page in pages:
        html, found = page.read_text(encoding="utf-8"), scan(page)
        sheets = [url for url in found.resources if url.endswith("katex.min.css")]
        assert len(sheets) == 1, f"{page}: KaTeX's stylesheet linked {len(sheets)} times"
        assert resolves_to(built_site, page, sheets[0]).is_file(), page
        fonts = [url for url in found.resources if "/katex/fonts/" in url]  # preloaded
        assert bool(fonts) == ('class="katex"' in html), f"{page}: preloads {fonts}"
        assert all(resolves_to(built_site, page, url).is_file() for url in fonts), page
        assert not [src for src in found.scripts if "mathjax" in src.lower()], page
        untypeset = re.findall(r'class="arithmatex"[^>]*>\s*\\[(\[]', html)
        assert untypeset == [], f"{page}: {len(untypeset)} formulas left as TeX"
        assert "katex-error" not in html, page
        typeset += html.count('class="katex"')
    assert typeset, f"no typeset math under {kind}/: nothing was checked"


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
        hook.map_text(body, hook.EQ_REFERENCE,
                      lambda m: unlinked.append(f"{name}: {m.group(0)!r}") or m.group(0))
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
