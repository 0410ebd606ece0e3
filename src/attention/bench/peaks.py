"""This machine's peaks, measured: matmul FLOP/s and memory bandwidth (STREAM-like).

Notation (see CONTRIBUTING.md): n the side of a square matrix, N the length of a STREAM array,
s the bytes of one number.

- **Compute:** ``torch.mm`` of two (n, n) float32 matrices does 2 n³ FLOPs (a multiply and an
  add per term). We time it for several n and keep the best median: the highest rate that the
  machine's BLAS reaches, which is what a kernel's achieved FLOP/s is compared with.
- **Bandwidth:** two kernels of McCalpin's STREAM benchmark, written in torch: *copy*
  ``c = a`` and *triad* ``a = b + q c``, on arrays far larger than the last-level cache (each at
  least 4 times its size, STREAM's rule), and bytes counted as STREAM counts them: 2 N s for copy
  (one read, one write), 3 N s for triad (two reads, one write); the write-allocate traffic that
  a cache may add is not counted. The bandwidth of the roofline is the higher of the two.

Both run with torch's thread count, recorded next to the result, like the timings. On a GPU the
same two measurements (a bfloat16 matmul on the tensor cores, and STREAM's copy and triad) are
recorded next to the datasheet's figures, which the appendix's percentages and roofline keep.
"""

import functools
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from .timing import Timing, time_cpu, time_cuda

MATMUL_SIZES = (1024, 2048, 4096)
GPU_MATMUL_SIZES = (4096, 8192, 16384)
GPU_STREAM_BYTES = 2**30
STREAM_DTYPE = torch.float64  # STREAM's default type: 8-byte numbers
MIN_STREAM_BYTES = 64 * 2**20  # each array at least this large, whatever the cache reports


def last_level_cache_bytes() -> int | None:
    """Size of the CPU's largest cache, from Linux's /sys (None when it cannot be read)."""
    sizes = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = path.read_text().strip().upper()
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes) if sizes else None


def _time(fn: Callable[[], object], device: torch.device, repeats: int, max_time: float,
          min_time: float = 0.2) -> Timing:
    fn()  # warm-up: first-touch page faults, thread pool start
    if device.type == "cuda":
        torch.cuda.synchronize()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        return time_cuda(fn, start.elapsed_time(end) / 1e3, max(repeats, 5), max_time)
    estimate = statistics.median(_wall(fn) for _ in range(2))
    return time_cpu(fn, estimate, repeats, min_time=min_time, max_time=max_time)


def _wall(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure_matmul(
    device: torch.device, sizes: tuple[int, ...] = MATMUL_SIZES, repeats: int = 5,
    max_time: float = 3.0, dtype: torch.dtype = torch.float32, min_time: float = 0.2,
) -> dict[str, Any]:
    """Best median GFLOP/s of ``torch.mm`` over square sizes n: 2 n³ FLOPs per call."""
    if not sizes or any(n < 1 for n in sizes):
        raise ValueError(f"sizes must be positive matrix sides, got {sizes}")
    rows = []
    for n in sizes:
        a, b = (torch.randn(n, n, dtype=dtype, device=device) for _ in range(2))
        c = torch.empty(n, n, dtype=dtype, device=device)
        timing = _time(functools.partial(torch.mm, a, b, out=c), device, repeats, max_time, min_time)
        rows.append({"n": n, "median_s": timing.median_s, "iqr_s": timing.iqr_s,
                     "repeats": timing.repeats, "gflops": 2 * n**3 / timing.median_s / 1e9})
        del a, b, c
    best = max(rows, key=lambda r: r["gflops"])
    return {"gflops": best["gflops"], "best_n": best["n"], "dtype": str(dtype).removeprefix("torch."),
            "sizes": rows}


def measure_bandwidth(
    device: torch.device, array_bytes: int | None = None, repeats: int = 5, max_time: float = 3.0,
    min_time: float = 0.2,
) -> dict[str, Any]:
    """STREAM copy and triad in torch: bytes per second, counted as STREAM counts them."""
    llc = last_level_cache_bytes() if device.type == "cpu" else None
    if device.type == "cuda":
        llc = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", None)
    if array_bytes is None:
        array_bytes = max(MIN_STREAM_BYTES, 4 * (llc or 0))
    s = STREAM_DTYPE.itemsize
    n = array_bytes // s
    if n < 1:
        raise ValueError(f"array_bytes must hold at least one {STREAM_DTYPE}, got {array_bytes}")
    a, b, c = (torch.full((n,), value, dtype=STREAM_DTYPE, device=device) for value in (1.0, 2.0, 0.0))
    q = 3.0
    kernels = {
        "copy": (lambda: c.copy_(a), 2 * n * s),  # c = a: read a, write c
        "triad": (lambda: torch.add(b, c, alpha=q, out=a), 3 * n * s),  # a = b + q c
    }
    out: dict[str, Any] = {"array_bytes": n * s, "dtype": str(STREAM_DTYPE).removeprefix("torch."),
                           "last_level_cache_bytes": llc}
    for name, (fn, nbytes) in kernels.items():
        timing = _time(fn, device, repeats, max_time, min_time)
        out[name] = {"bytes": nbytes, "median_s": timing.median_s, "iqr_s": timing.iqr_s,
                     "repeats": timing.repeats, "bytes_per_s": nbytes / timing.median_s}
    out["bytes_per_s"] = max(out["copy"]["bytes_per_s"], out["triad"]["bytes_per_s"])
    return out


def measure_peaks(
    device: torch.device, sizes: tuple[int, ...] = MATMUL_SIZES, array_bytes: int | None = None,
    repeats: int = 5, max_time: float = 3.0, min_time: float = 0.2,
) -> dict[str, dict[str, Any]]:
    """The ``peaks`` entries of a results file, measured: ``float32`` and ``bandwidth``."""
    threads = torch.get_num_threads()
    mm = measure_matmul(device, sizes, repeats, max_time, min_time=min_time)
    bw = measure_bandwidth(device, array_bytes, repeats, max_time, min_time)
    where = f"{threads} threads" if device.type == "cpu" else str(device)
    sides = ", ".join(str(r["n"]) for r in mm["sizes"])
    mm_source = (f"measured: float32 torch.mm of (n, n) matrices, 2 n³ FLOPs per call, n = {sides}; "
                 f"the best median, n = {mm['best_n']}; {where}")
    bw_source = (f"measured: STREAM copy and triad (McCalpin) in torch, {bw['dtype']} arrays of "
                 f"{bw['array_bytes']} bytes each, bytes counted as STREAM counts them; the higher "
                 f"of the two; {where}")
    return {
        "float32": {"tflops": mm["gflops"] / 1e3, "source": mm_source, "measured": True,
                    "threads": threads, "matmul": mm},
        "bandwidth": {"bytes_per_s": bw["bytes_per_s"], "source": bw_source, "measured": True,
                      "threads": threads, "stream": bw},
    }


def measure_gpu_peaks(
    device: torch.device, sizes: tuple[int, ...] = GPU_MATMUL_SIZES, array_bytes: int = GPU_STREAM_BYTES,
    repeats: int = 10, max_time: float = 2.0,
) -> dict[str, dict[str, Any]]:
    """A GPU's ``peaks`` entries, measured: ``bfloat16_measured`` (``torch.mm``) and
    ``bandwidth_measured`` (STREAM copy and triad); the datasheet's entries stay beside them.
    (It runs on a CPU too, which is how it is tested.)"""
    mm = measure_matmul(device, sizes, repeats, max_time, dtype=torch.bfloat16)
    bw = measure_bandwidth(device, array_bytes, repeats, max_time)
    sides = ", ".join(str(r["n"]) for r in mm["sizes"])
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else str(device)
    return {
        "bfloat16_measured": {
            "tflops": mm["gflops"] / 1e3, "measured": True, "matmul": mm,
            "source": f"measured: bfloat16 torch.mm of (n, n) random matrices, 2 n³ FLOPs per call, "
                      f"n = {sides}; the best median, n = {mm['best_n']}; {name}",
        },
        "bandwidth_measured": {
            "bytes_per_s": bw["bytes_per_s"], "measured": True, "stream": bw,
            "source": f"measured: STREAM copy and triad in torch on the GPU, {bw['dtype']} arrays of "
                      f"{bw['array_bytes']} bytes each, bytes counted as STREAM counts them; the higher "
                      f"of the two; {name}",
        },
    }
