"""MkDocs hook: small changes to the built pages that keep the reader's side simple and offline.

- Output blocks, the ```` ```{.text .output} ```` fences written by ``pytest --update-outputs``,
  get the ``no-copy`` class: Material then creates no copy button for them at all (a reader copies
  code, not printed results). docs/stylesheets/extra.css draws them as an "Output" panel.
- Notebook pages get a "Download notebook" button next to "Edit this page"; it links the .ipynb
  that mkdocs-jupyter (``include_source: true``) copies next to the page.
- Notebook pages lose nbconvert's Mermaid loader, which would import mermaid from a CDN. The
  book's notebooks draw no Mermaid diagrams, and no page may fetch anything from outside the site.
- The repository link in the header stays a plain link: without ``data-md-component="source"``
  Material does not ask the GitHub API for star and fork counts from the reader's browser.
- Every page gets a description for search engines and link previews (``<meta
  name="description">`` and the social-card tags of overrides/main.html): its front matter's
  ``description:``, or else the text of its first paragraph.
- Search ranks the chapters first: the API page's source listings (mkdocstrings' "Source code
  in ...") stay out of the index, since every function's source names softmax, masks and d_k;
  chapters are boosted (``CHAPTER_BOOST``) and the API page lowered (its front matter), so that
  a word the book explains finds the chapter that explains it, and an object's name its entry.
- A page whose front matter says ``edit: false`` (generated from elsewhere, like the API page)
  gets no "Edit this page" button.
- The search dialog gets an accessible name (Material's ``role="dialog"`` has none).
"""

from __future__ import annotations

import html as html_lib
import re
from html.parser import HTMLParser
from pathlib import Path

import material
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

# The opening tag of a highlighted block whose classes include `output`, e.g.
# <div class="language-text output highlight">
OUTPUT_BLOCK = re.compile(r'<div class="((?=[^"]*\bhighlight\b)(?=[^"]*\boutput\b)[^"]*)">')
MERMAID_LOADER = re.compile(
    r'<script type="module">\s*document\.addEventListener\("DOMContentLoaded", async \(\) => \{'
    r"\s*const diagrams = document\.querySelectorAll\(\"\.jp-Mermaid.*?"
    r"<!-- End of mermaid configuration -->",
    flags=re.DOTALL,
)
SOURCE_COMPONENT = ' data-md-component="source"'
SEARCH_DIALOG = '<div class="md-search" data-md-component="search" role="dialog">'
NAMED_SEARCH_DIALOG = SEARCH_DIALOG.replace(' role="dialog"', ' role="dialog" aria-label="Search"')
SOURCE_LISTING = '<details class="mkdocstrings-source">'
# Search score factor of chapter pages (Material's ``search.boost``): with it, and the API page
# at 0.3, a search for softmax, causal mask, flash or d_k lists a chapter first
# (tests/browser/test_site_quality.py).
CHAPTER_BOOST = 2
# Search engines show about 160 characters of a description.
DESCRIPTION_CHARS = 160
DOWNLOAD_ICON = (
    Path(material.__file__).parent / "templates/.icons/material/download.svg"
).read_text(encoding="utf-8")


def mark_output_blocks(html: str) -> str:
    """Add the ``no-copy`` class to every output block in ``html``."""
    return OUTPUT_BLOCK.sub(lambda m: f'<div class="{m.group(1)} no-copy">', html)


def download_button(notebook_name: str) -> str:
    """Return a Material content button that downloads ``notebook_name`` (beside the page)."""
    return (
        f'<a href="{notebook_name}" download class="md-content__button md-icon" '
        f'title="Download notebook">{DOWNLOAD_ICON}</a>'
    )


class FirstParagraph(HTMLParser):
    """The text of the first paragraph of prose of a page (40 characters or more, no class, not
    inside an admonition, table or details), with math as its MathML or TeX text."""

    SKIP = {"script", "style", "annotation", "table", "details", "figure", "nav"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text: str | None = None
        self._stack: list[tuple[str, bool]] = []  # (tag, skipped)
        self._parts: list[str] | None = None  # text of the paragraph being read

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        skipped = bool(self._stack and self._stack[-1][1]) or (
            tag in self.SKIP
            or a.get("aria-hidden") == "true"
            or {"admonition", "headerlink", "md-content__button"} & set(a.get("class", "").split())
        )
        # A paragraph with a class is an aside that a hook added (links, notes), not prose.
        if tag == "p" and not skipped and self.text is None and "class" not in a:
            self._parts = []
        if tag not in {"br", "img", "input", "hr", "meta", "link", "wbr"}:
            self._stack.append((tag, skipped))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self._stack) - 1, -1, -1):
            if self._stack[i][0] == tag:
                del self._stack[i:]
                break
        if tag == "p" and self._parts is not None:
            text = " ".join("".join(self._parts).split())
            text = re.sub(r"\\[()\[\]]", "", text)  # raw TeX delimiters, if any
            if len(text) >= 40 and self.text is None:
                self.text = text
            self._parts = None

    def handle_data(self, data: str) -> None:
        if self._parts is not None and not (self._stack and self._stack[-1][1]):
            self._parts.append(data)


def description(html: str) -> str | None:
    """The first paragraph of ``html`` as a description, cut at a word near 160 characters."""
    parser = FirstParagraph()
    for start in range(0, len(html), 20_000):  # the first paragraph is near the top: stop there
        parser.feed(html[start : start + 20_000])
        if parser.text is not None:
            break
    text = parser.text
    if text is None:
        return None
    if len(text) > DESCRIPTION_CHARS:
        text = text[: DESCRIPTION_CHARS - 1].rsplit(" ", 1)[0].rstrip(",;:.") + "\u2026"
    return text


def on_page_content(html: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Mark output blocks; on notebook pages add the download button and drop the Mermaid loader;
    keep source listings out of search; give the page its description."""
    html = mark_output_blocks(html)
    if page.file.src_uri.endswith(".ipynb"):
        html = download_button(Path(page.file.src_uri).name) + MERMAID_LOADER.sub("", html)
    html = html.replace(SOURCE_LISTING, SOURCE_LISTING[:-1] + ' data-search-exclude="true">')
    # The templates print the description unescaped (Material's base.html): escape it once here.
    text = page.meta.get("description") or description(html)
    if text:
        page.meta["description"] = html_lib.escape(" ".join(str(text).split()), quote=True)
    if page.file.src_uri.startswith("chapters/"):
        page.meta["search"] = {"boost": CHAPTER_BOOST, **(page.meta.get("search") or {})}
    if page.meta.get("edit") is False:
        page.edit_url = None
    return html


def on_post_page(output: str, page: Page, config: MkDocsConfig) -> str:
    """Keep the header's repository link from calling the GitHub API; name the search dialog."""
    return output.replace(SOURCE_COMPONENT, "").replace(SEARCH_DIALOG, NAMED_SEARCH_DIALOG)


def on_post_template(output: str, template_name: str, config: MkDocsConfig) -> str:
    """The same for pages built from a template alone (404.html)."""
    return output.replace(SOURCE_COMPONENT, "").replace(SEARCH_DIALOG, NAMED_SEARCH_DIALOG)
