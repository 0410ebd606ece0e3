"""MkDocs hook: serve MathJax 2.7 from the site itself, on every page and every notebook page.

The MathJax files come from the ``jupyter-server-mathjax`` package (pinned in requirements.txt).
They are added to the build as generated files under ``assets/mathjax/``, so ``mkdocs build``
writes them into the site and ``mkdocs serve`` serves them, and nothing is copied into docs/.
Two parts that no reader can reach are left out (about 12 MB become about 7 MB): the fonts of the
SVG output jax, whose code the package does not ship, and every localization but English
(mathjax-config.js hides the renderer and language menus that would ask for them).

``mkdocs.yml`` loads ``javascripts/mathjax-config.js`` and then ``assets/mathjax/MathJax.js`` on
every page. Notebook pages rendered by mkdocs-jupyter carry nbconvert's own MathJax loader with its
own configuration; ``on_page_content`` removes it so that those pages load the same local MathJax
once, with the same configuration, and render their math the same way.
"""

from __future__ import annotations

import re
from pathlib import Path

import jupyter_server_mathjax
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

MATHJAX_DIR = Path(jupyter_server_mathjax.__file__).parent / "static"
DEST = "assets/mathjax"

# Paths (relative to MATHJAX_DIR) that the configuration in mathjax-config.js never loads.
SKIPPED = ("jax/output/SVG/", "localization/")
KEPT = ("localization/en/",)

# nbconvert's loader: <!-- Load mathjax --> <script src=...> <script type="text/x-mathjax-config">
NBCONVERT_LOADER = re.compile(
    r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", flags=re.DOTALL
)


def mathjax_files() -> list[Path]:
    """Return the MathJax files the site serves, relative to the package's static folder.

    Raises:
        PluginError: if the installed package lacks ``MathJax.js`` or the combined
            ``TeX-AMS-MML_HTMLorMML-full`` configuration that mathjax-config.js asks for.
    """
    kept = []
    for path in sorted(MATHJAX_DIR.rglob("*")):
        rel = path.relative_to(MATHJAX_DIR).as_posix()
        if path.is_file() and (not rel.startswith(SKIPPED) or rel.startswith(KEPT)):
            kept.append(Path(rel))
    required = {Path("MathJax.js"), Path("config/TeX-AMS-MML_HTMLorMML-full.js")}
    if not required <= set(kept):
        raise PluginError(
            f"expected {sorted(map(str, required))} in {MATHJAX_DIR}, "
            f"found {len(kept)} files without them: is jupyter-server-mathjax installed?"
        )
    return kept


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the MathJax files to the build under ``assets/mathjax/``."""
    for rel in mathjax_files():
        files.append(
            File.generated(config, f"{DEST}/{rel.as_posix()}", abs_src_path=str(MATHJAX_DIR / rel))
        )
    return files


def on_page_content(html: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Drop the MathJax loader nbconvert writes into notebook pages (the site loads its own)."""
    if not page.file.src_uri.endswith(".ipynb"):
        return html
    return NBCONVERT_LOADER.sub("", html)
