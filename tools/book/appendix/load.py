"""The benchmark's results files, loaded and validated, and what the appendix says about a run.

A run is one results file of ``docs/appendix/results/`` (written by ``python -m attention.bench``
or merged from several runs by ``python -m attention.bench merge``). Every file is validated when
it is loaded; a file that does not follow the schema stops the build with its name and the field.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from attention.bench.rows import DecodeRow, Row
from attention.bench.store import read_results
from attention.bench.sweep import PASSES as SWEEP_PASSES

from ..constants import DOCS, REPO

RESULTS = DOCS / "appendix" / "results"
PASSES = tuple(SWEEP_PASSES)  # "forward", "forward+backward"
DTYPE_ORDER = ("bfloat16", "float16", "float32")


def pinned_version(distribution: str) -> str | None:
    """The version ``requirements.txt`` pins a distribution to (``torch`` -> ``"2.13.0"``)."""
    text = (REPO / "requirements.txt").read_text(encoding="utf-8")
    match = re.search(rf"^{re.escape(distribution)}==([^\s;#]+)", text, flags=re.MULTILINE)
    return match.group(1) if match else None


@dataclass(frozen=True)
class Group:
    """Rows that one table or plot compares: one level, head count, head width and dtype."""

    level: str
    h: int
    d_h: int
    dtype: str
    rows: tuple[Row, ...]

    @property
    def slug(self) -> str:
        """A name piece for files and anchors: ``kernel-dh64-bfloat16``."""
        return f"{self.level}-dh{self.d_h}-{self.dtype}"

    def title(self, math: bool = True) -> str:
        """``Attention kernels, $d_h = 64$, $h = 12$`` (plain text for alt text with ``math=False``)."""
        what = "Whole layers" if self.level == "layer" else "Attention kernels"
        if math:
            return f"{what}, $d_h = {self.d_h}$, $h = {self.h}$"
        return f"{what}, head width {self.d_h}, {self.h} heads"

    def passes(self) -> list[tuple[str, list[Row]]]:
        """(pass, its rows) for each pass measured, forward first."""
        return [(p, [r for r in self.rows if r.pass_name == p]) for p in PASSES
                if any(r.pass_name == p for r in self.rows)]


@dataclass(frozen=True)
class Run:
    """One results file: its name (the file's stem) and its validated contents."""

    stem: str
    doc: dict

    @property
    def provenance(self) -> dict:
        return self.doc["provenance"]

    @cached_property
    def rows(self) -> list[Row]:
        """The measurements, typed (validated when the file was loaded)."""
        return [Row.from_json(r, f"{self.stem}.json: results[{i}]") for i, r in enumerate(self.doc["results"])]

    @cached_property
    def decode(self) -> list[DecodeRow]:
        """The decoding measurements, typed."""
        return [DecodeRow.from_json(r, f"{self.stem}.json: decode[{i}]") for i, r in enumerate(self.doc.get("decode", []))]

    def json_rows(self, dtype: str) -> list[dict]:
        """The rows of one dtype as stored, for the package's roofline functions."""
        return [r for r in self.doc["results"] if r["dtype"] == dtype]

    @property
    def gpu(self) -> bool:
        return self.provenance["device_type"] == "cuda"

    @property
    def device(self) -> str:
        return self.provenance["device_name"]

    @property
    def date(self) -> str:
        return self.provenance["date_utc"][:10]

    @property
    def sources(self) -> list[dict]:
        """The runs this file was merged from (itself, for a file written by one run)."""
        p = self.provenance
        own = {"file": f"{self.stem}.json", "date_utc": p["date_utc"], "command": p["command"],
               "git": p["git"], "torch": p["torch"], "settings": self.doc["settings"],
               "complete": self.doc.get("complete", True)}
        return p.get("sources") or [own]

    @cached_property
    def dtypes(self) -> list[str]:
        """The dtypes of the rows, in the order bfloat16, float16, float32."""
        present = {r.dtype for r in self.rows}
        return [d for d in DTYPE_ORDER if d in present] + sorted(present - set(DTYPE_ORDER))

    def groups(self, level: str | None = None, dtype: str | None = None) -> list[Group]:
        """The run's groups, layers first, then by head width, in dtype order."""
        found: dict[tuple, list[Row]] = defaultdict(list)
        for r in self.rows:
            if (level is None or r.level == level) and (dtype is None or r.dtype == dtype):
                found[r.level, r.h, r.d_h, r.dtype].append(r)
        order = lambda k: (k[0] != "layer", self.dtypes.index(k[3]), k[2])  # noqa: E731
        return [Group(*key, rows=tuple(rows)) for key, rows in sorted(found.items(), key=lambda i: order(i[0]))]

    def row(self, variant: str, pass_name: str = "forward", **where: object) -> Row | None:
        """The ok row of ``variant`` matching ``where`` (e.g. ``t=16384, d_h=64``), if any."""
        for r in self.rows:
            if (r.variant == variant and r.pass_name == pass_name and r.status == "ok"
                    and all(getattr(r, k) == v for k, v in where.items())):
                return r
        return None


NOT_RECORDED = "not recorded"
PROVENANCE_FIELDS = ("date", "commit", "torch", "triton", "device", "command")


def commit_words(git: dict | None) -> str:
    """The commit a run records, and whether its tree was checked: ``409322d``, ``409322d with
    local changes``, or ``f9d0804, unverified tree: ...`` where nothing compared the tree that
    ran with the commit (``dirty`` is None: a commit named by an environment variable on a copy
    of the tree, or a git status that could not be read)."""
    if not git or not git.get("commit"):
        return NOT_RECORDED
    text = f"`{git['commit'][:7]}`"
    if git.get("dirty") is None:
        why = f"named by {git['source']}, not checked" if git.get("source") else "git status could not be read"
        return f"{text}, unverified tree: {why}"
    if git["dirty"]:
        return f"{text} with local changes"
    return f"{text} ({git['source']})" if git.get("source") else text


# torch's version, Triton's and the GPU's name, the first line of an older measure.sh's log
_VERSIONS_LINE = re.compile(r"(\d+\.\d+\.\d+\S*) (\d+\.\d+\.\d+\S*) (\S.*)")


def file_provenance(path: Path) -> dict[str, str]:
    """What a results file records about where it came from, one entry per
    :data:`PROVENANCE_FIELDS`, ``"not recorded"`` for what it does not say.

    A benchmark file carries a ``provenance`` block; a check's log may open with a line of JSON
    naming torch, Triton and the GPU, or (an older tools/gpu/measure.sh's) with those three as
    plain words, ``2.11.0+cu130 3.6.0 NVIDIA H200``; any other file records nothing.
    """
    found: dict[str, str | None] = dict.fromkeys(PROVENANCE_FIELDS)
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        p = json.loads(text).get("provenance")
        if isinstance(p, dict):
            found |= {"date": p.get("date_utc", "")[:16].replace("T", " ") or None,
                      "commit": commit_words(p.get("git")), "torch": p.get("torch"),
                      "triton": p.get("triton"), "device": p.get("device_name"),
                      "command": p.get("command") and f"`{p['command']}`"}
            sources = p.get("sources") or []
            if sources:  # a merged file: its rows come from the runs it lists, each with its commit
                dates = sorted(s["date_utc"][:16].replace("T", " ") for s in sources)
                found["date"] = f"{dates[0]} … {dates[-1]} ({len(sources)} runs, merged)"
                found["commit"] = "; ".join(dict.fromkeys(commit_words(s.get("git")) for s in sources))
    else:
        first = text.splitlines()[0] if text else ""
        try:
            head = json.loads(first) if first else {}
        except json.JSONDecodeError:
            words = _VERSIONS_LINE.fullmatch(first)
            head = {"torch": words[1], "triton": words[2], "gpu": words[3]} if words else {}
        if isinstance(head, dict):
            found |= {"torch": head.get("torch"), "triton": head.get("triton"), "device": head.get("gpu")}
    return {k: (v if v and v != NOT_RECORDED else NOT_RECORDED) for k, v in found.items()}


def results_files(results_dir: Path = RESULTS) -> list[Path]:
    """Every file the appendix's results folder keeps: the runs' files and those they merge."""
    return sorted(p for p in results_dir.rglob("*") if p.is_file() and p.suffix in (".json", ".log"))


def load_runs(results_dir: Path = RESULTS) -> dict[str, Run]:
    """Every results file in ``results_dir`` by stem, validated (ValueError names file and field)."""
    return {path.stem: Run(path.stem, read_results(path)) for path in sorted(results_dir.glob("*.json"))}


def load_source_run(stem: str, results_dir: Path = RESULTS) -> Run:
    """One run kept under ``runs/`` (``runs/h200-2026-11-30/triton-options``), validated: a file
    no page shows whole, whose numbers the prose quotes."""
    path = results_dir / f"{stem}.json"
    if not stem.startswith("runs/") or not path.is_file():
        raise ValueError(f"no results file {stem}.json under {results_dir.name}/runs/")
    return Run(stem, read_results(path))
