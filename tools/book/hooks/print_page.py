"""MkDocs hook: the whole book on one page, ``print/``, to print or to save as a PDF.

The page ``print.md`` is generated (nothing is written into docs/): after every page has been
rendered, its content becomes the preface and the chapters one after another (a chapter read on
section pages as its landing page, then its section pages in the nav's order), each page a
section whose id names it (``section_id``). Links between the book's pages become links inside
the print page; other relative links (figures, the references, the appendix) are rewritten to
work from ``print/``. The page is left out of search, which already has every chapter, and
Material's scripts leave its content alone (``overrides/print.html``): no copy buttons, which do
not print, and a page that opens in seconds instead of laying the whole book out once per code
block.

The PDF edition is made from this page after the build, by headless Chromium:
``python -m book pdf site/`` writes ``site/print/attention-book.pdf`` and puts its download link
on the print page (.ci/run does it after ``mkdocs build``). docs/stylesheets/print.css opens the
exercise and solution boxes and hides buttons and navigation on paper.
"""

from __future__ import annotations

import posixpath
import re
from urllib.parse import urlsplit

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.structure.nav import Navigation
from mkdocs.structure.pages import Page
from mkdocs.utils.templates import TemplateContext

from ..constants import PDF_PLACEHOLDER  # `python -m book pdf` adds the link after it

PRINT_URI = "print.md"
PRINT_URL = "print/"
SOURCE = f"""---
title: The whole book
description: Every chapter of the book on one page, to print or to save as a PDF.
template: print.html
search:
  exclude: true
hide:
  - navigation
  - toc
---

# The whole book

{PDF_PLACEHOLDER}The preface and every chapter on one page, to print (exercises and solutions
print open). The PDF edition is made from this page by <code>python -m book pdf site/</code>
after the build.</p>
"""
URL_ATTR = re.compile(r'(?P<attr>\b(?:href|src)=")(?P<url>[^"]*)(")')
_contents: dict[str, tuple[Page, str]] = {}  # the book's pages, by URL, as rendered


def book_pages(nav: Navigation) -> list[Page]:
    """The pages the print page holds, in reading order: the preface and the chapters."""
    return [
        page for page in nav.pages
        if page.file.src_uri == "index.md" or page.file.src_uri.startswith("chapters/")
    ]


def section_id(page: Page) -> str:
    """The id of a page's section on the print page: ``preface``, the chapter's name
    (``07-fast-attention``), or for a section page the chapter's and its own
    (``07-fast-attention-tiles``)."""
    if page.file.src_uri == "index.md":
        return "preface"
    return page.url.rstrip("/").removeprefix("chapters/").replace("/", "-")


def rewrite_links(html: str, page: Page, sections: dict[str, str]) -> str:
    """Make the relative links of ``page``'s content work on the print page."""

    def rewrite(m: re.Match[str]) -> str:
        url = m["url"]
        parts = urlsplit(url)
        if parts.scheme or url.startswith(("//", "#", "data:")) or not url:
            return m.group(0)
        target = posixpath.normpath(posixpath.join(page.url or ".", parts.path))
        target = "" if target == "." else target + ("/" if parts.path.endswith("/") else "")
        if target in sections and m["attr"].startswith("href"):
            new = f"#{parts.fragment}" if parts.fragment else f"#{sections[target]}"
        else:
            new = posixpath.relpath(target or ".", PRINT_URL) + ("/" if target.endswith("/") else "")
            new += f"#{parts.fragment}" if parts.fragment else ""
        return m["attr"] + new + m.group(3)

    return URL_ATTR.sub(rewrite, html)


def on_startup(command: str, dirty: bool) -> None:
    """Refuse ``mkdocs build --dirty``: it renders only the pages whose files changed, and the
    print page needs every page's content. (``mkdocs serve --dirty`` keeps the content of the
    pages its first build rendered, so its rebuilds hold the whole book.)"""
    if command == "build" and dirty:
        raise PluginError(
            "expected a full build, got `mkdocs build --dirty`: the print page holds every page, "
            "and a dirty build renders only the changed ones. Use `mkdocs serve --dirty` while "
            "writing, and `mkdocs build --strict` to build the site"
        )


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the print page to the build."""
    files.append(File.generated(config, PRINT_URI, content=SOURCE))
    return files


def on_page_content(html: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Keep each page's finished content for the print page."""
    _contents[page.url] = (page, html)
    return html


def on_page_context(context: TemplateContext, page: Page, config: MkDocsConfig,
                    nav: Navigation) -> TemplateContext:
    """Fill the print page with the preface and the chapters, each in its own section."""
    if page.file.src_uri != PRINT_URI:
        return context
    pages = book_pages(nav)
    sections = {p.url: section_id(p) for p in pages}
    parts = [page.content]
    for book_page in pages:
        _, html = _contents[book_page.url]
        html = re.sub(r'<p class="attn-notebook-links">.*?</p>\n?', "", html, flags=re.DOTALL)
        parts.append(f'<section class="attn-print-section" id="{sections[book_page.url]}">\n'
                     f"{rewrite_links(html, book_page, sections)}\n</section>")
    page.content = "\n".join(parts)
    return context
