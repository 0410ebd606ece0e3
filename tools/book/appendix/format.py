"""How the appendix writes numbers: times, ratios, byte counts, rates, and Markdown tables.

Every table of the appendix is built by :func:`table`, so that all of them share one layout:
the first column names the row (a code name, which never breaks across lines) and stays in view
while a table too wide for a phone scrolls sideways in its own box (docs/stylesheets/tables.css).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache

from ..constants import DOCS

BIBLIOGRAPHY = DOCS / "references.bib"


def digits3(value: float) -> str:
    """Three significant digits (``20.1``, ``906``), or a whole number with separators from 1,000
    up (``1,400``), never an exponent (``1.4e+03``)."""
    return f"{value:.3g}" if value < 1000 else f"{value:,.0f}"


def ms(seconds: float) -> str:
    """Milliseconds with three significant digits, or a whole number from 1,000 ms up."""
    return digits3(seconds * 1e3)


def ratio(x: float) -> str:
    """``1.15×``, or ``26×`` from 10 up."""
    return f"{x:.2f}×" if x < 10 else f"{x:.0f}×"


def ratio_range(values: Sequence[float]) -> str:
    """``1.04–1.44×`` (or one ratio, when all are equal at this precision)."""
    lo, hi = ratio(min(values)).rstrip("×"), ratio(max(values))
    return hi if lo == hi.rstrip("×") else f"{lo}–{hi}"


def cudnn_version(number: int) -> str:
    """cuDNN's version from the integer ``torch.backends.cudnn.version()`` returns: 91900 is
    9.19.0, major * 10000 + minor * 100 + patch from cuDNN 9 on (8902, before it, is 8.9.2)."""
    base = 10000 if number >= 90000 else 1000
    major, rest = divmod(number, base)
    return f"{major}.{rest // 100}.{rest % 100}"


def tex_count(n: int) -> str:
    """A whole number for inside ``$...$``: ``16{,}384``. A bare comma is punctuation in TeX, which
    sets a space after it (``16, 384``); in braces it is an ordinary symbol."""
    return f"{n:,}".replace(",", "{,}")


def readable_bytes(nbytes: float | None) -> str:
    """Bytes in binary units, two or three significant digits: "6.1 GiB", "17 MiB", "512 B"."""
    if nbytes is None:
        return "—"
    value, unit = float(nbytes), "B"
    for next_unit in ("KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024:
            break
        value, unit = value / 1024, next_unit
    if unit == "B":
        return f"{value:.0f} B"
    return f"{value:.1f} {unit}" if abs(value) < 10 else f"{value:.0f} {unit}"


def rate(value: float, unit: str) -> str:
    """A rate with a decimal prefix: 1.2e11 FLOP/s -> "120 GFLOP/s"."""
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3), ("", 1.0)):
        if value >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def tflops(value: float) -> str:
    """TFLOP/s with three significant digits (``391``, ``5.42``, ``0.0123``)."""
    return f"{value:.3g}"


@cache
def _cited_urls() -> dict[str, str]:
    """url -> key of every entry of the book's bibliography that has a url."""
    text = BIBLIOGRAPHY.read_text(encoding="utf-8")
    entries = re.findall(r"^@\w+\{([^,]+),(.*?)^\}", text, flags=re.MULTILINE | re.DOTALL)
    return {url: key for key, body in entries for url in re.findall(r"^\s*url = \{([^}]+)\}", body, re.MULTILINE)}


def source(text: str, references: str = "../references.md") -> str:
    """A peak's source with its address linked to the book's reference list where the
    bibliography has it (``https://www.nvidia.com/.../h200/ (H200 SXM)`` -> a link, then the rest)."""
    match = re.match(r"(https?://\S+)(.*)", text)
    if not match:
        return text
    url, rest = match.groups()
    key = _cited_urls().get(url)
    label = f"[datasheet]({references}#{key})" if key else f"<{url}>"
    return label + rest


def code(name: str) -> str:
    """A code name for a table cell."""
    return f"`{name}`"


def table(header: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[bool] | None = None,
          caption: str | None = None) -> str:
    """A Markdown table: numeric columns right-aligned, an optional italic caption above it.

    Pipes inside cells are escaped; an empty table is an empty string.
    """
    if not rows:
        return ""
    numeric = numeric or [False] * len(header)
    if len(numeric) != len(header) or any(len(r) != len(header) for r in rows):
        raise ValueError(f"every row needs {len(header)} cells, got {[len(r) for r in rows]}")
    escape = lambda cell: str(cell).replace("|", "\\|")  # noqa: E731
    lines = [f"*{caption}*", ""] if caption else []
    lines.append("| " + " | ".join(escape(h) for h in header) + " |")
    lines.append("|" + "|".join("---:" if n else "---" for n in numeric) + "|")
    lines += ["| " + " | ".join(escape(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
