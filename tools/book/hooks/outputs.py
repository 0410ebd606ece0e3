"""MkDocs hook: output blocks are read, not copied.

The ```` ```{.text .output} ```` fences that ``pytest --update-outputs`` writes get the ``no-copy``
class: Material then makes no copy button for them (a reader copies code, not printed results),
and docs/stylesheets/extra.css draws them as an "Output" panel.
"""

from __future__ import annotations

import re

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

# The opening tag of a highlighted block whose classes include `output`, e.g.
# <div class="language-text output highlight">
OUTPUT_BLOCK = re.compile(r'<div class="((?=[^"]*\bhighlight\b)(?=[^"]*\boutput\b)[^"]*)">')


def on_page_content(html: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Mark every output block of the page."""
    return mark_output_blocks(html)


def mark_output_blocks(html: str) -> str:
    """Add the ``no-copy`` class to every output block in ``html``."""
    return OUTPUT_BLOCK.sub(lambda m: f'<div class="{m.group(1)} no-copy">', html)
