"""MkDocs hook: the whole book on one page, ``print/``, to print or to save as a PDF.

The logic is book.hooks.print_page (tools/book/hooks/print_page.py).
"""

from book.hooks.print_page import on_files, on_page_content, on_page_context, on_startup  # noqa: F401
