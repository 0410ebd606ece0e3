"""Numbers quoted in the appendix's prose, read from a run at build time, never typed.

An appendix page writes a number as a query in double braces, answered from the page's own run
(the run its ``<!-- timings:run STEM -->`` marker names) or, with a prefix, from another, or from
a file kept under ``runs/``::

    cuDNN reaches {{ tflops(sdpa[cudnn], forward, t=16384, d_h=64) }} TFLOP/s,
    the CPU {{ cpu: decode_speedup(gpt2-small-untrained) }} with the cache,
    {{ runs/h200-2026-11-30/triton-options: speedup(triton[descriptors], triton, forward) }}.

Arguments are separated by commas: words are strings, ``key=value`` selects rows (integers where
the value is one). An unknown query, or one that matches no row, stops the build with the page,
the query and what is available.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

from attention.bench.rows import DecodeRow, Row
from attention.flash import default_block_sizes

from .format import digits3, rate, ratio, ratio_range, readable_bytes
from .format import ms as _ms
from .load import Run, load_source_run
from .page import settings_words
from .tables import kernel_that_ran

QUERY = re.compile(r"\{\{\s*(?:(?P<run>[a-z0-9/-]+)\s*:\s*)?(?P<name>[a-z_]+)\s*(?:\((?P<args>[^)]*)\))?\s*\}\}")
QUERIES: dict[str, Callable[..., str]] = {}


class FactError(ValueError):
    """A query that cannot be answered; the message says why."""


def query(fn: Callable[..., str]) -> Callable[..., str]:
    """Register ``fn(run, *args, **where)`` as a query of its own name."""
    QUERIES[fn.__name__] = fn
    return fn


def _rows(run: Run, variant: str, pass_name: str, where: dict) -> list[Row]:
    unknown = sorted(set(where) - {f.name for f in dataclasses.fields(Row)})
    if unknown:
        raise FactError(f"rows have no field {unknown}: select by dtype, b, t, h, d_h, level, ...")
    rows = [r for r in run.rows if r.variant == variant and r.pass_name == pass_name and r.status == "ok"
            and all(getattr(r, k) == v for k, v in where.items())]
    if not rows:
        raise FactError(f"no ok row of {variant}, {pass_name}, {where} in {run.stem}")
    return rows


def _one(run: Run, variant: str, pass_name: str, where: dict) -> Row:
    rows = _rows(run, variant, pass_name, where)
    if len(rows) > 1:
        raise FactError(f"{len(rows)} rows of {variant}, {pass_name}, {where} in {run.stem}: say which")
    return rows[0]


def _pairs(run: Run, variant: str, baseline: str, pass_name: str, where: dict) -> list[tuple[Row, Row]]:
    """(variant row, baseline row) at every shape both measured."""
    key = lambda r: (r.dtype, r.b, r.t, r.h, r.d_h)  # noqa: E731
    base = {key(r): r for r in _rows(run, baseline, pass_name, where)}
    pairs = [(r, base[key(r)]) for r in _rows(run, variant, pass_name, where) if key(r) in base]
    if not pairs:
        raise FactError(f"{variant} and {baseline} share no shape ({pass_name}, {where}) in {run.stem}")
    return pairs


@query
def tflops(run: Run, variant: str, pass_name: str, **where) -> str:
    """Achieved TFLOP/s of one row, three significant digits."""
    return f"{_one(run, variant, pass_name, where).tflops:.3g}"


@query
def pct_of_peak(run: Run, variant: str, pass_name: str, **where) -> str:
    """Percent of the device's peak of one row, no decimals."""
    return f"{_one(run, variant, pass_name, where).pct_of_peak:.0f}"


@query
def ms(run: Run, variant: str, pass_name: str, **where) -> str:
    """Median milliseconds per call of one row."""
    return _ms(_one(run, variant, pass_name, where).median_s)


@query
def tiles(run: Run, variant: str, pass_name: str, kernel: str, **where) -> str:
    """The tiles, warps and stages the autotuner chose for one of our kernels (``forward``,
    ``dkdv``, ``dq``) over the rows that recorded them: ``64 × 64, 4 warps, 3 stages``, each
    choice once, joined by "or"."""
    chosen = dict.fromkeys(tuple(r.kernel_config[kernel]) for r in _rows(run, variant, pass_name, where)
                           if r.kernel_config and kernel in r.kernel_config)
    if not chosen:
        raise FactError(f"no row of {variant}, {pass_name}, {where} in {run.stem} records {kernel!r} tiles")
    return " or ".join(f"{m} × {n}, {w} warps, {s} stages" for m, n, w, s in sorted(chosen))


@query
def backend(run: Run, variant: str, pass_name: str, **where) -> str:
    """The kernel that ran for one row: the profiler's name (``sdpa: cuDNN``), or the variant's
    own, marked "(declared)"."""
    return kernel_that_ran(_one(run, variant, pass_name, where))


@query
def launches(run: Run, variant: str, pass_name: str, **where) -> str:
    """GPU kernels one call launched (the profiler's count), with thousands separators."""
    count = _one(run, variant, pass_name, where).gpu_kernels
    if count is None:
        raise FactError(f"{run.stem} did not count GPU kernel launches")
    return f"{count:,}"


@query
def per_launch_us(run: Run, variant: str, pass_name: str, **where) -> str:
    """Microseconds of one call per GPU kernel it launched: median time ÷ launches."""
    row = _one(run, variant, pass_name, where)
    if not row.gpu_kernels:
        raise FactError(f"{run.stem} did not count GPU kernel launches")
    return f"{row.median_s / row.gpu_kernels * 1e6:.2g}"


def _tile_bytes(row: Row) -> int:
    """Bytes of one tile of ``flash_attention``'s scores, every head: b · h · B_q · B_k float32
    numbers (half inputs accumulate in float32), its tiles as the row records them. Rows that
    record none, from runs before the benchmark recorded them, ran the tiles of
    :func:`~attention.flash.default_block_sizes`, whose rule is older than every stored run."""
    block_q, block_k = (row.kernel_config or {}).get("tiles") or default_block_sizes(row.t, row.t)
    return row.b * row.h * block_q * block_k * 4


@query
def tile_mib(run: Run, variant: str, pass_name: str, **where) -> str:
    """MiB of one tile of ``flash_attention``'s scores, every head (the buffer it writes every
    tile into), two significant digits."""
    return f"{_tile_bytes(_one(run, variant, pass_name, where)) / 2**20:.2g}"


@query
def tile_transfer_us(run: Run, variant: str, pass_name: str, **where) -> str:
    """Microseconds to write and read back one tile of ``flash_attention``'s scores at the
    datasheet's memory bandwidth: the bytes of :func:`_tile_bytes`, twice."""
    row = _one(run, variant, pass_name, where)
    bandwidth = (run.doc["peaks"].get("bandwidth") or {}).get("bytes_per_s")
    if not bandwidth:
        raise FactError(f"{run.stem} has no datasheet bandwidth")
    return f"{2 * _tile_bytes(row) / bandwidth * 1e6:.2g}"


@query
def last_level_cache(run: Run) -> str:
    """The GPU's L2 cache as the run recorded it with its measured bandwidth (the size the driver
    reports, torch's ``L2_cache_size``), in binary units: ``60 MiB``."""
    stream = (run.doc["peaks"].get("bandwidth_measured") or {}).get("stream") or {}
    size = stream.get("last_level_cache_bytes")
    if not run.gpu or not size:
        raise FactError(f"{run.stem} records no GPU L2 cache size")
    return readable_bytes(size)


@query
def timing(run: Run, variant: str | None = None) -> str:
    """How the rows (of ``variant``, or all) were timed, from the settings of the runs that gave
    them: ``the `quick` preset: up to 10 timed calls per point (...)``."""
    sources = run.sources
    used = {r.run or 0 for r in run.rows if variant is None or r.variant == variant}
    if not used:
        raise FactError(f"no rows of {variant} in {run.stem}")
    return "; ".join(dict.fromkeys(settings_words(sources[i]["settings"], run.gpu) for i in sorted(used)))


@query
def speedup(run: Run, variant: str, baseline: str, pass_name: str, **where) -> str:
    """How many times faster ``variant`` is than ``baseline`` (baseline time ÷ variant time), as
    a range over every shape both measured: ``1.04–1.44×``."""
    return ratio_range([b.median_s / v.median_s for v, b in _pairs(run, variant, baseline, pass_name, where)])


@query
def goal(run: Run, variant: str, pass_name: str) -> str:
    """A measured ratio goal's ratio (``variant`` time ÷ its baseline's)."""
    for g in run.doc["goals"].get("ratios", []):
        if g["variant"] == variant and g["pass"] == pass_name and "ratio" in g:
            return ratio(g["ratio"])
    raise FactError(f"no measured goal of {variant}, {pass_name} in {run.stem}")


def _decode(run: Run, model: str, use_cache: bool) -> DecodeRow:
    for row in run.decode:
        if row.model == model and row.use_cache == use_cache:
            return row
    raise FactError(f"no decode row of {model} (cache {use_cache}) in {run.stem}")


@query
def tokens_per_s(run: Run, model: str, cache: str) -> str:
    """Decoding speed of one model, ``cache`` "on" or "off"."""
    return digits3(_decode(run, model, cache == 'on').tokens_per_s)


@query
def decode_speedup(run: Run, model: str) -> str:
    """How many times faster decoding is with the KV cache than without."""
    return ratio(_decode(run, model, True).tokens_per_s / _decode(run, model, False).tokens_per_s)


@query
def peak(run: Run, name: str) -> str:
    """A peak of the run: ``bfloat16`` (datasheet), ``bfloat16_measured``, ``bandwidth``, ..."""
    entry = run.doc["peaks"].get(name)
    if entry is None:
        raise FactError(f"{run.stem} has no peak {name!r}; it has {sorted(run.doc['peaks'])}")
    if entry.get("tflops"):  # a datasheet's figure as printed there (989.5), a measured one to 3 digits
        return f"{entry['tflops']:g} TFLOP/s" if not entry.get("measured") else rate(entry["tflops"] * 1e12, "FLOP/s")
    return rate(entry["bytes_per_s"], "B/s")


@query
def provenance(run: Run, field: str) -> str:
    """A field of the run's provenance (``driver``, ``torch``, ``triton``, ``cuda``, ...)."""
    if field not in run.provenance:
        raise FactError(f"{run.stem}'s provenance has no {field!r}")
    return str(run.provenance[field])


def _argument(text: str) -> object:
    return int(text) if re.fullmatch(r"-?\d+", text) else text


def answer(match: re.Match[str], runs: dict[str, Run], default: str | None,
           kept: dict[str, Run] | None = None) -> str:
    """The answer to one query (a match of :data:`QUERY`); ``kept`` holds the files under
    ``runs/`` already loaded for this page."""
    stem = match["run"] or default
    if stem and stem.startswith("runs/"):  # one run of a merged file, or one kept beside it
        kept = {} if kept is None else kept
        if stem not in kept:
            try:
                kept[stem] = load_source_run(stem)
            except ValueError as error:
                raise FactError(f"{match.group(0)!r}: {error}") from None
        runs = {stem: kept[stem]}
    if stem not in runs:
        raise FactError(f"no results file {stem}.json for {match.group(0)!r}; there are {sorted(runs)}")
    fn = QUERIES.get(match["name"])
    if fn is None:
        raise FactError(f"unknown query {match['name']!r} in {match.group(0)!r}; known: {sorted(QUERIES)}")
    args, where = [], {}
    for part in filter(None, (p.strip() for p in (match["args"] or "").split(","))):
        key, eq, value = part.partition("=")
        if eq:
            where[key.strip()] = _argument(value.strip())
        else:
            args.append(part)
    try:
        return fn(runs[stem], *args, **where)
    except TypeError as error:
        raise FactError(f"{match.group(0)!r}: {error}") from None


def fill(markdown: str, runs: dict[str, Run], default: str | None) -> str:
    """``markdown`` with every ``{{ query }}`` replaced by its answer; a file under ``runs/`` is
    loaded once for the page, however many queries read it."""
    kept: dict[str, Run] = {}
    return QUERY.sub(lambda m: answer(m, runs, default, kept), markdown)
