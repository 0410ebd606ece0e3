"""MkDocs hook: every chapter also as a Jupyter notebook, and notebooks that run anywhere.

The logic is book.hooks.notebooks (tools/book/hooks/notebooks.py).
"""

from book.hooks.notebooks import on_files, on_page_content  # noqa: F401
