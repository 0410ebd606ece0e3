"""MkDocs hook: the references page, rendered from docs/references.bib on every build.

The logic is book.hooks.references (tools/book/hooks/references.py).
"""

from book.hooks.references import on_page_markdown  # noqa: F401
