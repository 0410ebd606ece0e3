"""Repository-wide pytest setup.

Loads the book's page runner (tools/book/runner): every Python fence of every page under
docs/ runs and its printed output is checked against the page. ``pytester`` drives the runner's
own tests in tests/book/runner/.

The suite runs on two processes (pytest-xdist, ``-n 2 --dist loadgroup --no-loadscope-reorder``
in pyproject.toml). Tests that must share a process are grouped: all fences of one page or
notebook by the runner itself (a continuation chain reuses its namespace, and
``--update-outputs`` rewrites each file from one process), each browser test module as it
declares (below; one chromium and one set of page visits per process). xdist reports a grouped test's id with its
group appended (``...::test_x@browser-crawl``); such an id, copied from a FAILED line, is
accepted on the command line (here for browser groups, by the runner for pages). The order is
chosen here too, so that neither process sits idle: the crawl of the site in a browser goes first
(its first test builds the site, which every site test then shares), the other browser modules
last, by when the build is long done.

Each browser test module declares its group and its place itself, at its top::

    pytestmark = pytest.mark.browser_group("browser-crawl", rank=0)

and the run stops, naming the module, if a module under tests/browser/ declares none (it would run
its tests on both processes, each with its own chromium).
"""

import os
import re
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester", "book.runner.plugin"]

SITE_FIXTURES = {"built_site", "site_build"}
BROWSER_TESTS = Path(__file__).parent / "tests" / "browser"
# The marker by which a browser test module declares its xdist group and its schedule rank.
BROWSER_MARK = "browser_group"
# Every browser group is named so, which lets a test id copied with its group be recognised
# before any module is collected.
_BROWSER_GROUP = re.compile(r"browser-[a-z0-9-]+")
_BROWSER_GROUP_SUFFIX = re.compile("@" + _BROWSER_GROUP.pattern + "$")


def without_browser_group(arg: str) -> str:
    """A test id as xdist prints it (``...::test_x@browser-crawl``), without the group."""
    return _BROWSER_GROUP_SUFFIX.sub("", arg) if "::" in arg else arg


def browser_group(item: pytest.Item) -> tuple[str, int] | None:
    """The xdist group and schedule rank that ``item``'s module declares with
    ``pytestmark = pytest.mark.browser_group("browser-<name>", rank=<int>)``; None for a module
    that declares none, or declares them in another form."""
    module = item.getparent(pytest.Module)
    mark = module.get_closest_marker(BROWSER_MARK) if module else None
    if mark is None or len(mark.args) != 1 or set(mark.kwargs) != {"rank"}:
        return None
    name, rank = mark.args[0], mark.kwargs["rank"]
    if not (isinstance(name, str) and _BROWSER_GROUP.fullmatch(name) and isinstance(rank, int)):
        return None
    return name, rank


def stop_undeclared(modules: set[str]) -> None:
    """Stop the run, naming the browser test modules that declare no group and rank."""
    pytest.exit(
        f"expected every test module under tests/browser/ to declare its xdist group and schedule "
        f"rank, `pytestmark = pytest.mark.{BROWSER_MARK}(\"browser-<name>\", rank=<int>)` (see "
        f"conftest.py), found no such declaration in {', '.join(sorted(modules))}",
        returncode=pytest.ExitCode.USAGE_ERROR,
    )


def schedule_rank(item: pytest.Item) -> int:
    """Where a test goes in the run: 0 the crawl of the site in a browser (its first test builds
    the site: the longest chain goes first), 1 the tests that need no site, 2 the other tests of
    the built site, then the desktop and probe-page browser tests (their modules' rank), by when
    the build is done."""
    declared = browser_group(item)
    if declared:
        return declared[1]
    return 2 if SITE_FIXTURES & set(getattr(item, "fixturenames", ())) else 1


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group each browser module as it declares (the runner groups each page's fences), stop
    the run if a browser module declares no group, and put the tests in schedule order.

    In an xdist worker an undeclared module is left ungrouped: a worker that stops ends in
    xdist's internal error, without the message; the controller stops the run instead, from the
    ids the workers collected (pytest_xdist_node_collection_finished).
    """
    undeclared = set()
    for item in items:
        declared = browser_group(item)
        if declared:
            item.add_marker(pytest.mark.xdist_group(declared[0]))
        elif BROWSER_TESTS in item.path.parents:
            undeclared.add(item.path.relative_to(config.rootpath).as_posix())
    if undeclared and not hasattr(config, "workerinput"):
        stop_undeclared(undeclared)
    items.sort(key=schedule_rank)  # stable: the collection order within each rank


def pytest_xdist_node_collection_finished(node, ids: list[str]) -> None:
    """Stop the run when xdist's ``loadgroup`` would silently ignore the groups, or when a
    browser test module declares none (its tests, collected by a worker, carry no group).

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
    undeclared = {
        nodeid.split("::")[0]
        for nodeid in ids
        if nodeid.startswith("tests/browser/") and not _BROWSER_GROUP_SUFFIX.search(nodeid)
    }
    if undeclared:
        stop_undeclared(undeclared)


def pytest_configure(config: pytest.Config) -> None:
    """Register the browser modules' marker; accept browser test ids as xdist prints them; one
    thread per process."""
    config.addinivalue_line(
        "markers",
        f"{BROWSER_MARK}(name, rank): a browser test module's xdist group (browser-...) and its "
        "place in the run (see conftest.py)",
    )
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
