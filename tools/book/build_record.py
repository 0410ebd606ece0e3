"""The record of the last clean build of the site, so that the tests read that build instead of
making their own when nothing it was made from has changed since (``.ci/run`` builds the site
just before it runs ``pytest``).

A build writes the record (the hook tools/mkdocs_hooks/build_record.py) only when it ran as
``mkdocs build --strict``, not dirty, and logged no warning or error. The record holds two
digests: of the inputs (every file git lists outside ``tests/``, read when the build started, and
the installed versions of the pinned requirements) and of the built files (names, sizes,
modification times).
:func:`reusable_site` returns the site only while both still match.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import subprocess
from importlib import metadata
from pathlib import Path

from .constants import REPO

RECORD = REPO / ".cache" / "site-build.json"
REQUIREMENT = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*==", re.MULTILINE)


def inputs_digest(repo: Path = REPO) -> str:
    """A digest of every file the build may read: what git lists (tracked, or untracked and not
    ignored) outside ``tests/``, names and contents, and of the installed versions of the
    requirements that requirements.txt pins."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo, capture_output=True, check=True,
    ).stdout.decode().split("\0")
    digest = hashlib.sha256()
    for name in sorted(set(listed)):
        path = repo / name
        if name and not name.startswith("tests/") and path.is_file():
            digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    # The installed versions of the pinned requirements, looked up by name: a scan of every
    # distribution on the path would depend on what the process imported (setuptools puts its
    # vendored packages on the path) and on folders listed twice.
    for name in sorted(REQUIREMENT.findall((repo / "requirements.txt").read_text())):
        try:
            digest.update(f"{name}=={metadata.version(name)}\n".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{name} missing\n".encode())
    return digest.hexdigest()


def site_digest(site_dir: Path) -> str:
    """A digest of the built files' names, sizes and modification times: a file changed, added or
    removed after the build changes it."""
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(site_dir):
        dirs.sort()
        for name in sorted(files):
            stat = os.stat(os.path.join(root, name))
            rel = os.path.relpath(os.path.join(root, name), site_dir)
            digest.update(f"{rel}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def write(site_dir: Path, inputs: str, record: Path | None = None) -> None:
    """Record a clean strict build of ``site_dir`` from the inputs whose digest is ``inputs``."""
    record = record or RECORD
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"site_dir": str(site_dir.resolve()), "inputs": inputs,
                                  "site": site_digest(site_dir)}))


def forget(site_dir: Path, record: Path | None = None) -> None:
    """Drop the record if it is of ``site_dir`` (a new build of it starts)."""
    record = record or RECORD
    if record.is_file() and json.loads(record.read_text())["site_dir"] == str(site_dir.resolve()):
        record.unlink()


def reusable_site(repo: Path = REPO, record: Path | None = None) -> Path | None:
    """The site of the recorded build if it is the build of the inputs as they are now and its
    files are as the build left them; else None."""
    record = record or RECORD
    if not record.is_file():
        return None
    done = json.loads(record.read_text())
    site_dir = Path(done["site_dir"])
    if not site_dir.is_dir() or site_digest(site_dir) != done["site"]:
        return None
    return site_dir if inputs_digest(repo) == done["inputs"] else None


class WarningCount(logging.Handler):
    """Counts the warnings and errors logged; on the root logger it also prints them as Python's
    last-resort handler would have, had it been the only one (it is then)."""

    def __init__(self, forward: bool = False) -> None:
        super().__init__(logging.WARNING)
        self.count, self.forward = 0, forward

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1
        root = logging.getLogger()
        if self.forward and logging.lastResort and root.handlers == [self]:
            logging.lastResort.handle(record)
