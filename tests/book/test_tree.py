"""book.tree: a copy of the tree checked file by file against the commit it was recorded at."""

import subprocess
from pathlib import Path

import pytest

from book.constants import REPO
from book.tree import DEFAULT, blob_hash, check, record


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository of one commit: a module under src/ and a link to it."""
    git(tmp_path, "init", "-q")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "kernel.py").write_text("BLOCK = 64\n")
    (tmp_path / "link.py").symlink_to("src/kernel.py")
    git(tmp_path, "add", ".")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    return tmp_path


def test_blob_hash_is_gits(repo: Path) -> None:
    assert blob_hash((repo / "src" / "kernel.py").read_bytes()) == git(repo, "hash-object", "src/kernel.py").strip()


def test_a_copy_passes_until_a_file_changes_or_a_module_is_added(repo: Path) -> None:
    listing = repo / "tree.txt"
    commit = record(listing, repo)
    assert commit == git(repo, "rev-parse", "HEAD").strip()
    assert check(listing, repo) == (commit, [])
    (repo / "src" / "kernel.py").write_text("BLOCK = 128\n")
    (repo / "src" / "extra.py").write_text("")
    assert check(listing, repo) == (commit, ["src/extra.py", "src/kernel.py"])
    with pytest.raises(ValueError, match="record needs a tree equal to its commit"):
        record(listing, repo)


def test_the_record_for_the_gpu_is_never_committed() -> None:
    # the record names the commit it was made at, so a committed one is stale from that commit on
    # (and it would have to name itself); it travels with the tree untracked
    tracked = git(REPO, "ls-files", str(DEFAULT))
    assert not tracked, f"{DEFAULT.relative_to(REPO)} is committed: git rm --cached it"
