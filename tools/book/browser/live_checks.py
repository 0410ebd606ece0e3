"""Checks that drive a live page in a :class:`~book.browser.tab.Tab`: click a copy button, type
into the search box, flip the light/dark toggle, download a notebook.

Each ``check_*(tab, ...)`` returns a list of problems, one readable line each, and an empty list
when the page does what a reader expects of it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Page
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from .crawl import page_key
from .tab import Tab


def check_copy_button_copies(tab: Tab, timeout_s: float = 10) -> list[str]:
    """Clicking the first code block's copy button puts exactly that code on the clipboard
    (on a chapter, Material's button; on a notebook page, mkdocs-jupyter's), within
    ``timeout_s`` seconds (a busy machine can be slow to copy)."""
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
    copied, deadline = before, time.monotonic() + timeout_s
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
    with tab.real_search_index():
        return _search(tab, home, query, expected)


def _search(tab: Tab, home: str, query: str, expected: set[str]) -> list[str]:
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
        tab.blank()  # the page opened: no need to let it finish loading
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
