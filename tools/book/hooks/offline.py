"""MkDocs hook: no page asks anything of another host.

- The repository link in the header stays a plain link: without ``data-md-component="source"``
  Material does not ask the GitHub API for star and fork counts from the reader's browser.
- Notebook pages lose nbconvert's Mermaid loader, which would import mermaid from a CDN (the
  book's notebooks draw no Mermaid diagrams).
"""

from __future__ import annotations

import re

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

MERMAID_LOADER = re.compile(
    r'<script type="module">\s*document\.addEventListener\("DOMContentLoaded", async \(\) => \{'
    r"\s*const diagrams = document\.querySelectorAll\(\"\.jp-Mermaid.*?"
    r"<!-- End of mermaid configuration -->",
    flags=re.DOTALL,
)
SOURCE_COMPONENT = ' data-md-component="source"'


def on_page_content(html: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Drop the Mermaid loader of notebook pages."""
    return MERMAID_LOADER.sub("", html) if page.file.src_uri.endswith(".ipynb") else html


def on_post_page(output: str, page: Page, config: MkDocsConfig) -> str:
    """Keep the header's repository link from calling the GitHub API."""
    return output.replace(SOURCE_COMPONENT, "")


def on_post_template(output: str, template_name: str, config: MkDocsConfig) -> str:
    """The same for pages built from a template alone (404.html)."""
    return output.replace(SOURCE_COMPONENT, "")
