"""MkDocs hook: search finds the chapter that explains a word, and is named for screen readers.

The logic is book.hooks.search (tools/book/hooks/search.py).
"""

from book.hooks.search import (  # noqa: F401
    on_page_content,
    on_page_context,
    on_post_build,
    on_post_page,
    on_post_template,
)
