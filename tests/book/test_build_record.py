"""The record of a clean strict build (book.build_record): the tests reuse a build only while it
is the build of the sources as they are, left as it was, and logged no warning."""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from book import build_record
from book.hooks import build_record as hook


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git checkout with a page, a test and a built site (ignored)."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Home\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("")
    (tmp_path / ".gitignore").write_text("site/\n.cache/\n")
    (tmp_path / "requirements.txt").write_text("pytest==9.1.1\nsetuptools==1.0  # a pin\n")
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "index.html").write_text("<h1>Home</h1>")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", "."], cwd=tmp_path, check=True)
    return tmp_path


def test_a_recorded_build_is_reused_until_an_input_or_a_built_file_changes(repo: Path) -> None:
    record, site = repo / ".cache" / "site-build.json", repo / "site"
    build_record.write(site, build_record.inputs_digest(repo), record)
    assert build_record.reusable_site(repo, record) == site.resolve()
    (repo / "tests" / "test_x.py").write_text("# the tests are not read by the build\n")
    assert build_record.reusable_site(repo, record) == site.resolve()
    (repo / "docs" / "new.md").write_text("# An untracked page\n")
    assert build_record.reusable_site(repo, record) is None
    build_record.write(site, build_record.inputs_digest(repo), record)
    page = site / "index.html"
    page.write_text("<h1>Hone</h1>")  # same size; a later modification time
    os.utime(page, ns=(page.stat().st_atime_ns, page.stat().st_mtime_ns + 10**9))
    assert build_record.reusable_site(repo, record) is None
    build_record.forget(repo / "elsewhere", record)
    assert record.is_file()
    build_record.forget(site, record)
    assert not record.exists()


def test_the_inputs_do_not_depend_on_what_the_process_put_on_its_path(
    repo: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Importing setuptools puts its vendored packages on the path: the build and the tests
    # must still agree on the inputs.
    before = build_record.inputs_digest(repo)
    extra = tmp_path_factory.mktemp("vendored")
    (extra / "vendored_thing-1.0.dist-info").mkdir()
    (extra / "vendored_thing-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: vendored_thing\nVersion: 1.0\n")
    monkeypatch.syspath_prepend(str(extra))
    assert build_record.inputs_digest(repo) == before
    (repo / "requirements.txt").write_text("pytest==9.1.1\nvendored_thing==1.0\n")
    assert build_record.inputs_digest(repo) != before


@pytest.mark.parametrize(("command", "dirty", "strict", "warn", "recorded"), [
    ("build", False, True, None, True),
    ("build", False, True, "mkdocs.plugins.search", False),  # MkDocs' own loggers
    ("build", False, True, "markdown.extensions", False),  # any other, through the root logger
    ("build", False, False, None, False),
    ("build", True, True, None, False),
    ("serve", False, True, None, False),
])
def test_the_hook_records_only_a_clean_strict_full_build(
    repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    command: str, dirty: bool, strict: bool, warn: str | None, recorded: bool,
) -> None:
    record = repo / ".cache" / "site-build.json"
    monkeypatch.setattr(build_record, "RECORD", record)
    monkeypatch.setattr(hook, "inputs_digest", lambda: build_record.inputs_digest(repo))
    config = SimpleNamespace(site_dir=str(repo / "site"), strict=strict)
    hook.on_startup(command, dirty)
    hook.on_config(config)  # type: ignore[arg-type]
    if warn:
        logging.getLogger(warn).warning("a warning")
    hook.on_post_build(config)  # type: ignore[arg-type]
    assert record.is_file() == recorded
    assert all(not isinstance(h, build_record.WarningCount)
               for name in ("mkdocs", None) for h in logging.getLogger(name).handlers)


def test_a_quiet_build_is_not_recorded_its_warnings_went_uncounted(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = repo / ".cache" / "site-build.json"
    monkeypatch.setattr(build_record, "RECORD", record)
    monkeypatch.setattr(hook, "inputs_digest", lambda: build_record.inputs_digest(repo))
    config = SimpleNamespace(site_dir=str(repo / "site"), strict=True)
    mkdocs_logger = logging.getLogger("mkdocs")
    level = mkdocs_logger.level
    mkdocs_logger.setLevel(logging.ERROR)  # what `mkdocs build -q` does
    try:
        hook.on_startup("build", False)
        hook.on_config(config)  # type: ignore[arg-type]
        logging.getLogger("mkdocs.plugins.search").warning("a warning -q hides")
        hook.on_post_build(config)  # type: ignore[arg-type]
    finally:
        mkdocs_logger.setLevel(level)
    assert not record.exists()
