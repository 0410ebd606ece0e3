"""MkDocs hook: the appendix pages, generated from the committed results files (book.timings).

The logic is book.hooks.timings (tools/book/hooks/timings.py).
"""

from book.hooks.timings import on_files, on_page_markdown  # noqa: F401
