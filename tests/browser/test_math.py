"""The book's math in a real browser: typeset before any script runs, and fitting the page.

Every page is checked at phone width (in test_reader_experience.py, whose crawl at 390 px this
check shares: one crawl per run), and the
chapters that overflowed before at desktop width (1280 px): no display equation is wider than its box, and every equation number is
shown inside the box, clear of its equation. A chapter opened with JavaScript switched off shows
its math drawn in KaTeX's fonts.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser

from book.browser.checks import check_equations_fit, check_math
from book.browser.chromium import DESKTOP, PHONE
from book.browser.crawl import Snapshot, built_pages, showcase_chapter, visit_all
from book.browser.server import SiteServer
from book.browser.tab import Tab

# One process for test_any_screen.py, test_figures_print.py and test_math.py: one chromium, and a
# page that tests only read is loaded once per screen. Scheduled after the other site tests, by
# when the site is built (rank 3: see tools/book/scheduling.py).
pytestmark = pytest.mark.browser_group("browser-screens", rank=3)


DESKTOP_CHAPTERS = (
    "/chapters/01-why-attention/", "/chapters/02-self-attention-without-weights/",
    "/chapters/07-fast-attention/",
)


def numbered(pages: dict[str, Snapshot]) -> int:
    """How many numbered equations (anchors ``eq-...``) the pages show."""
    return sum(1 for snap in pages.values() for i in snap.dom["ids"] if i.startswith("eq-"))


@pytest.fixture(scope="module")
def desktop_pages(site: SiteServer, desktops: list[Tab]) -> dict[str, Snapshot]:
    """The chapters whose equations overflowed at 1280 px under MathJax (1, 2 and 7), visited
    once on a desktop tab. Every page is checked at 390 px, where the text column is half as
    wide; the desktop pass checks what differs there, the number's reserved margin, on the pages
    that failed before, to keep the browser tests within the time budget."""

    def html(path: str) -> str:
        file = site.root / path.lstrip("/")
        return (file / "index.html" if path.endswith("/") else file).read_text(encoding="utf-8")

    paths = sorted(
        path for path in built_pages(site.root)
        if path.startswith(DESKTOP_CHAPTERS) and "katex-display" in html(path)
    )
    # Chapter 7 is read on section pages: those of its pages that show equations.
    missing = [c for c in DESKTOP_CHAPTERS if not any(p.startswith(c) for p in paths)]
    assert missing == [], f"expected chapters 1, 2 and 7, found {paths}"
    return {snap.path: snap for snap in visit_all(desktops, [site.url(p) for p in paths])}


def test_equations_fit_a_desktop(desktop_pages: dict[str, Snapshot]) -> None:
    problems = [problem for snap in desktop_pages.values() for problem in check_equations_fit(snap)]
    problems += [problem for snap in desktop_pages.values() for problem in check_math(snap)]
    assert not problems, f"at {DESKTOP['width']} px:\n" + "\n".join(problems)
    assert numbered(desktop_pages) > 20, "too few numbered equations were checked"


def test_math_reads_without_javascript(site: SiteServer, browser: Browser) -> None:
    context = browser.new_context(viewport=PHONE, java_script_enabled=False)
    try:
        page = context.new_page()
        page.goto(site.url(showcase_chapter(site.root)), wait_until="load")
        found = page.evaluate(
            """async () => {
              await document.fonts.ready;
              const glyph = document.querySelector(".katex-html .mord.mathnormal");
              const mathml = document.querySelector(".katex-mathml");
              return {
                formulas: document.querySelectorAll(".katex").length,
                font: getComputedStyle(glyph).fontFamily,
                loaded: document.fonts.check("1em KaTeX_Math"),
                hidden: getComputedStyle(mathml).position === "absolute",
                scripts: document.scripts.length,
              };
            }"""
        )
    finally:
        context.close()
    assert found["formulas"] > 100, found
    assert found["font"].startswith("KaTeX_Math") and found["loaded"], found
    assert found["hidden"], "KaTeX's MathML copy is shown: its stylesheet did not apply"
