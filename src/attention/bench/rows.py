"""The typed rows of a results file, shared by the harness that writes them and the appendix that
renders them: :class:`Row`, one measurement of one variant, :class:`DecodeRow`, one decoding
speed, :class:`MaskRow`, one form of the document mask, :class:`LinearRow`, one form of
linear attention or softmax attention at one length, :class:`DistributedRow`, ring or Ulysses
attention on N processes, and :class:`SparseRow`, one of chapter 14's selections at one length.
Each is built from JSON with ``from_json``, which checks every field it declares and names the first one out of place; fields
added to the format later have defaults, so that older files still load.

Notation (see CONTRIBUTING.md): b batch size, t tokens, h heads, d_h head width, d = h * d_h.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, Self, TypeVar

import torch

from ..roofline import PASSES

STATUSES = ("ok", "skipped", "unsupported", "failed")
LEVELS = ("layer", "kernel")  # what a sweep row measures: whole layers, or attention on Q, K, V
# The range of a number in a row, by field name, for every kind of row: a size or count is >= 1;
# every other number (a time, spread, error, FLOP or byte count, rate, index) is finite and
# >= 0. None (not measured) passes here: the status checks say when a number is required. A
# failed row may record the non-finite error that failed its check.
SIZES = frozenset({"b", "t", "h", "h_kv", "d_h", "d", "repeats", "number", "world_size", "prompt_tokens",
                   "new_tokens", "batch_size", "chunk_size", "top_k", "block_size"})
CHOICES = {"pass_name": PASSES, "level": LEVELS}  # a string field with a known set of values
JSON_NAMES = {"pass_name": "pass"}  # a field whose JSON key is a Python keyword
T = TypeVar("T")


def _accepts(kind: Any, value: object) -> bool:
    """Whether ``value`` is of the declared type ``kind`` (an int is a float; a bool is not an int)."""
    if isinstance(kind, types.UnionType):
        return any(_accepts(k, value) for k in typing.get_args(kind))
    if kind is type(None):
        return value is None
    origin = typing.get_origin(kind)
    if origin is list:
        (item,) = typing.get_args(kind)
        return isinstance(value, list) and all(_accepts(item, v) for v in value)
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


@functools.cache
def _fields(cls: type) -> tuple[tuple[dataclasses.Field[Any], Any], ...]:
    """Each field of a row class with its resolved type: resolved once per class, not per row."""
    hints = typing.get_type_hints(cls)
    return tuple((f, hints[f.name]) for f in dataclasses.fields(cls))


def _from_json(cls: type[T], data: object, where: str) -> T:
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected an object, got {type(data).__name__}")
    values = {}
    for f, kind in _fields(cls):  # type: ignore[arg-type]  # a class is hashable: python/mypy#11470
        key = JSON_NAMES.get(f.name, f.name)
        if key not in data:
            if f.default is dataclasses.MISSING:
                raise ValueError(f"{where}: expected key {key!r}, got keys {sorted(data)}")
            continue
        if not _accepts(kind, data[key]):
            raise ValueError(f"{where}.{key}: expected {kind}, got {data[key]!r}")
        _check_range(f.name, data[key], f"{where}.{key}", data.get("status"))
        values[f.name] = data[key]
    return cls(**values)


def _check_range(name: str, value: object, where: str, status: object) -> None:
    """The rule of :data:`SIZES` and :data:`CHOICES` for one field's value (each item of a list),
    and a ``dtype`` that names a floating-point torch dtype (``"bfloat16"``), as rows record it."""
    if name in CHOICES and value not in CHOICES[name]:
        raise ValueError(f"{where}: expected one of {CHOICES[name]}, got {value!r}")
    if name == "dtype":
        dtype = getattr(torch, value, None) if isinstance(value, str) else None
        if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
            raise ValueError(f"{where}: expected the name of a floating-point torch dtype, got {value!r}")
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, bool) or not isinstance(item, int | float):
            continue
        if name in SIZES:
            if not item >= 1:
                raise ValueError(f"{where}: expected a size or count >= 1, got {item!r}")
        elif name == "max_rel_err" and status == "failed" and not item < 0:
            continue  # a check that failed on inf or NaN records what it found
        elif not (math.isfinite(item) and item >= 0):
            raise ValueError(f"{where}: expected a finite number >= 0, got {item!r}")


class _JsonRow:
    """What every kind of row shares: ``to_json``, the inverse of its ``from_json``."""

    # each kind of row is a dataclass
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

    def to_json(self) -> dict[str, Any]:
        """The row as its JSON object."""
        return {JSON_NAMES.get(k, k): v for k, v in dataclasses.asdict(self).items()}


def _check_status(row: Any, where: str, positive: tuple[str, ...]) -> None:
    """A known ``status``; an "ok" row has a positive number in each field of ``positive``, and any
    other row a ``reason``. ValueError names the field out of place."""
    if row.status not in STATUSES:
        raise ValueError(f"{where}.status: expected one of {STATUSES}, got {row.status!r}")
    if row.status == "ok":
        for key in positive:
            value = getattr(row, key)
            if value is None or not value > 0:
                raise ValueError(f"{where}.{key}: expected a positive number for an ok row, got {value!r}")
    elif not row.reason:
        raise ValueError(f"{where}.reason: expected why a {row.status} row has no time, got {row.reason!r}")


def _check_timed(row: Any, where: str, positive: tuple[str, ...] = ("median_s", "flops", "tflops")) -> None:
    """A row checked against its float64 definition, then timed: :func:`_check_status`, and an
    ok row has the checked error, >= 0."""
    _check_status(row, where, positive)
    if row.status == "ok" and (row.max_rel_err is None or row.max_rel_err < 0):
        raise ValueError(f"{where}.max_rel_err: expected the checked error of an ok row, "
                         f"got {row.max_rel_err!r}")


@dataclass(frozen=True, kw_only=True)
class _Measured(_JsonRow):
    """What every measured row ends with (keyword-only, so that a kind's own fields come first in
    its constructor): ``status`` and ``reason`` as in :class:`Row`, the error checked against
    float64, the median time and its spread over ``repeats`` timed runs, and ``run``, in a merged
    file which source run measured it."""

    status: str
    reason: str | None
    max_rel_err: float | None
    median_s: float | None
    iqr_s: float | None
    repeats: int | None
    run: int | None = None


@dataclass(frozen=True, kw_only=True)
class _Timed(_Measured):
    """A measured row that times ``number`` calls per run and counts its FLOPs and TFLOP/s."""

    number: int | None
    flops: float | None
    tflops: float | None


@dataclass(frozen=True, kw_only=True)
class _Variant(_Timed):
    """One variant at one size, checked then timed: the rows of the parts that reuse
    :func:`~attention.bench.linear.measure_variant`."""

    variant: str
    pass_name: str  # "forward" or "forward+backward"; "pass" in JSON
    b: int
    h: int
    t: int
    d_h: int
    dtype: str

    @classmethod
    def from_json(cls, data: object, where: str = "row") -> Self:
        """A row from its JSON object; ValueError names ``where`` and the field out of place."""
        row = _from_json(cls, data, where)
        _check_timed(row, where)
        return row


@dataclass(frozen=True, kw_only=True)
class Row(_Timed):
    """One variant on one problem: checked against float64, then timed; or why it was not.

    ``status`` is "ok" (then the time, FLOPs and TFLOP/s are numbers and ``backend`` names the
    kernel that ran) or "skipped", "unsupported", "failed" (then ``reason`` says why).
    """

    level: str
    variant: str
    summary: str
    pass_name: str  # "forward" or "forward+backward"; "pass" in JSON
    b: int
    t: int
    h: int
    d_h: int
    d: int
    dtype: str
    backend: str | None
    ops: list[str]
    peak_tflops: float | None
    pct_of_peak: float | None
    peak_bytes: int | None
    gpu_kernels: int | None = None  # GPU kernels one call launched (counted on GPUs)
    # our Triton kernels: {kernel: [BLOCK_M, BLOCK_N, warps, stages]}; flash_attention: {"tiles":
    # [B_q, B_k]}. A bare dict, here and in
    # DecodeRow.config: from_json checks each field's type at run time and names it in errors.
    kernel_config: dict | None = None  # type: ignore[type-arg]  # bare: see above

    @classmethod
    def from_json(cls, data: object, where: str = "row") -> Row:
        """A row from its JSON object; ValueError names ``where`` and the field out of place."""
        row = _from_json(cls, data, where)
        _check_timed(row, where)
        if row.status == "ok":
            if row.iqr_s is None or row.iqr_s < 0:
                raise ValueError(f"{where}.iqr_s: expected a number >= 0 for an ok row, got {row.iqr_s!r}")
            if not row.backend:
                raise ValueError(f"{where}.backend: expected the kernel that ran, got {row.backend!r}")
        return row


DECODE_CONFIG = ("vocab_size", "d_model", "num_heads", "num_layers", "context_length")


@dataclass(frozen=True)
class DecodeRow(_JsonRow):
    """Greedy decoding of one model, with or without the KV cache: its speed and its cache."""

    model: str
    config: dict  # type: ignore[type-arg]  # a bare dict: see Row.kernel_config
    use_cache: bool
    prompt_tokens: int
    new_tokens: int
    median_s: float
    iqr_s: float
    repeats: int
    tokens_per_s: float
    cache_bytes_measured: int
    cache_bytes_formula: int
    batch_size: int = 1
    dtype: str = "float32"
    same_tokens: bool | None = None
    run: int | None = None

    @classmethod
    def from_json(cls, data: object, where: str = "decode row") -> DecodeRow:
        """A decode row from its JSON object; ValueError names the field out of place."""
        row = _from_json(cls, data, where)
        for key in ("median_s", "tokens_per_s"):
            if not getattr(row, key) > 0:
                raise ValueError(f"{where}.{key}: expected a positive number, got {getattr(row, key)!r}")
        for key in DECODE_CONFIG:
            if key not in row.config:
                raise ValueError(f"{where}.config: expected key {key!r}, got keys {sorted(row.config)}")
            value = row.config[key]
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{where}.config.{key}: expected int, got {value!r}")
        return row


@dataclass(frozen=True, kw_only=True)
class MaskRow(_Measured):
    """One form of chapter 11's causal document mask on one packed row (attention.bench.masks).

    ``lengths`` are the packed documents, summing to ``t``; ``scores_formed`` the entries of the
    score matrices (or kept tiles) the form computes, as the harness counted them when it ran
    (files written before :func:`~attention.bench.masks.scores_formed` counted FlexAttention's
    tiles after the causal skipping and the others before it: the appendix recounts them from
    ``lengths``); ``flops`` the useful work, the same for every form. ``status`` as in
    :class:`Row`.
    """

    variant: str
    summary: str
    t: int
    lengths: list[int]
    h: int
    d_h: int
    dtype: str
    pass_name: str  # "forward"; "pass" in JSON
    block_size: int | None
    scores_formed: int
    flops: float
    number: int | None
    tflops: float | None

    @classmethod
    def from_json(cls, data: object, where: str = "masks row") -> MaskRow:
        """A masks row from its JSON object; ValueError names the field out of place."""
        row = _from_json(cls, data, where)
        if sum(row.lengths) != row.t:
            raise ValueError(f"{where}.lengths: expected document lengths summing to t={row.t}, "
                             f"got {row.lengths}")
        _check_timed(row, where)
        return row


@dataclass(frozen=True, kw_only=True)
class LinearRow(_Variant):
    """Chapter 12's linear attention in one form, or causal softmax attention, at one length t
    (attention.bench.linear).

    ``max_rel_err`` is the error against the variant's own float64 definition (linear attention
    for the linear forms, softmax attention for the softmax variants); ``flops`` counts the
    variant's matrix products. ``status`` as in :class:`Row`.
    """

    chunk_size: int


@dataclass(frozen=True, kw_only=True)
class DistributedRow(_Measured):
    """Ring or Ulysses attention on N gloo processes of this machine, one pass
    (attention.bench.distributed).

    ``median_s`` is the slowest rank's time per call; ``step_s`` that divided by the ring's N
    steps, ``compute_step_s`` and ``transfer_step_s`` a step's compute alone and transfer alone
    (the ring's forward only); ``bytes_sent`` what rank 0 handed to the process group in one call,
    ``bytes_predicted`` the model's count. ``status`` as in :class:`Row`.
    """

    scheme: str  # "ring" or "ulysses"
    sharding: str
    world_size: int
    pass_name: str  # "forward" or "forward+backward"; "pass" in JSON
    b: int
    t: int
    h: int
    h_kv: int
    d_h: int
    dtype: str
    is_causal: bool
    step_s: float | None
    compute_step_s: float | None
    transfer_step_s: float | None
    bytes_sent: int | None
    bytes_predicted: int | None

    @classmethod
    def from_json(cls, data: object, where: str = "distributed row") -> DistributedRow:
        """A distributed row from its JSON object; ValueError names the field out of place."""
        row = _from_json(cls, data, where)
        _check_timed(row, where, positive=("median_s", "bytes_sent"))
        return row


@dataclass(frozen=True, kw_only=True)
class SparseRow(_Variant):
    """One of chapter 14's selections, or causal softmax attention, at one length t
    (attention.bench.sparse).

    ``top_k`` keys per query (``block_size`` keys per block for MoBA and NSA, ``window`` keys in
    NSA's sliding branch); ``max_rel_err`` is the error against float64 attention over the same
    selection; ``flops`` counts the work of the selection as defined. ``status`` as in :class:`Row`.
    """

    top_k: int
    block_size: int
    window: int
