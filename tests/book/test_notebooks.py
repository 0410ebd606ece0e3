"""Notebooks that run anywhere: every chapter as a notebook made from its page, the exercise
notebooks, their install cell and Colab link, and no link that breaks outside the site.

The chapter notebooks are made by tools/book/hooks/notebooks.py on every build; the copies in
notebooks/ (which "Open in Colab" opens from the repository) must equal them.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from book.constants import DOCS, REPO
from book.hooks import notebooks as hook
from book.pages import read_page

CONFIG = hook.repository_config()
CHAPTERS = hook.chapters(CONFIG)  # chapter -> its pages, in reading order
EXERCISES = sorted((DOCS / "exercises").glob("*.ipynb"))


@functools.cache
def notebook_text(chapter: str) -> str:
    """The chapter's notebook as the hook writes it: made once per process (its pages are parsed
    for it), since several tests below read every notebook."""
    return hook.chapter_notebook(chapter, CHAPTERS[chapter], CONFIG)


def chapter_notebook(chapter: str) -> dict:
    return json.loads(notebook_text(chapter))


# Every chapter and exercise notebook, by name, with its path in the repository (what Colab
# opens). The notebooks themselves are made or read by the tests, not at collection.
NOTEBOOKS = {c: f"notebooks/{c}.ipynb" for c in CHAPTERS} | {
    e.stem: e.relative_to(REPO).as_posix() for e in EXERCISES}


def notebook_named(name: str) -> dict:
    """The chapter notebook the hook makes, or the exercise notebook as stored."""
    if name in CHAPTERS:
        return chapter_notebook(name)
    return json.loads((REPO / NOTEBOOKS[name]).read_text(encoding="utf-8"))


def source(cell: dict) -> str:
    return "".join(cell["source"])


def test_there_is_a_notebook_for_every_chapter_and_the_repository_copies_are_current() -> None:
    assert len(CHAPTERS) >= 9, f"expected the book's chapters, found {CHAPTERS}"
    copies = sorted((REPO / "notebooks").glob("*.ipynb"))
    assert [c.stem for c in copies] == sorted(CHAPTERS), "run python -m book notebooks"
    stale = [c.name for c in copies if c.read_text(encoding="utf-8") != notebook_text(c.stem)]
    assert stale == [], f"notebooks/ differs from the pages: {stale}; run python -m book notebooks"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_code_cells_are_the_pages_python_fences_in_order(chapter: str) -> None:
    # A chapter read on section pages: one notebook, its pages' fences in reading order.
    cells = chapter_notebook(chapter)["cells"]
    code = [source(c) for c in cells if c["cell_type"] == "code"][1:]  # after the install cell
    fences = [fence.source.strip("\n") for page in CHAPTERS[chapter]
              for fence in read_page(page).fences]
    assert code == fences
    prose = "\n".join(source(c) for c in cells if c["cell_type"] == "markdown")
    assert "{.text .output}" not in prose and "```python" not in prose
    assert not re.search(r"^(?:!!!|\?\?\?|===)", prose, flags=re.MULTILINE), "admonition syntax left"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_notebook_installs_the_package_and_opens_in_colab(name: str) -> None:
    cells, path = notebook_named(name)["cells"], NOTEBOOKS[name]
    code = [c for c in cells if c["cell_type"] == "code"]
    assert hook.INSTALL_TAG in code[0]["metadata"].get("tags", []), f"{name}: no install cell first"
    assert source(code[0]) == hook.INSTALL_CELL.format(repo_url=CONFIG["repo_url"])
    before = "".join(source(c) for c in cells[: cells.index(code[0])])
    colab = hook.colab_url(CONFIG["repo_url"], path)
    assert f"[Open in Colab]({colab})" in before, f"{name}: no Colab link above the install cell"
    assert (REPO / path).is_file(), f"the Colab link opens {path}, which the repository lacks"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_no_relative_links_in_notebooks(name: str) -> None:
    relative = [
        target
        for cell in notebook_named(name)["cells"] if cell["cell_type"] == "markdown"
        for target in re.findall(r"\]\(([^)\s]+)\)|(?:href|src)=\"([^\"]+)\"", source(cell))
        for target in target if target and not re.match(r"https?://", target)
    ]
    assert relative == [], f"{name}: links that break outside the site: {relative}"


def test_install_cell_installs_only_where_the_package_is_missing(monkeypatch) -> None:
    cell = hook.INSTALL_CELL.format(repo_url=CONFIG["repo_url"])
    calls: list[list[str]] = []
    monkeypatch.setattr(subprocess, "run", lambda args, **kwargs: calls.append(args))
    exec(compile(cell, "install-cell", "exec"), {})
    assert calls == [], "attention is importable here: nothing to install"
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "attention" else find_spec(name, *a))
    exec(compile(cell, "install-cell", "exec"), {})
    assert calls == [[sys.executable, "-m", "pip", "install", "--quiet", "torch",
                      f"attention @ git+{CONFIG['repo_url']}"]]


def test_a_chapter_notebook_runs_top_to_bottom(tmp_path: Path) -> None:
    # Chapter 2, every code cell in order in one fresh interpreter, as a notebook kernel runs
    # them, the install cell left out (the package is installed here).
    notebook = chapter_notebook("02-self-attention-without-weights")
    cells = [source(c) for c in notebook["cells"]
             if c["cell_type"] == "code" and hook.INSTALL_TAG not in c["metadata"].get("tags", [])]
    assert len(cells) > 10
    script = tmp_path / "run.py"
    script.write_text(
        "import json, sys\nimport matplotlib\nmatplotlib.use('Agg')\nnamespace = {'__name__': '__main__'}\n"
        "for number, code in enumerate(json.load(open(sys.argv[1]))):\n"
        "    exec(compile(code, f'cell {number + 1}', 'exec'), namespace)\n"
        "print('ran', number + 1)\n", encoding="utf-8")
    (tmp_path / "cells.json").write_text(json.dumps(cells), encoding="utf-8")
    result = subprocess.run([sys.executable, str(script), str(tmp_path / "cells.json")],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith(f"ran {len(cells)}")


def test_chapter_pages_offer_their_notebook(built_site: Path) -> None:
    # Every page of a chapter, its section pages too, offers the chapter's one notebook.
    for chapter, sources in CHAPTERS.items():
        notebook = hook.chapter_notebook(chapter, sources, CONFIG)
        for source in sources:
            html = built_site / re.sub(r"(/index)?\.md$", "", source.relative_to(DOCS).as_posix())
            page = (html / "index.html").read_text(encoding="utf-8")
            links = re.search(r'<p class="attn-notebook-links">(.*?)</p>', page, flags=re.DOTALL)
            assert links, f"{source.name}: no notebook links under the title"
            download = re.search(r'<a href="([^"]+)" download>', links[1])[1]
            assert (html / download).resolve().read_text(encoding="utf-8") == notebook
            assert hook.colab_url(CONFIG["repo_url"], f"notebooks/{chapter}.ipynb") in links[1]


def test_exercise_pages_link_the_local_site(built_site: Path) -> None:
    for exercise in EXERCISES:
        page = (built_site / "exercises" / exercise.stem / "index.html").read_text(encoding="utf-8")
        page = page[page.index("<article") : page.index("</article>")]  # the notebook itself
        assert 'href="../../chapters/' in page, f"{exercise.stem}: no link to its chapter"
        assert f'href="{CONFIG["site_url"]}' not in page, f"{exercise.stem}: links leave the copy"
