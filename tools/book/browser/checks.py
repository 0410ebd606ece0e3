"""Checks of one :class:`~book.browser.crawl.Snapshot`: what a visit recorded must show a page
that loads cleanly, asks nothing of other hosts, and shows typeset math, working links, images
with alt text, copy buttons on code only, legible figures and tables that fit a phone.

Each ``check_*(snapshot)`` returns a list of problems, one readable line each, and an empty list
when the page is fine; ``figure_problems`` and ``table_problems`` judge what ``MEASURE_FIGURES``
and ``MEASURE_TABLES`` (book.browser.scripts) measured, on a snapshot or on any open page.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit

from ..constants import MIN_TEXT_PX
from .crawl import LinkTargets, Snapshot, page_key


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
    with KaTeX's stylesheet and fonts, no TeX errors."""
    math, where = snap.dom["math"], snap.path
    # TeX is quoted as written ('\\alpha' would be unreadable in a report).
    problems = [f"{where}: raw math left in the text: '{text}'" for text in snap.dom["rawMath"]]
    problems += [f"{where}: formula not typeset: '{text}'" for text in math["untypeset"]]
    problems += [f"{where}: KaTeX error: '{text}'" for text in math["errors"]]
    if math["elements"] and not math["rendered"]:
        problems.append(f"{where}: {math['elements']} formulas and no KaTeX output")
    if not math["styled"]:
        problems.append(f"{where}: KaTeX's stylesheet is not applied (MathML copies shown)")
    if snap.fonts_state.startswith("timeout"):
        problems.append(f"{where}: {snap.fonts_state}")
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
        if not targets.exists(link):
            problems.append(f"{snap.path}: link to {parts.path} leads nowhere (not found)")
        elif parts.fragment and unquote(parts.fragment) not in (targets.ids(link) or ()):
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
    """Each code block (a notebook's code cells too) has a copy button and no output has one;
    on a page whose content the theme's scripts leave alone (the print page: overrides/print.html)
    no block has one."""
    problems = []
    for block in snap.dom["blocks"]:
        if block["output"] and block["buttons"]:
            problems.append(f"{snap.path}: output block has a copy button: {block['text']!r}")
        if not block["output"] and not block["buttons"] and snap.dom["mounted"]:
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


def figure_problems(figures: list[dict[str, Any]], where: str) -> list[str]:
    """Problems of measured figures (``MEASURE_FIGURES``): text under ``MIN_TEXT_PX`` (the size
    the figure hook gives every figure's smallest text), text drawn as paths, no label for screen
    readers."""
    problems = []
    for figure in figures:
        name = f"{where}: {figure['name']}"
        if figure["smallest"] < MIN_TEXT_PX:
            problems.append(f"{name}: text {figure['smallest']:.1f} px < {MIN_TEXT_PX} px")
        if figure["texts"] == 0 or figure["glyphPaths"]:
            problems.append(f"{name}: text drawn as paths, not as SVG text")
        if not figure["label"].strip():
            problems.append(f"{name}: no aria-label for screen readers")
    return problems


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


# The checks every visited page must pass, at any width (check_fits_width, check_tables and
# check_equations_fit depend on the width; check_links on the targets the run knows).
SNAPSHOT_CHECKS = (
    check_loads_cleanly, check_stays_on_host, check_math, check_images, check_copy_buttons,
)
