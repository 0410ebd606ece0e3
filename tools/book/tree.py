"""Provenance for a run on a machine that gets a copy of the tree without its git history.

``record`` runs in a clean checkout and writes the commit and every tracked file's blob hash (the
lines of ``git ls-files -s``); the file travels with the copy. ``check`` runs in the copy,
hashes every listed file as git does (``sha1("blob <size>\\0" + content)``) and prints the commit
only if every hash matches, so that a results file may call its tree that commit's, checked:

    python -m book.tree record [FILE]   # default tools/gpu/tree.txt; refuses a modified tree
    python -m book.tree check [FILE]    # prints the commit, or exits 1 naming the files that differ
"""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from .constants import REPO

DEFAULT = REPO / "tools" / "gpu" / "tree.txt"
SUBMODULE = "160000"  # a submodule's entry names a commit, not a blob
SYMLINK = "120000"  # a link's blob is its target


def blob_hash(data: bytes) -> str:
    """The hash git gives a blob with these bytes (what ``git hash-object`` prints)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _git(*args: str, repo: Path) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def record(path: Path = DEFAULT, repo: Path = REPO) -> str:
    """Write HEAD's commit and ``git ls-files -s`` to ``path``; ValueError if tracked files differ
    from HEAD (the record must describe a commit). Returns the commit."""
    changed = _git("status", "--porcelain", "--untracked-files=no", repo=repo).strip()
    if changed:
        raise ValueError(f"record needs a tree equal to its commit: commit or stash first, got changes\n{changed}")
    commit = _git("rev-parse", "HEAD", repo=repo).strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{commit}\n{_git('ls-files', '-s', repo=repo)}", encoding="utf-8")
    return commit


def check(path: Path = DEFAULT, repo: Path = REPO) -> tuple[str, list[str]]:
    """The recorded commit and the files that differ from it: listed files whose content differs
    or that are missing, and Python files under src/ and tools/ that the commit does not have."""
    commit, *entries = path.read_text(encoding="utf-8").splitlines()
    names = {entry.split("\t", 1)[1] for entry in entries}
    differ = sorted(
        str(file.relative_to(repo)) for folder in ("src", "tools") for file in (repo / folder).rglob("*.py")
        if "__pycache__" not in file.parts and str(file.relative_to(repo)) not in names
    )
    for entry in entries:
        info, name = entry.split("\t", 1)  # "<mode> <hash> <stage>", then the path
        mode, expected, _ = info.split()
        if mode == SUBMODULE:
            continue
        file = repo / name
        if mode == SYMLINK:
            data = os.readlink(file).encode() if file.is_symlink() else None
        else:
            data = file.read_bytes() if file.is_file() else None
        if data is None or blob_hash(data) != expected:
            differ.append(name)
    return commit, differ


def main(argv: list[str]) -> None:
    """``record`` or ``check``, with an optional file (see the module docstring)."""
    command, *rest = argv or ["--help"]
    path = Path(rest[0]) if rest else DEFAULT
    if command == "record":
        print(record(path))
    elif command == "check":
        commit, differ = check(path)
        if differ:
            raise SystemExit(f"{len(differ)} files differ from commit {commit}: {', '.join(differ[:20])}")
        print(commit)
    else:
        raise SystemExit(f"python -m book.tree: expected record or check, got {command!r}\n{__doc__}")


if __name__ == "__main__":
    main(sys.argv[1:])
