"""MkDocs hook: no page asks anything of another host.

The logic is book.hooks.offline (tools/book/hooks/offline.py).
"""

from book.hooks.offline import on_page_content, on_post_page, on_post_template  # noqa: F401
