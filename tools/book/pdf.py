"""Make the PDF edition of the book from the built site's print page, with headless Chromium.

    mkdocs build --strict --site-dir site && python -m book pdf site/

reads ``site/print/index.html`` (book.hooks.print_page), writes
``site/print/attention-book.pdf`` and adds a download link for it to the print page. It runs after
the build, never inside it, so that the build stays fast; .ci/run runs it. Chromium is Debian's
``/usr/bin/chromium`` unless ``--chromium`` names another; the page is read from the disk, and
Chromium reaches no network.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from .constants import CHROMIUM, CHROMIUM_ARGS, PDF_NAME, PDF_PLACEHOLDER

# No header or footer on the printed pages; no host resolves: nothing but files on the disk.
PRINT_ARGS = ("--no-pdf-header-footer", "--host-resolver-rules=MAP * ~NOTFOUND")


def make_pdf(site: Path, chromium: Path = CHROMIUM, timeout: float = 300) -> Path:
    """Print ``site``'s print page to ``print/attention-book.pdf`` and link it; return its path.

    Raises:
        ValueError: if ``site`` has no print page, or if Chromium writes no PDF.
    """
    page = site / "print" / "index.html"
    if not page.is_file():
        raise ValueError(f"expected the print page {page} (run `mkdocs build` first), found none")
    pdf = page.parent / PDF_NAME
    pdf.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [str(chromium), *CHROMIUM_ARGS, *PRINT_ARGS, f"--user-data-dir={profile}",
             f"--print-to-pdf={pdf}", page.resolve().as_uri()],
            check=True, capture_output=True, timeout=timeout,
        )
    if not pdf.is_file() or pdf.read_bytes()[:5] != b"%PDF-":
        raise ValueError(f"expected Chromium to write a PDF at {pdf}, found none")
    html = page.read_text(encoding="utf-8")
    link = (f'<a href="{PDF_NAME}" download>Download the whole book as a PDF</a> '
            f"({pdf.stat().st_size / 2**20:.1f} MiB). ")
    if PDF_PLACEHOLDER + "<a " not in html:
        page.write_text(html.replace(PDF_PLACEHOLDER, PDF_PLACEHOLDER + link, 1), encoding="utf-8")
    return pdf


def main(argv: list[str] | None = None) -> None:
    """``python -m book pdf SITE [--chromium PATH]``."""
    parser = argparse.ArgumentParser(prog="python -m book pdf", description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="the built site, e.g. site/")
    parser.add_argument("--chromium", type=Path, default=CHROMIUM)
    args = parser.parse_args(argv)
    pdf = make_pdf(args.site, args.chromium)
    print(f"wrote {pdf} ({pdf.stat().st_size / 2**20:.1f} MiB)", file=sys.stderr)
