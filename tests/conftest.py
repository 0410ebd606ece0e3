"""Fixtures shared by the tests of the built site (tests/site/test_site.py, tests/book/test_figures.py and
the browser tests): the site is built once per run, with ``mkdocs build --strict``.

Under pytest-xdist the processes of one run share that build: the first one that needs the site
builds it, behind a file lock, into the run's common temporary folder, and the others wait for it
and read the same result. conftest.py at the repository root schedules a test that needs the
site first, so that the build overlaps the other tests instead of holding them up. A run reads
the last build of the site instead where that was a clean strict build of the sources as they are
now (``mkdocs build --strict`` records it: book.build_record), as in ``.ci/run``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from filelock import FileLock

from book import build_record
from book.constants import REPO

# The log of a build the run reuses: it logged no warning or error, or it would not be recorded.
REUSED = "reused the recorded clean strict build"


@dataclass(frozen=True)
class SiteBuild:
    """One run of ``mkdocs build --strict``: where it wrote the site, its exit code and its log."""

    site_dir: Path
    returncode: int
    log: str


def build_site(site_dir: Path) -> SiteBuild:
    """Run ``mkdocs build --strict`` into ``site_dir``, exactly as CI does."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    return SiteBuild(site_dir, result.returncode, result.stdout + result.stderr)


@pytest.fixture(scope="session")
def site_build(tmp_path_factory: pytest.TempPathFactory) -> SiteBuild:
    """The run's one build of the site, made by whichever process asks first; or the last build
    of the site, when it was a clean strict build of the sources as they are (book.build_record)."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the folder every worker of this run has in common
    reused = build_record.reusable_site()
    if reused is not None:
        return SiteBuild(reused, 0, f"{REUSED}: {reused}")
    record = shared / "site-build.json"
    with FileLock(shared / "site-build.lock"):
        if not record.exists():
            build = build_site(shared / "site")
            record.write_text(json.dumps({"returncode": build.returncode, "log": build.log}))
    done = json.loads(record.read_text())
    return SiteBuild(shared / "site", done["returncode"], done["log"])


@pytest.fixture(scope="session")
def built_site(site_build: SiteBuild) -> Path:
    """The folder of the built site; fails (with the build log) if the strict build failed."""
    if site_build.returncode != 0:
        pytest.fail(f"mkdocs build --strict failed:\n{site_build.log}", pytrace=False)
    return site_build.site_dir
