"""The built site: a clean strict build, everything served from the site itself, local MathJax on
every page (notebook pages included), and output blocks that carry no copy button.

The site is built once per session by the ``site_build`` / ``built_site`` fixtures in conftest.py.
What a browser does with these pages is checked by the browser tests; these tests read the files.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath
from urllib.parse import urljoin, urlsplit

import pytest

from tests.markdown_runner.pages import read_page

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


def test_mathjax_is_served_by_the_site(built_site: Path) -> None:
    mathjax = built_site / "assets" / "mathjax"
    for rel in [
        "MathJax.js",
        "config/TeX-AMS-MML_HTMLorMML-full.js",
        "jax/input/TeX/config.js",
        "jax/output/HTML-CSS/fonts/STIX-Web/fontdata.js",
        "fonts/HTML-CSS/STIX-Web/woff/STIXMathJax_Main-Regular.woff",
        "extensions/TeX/AMSmath.js",
        "extensions/MathMenu.js",
    ]:
        assert (mathjax / rel).is_file(), rel
    assert not (mathjax / "jax/output/SVG").exists(), "the unused SVG fonts should be pruned"


@pytest.mark.parametrize("kind", ["chapters", "exercises"])
def test_every_page_loads_the_local_mathjax_once(built_site: Path, kind: str) -> None:
    pages = sorted((built_site / kind).rglob("index.html"))
    assert pages, f"no built pages under {kind}/"
    for page in pages:
        scripts = scan(page).scripts
        mathjax = [src for src in scripts if "MathJax.js" in src]
        assert len(mathjax) == 1, f"{page}: MathJax loaded {len(mathjax)} times: {mathjax}"
        assert resolves_to(built_site, page, mathjax[0]) == built_site / "assets/mathjax/MathJax.js"
        config = [src for src in scripts if src.endswith("mathjax-config.js")]
        assert len(config) == 1 and scripts.index(config[0]) < scripts.index(mathjax[0]), page
        assert resolves_to(built_site, page, config[0]).is_file(), page


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
