"""Repository-wide pytest setup.

Loads the book's page runner (tools/book/runner): every Python fence of every page under
docs/ runs and its printed output is checked against the page. ``pytester`` drives the runner's
own tests in tests/doctests/.

The suite runs on two processes (pytest-xdist, ``-n 2 --dist loadgroup --no-loadscope-reorder``
in pyproject.toml). Tests that must share a process are grouped: all fences of one page or
notebook by the runner itself (a continuation chain reuses its namespace, and
``--update-outputs`` rewrites each file from one process), each browser test module here (one
chromium and one set of page visits per process). xdist reports a grouped test's id with its
group appended (``...::test_x@browser-crawl``); such an id, copied from a FAILED line, is
accepted on the command line (here for browser groups, by the runner for pages). The order is
chosen here too, so that neither process sits idle: the crawl of the site in a browser goes first
(its first test builds the site, which every site test then shares), the other browser modules
last, by when the build is long done.
"""

import os
import re
import sys

import pytest

pytest_plugins = ["pytester", "book.runner.plugin"]

SITE_FIXTURES = {"built_site", "site_build"}
# Browser test modules: their xdist group, and their place in the run (see schedule_rank).
BROWSER = {
    "test_reader_experience.py": ("browser-crawl", 0),
    "test_desktop_reader.py": ("browser-desktop", 3),
    "test_checks_catch_breakage.py": ("browser-probe", 4),
    "test_math.py": ("browser-math", 3),
    "test_site_quality.py": ("browser-quality", 3),
    "test_figures_print.py": ("browser-print", 3),
}
_BROWSER_GROUP_SUFFIX = re.compile(
    "@(?:" + "|".join(re.escape(group) for group, _ in BROWSER.values()) + ")$"
)


def without_browser_group(arg: str) -> str:
    """A test id as xdist prints it (``...::test_x@browser-crawl``), without the group."""
    return _BROWSER_GROUP_SUFFIX.sub("", arg) if "::" in arg else arg


def schedule_rank(item: pytest.Item) -> int:
    """Where a test goes in the run: 0 the crawl of the site in a browser (its first test builds
    the site: the longest chain goes first), 1 the tests that need no site, 2 the other tests of
    the built site, then the desktop and probe-page browser tests, by when the build is done."""
    if item.path.name in BROWSER:
        return BROWSER[item.path.name][1]
    return 2 if SITE_FIXTURES & set(getattr(item, "fixturenames", ())) else 1


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group each browser module (the runner groups each page's fences), and put the tests in
    schedule order."""
    for item in items:
        if item.path.name in BROWSER:
            item.add_marker(pytest.mark.xdist_group(BROWSER[item.path.name][0]))
    items.sort(key=schedule_rank)  # stable: the collection order within each rank


def pytest_xdist_node_collection_finished(node, ids: list[str]) -> None:
    """Stop the run when xdist's ``loadgroup`` would silently ignore the groups.

    A worker marks each grouped test by adding ``@<group>`` to its id, which the scheduler reads.
    pytest 9.2 made test ids immutable, so the groups were dropped without a word
    (pytest-dev/pytest-xdist#1386): pages' fences then ran on both processes, and the site was
    built, and chromium started, twice. requirements.txt pins a pytest on which grouping works;
    this check keeps a future upgrade from losing it silently.
    """
    if node.config.getvalue("dist") != "loadgroup":
        return
    # Every fence of a page is grouped (by tools/book/runner/plugin.py).
    lost = [nodeid for nodeid in ids if nodeid.startswith("docs/") and "@" not in nodeid]
    if lost:
        pytest.exit(
            f"expected every grouped test id to end in @<group> under --dist loadgroup, found "
            f"{len(lost)} without, e.g. {lost[0]}: this pytest and pytest-xdist do not group "
            "tests (pytest-dev/pytest-xdist#1386); install the versions in requirements.txt",
            returncode=pytest.ExitCode.USAGE_ERROR,
        )


def pytest_configure(config: pytest.Config) -> None:
    """Accept browser test ids as xdist prints them; one thread per process."""
    config.args[:] = [without_browser_group(arg) for arg in config.args]
    # One thread per process: the two test processes, chromium and the site build already share
    # the two cores, and more threads than cores only spin and wait (subprocesses inherit this).
    # Set before the test processes start, and before any test module imports torch.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Rewrite outputs in one process, so that the run can list every file it changed."""
    if config.getoption("update_outputs", False) and hasattr(config.option, "numprocesses"):
        config.option.numprocesses = 0
