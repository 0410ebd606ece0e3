"""The book on any screen: figures that fit a phone, numbered and captioned; exercise questions in
view; a search index without private-use characters; the figures' font from the site; and a code
column that shows as many characters as tests/book/test_code_width.py lets a line have.

The figures are measured at 390 px and 1280 px on chapters 4 and 11, whose multi-panel figures
were the widest; the dark theme changes their colours only (tests/book/test_figures.py holds
figures.css to that), and test_figures_print.py checks their ink in it. The other checks run on
both widths and both themes (the code column only at 1280 px, on chapter 11's page of exercises);
the phone crawl of test_reader_experience.py covers every page's figure text size.
"""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import BrowserContext

from book.browser.chromium import DESKTOP
from book.browser.server import SiteServer
from book.constants import ADMONITION_CODE_COLUMN, CODE_COLUMN, LISTING_CODE_COLUMN
from tests.browser.conftest import open_page

# One process for test_any_screen.py, test_figures_print.py and test_math.py: one chromium, and a
# page that tests only read is loaded once per screen. Scheduled after the other site tests, by
# when the site is built (rank 3: see tools/book/scheduling.py).
pytestmark = pytest.mark.browser_group("browser-screens", rank=3)

# The pages measured, each with the number of its first figure in its chapter (chapter 11 is read
# on section pages, one figure on each of these three).
FIGURE_PAGES = {"chapters/04-causal-attention/": 1, "chapters/11-masks/flexattention/": 1,
                "chapters/11-masks/weights-from-a-fused-kernel/": 2,
                "chapters/11-masks/ring-attention/": 3}
CHAPTERS = tuple(FIGURE_PAGES)
# Code in the page and in solutions nested in exercises
EXERCISES_PAGE = "chapters/11-masks/pitfalls-exercises-summary/"
# Every figure as shown: the drawing displayed (desktop or phone layout), its box's width, whether
# the box scrolls, and its caption.
MEASURE = """() => [...document.querySelectorAll('figure.attn-figure-box')].map(f => {
  const box = f.querySelector('.attn-figure');
  const shown = [...box.children].filter(s => getComputedStyle(s).display !== 'none');
  return {id: f.id, name: box.dataset.figure, shown: shown.map(s => s.getAttribute('class')),
          width: shown.length ? shown[0].getBoundingClientRect().width : 0,
          box: box.clientWidth, scrolls: box.scrollWidth > box.clientWidth + 1,
          caption: (f.querySelector('figcaption') || {}).textContent || ''};
})"""
# Whether a line of n characters shows whole in a code block of the page's column and in one of a
# solution nested in an exercise (every collapsed block opened first), and a line 20 longer not.
FITS = """([top, listing, box]) => {
  const details = [...document.querySelectorAll('details')], open = details.map(d => d.open);
  details.forEach(d => { d.open = true; });
  const fits = (code, n) => {
    const shown = code.innerHTML;
    code.textContent = 'x'.repeat(n);
    const fit = code.scrollWidth <= code.clientWidth + 1;
    code.innerHTML = shown;
    return fit;
  };
  const boxOf = e => e.closest('.admonition, details');
  const blocks = [...document.querySelectorAll('.md-typeset pre > code')];
  const page = blocks.find(c => !boxOf(c));
  const boxed = blocks.find(c => boxOf(c) && !boxOf(boxOf(c).parentElement));
  const nested = blocks.find(c => boxOf(c) && boxOf(boxOf(c).parentElement));
  const found = {page: page ? [fits(page, top), fits(page, top + 20)] : null,
                 boxed: boxed ? [fits(boxed, listing), fits(boxed, listing + 20)] : null,
                 nested: nested ? [fits(nested, box), fits(nested, box + 20)] : null};
  details.forEach((d, i) => { d.open = open[i]; });  // the page as it was: other tests read it
  return found;
}"""
# Exercises: the question's box and the solution's, open or not, and the question's height.
EXERCISES = """() => [...document.querySelectorAll('.admonition.example, details.example')].map(e => ({
  title: e.querySelector('.admonition-title, summary').textContent.trim(),
  collapsible: e.tagName === 'DETAILS', open: e.tagName !== 'DETAILS' || e.open,
  text: e.innerText.length,
  solutions: [...e.querySelectorAll('details.success')].map(s => s.open),
}))"""


@pytest.mark.parametrize("screen", ["phone", "desktop"])
def test_figures_fit_the_screen_with_a_number_and_a_caption(
    screens: dict[str, BrowserContext], site: SiteServer, screen: str
) -> None:
    problems, phone_layouts = [], 0
    for path in CHAPTERS:
        page = open_page(screens[screen], site, path)
        figures = page.evaluate(MEASURE)
        assert figures, f"{path}: no figure"
        chapter = int(re.search(r"chapters/(\d+)-", path)[1])
        for k, figure in enumerate(figures, start=FIGURE_PAGES[path]):
            where = f"{screen} {path} {figure['name']}"
            if figure["id"] != f"fig-{chapter}-{k}":
                problems.append(f"{where}: anchor {figure['id']!r}, expected fig-{chapter}-{k}")
            if not figure["caption"].startswith(f"Figure {chapter}.{k} — ") or len(figure["caption"]) < 25:
                problems.append(f"{where}: caption {figure['caption']!r}")
            if len(figure["shown"]) != 1:
                problems.append(f"{where}: {len(figure['shown'])} drawings shown")
            if figure["scrolls"] or figure["width"] > figure["box"] + 1:
                problems.append(f"{where}: {figure['width']:.0f} px wide in a {figure['box']} px box")
            phone_layouts += figure["shown"] == ["attn-narrow"]
    assert problems == [], "\n".join(problems)
    if screen.startswith("phone"):
        assert phone_layouts >= 4, f"only {phone_layouts} figures use their phone layout at 390 px"
    else:
        assert phone_layouts == 0, "a desktop shows a phone layout"


def test_a_figure_reference_links_to_its_figure(screens, site: SiteServer) -> None:
    # Chapter 10 is read on section pages: the reference and its figure are on two of them.
    page = open_page(screens["desktop"], site, "chapters/10-inference/windows-pages-and-speed/",
                     changes=True)
    link = page.locator("a.figref", has_text="10.1").first
    assert link.get_attribute("href") == "../cache-size-mqa-gqa/#fig-10-1"
    link.click()
    page.wait_for_url("**/cache-size-mqa-gqa/#fig-10-1")
    page.wait_for_timeout(200)
    top = page.evaluate("document.getElementById('fig-10-1').getBoundingClientRect().top")
    assert 0 <= top < DESKTOP["height"] / 2, f"Figure 10.1 is not in view after its link: {top}"


@pytest.mark.parametrize("screen", ["phone", "desktop-dark"])
def test_exercise_questions_show_and_only_solutions_collapse(screens, site: SiteServer, screen: str) -> None:
    page = open_page(screens[screen], site, CHAPTERS[0])
    exercises = [e for e in page.evaluate(EXERCISES) if e["title"].startswith("Exercise")]
    assert len(exercises) >= 2, exercises
    for exercise in exercises:
        assert not exercise["collapsible"] and exercise["text"] > 80, f"question hidden: {exercise}"
        assert exercise["solutions"] and not any(exercise["solutions"]), f"solution open: {exercise}"


def test_the_search_index_has_no_private_use_characters(site: SiteServer) -> None:
    index = json.loads((site.root / "search" / "search_index.json").read_text(encoding="utf-8"))
    found = {doc["location"]: re.findall("[\ue000-\uf8ff]", doc["title"] + doc["text"])
             for doc in index["docs"]}
    assert not any(found.values()), {k: v for k, v in found.items() if v}
    titles = [doc["title"] for doc in index["docs"]]
    assert any("tq≠tk" in t.replace(" ", "") for t in titles), "section 10.3's title lost its ≠"


@pytest.mark.parametrize("screen", ["phone-dark", "desktop"])
def test_the_figure_font_comes_from_the_site(screens, site: SiteServer, screen: str) -> None:
    page = open_page(screens[screen], site, CHAPTERS[0])
    page.locator("figure.attn-figure-box").first.scroll_into_view_if_needed()
    found = page.evaluate("""async () => {
      await document.fonts.ready;
      await document.fonts.load('12px "DejaVu Sans"');
      return {loaded: [...document.fonts].filter(f => f.family.replace(/"/g, '') === 'DejaVu Sans'
                                                   && f.status === 'loaded').length,
              requests: performance.getEntriesByType('resource').map(r => r.name)
                          .filter(n => n.includes('/assets/fonts/'))};
    }""")
    assert found["loaded"] >= 1, found
    assert any(r.startswith(site.url("")) and r.endswith("DejaVuSans.woff") for r in found["requests"]), found


def test_the_screens_get_the_search_index_without_its_documents(screens, site: SiteServer) -> None:
    # No test of these screens searches, and indexing the site's index costs each page load about
    # a second of CPU (book.browser.server.SiteServer).
    page = open_page(screens["desktop"], site, CHAPTERS[0])
    index = site.url("search/search_index.json")
    found = page.evaluate(f"fetch({index!r}).then(r => r.json()).then(i => [i.docs.length, !!i.config])")
    assert found == [0, True], f"documents in the index, and its configuration kept: {found}"


def test_code_column_holds_what_the_width_rule_allows(screens, site: SiteServer) -> None:
    """tests/book/test_code_width.py holds every line of code and output to CODE_COLUMN characters
    (ADMONITION_CODE_COLUMN in an admonition's smaller font, LISTING_CODE_COLUMN in a listing's
    box, one level deep): on a 1280 px desktop a line that long must show whole, in the page's
    column, in a box and in a solution nested in an exercise, or those limits no longer keep code
    from scrolling sideways. (A line 20 characters longer must scroll, or the measurement
    measures nothing.)"""
    columns = [CODE_COLUMN, LISTING_CODE_COLUMN, ADMONITION_CODE_COLUMN]
    fits = open_page(screens["desktop"], site, EXERCISES_PAGE).evaluate(FITS, columns)
    # The exercises page has no code in a box of its own; chapter 4's listings are.
    fits["boxed"] = open_page(screens["desktop"], site, CHAPTERS[0]).evaluate(FITS, columns)["boxed"]
    expected = {"page": [True, False], "boxed": [True, False], "nested": [True, False]}
    assert fits == expected, (
        f"[{CODE_COLUMN}, {CODE_COLUMN + 20}] characters in the column, [{LISTING_CODE_COLUMN}, "
        f"{LISTING_CODE_COLUMN + 20}] in a box, [{ADMONITION_CODE_COLUMN}, "
        f"{ADMONITION_CODE_COLUMN + 20}] in a nested solution fit: {fits}, expected {expected}")
