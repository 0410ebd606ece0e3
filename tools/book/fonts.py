"""The figures' font, shipped with the site: DejaVu Sans, the font matplotlib sets their text in.

    python -m book fonts    write docs/assets/fonts/ from the fonts matplotlib ships

Figures keep their text as SVG text in ``font-family: 'DejaVu Sans'``, which most Mac, Windows
and iOS readers do not have; docs/stylesheets/figures.css loads these subsets with
``@font-face``, so every reader sees the figures as they were drawn. Each subset keeps the
characters a figure may show (Latin, Greek, punctuation, arrows, super- and subscripts and math
operators) and is written as WOFF (zlib: no Brotli module needed).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import matplotlib
from fontTools import subset

from .constants import DOCS

FONTS = DOCS / "assets" / "fonts"
FACES = ("DejaVuSans", "DejaVuSans-Oblique", "DejaVuSans-Bold", "DejaVuSansMono")
# Basic Latin, Latin-1, Greek, punctuation, super- and subscripts, letterlike symbols (ℓ),
# arrows, math operators, misc. technical (⌈⌉), geometric shapes (■ ●)
RANGES = ((0x20, 0x7E), (0xA0, 0xFF), (0x370, 0x3FF), (0x2010, 0x205E), (0x2070, 0x209F),
          (0x2100, 0x214F), (0x2190, 0x21FF), (0x2200, 0x22FF), (0x2300, 0x23FF),
          (0x25A0, 0x25FF))


def write_fonts(out: Path = FONTS) -> list[Path]:
    """Write the WOFF subsets of ``FACES`` and DejaVu's licence into ``out``; return the paths."""
    source = Path(matplotlib.get_data_path()) / "fonts" / "ttf"
    out.mkdir(parents=True, exist_ok=True)
    options = subset.Options()
    options.flavor = "woff"
    options.hinting = False  # browsers rasterize SVG text without the TrueType hints
    options.name_IDs = ["*"]  # keep the copyright and licence records
    unicodes = [c for lo, hi in RANGES for c in range(lo, hi + 1)]
    written = []
    for face in FACES:
        font = subset.load_font(str(source / f"{face}.ttf"), options)
        subsetter = subset.Subsetter(options)
        subsetter.populate(unicodes=unicodes)
        subsetter.subset(font)
        path = out / f"{face}.woff"
        subset.save_font(font, str(path), options)
        written.append(path)
    shutil.copyfile(source / "LICENSE_DEJAVU", out / "LICENSE_DEJAVU")
    return written + [out / "LICENSE_DEJAVU"]
