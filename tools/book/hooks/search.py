"""MkDocs hook: search finds the chapter that explains a word, and is named for screen readers.

The API page's source listings (mkdocstrings' "Source code in ...") stay out of the index, since
every function's source names softmax, masks and d_k; chapters are boosted (``CHAPTER_BOOST``)
and the API page lowered (its front matter), so that a word the book explains finds the chapter
that explains it, and an object's name its entry. The search dialog gets an accessible name
(Material's ``role="dialog"`` has none).
"""

from __future__ import annotations

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
