"""The parts of a benchmark run, each described once: what the command line, the schema, the
merge and the appendix loop over.

A :class:`Part` is what ``--parts NAME`` measures: its run function, the kinds of row it writes
into a results file (:class:`RowKind`: where they live, the class that validates one, and the
fields that say what a row measured, for ``merge``), and the appendix function that renders it
(named, not imported: the package never imports the book's tooling). A new part is one module
(its rows and its run function) and one entry in :data:`PARTS`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from .decode import MODELS, run_decode
from .delta import METHOD as DELTA_METHOD
from .delta import run_delta
from .distributed import METHOD as DISTRIBUTED_METHOD
from .distributed import run_distributed
from .goals import memory_goal, ratio_goals
from .linear import METHOD as LINEAR_METHOD
from .linear import run_linear
from .masks import METHOD as MASKS_METHOD
from .masks import run_masks
from .peaks import GPU_MATMUL_SIZES, GPU_STREAM_BYTES, MATMUL_SIZES, measure_gpu_peaks, measure_peaks
from .presets import Preset
from .rows import DecodeRow, DistributedRow, LinearRow, MaskRow, Row, SparseRow
from .sparse import METHOD as SPARSE_METHOD
from .sparse import run_sparse
from .sweep import Settings, run_sweep

# Keys of a results file that describe the run rather than hold rows.
RUN_KEYS = ("schema", "provenance", "settings", "methods", "complete", "stopped")


def _always(entry: dict[str, Any]) -> bool:
    return True


def _has_status(entry: dict[str, Any]) -> bool:
    return entry.get("status") in ("ok", "failed")


def _goal_measured(entry: dict[str, Any]) -> bool:
    return entry.get("status") != "not measured"


def _peak_measured(entry: dict[str, Any]) -> bool:
    return bool(entry.get("measured"))


class RowClass(Protocol):
    """A class of rows (:class:`~attention.bench.rows.Row`, ...): ``from_json`` builds one row
    from its JSON object and checks its fields."""

    def from_json(self, data: object, where: str = ...) -> object: ...


@dataclass(frozen=True)
class RowKind:
    """One kind of row in a results file.

    ``key`` is where the rows live (``goals.ratios``: key ``ratios`` of ``goals``), stored as a
    list, as ``one`` object or null, or ``named``: an object of entries by name. ``row`` is the
    class whose ``from_json`` validates one row (None: :mod:`~attention.bench.schema` checks
    them). Two rows with equal ``merge_key`` fields measured the same thing; ``measured`` says
    whether a row holds a measurement (one that does beats one that does not).
    """

    key: str
    what: str  # a row's name in messages: "decode row"
    merge_key: tuple[str, ...]
    row: RowClass | None = None
    shape: Literal["list", "one", "named"] = "list"
    measured: Callable[[dict[str, Any]], bool] = _always
    label: str | None = None  # how the appendix's list of runs counts them; None: not counted

    def read(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        """The rows of this kind in ``doc`` (a ``named`` entry carries its name as ``name``).

        Raises:
            ValueError: if the rows are not held as this kind holds them (a list, an object).
        """
        *parents, last = self.key.split(".")
        holder = doc
        for parent in parents:
            holder = holder.get(parent) or {}
        value = holder.get(last)
        if not value:
            return []
        if self.shape == "one":
            return [value]
        expected = "an object of" if self.shape == "named" else "a list of"
        if not isinstance(value, dict if self.shape == "named" else list):
            raise ValueError(f"{self.key}: expected {expected} {self.what}s, got {type(value).__name__}")
        if isinstance(value, dict):
            return [{"name": name, **entry} for name, entry in value.items()]
        return list(value)

    def write(self, doc: dict[str, Any], rows: list[dict[str, Any]]) -> None:
        """Store ``rows`` in ``doc`` as :meth:`read` finds them (an empty list is left out)."""
        *parents, last = self.key.split(".")
        holder = doc
        for parent in parents:
            holder = holder.setdefault(parent, {})
        if self.shape == "one":
            holder[last] = rows[0] if rows else None
        elif self.shape == "named":
            holder[last] = {r["name"]: {k: v for k, v in r.items() if k not in ("name", "run")} for r in rows}
        elif rows or last == "results":
            holder[last] = rows


@dataclass
class Context:
    """What a part's run function gets: the parsed options and settings, and the document it
    adds its rows to (``save()`` writes it)."""

    args: argparse.Namespace
    settings: Settings
    command: str
    doc: dict[str, Any]
    save: Callable[[], None]
    deadline: float | None = None
    preset: Preset | None = None
    measured_peaks: dict[str, Any] = field(default_factory=dict)

    def say(self, message: str) -> None:
        """A line of progress on stderr."""
        print(message, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Part:
    """One part of a run: ``--parts NAME`` runs ``run(context)``, which adds rows of ``kinds``;
    the appendix renders it with ``renderer`` (``module:function`` of the book's tooling, called
    with the run), on a page marker ``<!-- timings:NAME STEM -->``.

    ``default``: run when --parts is not given. ``preset``: run under --preset (whose order puts
    the short parts first, so that its time budget falls on the sweep).
    """

    name: str
    summary: str
    kinds: tuple[RowKind, ...]
    run: Callable[[Context], Any]
    renderer: str
    default: bool = True
    preset: bool = True


def _run_peaks(ctx: Context) -> None:
    args, device = ctx.args, ctx.settings.device
    if device.type == "cuda":
        peaks = measure_gpu_peaks(device, tuple(args.matmul_sizes or GPU_MATMUL_SIZES),
                                  args.stream_bytes or GPU_STREAM_BYTES)
        mm, bw = peaks["bfloat16_measured"], peaks["bandwidth_measured"]
        ctx.say(f"peaks: {mm['tflops']:.0f} TFLOP/s bfloat16 matmul, {bw['bytes_per_s'] / 1e9:.0f} GB/s copy")
    else:
        peaks = measure_peaks(device, tuple(args.matmul_sizes or MATMUL_SIZES), args.stream_bytes,
                              min_time=args.min_time)
        ctx.say(f"peaks: {peaks['float32']['tflops'] * 1e3:.1f} GFLOP/s float32 matmul, "
                f"{peaks['bandwidth']['bytes_per_s'] / 1e9:.1f} GB/s")
    ctx.measured_peaks = peaks
    # Measured first, then what the document already had (a GPU's datasheet bandwidth).
    ctx.doc["peaks"] = peaks | {k: v for k, v in ctx.doc["peaks"].items() if k not in peaks}


def _run_goals(ctx: Context) -> None:
    args, settings, goals = ctx.args, ctx.settings, ctx.doc["goals"]
    if args.memory_goal:
        t, b, h, d_h = args.memory_goal_shape
        goals["memory"] = memory_goal(settings.device, t, b, h, d_h, settings.seed)
    goals["ratios"] = ratio_goals(settings, tuple(args.flash_goal_shape), tuple(args.fused_goal_shape))
    for g in goals["ratios"]:
        ratio = f"{g['ratio']:.2f}x" if "ratio" in g else g["reason"]
        ctx.say(f"goal {g['name']}, {g['pass']}: {ratio} (target <= {g['target']}x): {g['status']}")


def _run_decode(ctx: Context) -> None:
    args, preset, settings = ctx.args, ctx.preset, ctx.settings
    repeats = args.decode_repeats or (preset.decode_repeats if preset else 3)
    max_time = args.decode_max_time or (preset.decode_max_time if preset else 60.0)
    models = {name: MODELS[name] for name in args.decode_models}
    ctx.doc["decode"] = run_decode(models, args.decode_prompt, args.decode_new_tokens, repeats, settings.seed,
                                   settings.device, max_time)
    for row in ctx.doc["decode"]:
        ctx.say(f"decode {row['model']}, cache {'on' if row['use_cache'] else 'off'}: "
                f"{row['tokens_per_s']:.1f} tokens/s")


def _run_sweep(ctx: Context) -> None:
    run_sweep(ctx.settings, ctx.command, ctx.measured_peaks, doc=ctx.doc, save=ctx.save, deadline=ctx.deadline)


def part_method(method: str, settings: Settings) -> str:
    """``method`` of a part timed with :func:`~attention.bench.timing.time_cuda` without a graph,
    which says so when ``--cuda-graphs`` replays the sweep's calls: "as the sweep times" is then
    not true of its host time."""
    if settings.cuda_graphs and settings.device.type == "cuda":
        return method + "; each call launched, not replayed from a CUDA graph as --cuda-graphs replays the sweep's"
    return method


def _run_masks(ctx: Context) -> None:
    ctx.doc["masks"], ctx.doc["methods"]["masks"] = run_masks(ctx.settings), part_method(MASKS_METHOD, ctx.settings)


def _run_linear(ctx: Context) -> None:
    ctx.doc["linear"] = run_linear(ctx.settings)
    ctx.doc["methods"]["linear"] = part_method(LINEAR_METHOD, ctx.settings)


def _run_delta(ctx: Context) -> None:
    ctx.doc["delta"], ctx.doc["methods"]["delta"] = run_delta(ctx.settings), part_method(DELTA_METHOD, ctx.settings)


def _run_sparse(ctx: Context) -> None:
    ctx.doc["methods"]["sparse"], ctx.doc["sparse"] = part_method(SPARSE_METHOD, ctx.settings), []

    def done(row: SparseRow) -> None:  # saved row by row: the long t take minutes each
        time = f"{row.median_s * 1e3:.1f} ms" if row.median_s else f"{row.status}: {row.reason}"
        ctx.say(f"sparse {row.variant}, t = {row.t}, {row.pass_name}: {time}")
        ctx.save()

    run_sparse(ctx.settings, ctx.args.sparse_top_k, ctx.args.sparse_block_size, ctx.doc["sparse"], done)


def _run_distributed(ctx: Context) -> None:
    ctx.doc["distributed"] = run_distributed(ctx.settings)
    ctx.doc["methods"]["distributed"] = DISTRIBUTED_METHOD


SWEEP_KEY = ("level", "variant", "pass", "dtype", "b", "t", "h", "d_h")

# In the order a run measures them.
PARTS: tuple[Part, ...] = (
    Part("peaks", "CPU: this machine's float32 matmul FLOP/s and STREAM bandwidth; GPU: a bfloat16 "
         "matmul's TFLOP/s and STREAM copy and triad bandwidth, recorded next to the datasheet's "
         "figures, which the percentages use",
         (RowKind("peaks", "peak", ("name",), shape="named", measured=_peak_measured),),
         _run_peaks, "book.appendix.page:peaks_markdown"),
    Part("goals", "flash_attention against SDPA, fused against unfused, and the memory goal",
         (RowKind("goals.ratios", "goal", ("name", "pass", "dtype"), measured=_goal_measured),
          RowKind("goals.memory", "memory goal", ("t", "b", "h", "d_h", "dtype"), shape="one",
                  measured=_goal_measured)),
         _run_goals, "book.appendix.page:goals_markdown"),
    Part("decode", "greedy tokens/s with and without the KV cache",
         (RowKind("decode", "decode row", ("model", "use_cache", "prompt_tokens", "new_tokens"), DecodeRow),),
         _run_decode, "book.appendix.page:decode_markdown"),
    Part("sweep", "every variant over t, and the speed goal: the fused layer within 5% of "
         "torch.nn.MultiheadAttention",
         (RowKind("results", "row", SWEEP_KEY, Row, measured=_has_status, label="rows"),),
         _run_sweep, "book.appendix.page:sweep_markdown"),
    Part("masks", "chapter 11's causal document mask over t = 512, 1024, 2048 packed tokens: dense "
         "SDPA, compiled FlexAttention, packed varlen and padded",
         (RowKind("masks", "masks row", ("variant", "t", "pass", "dtype", "h", "d_h"), MaskRow,
                  measured=_has_status, label="mask rows"),),
         _run_masks, "book.appendix.tables:masks_table", preset=False),
    Part("linear", "chapter 12's linear attention in its three forms against causal softmax attention "
         "over t, each checked against its own float64 definition",
         (RowKind("linear", "linear row", ("variant", "pass", "dtype", "b", "t", "h", "d_h", "chunk_size"),
                  LinearRow, measured=_has_status, label="linear-attention rows"),),
         _run_linear, "book.appendix.tables:linear_table", default=False),
    Part("delta", "chapter 13's chunked decay and gated delta rules against chapter 12's chunked linear "
         "attention and causal softmax attention over t, each checked against its float64 recurrence",
         (RowKind("delta", "delta row", ("variant", "pass", "dtype", "b", "t", "h", "d_h", "chunk_size"),
                  LinearRow, measured=_has_status, label="delta-rule rows"),),
         _run_delta, "book.appendix.tables:delta_table", default=False),
    Part("sparse", "chapter 14's selections against causal softmax attention over t, each keeping about "
         "k_top keys per query: DSA's lightning indexer alone and followed by dense or gathered attention, "
         "MoBA and NSA, each checked in float64 over the selection the timed call made",
         (RowKind("sparse", "sparse row", ("variant", "pass", "dtype", "b", "t", "h", "d_h", "top_k",
                                           "block_size", "window"),
                  SparseRow, measured=_has_status, label="sparse-attention rows"),),
         _run_sparse, "book.appendix.tables:sparse_table", default=False),
    Part("distributed", "chapter 11's ring attention, contiguous and zig-zag, and Ulysses on 2 and 4 gloo "
         "processes of this CPU, causal, forward and forward+backward: time per call and per ring step, "
         "bytes sent against the model's; CPU only",
         (RowKind("distributed", "distributed row", ("scheme", "sharding", "world_size", "pass", "dtype",
                                                     "b", "t", "h", "h_kv", "d_h"),
                  DistributedRow, measured=_has_status, label="context-parallel rows"),),
         _run_distributed, "book.appendix.tables:distributed_table", default=False, preset=False),
)
BY_NAME = {part.name: part for part in PARTS}
ROW_KINDS: tuple[RowKind, ...] = tuple(kind for part in PARTS for kind in part.kinds)
# Keys of a results file a part does not write: the run's description, and the speed goals,
# which are computed from the sweep's rows (attention.bench.goals.speed_goals).
DERIVED_KEYS = ("goals.speed",)


def unknown_keys(doc: dict[str, Any]) -> list[str]:
    """Keys of ``doc`` (and of its ``goals``) that neither describe the run nor hold a known kind
    of row: what a merge would lose."""
    known = {*RUN_KEYS, *DERIVED_KEYS, *(kind.key for kind in ROW_KINDS)}
    parents = {key.split(".")[0] for key in known if "." in key}
    found = [key for key in doc if key not in known and key not in parents]
    for parent in parents:
        found += [f"{parent}.{key}" for key in doc.get(parent) or {} if f"{parent}.{key}" not in known]
    return sorted(found)

