"""The built site: a clean strict build, everything served from the site itself, output blocks
that carry no copy button, descriptions and licences on every page, and the API reference. Its
math is checked in test_site_math.py; how a browser shows the pages, in tests/browser/.

The site is built once per session by the ``site_build`` / ``built_site`` fixtures in conftest.py.
What a browser does with these pages is checked by the browser tests; these tests read the files.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from urllib.parse import urlsplit

from _html import (
    REMOTE_IN_CODE,
    SITE_URL,
    SOCIAL_TAGS,
    built_page,
    heavy_pages,
    html_pages,
    is_remote,
    meta_tags,
    output_fences,
    page_url,
    resolves_to,
    scan,
    scan_html,
)

from book.constants import DOCS, MAX_PAGE_BYTES, MAX_PAGE_ELEMENTS, REPO


def test_strict_build_has_no_warnings(site_build) -> None:
    assert site_build.returncode == 0, site_build.log
    problems = [
        line for line in site_build.log.splitlines() if re.match(r"\s*(WARNING|ERROR)\b", line)
    ]
    assert problems == [], "\n".join(problems)


# Chapter pages still too heavy, each with the reason. The test fails when one of them gets
# light enough: take it off the list then.
NOT_SPLIT_YET: dict[str, str] = {}  # page: why it is still over the limits


def test_no_chapter_page_is_too_heavy_for_a_phone(built_site: Path) -> None:
    heavy = heavy_pages(built_site, MAX_PAGE_BYTES, MAX_PAGE_ELEMENTS)
    new = [page for page in heavy if page.split(": ")[0] not in NOT_SPLIT_YET]
    assert new == [], (
        f"chapter pages over {MAX_PAGE_BYTES:,} bytes or {MAX_PAGE_ELEMENTS:,} elements, to be "
        "read on section pages (CONTRIBUTING.md):\n" + "\n".join(new)
    )
    light = sorted(set(NOT_SPLIT_YET) - {page.split(": ")[0] for page in heavy})
    assert light == [], f"light enough now: take {light} off NOT_SPLIT_YET"


def test_the_weight_check_catches_a_heavy_page(tmp_path: Path) -> None:
    page = tmp_path / "chapters" / "07-x" / "tiles"
    page.mkdir(parents=True)
    (page / "index.html").write_text("<html><body>" + "<p>x</p>" * 30 + "<script>'<p>'</script>")
    assert heavy_pages(tmp_path, 10_000, 40) == []
    assert heavy_pages(tmp_path, 10_000, 30) == ["chapters/07-x/tiles/: 274 bytes, 33 elements"]
    assert heavy_pages(tmp_path, 200, 40) == ["chapters/07-x/tiles/: 274 bytes, 33 elements"]


def test_the_page_scan_finds_what_a_page_loads_and_its_output_blocks() -> None:
    found = scan_html("""<!doctype html><html><head>
      <link rel="stylesheet" href="https://cdn.example/x.css"><link rel="canonical" href="/a/">
      <link rel="preload icon" href="f.woff2"><script src="https://cdn.example/x.js"></script>
      <script>load("https://cdn.example/y.js")</script><style>@import "https://x/y.css";</style>
      </head><body><img src="p.png" alt=""><iframe src="//cdn.example/f"></iframe><img src="">
      <div class="highlight output no-copy"><pre><code>1</code><button>copy</button></pre>
      <span data-clipboard-target="#x"></span></div><div class="highlight"><nav></nav></div>
      <a href="n.ipynb" download>get</a><a href="x" data-md-component="source">repo</a>
      </body></html>""")
    assert found.resources == ["https://cdn.example/x.css", "f.woff2", "https://cdn.example/x.js",
                               "p.png", "//cdn.example/f"]
    assert found.scripts == ["https://cdn.example/x.js", ""]
    assert found.inline_code == ['load("https://cdn.example/y.js")', '@import "https://x/y.css";']
    assert (found.output_blocks, found.copy_markup_in_output) == (["highlight output no-copy"], 2)
    assert found.images == [("p.png", ""), ("", "")]
    assert (found.download_links, found.source_components) == (["n.ipynb"], 1)


def test_pages_load_nothing_from_outside_the_site(built_site: Path) -> None:
    offenders = []
    for page in html_pages(built_site):
        found = scan(page)
        name = page.relative_to(built_site)
        offenders += [f"{name}: loads {url}" for url in found.resources if is_remote(url)]
        for code in found.inline_code:
            offenders += [
                f"{name}: inline code names {m.group(0)}" for m in REMOTE_IN_CODE.finditer(code)
            ]
        if found.source_components:
            offenders.append(f"{name}: header repository widget would call the GitHub API")
    for css in built_site.rglob("*.css"):
        text = css.read_text(encoding="utf-8", errors="replace")
        offenders += [
            f"{css.relative_to(built_site)}: names {m.group(0)}"
            for m in REMOTE_IN_CODE.finditer(text)
        ]
    assert offenders == [], "\n".join(offenders)


def test_no_google_fonts(built_site: Path) -> None:
    for page in html_pages(built_site):
        text = page.read_text(encoding="utf-8")
        assert "fonts.googleapis" not in text and "fonts.gstatic" not in text, page


def test_images_have_alt_text_and_exist(built_site: Path) -> None:
    problems = []
    for page in html_pages(built_site):
        for src, alt in scan(page).images:
            if not alt.strip():
                problems.append(
                    f"{page.relative_to(built_site)}: <img src={src!r}> has no alt text"
                )
            if not src.startswith("data:") and not resolves_to(built_site, page, src).is_file():
                problems.append(f"{page.relative_to(built_site)}: <img src={src!r}> is missing")
    assert problems == [], "\n".join(problems)


def test_output_blocks_are_no_copy_panels(built_site: Path) -> None:
    expected_total = 0
    for source in sorted(DOCS.rglob("*.md")):
        expected = output_fences(source)
        expected_total += expected
        page = built_page(built_site, source.relative_to(DOCS))
        found = scan(page)
        assert len(found.output_blocks) == expected, f"{page}: {found.output_blocks}"
        assert all("no-copy" in c.split() for c in found.output_blocks), page
        assert found.copy_markup_in_output == 0, page
    assert expected_total > 0, "no page has an output block yet: nothing was checked"


def test_material_skips_copy_buttons_for_no_copy_blocks(built_site: Path) -> None:
    """Material creates no copy button inside `.no-copy`; a theme upgrade must keep it so."""
    bundles = list((built_site / "assets" / "javascripts").glob("bundle.*.min.js"))
    assert len(bundles) == 1
    assert '.closest(".no-copy")' in bundles[0].read_text(encoding="utf-8")


def test_notebook_pages_offer_the_ipynb(built_site: Path) -> None:
    notebooks = sorted((DOCS / "exercises").glob("*.ipynb"))
    assert notebooks, "no notebook under docs/exercises/"
    for notebook in notebooks:
        page = built_site / "exercises" / notebook.stem / "index.html"
        links = scan(page).download_links
        assert links == [notebook.name], page
        assert resolves_to(built_site, page, links[0]).read_bytes() == notebook.read_bytes()


def test_every_page_shows_the_licences_in_its_footer(built_site: Path) -> None:
    """mkdocs.yml's ``copyright``: the text's licence and the code's, in every page's footer."""
    footer = re.compile(
        r'<div class="md-copyright__highlight">\s*Text and figures: '
        r'<a href="https://creativecommons.org/licenses/by/4.0/">CC BY 4.0</a>\.\s*'
        r'Code: <a href="[^"]+/LICENSE">MIT</a>\.'
    )
    pages = html_pages(built_site)
    missing = [
        str(page.relative_to(built_site))
        for page in pages
        if not footer.search(page.read_text(encoding="utf-8"))
    ]
    assert pages and missing == [], f"no licence notice in the footer of: {missing}"


# ---------------------------------------------------------------------------------------------
# Link previews, the 404 page and the API reference (tools/book/hooks/meta.py, overrides/,
# tools/book/docstrings.py)

# A Sphinx role as the package's docstrings write it: :func:`softmax`, :class:`~attention.X`.
SPHINX_ROLE = re.compile(r":(?:func|class|mod|meth|attr|exc|obj|data):`(~?)([\w.]+)`")
SOURCE_LISTING = re.compile(r'<details class="mkdocstrings-source".*?</details>', re.DOTALL)


def test_every_page_has_a_description_and_link_preview_tags(built_site: Path) -> None:
    problems, descriptions = [], {}
    pages = html_pages(built_site)
    for page in pages:
        name, tags = page.relative_to(built_site).as_posix(), meta_tags(page)
        for key in ["description", *SOCIAL_TAGS]:
            if len(tags.get(key, [])) != 1 or not tags[key][0].strip():
                problems.append(f"{name}: expected one non-empty {key}, found {tags.get(key)}")
        if problems:
            continue
        description = tags["description"][0]
        descriptions[name] = description
        too_long = len(description) > 200 and name != "404.html"  # 404: the site's own
        if tags["og:description"] != [description] or too_long:
            problems.append(f"{name}: og:description {tags['og:description']} vs {description!r}")
        if tags["og:url"] != [page_url(built_site, page)]:
            problems.append(f"{name}: og:url {tags['og:url']}, not {page_url(built_site, page)}")
        if tags["og:type"][0] not in {"website", "article"} or tags["twitter:card"] != ["summary"]:
            problems.append(f"{name}: og:type {tags['og:type']}, card {tags['twitter:card']}")
        if any("image" in key for key in tags):  # a card image would be fetched from the network
            problems.append(f"{name}: names an image: {sorted(k for k in tags if 'image' in k)}")
    assert pages and problems == [], "\n".join(problems)
    # Each page describes itself: no two pages share a description (404.html has the site's).
    content = {name: text for name, text in descriptions.items() if name != "404.html"}
    shared = {text for text in content.values() if list(content.values()).count(text) > 1}
    assert not shared, f"pages sharing a description: {shared}"


def test_404_page_offers_search_and_a_way_home(built_site: Path) -> None:
    html = (built_site / "404.html").read_text(encoding="utf-8")
    article = html[html.index("<article") : html.index("</article>")]
    assert re.search(r"<h1[^>]*>[^<]*not found", article, re.IGNORECASE), article[:300]
    assert re.search(r'<label[^>]*for="__search"', article), "no button that opens the search"
    assert 'class="md-search__input"' in html, "no search box"
    home = urlsplit(SITE_URL).path  # 404.html is served at any depth: its links are absolute
    assert re.search(rf'<a class="md-button" href="{re.escape(home)}\.?"', article), article


def public_docstrings(source: Path) -> list[str]:
    """The docstrings the API page shows for a module: its own, and those of its public classes
    and functions and their public methods (``__init__``'s is merged into its class's)."""
    tree = ast.parse(source.read_text(encoding="utf-8"))
    found = [ast.get_docstring(tree) or ""]

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and (
                not child.name.startswith("_") or child.name == "__init__"
            ):
                found.append(ast.get_docstring(child) or "")
                visit(child)

    visit(tree)
    return found


def api_pages(site: Path) -> dict[Path, str]:
    """The built pages of the API reference that show modules, by folder, and their HTML."""
    pages = {page.parent.resolve(): page.read_text(encoding="utf-8")
             for page in sorted((site / "reference").glob("*/index.html"))}
    assert len(pages) > 1, f"no API reference pages in {site / 'reference'}"
    return pages


def test_api_reference_turns_sphinx_roles_into_links(built_site: Path) -> None:
    pages = api_pages(built_site)
    ids = {folder: set(re.findall(r' id="([^"]+)"', html)) for folder, html in pages.items()}
    links = set()  # (the page a link is on, the page and the id it leads to, the name it shows)
    for folder, html in pages.items():
        shown = SOURCE_LISTING.sub("", html)  # the source listings show the docstrings as written
        assert not SPHINX_ROLE.search(shown), SPHINX_ROLE.search(shown).group(0)
        for href, text in re.findall(r'<a class="autorefs autorefs-internal"[^>]*href="([^"]*#[^"]+)"'
                                     r"[^>]*><code>([\w.]+)</code></a>", shown):
            page, _, target = href.partition("#")
            links.add((folder, (folder / page).resolve(), target, text))
    roles = {
        (match.group(2).rsplit(".", 1)[-1] if match.group(1) else match.group(2))
        for source in (REPO / "src" / "attention").glob("[!_]*.py")
        for docstring in public_docstrings(source)
        for match in SPHINX_ROLE.finditer(docstring)
    }
    assert roles, "no docstring uses a Sphinx role: nothing was checked"
    assert any(on != to for on, to, _, _ in links), "no link leads to another page: none checked"
    for name in sorted(roles):
        targets = [(to, target) for _, to, target, text in links if text == name]
        assert targets, f"the role naming {name!r} is not a link on the API pages"
        assert all(target in ids.get(page, ()) and target.endswith(name.rsplit(".", 1)[-1])
                   for page, target in targets), targets


RETURNS_TABLE = re.compile(
    r'<span class="doc-section-title">(?:Returns|Yields):</span></p>\s*<table>.*?<tbody>(.*?)</tbody>', re.DOTALL
)


def test_api_reference_shows_each_return_value_in_one_row(built_site: Path) -> None:
    # Every Returns section describes one value in sentences; mkdocstrings read line by line
    # (returns_multiple_items) made each wrapped line a row of its own
    rows = [body.count('<tr class="doc-section-item">')
            for html in api_pages(built_site).values() for body in RETURNS_TABLE.findall(html)]
    assert len(rows) > 100, f"{len(rows)} Returns tables found: the pattern no longer matches"
    assert set(rows) == {1}, f"Returns tables of {sorted(set(rows) - {1})} rows"


def test_api_reference_shows_notation_legends_as_tables(built_site: Path) -> None:
    html = "".join(api_pages(built_site).values())
    legends = [
        source.stem
        for source in (REPO / "src" / "attention").glob("[!_]*.py")
        if re.search(r"^Notation \(see CONTRIBUTING\.md\):\n {4}\S", source.read_text("utf-8"),
                     re.MULTILINE)
    ]
    assert legends, "no module docstring has an indented notation legend: nothing was checked"
    tables = re.findall(
        r'Notation \(see the book\'s <a href="([^"]+)">notation</a>\):</p>\s*<table>', html
    )
    assert len(tables) == len(legends), f"{len(tables)} legend tables for modules {legends}"
    assert set(tables) == {"../../#notation"}, tables
    assert "CONTRIBUTING" not in SOURCE_LISTING.sub("", html), "a link to a file not on the site"


def test_generated_api_pages_have_no_edit_link(built_site: Path) -> None:
    def edit_links(html: str) -> int:
        return html.count('title="Edit this page"')

    def page(*parts: str) -> str:
        return built_site.joinpath(*parts, "index.html").read_text(encoding="utf-8")

    assert all(edit_links(html) == 0 for html in api_pages(built_site).values())
    assert edit_links(page("reference")) == 1  # written by hand
    assert edit_links(page("chapters", "01-why-attention")) == 1


def test_search_index_leaves_out_source_listings(built_site: Path) -> None:
    index = (built_site / "search" / "search_index.json").read_text(encoding="utf-8")
    assert '"location":"reference/fast-attention/' in index.replace(" ", ""), "the API is not indexed"
    assert "Source code in" not in index and "def softmax(" not in index
