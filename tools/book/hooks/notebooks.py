"""MkDocs hook: every chapter also as a Jupyter notebook, and notebooks that run anywhere.

For each chapter ``NN-x`` the build makes ``chapters/NN-x.ipynb`` from its page, or from its
pages in reading order when it is read on section pages (``book.chapters``): one notebook per
chapter, since a notebook is read top to bottom anyway. The Python fences become code cells, in
order, and the prose between them markdown cells
(admonitions and tabs become bold headings; output blocks are left out, since running the cells
prints them; links become absolute URLs of the site). Every page of the chapter links the notebook for
download and opens it in Colab. Colab opens notebooks from the repository, so the same notebooks
are kept in ``notebooks/`` at the repository root: ``python -m book notebooks`` writes them
there, and tests/book/test_notebooks.py fails when they differ from what the build makes.

Every notebook (the chapters' and the exercises' in docs/exercises/) starts with
:data:`INSTALL_CELL`, which installs the package from the repository only where ``attention``
cannot be imported (on Colab, say), and a link that opens it in Colab. On the site, links of an
exercise notebook to the site are made relative again, so that they stay on the local copy.
"""

from __future__ import annotations

import json
import posixpath
import re
from pathlib import Path

import material
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page
from mkdocs.utils import get_relative_url

from ..chapters import chapter_of, repository_nav
from ..chapters import chapters as book_chapters
from ..constants import REPO
from ..pages import parse_page

NOTEBOOKS_DIR = "notebooks"  # the repository's copies, which Colab opens
INSTALL_TAG = "install"  # the metadata tag of the install cell
INSTALL_CELL = """\
# Installs the book's package (and PyTorch) unless it is already importable, as
# it is inside the repository after `pip install -e .`; on Colab or in a fresh
# environment it runs once.
import importlib.util
import subprocess
import sys

if importlib.util.find_spec("attention") is None:
    package = "attention @ git+{repo_url}"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "torch",
                    package], check=True)"""
CONTAINER = re.compile(r'(?:!!!|\?\?\?)\+?\s+(?P<kind>[\w-]+)(?:\s+"(?P<title>[^"]*)")?\s*$'
                       r'|===\+?\s+"(?P<tab>[^"]*)"\s*$')
LINK = re.compile(r'(\]\()(?P<target>[^)\s]+)((?:\s+"[^"]*")?\))')  # an image may have a title
SNIPPET = re.compile(r'--8<--\s+"(?P<path>[^"]+)"')
DOWNLOAD_ICON = (
    Path(material.__file__).parent / "templates/.icons/material/download.svg"
).read_text(encoding="utf-8")
METADATA = {
    "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
    "language_info": {"name": "python"},
}


def colab_url(repo_url: str, path: str) -> str:
    """The URL that opens the repository's notebook ``path`` in Colab."""
    owner_repo = re.sub(r"^https://github\.com/|\.git$|/$", "", repo_url)
    return f"https://colab.research.google.com/github/{owner_repo}/blob/main/{path}"


def site_link(target: str, src_uri: str, site_url: str) -> str:
    """The absolute site URL of a relative link ``target`` on the page ``src_uri``."""
    if re.match(r"[a-z][a-z0-9+.-]*:|//", target):
        return target
    path, _, anchor = target.partition("#")
    path = posixpath.normpath(posixpath.join(posixpath.dirname(src_uri), path)) if path else src_uri
    if path.endswith(".md"):
        path = re.sub(r"(^|/)index$", "", path[: -len(".md")])
        path = f"{path}/" if path else ""
    return site_url.rstrip("/") + "/" + path + (f"#{anchor}" if anchor else "")


def markdown_cell(lines: list[str]) -> dict | None:
    """A markdown cell of ``lines``, or None when they are blank."""
    text = "\n".join(lines).strip("\n")
    if not text.strip():
        return None
    return {"cell_type": "markdown", "metadata": {}, "source": text.splitlines(keepends=True)}


def code_cell(source: str, tags: list[str] | None = None) -> dict:
    """A code cell of ``source``, without outputs."""
    metadata = {"tags": tags} if tags else {}
    return {"cell_type": "code", "execution_count": None, "metadata": metadata, "outputs": [],
            "source": source.strip("\n").splitlines(keepends=True)}


def header_cells(title: str, colab: str, page: str, repo_url: str) -> list[dict]:
    """The first cells of every notebook: where it comes from, Colab, and the install cell."""
    intro = (f"# {title}\n\n[Open in Colab]({colab}) · [Read it on the site]({page})\n\n"
             "The first code cell installs the book's package where it is missing.")
    return [markdown_cell([intro]), code_cell(INSTALL_CELL.format(repo_url=repo_url), [INSTALL_TAG])]


def page_cells(markdown: str, src_uri: str, site_url: str, repo_url: str) -> list[dict]:
    """The cells of a page: its Python fences as code cells, the rest as markdown cells.

    The fences are those the runner finds (``book.pages``, the one page reader): a Python fence
    becomes a code cell, an output block is left out, any other fence stays in the prose as it is.
    """
    page = parse_page(markdown)
    spans = {f.start: ("code", f.end, f.source) for f in page.fences}
    spans |= {o.start: ("output", o.end, "") for o in page.outputs}
    spans |= {start: ("text", end, "") for start, end in page.other_fences}
    lines = markdown.splitlines()
    cells: list[dict] = []
    prose: list[str] = []
    indents: list[int] = []  # where the bodies of the open admonitions and tabs start

    def flush() -> None:
        cell = markdown_cell(prose)
        if cell:
            cells.append(cell)
        prose.clear()

    def relink(line: str) -> str:
        line = SNIPPET.sub(lambda m: f"(the file {repo_url}/blob/main/{m['path']})", line)
        return LINK.sub(lambda m: m[1] + site_link(m["target"], src_uri, site_url) + m[3], line)

    i = 0
    while i < len(lines):
        raw = lines[i]
        indent = len(raw) - len(raw.lstrip(" "))
        if raw.strip():
            while indents and indent < indents[-1]:
                indents.pop()
        depth = indents[-1] if indents else 0
        dedent = lambda text: text[depth:] if not text[:depth].strip() else text.lstrip(" ")  # noqa: E731
        if i in spans:
            kind, end, source = spans[i]
            if kind == "code":
                flush()
                cells.append(code_cell(source))
            elif kind == "text":
                body = [dedent(text) for text in lines[i + 1 : end - 1]]
                prose += [lines[i].strip()]
                prose += [relink(text) if SNIPPET.search(text) else text for text in body]
                prose += [lines[end - 1].strip()]
            i = end
            continue
        line = dedent(raw)
        container = CONTAINER.match(line.strip())
        if container:
            title = container["tab"] or container["title"] or container["kind"].capitalize()
            prose += [f"**{title}**", ""]
            indents.append(depth + 4)
        else:
            prose.append(relink(line))
        i += 1
    flush()
    return cells


def notebook(cells: list[dict]) -> str:
    """A notebook (nbformat 4) of ``cells``, as Jupyter writes one."""
    document = {"cells": cells, "metadata": METADATA, "nbformat": 4, "nbformat_minor": 5}
    for number, cell in enumerate(cells):
        cell["id"] = f"cell-{number}"
    return json.dumps(document, indent=1, ensure_ascii=False) + "\n"


def chapter_notebook(chapter: str, sources: list[Path], config: MkDocsConfig | dict) -> str:
    """The notebook of ``chapter``, made from its pages ``sources`` (paths under docs/, the
    landing page first): the landing page's title heads it, each page's cells follow in order."""
    docs_dir = Path(config["docs_dir"]).resolve()
    name = f"{NOTEBOOKS_DIR}/{chapter}.ipynb"
    cells: list[dict] = []
    for source in sources:
        src_uri = source.resolve().relative_to(docs_dir).as_posix()
        markdown = source.read_text(encoding="utf-8")
        if not cells:
            title = re.search(r"^# (.+)$", markdown, flags=re.MULTILINE)[1]
            markdown = re.sub(r"^# .+\n", "", markdown, count=1, flags=re.MULTILINE)
            cells = header_cells(title, colab_url(config["repo_url"], name),
                                 site_link(source.name, src_uri, config["site_url"]),
                                 config["repo_url"])
        cells += page_cells(markdown, src_uri, config["site_url"], config["repo_url"])
    return notebook(cells)


def chapters(config: MkDocsConfig | dict) -> dict[str, list[Path]]:
    """Every chapter's pages, in reading order, by chapter (``07-fast-attention``)."""
    docs_dir = Path(config["docs_dir"])
    return {chapter: [docs_dir / uri for uri in uris]
            for chapter, uris in book_chapters(config["nav"]).items()}


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add ``chapters/NN-x.ipynb`` beside every chapter."""
    for chapter, sources in chapters(config).items():
        uri = f"chapters/{chapter}.ipynb"
        files.append(File.generated(config, uri, content=chapter_notebook(chapter, sources, config)))
    return files


def notebook_links(page: Page, config: MkDocsConfig) -> str:
    """The links under the title of every page of a chapter: download the chapter's notebook,
    open it in Colab."""
    name = chapter_of(page.file.src_uri)
    colab = colab_url(config["repo_url"], f"{NOTEBOOKS_DIR}/{name}.ipynb")
    href = get_relative_url(f"chapters/{name}.ipynb", page.url)
    return (f'<p class="attn-notebook-links">This chapter as a notebook: '
            f'<a href="{href}" download>download</a> · '
            f'<a href="{colab}">open in Colab</a></p>\n')


def download_button(notebook_name: str) -> str:
    """Return a Material content button that downloads ``notebook_name`` (beside the page)."""
    return (
        f'<a href="{notebook_name}" download class="md-content__button md-icon" '
        f'title="Download notebook">{DOWNLOAD_ICON}</a>'
    )


def on_page_content(html: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Chapters: the notebook links after the title. Notebook pages: a "Download notebook"
    button beside "Edit this page" (mkdocs-jupyter copies the .ipynb next to the page), and site
    links made relative."""
    src_uri = page.file.src_uri
    if chapter_of(src_uri) is not None:
        return re.sub(r"(</h1>\n?)", lambda m: m[1] + notebook_links(page, config), html, count=1)
    if src_uri.endswith(".ipynb"):
        root = "../" * page.url.count("/")  # exercises/x/ -> ../../, the site's root
        html = html.replace(f'href="{config["site_url"].rstrip("/")}/', f'href="{root}')
        html = download_button(Path(src_uri).name) + html
    return html


def write_notebooks(config: dict) -> list[Path]:
    """Write every chapter's notebook into the repository's notebooks/ folder."""
    out = REPO / NOTEBOOKS_DIR
    out.mkdir(exist_ok=True)
    written = []
    for chapter, sources in chapters(config).items():
        target = out / f"{chapter}.ipynb"
        target.write_text(chapter_notebook(chapter, sources, config), encoding="utf-8")
        written.append(target)
    return written


def repository_config() -> dict:
    """The settings of mkdocs.yml that the notebooks need, without loading the whole config."""
    text = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    found = {key: re.search(rf"^{key}:\s*(\S+)", text, flags=re.MULTILINE)[1]
             for key in ("site_url", "repo_url")}
    return {**found, "docs_dir": str(REPO / "docs"), "nav": repository_nav()}
