"""The built book in a real browser, as a reader at a desktop uses it: search, copy buttons, the
light/dark toggle and the notebook downloads, with screenshots for people to look at.

Each page is loaded once on a desktop tab (a chapter is a long page to load and lay out), and
every check that applies runs while it is open; the tests then read what the visits recorded.
Pages are chosen from the built site's files, so this module needs no crawl and runs beside
test_reader_experience.py. Screenshots go to artifacts/screenshots/.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Browser

from book.browser.checks import SNAPSHOT_CHECKS, check_fits_width
from book.browser.chromium import DESKTOP
from book.browser.crawl import (
    built_pages,
    chapter_pages,
    headings,
    notebook_pages,
    showcase_chapter,
    visit,
)
from book.browser.live_checks import (
    check_copy_button_copies,
    check_notebook,
    check_palette_toggle,
    check_search,
)
from book.browser.server import SiteServer
from book.browser.tab import Tab

# All tests of this module in one process (one chromium, its pages visited once), scheduled
# after the other site tests, by when the site is built (rank 3: see tools/book/scheduling.py).
pytestmark = pytest.mark.browser_group("browser-desktop", rank=3)


@pytest.mark.parametrize("query", ["softmax", "causal"])
def test_search_finds_the_chapters_about(query: str, site: SiteServer, desktop: Tab) -> None:
    # The right pages: the chapters with a heading about the query.
    expected = {
        path
        for path, html in chapter_pages(site.root).items()
        if any(query in heading.lower() for heading in headings(html))
    }
    assert expected, f"no chapter has a heading about {query!r}: nothing to search for"
    assert check_search(desktop, site.url("/"), query, expected) == []


def test_pages_get_the_real_search_index_only_where_a_check_searches(
    site: SiteServer, desktop: Tab
) -> None:
    # Indexing the 1.9 MB index costs every page load about a second of CPU: the test server
    # answers it with an empty one, except inside real_search_index (check_search uses it).
    count = "fetch('search/search_index.json').then(r => r.json()).then(i => i.docs.length)"
    desktop.blank()
    desktop.page.goto(site.url("/"), wait_until="load")
    assert desktop.page.evaluate(count) == 0
    with desktop.real_search_index():
        assert desktop.page.evaluate(count) > 100
    assert desktop.page.evaluate(count) == 0


@dataclass
class Tour:
    """What the desktop tour recorded: the problems each check found, and what it looked at."""

    visited: list[str] = field(default_factory=list)
    snapshot: list[str] = field(default_factory=list)  # every snapshot check, at desktop width
    widths: set[int] = field(default_factory=set)
    palette: list[str] = field(default_factory=list)
    copied: list[str] = field(default_factory=list)  # pages whose copy button was clicked
    copy: list[str] = field(default_factory=list)
    notebooks: list[str] = field(default_factory=list)
    notebook: list[str] = field(default_factory=list)
    screenshots: list[Path] = field(default_factory=list)


@pytest.fixture(scope="module")
def tour(
    site: SiteServer, desktop: Tab, screenshots: Path, tmp_path_factory: pytest.TempPathFactory
) -> Tour:
    """The home page, the showcase chapter, every notebook page and the appendix, each loaded
    once on the desktop tab; while a page is open, every check that applies runs on it: the
    snapshot checks, light/dark with screenshots, a copy button, the notebook download. (One
    load per page: a chapter is a long page to load and lay out.)"""
    appendix = sorted(path for path in built_pages(site.root) if path.startswith("/appendix/"))
    assert appendix, "the built site has no appendix page"
    notebooks = notebook_pages(site.root)
    shown = {
        "home": "/",
        "chapter": showcase_chapter(site.root),
        **{("notebook" if i == 0 else f"notebook-{i + 1}"): nb for i, nb in enumerate(notebooks)},
        "appendix": appendix[0],
    }
    page, found = desktop.page, Tour()
    downloads = tmp_path_factory.mktemp("downloads")

    def shoot(name: str, scheme: str) -> None:
        light_or_dark = {"default": "light", "slate": "dark"}[scheme]
        page.evaluate("window.scrollTo(0, 0)")
        page.wait_for_timeout(300)  # Material's header title slides back as the h1 returns
        found.screenshots.append(screenshots / f"{name}-{light_or_dark}.png")
        page.screenshot(path=str(found.screenshots[-1]))
        code = page.locator(".highlight:has(+ .highlight.output)")
        if name == "chapter" and code.count():  # a code block and its output panel
            code.first.evaluate("block => block.scrollIntoView({block: 'center'})")
            page.wait_for_timeout(300)
            found.screenshots.append(screenshots / f"{name}-code-{light_or_dark}.png")
            page.screenshot(path=str(found.screenshots[-1]))

    for name, path in shown.items():
        url = site.url(path)
        snap = visit(desktop, url)
        found.visited.append(path)
        found.snapshot += [problem for check in SNAPSHOT_CHECKS for problem in check(snap)]
        found.snapshot += check_fits_width(snap)
        found.widths.add(snap.dom["overflow"]["clientWidth"])
        # Screenshots first: the copy button leaves a "Copied" note on the page for a while.
        shots = None if name.startswith("notebook-") else name
        found.palette += check_palette_toggle(
            desktop, (lambda scheme, shots=shots: shoot(shots, scheme)) if shots else None
        )
        if name == "chapter" or path in notebooks:
            found.copied.append(path)
            found.copy += check_copy_button_copies(desktop)
        if path in notebooks:
            found.notebooks.append(path)
            found.notebook += check_notebook(desktop, url, downloads, load=False)
    return found


def test_desktop_pages_pass_every_snapshot_check(tour: Tour) -> None:
    assert not tour.snapshot, "\n".join(tour.snapshot)
    assert tour.widths == {DESKTOP["width"]}, f"the desktop tab laid pages out {tour.widths} px"
    assert "/" in tour.visited and len(tour.visited) >= 4, tour.visited


def test_copy_button_copies_the_code(tour: Tour) -> None:
    assert not tour.copy, "\n".join(tour.copy)
    assert any(path.startswith("/chapters/") for path in tour.copied), tour.copied


def test_notebook_pages_render_download_and_copy(tour: Tour, site: SiteServer) -> None:
    assert not tour.notebook, "\n".join(tour.notebook)
    assert tour.notebooks == notebook_pages(site.root)
    assert set(tour.notebooks) <= set(tour.copied)


def test_light_dark_toggle_with_screenshots(tour: Tour) -> None:
    assert not tour.palette, "\n".join(tour.palette)
    names = {shot.name for shot in tour.screenshots}
    for name in ("home", "chapter", "chapter-code", "notebook", "appendix"):
        assert {f"{name}-light.png", f"{name}-dark.png"} <= names, f"{name} screenshots missing"
    for shot in tour.screenshots:
        assert shot.stat().st_size > 10_000, f"{shot} looks empty"


# Every change of Material's data-md-color-switching mark on <body> (True: set, False: removed),
# recorded from the start of a page.
WATCH_SWITCHING = """
window.attnSwitching = [];
new MutationObserver(records => records.forEach(r =>
  window.attnSwitching.push(r.target.hasAttribute('data-md-color-switching'))))
  .observe(document, {subtree: true, attributes: true, attributeFilter: ['data-md-color-switching']});
"""


def test_a_stored_palette_loads_without_a_switch_mark_and_a_switch_is_marked(
    browser: Browser, site: SiteServer
) -> None:
    """Material marks <body> while the palette switches (its palette.css turns transitions off
    under the mark); each mark and unmark restyles the whole page. On a first visit the palette
    may change as the page loads, and it is marked; once a palette is stored, a load applies it
    again without changing it, and overrides/main.html drops that mark; a reader's switch keeps
    it."""
    context = browser.new_context(viewport=DESKTOP)
    two_frames = "new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"
    try:
        context.add_init_script(WATCH_SWITCHING)
        page = context.new_page()
        marks = []
        for _ in range(2):  # the first visit stores the palette; the second finds it
            page.goto(site.url("/"), wait_until="load")
            page.evaluate(two_frames)
            marks.append(page.evaluate("window.attnSwitching"))
        assert marks == [[True, False], []], f"marks on the first and the second load: {marks}"
        page.locator("form[data-md-component=palette] label").filter(visible=True).click()
        page.wait_for_function("window.attnSwitching.length >= 2", timeout=10_000)
        assert page.evaluate("window.attnSwitching") == [True, False]
    finally:
        context.close()
