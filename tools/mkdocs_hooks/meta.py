"""MkDocs hook: what a page says about itself to search engines, link previews and editors.

The logic is book.hooks.meta (tools/book/hooks/meta.py).
"""

from book.hooks.meta import on_page_content  # noqa: F401
