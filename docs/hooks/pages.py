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
"""

from __future__ import annotations

import re
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


def on_page_content(html: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Mark output blocks; on notebook pages add the download button and drop the Mermaid loader."""
    html = mark_output_blocks(html)
    if page.file.src_uri.endswith(".ipynb"):
        html = download_button(Path(page.file.src_uri).name) + MERMAID_LOADER.sub("", html)
    return html


def on_post_page(output: str, page: Page, config: MkDocsConfig) -> str:
    """Keep the header's repository link from calling the GitHub API."""
    return output.replace(SOURCE_COMPONENT, "")


def on_post_template(output: str, template_name: str, config: MkDocsConfig) -> str:
    """The same for pages built from a template alone (404.html)."""
    return output.replace(SOURCE_COMPONENT, "")
