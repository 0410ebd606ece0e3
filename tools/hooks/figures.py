"""MkDocs hook: render the book's figures from code on every build.

The logic is book.hooks.figures (tools/book/hooks/figures.py).
"""

from book.hooks.figures import on_startup, on_pre_build, on_files, on_env, on_post_build, on_post_page  # noqa: F401
