"""Hook logic: record a clean strict build (book.build_record), so that the tests can read it."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig

from ..build_record import WarningCount, forget, inputs_digest, write


@dataclass
class _Build:
    """The build under way: whether it may be recorded, its inputs' digest, its counters."""

    recordable: bool = False
    inputs: str = ""
    counters: dict[str, WarningCount] = field(default_factory=dict)  # by logger name


_build = _Build()


def on_startup(command: str, dirty: bool) -> None:
    _build.recordable = command == "build" and not dirty


def on_config(config: MkDocsConfig) -> None:
    forget(Path(config.site_dir))
    # MkDocs' own logger does not pass its records on to the root logger: count on both.
    _build.counters = {"mkdocs": WarningCount(), "": WarningCount(forward=True)}
    for name, counter in _build.counters.items():
        logging.getLogger(name or None).addHandler(counter)
    _build.inputs = inputs_digest()


def on_post_build(config: MkDocsConfig) -> None:
    for name, counter in _build.counters.items():
        logging.getLogger(name or None).removeHandler(counter)
    clean = not any(counter.count for counter in _build.counters.values())
    # `mkdocs build -q` raises MkDocs' logger to ERROR: its warnings were never logged, so never
    # counted (MkDocs' strict check misses them too), and the build cannot be called clean.
    counted = logging.getLogger("mkdocs").isEnabledFor(logging.WARNING)
    if _build.recordable and config.strict and clean and counted:
        write(Path(config.site_dir), _build.inputs)
