"""Fixtures of the browser tests: one headless chromium, one server of the built site, a few
desktop and phone tabs, and the crawl of the whole site on a phone, each made once per session.

The tests need Debian's chromium at /usr/bin/chromium (``playwright install`` is not used). Where
it is missing they skip, with one line saying how to install it; in CI (``CI=true``) they fail.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from weakref import WeakKeyDictionary

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, sync_playwright

from book.browser.chromium import DESKTOP, PHONE, SCREENS, TIMEOUT_MS, launch
from book.browser.crawl import Snapshot, crawl, page_key
from book.browser.server import SiteServer
from book.browser.tab import Tab
from book.constants import CHROMIUM, REPO

SCREENSHOTS = REPO / "artifacts" / "screenshots"
# Tabs of each size, which load pages side by side (book.browser.crawl.visit_all). One: the two
# test processes keep a 2-core machine busy already, and a second tab only made chromium's work
# dearer (the whole suite: 371 busy core-seconds and 196 s with two tabs, 335 and 179 s with one).
TABS = 1


def in_ci() -> bool:
    """True on a CI runner (GitHub Actions sets CI=true)."""
    return os.environ.get("CI", "").lower() == "true"


def missing_chromium(what: str) -> str:
    """The one line that says why the browser tests did not run, and how to make them run."""
    return (
        f"{what}: {CHROMIUM} not found; enable them with "
        "`sudo apt-get install -y chromium chromium-driver` (bash .ci/run does it)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without chromium, outside CI: one browser test carries the skip, the others are
    deselected, so that the run shows one line about them instead of one per test."""
    if CHROMIUM.exists() or in_ci():
        return
    here = Path(__file__).parent
    browser = [item for item in items if here in item.path.parents]
    if not browser:
        return
    reason = missing_chromium(f"browser tests skipped ({len(browser)})")
    browser[0].add_marker(pytest.mark.skip(reason=reason))
    dropped = {id(item) for item in browser[1:]}
    config.hook.pytest_deselected(items=browser[1:])
    items[:] = [item for item in items if id(item) not in dropped]


@pytest.fixture(scope="session")
def chromium() -> Path:
    """Debian's chromium; without it the browser tests skip, and in CI they fail."""
    if not CHROMIUM.exists():
        if in_ci():
            pytest.fail(missing_chromium("browser tests cannot run in CI"), pytrace=False)
        pytest.skip(missing_chromium("browser tests skipped"))
    return CHROMIUM


@pytest.fixture(scope="session")
def browser(chromium: Path) -> Iterator[Browser]:
    """One headless chromium for the whole session."""
    with sync_playwright() as playwright:
        browser = launch(playwright, chromium)
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def desktops(browser: Browser) -> Iterator[list[Tab]]:
    """1280x800 tabs in the light scheme, with clipboard access (``TABS`` of them)."""
    tabs = [Tab(browser, DESKTOP) for _ in range(TABS)]
    yield tabs
    for tab in tabs:
        tab.close()


@pytest.fixture(scope="session")
def desktop(desktops: list[Tab]) -> Tab:
    """The desktop tab that interactive checks drive."""
    return desktops[0]


@pytest.fixture(scope="session")
def phones(browser: Browser) -> Iterator[list[Tab]]:
    """390x844 touch tabs, the size of a current phone."""
    tabs = [Tab(browser, PHONE, phone=True) for _ in range(TABS)]
    yield tabs
    for tab in tabs:
        tab.close()


@pytest.fixture(scope="session")
def screens(browser: Browser) -> Iterator[dict[str, BrowserContext]]:
    """A context per screen of book.browser.chromium.SCREENS, shared by the tests of a process:
    the tabs of other fixtures (``desktops``, ``phones``) keep their own settings."""
    made = {name: browser.new_context(**options) for name, options in SCREENS.items()}
    for context in made.values():
        context.set_default_timeout(TIMEOUT_MS)
    yield made
    for context in made.values():
        context.close()


# The pages each context has loaded and only read so far, by path: the tests that read the same
# page on the same screen share one load of it (a chapter is slow to lay out).
_read_only: WeakKeyDictionary[BrowserContext, dict[str, Page]] = WeakKeyDictionary()


def open_page(context: BrowserContext, site: SiteServer, path: str, changes: bool = False) -> Page:
    """A tab of ``context`` showing the site's ``path``.

    A test that only reads the page (it may scroll it) gets the tab that an earlier test
    loaded, if there is one; a test that ``changes`` the page (adds a style, opens boxes,
    follows a link) takes that tab for itself, or a fresh load, and no later test gets it.
    """
    shown = _read_only.setdefault(context, {})
    page = shown.pop(path, None) if changes else shown.get(path)
    if page is None or page.is_closed():
        page = context.new_page()
        page.goto(site.url(path), wait_until="load")
        if not changes:
            shown[path] = page
    return page


@pytest.fixture(scope="session")
def site(chromium: Path, built_site: Path) -> Iterator[SiteServer]:
    """The built site (``built_site`` from tests/conftest.py), served on localhost, with an empty
    search index for the pages that do not search (book.browser.server)."""
    with SiteServer(built_site, empty_search_index=True) as server:
        yield server


@pytest.fixture(scope="session")
def screenshots() -> Path:
    """The folder CI keeps (artifacts/ is uploaded by .github/workflows/test.yml)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS


def phone_screenshot(path: str) -> str:
    """The file name of a page's phone screenshot: ``/chapters/04-causal-attention/`` gives
    ``phone-chapters-04-causal-attention.png``, the home page ``phone-home.png``."""
    return "phone-" + (page_key(path).strip("/").replace("/", "-") or "home") + ".png"


@pytest.fixture(scope="session")
def pages(site: SiteServer, phones: list[Tab], screenshots: Path) -> dict[str, Snapshot]:
    """Every page reachable from the home page, visited once on a phone-sized tab, with a
    screenshot of each. Every check of a snapshot thus runs on every page at phone width (the
    narrowest a reader has); the desktop layout is visited by the interactive tests."""

    def shoot(tab: Tab, snap: Snapshot) -> None:
        tab.page.screenshot(path=str(screenshots / phone_screenshot(snap.path)))

    return crawl(phones, site.url("/"), on_visit=shoot)

