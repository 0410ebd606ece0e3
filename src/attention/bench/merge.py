"""``python -m attention.bench merge FILE... --output OUT``: several runs of one device as one file.

GPU time often comes in short slots, so one device's measurements arrive as several results
files (one per sweep slice, say). Merging them gives the appendix one document per device:

- every kind of row of every part (:data:`attention.bench.parts.PARTS`: sweep rows, goals, decode,
  masks and linear rows, peaks) is keyed by what it measures (sweep rows by level, variant,
  pass, dtype, b, t, h, d_h); a row that measured something (status "ok" or "failed") replaces
  one that did not ("skipped", "unsupported"); a key measured in two files is an error unless
  ``--prefer newest``, which keeps the newer run's row. A key no part knows is an error, never a
  silent drop;
- files from different devices or torch versions, or with settings that change what a row
  means (model width, heads, tokens per batch, TF32, CUDA graphs, torch's thread count), are
  refused with the difference named;
- the merged provenance keeps every source run's provenance (command, date, commit) and
  settings, in the order given, and each row says which run it came from (``run``: an index).
  A merged file is refused as a source: its rows' ``run`` indices point into its own sources,
  which a second merge would drop; merge the original files together instead.
"""

import argparse
import datetime
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .goals import speed_goals
from .parts import ROW_KINDS, SWEEP_KEY, unknown_keys
from .provenance import command_line
from .store import output_file, read_results, write_results

ROW_KEY = SWEEP_KEY
# What must agree for rows of two files to mean the same thing.
SAME_PROVENANCE = ("device_type", "device_name", "torch", "float32_matmul_precision", "tf32_matmul",
                   "torch_threads")  # a CPU time on 1 thread is not one on 2
# cuda_graphs: a graph's replay leaves host time out of a row's time, and methods.timing says which.
SAME_SETTINGS = ("d_model", "heads", "tokens", "batch", "cuda_graphs")
SETTING_DEFAULTS = {"cuda_graphs": False}  # what a file written before the setting existed ran with


class MergeError(ValueError):
    """Files that cannot be merged; the message names the files and what differs."""


def _check_compatible(sources: list[tuple[str, dict[str, Any]]]) -> None:
    (first, base), *rest = sources
    for name, doc in rest:
        for section, fields in (("provenance", SAME_PROVENANCE), ("settings", SAME_SETTINGS)):
            for field in fields:
                default = SETTING_DEFAULTS.get(field) if section == "settings" else None
                want, got = base[section].get(field, default), doc[section].get(field, default)
                if want != got:
                    raise MergeError(
                        f"cannot merge {first} and {name}: {section}.{field} differs "
                        f"({want!r} vs {got!r}); merge only runs of one device, torch version and "
                        "row meaning"
                    )


def _merge_keyed(
    entries: list[tuple[int, dict[str, Any]]], key: tuple[str, ...], what: str,
    names: list[str], dates: list[str], prefer_newest: bool,
    measured: Callable[[dict[str, Any]], bool] = lambda entry: True,
) -> list[dict[str, Any]]:
    """Entries of all runs, one per key: a measured one beats an unmeasured one; two measured
    ones are an error unless ``prefer_newest``. Keeps the order in which keys first appear."""
    chosen: dict[tuple[Any, ...], tuple[int, dict[str, Any]]] = {}
    for run, entry in entries:
        k = tuple(entry.get(field) for field in key)
        if k not in chosen:
            chosen[k] = (run, entry)
            continue
        old_run, old = chosen[k]
        if measured(old) and measured(entry):
            if not prefer_newest:
                where = ", ".join(f"{f}={v}" for f, v in zip(key, k))
                raise MergeError(
                    f"{what} ({where}) is measured in both {names[old_run]} and {names[run]}; "
                    "pass --prefer newest to keep the newer run's"
                )
            if dates[run] >= dates[old_run]:
                chosen[k] = (run, entry)
        elif measured(entry) or (not measured(old) and dates[run] >= dates[old_run]):
            chosen[k] = (run, entry)
    return [entry | {"run": run} for run, entry in chosen.values()]


def _union(values: list[list[Any] | None]) -> list[Any] | None:
    lists = [v for v in values if v is not None]
    if len(lists) < len(values):
        return None
    return list(dict.fromkeys(x for v in lists for x in v))


def merge_results(
    sources: list[tuple[str, dict[str, Any]]], prefer_newest: bool = False, command: str = ""
) -> dict[str, Any]:
    """One results document from ``sources`` (name, validated document) of one device."""
    if not sources:
        raise MergeError("merge needs at least one results file, got none")
    _check_compatible(sources)
    for name, doc in sources:
        if "sources" in doc["provenance"]:
            raise MergeError(f"{name} is a merged file (provenance.sources lists {len(doc['provenance']['sources'])} "
                             "runs): merging it again would drop its source runs and which one each row came "
                             "from; merge its source files with the others instead")
        unknown = unknown_keys(doc)
        if unknown:
            raise MergeError(f"{name} holds {unknown}, which no benchmark part knows: merging would drop "
                             "them; add the part to attention.bench.parts.PARTS")
    names = [name for name, _ in sources]
    docs = [doc for _, doc in sources]
    dates = [doc["provenance"]["date_utc"] for doc in docs]
    merged: dict[str, Any] = {"goals": {"speed": []}}
    for kind in ROW_KINDS:
        rows = _merge_keyed([(i, r) for i, d in enumerate(docs) for r in kind.read(d)], kind.merge_key, kind.what,
                            names, dates, prefer_newest, kind.measured)
        if kind.shape == "one" and len(rows) > 1:  # write() would keep the first and drop the rest
            runs = " and ".join(names[row["run"]] for row in rows)
            raise MergeError(f"{kind.what}s of different problems in {runs}: a results file holds one; "
                             "merge these runs into separate files")
        kind.write(merged, rows)
    first = docs[0]
    settings = dict(first["settings"])
    for field in ("levels", "seq_lens", "head_dims", "dtypes", "passes", "variants"):
        settings[field] = _union([d["settings"].get(field) for d in docs])
    if settings["seq_lens"] is not None:
        settings["seq_lens"] = sorted(settings["seq_lens"])
    settings["compile"] = any(d["settings"].get("compile") for d in docs)
    provenance = dict(first["provenance"])
    provenance |= {
        "date_utc": min(dates),
        "command": command,
        "load_average_end": docs[-1]["provenance"]["load_average_end"],
        "merged_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "sources": [
            {"file": name, "date_utc": d["provenance"]["date_utc"], "command": d["provenance"]["command"],
             "git": d["provenance"]["git"], "torch": d["provenance"]["torch"],
             "load_average_start": d["provenance"]["load_average_start"],
             "load_average_end": d["provenance"]["load_average_end"], "settings": d["settings"],
             "complete": d.get("complete", True)} | ({"stopped": d["stopped"]} if "stopped" in d else {})
            for name, d in sources
        ],
    }
    methods: dict[str, Any] = {}
    for d in docs:  # a part's method comes with the first run that measured it
        methods |= {k: v for k, v in d["methods"].items() if k not in methods}
    doc = {
        "schema": first["schema"], "provenance": provenance, "settings": settings, "methods": methods,
        **merged, "complete": all(d.get("complete", True) for d in docs),
    }
    rows = doc["results"]
    speed_t = {g["t"] for d in docs for g in d["goals"]["speed"]}
    for t in sorted(speed_t):
        doc["goals"]["speed"] += speed_goals(rows, t, settings["d_model"], settings["heads"])
    return doc


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m attention.bench merge``."""
    ap = argparse.ArgumentParser(
        prog="python -m attention.bench merge",
        description="Combine results files of one device (one torch version, one model width and "
        "tokens per batch) into one; the merged file keeps every source run's provenance (a merged "
        "file is refused as a source: merge the original files instead).",
    )
    ap.add_argument("files", nargs="+", type=Path, metavar="FILE", help="results files, in order")
    ap.add_argument("--output", "-o", type=output_file, required=True, help="the merged results file to write")
    ap.add_argument("--prefer", choices=("newest",),
                    help="when two files measured the same row (or goal, decode row, peak), keep the "
                    "newer run's instead of refusing")
    return ap


def main(argv: list[str]) -> dict[str, Any]:
    """Merge the files named in ``argv``, write the output, and return the merged document."""
    ap = build_parser()
    args = ap.parse_args(argv)
    try:
        sources = [(path.name, read_results(path)) for path in args.files]
    except (OSError, ValueError) as error:
        ap.error(str(error))
    try:
        doc = merge_results(sources, args.prefer == "newest", command_line(["merge", *argv]))
    except MergeError as error:
        ap.error(str(error))
    write_results(doc, args.output)
    ok = sum(row["status"] == "ok" for row in doc["results"])
    print(f"wrote {args.output}: {len(sources)} runs, {ok} of {len(doc['results'])} rows ok", file=sys.stderr)
    return doc
