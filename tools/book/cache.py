"""Files the build and the tests keep between runs in ``.cache/`` (git-ignored, safe to delete),
each named by a digest of what it was made from."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def keep(path: Path, write: Callable[[Path], None]) -> None:
    """Make ``path`` the one file of its folder with its suffix: ``write(partial)`` writes it to a
    temporary file beside it, which then replaces it whole (a process reading it meanwhile sees
    the old file or the new, never half of one); the files kept for other digests go."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    write(partial)
    os.replace(partial, path)
    for other in path.parent.glob(f"*{path.suffix}"):
        if other != path:
            other.unlink(missing_ok=True)
