"""MkDocs hook: the book's math typeset at build time with KaTeX; equation references linked.

Pages write math in TeX: ``$...$`` and ``$$...$$``, which pymdownx.arithmatex (generic mode)
turns into ``<span class="arithmatex">\\(...\\)</span>`` and
``<div class="arithmatex">\\[...\\]</div>``; notebook pages (mkdocs-jupyter) keep ``$...$``
as text in their Markdown cells. This hook renders each formula to HTML with KaTeX
(``docs/assets/katex/katex.min.js``, run in V8 by the mini-racer package), so a page's math is
readable at first paint, without JavaScript and offline; the reader's browser needs only KaTeX's
stylesheet and fonts, which the site serves from ``assets/katex/``.
TeX that KaTeX cannot parse stops the build with the page and the formula.

A display breaks its lines, on a narrow screen, only where the TeX allows it: between separate
equations (at a top-level ``\\qquad``) and, should one equation still be too wide, before a
relation (``=``, ``\\le``, ``\\approx``, ...) that stands outside every group and delimiter pair;
never after a relation, never inside ``\\Bigl( ... \\Bigr)`` or braces (:func:`breakable`).

Equations numbered with ``\\tag{7.3}`` get the anchor ``#eq-7-3``, and every "equation (7.3)" or
"equations (7.3) and (7.5)" in the prose of any page links to its equation, on whichever page it
is; a reference to a number that no page defines is a build warning (an error under --strict).

In the search index a formula is its rendered text (``t×t``), never its TeX: the MathML copy
that KaTeX adds for screen readers carries the TeX source, and is marked ``data-search-exclude``
(as are the zero-width spaces KaTeX adds for Safari, which would split a formula's words).
Headings with math appear as text in the navigation and the table of contents: those are rendered
too, and the page's ``<title>`` gets the formula's text.
"""

from __future__ import annotations

import functools
import hashlib
import html
import json
import logging
import re
from collections.abc import Callable
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page
from mkdocs.utils import get_relative_url
from py_mini_racer import JSEvalException, MiniRacer

from ..cache import keep
from ..constants import DOCS, REPO

log = logging.getLogger("mkdocs.hooks.math")

KATEX_JS = DOCS / "assets" / "katex" / "katex.min.js"
# For the build only, not for the site: KaTeX's script, and the note on where the files come from.
BUILD_ONLY = ("assets/katex/katex.min.js", "assets/katex/README.txt")
# The fonts of almost every formula: fetched with the page, not once its layout asks for them.
PRELOADED_FONTS = ("assets/katex/fonts/KaTeX_Main-Regular.woff2",
                   "assets/katex/fonts/KaTeX_Math-Italic.woff2")
OPTIONS = {"throwOnError": True, "strict": "error", "output": "htmlAndMathml"}
# KaTeX's output for every formula, kept between builds (git-ignored; typesetting the book's 2,200
# formulas is 1.6 s of a build): one file per version of KaTeX's script and OPTIONS.
TYPESET_CACHE = REPO / ".cache" / "katex"

ARITHMATEX = re.compile(
    r'<(span|div) class="arithmatex">\s*\\([(\[])(.*?)\\[)\]]\s*</\1>', flags=re.DOTALL
)
TAG = re.compile(r"\\tag\*?\{([^{}]*)\}")
NOTEBOOK_MARKDOWN = re.compile(r'<div class="[^"]*\bjp-RenderedMarkdown\b[^"]*"[^>]*>')
NOTEBOOK_MATH = re.compile(
    r"\$\$(.+?)\$\$|(?<![\\$])\$([^\s$](?:[^$]*?[^\s$])?)\$(?!\$)", flags=re.DOTALL
)
# "equation (7.3)", "Equations (7.10) to (7.12)", "equations (1.5), (1.6) and (1.7)"
EQ_NUMBER = r"\(\d+\.\d+\)"
EQ_REFERENCE = re.compile(
    rf"\b[Ee]quations?\s+{EQ_NUMBER}(?:(?:,\s*|,?\s+(?:and|or|to)\s+|\s*[–-]\s*){EQ_NUMBER})*"
)
MARKUP = re.compile(r"<!--.*?-->|<[^>]*>", flags=re.DOTALL)
# Elements whose text is never searched for references: links, code, headings, math.
NO_LINKS = frozenset({"a", "code", "pre", "kbd", "script", "style", "textarea", "h1", "h2", "h3",
                      "h4", "h5", "h6", "math", "svg"})
NAV_ENTRY = re.compile(r'(<span class="md-ellipsis">)(.*?)(</span>)', flags=re.DOTALL)
INLINE_TEX = re.compile(r"\\\((.+?)\\\)", flags=re.DOTALL)
TITLE = re.compile(r"<title>(.*?)</title>", flags=re.DOTALL)
# nbconvert's loader: <!-- Load mathjax --> <script src=...> <script type="text/x-mathjax-config">
NBCONVERT_LOADER = re.compile(
    r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", flags=re.DOTALL
)

SEARCHED_MATHML = '<span class="katex-mathml">'
EXCLUDED_MATHML = '<span class="katex-mathml" data-search-exclude="math">'
SEARCHED_ZWSP = '<span class="vlist-s">\u200b</span>'
EXCLUDED_ZWSP = '<span class="vlist-s" data-search-exclude="math">\u200b</span>'

_tags: dict[str, File] = {}  # "7.3" -> the page that defines \tag{7.3}


# Relations before which a display may break; a break after a relation would leave "A =" alone.
RELATIONS = {"=", "<", ">", r"\le", r"\leq", r"\ge", r"\geq", r"\approx", r"\neq", r"\ne",
             r"\equiv", r"\sim", r"\simeq", r"\propto", r"\Rightarrow", r"\Leftrightarrow",
             r"\iff", r"\ll", r"\gg"}
OPENERS = re.compile(r"\\(?:left|[bB]igg?l)\b|\\begin\b")
CLOSERS = re.compile(r"\\(?:right|[bB]igg?r)\b|\\end\b")
SIZED = re.compile(r"\\[bB]igg?")  # \big( opens a pair and \big) closes it, as \bigl( and \bigr)
OPENING, CLOSING = {"(", "[", r"\{", r"\langle", r"\lvert", r"\lVert"}, {")", "]", r"\}", r"\rangle",
                                                                         r"\rvert", r"\rVert"}
TEX_TOKEN = re.compile(r"\\[A-Za-z]+|\\.|[{}]|\s+|.", flags=re.DOTALL)


def breakable(tex: str) -> str:
    """``tex`` with its top-level pieces grouped, so that KaTeX lets a line break only between
    them: at each top-level ``\\qquad`` (a break there is preferred: it comes with the space) and
    before each top-level relation. Each piece becomes one unbreakable group ``{...}``; a piece
    that starts with a relation gets an empty atom before it (``{}=``), so that the relation
    keeps its space on the left. A ``\\tag`` stays at the top level."""
    tags = "".join(f"\\tag{{{t}}}" for t in TAG.findall(tex))
    body = TAG.sub("", tex)
    pieces: list[list[str]] = [[]]
    joins: list[str] = []
    depth = 0  # braces, \left...\right, \bigl...\bigr and environments
    tokens = TEX_TOKEN.findall(body)
    for i, token in enumerate(tokens):
        sized = next((t for t in tokens[i + 1:] if t.strip()), "") if SIZED.fullmatch(token) else ""
        if token == "{" or OPENERS.fullmatch(token) or sized in OPENING:
            depth += 1
        elif token == "}" or CLOSERS.fullmatch(token) or sized in CLOSING:
            depth -= 1
        elif depth == 0 and token == r"\qquad":
            joins.append(r"\allowbreak\qquad")
            pieces.append([])
            continue
        elif depth == 0 and token in RELATIONS:
            before = "".join(t for t in pieces[-1]).strip()
            after_relation = before.endswith(tuple(RELATIONS)) or before.endswith(":")
            if before and not after_relation:
                joins.append(r"\allowbreak")
                pieces.append(["{}"])
        pieces[-1].append(token)
    if depth != 0 or len(pieces) == 1 and not tags:
        return tex  # unbalanced (KaTeX will say so) or nothing to group
    groups = [f"{{{''.join(p).strip()}}}" for p in pieces]
    out = groups[0] + "".join(j + g for j, g in zip(joins, groups[1:]))
    return out + tags


@functools.cache
def _katex() -> MiniRacer:
    """A V8 context with KaTeX loaded (once per build process)."""
    context = MiniRacer()
    context.eval(KATEX_JS.read_text(encoding="utf-8"))
    return context


def typeset_cache_file() -> Path:
    """The file that keeps the output of this KaTeX script with these OPTIONS."""
    digest = hashlib.sha256(KATEX_JS.read_bytes() + json.dumps(OPTIONS, sort_keys=True).encode())
    return TYPESET_CACHE / f"{digest.hexdigest()[:16]}.json"


@functools.cache
def _typeset_cache() -> dict[str, str]:
    """KaTeX's output by formula (``"1"`` or ``"0"``, display or not, then the TeX), as an earlier
    build kept it; formulas typeset since are added, and saved by :func:`on_post_build`."""
    try:
        return json.loads(typeset_cache_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):  # none yet, or a file cut short: typeset again
        return {}


_unsaved: set[str] = set()  # formulas typeset by this process and not yet in the cache file


@functools.cache
def render(tex: str, display: bool) -> str:
    """KaTeX's HTML for ``tex``; the TeX-carrying MathML is kept out of the search index.

    Raises:
        ValueError: with KaTeX's message, if KaTeX cannot typeset ``tex``.
    """
    key, kept = f"{int(display)}{tex}", _typeset_cache()
    if key in kept:
        out = kept[key]
    else:
        try:
            out = _katex().call("katex.renderToString", tex, {**OPTIONS, "displayMode": display})
        except JSEvalException as error:
            message = str(error).splitlines()[0].split("ParseError: ")[-1]
            raise ValueError(f"KaTeX cannot typeset {tex.strip()!r}: {message}") from None
        kept[key] = out
        _unsaved.add(key)
    # The zero-width spaces KaTeX adds for Safari's layout would split words in the index too.
    return out.replace(SEARCHED_MATHML, EXCLUDED_MATHML, 1).replace(SEARCHED_ZWSP, EXCLUDED_ZWSP)


def plain_text(tex: str) -> str:
    """The text a reader sees for inline ``tex`` (``XX⊤`` for ``XX^\\top``), for plain text."""
    shown = re.split(r'<span class="katex-html"[^>]*>', render(tex, False), maxsplit=1)[1]
    return html.unescape(MARKUP.sub("", shown)).replace("\u200b", "").strip()


def anchor(number: str) -> str:
    """The id of the equation tagged ``number``: ``7.3`` gives ``eq-7-3``."""
    return "eq-" + re.sub(r"[^0-9A-Za-z]+", "-", number).strip("-")


def _typeset(match: re.Match, where: str) -> str:
    kind, tex = match.group(1), html.unescape(match.group(3))
    try:
        rendered = render(breakable(tex) if kind == "div" else tex, display=kind == "div")
    except ValueError as error:
        raise PluginError(f"{where}: {error}") from None
    tags = TAG.findall(tex)
    ids = f' id="{anchor(tags[0])}"' if kind == "div" and tags else ""
    return f'<{kind} class="arithmatex"{ids}>{rendered}</{kind}>'


def typeset(fragment: str, where: str) -> str:
    """``fragment`` with each of arithmatex's formulas rendered by KaTeX (``where`` names the page
    in an error)."""
    return ARITHMATEX.sub(lambda m: _typeset(m, where), fragment)


def _notebook_math(fragment: str) -> str:
    """Mark the ``$...$`` and ``$$...$$`` in the text (not the code) of a Markdown cell as
    arithmatex does, so that they are typeset like the math of any other page."""

    def one(match: re.Match) -> str:
        if match.group(1) is not None:
            return f'<div class="arithmatex">\\[{match.group(1)}\\]</div>'
        return f'<span class="arithmatex">\\({match.group(2)}\\)</span>'

    return map_text(fragment, NOTEBOOK_MATH, one)


def _map_runs(fragment: str, change: Callable[[str], str], skip: frozenset[str]) -> str:
    """Apply ``change`` to every text run of an HTML fragment outside the elements in ``skip``,
    visiting every tag."""
    out, open_skips, last = [], [], 0
    for m in MARKUP.finditer(fragment):
        text = fragment[last:m.start()]
        out.append(change(text) if text and not open_skips else text)
        out.append(m.group(0))
        last = m.end()
        tag = re.match(r"<(/?)([A-Za-z][A-Za-z0-9]*)", m.group(0))
        if tag and tag.group(2).lower() in skip and not m.group(0).endswith("/>"):
            name = tag.group(2).lower()
            if not tag.group(1):
                open_skips.append(name)
            elif open_skips and open_skips[-1] == name:
                open_skips.pop()
    text = fragment[last:]
    out.append(change(text) if text and not open_skips else text)
    return "".join(out)


@functools.cache
def _skip_markup(skip: frozenset[str]) -> re.Pattern[str]:
    """The comments, and the tags of the elements in ``skip``: a tokenizer that finds them where
    MARKUP does, in a fragment none of whose tags holds a ``<``."""
    names = "|".join(sorted(skip, key=len, reverse=True))
    return re.compile(rf"<!--.*?-->|<(/?)({names})(?![A-Za-z0-9])[^>]*>",
                      flags=re.DOTALL | re.IGNORECASE)


def map_text(fragment: str, pattern: re.Pattern[str], replace: Callable[[re.Match[str]], str],
             skip: frozenset[str] = NO_LINKS) -> str:
    """``fragment`` with each match of ``pattern`` in a text run outside the elements in ``skip``
    replaced by ``replace(match)`` (``pattern.sub`` applied to every such run).

    Only the stretches between skipped elements in which ``pattern`` matches at all are split
    into text runs: a long page has tens of thousands of tags and few matches. (A match inside a
    run is a match of the stretch: a run is bounded by ``>`` and ``<``, which no word character
    or ``$`` is.) A fragment with a ``<`` inside a tag or comment, where that tokenizer could part
    ways with MARKUP, takes the way through every tag.
    """
    def change(text: str) -> str:
        return pattern.sub(replace, text)

    def stretch(start: int, end: int) -> str:  # fragment[start:end], outside skipped elements
        if pattern.search(fragment, start, end):  # as on the slice: a ">" precedes start
            return _map_runs(fragment[start:end], change, skip)
        return fragment[start:end]

    if re.search(r"<[^>]*<", fragment):
        return _map_runs(fragment, change, skip)

    out, open_skips, start = [], [], 0  # start: where the stretch outside skipped elements began
    for m in _skip_markup(skip).finditer(fragment):
        if m.group(2) is None or m.group(0).endswith("/>"):
            continue  # a comment, or an element that closes itself
        name = m.group(2).lower()
        if not m.group(1):
            if not open_skips:
                out.append(stretch(start, m.start()))
                start = m.start()
            open_skips.append(name)
        elif open_skips and open_skips[-1] == name:
            open_skips.pop()
            if not open_skips:
                out.append(fragment[start:m.end()])
                start = m.end()
    out.append(fragment[start:] if open_skips else stretch(start, len(fragment)))
    return "".join(out)


def _markdown_cells(page_html: str, change: Callable[[str], str]) -> str:
    """Apply ``change`` to the inside of every Markdown cell of a notebook page."""
    out, last = [], 0
    for m in NOTEBOOK_MARKDOWN.finditer(page_html):
        if m.start() < last:
            continue
        depth, end = 1, m.end()
        for tag in re.finditer(r"<(/?)div\b[^>]*>", page_html[m.end():]):
            depth += -1 if tag.group(1) else 1
            if depth == 0:
                end = m.end() + tag.start()
                break
        out += [page_html[last:m.end()], change(page_html[m.end():end])]
        last = end
    out.append(page_html[last:])
    return "".join(out)


def link_references(fragment: str, page: Page, missing: list[str]) -> str:
    """Link each "(x.y)" of every "equation(s) (x.y) ..." in the prose to its equation."""

    def number(m: re.Match) -> str:
        key = m.group(1)
        target = _tags.get(key)
        if target is None:
            missing.append(key)
            return m.group(0)
        url = get_relative_url(target.url, page.file.url) if target is not page.file else ""
        return f'<a class="eqref" href="{url}#{anchor(key)}">({key})</a>'

    def reference(m: re.Match) -> str:
        return re.sub(r"\((\d+\.\d+)\)", number, m.group(0))

    return map_text(fragment, EQ_REFERENCE, reference)


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Find which page defines each equation number; keep the build-only files out of the site."""
    _tags.clear()
    for file in files.documentation_pages():
        source = Path(file.abs_src_path or "")
        if source.suffix != ".md":
            continue
        for number in TAG.findall(source.read_text(encoding="utf-8")):
            if number in _tags:
                raise PluginError(
                    f"{file.src_uri}: \\tag{{{number}}} is already used by {_tags[number].src_uri}"
                )
            _tags[number] = file
    for uri in BUILD_ONLY:
        if (file := files.get_file_from_path(uri)) is not None:
            files.remove(file)
    return files


def on_page_content(html_text: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Typeset the page's math and link its equation references."""
    where = page.file.src_uri
    if where.endswith(".ipynb"):
        html_text = _markdown_cells(NBCONVERT_LOADER.sub("", html_text), _notebook_math)
    # Formulas are set aside while references are linked, so that no TeX is searched for them.
    formulas: list[re.Match] = []

    def hold(m: re.Match) -> str:
        formulas.append(m)
        return f"\x00{len(formulas) - 1}\x00"

    missing: list[str] = []
    linked = link_references(ARITHMATEX.sub(hold, html_text), page, missing)
    for key in dict.fromkeys(missing):
        log.warning(f"{where}: equation ({key}) is referenced, but no page has \\tag{{{key}}}")
    return re.sub(r"\x00(\d+)\x00", lambda m: _typeset(formulas[int(m.group(1))], where), linked)


def on_post_page(output: str, page: Page, config: MkDocsConfig) -> str:
    """Render math in navigation and table-of-contents entries, plain text in ``<title>``, and
    preload KaTeX's two main fonts on a page with math."""

    def inline(tex: str) -> str:  # the search index has been written: no more marks for it
        shown = render(html.unescape(tex), False)
        return shown.replace(EXCLUDED_MATHML, SEARCHED_MATHML).replace(EXCLUDED_ZWSP, SEARCHED_ZWSP)

    def entry(m: re.Match) -> str:
        inner = INLINE_TEX.sub(lambda t: inline(t.group(1)), m.group(2))
        return m.group(1) + inner + m.group(3)

    def title(m: re.Match) -> str:
        text = INLINE_TEX.sub(lambda t: html.escape(plain_text(html.unescape(t.group(1)))),
                              m.group(1))
        return f"<title>{text}</title>"

    output = TITLE.sub(title, NAV_ENTRY.sub(entry, output), count=1)
    if 'class="katex"' not in output:
        return output
    preload = "".join(
        f'<link rel="preload" href="{get_relative_url(font, page.url)}" as="font" '
        'type="font/woff2" crossorigin>'
        for font in PRELOADED_FONTS
    )
    return output.replace("</head>", preload + "</head>", 1)


def on_post_build(config: MkDocsConfig) -> None:
    """Save the formulas this build typeset to the cache file (replaced whole: a build running
    beside this one reads the old file or the new), and drop the files of other versions of
    KaTeX or OPTIONS."""
    if not _unsaved:
        return
    text = json.dumps(_typeset_cache(), ensure_ascii=False)
    keep(typeset_cache_file(), lambda partial: partial.write_text(text, encoding="utf-8"))
    _unsaved.clear()
