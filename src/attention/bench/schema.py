"""The shape of a results file, and a validator that names the first thing out of place.

A results file is one JSON object::

    {"schema": "attention-bench/1",
     "provenance": {...},                 # where and how: see attention.bench.provenance
     "settings": {...},                   # the sweep's options
     "methods": {"timing": str, "memory": str, "flops": str, "decode": str},
     "peaks": {dtype: {"tflops": float | null, "source": str},    # the peak each % is of
               "bandwidth": {"bytes_per_s": float, "source": str}},   # optional: the roofline's
     "goals": {"speed": [...], "memory": {...} | null, "ratios": [...]},   # ratios optional
     "decode": [decode row, ...],         # optional: see attention.bench.decode
     "linear": [linear row, ...],         # optional: see attention.bench.linear
     "complete": bool,                    # optional: false while running or when cut off
     "stopped": str,                      # optional: why a run ended before its last row
     "results": [row, ...]}

Each row is one (variant, problem) pair; ``status`` is "ok" (then the time, FLOPs and TFLOP/s
are numbers) or "skipped", "unsupported", "failed" (then ``reason`` says why and there is no
time). The appendix page is generated from these files only.
"""

SCHEMA = "attention-bench/1"
STATUSES = ("ok", "skipped", "unsupported", "failed")
GOAL_STATUSES = ("met", "missed", "not measured")

_PROVENANCE = {
    "date_utc": str, "command": str, "git": dict, "torch": str, "cpu_model": str, "cpu_count": int,
    "torch_threads": int, "device_type": str, "device_name": str, "load_average_start": list,
    "load_average_end": list, "float32_matmul_precision": str,
}
_ROW = {
    "level": str, "variant": str, "summary": str, "pass": str, "b": int, "t": int, "h": int, "d_h": int,
    "d": int, "dtype": str, "status": str, "ops": list,
}
_OK_NUMBERS = ("median_s", "iqr_s", "flops", "tflops")
_CUDA_ONLY = ("cuda", "driver", "tf32_matmul", "tf32_cudnn", "compute_capability")
_DECODE = {
    "model": str, "config": dict, "use_cache": bool, "prompt_tokens": int, "new_tokens": int,
    "median_s": float, "iqr_s": float, "repeats": int, "tokens_per_s": float,
}
_LINEAR = {
    "variant": str, "pass": str, "b": int, "h": int, "t": int, "d_h": int, "chunk_size": int,
    "dtype": str, "status": str,
}
_DECODE_CONFIG = {"vocab_size": int, "d_model": int, "num_heads": int, "num_layers": int, "context_length": int}


def _require(mapping: dict, fields: dict, where: str) -> None:
    for key, kind in fields.items():
        if key not in mapping:
            raise ValueError(f"{where}: expected key {key!r}, got keys {sorted(mapping)}")
        if not isinstance(mapping[key], kind) or (kind is int and isinstance(mapping[key], bool)):
            actual = type(mapping[key]).__name__
            raise ValueError(f"{where}.{key}: expected {kind.__name__}, got {actual}")


def _positive(value: object, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{where}: expected a positive number, got {value!r}")


def validate_results(doc: object) -> None:
    """Raise ValueError naming the first field of ``doc`` that does not follow the schema."""
    if not isinstance(doc, dict):
        raise ValueError(f"results: expected a JSON object, got {type(doc).__name__}")
    _require(doc, {"schema": str, "provenance": dict, "settings": dict, "methods": dict, "goals": dict,
                   "peaks": dict, "results": list}, "results")
    if doc["schema"] != SCHEMA:
        raise ValueError(f"results.schema: expected {SCHEMA!r}, got {doc['schema']!r}")
    if not isinstance(doc.get("complete", True), bool):
        raise ValueError(f"results.complete: expected a bool, got {doc['complete']!r}")
    _require(doc["provenance"], _PROVENANCE, "provenance")
    if doc["provenance"]["device_type"] == "cuda":
        missing = [key for key in _CUDA_ONLY if key not in doc["provenance"]]
        if missing:
            raise ValueError(f"provenance: expected GPU fields {missing} for a cuda run, got none")
    _require(doc["methods"], {"timing": str, "memory": str, "flops": str}, "methods")
    for dtype, peak in doc["peaks"].items():
        _require(peak, {"source": str}, f"peaks.{dtype}")
    if "bandwidth" in doc["peaks"]:
        _positive(doc["peaks"]["bandwidth"].get("bytes_per_s"), "peaks.bandwidth.bytes_per_s")
    _require(doc["goals"], {"speed": list}, "goals")
    memory = [doc["goals"]["memory"]] if doc["goals"].get("memory") else []
    for i, goal in enumerate(doc["goals"].get("ratios", [])):
        _require(goal, {"name": str, "variant": str, "baseline": str, "pass": str, "target": float},
                 f"goals.ratios[{i}]")
        if goal.get("status") == "met" or goal.get("status") == "missed":
            _positive(goal.get("ratio"), f"goals.ratios[{i}].ratio")
    for i, goal in enumerate([*doc["goals"]["speed"], *memory, *doc["goals"].get("ratios", [])]):
        if goal.get("status") not in GOAL_STATUSES:
            status = goal.get("status")
            raise ValueError(f"goals[{i}].status: expected one of {GOAL_STATUSES}, got {status!r}")
    for i, row in enumerate(doc.get("decode", [])):
        where = f"decode[{i}]"
        _require(row, _DECODE, where)
        _require(row["config"], _DECODE_CONFIG, f"{where}.config")
        for key in ("median_s", "tokens_per_s"):
            _positive(row[key], f"{where}.{key}")
        _require(row, {"cache_bytes_measured": int, "cache_bytes_formula": int}, where)
    for i, row in enumerate(doc.get("linear", [])):
        _validate_linear(row, f"linear[{i}]")
    for i, row in enumerate(doc["results"]):
        where = f"results[{i}]"
        if not isinstance(row, dict):
            raise ValueError(f"{where}: expected an object, got {type(row).__name__}")
        _require(row, _ROW, where)
        if row["status"] not in STATUSES:
            raise ValueError(f"{where}.status: expected one of {STATUSES}, got {row['status']!r}")
        if row["status"] == "ok":
            for key in _OK_NUMBERS:
                value = row.get(key)
                if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                    raise ValueError(f"{where}.{key}: expected a number >= 0 for an ok row, got {value!r}")
            if row["median_s"] <= 0:
                raise ValueError(f"{where}.median_s: expected a positive time, got {row['median_s']}")
            if not isinstance(row.get("backend"), str):
                raise ValueError(f"{where}.backend: expected the kernel that ran, got {row.get('backend')!r}")
        elif not isinstance(row.get("reason"), str) or not row["reason"]:
            reason = row.get("reason")
            status = row["status"]
            raise ValueError(f"{where}.reason: expected why a {status} row has no time, got {reason!r}")


def _validate_linear(row: object, where: str) -> None:
    """A linear row: its shape, and a checked time and FLOPs if ok, a reason if not."""
    if not isinstance(row, dict):
        raise ValueError(f"{where}: expected an object, got {type(row).__name__}")
    _require(row, _LINEAR, where)
    if row["status"] not in STATUSES:
        raise ValueError(f"{where}.status: expected one of {STATUSES}, got {row['status']!r}")
    if row["status"] == "ok":
        for key in ("median_s", "flops", "tflops"):
            _positive(row.get(key), f"{where}.{key}")
        error = row.get("max_rel_err")
        if isinstance(error, bool) or not isinstance(error, (int, float)) or not error >= 0:
            raise ValueError(f"{where}.max_rel_err: expected the checked error of an ok row, got {error!r}")
    elif not isinstance(row.get("reason"), str) or not row["reason"]:
        raise ValueError(f"{where}.reason: expected why a {row['status']} row has no time, got {row.get('reason')!r}")
