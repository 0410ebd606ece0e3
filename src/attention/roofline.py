"""The roofline model (Williams, Waterman and Patterson, 2009) applied to measured kernel rows.

Notation (see CONTRIBUTING.md): b batch size, h heads, t tokens, d_h head width, s bytes of one
number; P the peak FLOP/s, β the memory bandwidth in bytes/s, I = F / IO the arithmetic intensity
of a kernel that does F FLOPs and moves IO bytes (chapter 7's equation (7.14); D is the backward
pass's row sum there).

A kernel can run at most at min(P, β · I) FLOP/s; it is *memory-bound* when I is below the ridge
point I* = P / β and *compute-bound* above it. F is the row's own FLOP count (the benchmark's
``flops``). IO is a **lower bound**: the bytes the kernel must move at least, whatever its cache
does,

- forward: Q, K, V read once and Z written once, 4 · b · h · t · d_h · s;
- forward+backward: also Q, K, V, Z and dZ read again and dQ, dK, dV written, 8 · b · h · t · d_h · s
  more (the log-sum-exp, b · h · t numbers, is left out);
- a path that materializes the (t, t) matrices (the explicit computation, SDPA's math backend)
  also writes each one once and reads it once: A forward, 2 · b · h · t² · s; A read again and
  dS, the gradient of the scaled scores (equation (7.11)), written and read backward,
  3 · b · h · t² · s more. The full square is counted, masked or not: these paths store it whole.

A real kernel moves more (K and V once per query block, spills, temporaries), so its true
intensity is lower and its true roof, if it is below the ridge point, lower too.
"""

import math
import sys
from collections.abc import Iterable, Mapping
from numbers import Integral, Real
from typing import TYPE_CHECKING, Any

import torch

from ._checks import check_number

if TYPE_CHECKING:
    from matplotlib.figure import Figure
else:  # matplotlib stays unimported until a plot is drawn; typing.get_type_hints still resolves
    Figure = Any

DTYPE_BYTES = {"float32": 4, "float64": 8, "bfloat16": 2, "float16": 2}
PASSES = ("forward", "forward+backward")  # what a row times
SCORE_MATRIX_BACKENDS = ("explicit", "sdpa: math")  # backends (as recorded) that store (t, t)


def _check_dict(name: str, value: object) -> None:
    """Require a dict (a parsed JSON object): a list or a string has no keys to read."""
    if not isinstance(value, Mapping):
        raise ValueError(f"{name} must be a dict, got {type(value).__name__}")


def _as_float(value: Real) -> float:
    """A real number as a float; an int past float's range as inf (Python's ``float`` raises)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _check_row(row: dict[str, Any]) -> None:
    _check_dict("row", row)
    if row.get("level") != "kernel":
        raise ValueError(f"row must be a kernel row (level 'kernel'), got level {row.get('level')!r}")
    if row.get("dtype") not in DTYPE_BYTES:
        raise ValueError(f"row dtype must be one of {sorted(DTYPE_BYTES)}, got {row.get('dtype')!r}")
    if row.get("pass") not in PASSES:
        raise ValueError(f"row pass must be one of {PASSES}, got {row.get('pass')!r}")
    for key in ("b", "h", "t", "d_h"):
        value = row.get(key)
        if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
            raise ValueError(f"row {key} must be a positive integer, got {value!r}")


def stores_scores(row: dict[str, Any]) -> bool:
    """Whether the kernel that ran (the row's ``backend``) materializes the (t, t) matrices.

    Args:
        row: a benchmark row (a dict with its ``backend``).

    Returns:
        True for the explicit computation and SDPA's math backend.

    Raises:
        ValueError: if row is not a dict.

    Examples:
        >>> stores_scores({"backend": "sdpa: math"}), stores_scores({"backend": "sdpa: flash"})
        (True, False)
    """
    _check_dict("row", row)
    return str(row.get("backend") or "").startswith(SCORE_MATRIX_BACKENDS)


def kernel_bytes(row: dict[str, Any]) -> int:
    """The bytes a kernel row must move at least (see the module docstring): a lower bound.

    Args:
        row: a kernel row: its ``level``, ``pass``, ``b``, ``h``, ``t``, ``d_h``, ``dtype`` and
            ``backend``.

    Returns:
        The bytes, an int.

    Raises:
        ValueError: if the row is not a dict or not a kernel row, its dtype or pass is unknown,
            or a size is not a positive integer (NumPy's are taken).

    Examples:
        >>> kernel_bytes({"level": "kernel", "pass": "forward", "b": 1, "h": 1, "t": 4, "d_h": 2, "dtype": "float32"})  # Q, K, V and Z: 4 · 4 · 2 numbers of 4 bytes
        128
    """
    _check_row(row)
    # Python ints: NumPy's would wrap past int64 in b · h · t · t
    b, h, t, d_h = (int(row[key]) for key in ("b", "h", "t", "d_h"))
    s = DTYPE_BYTES[row["dtype"]]
    backward = row["pass"] == "forward+backward"
    tensors = 4 + (8 if backward else 0)  # (b, h, t, d_h) tensors read or written once
    squares = (2 + (3 if backward else 0)) if stores_scores(row) else 0  # (t, t) matrix passes
    return (tensors * b * h * t * d_h + squares * b * h * t * t) * s


def roof(intensity: float, peak_flops: float, bandwidth: float) -> float:
    """Attainable FLOP/s at an arithmetic intensity: min(P, β · I).

    Args:
        intensity: I, FLOPs per byte moved.
        peak_flops: P, the peak FLOP/s.
        bandwidth: β, bytes/s.

    Returns:
        min(P, β · I) in FLOP/s.

    Raises:
        ValueError: if a value is not a finite positive real number.

    Examples:
        >>> roof(2.0, peak_flops=100.0, bandwidth=10.0), roof(20.0, peak_flops=100.0, bandwidth=10.0)
        (20.0, 100.0)
    """
    for name, value in (("intensity", intensity), ("peak_flops", peak_flops), ("bandwidth", bandwidth)):
        if isinstance(value, bool) or not isinstance(value, Real) or not 0 < _as_float(value) < math.inf:
            raise ValueError(f"{name} must be positive and finite (a real number > 0), got {value!r}")
    return min(peak_flops, bandwidth * intensity)


def machine_roof(doc: dict[str, Any], dtype: str) -> dict[str, Any] | None:
    """P (FLOP/s), β (bytes/s), the ridge point and their sources for one dtype of a results file.

    None when the file lacks either peak (an older file, or a device with no documented figure).

    Args:
        doc: a results file, parsed (its ``peaks``).
        dtype: the dtype's name as the rows record it, for example ``"float32"``.

    Returns:
        ``peak_flops``, ``bandwidth``, ``ridge`` (FLOP per byte), their sources and whether both
        were measured; or None.

    Raises:
        ValueError: if doc, its peaks or the dtype's and the bandwidth's entries are not dicts,
            dtype is not a str, a peak given is not a finite number > 0, or its entry has no
            ``source`` str (the results file's schema requires one).

    Examples:
        >>> doc = {"peaks": {"float32": {"tflops": 1.0, "source": "a"}, "bandwidth": {"bytes_per_s": 1e11, "source": "b"}}}
        >>> machine_roof(doc, "float32")["ridge"], machine_roof(doc, "float16")
        (10.0, None)
    """
    _check_dict("doc", doc)
    if not isinstance(dtype, str):
        raise ValueError(f"dtype must be a str such as 'float32', got {dtype!r}")
    peaks = doc.get("peaks") or {}
    _check_dict("doc['peaks']", peaks)
    compute, memory = peaks.get(dtype) or {}, peaks.get("bandwidth") or {}
    _check_dict(f"doc['peaks'][{dtype!r}]", compute)
    _check_dict("doc['peaks']['bandwidth']", memory)
    # missing or None (a device with no documented peak); a peak of 0 is given, and refused
    if compute.get("tflops") is None or memory.get("bytes_per_s") is None:
        return None
    flops = check_number(f"peaks[{dtype!r}]['tflops']", compute["tflops"], 0, False) * 1e12
    if flops == math.inf:  # finite in TFLOP/s, past float's range in FLOP/s
        raise ValueError(f"peaks[{dtype!r}]['tflops'] must be at most {sys.float_info.max / 1e12:g}, "
                         f"got {compute['tflops']!r}")
    bandwidth = check_number("peaks['bandwidth']['bytes_per_s']", memory["bytes_per_s"], 0, False)
    for key, entry in ((dtype, compute), ("bandwidth", memory)):  # the schema requires a source
        if not isinstance(entry.get("source"), str):
            got = repr(entry["source"]) if "source" in entry else "no 'source'"
            raise ValueError(f"peaks[{key!r}] must have a 'source' (a str), got {got}")
    return {"peak_flops": flops, "bandwidth": bandwidth, "ridge": flops / bandwidth,
            "flops_source": compute["source"], "bandwidth_source": memory["source"],
            "measured": bool(compute.get("measured")) and bool(memory.get("measured"))}


def roofline_points(
    doc: dict[str, Any], rows: Iterable[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """Every ok kernel row of a results file placed on its machine's roofline.

    Each point: the row's variant, pass, shape and dtype; ``flops``, ``bytes`` (lower bound),
    ``intensity``, ``achieved`` (FLOP/s), ``roof`` (FLOP/s), ``fraction_of_roof`` and ``bound``
    ("memory" or "compute"). Rows whose dtype has no peak are left out.

    Args:
        doc: a results file, parsed (its ``peaks`` and, unless ``rows`` is given, ``results``).
        rows: the rows to place instead of the file's.

    Returns:
        One dict per point, in the rows' order.

    Raises:
        ValueError: if doc is not a dict with a list of ``results`` (unless ``rows`` is given),
            a row is not a dict, a kernel row is malformed (see ``kernel_bytes``), or an ok one
            has no positive finite ``flops`` or ``median_s``, or the peaks are malformed (see
            ``machine_roof``).

    Examples:
        >>> row = {**{"level": "kernel", "pass": "forward", "b": 1, "h": 1, "t": 4, "d_h": 2, "dtype": "float32"}, "status": "ok", "variant": "v", "backend": "sdpa: flash",
        ...        "flops": 128.0, "median_s": 1e-6}
        >>> [point] = roofline_points({**{"peaks": {"float32": {"tflops": 1.0, "source": "a"}, "bandwidth": {"bytes_per_s": 1e11, "source": "b"}}}, "results": [row]})
        >>> point["intensity"], point["bound"]
        (1.0, 'memory')
    """
    _check_dict("doc", doc)
    if rows is None and not isinstance(doc.get("results"), list):
        got = type(doc["results"]).__name__ if "results" in doc else "no 'results'"
        raise ValueError(f"doc must hold a list of rows as 'results' (or pass rows), got {got}")
    points = []
    for row in doc["results"] if rows is None else rows:
        _check_dict("each row", row)
        if row.get("level") != "kernel" or row.get("status") != "ok":
            continue
        _check_row(row)  # its dtype too, before it is looked up
        machine = machine_roof(doc, row["dtype"])
        if machine is None:
            continue
        nbytes = kernel_bytes(row)
        for key in ("flops", "median_s"):  # measured: a count and a time, both above 0
            value = row.get(key)
            if isinstance(value, bool) or not isinstance(value, Real) or not 0 < _as_float(value) < math.inf:
                raise ValueError(f"an ok kernel row's {key} must be a positive finite number, got {value!r}")
        intensity = row["flops"] / nbytes
        attainable = roof(intensity, machine["peak_flops"], machine["bandwidth"])
        achieved = row["flops"] / row["median_s"]
        points.append({
            **{k: row.get(k) for k in ("variant", "pass", "b", "h", "t", "d_h", "dtype", "backend",
                                       "flops")},
            "bytes": nbytes, "intensity": intensity, "achieved": achieved, "roof": attainable,
            "fraction_of_roof": achieved / attainable,
            "bound": "memory" if intensity < machine["ridge"] else "compute",
        })
    return points


def plot_roofline(
    points: list[dict[str, Any]], machine: dict[str, Any], title: str,
    colours: dict[str, str] | None = None,
) -> "Figure":
    """A log-log roofline: the roof min(P, β I), and every point at (intensity, achieved FLOP/s).

    One colour per variant (``colours`` by name, else matplotlib's tab10 in order), filled
    markers forward, open markers forward+backward; FLOP/s in
    TFLOP/s on a machine whose peak reaches 10 TFLOP/s, else GFLOP/s. Drawn 5.4 inches wide with
    the legend below, so that its text stays legible on a phone (matplotlib is imported here,
    so ``import attention`` does not need it).

    Args:
        points: what ``roofline_points`` returns.
        machine: what ``machine_roof`` returns.
        title: the axes' title.
        colours: a colour per variant name.

    Returns:
        A matplotlib Figure.

    Examples:
        >>> machine = machine_roof({"peaks": {"float32": {"tflops": 1.0, "source": "a"}, "bandwidth": {"bytes_per_s": 1e11, "source": "b"}}}, "float32")
        >>> fig = plot_roofline([], machine, "no points")
        >>> fig.axes[0].get_xscale()
        'log'
    """
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    ink = plt.rcParams["text.color"]  # the roof in the colour of the text, whatever the style

    P, beta, ridge = machine["peak_flops"], machine["bandwidth"], machine["ridge"]
    unit, scale = ("TFLOP/s", 1e12) if P >= 1e13 else ("GFLOP/s", 1e9)
    intensities = [p["intensity"] for p in points] or [ridge]
    lo, hi = min(min(intensities), ridge) / 4, max(max(intensities), ridge) * 4
    xs = torch.logspace(torch.log10(torch.tensor(lo)), torch.log10(torch.tensor(hi)), 200)
    ys = torch.clamp(xs * beta, max=P) / scale
    fig, ax = plt.subplots(figsize=(5.4, 5.6), layout="constrained")
    ax.plot(xs.numpy(), ys.numpy(), color=ink, linewidth=1.6)
    ax.axvline(ridge, color="0.55", linestyle=":", linewidth=1)
    ax.annotate(f"ridge {ridge:.3g} FLOP/B", (ridge, P / scale), xytext=(4, -14), textcoords="offset points")
    names = list(dict.fromkeys(p["variant"] for p in points))
    cmap = plt.get_cmap("tab10")
    handles = [Line2D([], [], color=ink, linewidth=1.6, label="roof min(P, β I)")]
    for i, name in enumerate(names):
        color = (colours or {}).get(name, cmap(i % 10))
        for pass_name, fill in zip(PASSES, (True, False)):  # forward filled, with backward hollow
            mine = [p for p in points if p["variant"] == name and p["pass"] == pass_name]
            ax.plot([p["intensity"] for p in mine], [p["achieved"] / scale for p in mine], "o", markersize=5,
                    color=color, markerfacecolor=color if fill else "none", linestyle="none")
        handles.append(Line2D([], [], marker="o", color=color, linestyle="none", label=name))
    ax.set(xscale="log", yscale="log", xlabel="FLOP per byte (lower-bound bytes)", ylabel=unit)
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    fig.legend(handles=handles, loc="outside lower center", ncol=2, frameon=False,
               title="filled: forward, open: forward+backward", title_fontsize=10)
    return fig
