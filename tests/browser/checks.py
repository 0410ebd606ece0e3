"""What a reader's browser must get from the book, written as checks that return problems.

Every ``check_*`` function returns a list of problems, one readable line each, and an empty list
when the page is fine. The same functions run against the real site (test_reader_experience.py)
and against copies of its pages broken on purpose (test_checks_catch_breakage.py), which proves
that each check notices the breakage it exists for.

Two kinds of checks:

- ``check_*(snapshot)`` read a :class:`Snapshot`, what one visit to a page recorded: the DOM
  once its fonts have loaded (the math is typeset at build time), the console errors, the
  requests that failed or left localhost.
- ``check_*(tab, ...)`` drive a live page: click a copy button, type into the search box, flip
  the light/dark toggle, download a notebook.

Pages are served on localhost by :class:`SiteServer`. The browser can reach no other host (its
proxy is a closed local port and its resolver knows only localhost), and a :class:`Tab` records
every request to another host, so a page that would fetch anything from the internet fails.
"""

from __future__ import annotations

import functools
import http.server
import json
import re
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import numpy as np
from playwright.sync_api import (
    Browser, BrowserContext, ConsoleMessage, Page, Playwright, Request, Response,
)
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import TimeoutError as PlaywrightTimeout

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--no-first-run", "--disable-sync",
    # With DEAD_PROXY below: no host but localhost resolves, should a request bypass the proxy.
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
]
LOCAL_HOSTS = {"localhost", "127.0.0.1"}
# Every request to another host goes to this proxy, a port nothing listens on, and fails. (Blocking
# through Playwright's request routing would stop every request of every page in Python: a fifth of
# the suite's browser time.)
DEAD_PROXY = {"server": "http://127.0.0.1:9", "bypass": ",".join(sorted(LOCAL_HOSTS))}
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
# The math is typeset at build time; a page waits only for its fonts (KaTeX's among them). The
# limit only catches fonts that never finish, with room for a machine busy with the rest of the run.
MATH_TIMEOUT_MS = 60_000


class SiteServer:
    """Serve a built site on a free localhost port, in a thread, under the URL path ``base``.

    ``overrides`` maps a URL path to the bytes served for it (a page broken on purpose), and a
    path in ``hidden`` answers 404 (a file deleted on purpose); the site folder is never touched.
    Like GitHub Pages, the server lets the browser reuse a file for ten minutes without asking
    again; with ``revalidate`` the browser asks every time (the answer may have changed).
    """

    def __init__(self, root: Path, base: str = "/", revalidate: bool = False) -> None:
        self.root, self.base = root, base
        self.cache_control = "no-cache" if revalidate else "max-age=600"
        self.overrides: dict[str, bytes] = {}
        self.hidden: set[str] = set()
        handler = functools.partial(_Handler, self, directory=str(root))
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.origin = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> SiteServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def path(self, path: str) -> str:
        """The URL path of a path of the site, such as ``chapters/`` or ``/chapters/``."""
        return self.base + path.lstrip("/")

    def url(self, path: str) -> str:
        """The absolute URL of a path of the site."""
        return self.origin + self.path(path)


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Files of the site under its base path, with the server's overrides and hidden paths
    applied; no access log."""

    def __init__(self, site: SiteServer, *args: Any, **kwargs: Any) -> None:
        self.site = site
        super().__init__(*args, **kwargs)

    def do_GET(self) -> None:  # the name http.server calls
        path = urlsplit(self.path).path
        if path in self.site.hidden or not path.startswith(self.site.base):
            self.send_error(404)
        elif path in self.site.overrides:
            body = self.site.overrides[path]
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            super().do_GET()

    def translate_path(self, path: str) -> str:
        return super().translate_path("/" + path[len(self.site.base) :])

    def end_headers(self) -> None:
        self.send_header("Cache-Control", self.site.cache_control)
        super().end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def launch(playwright: Playwright, executable: Path = CHROMIUM) -> Browser:
    """Start Debian's headless chromium with the arguments the tests rely on."""
    return playwright.chromium.launch(
        executable_path=str(executable), args=CHROMIUM_ARGS, proxy=DEAD_PROXY
    )


def is_local(url: str) -> bool:
    """True for a URL that the browser may fetch: localhost, or data inside the page itself."""
    parts = urlsplit(url)
    return parts.scheme in {"data", "blob", "about"} or parts.hostname in LOCAL_HOSTS


class Tab:
    """One browser page in its own context, recording each visit's requests to other hosts
    (which fail: see :func:`launch`), console errors, uncaught exceptions and failed requests."""

    def __init__(self, browser: Browser, viewport: dict[str, int], phone: bool = False) -> None:
        self.context: BrowserContext = browser.new_context(
            viewport=viewport,
            device_scale_factor=1,
            is_mobile=phone,
            has_touch=phone,
            color_scheme="light",
            permissions=["clipboard-read", "clipboard-write"],
            accept_downloads=True,
        )
        self.context.on("request", self._on_request)
        self.context.on("requestfinished", self._on_done)
        self.context.on("requestfailed", self._on_failed)
        self.context.on("response", self._on_response)
        self.page: Page = self.context.new_page()
        self.page.on("console", self._on_console)
        self.page.on("pageerror", lambda error: self.page_errors.append(str(error)))
        self.reset()

    def blank(self) -> None:
        """Leave the current page for an empty one and forget what earlier visits recorded.

        Whatever the old page still had in flight (a font, the search index) is cancelled, and
        its events are delivered before the navigation returns, so none leaks into the next visit.
        """
        self.page.goto("about:blank")
        self.reset()

    def reset(self) -> None:
        """Forget what earlier visits recorded."""
        self.offhost: list[str] = []  # requests to other hosts (they fail)
        self.console_errors: list[str] = []
        self.page_errors: list[str] = []  # uncaught exceptions
        self.failed: list[str] = []  # local requests that failed or answered 4xx/5xx
        self.requested: list[str] = []  # local requests made
        self._pending: set[Request] = set()

    def close(self) -> None:
        """Close the page and its context."""
        self.context.close()

    def _on_request(self, request: Request) -> None:
        if is_local(request.url):
            self.requested.append(request.url)
            self._pending.add(request)
        else:
            self.offhost.append(request.url)

    def _on_done(self, request: Request) -> None:
        self._pending.discard(request)

    def _on_failed(self, request: Request) -> None:
        self._pending.discard(request)
        # An off-host request is already recorded; ERR_ABORTED is a request cancelled by
        # the next navigation or turned into a download, not a missing file (that answers 404).
        if is_local(request.url) and "ERR_ABORTED" not in (request.failure or ""):
            self.failed.append(f"{request.url} ({request.failure})")

    def _on_response(self, response: Response) -> None:
        if response.status >= 400 and is_local(response.url):
            self.failed.append(f"{response.url} (HTTP {response.status})")

    def _on_console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.console_errors.append(message.text)

    def settle(self, timeout_s: float = 5.0) -> None:
        """Wait until no local request of the page is still in flight (search index, fonts)."""
        deadline = time.monotonic() + timeout_s
        while self._pending and time.monotonic() < deadline:
            self.page.wait_for_timeout(25)


# Resolves when the page's fonts have loaded (KaTeX's fonts draw the math, which the build has
# already typeset), or after ``timeout`` ms.
WAIT_FOR_MATH = """timeout => Promise.race([
  document.fonts.ready.then(() => "typeset"),
  new Promise(resolve => setTimeout(
    () => resolve(`timeout: fonts still loading after ${timeout} ms`), timeout)),
])"""

def rgba(css: str) -> tuple[float, float, float, float]:
    """``rgb(r, g, b)`` or ``rgba(r, g, b, a)`` as four numbers (alpha 1 when absent)."""
    inner = css[css.index("(") + 1 : css.index(")")].replace("/", ",").split(",")
    values = [float(v) for v in inner if v.strip()]
    return (*values[:3], values[3] if len(values) > 3 else 1.0)  # type: ignore[return-value]


def luminance(rgb: Any) -> Any:
    """WCAG 2.1 relative luminance of sRGB colours with 0..255 channels in the last axis: a
    number for one colour, an array for an array of pixels (a screenshot)."""
    c = np.asarray(rgb, dtype=float)[..., :3] / 255
    linear = np.where(c <= 0.03928, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    return linear @ np.array([0.2126, 0.7152, 0.0722])


def contrast(foreground: str, background: str) -> float:
    """WCAG contrast ratio of a (possibly translucent) text colour over an opaque background."""
    *fg, alpha = rgba(foreground)
    bg = rgba(background)[:3]
    seen = tuple(round(alpha * f + (1 - alpha) * b) for f, b in zip(fg, bg))  # as drawn
    light, dark = sorted((float(luminance(seen)), float(luminance(bg))), reverse=True)
    return (light + 0.05) / (dark + 0.05)


MIN_FIGURE_TEXT_PX = 9  # docs/hooks/figures.py's MIN_TEXT_PX
# For every inline figure: its name, the rendered size of its smallest text (a text's size is that
# of its largest characters: sub- and superscripts are drawn at 70 percent), its <text> count and
# whether any glyph is drawn as a path instead of text.
MEASURE_FIGURES = """() => [...document.querySelectorAll('.attn-figure > svg')].map(svg => {
  const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
  const texts = [...svg.querySelectorAll('text')];
  const sizes = texts.map(t => Math.max(...[t, ...t.querySelectorAll('tspan')].map(
    e => parseFloat(getComputedStyle(e).fontSize))));
  return {name: svg.parentElement.dataset.figure, label: svg.getAttribute('aria-label') || '',
          smallest: Math.min(...sizes) * scale, texts: texts.length,
          glyphPaths: svg.querySelectorAll('[id*="DejaVu"]').length};
})"""

# For every table of the page: whether it fits its column or scrolls in a box inside the page,
# whether its first column stays in view while it scrolls, and every code name in it that breaks
# across lines (an inline element that breaks has more than one box).
MEASURE_TABLES = """() => [...document.querySelectorAll('.md-content table')].map(t => {
  const column = t.closest('.md-typeset').getBoundingClientRect().right;
  const fits = t.getBoundingClientRect().right <= column + 1;
  let box = null;  // the box that scrolls it: the table itself, or the nearest ancestor that does
  for (let e = t; e && e !== document.body; e = e.parentElement) {
    const scrolling = ['auto', 'scroll'].includes(getComputedStyle(e).overflowX);
    if (scrolling && e.scrollWidth > e.clientWidth + 1) { box = e; break; }
  }
  const first = t.querySelector('tr > :first-child');
  return {
    name: [...t.querySelectorAll('th')].map(th => th.textContent.trim()).join(' | ').slice(0, 70),
    fits,
    scrolls: !!box && box.getBoundingClientRect().right <= document.documentElement.clientWidth + 1,
    sticky: !!first && getComputedStyle(first).position === 'sticky',
    broken: [...t.querySelectorAll('code')].filter(c => c.getClientRects().length > 1).map(c => c.textContent),
  };
})"""

# Everything the snapshot checks need, read from the DOM in one call.
READ_PAGE = r"""() => {
  const RENDERED = ".katex";
  // Text a reader reads as prose: not code, not KaTeX's output (its MathML copy holds the TeX).
  const NOT_PROSE = "script, style, template, noscript, pre, code, kbd, samp, textarea, " +
    ".katex, .md-search";
  const short = s => s.replace(/\s+/g, " ").trim().slice(0, 70);
  const around = (s, i) => short(s.slice(Math.max(0, i - 25), i + 35));

  const rawMath = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const el = node.parentElement;
    if (!el || el.closest(NOT_PROSE)) continue;
    const text = node.nodeValue;
    // Display delimiters and \( \) anywhere; single dollars only in notebook Markdown, where
    // $...$ is the inline math syntax (elsewhere a dollar sign is just a dollar sign).
    let found = /\$\$|\\\(|\\\[/.exec(text);
    if (!found && el.closest(".jp-RenderedMarkdown, .jp-RenderedLatex")) {
      found = /(?<![\\$])\$[^\s$][^$]*\$/.exec(text);
    }
    if (found) rawMath.push(around(text, found.index));
  }

  const arithmatex = [...document.querySelectorAll(".arithmatex")];
  const mathml = document.querySelector(".katex-mathml");
  const math = {
    elements: arithmatex.length,
    rendered: document.querySelectorAll(RENDERED).length,
    untypeset: arithmatex.filter(el => !el.querySelector(RENDERED))
      .map(el => short(el.textContent)),
    // KaTeX's stylesheet hides the MathML copy of each formula (kept for screen readers).
    styled: !mathml || getComputedStyle(mathml).position === "absolute",
    // TeX that KaTeX could not parse, rendered as its source in red.
    errors: [...document.querySelectorAll(".katex-error")].map(el => short(el.textContent)),
  };

  // Display equations: wider than their box, or an equation number outside the box or over the
  // equation.
  const equations = [];
  for (const box of document.querySelectorAll(".md-content div.arithmatex")) {
    const tex = short((box.querySelector("annotation") || box).textContent);
    const outer = box.getBoundingClientRect();
    if (box.scrollWidth > box.clientWidth + 1) {
      equations.push(`${tex}: ${box.scrollWidth}px wide in a ${box.clientWidth}px box`);
    }
    const tag = box.querySelector(".katex-tag");
    if (!tag) continue;
    const number = tag.getBoundingClientRect();
    if (!number.width || number.left < outer.left - 1 || number.right > outer.right + 1) {
      equations.push(`${tex}: its number ${short(tag.textContent)} is not inside the box`);
    }
    const covered = [...box.querySelectorAll(".katex-html > .katex-base")].some(part => {
      const r = part.getBoundingClientRect();
      return r.width && r.right > number.left + 1 && r.left < number.right - 1 &&
        r.bottom > number.top + 1 && r.top < number.bottom - 1;
    });
    if (covered) equations.push(`${tex}: its number ${short(tag.textContent)} covers the equation`);
  }

  // Code and output blocks: Material's (pre > code; output blocks have the class "output") and
  // a notebook's (input cells with mkdocs-jupyter's <clipboard-copy>, and output areas).
  const COPY = "[data-clipboard-target], [data-clipboard-text], .md-clipboard, " +
    "[data-md-type=copy], clipboard-copy";
  const block = (box, output, text) =>
    ({output, buttons: box.querySelectorAll(COPY).length, text: short(text.textContent)});
  const blocks = [...document.querySelectorAll(".md-content pre > code")]
    .filter(code => !code.closest(".jupyter-wrapper"))
    .map(code => block(
      code.closest(".highlight") || code.parentElement, !!code.closest(".output"), code))
    .concat([...document.querySelectorAll(".jupyter-wrapper .jp-CodeCell .jp-InputArea-editor")]
      .map(cell => block(cell, false, cell.querySelector("pre") || cell)))
    .concat([...document.querySelectorAll(".jupyter-wrapper .jp-OutputArea-output")]
      .map(out => block(out, true, out)));

  const images = [...document.querySelectorAll("img")].map(img => ({
    src: (img.getAttribute("src") || "").slice(0, 80),
    alt: img.getAttribute("alt"),
    broken: img.complete && img.naturalWidth === 0,
  }));

  // Horizontal overflow: the outermost elements that stick out on the right, unless a box that
  // scrolls or clips them (a wide code block, a wide equation) keeps them inside the page.
  const root = document.documentElement;
  const width = root.clientWidth;
  const wide = [];
  if (root.scrollWidth > width + 1) {
    const sticksOut = el => el.getBoundingClientRect().right > width + 1;
    const contained = el => {
      for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
        if (getComputedStyle(p).overflowX !== "visible" && !sticksOut(p)) return true;
      }
      return false;
    };
    for (const el of document.body.querySelectorAll("*")) {
      const box = el.getBoundingClientRect();
      if (box.width === 0 || !sticksOut(el)) continue;
      if (el.parentElement !== document.body && sticksOut(el.parentElement)) continue;
      if (contained(el)) continue;
      const name = el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") +
        [...el.classList].slice(0, 3).map(c => "." + c).join("");
      wide.push(`${name} reaches ${Math.round(box.right)}px`);
      if (wide.length === 5) break;
    }
  }

  const ids = [...document.querySelectorAll("[id]")].map(el => el.id)
    .concat([...document.querySelectorAll("a[name]")].map(a => a.name));

  return {
    headings: [...document.querySelectorAll(".md-content h1, .md-content h2, .md-content h3")]
      .map(h => short(h.textContent)),
    rawMath, math, equations, blocks, images, ids, tables: (MEASURE_TABLES)(), figures: (MEASURE_FIGURES)(),
    links: [...new Set([...document.querySelectorAll("a[href]")].map(a => a.href))],
    overflow: {scrollWidth: root.scrollWidth, clientWidth: width, wide},
  };
}"""


READ_PAGE = READ_PAGE.replace("(MEASURE_FIGURES)", f"({MEASURE_FIGURES})").replace(
    "(MEASURE_TABLES)", f"({MEASURE_TABLES})")


def figure_problems(figures: list[dict[str, Any]], where: str) -> list[str]:
    """Problems of measured figures (``MEASURE_FIGURES``): text under ``MIN_FIGURE_TEXT_PX``, text
    drawn as paths, no label for screen readers."""
    problems = []
    for figure in figures:
        name = f"{where}: {figure['name']}"
        if figure["smallest"] < MIN_FIGURE_TEXT_PX:
            problems.append(f"{name}: text {figure['smallest']:.1f} px < {MIN_FIGURE_TEXT_PX} px")
        if figure["texts"] == 0 or figure["glyphPaths"]:
            problems.append(f"{name}: text drawn as paths, not as SVG text")
        if not figure["label"].strip():
            problems.append(f"{name}: no aria-label for screen readers")
    return problems


@dataclass
class Snapshot:
    """What one visit to a page recorded."""

    url: str
    status: int | None  # HTTP status of the page itself
    math_state: str  # "typeset" (fonts loaded) or "timeout: fonts still loading after N ms"
    dom: dict[str, Any]
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


def visit(tab: Tab, url: str) -> Snapshot:
    """Open ``url`` in ``tab``, wait for its math and its requests, and record the page."""
    return visit_all([tab], [url])[0]


OnVisit = Callable[[Tab, "Snapshot"], None]


def visit_all(
    tabs: list[Tab],
    urls: list[str],
    math_timeout_ms: int = MATH_TIMEOUT_MS,
    on_visit: OnVisit | None = None,
) -> list[Snapshot]:
    """Visit ``urls``, as many at a time as there are tabs; the snapshots come in URL order.

    URL i goes to tab i % len(tabs). A navigation is started (up to the first response) as soon
    as its tab is free, so the browser loads and typesets that many pages side by side while
    the page before is being recorded. ``on_visit(tab, snapshot)``, if given, is called while
    each page is still open in its tab (to take a screenshot, say).
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
        math_state = tab.page.evaluate(WAIT_FOR_MATH, math_timeout_ms)
        tab.settle()
        snaps.append(Snapshot(
            url=url,
            status=response.status if response else None,
            math_state=math_state,
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

    Pages the browser visited give the ids of their DOM; any other URL is fetched once (its
    ids parsed from the HTML). ``ids`` returns None for a URL that does not exist.
    """

    def __init__(self, pages: dict[str, Snapshot] | None = None) -> None:
        self._known: dict[str, frozenset[str] | None] = {
            _without_fragment(snap.url): frozenset(snap.dom["ids"])
            for snap in (pages or {}).values()
        }

    def ids(self, url: str) -> frozenset[str] | None:
        """The ids of the document at ``url`` (empty for a file that is not HTML), or None."""
        key = _without_fragment(url)
        if key not in self._known:
            try:
                with urllib.request.urlopen(key, timeout=10) as answer:
                    kind = answer.headers.get_content_type()
                    body = answer.read()
            except urllib.error.URLError:
                self._known[key] = None
            else:
                parser = _Ids()
                if kind == "text/html":
                    parser.feed(body.decode("utf-8", errors="replace"))
                self._known[key] = frozenset(parser.ids)
        return self._known[key]


def _without_fragment(url: str) -> str:
    parts = urlsplit(url)
    path = page_key(url)
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


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

    The chapters' notebooks (downloads made by docs/hooks/notebooks.py) sit in a folder without
    a page of their own, ``chapters/NN-name.ipynb``, and are not notebook pages.
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
    """The HTML of every chapter page of the built site, by URL path."""
    found = {
        page_key("/" + path.relative_to(site).as_posix()): path.read_text(encoding="utf-8")
        for path in sorted((site / "chapters").glob("*/index.html"))
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


# ---------------------------------------------------------------------------------------------
# Checks of one snapshot


def check_loads_cleanly(snap: Snapshot) -> list[str]:
    """The page answers 200 and shows no console error, uncaught exception or failed request."""
    problems = [] if snap.status == 200 else [f"{snap.path}: the page answered HTTP {snap.status}"]
    problems += [f"{snap.path}: console error: {text}" for text in snap.console_errors]
    problems += [f"{snap.path}: uncaught exception: {text}" for text in snap.page_errors]
    problems += [f"{snap.path}: request failed: {text}" for text in snap.failed]
    return problems


def check_stays_on_host(snap: Snapshot) -> list[str]:
    """The page asks nothing of any host but localhost (each such request was blocked)."""
    return [f"{snap.path}: requested {url} from outside the site" for url in snap.offhost]


def check_math(snap: Snapshot) -> list[str]:
    """Math is typeset: no raw delimiters in the text, every formula rendered by KaTeX and drawn
    with KaTeX's stylesheet, no TeX errors."""
    math, where = snap.dom["math"], snap.path
    # TeX is quoted as written ('\\alpha' would be unreadable in a report).
    problems = [f"{where}: raw math left in the text: '{text}'" for text in snap.dom["rawMath"]]
    problems += [f"{where}: formula not typeset: '{text}'" for text in math["untypeset"]]
    problems += [f"{where}: KaTeX error: '{text}'" for text in math["errors"]]
    if math["elements"] and not math["rendered"]:
        problems.append(f"{where}: {math['elements']} formulas and no KaTeX output")
    if not math["styled"]:
        problems.append(f"{where}: KaTeX's stylesheet is not applied (MathML copies shown)")
    if snap.math_state.startswith("timeout"):
        problems.append(f"{where}: {snap.math_state}")
    return problems


def check_equations_fit(snap: Snapshot) -> list[str]:
    """Every display equation fits its box, and its number is shown inside the box, clear of it."""
    return [f"{snap.path}: {problem}" for problem in snap.dom["equations"]]


def check_links(snap: Snapshot, targets: LinkTargets) -> list[str]:
    """Every link to the site itself reaches a file, and its #anchor an element of that page."""
    origin = "{0.scheme}://{0.netloc}".format(urlsplit(snap.url))
    problems = []
    for link in snap.dom["links"]:
        parts = urlsplit(link)
        if f"{parts.scheme}://{parts.netloc}" != origin:
            continue  # another site (the repository, a paper): not followed
        ids = targets.ids(link)
        if ids is None:
            problems.append(f"{snap.path}: link to {parts.path} leads nowhere (not found)")
        elif parts.fragment and unquote(parts.fragment) not in ids:
            problems.append(
                f"{snap.path}: link to {page_key(link)}#{parts.fragment}: no such anchor there"
            )
    return problems


def check_images(snap: Snapshot) -> list[str]:
    """Every image has alt text and loads."""
    problems = []
    for image in snap.dom["images"]:
        if not (image["alt"] or "").strip():
            problems.append(f"{snap.path}: <img src={image['src']!r}> has no alt text")
        if image["broken"]:
            problems.append(f"{snap.path}: <img src={image['src']!r}> did not load")
    return problems


def check_copy_buttons(snap: Snapshot) -> list[str]:
    """Each code block (a notebook's code cells too) has a copy button and no output has one."""
    problems = []
    for block in snap.dom["blocks"]:
        if block["output"] and block["buttons"]:
            problems.append(f"{snap.path}: output block has a copy button: {block['text']!r}")
        if not block["output"] and not block["buttons"]:
            problems.append(f"{snap.path}: code block has no copy button: {block['text']!r}")
    return problems


def check_fits_width(snap: Snapshot) -> list[str]:
    """Nothing sticks out of the viewport, so the page never scrolls (or is cut) sideways."""
    overflow = snap.dom["overflow"]
    if overflow["scrollWidth"] <= overflow["clientWidth"] + 1:
        return []
    culprits = "; ".join(overflow["wide"]) or "no single element found"
    return [
        f"{snap.path}: page is {overflow['scrollWidth']}px wide in a "
        f"{overflow['clientWidth']}px viewport ({culprits})"
    ]


def table_problems(tables: list[dict[str, Any]], where: str) -> list[str]:
    """Problems of measured tables (``MEASURE_TABLES``): cut off, a first column that scrolls
    away, a code name broken across lines."""
    problems = []
    for table in tables:
        name = f"{where}: table [{table['name']}]"
        if not table["fits"] and not table["scrolls"]:
            problems.append(f"{name} is wider than its column and does not scroll inside the page")
        if not table["fits"] and not table["sticky"]:
            problems.append(f"{name} scrolls, but its first column does not stay in view")
        problems += [f"{name}: the code name {text!r} breaks across lines" for text in table["broken"]]
    return problems


def check_tables(snap: Snapshot) -> list[str]:
    """Every table fits its column or scrolls in its own box inside the page, with its first
    column in view; no code name in a table breaks across lines."""
    return table_problems(snap.dom["tables"], snap.path)


SNAPSHOT_CHECKS = (
    check_loads_cleanly, check_stays_on_host, check_math, check_images, check_copy_buttons,
)


# ---------------------------------------------------------------------------------------------
# Checks that drive a live page


def check_copy_button_copies(tab: Tab) -> list[str]:
    """Clicking the first code block's copy button puts exactly that code on the clipboard
    (on a chapter, Material's button; on a notebook page, mkdocs-jupyter's)."""
    page, where = tab.page, page_key(tab.page.url)
    button = page.locator(
        ".md-content .highlight:not(.output) [data-clipboard-target], .md-content clipboard-copy"
    ).first
    if button.count() == 0:
        return [f"{where}: no code block with a copy button to click"]
    # Material copies the element its button targets; mkdocs-jupyter the element named by `for`.
    code = button.evaluate(
        "b => (b.hasAttribute('for') ? document.getElementById(b.getAttribute('for'))"
        " : document.querySelector(b.getAttribute('data-clipboard-target'))).textContent"
    )
    before = "(the clipboard before the click)"
    page.evaluate("text => navigator.clipboard.writeText(text)", before)
    button.click()
    copied, deadline = before, time.monotonic() + 10  # a busy machine can be slow to copy
    while copied == before and time.monotonic() < deadline:
        page.wait_for_timeout(50)
        copied = page.evaluate("navigator.clipboard.readText()")
    if copied == before:
        return [f"{where}: the copy button of {code.strip()[:40]!r} copied nothing"]
    if copied != code.rstrip():
        return [f"{where}: the copy button copied {copied[:60]!r}, not the code {code[:60]!r}"]
    return []


def check_search(tab: Tab, home: str, query: str, expected: set[str]) -> list[str]:
    """Typing ``query`` into the search box of the page ``home`` lists every page in
    ``expected`` (URL paths), from an index served by the site, and the result for such a page
    opens it."""
    page = tab.page
    tab.blank()
    page.goto(home, wait_until="load")
    tab.settle()  # the search index is fetched as the page loads
    index = [url for url in tab.requested if url.endswith("/search/search_index.json")]
    if not index:
        return [f"search for {query!r}: the page did not load the search index from the site"]
    failed = [text for text in tab.failed if "/search/search_index.json" in text]
    if failed:
        return [f"search for {query!r}: loading the search index failed: {failed[0]}"]
    box = page.locator(".md-search__input")
    box.click()
    box.fill(query)
    box.press("End")  # Material searches on keyup
    try:
        page.locator(".md-search-result__item").first.wait_for(timeout=10_000)
    except PlaywrightTimeout:
        meta = page.locator(".md-search-result__meta").inner_text()
        return [f"search for {query!r} listed no results; the search panel says {meta!r}"]
    results = page.locator(".md-search-result__item > a.md-search-result__link")
    for _ in range(10):  # Material renders ten results, then more as the list scrolls
        count = results.count()
        results.nth(count - 1).scroll_into_view_if_needed()
        page.wait_for_timeout(100)
        if results.count() == count:
            break
    hrefs = results.evaluate_all("links => links.map(a => a.href)")
    found = [page_key(href) for href in hrefs]
    problems = [
        f"search for {query!r} does not list {path} (it lists {found})"
        for path in sorted(expected - set(found))
    ]
    hit = next((i for i, path in enumerate(found) if path in expected), None)
    if hit is not None:
        results.nth(hit).click()
        try:
            page.wait_for_url(
                lambda url: page_key(url) == found[hit], wait_until="commit", timeout=10_000
            )
        except PlaywrightTimeout:
            problems.append(f"the search result for {found[hit]} left the tab at {page.url}")
        tab.blank()  # the page opened: no need to let it typeset its math
    return problems


def color_scheme(page: Page) -> tuple[str, str]:
    """Material's palette attribute and the page's background colour."""
    return page.evaluate(
        "[document.body.getAttribute('data-md-color-scheme'),"
        " getComputedStyle(document.body).backgroundColor]"
    )


def check_palette_toggle(tab: Tab, shoot: Callable[[str], None] | None = None) -> list[str]:
    """The header's toggle switches the palette and back, and the page's colours follow.

    ``shoot``, if given, is called in each palette with its name ("default" is light, "slate"
    dark): before the first switch and after it.
    """
    page, where = tab.page, page_key(tab.page.url)
    start = color_scheme(page)
    if shoot:
        shoot(start[0])
    problems = []
    for flip in range(2):
        toggle = page.locator("form[data-md-component=palette] label").filter(visible=True)
        if toggle.count() != 1:
            return [*problems, f"{where}: {toggle.count()} visible light/dark toggles, expected 1"]
        before = color_scheme(page)
        toggle.click()
        try:
            page.wait_for_function(
                "s => document.body.getAttribute('data-md-color-scheme') !== s", arg=before[0],
                timeout=10_000,
            )
        except PlaywrightTimeout:
            return [*problems, f"{where}: the toggle left the palette at {before[0]!r}"]
        after = color_scheme(page)
        if after[1] == before[1]:
            problems.append(
                f"{where}: palette {before[0]} -> {after[0]} kept background {after[1]}"
            )
        if flip == 0 and shoot:
            shoot(after[0])
    if color_scheme(page) != start:
        problems.append(f"{where}: toggling twice did not come back to {start}")
    return problems


def check_notebook(tab: Tab, url: str, downloads: Path, load: bool = True) -> list[str]:
    """A notebook page renders its cells and its download button saves a valid .ipynb.

    With ``load=False`` the tab already shows the page at ``url``."""
    page, where = tab.page, page_key(url)
    if load:
        page.goto(url, wait_until="load")
    cells = page.locator(".jupyter-wrapper .jp-Cell").count()
    problems = [] if cells else [f"{where}: notebook not rendered (no cell in .jupyter-wrapper)"]
    link = page.locator('a[download][href$=".ipynb"]')
    if link.count() == 0:
        return [*problems, f"{where}: no .ipynb download link"]
    try:
        with page.expect_download(timeout=10_000) as started:
            link.first.click()
        download = started.value
    except PlaywrightError as error:
        return [*problems, f"{where}: clicking the download link downloaded nothing ({error})"]
    if download.failure():
        return [*problems, f"{where}: download of the notebook failed: {download.failure()}"]
    saved = downloads / download.suggested_filename
    download.save_as(saved)
    try:
        notebook = json.loads(saved.read_text(encoding="utf-8"))
    except ValueError as error:
        return [*problems, f"{where}: downloaded {saved.name} is not a notebook: {error}"]
    if notebook.get("nbformat") != 4 or not notebook.get("cells"):
        problems.append(f"{where}: downloaded {saved.name} is not a notebook with cells")
    return problems
