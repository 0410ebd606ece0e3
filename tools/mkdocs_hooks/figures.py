"""MkDocs hook: render the book's figures from code on every build.

The logic is book.hooks.figures (tools/book/hooks/figures.py).
"""

from book.hooks.figures import (  # noqa: F401
    on_build_error,
    on_env,
    on_files,
    on_page_content,
    on_post_build,
    on_post_page,
    on_pre_build,
    on_startup,
)
