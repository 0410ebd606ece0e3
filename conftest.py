"""Repository-wide pytest setup.

Loads the book's page runner (tools/book/runner): every Python fence of every page under
docs/ runs and its printed output is checked against the page. ``pytester`` drives the runner's
own tests in tests/book/runner/. The suite runs on two processes (pytest-xdist); which tests
share one, and in what order they run, is book.scheduling's (tools/book/scheduling.py).
"""

import os
import sys

import pytest

pytest_plugins = ["pytester", "book.scheduling", "book.runner.plugin"]

# Python's bytecode caches (__pycache__/, git-ignored) are written even where the environment
# says not to (PYTHONDONTWRITEBYTECODE, as on the machines this book is tested on): without them
# every test process and every subprocess compiles again each of the ~300 modules it imports, and
# pytest rewrites every test module's assertions again, about 16 s of each process's start on a
# 2-core machine. Set here, before any test module is collected; the subprocesses inherit it.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def pytest_configure(config: pytest.Config) -> None:
    """One thread per process."""
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
