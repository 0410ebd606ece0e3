"""Everything the runner takes from pytest-markdown-docs: three documented names, no internals.

The runner replaces pytest-markdown-docs' collection, items and execution (see ``__init__``) and
imports none of its modules. It relies only on what that plugin's README documents, and this
module is the one place that names it:

- the marker ``markdown-docs`` ("Usage": ``pytest --markdown-docs -m markdown-docs``): every item
  of a page carries it, so ``pytest -m markdown-docs`` selects page tests, as with the stock plugin;
- the hook ``pytest_markdown_docs_markdown_it`` ("Customizing your own custom MarkdownIt
  parser"): a conftest.py can change the Markdown parser in one place; pytest-markdown-docs'
  own implementation returns CommonMark, which ``pages.parse_page`` assumes;
- the flag ``--markdown-docs`` ("Usage"): the stock collection, which the runner refuses, because
  it would run every fence a second time (and every docstring's fences too).

tests/book/runner/test_upstream.py checks the three against the installed pytest-markdown-docs and
says, when an upgrade changes one, what changed and what to do. Without pytest-markdown-docs
installed the runner still works: CommonMark, and nothing to refuse.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest
    from markdown_it import MarkdownIt

MARKER = "markdown-docs"
PARSER_HOOK = "pytest_markdown_docs_markdown_it"
STOCK_FLAG = "--markdown-docs"


def markdown_parser(config: pytest.Config | None = None) -> MarkdownIt:
    """The parser of pages: the hook's answer where pytest-markdown-docs is loaded, else
    CommonMark (pytest-markdown-docs' default)."""
    hook = getattr(config.hook, PARSER_HOOK, None) if config is not None else None
    if hook is not None:
        parser = hook()
        if parser is not None:
            return parser
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark")


def stock_collection_requested(config: pytest.Config) -> bool:
    """Whether ``--markdown-docs`` was given (False where pytest-markdown-docs is not loaded)."""
    try:
        return bool(config.getoption(STOCK_FLAG))
    except ValueError:  # no such option: the plugin is not installed
        return False
