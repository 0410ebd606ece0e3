"""MkDocs hook: end a successful ``mkdocs build`` without the interpreter's teardown.

The logic is book.hooks.quick_exit (tools/book/hooks/quick_exit.py).
"""

from book.hooks.quick_exit import on_build_error, on_shutdown, on_startup  # noqa: F401
