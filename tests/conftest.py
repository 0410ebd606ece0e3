"""Fixtures shared by the tests of the built site (tests/test_site.py, tests/test_figures.py and
the browser tests): the site is built once per session, with ``mkdocs build --strict``."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class SiteBuild:
    """One run of ``mkdocs build --strict``: where it wrote the site, its exit code and its log."""

    site_dir: Path
    returncode: int
    log: str


@pytest.fixture(scope="session")
def site_build(tmp_path_factory: pytest.TempPathFactory) -> SiteBuild:
    """Build the site once per session into a temporary folder, exactly as CI does."""
    site_dir = tmp_path_factory.mktemp("site")
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
def built_site(site_build: SiteBuild) -> Path:
    """The folder of the built site; fails (with the build log) if the strict build failed."""
    if site_build.returncode != 0:
        pytest.fail(f"mkdocs build --strict failed:\n{site_build.log}", pytrace=False)
    return site_build.site_dir
