"""WCAG 2.1 relative luminance and contrast ratio (what Lighthouse's colour-contrast audit
applies), for colours as the browser computes them and for screenshots."""

from __future__ import annotations

from typing import Any

import numpy as np


def rgba(css: str) -> tuple[float, float, float, float]:
    """``rgb(r, g, b)`` or ``rgba(r, g, b, a)`` as four numbers (alpha 1 when absent)."""
    inner = css[css.index("(") + 1 : css.index(")")].replace("/", ",").split(",")
    values = [float(v) for v in inner if v.strip()]
    return (*values[:3], values[3] if len(values) > 3 else 1.0)  # type: ignore[return-value]


def luminance(rgb: Any) -> Any:
    """WCAG 2.1 relative luminance of sRGB colours with 0..255 channels in the last axis: a
    number for one colour, an array for an array of pixels (a screenshot)."""
    c = np.asarray(rgb, dtype=float)[..., :3] / 255  # (..., 3)
    linear = np.where(c <= 0.03928, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    return linear @ np.array([0.2126, 0.7152, 0.0722])  # (...)


def contrast(foreground: str, background: str) -> float:
    """WCAG contrast ratio of a (possibly translucent) text colour over an opaque background."""
    *fg, alpha = rgba(foreground)
    bg = rgba(background)[:3]
    seen = tuple(round(alpha * f + (1 - alpha) * b) for f, b in zip(fg, bg))  # as drawn
    light, dark = sorted((float(luminance(seen)), float(luminance(bg))), reverse=True)
    return (light + 0.05) / (dark + 0.05)
