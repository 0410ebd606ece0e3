"""The book's chapters and the pages each one is read on, in reading order.

A short chapter is one page, ``chapters/NN-name.md``. A long one is a folder,
``chapters/NN-name/``: its landing page ``index.md`` (the chapter's title, its introduction and
the list of its section pages) and one page per section or pair of sections, in the order of the
nav of mkdocs.yml. Either way the chapter is called ``NN-name``, its URL is ``chapters/NN-name/``
and its notebook ``notebooks/NN-name.ipynb``. The figure hook numbers a chapter's figures across
its pages, the notebooks hook makes one notebook of them, the print page puts them in order.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from .constants import REPO

CHAPTER_PAGE = re.compile(r"chapters/(?P<chapter>(?P<number>\d+)-[^/]+?)(?:\.md|/[^/]+\.md)")


def chapter_of(src_uri: str) -> str | None:
    """The chapter that the page ``src_uri`` (relative to docs/) belongs to, ``07-fast-attention``
    for ``chapters/07-fast-attention.md`` and ``chapters/07-fast-attention/tiles.md``, else None."""
    m = CHAPTER_PAGE.fullmatch(src_uri)
    return m["chapter"] if m else None


def chapter_number(src_uri: str) -> int | None:
    """The number of the chapter of the page ``src_uri``, None for a page outside the chapters."""
    m = CHAPTER_PAGE.fullmatch(src_uri)
    return int(m["number"]) if m else None


def nav_pages(nav: object) -> list[str]:
    """The Markdown pages of a nav (as mkdocs.yml writes it), in order."""
    if isinstance(nav, str):
        return [nav] if nav.endswith(".md") else []
    if isinstance(nav, dict):
        return [uri for value in nav.values() for uri in nav_pages(value)]
    if isinstance(nav, list):
        return [uri for entry in nav for uri in nav_pages(entry)]
    return []


class _Loader(yaml.SafeLoader):
    """Reads mkdocs.yml without importing what its ``!!python/name:`` tags name."""


_Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)


def repository_nav(config_file: Path = REPO / "mkdocs.yml") -> list:
    """The nav of mkdocs.yml, read without loading the whole MkDocs config."""
    return yaml.load(config_file.read_text(encoding="utf-8"), Loader=_Loader)["nav"]


def chapters(nav: object | None = None) -> dict[str, list[str]]:
    """Every chapter, in book order, with its pages (src_uris, landing page first) in reading
    order; from ``nav`` or, by default, the nav of mkdocs.yml.

    Raises:
        ValueError: if a chapter folder's first page in the nav is not its ``index.md``.
    """
    found: dict[str, list[str]] = {}
    for uri in nav_pages(repository_nav() if nav is None else nav):
        chapter = chapter_of(uri)
        if chapter is not None:
            found.setdefault(chapter, []).append(uri)
    for chapter, pages in found.items():
        if len(pages) > 1 and pages[0] != f"chapters/{chapter}/index.md":
            raise ValueError(
                f"expected chapters/{chapter}/index.md first among the pages of chapter {chapter} "
                f"in the nav, got {pages[0]}"
            )
    return found


def landing_page(chapter: str, docs_dir: Path) -> Path:
    """The page a chapter opens on: ``NN-name.md`` or ``NN-name/index.md``."""
    single = docs_dir / "chapters" / f"{chapter}.md"
    return single if single.is_file() else docs_dir / "chapters" / chapter / "index.md"
