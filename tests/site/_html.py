"""Reading the built site's HTML: what a page loads, its meta tags, where a URL leads."""

from __future__ import annotations

import functools
import re
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath
from urllib.parse import urljoin, urlsplit

from book.constants import REPO
from book.pages import read_page

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


@functools.cache
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


SITE_URL = re.search(
    r"^site_url:\s*(\S+)", (REPO / "mkdocs.yml").read_text(encoding="utf-8"), re.MULTILINE
).group(1)


SOCIAL_TAGS = ["og:type", "og:title", "og:description", "og:url", "twitter:card"]


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
    """The page's <meta> tags (read from its <head> alone)."""
    parser = MetaTags()
    html = page.read_text(encoding="utf-8")
    parser.feed(html[: html.find("</head>") + len("</head>")] if "</head>" in html else html)
    return parser.tags


def page_url(site: Path, page: Path) -> str:
    """The published address of a built page (site_url plus its path)."""
    path = page.relative_to(site).as_posix()
    return SITE_URL + (path.removesuffix("index.html") if page.name == "index.html" else path)


_NOT_ELEMENTS = re.compile(r"<!--.*?-->|<(script|style|textarea)\b[^>]*>.*?</\1>", flags=re.DOTALL | re.IGNORECASE)
_START_TAG = re.compile(r"<[A-Za-z]")


def element_count(html: str) -> int:
    """The number of elements a browser makes of ``html`` (the DOM nodes that are elements): its
    start tags, counted outside comments and the text of scripts, styles and text areas (whose
    own element counts)."""
    return len(_START_TAG.findall(_NOT_ELEMENTS.sub("<x>", html)))


def heavy_pages(site: Path, max_bytes: int, max_elements: int) -> list[str]:
    """The chapter pages of the built ``site`` over ``max_bytes`` of HTML or ``max_elements``
    elements, each named with its size."""
    heavy = []
    for path in sorted((site / "chapters").rglob("index.html")):
        data = path.read_bytes()
        elements = element_count(data.decode("utf-8"))
        if len(data) > max_bytes or elements > max_elements:
            heavy.append(f"{path.parent.relative_to(site).as_posix()}/: {len(data):,} bytes, "
                         f"{elements:,} elements")
    return heavy
