"""MkDocs hook: search finds the chapter that explains a word, and is named for screen readers.

The API reference's source listings (mkdocstrings' "Source code in ...") stay out of the index,
since every function's source names softmax, masks and d_k; chapters are boosted
(``CHAPTER_BOOST``) and the API reference lowered (its pages' front matter), so that a word the
book explains finds the chapter that explains it, and an object's name its entry. The search
dialog gets an accessible name (Material's ``role="dialog"`` has none).

KaTeX draws a negated relation as the relation under a slash from a private-use code point of
its fonts (``\\neq`` is U+E020 then ``=``), which the index would show as a box in a result's
title ("Causal alignment when tq\ue020=tk"): once the index is written, each such pair becomes
its Unicode character (``≠``) and any other private-use character is dropped.

Material's search plugin reads each page with Python's HTML parser, tag by tag, and KaTeX's
MathML copies and the API reference's source listings, which the index leaves out, and the
highlighted code's and KaTeX's ``<span>`` tags are most of the book's tags. Just before it reads
a page, ``on_page_context`` hands it a copy of the content without the first two and with the
spans unwrapped: inside ``<pre>`` all of them (there the index keeps the text as it is, so only
the tags go), elsewhere all but those next to a text of whitespace alone (:func:`unwrap_spans`).
The page's own content is put back right after it (without the ``data-search-*`` attributes, as
the search plugin leaves a page). The index is the same, byte for byte.
"""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.plugins import CombinedEvent, event_priority
from mkdocs.structure.files import Files
from mkdocs.structure.nav import Navigation
from mkdocs.structure.pages import Page
from mkdocs.utils.templates import TemplateContext

SOURCE_LISTING = '<details class="mkdocstrings-source">'
SEARCH_DIALOG = '<div class="md-search" data-md-component="search" role="dialog">'
NAMED_SEARCH_DIALOG = SEARCH_DIALOG.replace(' role="dialog"', ' role="dialog" aria-label="Search"')
# Search score factor of chapter pages (Material's ``search.boost``): with it, and the API
# reference at 0.3, a search for softmax, causal mask, flash or d_k lists a chapter first
# (tests/browser/test_site_quality.py).
CHAPTER_BOOST = 2
INDEX = Path("search") / "search_index.json"
NOT = "\ue020"  # KaTeX's negation slash, drawn over the relation that follows it
NEGATED = {"=": "≠", "≡": "≢", "<": "≮", ">": "≯", "∈": "∉", "⊂": "⊄", "∼": "≁", "≤": "≰", "≥": "≱"}
PRIVATE_USE = re.compile("[\ue000-\uf8ff]")
# What the index skips, as the math hook and on_page_content mark it: dropped from its copy.
LEFT_OUT = re.compile(
    r'<span class="katex-mathml" data-search-exclude="math"><math\b.*?</math></span>'
    r'|<span class="vlist-s" data-search-exclude="math">\u200b</span>'
    r'|<details class="mkdocstrings-source" data-search-exclude="true">.*?</details>',
    flags=re.DOTALL,
)
PRE = re.compile(r"(<pre\b[^>]*>)(.*?)(</pre>)", flags=re.DOTALL)
SPAN_TAG = re.compile(r"</?span\b[^>]*>")
MARKED_SPAN = re.compile(r"<span\b[^>]*\bdata-search-")  # a span the index must see, to skip it
SPAN_OPEN = re.compile(r"<span\b")
TAG = re.compile(r"(<[^>]*>)")
# Material's search plugin drops these attributes from a page once it has read it
SEARCH_ATTRIBUTE = re.compile(r'\s?data-search-\w+="[^"]+"')
_contents: dict[str, str] = {}  # a page's own content while the search plugin reads its copy


def plain(text: str) -> str:
    """``text`` without private-use characters: a negated relation becomes its own character."""
    text = re.sub(NOT + r"\s*(.)", lambda m: NEGATED.get(m[1], m[1]), text)
    return PRIVATE_USE.sub("", text)


def on_page_content(html: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Keep source listings out of the index; boost the chapters."""
    if page.file.src_uri.startswith("chapters/"):
        page.meta["search"] = {"boost": CHAPTER_BOOST, **(page.meta.get("search") or {})}
    return html.replace(SOURCE_LISTING, SOURCE_LISTING[:-1] + ' data-search-exclude="true">')


def search_copy(content: str) -> str:
    """What the search plugin reads of a page: ``content`` without what the index leaves out,
    and without the span tags inside ``<pre>`` blocks (unless one is marked to leave out) and,
    unless a span is marked, without the others that :func:`unwrap_spans` can drop."""

    def unwrap(m: re.Match[str]) -> str:
        if "data-search-" in m[2]:
            return m[0]
        return m[1] + SPAN_TAG.sub("", m[2]) + m[3]

    light = PRE.sub(unwrap, LEFT_OUT.sub("", content))
    return light if MARKED_SPAN.search(light) else unwrap_spans(light)


def unwrap_spans(html: str) -> str:
    """``html`` without its span tags, but for the pairs next to a text of whitespace alone.

    The search plugin turns such a text (KaTeX's no-break space between spans, say) into one
    space, or none after another; merged into the text around it, it would stay as it is. Tags
    go in pairs, so that the parser's stack of open elements stays as it was; unbalanced spans
    leave ``html`` as it is.
    """
    tokens = TAG.split(html)  # text, tag, text, ..., tag, text

    def blank(i: int) -> bool:  # token i is a text of whitespace alone
        text = tokens[i]
        return text != "" and (unescape(text) if "&" in text else text).isspace()

    dropped: set[int] = set()
    opened: list[int] = []
    for i in range(1, len(tokens), 2):
        if SPAN_OPEN.match(tokens[i]):
            opened.append(i)
        elif tokens[i] == "</span>":
            if not opened:
                return html
            start = opened.pop()
            if not any(blank(j) for j in (start - 1, start + 1, i - 1, i + 1)):
                dropped.update((start, i))
    if opened:
        return html
    return "".join(t for i, t in enumerate(tokens) if i not in dropped)


@event_priority(100)  # before Material's search plugin reads the page
def _lighten(context: TemplateContext, page: Page, config: MkDocsConfig,
             nav: Navigation) -> TemplateContext:
    if page.content is not None:
        _contents[page.file.src_uri] = page.content
        page.content = search_copy(page.content)
    return context


# Priority 0, as the search plugin's: registered after it (a plugin), before the print page's
# hook, which collects the pages' content.
def _restore(context: TemplateContext, page: Page, config: MkDocsConfig,
             nav: Navigation) -> TemplateContext:
    if page.file.src_uri in _contents:  # as the search plugin leaves a page it has read
        page.content = SEARCH_ATTRIBUTE.sub("", _contents.pop(page.file.src_uri))
    return context


on_page_context = CombinedEvent(_lighten, _restore)


def on_post_page(output: str, page: Page, config: MkDocsConfig) -> str:
    """Name the search dialog."""
    return output.replace(SEARCH_DIALOG, NAMED_SEARCH_DIALOG)


def on_post_template(output: str, template_name: str, config: MkDocsConfig) -> str:
    """The same for pages built from a template alone (404.html)."""
    return output.replace(SEARCH_DIALOG, NAMED_SEARCH_DIALOG)


def on_post_build(config: MkDocsConfig) -> None:
    """Rewrite the search index without private-use characters."""
    path = Path(config.site_dir) / INDEX
    if not path.is_file():
        return
    index = json.loads(path.read_text(encoding="utf-8"))
    for doc in index.get("docs", []):
        for field in ("title", "text"):
            if isinstance(doc.get(field), str):
                doc[field] = plain(doc[field])
    path.write_text(json.dumps(index, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")
