"""The built site: a clean strict build, everything served from the site itself, math typeset at
build time on every page (notebook pages included), and output blocks that carry no copy button.

The site is built once per session by the ``site_build`` / ``built_site`` fixtures in conftest.py.
What a browser does with these pages is checked by the browser tests; these tests read the files.
"""

from __future__ import annotations

import ast
import re
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath
from urllib.parse import urljoin, urlsplit

import pytest

from book.pages import read_page

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"

# <link rel=...> values that make the browser fetch the linked URL.
FETCHING_RELS = {
    "stylesheet",
    "icon",
    "shortcut",
    "apple-touch-icon",
    "manifest",
    "preload",
    "modulepreload",
    "prefetch",
    "preconnect",
    "dns-prefetch",
}
# Attributes that load a resource, by tag.
RESOURCE_ATTRS = {
    "script": "src",
    "img": "src",
    "iframe": "src",
    "source": "src",
    "audio": "src",
    "video": "src",
    "track": "src",
    "embed": "src",
    "object": "data",
    "input": "src",
}
# A remote asset named in inline CSS or JS: url(https://...), @import "https://...",
# import("https://..."), or any quoted https URL of a script, stylesheet or font.
REMOTE_IN_CODE = re.compile(
    r"""url\(\s*['"]?https?://|@import\s+['"]https?://|import\(\s*['"]https?://"""
    r"""|['"]https?://[^'"\s]+\.(?:m?js|css|woff2?|ttf|otf|eot)(?:\?[^'"\s]*)?['"]""",
    re.IGNORECASE,
)

# Elements that have no end tag.
VOID_TAGS = {
    "area",
    "base",
    "br",
    "col",
    "embed",
    "hr",
    "img",
    "input",
    "link",
    "meta",
    "source",
    "track",
    "wbr",
}


class PageScan(HTMLParser):
    """Collect what a page loads, its output blocks, and its inline scripts and styles."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.resources: list[str] = []  # URLs the browser would fetch
        self.scripts: list[str] = []  # src of every <script>
        self.inline_code: list[str] = []  # text of inline <script> and <style>
        self.output_blocks: list[str] = []  # class attribute of every output block
        self.copy_markup_in_output = 0  # copy buttons found inside an output block
        self.download_links: list[str] = []  # href of every <a download>
        self.images: list[tuple[str, str]] = []  # (src, alt) of every <img>
        self.source_components = 0  # Material's GitHub-API-fetching repository widget
        self._stack: list[tuple[str, bool]] = []  # (tag, inside an output block)
        self._in_code = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        classes = a.get("class", "").split()
        in_output = bool(self._stack and self._stack[-1][1])
        if tag == "div" and {"highlight", "output"} <= set(classes):
            self.output_blocks.append(a["class"])
            in_output = True
        if in_output and (
            tag in {"button", "nav"} or "md-clipboard" in classes or "data-clipboard-target" in a
        ):
            self.copy_markup_in_output += 1
        if tag in RESOURCE_ATTRS and a.get(RESOURCE_ATTRS[tag]):
            self.resources.append(a[RESOURCE_ATTRS[tag]])
        if tag == "link" and FETCHING_RELS & set(a.get("rel", "").lower().split()):
            self.resources.append(a.get("href", ""))
        if tag == "script":
            self.scripts.append(a.get("src", ""))
        if tag == "img":
            self.images.append((a.get("src", ""), a.get("alt", "")))
        if tag == "a" and "download" in a:
            self.download_links.append(a.get("href", ""))
        if a.get("data-md-component") == "source":
            self.source_components += 1
        self._in_code = tag in {"script", "style"} and not a.get("src")
        if tag not in VOID_TAGS:
            self._stack.append((tag, in_output))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self._stack) - 1, -1, -1):
            if self._stack[i][0] == tag:
                del self._stack[i:]
                break
        self._in_code = False

    def handle_data(self, data: str) -> None:
        if self._in_code:
            self.inline_code.append(data)


def scan(html_file: Path) -> PageScan:
    """Parse one built page."""
    parser = PageScan()
    parser.feed(html_file.read_text(encoding="utf-8"))
    return parser


def html_pages(site: Path) -> list[Path]:
    """Every built HTML page."""
    return sorted(site.rglob("*.html"))


def is_remote(url: str) -> bool:
    """True for a URL outside the site (http(s) or protocol-relative)."""
    return urlsplit(url).scheme in {"http", "https"} or url.startswith("//")


def resolves_to(site: Path, page: Path, url: str) -> Path:
    """The file of the built site that a relative ``url`` on ``page`` points to."""
    page_url = PurePosixPath(page.relative_to(site).as_posix())
    path = urlsplit(urljoin(f"http://site/{page_url}", url)).path
    return site / path.lstrip("/")


def built_page(site: Path, source: Path) -> Path:
    """The built HTML of the page whose source is ``source`` (relative to docs/)."""
    if source.stem == "index":
        return site / source.parent / "index.html"
    return site / source.with_suffix("") / "index.html"


def output_fences(source: Path) -> int:
    """The number of ```{.text .output} blocks of a page, found by the page runner's scanner (the
    one fence scanner of the repository: fences shown inside other fences are not counted)."""
    return len(read_page(source).outputs)


def test_strict_build_has_no_warnings(site_build) -> None:
    assert site_build.returncode == 0, site_build.log
    problems = [
        line for line in site_build.log.splitlines() if re.match(r"\s*(WARNING|ERROR)\b", line)
    ]
    assert problems == [], "\n".join(problems)


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
# Link previews, the 404 page and the API reference (docs/hooks/pages.py, overrides/,
# docs/hooks/docstrings.py)

SITE_URL = re.search(
    r"^site_url:\s*(\S+)", (REPO / "mkdocs.yml").read_text(encoding="utf-8"), re.MULTILINE
).group(1)
SOCIAL_TAGS = ["og:type", "og:title", "og:description", "og:url", "twitter:card"]
# A Sphinx role as the package's docstrings write it: :func:`softmax`, :class:`~attention.X`.
SPHINX_ROLE = re.compile(r":(?:func|class|mod|meth|attr|exc|obj|data):`(~?)([\w.]+)`")
SOURCE_LISTING = re.compile(r'<details class="mkdocstrings-source".*?</details>', re.DOTALL)


class MetaTags(HTMLParser):
    """The ``<meta name|property=... content=...>`` tags of a page, by name."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: dict[str, list[str]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        key = a.get("name") or a.get("property")
        if tag == "meta" and key:
            self.tags.setdefault(key, []).append(a.get("content", ""))


def meta_tags(page: Path) -> dict[str, list[str]]:
    parser = MetaTags()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser.tags


def page_url(site: Path, page: Path) -> str:
    """The published address of a built page (site_url plus its path)."""
    path = page.relative_to(site).as_posix()
    return SITE_URL + (path.removesuffix("index.html") if page.name == "index.html" else path)


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


def test_api_reference_turns_sphinx_roles_into_links(built_site: Path) -> None:
    html = (built_site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    shown = SOURCE_LISTING.sub("", html)  # the source listings show the docstrings as written
    assert not SPHINX_ROLE.search(shown), SPHINX_ROLE.search(shown).group(0)
    ids = set(re.findall(r' id="([^"]+)"', html))
    links = set(re.findall(r'<a class="autorefs autorefs-internal"[^>]*href="#([^"]+)"[^>]*>'
                           r"<code>([\w.]+)</code></a>", shown))
    roles = {
        (match.group(2).rsplit(".", 1)[-1] if match.group(1) else match.group(2))
        for source in (REPO / "src" / "attention").glob("[!_]*.py")
        for docstring in public_docstrings(source)
        for match in SPHINX_ROLE.finditer(docstring)
    }
    assert roles, "no docstring uses a Sphinx role: nothing was checked"
    for name in sorted(roles):
        targets = [target for target, text in links if text == name]
        assert targets, f"the role naming {name!r} is not a link on the API page"
        assert all(t in ids and t.endswith(name.rsplit(".", 1)[-1]) for t in targets), targets


def test_api_reference_shows_notation_legends_as_tables(built_site: Path) -> None:
    html = (built_site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
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


def test_generated_api_page_has_no_edit_link(built_site: Path) -> None:
    def edit_links(page: Path) -> int:
        return page.read_text(encoding="utf-8").count('title="Edit this page"')

    assert edit_links(built_site / "reference" / "api" / "index.html") == 0
    assert edit_links(built_site / "chapters" / "01-why-attention" / "index.html") == 1


def test_search_index_leaves_out_source_listings(built_site: Path) -> None:
    index = (built_site / "search" / "search_index.json").read_text(encoding="utf-8")
    assert '"location":"reference/api/' in index.replace(" ", ""), "the API page is not indexed"
    assert "Source code in" not in index and "def softmax(" not in index
