"""MkDocs hook: the appendix pages, generated from the committed results files (book.appendix).

The logic is book.hooks.appendix (tools/book/hooks/appendix.py).
"""

from book.hooks.appendix import on_files, on_page_markdown  # noqa: F401
