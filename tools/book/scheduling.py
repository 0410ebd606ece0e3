"""pytest plugin: how the suite's tests share its two processes (pytest-xdist), in one place.

The suite runs on two processes (``-n 2 --dist loadgroup --no-loadscope-reorder`` in
pyproject.toml). Tests that must share a process are grouped:

- all items of one book page or notebook (the runner marks them ``page``): a continuation chain
  reuses its namespace, and ``--update-outputs`` rewrites each file from one process; the group
  is ``page:<path>``;
- each browser test module, as it declares at its top (one chromium and one set of page visits
  per process)::

      pytestmark = pytest.mark.browser_group("browser-crawl", rank=0)

  the run stops, naming the module, if a module under tests/browser/ declares none (it would run
  its tests on both processes, each with its own chromium);
- the tests of a module that use a module-scoped fixture (a process running Triton's interpreter,
  a benchmark run, a model from transformers): made once, not once per process; the group is
  ``module:<path>``;
- the tests of the built site's files (tests/site/): its 40 MB of HTML are parsed once
  (``tests.site._html.scan`` keeps each page's parse), not once per process; the group is
  ``site-html``.

xdist reports a grouped test's id with its group appended (``docs/x.md::line-42@page:docs/x.md``,
``...::test_x@browser-crawl``); such an id, copied from a FAILED line, is accepted on the command
line. The order is chosen here too, so that neither process sits idle: the crawl of the site in
a browser goes first (its first test builds the site, which every site test then shares), the
other browser modules last, by when the build is long done.

Loaded by the root conftest.py and by the page runner (``book.runner.plugin``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE_MARKER = "page"  # what the runner marks every item of a page with
PAGE_GROUP = "page:"
MODULE_GROUP = "module:"
SITE_GROUP = "site-html"
SITE_TESTS = ("tests", "site")  # the folder, from the root, whose tests read the built site's files
BROWSER_MARK = "browser_group"  # how a browser test module declares its group and rank
SITE_FIXTURES = {"built_site", "site_build"}
# Every browser group is named so, which lets a test id copied with its group be recognised
# before any module is collected.
_BROWSER_GROUP = re.compile(r"browser-[a-z0-9-]+")
_GROUP_SUFFIX = re.compile(
    r"@(?:(?:" + re.escape(PAGE_GROUP) + "|" + re.escape(MODULE_GROUP) + r")[^@]*|"
    + _BROWSER_GROUP.pattern + "|" + re.escape(SITE_GROUP) + ")$"
)


def without_group(arg: str) -> str:
    """A test id as xdist prints it (``...::test_x@browser-crawl``, ``...@page:docs/x.md``),
    without the group."""
    return _GROUP_SUFFIX.sub("", arg) if "::" in arg else arg


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


def page_group(item: pytest.Item) -> str | None:
    """``page:<path>`` for an item of a book page or notebook, else None."""
    if item.get_closest_marker(PAGE_MARKER) is None:
        return None
    page = item.getparent(pytest.File)
    return PAGE_GROUP + (page.nodeid if page else item.nodeid.split("::")[0])


def module_group(item: pytest.Item) -> str | None:
    """``module:<path>`` for a test that uses a module-scoped fixture, else None: the module's
    tests then share one process, which makes the fixture once."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    for definitions in info.name2fixturedefs.values():
        if definitions and definitions[-1].scope == "module":
            return MODULE_GROUP + item.nodeid.split("::")[0]
    return None


def site_group(item: pytest.Item, root: Path) -> str | None:
    """``site-html`` for a test under tests/site/, else None."""
    return SITE_GROUP if root.joinpath(*SITE_TESTS) in item.path.parents else None


def stop_undeclared(modules: set[str]) -> None:
    """Stop the run, naming the browser test modules that declare no group and rank."""
    pytest.exit(
        f"expected every test module under tests/browser/ to declare its xdist group and schedule "
        f"rank, `pytestmark = pytest.mark.{BROWSER_MARK}(\"browser-<name>\", rank=<int>)` (see "
        f"tools/book/scheduling.py), found no such declaration in {', '.join(sorted(modules))}",
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
    """Group each page's items and each browser module as it declares, stop the run if a browser
    module declares none, and put the tests in schedule order.

    In an xdist worker an undeclared module is left ungrouped: a worker that stops ends in
    xdist's internal error, without the message; the controller stops the run instead, from the
    ids the workers collected (pytest_xdist_node_collection_finished).
    """
    grouping = config.pluginmanager.hasplugin("xdist")
    browser_tests = config.rootpath / "tests" / "browser"
    undeclared = set()
    for item in items:
        group = page_group(item) or (browser_group(item) or (None,))[0]
        if group is None and browser_tests not in item.path.parents:
            group = site_group(item, config.rootpath) or module_group(item)
        if group and grouping:
            item.add_marker(pytest.mark.xdist_group(group))
        elif group is None and browser_tests in item.path.parents:
            undeclared.add(item.path.relative_to(config.rootpath).as_posix())
    if undeclared and not hasattr(config, "workerinput"):
        stop_undeclared(undeclared)
    items.sort(key=schedule_rank)  # stable: the collection order within each rank


@pytest.hookimpl(optionalhook=True)
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
        if nodeid.startswith("tests/browser/") and not _GROUP_SUFFIX.search(nodeid)
    }
    if undeclared:
        stop_undeclared(undeclared)


def pytest_configure(config: pytest.Config) -> None:
    """Register the browser modules' marker; accept test ids as xdist prints them."""
    config.addinivalue_line(
        "markers",
        f"{BROWSER_MARK}(name, rank): a browser test module's xdist group (browser-...) and its "
        "place in the run (see tools/book/scheduling.py)",
    )
    config.args[:] = [without_group(arg) for arg in config.args]
