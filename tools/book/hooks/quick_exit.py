"""MkDocs hook: end a successful ``mkdocs build`` without the interpreter's teardown.

Once a build has written everything, tearing down torch (0.4 s alone), matplotlib and the
build's objects took another 1.1 s of every build. This hook, the last, ends the process at
once after a build that succeeded, with status 0, as mypy ends its own runs: MkDocs calls
``on_shutdown`` from a ``finally`` after the build, so success is no exception on its way
(``sys.exc_info()``) and no ``on_build_error`` before. The logs and the standard streams are
flushed first. ``mkdocs serve``, ``gh-deploy`` and a failed build end as usual.
"""

from __future__ import annotations

import logging
import os
import sys

_command: str | None = None
_failed = False


def on_startup(command: str, dirty: bool) -> None:
    """Remember the command: only ``build`` ends early."""
    global _command, _failed
    _command, _failed = command, False


def on_build_error(error: Exception) -> None:
    """A failed build (a strict build's warnings included) ends as usual."""
    global _failed
    _failed = True


def on_shutdown() -> None:
    """End a successful ``mkdocs build`` now, with status 0."""
    if _command != "build" or _failed or sys.exc_info()[0] is not None:
        return
    logging.shutdown()  # flushes every handler
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
