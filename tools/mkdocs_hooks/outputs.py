"""MkDocs hook: output blocks are read, not copied.

The logic is book.hooks.outputs (tools/book/hooks/outputs.py).
"""

from book.hooks.outputs import on_page_content  # noqa: F401
