"""Visiting pages of the site and recording them, crawling it from the home page, where its links
land, and what the built site holds (read from its files).

A visit waits for the page's fonts (KaTeX's among them: the math is typeset at build time) and
for its requests, then reads the DOM once with ``READ_PAGE`` into a :class:`Snapshot`.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from playwright.sync_api import Response

from .scripts import READ_PAGE, WAIT_FOR_FONTS
from .tab import Tab

# How long a visit waits for a page's fonts. It only catches fonts that never finish, with room
# for a machine busy with the rest of the run.
FONTS_TIMEOUT_MS = 60_000


@dataclass
class Snapshot:
    """What one visit to a page recorded."""

    url: str
    status: int | None  # HTTP status of the page itself
    fonts_state: str  # "loaded", or "timeout: fonts still loading after N ms"
    dom: dict[str, Any]  # what READ_PAGE (js/read_page.js) returned
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    offhost: list[str] = field(default_factory=list)

    @property
    def path(self) -> str:
        """The page's path on the site, such as ``/chapters/02-self-attention-without-weights/``."""
        return page_key(self.url)


def page_key(url: str) -> str:
    """The path that names a page: no query, no fragment, no trailing ``index.html``."""
    path = urlsplit(url).path
    return path[: -len("index.html")] if path.endswith("/index.html") else path


OnVisit = Callable[[Tab, Snapshot], None]


def visit(tab: Tab, url: str) -> Snapshot:
    """Open ``url`` in ``tab``, wait for its fonts and its requests, and record the page."""
    return visit_all([tab], [url])[0]


def visit_all(
    tabs: list[Tab],
    urls: list[str],
    fonts_timeout_ms: int = FONTS_TIMEOUT_MS,
    on_visit: OnVisit | None = None,
) -> list[Snapshot]:
    """Visit ``urls``, as many at a time as there are tabs; the snapshots come in URL order.

    URL i goes to tab i % len(tabs). A navigation is started (up to the first response) as soon
    as its tab is free, so the browser loads that many pages side by side while the page before
    is being recorded. ``on_visit(tab, snapshot)``, if given, is called while each page is still
    open in its tab (to take a screenshot, say).
    """
    started: dict[int, Response | None] = {}

    def start(i: int) -> None:
        tab = tabs[i % len(tabs)]
        tab.blank()
        started[i] = tab.page.goto(urls[i], wait_until="commit")

    for i in range(min(len(tabs), len(urls))):
        start(i)
    snaps = []
    for i, url in enumerate(urls):
        tab, response = tabs[i % len(tabs)], started.pop(i)
        tab.page.wait_for_load_state("load")
        fonts_state = tab.page.evaluate(WAIT_FOR_FONTS, fonts_timeout_ms)
        tab.settle()
        snaps.append(Snapshot(
            url=url,
            status=response.status if response else None,
            fonts_state=fonts_state,
            dom=tab.page.evaluate(READ_PAGE),
            console_errors=list(tab.console_errors),
            page_errors=list(tab.page_errors),
            failed=list(tab.failed),
            offhost=list(tab.offhost),
        ))
        if on_visit:
            on_visit(tab, snaps[-1])
        if i + len(tabs) < len(urls):
            start(i + len(tabs))
    return snaps


def is_page_link(url: str, origin: str) -> bool:
    """True for a link to an HTML page of the site served at ``origin``."""
    parts = urlsplit(url)
    return (
        f"{parts.scheme}://{parts.netloc}" == origin
        and (parts.path.endswith("/") or parts.path.endswith(".html"))
    )


def crawl(tabs: list[Tab], home: str, on_visit: OnVisit | None = None) -> dict[str, Snapshot]:
    """Visit every page reachable by links from the page ``home``; return the snapshots by
    page path.

    Pages are visited breadth first, each wave of newly found pages spread over ``tabs``. A link
    to a page that does not answer 200 is not followed (check_links reports it). ``on_visit`` is
    passed to :func:`visit_all`.
    """
    origin = "{0.scheme}://{0.netloc}".format(urlsplit(home))
    pages: dict[str, Snapshot] = {}
    wave, queued = [home], {page_key(home)}
    while wave:
        found = []
        for snap in visit_all(tabs, wave, on_visit=on_visit):
            if snap.status != 200:
                continue
            pages[snap.path] = snap
            for link in snap.dom["links"]:
                key = page_key(link)
                if is_page_link(link, origin) and key not in queued:
                    queued.add(key)
                    found.append(origin + key)
        wave = found
    return pages


class _Ids(HTMLParser):
    """Collect the ids (and ``<a name>``) of an HTML document."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for key, value in attrs:
            if value and (key == "id" or (tag == "a" and key == "name")):
                self.ids.add(value)


class LinkTargets:
    """Where an internal link can land: the ids of each page of the site.

    Pages the browser visited give the ids of their DOM; any other URL is fetched once, and its
    HTML parsed for ids only when a link asks for an anchor there (the navigation links every
    page, and parsing the whole site in Python takes seconds).
    """

    def __init__(self, pages: dict[str, Snapshot] | None = None) -> None:
        self._ids: dict[str, frozenset[str] | None] = {  # None: no such document
            _without_fragment(snap.url): frozenset(snap.dom["ids"])
            for snap in (pages or {}).values()
        }
        self._unparsed: dict[str, str] = {}  # HTML fetched, its ids not yet asked for

    def exists(self, url: str) -> bool:
        """True if the document at ``url`` exists."""
        key = _without_fragment(url)
        if key not in self._ids and key not in self._unparsed:
            try:
                with urllib.request.urlopen(key, timeout=10) as answer:
                    kind = answer.headers.get_content_type()
                    body = answer.read()
            except urllib.error.URLError:
                self._ids[key] = None
            else:
                if kind == "text/html":
                    self._unparsed[key] = body.decode("utf-8", errors="replace")
                else:
                    self._ids[key] = frozenset()
        return key in self._unparsed or self._ids[key] is not None

    def ids(self, url: str) -> frozenset[str] | None:
        """The ids of the document at ``url`` (empty for a file that is not HTML), or None."""
        key = _without_fragment(url)
        if not self.exists(url):
            return None
        if key in self._unparsed:
            parser = _Ids()
            parser.feed(self._unparsed.pop(key))
            self._ids[key] = frozenset(parser.ids)
        return self._ids[key]


def _without_fragment(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, page_key(url), "", ""))


# ---------------------------------------------------------------------------------------------
# What the built site holds, read from its files


def built_pages(site: Path) -> set[str]:
    """The URL path of every HTML page of the built site (404.html is served for missing URLs, at
    any depth, and is not a page a link leads to)."""
    return {
        page_key("/" + path.relative_to(site).as_posix())
        for path in site.rglob("*.html")
        if path.name != "404.html"
    }


def notebook_pages(site: Path) -> list[str]:
    """Pages rendered from a notebook: mkdocs-jupyter puts the .ipynb next to the page.

    The chapters' notebooks (downloads made by book.hooks.notebooks) sit in a folder without a
    page of their own, ``chapters/NN-name.ipynb``, and are not notebook pages.

    Raises:
        ValueError: if the site has no notebook page.
    """
    found = sorted(
        page_key("/" + path.parent.relative_to(site).as_posix() + "/")
        for path in site.rglob("*.ipynb")
        if (path.parent / "index.html").is_file() and path.parent != site / "chapters"
    )
    if not found:
        raise ValueError(f"expected notebook pages (.ipynb files) in {site}, found none")
    return found


def chapter_pages(site: Path) -> dict[str, str]:
    """The HTML of every chapter page of the built site, by URL path: the landing and section
    pages of a chapter read on several pages too.

    Raises:
        ValueError: if the site has no chapter page.
    """
    found = {
        page_key("/" + path.relative_to(site).as_posix()): path.read_text(encoding="utf-8")
        for path in sorted((site / "chapters").rglob("index.html"))
    }
    if not found:
        raise ValueError(f"expected chapter pages in {site / 'chapters'}, found none")
    return found


def headings(html: str) -> list[str]:
    """The text of the h1, h2 and h3 headings of a page's article."""
    article = html[html.find("<article"):]
    return [
        re.sub(r"<[^>]+>", "", text).replace("\u00b6", "").strip()
        for text in re.findall(r"<h[1-3][^>]*>(.*?)</h[1-3]>", article, flags=re.DOTALL)
    ]


def showcase_chapter(site: Path) -> str:
    """The chapter with the most math and code: it shows the most of the book's look."""
    pages = chapter_pages(site)
    return max(pages, key=lambda path: pages[path].count('class="arithmatex"')
               + pages[path].count("<pre"))
