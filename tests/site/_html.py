"""Reading the built site's HTML: what a page loads, its meta tags, where a URL leads."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath
from urllib.parse import urljoin, urlsplit

from lxml import html as lxml_html

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


def _has_class(name: str) -> str:
    """An XPath test: the element's class attribute lists ``name``."""
    return f"contains(concat(' ', normalize-space(@class), ' '), ' {name} ')"


# The fields of PageScan are found by libxml2 (lxml), in C: the pages of the site are 41 MB of
# HTML, which Python's html.parser took 9 s to read.
_OUTPUT_BLOCKS = f"//div[{_has_class('highlight')} and {_has_class('output')}]"
_COPY_MARKUP = f"descendant-or-self::*[self::button or self::nav or {_has_class('md-clipboard')} or @data-clipboard-target]"


@dataclass
class PageScan:
    """What a page loads, its output blocks, and its inline scripts and styles."""

    resources: list[str]  # URLs the browser would fetch
    scripts: list[str]  # src of every <script> ("" for an inline one)
    inline_code: list[str]  # text of inline <script> and <style>
    output_blocks: list[str]  # class attribute of every output block
    copy_markup_in_output: int  # copy buttons found inside an output block
    download_links: list[str]  # href of every <a download>
    images: list[tuple[str, str]]  # (src, alt) of every <img>
    source_components: int  # Material's GitHub-API-fetching repository widget


def scan_html(document: str | bytes) -> PageScan:
    """Parse one page's HTML."""
    root = lxml_html.document_fromstring(document)
    resources = []
    for element in root.iter(*RESOURCE_ATTRS, "link"):
        if element.tag != "link":
            if url := element.get(RESOURCE_ATTRS[element.tag]):
                resources.append(url)
        elif FETCHING_RELS & set(element.get("rel", "").lower().split()):
            resources.append(element.get("href", ""))
    blocks = root.xpath(_OUTPUT_BLOCKS)
    return PageScan(
        resources=resources,
        scripts=[script.get("src", "") for script in root.xpath("//script")],
        inline_code=[e.text or "" for e in root.xpath("//script[not(@src) or @src = ''] | //style")],
        output_blocks=[block.get("class") for block in blocks],
        copy_markup_in_output=sum(len(block.xpath(_COPY_MARKUP)) for block in blocks),
        download_links=[a.get("href", "") for a in root.xpath("//a[@download]")],
        images=[(img.get("src", ""), img.get("alt", "")) for img in root.xpath("//img")],
        source_components=len(root.xpath("//*[@data-md-component = 'source']")),
    )


@functools.cache
def scan(html_file: Path) -> PageScan:
    """Parse one built page."""
    return scan_html(html_file.read_bytes())


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
