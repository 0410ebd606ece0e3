"""Repository-wide pytest setup.

Loads the book's page runner (tests/markdown_runner): every Python fence of every page under
docs/ runs and its printed output is checked against the page. ``pytester`` drives the runner's
own tests in tests/doctests/.

The suite runs on two processes (pytest-xdist, ``-n 2 --dist loadgroup`` in pyproject.toml).
Tests that must share a process are grouped here: all fences of one page or notebook (a
continuation chain reuses its namespace, and ``--update-outputs`` rewrites each file from one
process), and all tests of the built site (one ``mkdocs build`` and one browser per session).
"""

import pytest

pytest_plugins = ["pytester", "tests.markdown_runner.plugin"]

SITE_FIXTURES = {"built_site", "site_build"}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put a page's fences in one xdist group, and every test of the built site in another."""
    for item in items:
        if SITE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group("built-site"))
        elif item.path.suffix in {".md", ".ipynb"}:
            item.add_marker(pytest.mark.xdist_group(f"page:{item.path}"))


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Rewrite outputs in one process, so that the run can list every file it changed."""
    if config.getoption("update_outputs", False) and hasattr(config.option, "numprocesses"):
        config.option.numprocesses = 0
