"""The built book, in a real browser: what a reader gets on every page.

The site is crawled once from the home page on a phone-sized tab (the ``pages`` fixture); each
test applies one check of book.browser.checks to every page and lists all the problems it
finds. Requests to any host but localhost fail and are recorded. A phone screenshot of every page
goes to artifacts/screenshots/. What a reader does on a desktop (search, copy, light/dark,
notebook downloads) is in test_desktop_reader.py.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from book.browser import checks
from book.browser.chromium import PHONE
from book.browser.crawl import LinkTargets, Snapshot, built_pages
from book.browser.server import SiteServer
from tests.browser.conftest import phone_screenshot
from tests.browser.test_math import numbered

# All tests of this module in one process (one chromium, one crawl), scheduled first of all: the
# crawl's first test builds the site, which every site test shares (rank 0: see tools/book/scheduling.py).
pytestmark = pytest.mark.browser_group("browser-crawl", rank=0)


def problems_on(pages: dict[str, Snapshot], check: Callable[[Snapshot], list[str]]) -> list[str]:
    """Every problem ``check`` finds on every page."""
    return [problem for snap in pages.values() for problem in check(snap)]


def chapters(pages: dict[str, Snapshot]) -> list[Snapshot]:
    """The chapter pages, in crawl order."""
    found = [snap for path, snap in pages.items() if path.startswith("/chapters/")]
    assert found, f"the crawl found no chapter page among {sorted(pages)}"
    return found


def test_crawl_reaches_every_page(pages: dict[str, Snapshot], site: SiteServer) -> None:
    unreached = built_pages(site.root) - set(pages)
    assert not unreached, f"pages no link leads to from the home page: {sorted(unreached)}"


def test_only_the_print_page_is_left_alone_by_the_themes_scripts(
    pages: dict[str, Snapshot]
) -> None:
    # The whole book on one page has no copy buttons (overrides/print.html): mounting them took
    # seconds of a phone's CPU. Every other page gets them (checks.check_copy_buttons).
    left_alone = [path for path, snap in pages.items() if not snap.dom["mounted"]]
    assert left_alone == ["/print/"], left_alone
    assert all(block["buttons"] == 0 for block in pages["/print/"].dom["blocks"])
    # Nor are its chapters out of view laid out (print.css), so READ_PAGE leaves their figures,
    # tables and equations unmeasured there: they are measured on the chapters' own pages.
    unmeasured = {path: snap.dom["unmeasured"] for path, snap in pages.items() if snap.dom["unmeasured"]}
    assert list(unmeasured) == ["/print/"] and unmeasured["/print/"] > 100, unmeasured


def test_pages_load_without_errors(pages: dict[str, Snapshot]) -> None:
    problems = problems_on(pages, checks.check_loads_cleanly)
    assert not problems, "\n".join(problems)


def test_nothing_is_requested_outside_localhost(pages: dict[str, Snapshot]) -> None:
    problems = problems_on(pages, checks.check_stays_on_host)
    assert not problems, "\n".join(problems)


def test_math_is_typeset(pages: dict[str, Snapshot]) -> None:
    problems = problems_on(pages, checks.check_math)
    assert not problems, "\n".join(problems)
    typeset = [path for path, snap in pages.items() if snap.dom["math"]["rendered"]]
    assert typeset, "no page shows any typeset math: nothing was checked"


def test_internal_links_and_anchors_resolve(pages: dict[str, Snapshot]) -> None:
    targets = LinkTargets(pages)
    problems = problems_on(pages, lambda snap: checks.check_links(snap, targets))
    assert not problems, "\n".join(sorted(set(problems)))


def test_images_have_alt_text(pages: dict[str, Snapshot]) -> None:
    problems = problems_on(pages, checks.check_images)
    assert not problems, "\n".join(problems)


def test_code_blocks_have_copy_buttons_and_outputs_none(pages: dict[str, Snapshot]) -> None:
    problems = problems_on(pages, checks.check_copy_buttons)
    assert not problems, "\n".join(problems)
    blocks = [block for snap in pages.values() for block in snap.dom["blocks"]]
    assert any(b["output"] for b in blocks) and any(not b["output"] for b in blocks), (
        "the site needs both code blocks and output blocks for this test to check anything"
    )


def test_phone_viewport_has_no_horizontal_scroll(
    pages: dict[str, Snapshot], screenshots: Path
) -> None:
    chapters(pages)  # the chapters are among the pages checked
    problems = problems_on(pages, checks.check_fits_width)
    assert not problems, "\n".join(problems)
    widths = {snap.dom["overflow"]["clientWidth"] for snap in pages.values()}
    assert widths == {PHONE["width"]}, f"the phone tabs laid pages out {widths} px wide"
    unshot = [path for path in pages if not (screenshots / phone_screenshot(path)).is_file()]
    assert not unshot, f"no phone screenshot of {unshot}"


def test_equations_fit_a_phone(pages: dict[str, Snapshot]) -> None:
    """No display equation is wider than its box at 390 px, and every number shows (math.css)."""
    problems = [problem for snap in pages.values() for problem in checks.check_equations_fit(snap)]
    assert not problems, f"{len(problems)} display equations at {PHONE['width']} px:\n" + "\n".join(
        problems
    )
    assert numbered(pages) > 100, "the crawl saw too few numbered equations to check"


def appendix(pages: dict[str, Snapshot]) -> list[Snapshot]:
    """The appendix pages, in crawl order."""
    found = [snap for path, snap in pages.items() if path.startswith("/appendix/")]
    assert len(found) >= 4, f"the crawl found {len(found)} appendix pages"
    return found


def test_figure_text_is_legible_on_a_phone(pages: dict[str, Snapshot]) -> None:
    """At 390 px no figure's text is under 9 CSS px (a wide figure scrolls in its own box instead
    of shrinking), its text is SVG text, and it has a label for screen readers: the chapters'
    figures and the appendix's plots of measurements alike."""
    problems, count = [], {"chapters": 0, "appendix": 0}
    for kind, snaps in (("chapters", chapters(pages)), ("appendix", appendix(pages))):
        for snap in snaps:
            figures = snap.dom["figures"]
            problems += checks.figure_problems(figures, f"390 px {snap.path}")
            count[kind] += len(figures)
    assert count["chapters"] >= 15, f"expected the chapters' figures inline in their pages: {count}"
    assert count["appendix"] >= 20, f"expected the appendix's plots inline in their pages: {count}"
    assert problems == [], "\n".join(problems)


def test_tables_fit_or_scroll_with_their_first_column_and_code_names_never_break(
    pages: dict[str, Snapshot]
) -> None:
    """At 390 px every table fits its column or scrolls sideways in its own box with its first
    column in view, and no code name in a table breaks across lines."""
    problems = problems_on(pages, checks.check_tables)
    assert not problems, "\n".join(problems)
    wide = [t for snap in appendix(pages) for t in snap.dom["tables"] if not t["fits"]]
    assert len(wide) >= 10, "the appendix has too few tables wider than a phone for this to check them"
