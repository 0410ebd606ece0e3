"""MkDocs hook: the book's math typeset at build time with KaTeX; equation references linked.

The logic is book.hooks.math (tools/book/hooks/math.py).
"""

from book.hooks.math import on_files, on_page_content, on_post_build, on_post_page  # noqa: F401
