"""Reading and writing results files: validated, and written by atomic rename.

A run writes its file after every row, so that a run cut off by a time limit leaves every
finished row behind. Each write goes to a temporary file beside the target, then replaces the
target in one step (``os.replace``): a reader, or a run killed mid-write, never sees half a file.
"""

import argparse
import json
import os
from pathlib import Path
from typing import Any

from .schema import validate_results


def write_results(doc: dict[str, Any], path: Path) -> None:
    """Validate ``doc`` and write it to ``path`` atomically (JSON, one space of indent)."""
    validate_results(doc)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    try:
        partial.write_text(json.dumps(doc, indent=1) + "\n")
        os.replace(partial, path)
    except OSError:
        partial.unlink(missing_ok=True)  # no stray file beside a target that could not be written
        raise


def output_file(text: str) -> Path:
    """An argparse ``type`` for a results file to write: not a directory, in an existing folder
    that we may write to. Checked when the options are read, so that a run never measures for
    minutes and then fails to write; anything else is argparse's usage error."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"expected a file to write, got the directory {text!r}")
    parent = path.parent
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"expected a file in an existing folder, got {text!r}, whose folder "
                                         f"{str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"expected a file in a folder we may write to, got {text!r}, whose "
                                         f"folder {str(parent)!r} is not writable")
    return path


def read_results(path: Path) -> dict[str, Any]:
    """A results file, validated; ValueError names the file and the first field out of place."""
    try:
        doc = json.loads(Path(path).read_text())
        validate_results(doc)
    except (ValueError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: {error}") from None
    return doc
