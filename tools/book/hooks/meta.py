"""MkDocs hook: what a page says about itself to search engines, link previews and editors.

- Every page gets a description (``<meta name="description">`` and the social-card tags of
  overrides/main.html): its front matter's ``description:``, or else the text of its first
  paragraph of prose, cut near 160 characters.
- A page whose front matter says ``edit: false`` (generated from elsewhere, like the API
  reference's pages) gets no "Edit this page" button.
"""

from __future__ import annotations

import html as html_lib
import re
from html.parser import HTMLParser

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

# Search engines show about 160 characters of a description.
DESCRIPTION_CHARS = 160


def on_page_content(html: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Give the page its description; drop the edit button where its front matter says so."""
    # The templates print the description unescaped (Material's base.html): escape it once here.
    text = page.meta.get("description") or description(html)
    if text:
        page.meta["description"] = html_lib.escape(" ".join(str(text).split()), quote=True)
    if page.meta.get("edit") is False:
        page.edit_url = None
    return html


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
