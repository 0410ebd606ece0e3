"""The built book in a browser, for what Lighthouse's accessibility audit and a searching reader
ask of it: code (comments above all) with enough contrast in both palettes, links in prose that
do not rely on colour alone, a search dialog with a name, chapters first in search, and a 404
page that leads back into the book.

The colours are the ones the browser computes, in the light and the dark palette; the contrast
ratio is WCAG 2.1's, which Lighthouse applies (4.5:1 for text of normal size).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser

from book.browser.chromium import DESKTOP
from book.browser.colour import contrast
from book.browser.crawl import page_key, showcase_chapter
from book.browser.server import SiteServer
from book.browser.tab import Tab

# All tests of this module in one process (one chromium, its pages visited once), scheduled
# after the other site tests, by when the site is built (rank 3: see tools/book/scheduling.py).
pytestmark = pytest.mark.browser_group("browser-quality", rank=3)

# WCAG 2.1 AA, text of normal size (Lighthouse's color-contrast audit).
MIN_CONTRAST = 4.5
# Searches whose answer a reader finds in a chapter; the API reference names the same words in
# every docstring (and, before its source listings left the index, in every line of code).
CHAPTER_QUERIES = ["softmax", "causal mask", "flash", "d_k"]
# Names that only the API reference documents, and their pages: lowering its rank must not hide
# them.
API_QUERIES = {"MultiHeadAttentionWrapper": "/reference/step-by-step/",
               "TwoLevelMemory": "/reference/fast-attention/"}

# The tokens of every code block (comments, operators, punctuation, names...), one per kind of
# token, colour and code-block background as the browser computes them ("rgb(...)", "rgba(...)").
READ_CODE_COLOURS = """() => {
  const seen = new Map();
  for (const el of document.querySelectorAll('.md-content .highlight code span[class]')) {
    if (el.children.length || !el.textContent.trim()) continue;
    const color = getComputedStyle(el).color;
    const background = getComputedStyle(el.closest('code')).backgroundColor;
    const key = [el.className, color, background].join('|');
    if (!seen.has(key)) seen.set(key,
      {kind: el.className, text: el.textContent.slice(0, 40), color, background});
  }
  return [...seen.values()];
}"""

# Links in the running text of the article (paragraphs, list items, table cells) that are not
# permalinks or buttons, with the decoration the browser draws under them.
READ_PROSE_LINKS = """() => [...document.querySelectorAll(
    'article.md-typeset :is(p, li, td) > a[href]')]
  .filter(a => !a.matches('.headerlink, .md-button, .md-content__button, .md-icon') &&
               a.textContent.trim())
  .map(a => ({text: a.textContent.trim().slice(0, 40),
              decoration: getComputedStyle(a).textDecorationLine}))"""


def set_scheme(tab: Tab, scheme: str) -> None:
    """Show the page in Material's palette ``scheme`` ("default" light, "slate" dark)."""
    # Material fades colours over 125 ms; a headless tab may never run the fade: no transitions.
    tab.page.add_style_tag(content="* { transition: none !important; }")
    tab.page.evaluate("s => document.body.setAttribute('data-md-color-scheme', s)", scheme)


def check_code_contrast(tab: Tab) -> list[str]:
    """Every token of the open page's code blocks (comments above all) reaches 4.5:1 in both
    palettes; one line per kind of token and palette."""
    where, problems, comments = page_key(tab.page.url), {}, 0
    for scheme in ("default", "slate"):
        set_scheme(tab, scheme)
        for token in tab.page.evaluate(READ_CODE_COLOURS):
            comments += token["kind"] in {"c", "c1", "ch", "cm", "cs"}
            ratio = contrast(token["color"], token["background"])
            if ratio < MIN_CONTRAST:
                problems.setdefault((scheme, token["kind"]), (
                    f"{where} ({scheme}): {token['kind']} token {token['text']!r} has contrast "
                    f"{ratio:.2f}:1 ({token['color']} on {token['background']}), below "
                    f"{MIN_CONTRAST}:1"
                ))
    set_scheme(tab, "default")
    return list(problems.values()) if comments else [f"{where}: no code comment to check"]


def check_prose_links_underlined(tab: Tab) -> list[str]:
    """Every link in the running text of the open page is underlined."""
    where, links = page_key(tab.page.url), tab.page.evaluate(READ_PROSE_LINKS)
    if not links:
        return [f"{where}: no link in the running text to check"]
    return [
        f"{where}: link {link['text']!r} is told apart by colour only "
        f"(text-decoration-line: {link['decoration']})"
        for link in links
        if "underline" not in link["decoration"]
    ]


def check_search_dialog_named(tab: Tab) -> list[str]:
    """The search dialog of the open page has an accessible name."""
    where, dialogs = page_key(tab.page.url), tab.page.locator("[role=dialog]")
    if dialogs.count() == 0:
        return [f"{where}: no search dialog"]
    names = dialogs.evaluate_all(
        "els => els.map(el => (el.getAttribute('aria-label') || '').trim() ||"
        " (el.getAttribute('aria-labelledby') || '').trim())"
    )
    return [f"{where}: a role=dialog element has no accessible name" for name in names if not name]


@pytest.fixture(scope="module")
def search_box(site: SiteServer, browser: Browser) -> Iterator[Tab]:
    """A desktop tab showing the home page with the site's own search index: the searches of this
    module share its one load and its one index (building the index is most of a search's time)."""
    tab = Tab(browser, DESKTOP)
    with tab.real_search_index():
        tab.page.goto(site.url("/"), wait_until="load")
        tab.settle()  # the search index is fetched as the page loads
    yield tab
    tab.close()


def first_search_result(tab: Tab, query: str) -> str:
    """The page (URL path) of the first result listed for ``query`` in the tab's search box."""
    page = tab.page
    box = page.locator(".md-search__input")
    results = page.locator(".md-search-result__item > a.md-search-result__link")
    box.click()
    box.fill("")  # the last query's results go, so that those waited for are this query's
    box.press("End")  # Material searches on keyup
    results.first.wait_for(state="detached", timeout=10_000)
    box.fill(query)
    box.press("End")
    results.first.wait_for(timeout=10_000)
    return page_key(results.first.evaluate("a => a.href"))


@pytest.fixture(scope="module")
def chapter(site: SiteServer, desktop: Tab) -> Tab:
    """The desktop tab showing the chapter with the most code and math (the longest one)."""
    desktop.blank()
    desktop.page.goto(site.url(showcase_chapter(site.root)), wait_until="load")
    return desktop


def test_code_has_enough_contrast(chapter: Tab) -> None:
    problems = check_code_contrast(chapter)
    assert not problems, "\n".join(problems)


def test_links_in_prose_are_underlined(chapter: Tab) -> None:
    problems = check_prose_links_underlined(chapter)
    assert not problems, "\n".join(problems)


def test_search_dialog_has_a_name(chapter: Tab) -> None:
    problems = check_search_dialog_named(chapter)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("query", CHAPTER_QUERIES)
def test_search_lists_a_chapter_first(query: str, search_box: Tab) -> None:
    first = first_search_result(search_box, query)
    assert first and first.startswith("/chapters/"), (
        f"search for {query!r}: the first result is {first}, not a chapter"
    )


@pytest.mark.parametrize("query", API_QUERIES)
def test_search_lists_the_api_reference_first_for_a_name(query: str, search_box: Tab) -> None:
    assert first_search_result(search_box, query) == API_QUERIES[query]


@pytest.fixture(scope="module")
def missing(built_site: Path) -> SiteServer:
    """The site under its published base path (site_url's), where the 404 page's absolute links
    lead; a missing address answers with 404.html, as GitHub Pages does."""
    with SiteServer(built_site, base="/attention/", empty_search_index=True) as server:
        server.overrides["/attention/no/such/page/"] = (built_site / "404.html").read_bytes()
        yield server


def test_404_page_offers_search_and_a_way_home(missing: SiteServer, desktop: Tab) -> None:
    page = desktop.page
    with desktop.real_search_index():
        desktop.blank()
        page.goto(missing.url("/no/such/page/"), wait_until="load")
        desktop.settle()
        assert "not found" in page.locator("article h1").inner_text().lower()
        assert check_search_dialog_named(desktop) == []
        # The page's own button opens the search, which finds the chapters.
        page.locator("article label[for=__search]").click()
        box = page.locator(".md-search__input")
        box.wait_for(state="visible", timeout=5_000)
        box.fill("softmax")
        box.press("End")
        page.locator(".md-search-result__item").first.wait_for(timeout=10_000)
        page.keyboard.press("Escape")
    # Its link home opens the first page of the book.
    home = page.locator("article a.md-button")
    home.click()
    page.wait_for_url(lambda url: page_key(url) == missing.path("/"), timeout=10_000)
    assert page.locator("article h1").inner_text().startswith("Attention")
    assert desktop.failed == [], desktop.failed
