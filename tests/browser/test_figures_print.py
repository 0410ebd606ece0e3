"""Figures on a phone and in the dark theme, the book on paper, and the PDF edition.

- Figures (tools/book/hooks/figures.py puts each SVG into its page): on a 1280 px desktop no text of
  the heatmaps with numbers in their cells renders under 9 CSS pixels (every page at 390 px is
  checked on the crawl of test_reader_experience.py; a wide figure scrolls in its own box instead
  of shrinking), and the text is SVG text, not paths; in the dark theme the ink is light and
  the background transparent; heatmaps whose scale starts at white turn dark, and the numbers in
  their cells keep a contrast of at least 3:1 in both themes; a figure wider than the phone shows
  a shadow on each edge past which more of it lies, and a figure that fits shows none.
- Print (docs/stylesheets/print.css): under print media, closed exercise and solution boxes show
  their content, and copy buttons, navigation and the notebook links do not show.
- The whole-book page (tools/book/hooks/print_page.py) holds the preface and every chapter, and
  `python -m book pdf` (tools/book/pdf.py) prints it to a PDF that names every chapter.

Screenshots of a chapter at 390 px light, 390 px dark and printed go to artifacts/screenshots/.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pypdf
import pytest
from PIL import Image
from playwright.sync_api import BrowserContext, Page

from book.browser.checks import figure_problems, table_problems
from book.browser.colour import contrast, luminance
from book.browser.scripts import MEASURE_FIGURES, MEASURE_TABLES
from book.browser.server import SiteServer
from book.chapters import chapter_of, chapters, landing_page
from book.constants import DOCS, PDF_NAME
from book.pdf import make_pdf
from tests.browser.conftest import open_page

# One process for test_any_screen.py, test_figures_print.py and test_math.py: one chromium, and a
# page that tests only read is loaded once per screen. Scheduled after the other site tests, by
# when the site is built (rank 3: see tools/book/scheduling.py).
pytestmark = pytest.mark.browser_group("browser-screens", rank=3)

CHAPTERS = [landing_page(chapter, DOCS) for chapter in chapters()]  # each chapter's first page
PAGES = [uri for uris in chapters().values() for uri in uris]  # every chapter page, in order
SHOWN = "chapters/04-causal-attention/"  # heatmaps with numbers, and exercises with solutions
COPY_BUTTONS = "[data-clipboard-target], clipboard-copy"  # Material's, mkdocs-jupyter's

def chapter_path(source: Path) -> str:
    return f"chapters/{chapter_of(source.relative_to(DOCS).as_posix())}/"


# The first heatmap that the dark theme inverts on the page: its box, and every number written in
# its cells (black or white text) with its box, all in CSS pixels of the viewport.
MEASURE_HEATMAP = """() => {
  const image = [...document.querySelectorAll('.attn-figure image[id*="dark-invert-"]')]
    .find(i => getComputedStyle(i.closest('svg')).display !== 'none');  // the drawing shown
  image.scrollIntoView({block: 'center'});
  const box = r => ({x: r.x, y: r.y, width: r.width, height: r.height});
  const svg = image.closest('svg');
  const numbers = [...svg.querySelectorAll('text')].filter(t => /^[-+]?\\d\\.\\d+$/.test(t.textContent.trim()))
    .map(t => ({fill: getComputedStyle(t).fill, box: box(t.getBoundingClientRect())}));
  return {image: box(image.getBoundingClientRect()), numbers};
}"""


def viewport_image(page: Page) -> np.ndarray:
    """The viewport as an (height, width, 3) array, one pixel per CSS pixel."""
    return np.asarray(Image.open(io.BytesIO(page.screenshot(scale="css"))).convert("RGB"))


def mean_luminance(shot: np.ndarray, box: dict[str, float]) -> float:
    """Mean luminance of the part of ``box`` (CSS px of the viewport) that is on screen."""
    x0, y0 = max(0, round(box["x"])), max(0, round(box["y"]))
    x1, y1 = round(box["x"] + box["width"]), round(box["y"] + box["height"])
    return float(luminance(shot[y0:y1, x0:x1]).mean())


def heatmap_shade(page: Page, scheme: str, problems: list[str]) -> tuple[float, list[str]]:
    """Mean luminance of the page's first inverted-in-dark heatmap, and ``problems`` plus every
    number on screen in its cells whose contrast with its cell is under 3:1."""
    found = page.evaluate(MEASURE_HEATMAP)
    shot = viewport_image(page)
    height, width = shot.shape[:2]
    checked = 0
    for number in found["numbers"]:
        b = number["box"]  # the cell's colour: just left of the text, inside the cell
        x, y = round(b["x"] - 3), round(b["y"] + b["height"] / 2)
        if not (0 <= x and b["x"] + b["width"] < width and 0 <= y < height):
            continue  # scrolled out of the figure's box or of the screen
        checked += 1
        cell = "rgb({}, {}, {})".format(*shot[y, x])
        ratio = contrast(number["fill"], cell)
        if ratio < 3:
            problems = problems + [f"{scheme}: text {number['fill']} on cell {cell}: {ratio:.1f}:1"]
    assert checked >= 6, f"{scheme}: expected numbers on screen in the heatmap's cells, {found}"
    return mean_luminance(shot, found["image"]), problems


def edge_shades(page: Page, figure: str, strip: int = 10) -> dict[str, float]:
    """Mean luminance of the left and right ``strip`` px of a figure's box as it shows now."""
    box = page.locator(figure).bounding_box()
    shot = viewport_image(page)
    return {side: mean_luminance(shot, {**box, "x": x0, "width": strip})
            for side, x0 in (("left", box["x"]), ("right", box["x"] + box["width"] - strip))}


def test_figure_text_is_legible_on_a_desktop(
    screens: dict[str, BrowserContext], site: SiteServer
) -> None:
    """The heatmaps with a number in every cell (chapters 4 and 5) at 1280 px; every page at
    390 px is checked on the crawl (test_reader_experience.py)."""
    problems = []
    for uri in (SHOWN, "chapters/05-multi-head-attention/one-projection-split-into-heads/"):
        page = open_page(screens["desktop"], site, uri)
        figures = page.evaluate(MEASURE_FIGURES)
        assert figures, f"{uri} shows no figure"
        problems += figure_problems(figures, f"1280 px {uri}")
    assert problems == [], "\n".join(problems)


def test_figures_take_the_dark_theme(
    screens: dict[str, BrowserContext], site: SiteServer, screenshots: Path
) -> None:
    shots, heatmaps, problems = {}, {}, []
    for scheme in ("phone", "phone-dark"):
        page = open_page(screens[scheme], site, SHOWN)
        figure = page.locator(".attn-figure").first
        figure.scroll_into_view_if_needed()
        shots[scheme] = page.evaluate("""() => {
          const svg = document.querySelector('.attn-figure > svg');
          const luminance = c => { const [r, g, b] = c.match(/[\\d.]+/g).map(Number);
                                   return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255; };
          const backgrounds = [...svg.querySelectorAll('g[id$="patch_1"] > path')]
            .map(p => getComputedStyle(p).fill);
          return {scheme: document.body.dataset.mdColorScheme,
                  ink: luminance(getComputedStyle(svg.querySelector('text')).fill),
                  page: luminance(getComputedStyle(document.body).backgroundColor),
                  backgrounds};
        }""")
        name = "figures-390-dark.png" if scheme.endswith("dark") else "figures-390-light.png"
        page.screenshot(path=str(screenshots / name))
        heatmaps[scheme], problems = heatmap_shade(page, scheme, problems)
    light, dark = shots["phone"], shots["phone-dark"]
    assert (light["scheme"], dark["scheme"]) == ("default", "slate")
    for shot in (light, dark):
        assert shot["backgrounds"] and set(shot["backgrounds"]) == {"none"}, shot
        assert abs(shot["ink"] - shot["page"]) > 0.5, f"figure text does not stand out: {shot}"
    assert dark["ink"] > 0.6 and light["ink"] < 0.3, (light, dark)
    # A heatmap whose scale starts at white is inverted in the dark theme (dark where the weight
    # is low) instead of glaring; the number in each cell contrasts with the cell in both themes.
    assert heatmaps["phone"] > 0.5 > heatmaps["phone-dark"], f"heatmap luminance: {heatmaps}"
    assert problems == [], "\n".join(problems)


def test_exercises_print_open_and_buttons_do_not_print(
    screens: dict[str, BrowserContext], site: SiteServer, screenshots: Path
) -> None:
    page = open_page(screens["desktop"], site, SHOWN)
    hidden = """() => [...document.querySelectorAll('.md-typeset details:not([open])')].map(d =>
      [...d.children].filter(c => c.tagName !== 'SUMMARY')
        .every(c => !c.checkVisibility() || c.getBoundingClientRect().height === 0))"""
    shown = """(selector) => [...document.querySelectorAll(selector)]
      .filter(e => e.checkVisibility() && e.getBoundingClientRect().height > 0).length"""
    on_screen = page.evaluate(hidden)
    assert on_screen and all(on_screen), "expected closed exercise boxes on the page"
    assert page.evaluate(shown, COPY_BUTTONS) > 0, "expected copy buttons on screen"
    page.emulate_media(media="print")
    try:
        on_paper = page.evaluate(hidden)
        assert not any(on_paper), f"{on_paper.count(True)} closed boxes print empty"
        for selector in (COPY_BUTTONS, ".md-header", ".md-sidebar", ".md-footer",
                         ".attn-notebook-links", ".md-content__button"):
            assert page.evaluate(shown, selector) == 0, f"{selector} prints"
        page.locator(".md-typeset details").first.scroll_into_view_if_needed()
        page.screenshot(path=str(screenshots / "print-chapters-04-causal-attention.png"))
    finally:
        page.emulate_media(media="screen")


def chapter_titles() -> list[str]:
    return [re.search(r"^# (.+)$", s.read_text(encoding="utf-8"), re.MULTILINE)[1]
            for s in CHAPTERS]


def test_print_page_holds_the_preface_and_every_chapter(built_site: Path) -> None:
    html = (built_site / "print" / "index.html").read_text(encoding="utf-8")
    html = html[html.index("<article") : html.index("</article>")]  # the content, not the menus
    sections = re.findall(r'<section class="attn-print-section" id="([^"]+)">', html)
    # Every chapter page, a chapter's section pages after its landing page: 07-fast-attention,
    # 07-fast-attention-tiles, ...
    expected = [re.sub(r"(/index)?\.md$", "", uri).removeprefix("chapters/").replace("/", "-")
                for uri in PAGES]
    assert sections == ["preface"] + expected
    assert 'href="../chapters/' not in html, "links to chapters should stay on the print page"
    index = (built_site / "search" / "search_index.json").read_text(encoding="utf-8")
    assert '"location":"print/' not in index, "the print page repeats every chapter in search"
    for title in chapter_titles():
        assert f">{title}<" in html or title in re.sub(r"<[^>]+>", "", html), title


def test_pdf_step_makes_a_pdf_that_names_every_chapter(
    built_site: Path, chromium: Path, tmp_path: Path
) -> None:
    # The whole book takes Chromium minutes to print on a busy machine (.ci/run makes it after
    # the build); here the print page keeps each section's title only, on the site's own styles.
    site = tmp_path / "site"
    site.mkdir()
    for child in built_site.iterdir():
        if child.name != "print":
            (site / child.name).symlink_to(child)
    html = (built_site / "print" / "index.html").read_text(encoding="utf-8")
    sections = re.compile(r'(<section class="attn-print-section"[^>]*>).*?(<h1.*?</h1>).*?(</section>)',
                          flags=re.DOTALL)
    (site / "print").mkdir()
    (site / "print" / "index.html").write_text(sections.sub(r"\1\2\3", html), encoding="utf-8")
    pdf = make_pdf(site, chromium, timeout=120)
    text = " ".join(" ".join(p.extract_text().split()) for p in pypdf.PdfReader(pdf).pages)
    missing = [t for t in chapter_titles() if " ".join(t.split()) not in text]
    assert missing == [], f"the PDF lacks the chapter titles {missing}:\n{text[:2000]}"
    page = (site / "print" / "index.html").read_text(encoding="utf-8")
    assert f'<a href="{PDF_NAME}" download>' in page, "no download link to the PDF"


NO_CUE = (".attn-no-cue .md-typeset .attn-figure, .attn-no-cue .md-typeset__scrollwrap, "
          ".attn-no-cue .md-typeset table:not([class]) { background: none !important; }")


def cue_darkening(page: Page, figure: str, scroll: str) -> dict[str, float]:
    """How much darker each edge of ``figure`` is with the scroll cue than without it, after
    ``f.scrollLeft = scroll``: the same view, the cue switched off by a class on the body."""
    page.locator(figure).evaluate(f"f => {{ f.scrollLeft = {scroll}; }}")
    shades = {}
    for off in ("false", "true"):
        page.evaluate(f"document.body.classList.toggle('attn-no-cue', {off})")
        shades[off] = edge_shades(page, figure)
    page.evaluate("document.body.classList.remove('attn-no-cue')")
    return {side: shades["true"][side] - shades["false"][side] for side in ("left", "right")}


def test_a_figure_wider_than_the_phone_shows_that_it_scrolls(
    screens: dict[str, BrowserContext], site: SiteServer
) -> None:
    """The edge past which more of a figure lies is shaded; at the end of the scroll, or when the
    figure fits, it is not."""
    found = {}
    for where, wide in (("phone", "f.scrollWidth > f.clientWidth + 8"),
                        ("desktop", "f.scrollWidth <= f.clientWidth")):
        page = open_page(screens[where], site, SHOWN, changes=True)
        if where == "phone":  # every figure has a layout that fits a phone: widen one beyond it
            page.add_style_tag(content=".attn-figure > svg { min-width: 800px !important }")
        index = page.evaluate(f"() => [...document.querySelectorAll('.attn-figure')].findIndex(f => {wide})")
        assert index >= 0, f"{where}: no figure of chapter 4 for which {wide}"
        figure = f".attn-figure >> nth={index}"
        page.locator(figure).scroll_into_view_if_needed()
        page.add_style_tag(content=NO_CUE)
        found[where] = [cue_darkening(page, figure, at) for at in ("0", "f.scrollWidth")]
    (start, end), (fits, _) = found["phone"], found["desktop"]
    assert start["right"] > 0.02 and abs(start["left"]) < 0.005, f"phone, at the start: {start}"
    assert end["left"] > 0.02 and abs(end["right"]) < 0.005, f"phone, at the end: {end}"
    assert max(map(abs, fits.values())) < 0.005, f"desktop, a figure that fits: {fits}"


APPENDIX = ["appendix/kernel-timings/", "appendix/cpu/", "appendix/gpu-h200/", "appendix/gpu-h100/"]
# The figures' ink and the tables' scroll cue, read in each theme.
MEASURE_INK = """() => {
  const luminance = c => { const [r, g, b] = c.match(/[\\d.]+/g).map(Number);
                           return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255; };
  const text = document.querySelector('.attn-figure svg text');
  return {ink: luminance(getComputedStyle(text).fill),
          page: luminance(getComputedStyle(document.body).backgroundColor)};
}"""


def test_appendix_reads_at_both_widths_in_both_themes(
    screens: dict[str, BrowserContext], site: SiteServer, screenshots: Path
) -> None:
    """Every appendix page on a 1280 px desktop (390 px light: the crawl), and the H200 page at
    390 px and 1280 px in the dark theme: figure text of 9 px or more, tables that fit or scroll
    with their first column in view, code names unbroken, and figure ink that follows the theme."""
    problems, inks = [], {}
    visits = [("desktop", path) for path in APPENDIX]
    visits += [("phone-dark", "appendix/gpu-h200/"), ("desktop-dark", "appendix/gpu-h200/")]
    for where, path in visits:
        page = open_page(screens[where], site, path)
        figures, tables = page.evaluate(MEASURE_FIGURES), page.evaluate(MEASURE_TABLES)
        assert tables, f"{where} {path}: no table"
        problems += figure_problems(figures, f"{where} {path}") + table_problems(tables, f"{where} {path}")
        if figures:
            inks[where] = page.evaluate(MEASURE_INK)
        if where == "phone-dark":
            page.screenshot(path=str(screenshots / "appendix-390-dark.png"))
    assert problems == [], "\n".join(problems)
    assert inks["desktop"]["ink"] < 0.3 and inks["desktop"]["page"] > 0.9, inks
    for dark in ("phone-dark", "desktop-dark"):  # light ink on the dark page
        assert inks[dark]["ink"] > 0.6 and inks[dark]["page"] < 0.3, inks


def test_a_table_wider_than_the_phone_scrolls_with_its_first_column_in_view(
    screens: dict[str, BrowserContext], site: SiteServer
) -> None:
    """The right edge of a table that scrolls is shaded until its end is reached; its first
    column stays where it was while the rest scrolls under it."""
    page = open_page(screens["phone"], site, "appendix/gpu-h100/", changes=True)
    index = page.evaluate("() => [...document.querySelectorAll('.md-typeset__scrollwrap')]"
                          ".findIndex(b => b.scrollWidth > b.clientWidth + 40 && b.offsetParent)")
    assert index >= 0, "no visible table of the H100 page is wider than the phone"
    box = f".md-typeset__scrollwrap >> nth={index}"
    page.locator(box).scroll_into_view_if_needed()
    page.add_style_tag(content=NO_CUE)
    first = page.locator(f"{box} >> tr >> nth=1 >> td >> nth=0")
    before = first.bounding_box()["x"]
    start, end = (cue_darkening(page, box, at) for at in ("0", "f.scrollWidth"))
    assert start["right"] > 0.02, f"no shade on the right edge of a table that scrolls: {start}"
    assert abs(end["right"]) < 0.005, f"a shade on the right edge at the end of the scroll: {end}"
    after, edge = first.bounding_box()["x"], page.locator(box).bounding_box()["x"]
    # scrolled to the end, the first column sits at the box's left edge (it moved no further
    # than the wrapper's padding), where the other columns would have left the view
    assert edge - 1 <= after <= before, f"the first column scrolled away: x {before} -> {after}, box at {edge}"
