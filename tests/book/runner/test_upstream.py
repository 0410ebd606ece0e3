"""What the runner takes from pytest-markdown-docs still holds for the installed version.

tools/book/runner/upstream.py names the three documented things the runner relies on (a
marker, a hook, a flag); no module of the runner imports pytest-markdown-docs. When an upgrade
changes one of them, a test here fails and says what changed and what to do.
"""

from __future__ import annotations

import ast
import importlib.metadata
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from book.pages import info_words, is_output_info
from book.runner.upstream import (
    MARKER,
    PARSER_HOOK,
    STOCK_FLAG,
    markdown_parser,
    stock_collection_requested,
)
from book.constants import REPO

RUNNER = REPO / "tools" / "book" / "runner"
UPSTREAM = f"pytest-markdown-docs {importlib.metadata.version('pytest-markdown-docs')}"
SEE = "see tools/book/runner/upstream.py and that release's changelog"


def test_no_module_of_the_runner_imports_pytest_markdown_docs() -> None:
    found = []
    for module in sorted(RUNNER.glob("*.py")):
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            found += [
                f"{module.name}:{node.lineno} imports {name}"
                for name in names
                if name.split(".")[0] == "pytest_markdown_docs"
            ]
    assert found == [], "the runner must rest on documented behaviour only:\n" + "\n".join(found)


def test_the_parser_hook_exists_and_gives_commonmark(pytestconfig: pytest.Config) -> None:
    assert getattr(pytestconfig.hook, PARSER_HOOK, None) is not None, (
        f"{UPSTREAM} no longer declares the documented hook {PARSER_HOOK}: pages would be parsed "
        f"as CommonMark and a conftest's parser ignored without a word; {SEE}"
    )
    parser = markdown_parser(pytestconfig)
    commonmark = MarkdownIt("commonmark")
    assert parser.get_active_rules() == commonmark.get_active_rules(), (
        f"{UPSTREAM}'s {PARSER_HOOK} no longer returns a CommonMark parser; pages.parse_page "
        f"relies on CommonMark's rules (a 4-space indent is code, no tables): pin the runner to "
        f"MarkdownIt('commonmark') in upstream.markdown_parser, or check every page; {SEE}"
    )


def test_the_stock_flag_still_exists_so_that_the_runner_can_refuse_it(
    pytestconfig: pytest.Config,
) -> None:
    try:
        pytestconfig.getoption(STOCK_FLAG)
    except ValueError:
        pytest.fail(
            f"{UPSTREAM} has no {STOCK_FLAG} option any more: if its stock collection now starts "
            f"another way, the runner must refuse that instead, or every fence runs twice; {SEE}"
        )
    assert stock_collection_requested(pytestconfig) is False


def test_the_marker_is_still_the_one_pytest_markdown_docs_documents(
    pytestconfig: pytest.Config,
) -> None:
    ours = f"{MARKER}: a fence or cell of a book page"
    theirs = [
        line
        for line in pytestconfig.getini("markers")
        if line.split(":")[0] == MARKER and line != ours
    ]
    assert theirs, (
        f"{UPSTREAM} no longer registers the marker {MARKER!r}: `pytest -m {MARKER}` would select "
        f"only the runner's items; rename upstream.MARKER and the commands in "
        f"tests/book/runner/README.md; {SEE}"
    )


@pytest.mark.parametrize(
    ("info", "words"),
    [
        ("python", ["python"]),
        ("python continuation", ["python", "continuation"]),
        ("{.python continuation}", ["python", "continuation"]),
        ("{ .python .numberLines }", ["python", ".numberLines"]),
        ('{#demo title="x" .py}', ["py", "#demo", 'title="x"']),
        ("{.text .output}", ["text", ".output"]),
        ("   ", []),
    ],
)
def test_fence_info_is_read_in_both_syntaxes(info: str, words: list[str]) -> None:
    assert info_words(info) == words


def test_only_text_output_blocks_are_output_blocks() -> None:
    assert is_output_info("{.text .output}") and is_output_info("output")
    assert not is_output_info("{.python}") and not is_output_info("text") and not is_output_info("")
