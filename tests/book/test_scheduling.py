"""How the suite's tests share its two processes (tools/book/scheduling.py)."""

from __future__ import annotations

import pytest

from book.scheduling import SITE_GROUP, module_group, site_group, without_group

SOURCE = """
import pytest

@pytest.fixture(scope="module")
def made_once():
    return 1

@pytest.fixture
def made_per_test():
    return 2

def test_uses_the_module_fixture(made_once):
    pass

def test_uses_a_function_fixture(made_per_test):
    pass
"""


def test_tests_that_use_a_module_fixture_share_one_process(pytester: pytest.Pytester) -> None:
    shared, free = pytester.getitems(SOURCE)
    assert module_group(shared) == "module:" + shared.nodeid.split("::")[0]
    assert module_group(free) is None


def test_a_module_group_id_is_accepted_as_xdist_prints_it() -> None:
    printed = "tests/package/test_x.py::test_y[a]@module:tests/package/test_x.py"
    assert without_group(printed) == "tests/package/test_x.py::test_y[a]"


def test_the_site_tests_share_one_process(pytester: pytest.Pytester) -> None:
    (pytester.path / "tests" / "site").mkdir(parents=True)
    site = pytester.makepyfile(**{"tests/site/test_pages": "def test_page():\n    pass\n"})
    other = pytester.makepyfile(**{"tests/book/test_other": "def test_other():\n    pass\n"})
    [in_site], [elsewhere] = pytester.getitems(site), pytester.getitems(other)
    assert site_group(in_site, pytester.path) == SITE_GROUP
    assert site_group(elsewhere, pytester.path) is None
    assert without_group(f"{in_site.nodeid}@{SITE_GROUP}") == in_site.nodeid
