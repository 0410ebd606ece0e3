"""Each browser check fails when the thing it checks is broken.

The probe page is the site's own page shell (the built 404.html: header, navigation, footer,
Material's scripts and stylesheets, KaTeX's among them, an empty article) with a small article: a
heading, inline and display math (typeset by the site's math hook, as the build does), a link to
the heading and one home, a code block with its output block, and a figure of the site. Every check
passes on it (test_the_probe_passes_every_check). Each variant breaks one thing (an external
script, a broken link, math left untypeset, an image without alt text, a copy button on an output
block, an element wider than a phone...) and the check for that thing must report it. Pages are
served from memory by a server of their own, under the site's base path as GitHub Pages serves
them; the built site is never modified.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from book.browser.checks import (
    check_copy_buttons,
    check_equations_fit,
    check_fits_width,
    check_images,
    check_links,
    check_loads_cleanly,
    check_math,
    check_stays_on_host,
)
from book.browser.crawl import LinkTargets, Snapshot, visit, visit_all
from book.browser.live_checks import (
    check_copy_button_copies,
    check_notebook,
    check_palette_toggle,
    check_search,
)
from book.browser.server import SiteServer
from book.browser.tab import Tab
from book.hooks.math import typeset as typeset_math

# All tests of this module in one process (one chromium, the probe pages served and visited
# once), scheduled last of all (rank 4: see tools/book/scheduling.py).
pytestmark = pytest.mark.browser_group("browser-probe", rank=4)

PROBE = r"""
<h1 id="a-probe-page">A probe page</h1>
<p>The weight <span class="arithmatex">\(\alpha_{ij}\)</span> of key
<span class="arithmatex">\(j\)</span>, a link <a href="#a-probe-page">to the top</a> and one
<a href="./">home</a>.</p>
<div class="arithmatex">\[ z^{(i)} = \sum_{j} \alpha_{ij} v^{(j)} \tag{2.1} \]</div>
<div class="language-python highlight"><pre><span></span><code>print(1 + 1)
</code></pre></div>
<div class="language-text output highlight no-copy"><pre><span></span><code>2
</code></pre></div>
<p><img alt="A figure of the book" src="FIGURE"></p>
"""
# A display equation that cannot break its line (an \underbrace is one piece): wider than a phone.
WIDE_EQUATION = (
    r'<div class="arithmatex">\[ \underbrace{x_1 + x_2 + x_3 + x_4 + x_5 + x_6 + x_7 + x_8 + x_9'
    r' + x_{10} + x_{11} + x_{12}}_{\text{twelve terms}} \tag{9.9} \]</div>'
)
# What KaTeX writes for TeX it cannot parse when it is not told to throw (the build does throw).
KATEX_ERROR = '<span class="katex-error" title="ParseError" style="color:#cc0000">{}</span>'
ARTICLE = re.compile(r'(<article class="md-content__inner md-typeset">).*?(</article>)', re.DOTALL)
Edit = Callable[[str], str]


def replace(old: str, new: str) -> Edit:
    """An edit that replaces the first ``old`` of the page (which must be there) by ``new``."""

    def edit(html: str) -> str:
        if old not in html:
            raise ValueError(f"expected {old!r} in the probe page, found no such text")
        return html.replace(old, new, 1)

    return edit


def add(snippet: str) -> Edit:
    """An edit that adds ``snippet`` at the end of the article."""
    return replace("</article>", snippet + "</article>")


def remove(pattern: str) -> Edit:
    """An edit that removes every match of the regular expression ``pattern`` (at least one)."""

    def edit(html: str) -> str:
        edited, count = re.subn(pattern, "", html, flags=re.DOTALL)
        if not count:
            raise ValueError(f"expected a match of {pattern!r} in the page, found none")
        return edited

    return edit


TARGETS = LinkTargets()  # link targets fetched from the server, each once


def links(snap: Snapshot) -> list[str]:
    """check_links, with link targets fetched from the server."""
    return check_links(snap, TARGETS)


# The broken variants of the probe page. Breakages that different checks notice share a page (a
# page load costs the browser a second or two); math left untypeset, KaTeX's stylesheet removed
# and an equation number moved out of its box or over its equation change all the math of a page,
# so each has a page of its own, and an element wider than a phone is shown on one.
VARIANTS: dict[str, list[Edit]] = {
    "good": [],  # the probe page itself
    "broken": [
        # off-site requests
        add('<script src="https://example.com/x.js"></script>'),
        add('<script>fetch("https://example.org/count")</script>'),
        # errors
        add('<script>console.error("the probe went wrong")</script>'),
        add("<script>notDefinedAnywhere()</script>"),
        add('<script src="assets/javascripts/no-such-script.js"></script>'),
        # TeX
        add(KATEX_ERROR.format(r"\frac{1}{")),
        add(KATEX_ERROR.format(r"\notAMacro{j}")),
        # links
        add('<a href="chapters/no-such-chapter/">gone</a>'),
        add('<a href="#no-such-anchor">gone</a>'),
        add('<a href="./#no-such-heading">gone</a>'),
        # images
        add('<img src="FIGURE?no-alt">'),
        add('<img alt=" " src="FIGURE?blank-alt">'),
        add('<img alt="A figure" src="figures/no-such-figure.svg">'),
        # copy buttons
        replace("output highlight no-copy", "output highlight"),
        add(
            '<div class="language-text output highlight no-copy"><pre><span></span>'
            '<nav class="md-code__nav"><button class="md-code__button" data-md-type="copy" '
            'data-clipboard-target="#__code_9 > code"></button></nav><code>3\n</code></pre></div>'
        ),
        replace('"language-python highlight"', '"language-python highlight no-copy"'),
    ],
    "untypeset": [],  # the probe page as it would be if the build did not typeset its math
    "no-katex-css": [remove(r'<link rel="stylesheet" href="[^"]*assets/katex/katex\.min\.css">')],
    "number-outside": [add("<style>.md-typeset .katex-tag { right: -50em !important }</style>")],
    "number-over": [add("<style>.md-typeset .katex-tag { right: 50% !important }</style>")],
    "wide": [add('<div style="width: 1200px">a wide element</div>'), add(WIDE_EQUATION)],
}

# name: (the variant that has it, the check that must notice, a text of its report, in which
# BASE/ stands for the site's base path)
BREAKAGES: dict[str, tuple[str, Callable[[Snapshot], list[str]], str]] = {
    "external script": ("broken", check_stays_on_host, "requested https://example.com/x.js"),
    "script fetching from another host": (
        "broken", check_stays_on_host, "requested https://example.org/count",
    ),
    "console error": ("broken", check_loads_cleanly, "console error: the probe went wrong"),
    "uncaught exception": (
        "broken", check_loads_cleanly, "uncaught exception: notDefinedAnywhere is not defined",
    ),
    "missing local script": ("broken", check_loads_cleanly, "no-such-script.js (HTTP 404)"),
    "math left as TeX": ("untypeset", check_math, r"raw math left in the text: '\(\alpha_{ij}\)'"),
    "formula not typeset": ("untypeset", check_math, r"formula not typeset: '\[ z^{(i)}"),
    "KaTeX stylesheet removed": ("no-katex-css", check_math, "KaTeX's stylesheet is not applied"),
    "TeX that does not parse": ("broken", check_math, r"KaTeX error: '\frac{1}{"),
    "undefined TeX macro": ("broken", check_math, r"KaTeX error: '\notAMacro"),
    "equation number outside its box": (
        "number-outside", check_equations_fit, "its number (2.1) is not inside the box",
    ),
    "equation wider than its box": ("wide", check_equations_fit, "px wide in a"),
    "equation number over the equation": (
        "number-over", check_equations_fit, "its number (2.1) covers the equation",
    ),
    "broken link": ("broken", links, "link to BASE/chapters/no-such-chapter/ leads nowhere"),
    "broken anchor": ("broken", links, "link to BASE/probe-broken.html#no-such-anchor: no such"),
    "broken anchor on another page": ("broken", links, "link to BASE/#no-such-heading: no such"),
    "image without alt text": ("broken", check_images, "no-alt'> has no alt text"),
    "image with blank alt text": ("broken", check_images, "blank-alt'> has no alt text"),
    "missing image": ("broken", check_images, "no-such-figure.svg'> did not load"),
    "output block that gets a copy button": (
        "broken", check_copy_buttons, "output block has a copy button: '2'",
    ),
    "copy button written into an output block": (
        "broken", check_copy_buttons, "output block has a copy button: '3'",
    ),
    "code block without a copy button": (
        "broken", check_copy_buttons, "code block has no copy button: 'print(1 + 1)'",
    ),
    "element wider than a phone": ("wide", check_fits_width, "div reaches 1"),
}
PROBE_FONTS_TIMEOUT_MS = 20_000  # a small page's fonts: under a second unless the machine is busy


def typeset(html: str) -> str:
    """``html`` with its math typeset by the site's math hook, as the build typesets a page."""
    return typeset_math(html, "the probe page")


@pytest.fixture(scope="module")
def probe(chromium: Path, built_site: Path) -> Iterator[SiteServer]:
    """A server of the built site, under its base path, that also serves every variant of the
    probe page at ``probe-<variant>.html``."""
    shell = (built_site / "404.html").read_text(encoding="utf-8")
    # 404.html names its files by absolute paths: the site's base path (site_url's path).
    base = re.search(r'src="([^"]*)assets/javascripts/bundle\.', shell)
    assert base, "404.html does not load Material's bundle"
    figures = sorted((built_site / "figures").glob("*.svg"))
    assert figures, "the built site has no figure to show on the probe page"
    page = ARTICLE.sub(lambda m: m.group(1) + PROBE + m.group(2), shell, count=1)
    # The tests change what the server answers for a path, so the browser must always ask.
    with SiteServer(built_site, base=base.group(1), revalidate=True, empty_search_index=True) as server:
        for name, edits in VARIANTS.items():
            variant = page
            for edit in edits:
                variant = edit(variant)
            if name != "untypeset":
                variant = typeset(variant)
            variant = variant.replace("FIGURE", f"figures/{figures[0].name}")
            server.overrides[server.path(f"probe-{name}.html")] = variant.encode("utf-8")
        yield server


def probe_page(probe: SiteServer, name: str = "good") -> str:
    """The HTML of the probe page's variant ``name``."""
    return probe.overrides[probe.path(f"probe-{name}.html")].decode("utf-8")


@pytest.fixture(scope="module")
def snapshots(probe: SiteServer, desktops: list[Tab], phones: list[Tab]) -> dict[str, Snapshot]:
    """Every variant visited once on the desktop tabs; "good" and "wide" on the phone tabs."""

    def urls(names: list[str]) -> list[str]:
        return [probe.url(f"probe-{name}.html") for name in names]

    names = [name for name in VARIANTS if name != "wide"]
    found = dict(zip(names, visit_all(desktops, urls(names), PROBE_FONTS_TIMEOUT_MS)))
    found["good on a phone"], found["wide"] = visit_all(
        phones, urls(["good", "wide"]), PROBE_FONTS_TIMEOUT_MS
    )
    return found


def test_the_probe_passes_every_check(snapshots: dict[str, Snapshot]) -> None:
    checks = {check for _, check, _ in BREAKAGES.values()}
    for name in ("good", "good on a phone"):
        problems = [problem for check in checks for problem in check(snapshots[name])]
        assert problems == [], f"the probe page fails on the {name!r} tab"
    good = snapshots["good"].dom
    assert good["math"]["rendered"] >= 3, "the probe's three formulas are not typeset"
    assert "eq-2-1" in good["ids"], "the probe's numbered equation has no anchor"
    blocks = [(block["output"], block["text"]) for block in good["blocks"]]
    assert blocks == [(False, "print(1 + 1)"), (True, "2")]
    assert [image["alt"] for image in good["images"]] == ["A figure of the book"]


@pytest.mark.parametrize("name", BREAKAGES)
def test_check_reports(name: str, probe: SiteServer, snapshots: dict[str, Snapshot]) -> None:
    variant, check, expected = BREAKAGES[name]
    expected = expected.replace("BASE/", probe.base)
    problems = check(snapshots[variant])
    assert any(expected in problem for problem in problems), (
        f"{check.__name__} should report {expected!r} on the {variant!r} page; it reported "
        f"{problems}"
    )


def test_copy_check_reports_a_button_that_copies_nothing(probe: SiteServer, desktop: Tab) -> None:
    desktop.page.goto(probe.url("probe-good.html"), wait_until="load")
    assert check_copy_button_copies(desktop) == []
    # A click handler that runs before Material's and stops the click from reaching it.
    dead = add(
        "<script>window.addEventListener('click', event => {"
        " if (event.target.closest('[data-clipboard-target]')) event.stopPropagation(); },"
        " true)</script>"
    )(probe_page(probe))
    probe.overrides[probe.path("probe-dead-copy.html")] = dead.encode("utf-8")
    desktop.page.goto(probe.url("probe-dead-copy.html"), wait_until="load")
    problems = check_copy_button_copies(desktop, timeout_s=2)  # the good page copied at once
    assert len(problems) == 1 and "'print(1 + 1)' copied nothing" in problems[0], problems


def test_search_check_reports_a_missing_index(probe: SiteServer, desktop: Tab) -> None:
    index = probe.path("search/search_index.json")
    probe.hidden.add(index)
    try:
        problems = check_search(desktop, probe.url(""), "softmax", set())
    finally:
        probe.hidden.discard(index)
    assert len(problems) == 1 and "loading the search index failed" in problems[0], problems
    assert "(HTTP 404)" in problems[0]


def test_search_check_reports_results_that_miss_the_page(probe: SiteServer, desktop: Tab) -> None:
    problems = check_search(desktop, probe.url(""), "softmax", {"/no-such-page/"})
    assert len(problems) == 1 and "does not list /no-such-page/" in problems[0], problems


@pytest.mark.parametrize(
    ("name", "edit", "expected"),
    [
        (
            "no-toggle",
            remove(r'<form class="md-header__option" data-md-component="palette">.*?</form>'),
            "0 visible light/dark toggles",
        ),
        (
            "fixed-colours",
            add("<style>body { background-color: white !important; }</style>"),
            "kept background rgb(255, 255, 255)",
        ),
    ],
)
def test_palette_check_reports(
    name: str, edit: Edit, expected: str, probe: SiteServer, desktop: Tab
) -> None:
    probe.overrides[probe.path(f"probe-{name}.html")] = edit(probe_page(probe)).encode("utf-8")
    desktop.page.goto(probe.url(f"probe-{name}.html"), wait_until="load")
    problems = check_palette_toggle(desktop)
    assert any(expected in problem for problem in problems), problems


def first_notebook(probe: SiteServer) -> tuple[str, Path]:
    """The URL path of the notebook page with the least math (the quickest to load), and its
    .ipynb file in the built site."""
    notebook = min(
        probe.root.rglob("*.ipynb"), key=lambda nb: (nb.read_text(encoding="utf-8").count("$"), nb)
    )
    return probe.path(notebook.parent.relative_to(probe.root).as_posix() + "/"), notebook


@pytest.mark.parametrize(
    ("name", "edit", "expected"),
    [
        ("not rendered", lambda html: html.replace("jupyter-wrapper", "plain-wrapper"),
         "notebook not rendered"),
        ("without download link", remove(r'<a href="[^"]*\.ipynb" download.*?</a>'),
         "no .ipynb download link"),
        ("with its .ipynb missing", None, "download of the notebook failed"),
    ],
)
def test_notebook_check_reports(
    name: str, edit: Edit | None, expected: str, probe: SiteServer, desktop: Tab, tmp_path: Path
) -> None:
    page, notebook = first_notebook(probe)
    if edit:
        html = (notebook.parent / "index.html").read_text(encoding="utf-8")
        probe.overrides[page] = edit(html).encode("utf-8")
    else:
        probe.hidden.add(page + notebook.name)
    try:
        problems = check_notebook(desktop, probe.origin + page, tmp_path)
    finally:
        probe.overrides.pop(page, None)
        probe.hidden.discard(page + notebook.name)
    assert any(expected in problem for problem in problems), problems


def test_copy_check_reports_a_notebook_cell_without_a_button(
    probe: SiteServer, desktop: Tab
) -> None:
    page, notebook = first_notebook(probe)
    html = (notebook.parent / "index.html").read_text(encoding="utf-8")
    probe.overrides[page] = remove(r"<clipboard-copy.*?</clipboard-copy>")(html).encode("utf-8")
    try:
        snap = visit(desktop, probe.origin + page)
    finally:
        probe.overrides.pop(page)
    problems = check_copy_buttons(snap)
    assert problems and all("code block has no copy button" in p for p in problems), problems
