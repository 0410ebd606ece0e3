"""The built book, in a real browser: what a reader gets on every page.

The site is crawled once from the home page (the ``pages`` fixture); each test applies one check
of tests/browser/checks.py to every page and lists all the problems it finds. Requests to any
host but localhost are blocked and recorded. Screenshots go to artifacts/screenshots/.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.browser.checks import (
    PHONE, LinkTargets, SiteServer, Snapshot, Tab, check_copy_button_copies, check_copy_buttons,
    check_fits_width, check_images, check_links, check_loads_cleanly, check_math, check_notebook,
    check_palette_toggle, check_search, check_stays_on_host, page_key, visit, visit_all,
)


def problems_on(pages: dict[str, Snapshot], check: Callable[[Snapshot], list[str]]) -> list[str]:
    """Every problem ``check`` finds on every page."""
    return [problem for snap in pages.values() for problem in check(snap)]


def built_pages(site: Path) -> set[str]:
    """The path of every HTML page of the built site (404.html is served for missing URLs, at
    any depth, and is not a page a link leads to)."""
    return {
        page_key("/" + path.relative_to(site).as_posix())
        for path in site.rglob("*.html")
        if path.name != "404.html"
    }


def chapters(pages: dict[str, Snapshot]) -> list[Snapshot]:
    """The chapter pages, in crawl order."""
    found = [snap for path, snap in pages.items() if path.startswith("/chapters/")]
    assert found, f"the crawl found no chapter page among {sorted(pages)}"
    return found


def showcase_chapter(pages: dict[str, Snapshot]) -> Snapshot:
    """The chapter with the most typeset math and code: it shows the most of the book's look."""
    return max(
        chapters(pages), key=lambda snap: snap.dom["math"]["rendered"] + len(snap.dom["blocks"])
    )


def notebook_pages(site: Path) -> list[str]:
    """Pages rendered from a notebook: mkdocs-jupyter puts the .ipynb next to the page."""
    found = sorted(
        page_key("/" + path.parent.relative_to(site).as_posix() + "/")
        for path in site.rglob("*.ipynb")
    )
    assert found, "the built site has no notebook page"
    return found


def test_crawl_reaches_every_page(pages: dict[str, Snapshot], site: SiteServer) -> None:
    unreached = built_pages(site.root) - set(pages)
    assert not unreached, f"pages no link leads to from the home page: {sorted(unreached)}"


def test_pages_load_without_errors(pages: dict[str, Snapshot]) -> None:
    problems = problems_on(pages, check_loads_cleanly)
    assert not problems, "\n".join(problems)


def test_nothing_is_requested_outside_localhost(pages: dict[str, Snapshot]) -> None:
    problems = problems_on(pages, check_stays_on_host)
    assert not problems, "\n".join(problems)


def test_math_is_typeset(pages: dict[str, Snapshot]) -> None:
    problems = problems_on(pages, check_math)
    assert not problems, "\n".join(problems)
    typeset = [path for path, snap in pages.items() if snap.dom["math"]["rendered"]]
    assert typeset, "no page shows any typeset math: nothing was checked"


def test_internal_links_and_anchors_resolve(pages: dict[str, Snapshot]) -> None:
    targets = LinkTargets(pages)
    problems = problems_on(pages, lambda snap: check_links(snap, targets))
    assert not problems, "\n".join(sorted(set(problems)))


def test_images_have_alt_text(pages: dict[str, Snapshot]) -> None:
    problems = problems_on(pages, check_images)
    assert not problems, "\n".join(problems)


def test_code_blocks_have_copy_buttons_and_outputs_none(pages: dict[str, Snapshot]) -> None:
    problems = problems_on(pages, check_copy_buttons)
    assert not problems, "\n".join(problems)
    blocks = [block for snap in pages.values() for block in snap.dom["blocks"]]
    assert any(b["output"] for b in blocks) and any(not b["output"] for b in blocks), (
        "the site needs both code blocks and output blocks for this test to check anything"
    )


def test_copy_button_copies_the_code(pages: dict[str, Snapshot], desktop: Tab) -> None:
    with_code = [
        snap for snap in chapters(pages) if any(not b["output"] for b in snap.dom["blocks"])
    ]
    assert with_code, "no chapter has a code block"
    lightest = min(with_code, key=lambda snap: snap.dom["math"]["rendered"])  # quickest to load
    desktop.page.goto(lightest.url, wait_until="load")
    assert check_copy_button_copies(desktop) == []


@pytest.mark.parametrize("query", ["softmax", "causal"])
def test_search_finds_the_chapters_about(
    query: str, pages: dict[str, Snapshot], site: SiteServer, desktop: Tab
) -> None:
    # The right pages: the chapters with a heading about the query.
    expected = {
        snap.path
        for snap in chapters(pages)
        if any(query in heading.lower() for heading in snap.dom["headings"])
    }
    assert expected, f"no chapter has a heading about {query!r}: nothing to search for"
    assert check_search(desktop, site.url("/"), query, expected) == []


def test_phone_viewport_has_no_horizontal_scroll(
    pages: dict[str, Snapshot], phones: list[Tab], screenshots: Path
) -> None:
    # The showcase chapter goes last, so that its tab still shows it for the screenshot.
    showcase = showcase_chapter(pages)
    urls = [snap.url for snap in chapters(pages) if snap is not showcase] + [showcase.url]
    on_phone = visit_all(phones, urls)
    last_tab = phones[(len(urls) - 1) % len(phones)]
    last_tab.page.screenshot(path=str(screenshots / "chapter-phone.png"))
    problems = [problem for snap in on_phone for problem in check_fits_width(snap)]
    assert not problems, "\n".join(problems)
    widths = {snap.dom["overflow"]["clientWidth"] for snap in on_phone}
    assert widths == {PHONE["width"]}, f"the phone tabs laid pages out {widths} px wide"


def test_notebook_pages_render_download_and_copy(
    site: SiteServer, desktop: Tab, tmp_path: Path
) -> None:
    problems = []
    for path in notebook_pages(site.root):
        problems += check_notebook(desktop, site.url(path), tmp_path)
        problems += check_copy_button_copies(desktop)
    assert not problems, "\n".join(problems)


def test_light_dark_toggle_with_screenshots(
    pages: dict[str, Snapshot], site: SiteServer, desktop: Tab, screenshots: Path
) -> None:
    chapter = showcase_chapter(pages)
    appendix = sorted(path for path in pages if path.startswith("/appendix/"))
    assert appendix, "the crawl found no appendix page"
    shown = {
        "home": "/",
        "chapter": chapter.path,
        "notebook": notebook_pages(site.root)[0],
        "appendix": appendix[0],
    }
    page = desktop.page
    written: list[Path] = []

    def shoot(name: str, scheme: str) -> None:
        light_or_dark = {"default": "light", "slate": "dark"}[scheme]
        page.evaluate("window.scrollTo(0, 0)")
        page.wait_for_timeout(300)  # Material's header title slides back as the h1 returns
        written.append(screenshots / f"{name}-{light_or_dark}.png")
        page.screenshot(path=str(written[-1]))
        code = page.locator(".highlight:has(+ .highlight.output)")
        if name == "chapter" and code.count():  # a code block and its output panel
            code.first.evaluate("block => block.scrollIntoView({block: 'center'})")
            page.wait_for_timeout(300)
            written.append(screenshots / f"{name}-code-{light_or_dark}.png")
            page.screenshot(path=str(written[-1]))

    problems = []
    for name, path in shown.items():
        visit(desktop, site.url(path))
        problems += check_palette_toggle(desktop, lambda scheme, name=name: shoot(name, scheme))
    assert not problems, "\n".join(problems)
    assert len(written) == 2 * len(shown) + 2, f"screenshots missing: {written}"
    for shot in written:
        assert shot.stat().st_size > 10_000, f"{shot} looks empty"
