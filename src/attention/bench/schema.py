"""The shape of a results file, and a validator that names the first thing out of place.

A results file is one JSON object::

    {"schema": "attention-bench/1",
     "provenance": {...},                 # where and how: see attention.bench.provenance
     "settings": {...},                   # the sweep's options
     "methods": {"timing": str, "memory": str, "flops": str, "decode": str},
     "peaks": {dtype: {"tflops": float | null, "source": str},    # the peak each % is of
               "bandwidth": {"bytes_per_s": float, "source": str}},   # optional: the roofline's
     "goals": {"speed": [...], "memory": {...} | null, "ratios": [...]},   # ratios optional
     "decode": [decode row, ...],         # optional, and every other part's rows: see
     "masks": [masks row, ...],           #   attention.bench.parts, which lists the parts and
     "linear": [linear row, ...],         #   the row class of each
     "distributed": [distributed row, ...],
     "sparse": [sparse row, ...],
     "complete": bool,                    # optional: false while running or when cut off
     "stopped": str,                      # optional: why a run ended before its last row
     "results": [row, ...]}

Each row is one (variant, problem) pair, a :class:`~attention.bench.rows.Row`; each decode row a
:class:`~attention.bench.rows.DecodeRow`, each masks row a :class:`~attention.bench.rows.MaskRow`,
each linear row a :class:`~attention.bench.rows.LinearRow`, each distributed row a
:class:`~attention.bench.rows.DistributedRow`, each sparse row a
:class:`~attention.bench.rows.SparseRow`: their fields and types are declared there, once, for the
harness that writes them and the appendix that reads them. The appendix is generated from these
files only; :func:`validate_results` checks everything it reads, so that a stale or broken file
stops the build with the field's name instead of a KeyError.
"""

from typing import Any

SCHEMA = "attention-bench/1"
GOAL_STATUSES = ("met", "missed", "not measured")

_PROVENANCE = {
    "date_utc": str, "command": str, "git": dict, "torch": str, "cpu_model": str, "cpu_count": int,
    "torch_threads": int, "device_type": str, "device_name": str, "load_average_start": list,
    "load_average_end": list, "float32_matmul_precision": str,
}
_CUDA_ONLY = ("cuda", "cudnn", "driver", "tf32_matmul", "tf32_cudnn", "compute_capability")
_SETTINGS = {"d_model": int, "tokens": int, "repeats": int, "min_time": float, "max_time": float}
# What a measured goal must carry, by kind (a goal "not measured" carries its reason instead).
_SPEED_GOAL = {"t": int, "d": int, "h": int, "b": int, "dtype": str, "pass": str, "fused_sdpa_s": float,
               "torch_mha_s": float, "fused_sdpa_iqr_s": float, "torch_mha_iqr_s": float,
               "fused_sdpa_backend": str, "torch_mha_backend": str, "ratio_fused_sdpa_to_torch_mha": float}
_RATIO_GOAL = {"b": int, "h": int, "t": int, "d_h": int, "dtype": str, "variant_s": float, "baseline_s": float,
               "baseline_backend": str, "ratio": float}
_MEMORY_GOAL = {"t": int, "b": int, "h": int, "d_h": int, "dtype": str, "method": str, "fraction": float,
                "explicit_peak_bytes": int, "flash_attention_peak_bytes": int}


def _require(mapping: object, fields: dict[str, Any], where: str) -> None:
    if not isinstance(mapping, dict):
        raise ValueError(f"{where}: expected an object, got {type(mapping).__name__}")
    for key, kind in fields.items():
        if key not in mapping:
            raise ValueError(f"{where}: expected key {key!r}, got keys {sorted(mapping)}")
        if kind is float and isinstance(mapping[key], int) and not isinstance(mapping[key], bool):
            continue
        if not isinstance(mapping[key], kind) or (kind is int and isinstance(mapping[key], bool)):
            actual = type(mapping[key]).__name__
            expected = getattr(kind, "__name__", None) or " or ".join(k.__name__ for k in kind)
            raise ValueError(f"{where}.{key}: expected {expected}, got {actual}")


def _positive(value: object, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{where}: expected a positive number, got {value!r}")


def validate_results(doc: object) -> None:
    """Raise ValueError naming the first field of ``doc`` that does not follow the schema."""
    if not isinstance(doc, dict):
        raise ValueError(f"results: expected a JSON object, got {type(doc).__name__}")
    # the version first: a file of another version may lack the keys below, and should say why
    _require(doc, {"schema": str}, "results")
    if doc["schema"] != SCHEMA:
        raise ValueError(f"results.schema: expected {SCHEMA!r}, got {doc['schema']!r}")
    _require(doc, {"provenance": dict, "settings": dict, "methods": dict, "goals": dict, "peaks": dict,
                   "results": list}, "results")
    if not isinstance(doc.get("complete", True), bool):
        raise ValueError(f"results.complete: expected a bool, got {doc['complete']!r}")
    _require(doc["provenance"], _PROVENANCE, "provenance")
    if doc["provenance"]["device_type"] == "cuda":
        missing = [key for key in _CUDA_ONLY if key not in doc["provenance"]]
        if missing:
            raise ValueError(f"provenance: expected GPU fields {missing} for a cuda run, got none")
    _require(doc["provenance"]["git"], {"commit": (str, type(None))}, "provenance.git")
    _require(doc["settings"], _SETTINGS, "settings")
    _require(doc["methods"], {"timing": str, "memory": str, "flops": str}, "methods")
    for dtype, peak in doc["peaks"].items():
        _require(peak, {"source": str}, f"peaks.{dtype}")
        if peak.get("tflops") is None and peak.get("bytes_per_s") is None and "unknown" not in peak["source"]:
            raise ValueError(f"peaks.{dtype}: expected tflops or bytes_per_s, got keys {sorted(peak)}")
    if "bandwidth" in doc["peaks"]:
        _positive(doc["peaks"]["bandwidth"].get("bytes_per_s"), "peaks.bandwidth.bytes_per_s")
    _require(doc["goals"], {"speed": list}, "goals")
    memory, ratios = doc["goals"].get("memory"), doc["goals"].get("ratios", [])
    if not isinstance(memory, (dict, type(None))):
        raise ValueError(f"goals.memory: expected an object or null, got {type(memory).__name__}")
    if not isinstance(ratios, list):
        raise ValueError(f"goals.ratios: expected a list, got {type(ratios).__name__}")
    memory = [memory] if memory else []
    for i, goal in enumerate(ratios):
        _require(goal, {"name": str, "variant": str, "baseline": str, "pass": str, "target": float},
                 f"goals.ratios[{i}]")
        if goal.get("status") == "met" or goal.get("status") == "missed":
            _require(goal, _RATIO_GOAL, f"goals.ratios[{i}]")
            _positive(goal.get("ratio"), f"goals.ratios[{i}].ratio")
    kinds = [("speed", g, _SPEED_GOAL) for g in doc["goals"]["speed"]] + [("memory", g, _MEMORY_GOAL) for g in memory]
    kinds += [("ratios", g, {}) for g in ratios]
    for kind, goal, fields in kinds:
        if not isinstance(goal, dict):
            raise ValueError(f"goals.{kind}: expected an object, got {type(goal).__name__}")
        if goal.get("status") not in GOAL_STATUSES:
            status = goal.get("status")
            raise ValueError(f"goals.{kind}: expected a status in {GOAL_STATUSES}, got {status!r}")
        if goal["status"] == "not measured":
            _require(goal, {"reason": str}, f"goals.{kind}")
        else:
            _require(goal, fields, f"goals.{kind}")
    from .parts import ROW_KINDS  # here, not above: the parts import the harness, which imports SCHEMA

    for row_kind in ROW_KINDS:
        if row_kind.row is not None:
            for i, row in enumerate(row_kind.read(doc)):
                row_kind.row.from_json(row, f"{row_kind.key}[{i}]")
        if row_kind.shape == "list":  # two rows of one problem: the appendix would show either
            seen: dict[tuple[Any, ...], int] = {}
            for i, row in enumerate(row_kind.read(doc)):
                key = tuple(row.get(field) for field in row_kind.merge_key)
                if key in seen:
                    where = ", ".join(f"{f}={v}" for f, v in zip(row_kind.merge_key, key))
                    raise ValueError(f"{row_kind.key}[{i}]: expected one {row_kind.what} per problem, got "
                                     f"that of {row_kind.key}[{seen[key]}] again ({where})")
                seen[key] = i
