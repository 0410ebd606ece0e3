"""MkDocs hook: search finds the chapter that explains a word, and is named for screen readers.

The API page's source listings (mkdocstrings' "Source code in ...") stay out of the index, since
every function's source names softmax, masks and d_k; chapters are boosted (``CHAPTER_BOOST``)
and the API page lowered (its front matter), so that a word the book explains finds the chapter
that explains it, and an object's name its entry. The search dialog gets an accessible name
(Material's ``role="dialog"`` has none).

KaTeX draws a negated relation as the relation under a slash from a private-use code point of
its fonts (``\\neq`` is U+E020 then ``=``), which the index would show as a box in a result's
title ("Causal alignment when tq\ue020=tk"): once the index is written, each such pair becomes
its Unicode character (``≠``) and any other private-use character is dropped.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

SOURCE_LISTING = '<details class="mkdocstrings-source">'
SEARCH_DIALOG = '<div class="md-search" data-md-component="search" role="dialog">'
NAMED_SEARCH_DIALOG = SEARCH_DIALOG.replace(' role="dialog"', ' role="dialog" aria-label="Search"')
# Search score factor of chapter pages (Material's ``search.boost``): with it, and the API page
# at 0.3, a search for softmax, causal mask, flash or d_k lists a chapter first
# (tests/browser/test_site_quality.py).
CHAPTER_BOOST = 2
INDEX = Path("search") / "search_index.json"
NOT = "\ue020"  # KaTeX's negation slash, drawn over the relation that follows it
NEGATED = {"=": "≠", "≡": "≢", "<": "≮", ">": "≯", "∈": "∉", "⊂": "⊄", "∼": "≁", "≤": "≰", "≥": "≱"}
PRIVATE_USE = re.compile("[\ue000-\uf8ff]")


def plain(text: str) -> str:
    """``text`` without private-use characters: a negated relation becomes its own character."""
    text = re.sub(NOT + r"\s*(.)", lambda m: NEGATED.get(m[1], m[1]), text)
    return PRIVATE_USE.sub("", text)


def on_page_content(html: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Keep source listings out of the index; boost the chapters."""
    if page.file.src_uri.startswith("chapters/"):
        page.meta["search"] = {"boost": CHAPTER_BOOST, **(page.meta.get("search") or {})}
    return html.replace(SOURCE_LISTING, SOURCE_LISTING[:-1] + ' data-search-exclude="true">')


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
