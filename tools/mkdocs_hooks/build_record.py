"""MkDocs hook: record a clean strict build, which the tests then read instead of building again.

The logic is book.hooks.build_record (tools/book/hooks/build_record.py).
"""

from book.hooks.build_record import on_config, on_post_build, on_startup  # noqa: F401
