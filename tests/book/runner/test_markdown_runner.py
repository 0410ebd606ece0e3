"""The page runner's own tests, on fixture pages copied into a pytester directory.

Each test copies pages from tests/book/runner/fixtures/ into ``docs/`` of a fresh directory, maybe
changes a few bytes, runs pytest there in-process with the runner's plugin, and checks the
outcome and the message readers of a failure would see.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import IPython.lib.pretty  # noqa: F401  (imported once here, not again by every in-process run)
import matplotlib  # noqa: F401  (as above: the determinism page imports it)
import pytest
import torch  # noqa: F401  (as above: the fixture pages import it)
from markdown_it import MarkdownIt

from book.pages import parse_page, rewrite_outputs

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def book(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester directory whose pytest loads the runner and executes ``docs/``."""
    pytester.makeini("[pytest]\naddopts = -p book.runner.plugin -p no:cacheprovider\n")
    (pytester.path / "docs").mkdir()
    return pytester


@pytest.fixture
def chain_log(book: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file where docs/chain_count.md, added to ``book``, logs the number of each fence it runs."""
    log = book.path / "runs.log"
    monkeypatch.setenv("CHAIN_LOG", str(log))
    add_page(book, "chain_count.md")
    return log


def add_page(
    book: pytest.Pytester, name: str, old: str = "", new: str = "", as_name: str = ""
) -> Path:
    """Copy the fixture page ``name`` into ``docs/`` (as ``as_name`` if given), replacing the
    first ``old`` by ``new``."""
    text = (FIXTURES / name).read_bytes().decode("utf-8")
    if old:
        if old not in text:
            raise ValueError(f"expected {old!r} in the fixture {name}, found none")
        text = text.replace(old, new, 1)
    path = book.path / "docs" / (as_name or name)
    path.write_bytes(text.encode("utf-8"))
    return path


def add_notebook(book: pytest.Pytester, change: Callable[[list[dict]], object]) -> None:
    """Copy the fixture notebook into ``docs/`` with ``change`` applied to its list of cells."""
    page = add_page(book, "notebook.ipynb")
    notebook = json.loads(page.read_text())
    change(notebook["cells"])
    page.write_text(json.dumps(notebook))


def line_of(name: str, needle: str) -> int:
    """1-based number of the first line of the fixture ``name`` that contains ``needle``."""
    lines = (FIXTURES / name).read_text("utf-8").splitlines()
    return next(i for i, line in enumerate(lines, start=1) if needle in line)


def test_a_page_whose_outputs_are_right_passes(book: pytest.Pytester) -> None:
    add_page(book, "basic.md")
    book.runpytest().assert_outcomes(passed=4)


def test_a_changed_digit_fails_naming_both_lines_with_a_diff(book: pytest.Pytester) -> None:
    add_page(book, "basic.md", "0.2447", "0.2449")
    result = book.runpytest()
    result.assert_outcomes(passed=3, failed=1)
    block = line_of("basic.md", "```{.text .output}")
    result.stdout.fnmatch_lines(
        [
            "docs/basic.md:5: the printed output differs from the output shown at "
            f"docs/basic.md:{block}",
            f"first difference at docs/basic.md:{block + 1} (line 1 of the output block): "
            "expected 0.2449, got 0.2447*",
            f"--- shown at docs/basic.md:{block}",
            "+++ printed by the fence at docs/basic.md:5",
            "-tensor([[0.0900, 0.2449, 0.6652],",
            "+tensor([[0.0900, 0.2447, 0.6652],",
        ]
    )


def test_the_first_difference_is_named_by_its_page_line(book: pytest.Pytester) -> None:
    add_page(book, "basic.md", "[0.1543, 0.1543, 0.6914]", "[0.1543, 0.1543, 0.6918]")
    add_page(book, "containers.md", "[0.25, 0.5, 1.0]", "[0.25, 0.5, 1.2]")
    result = book.runpytest()
    result.assert_outcomes(passed=8, failed=2)
    second_row = line_of("basic.md", "[0.1543, 0.1543, 0.6914]")
    nested = line_of("containers.md", "    [0.25, 0.5, 1.0]")
    result.stdout.fnmatch_lines(
        [
            f"first difference at docs/basic.md:{second_row} (line 2 of the output block): "
            "expected 0.6918, got 0.6914*",
            f"first difference at docs/containers.md:{nested} (line 1 of the output block): "
            "expected 1.2, got 1.0*",
        ],
        consecutive=False,
    )


def test_a_one_unit_change_in_the_last_digit_passes(book: pytest.Pytester) -> None:
    changes = [("0.2447", "0.2448"), ("0.6914", "0.6913"), ("2.5000e-04", "2.5001e-04")]
    for k, (old, new) in enumerate(changes):
        add_page(book, "basic.md", old, new, as_name=f"basic{k}.md")
    book.runpytest().assert_outcomes(passed=4 * len(changes))


def test_a_changed_shape_fails(book: pytest.Pytester) -> None:
    add_page(book, "basic.md", "torch.Size([3, 2, 3])", "torch.Size([3, 2, 4])")
    result = book.runpytest()
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*expected the integer 4, got 3 (integers must match)"])


def test_a_missing_output_block_fails(book: pytest.Pytester) -> None:
    block = "```{.text .output}\ntensor([[0, 1, 2],\n        [3, 4, 5]])\n"
    block += "tensor([1.0000e-05, 2.5000e-04, 3.0000e+00])\ntensor([-inf, 2., 3.]) True\n```\n"
    add_page(book, "basic.md", block, "")
    result = book.runpytest()
    result.assert_outcomes(passed=3, failed=1)
    fence = line_of("basic.md", "print(torch.arange(6)") - 1
    result.stdout.fnmatch_lines(
        [
            f"docs/basic.md:{fence}: the fence prints output, but no ```{{.text .output}} block "
            "follows it",
            "+tensor([-inf, 2., 3.]) True",
            "Rewrite output blocks from the real output with: "
            "pytest docs/basic.md --update-outputs",
        ]
    )


def test_an_output_block_after_a_fence_that_prints_nothing_fails(book: pytest.Pytester) -> None:
    quiet = 'float("-inf"))  # (t, t)\n```\n'
    add_page(book, "basic.md", quiet, quiet + "\n```{.text .output}\ntensor([0.])\n```\n")
    result = book.runpytest()
    result.assert_outcomes(passed=3, failed=1)
    fence = line_of("basic.md", "masked = ") - 1
    result.stdout.fnmatch_lines(
        [
            f"docs/basic.md:{fence}: the fence prints nothing, but the output block at "
            f"docs/basic.md:{fence + 4} follows it",
            "-tensor([0.])",
        ]
    )


def test_a_raising_fence_fails_with_a_traceback_at_the_page_line(book: pytest.Pytester) -> None:
    add_page(book, "raises.md")
    result = book.runpytest()
    result.assert_outcomes(passed=2, failed=3)
    view = line_of("raises.md", "weights.view(2, 2)")
    index = line_of("raises.md", "numbers[3]")
    result.stdout.fnmatch_lines(
        [
            "docs/raises.md:11: the fence raised RuntimeError",
            "Traceback (most recent call last):",
            f'  File "docs/raises.md", line {view}, in <module>',
            "    matrix = weights.view(2, 2)",
            "RuntimeError: shape '[2, 2]' is invalid for input of size 3",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "docs/raises.md:16: not run, because the fence at docs/raises.md:11, which this one "
            "continues, raised an exception (see its failure)"
        ]
    )
    lines = result.stdout.lines
    at = lines.index(f'  File "docs/raises.md", line {index}, in <module>')
    code, markers = lines[at + 1], lines[at + 2]
    assert code.strip() == "print(numbers[3])"
    assert markers.index("~") == code.index("numbers"), "markers must point at the dedented code"


def test_a_fence_run_alone_after_a_raising_fence_names_the_replayed_fence(
    book: pytest.Pytester,
) -> None:
    add_page(book, "raises.md")
    result = book.runpytest("docs/raises.md::line-16")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "docs/raises.md:16: could not run, because the earlier fence at docs/raises.md:11 "
            "raised when it was replayed to rebuild the namespace",
            "RuntimeError: shape '[2, 2]' is invalid for input of size 3",
        ]
    )


def test_update_rewrites_stale_blocks_inserts_missing_ones_and_keeps_other_bytes(
    book: pytest.Pytester,
) -> None:
    page = add_page(book, "update_before.md")
    result = book.runpytest("--update-outputs")
    result.assert_outcomes(passed=6)
    assert page.read_bytes() == (FIXTURES / "update_after.md").read_bytes()
    result.stdout.fnmatch_lines(
        [
            "*= updated outputs =*",
            "docs/update_before.md:15: rewrote the output block at line 19",
            "docs/update_before.md:25: inserted an output block",
            "docs/update_before.md:30: removed the output block at line 34",
            "docs/update_before.md:42: inserted an output block",
            "docs/update_before.md:52: inserted an output block",
        ]
    )
    assert "docs/update_before.md:5:" not in result.stdout.str()
    book.runpytest().assert_outcomes(passed=6)


def test_update_of_an_up_to_date_page_changes_nothing(book: pytest.Pytester) -> None:
    page = add_page(book, "basic.md", "0.2447", "0.2448")
    result = book.runpytest("--update-outputs")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["nothing to update: every shown output was up to date"])
    assert page.read_bytes() == (FIXTURES / "basic.md").read_bytes().replace(
        b"0.2447", b"0.2448", 1
    )


def test_fences_in_admonitions_details_tabs_and_lists_are_collected(book: pytest.Pytester) -> None:
    add_page(book, "containers.md")
    result = book.runpytest("--collect-only", "-q")
    result.stdout.fnmatch_lines([f"docs/containers.md::line-{n}" for n in (5, 16, 28, 41, 51, 61)])
    book.runpytest().assert_outcomes(passed=6)


def test_a_changed_digit_in_a_nested_solution_fails(book: pytest.Pytester) -> None:
    add_page(book, "containers.md", "[0.25, 0.5, 1.0]", "[0.25, 0.5, 1.2]")
    result = book.runpytest()
    result.assert_outcomes(passed=5, failed=1)
    result.stdout.fnmatch_lines(["docs/containers.md:28: the printed output differs*"])


def test_a_chain_of_n_fences_runs_each_fence_once(book: pytest.Pytester, chain_log: Path) -> None:
    result = book.runpytest()
    result.assert_outcomes(passed=5)
    assert chain_log.read_text().split() == ["1", "2", "3", "4", "5"]
    result.stdout.fnmatch_lines(["book pages: 5 fences and cells executed, 0 of them replays*"])


def test_a_fence_run_alone_replays_the_fences_before_it(
    book: pytest.Pytester, chain_log: Path
) -> None:
    book.runpytest("docs/chain_count.md::line-25").assert_outcomes(passed=1)
    assert chain_log.read_text().split() == ["1", "2", "3", "4"]
    chain_log.unlink()
    book.runpytest("-k", "line-13 or line-31").assert_outcomes(passed=2, deselected=3)
    assert chain_log.read_text().split() == ["1", "2", "1", "2", "3", "4", "5"]


def test_notebook_outputs_are_checked(book: pytest.Pytester) -> None:
    add_page(book, "notebook.ipynb")
    book.runpytest().assert_outcomes(passed=4)


def test_a_changed_digit_in_a_stored_notebook_output_fails(book: pytest.Pytester) -> None:
    changes = [
        ("0.2814", "0.2841", 2, 1),
        ('"tensor(1.)"', '"tensor(2.)"', 3, 1),
        ('"3"', '"4"', 5, 2),
    ]
    for old, new, cell, _ in changes:
        add_page(book, "notebook.ipynb", old, new, as_name=f"cell{cell}.ipynb")
    result = book.runpytest()
    result.assert_outcomes(passed=9, failed=3)
    for _, _, cell, line in changes:
        result.stdout.fnmatch_lines(
            [
                f"docs/cell{cell}.ipynb, cell {cell}: the printed output differs*",
                f"first difference at line {line} of the stored outputs of "
                f"docs/cell{cell}.ipynb, cell {cell}: *",
            ]
        )


def test_update_rewrites_stored_notebook_outputs(book: pytest.Pytester) -> None:
    page = add_page(book, "notebook.ipynb", "0.2814", "0.2841")
    book.runpytest("--update-outputs").assert_outcomes(passed=4)
    assert page.read_bytes() == (FIXTURES / "notebook.ipynb").read_bytes()


def test_a_notebook_cell_that_prints_without_stored_outputs_fails(book: pytest.Pytester) -> None:
    add_notebook(book, lambda cells: cells[1].update(outputs=[]))
    result = book.runpytest()
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(
        ["docs/notebook.ipynb, cell 2: the cell prints output, but its stored outputs show nothing"]
    )


def test_a_python_fence_in_a_notebook_markdown_cell_fails(book: pytest.Pytester) -> None:
    fence = ["Try this:\n", "```python\n", "print(1)\n", "```\n"]
    add_notebook(book, lambda cells: cells[0].update(source=fence))
    result = book.runpytest()
    result.assert_outcomes(passed=4, failed=1)
    result.stdout.fnmatch_lines(
        ["docs/notebook.ipynb, cell 1: a Python fence in a markdown cell is shown but never run*"]
    )


def test_fences_the_runner_cannot_check_fail_loudly(book: pytest.Pytester) -> None:
    add_page(book, "problems.md")
    result = book.runpytest()
    result.assert_outcomes(passed=1, failed=3)
    result.stdout.fnmatch_lines(
        [
            "docs/problems.md:3: a {.python continuation} fence must follow a Python fence*",
            "docs/problems.md:13: this Python fence is not collected, so it would never run*",
            "docs/problems.md:21: this output block does not follow a Python fence*",
        ]
    )


def test_each_chain_starts_with_default_print_options_one_thread_and_agg(
    book: pytest.Pytester,
) -> None:
    add_page(book, "determinism.md")
    book.runpytest().assert_outcomes(passed=3)


def test_an_output_with_grad_fn_fails(book: pytest.Pytester) -> None:
    add_page(book, "grad_fn.md")
    result = book.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["docs/grad_fn.md:3: the output shows a tensor's grad_fn=*"])


def test_every_page_item_carries_the_page_marker(book: pytest.Pytester) -> None:
    for name in ("basic.md", "problems.md", "notebook.ipynb"):
        add_page(book, name)
    book.runpytest("-m", "page", "--collect-only", "-q").stdout.fnmatch_lines(["12 tests collected*"])
    book.runpytest("-m", "not page", "--collect-only", "-q").stdout.fnmatch_lines(
        ["no tests collected (12 deselected)*"]
    )


def test_update_keeps_crlf_line_endings_and_writes_new_lines_with_them() -> None:
    text = "Intro\r\n\r\n```python\r\nprint(1)\r\n```\r\n\r\nEnd\r\n"
    page = parse_page(text, MarkdownIt("commonmark"))
    rewritten, changes = rewrite_outputs(text, {page.fences[0]: "1\n"})
    assert rewritten == (
        "Intro\r\n\r\n```python\r\nprint(1)\r\n```\r\n\r\n```{.text .output}\r\n1\r\n```\r\n"
        "\r\nEnd\r\n"
    )
    assert changes == [(3, "inserted an output block")]


def test_fences_shown_as_examples_are_neither_run_nor_flagged() -> None:
    text = (
        "````markdown\n```python\nprint('an example of page syntax')\n```\n````\n\n"
        '???+ note "Open by default"\n    ~~~python\n    print(1)\n    ~~~\n\n'
        "> ```python\n> print(2)\n> ```\n"
    )
    page = parse_page(text, MarkdownIt("commonmark"))
    assert [fence.source for fence in page.fences] == ["print(1)\n", "print(2)\n"]
    assert [fence.prefix for fence in page.fences] == ["    ", "> "]
    assert page.problems == []


def test_under_xdist_the_count_adds_up_the_workers_and_a_failed_id_runs_again_as_printed(
    book: pytest.Pytester, chain_log: Path
) -> None:
    """The two xdist papercuts, in one run of two worker processes (a few seconds: each worker
    imports torch). The controller executes nothing, so the count line must add up what the
    workers report; and the id in a FAILED line carries xdist's ``@page:...`` group, which the
    runner must accept on the command line."""
    add_page(book, "basic.md", "0.2447", "0.2449")  # and chain_count.md, from chain_log
    # Hypothesis' plugin costs each worker a second or two at start, and no page needs it.
    result = book.runpytest("-n", "2", "--dist", "loadgroup", "-p", "no:hypothesispytest")
    result.assert_outcomes(passed=8, failed=1)
    result.stdout.fnmatch_lines(["book pages: 9 fences and cells executed, 0 of them replays*"])
    failed = [line.split()[1] for line in result.stdout.lines if line.startswith("FAILED ")]
    assert failed == ["docs/basic.md::line-5@page:docs/basic.md"]
    again = book.runpytest(failed[0])
    again.assert_outcomes(failed=1)
    again.stdout.fnmatch_lines(["docs/basic.md:5: the printed output differs*"])
