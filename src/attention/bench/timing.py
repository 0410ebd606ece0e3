"""How a variant is timed and how its memory is measured, on CPU and on GPU.

Timing. On CPU, ``torch.utils.benchmark.Timer`` (with the process's thread count, not its
default of one thread) runs the call in blocks of ``number`` calls and reports the time per
call of each block. On GPU, CUDA events bracket each call, after warm-up, and a 256 MiB buffer
is zeroed before every call so that no input is still sitting in the L2 cache; the host's work
between the call's launches is inside that window whenever the GPU waits for it, unless the call
is replayed from a CUDA graph (``graph=True``). Either way we
report the median and the interquartile range (IQR) over the repeats.

Memory: the bytes a call needs beyond what existed before it (inputs, weights, gradients from
earlier calls). On GPU: ``torch.cuda.max_memory_allocated`` minus the allocated bytes before the
call. On CPU, two measures: the allocator's count (:func:`profiled_call` with ``memory=True``:
every tensor allocation and free that PyTorch's CPU allocator reports to the profiler, added up
in time order), which is exact for tensors but blind to memory that libraries such as oneDNN
allocate themselves; and the rise of the process's peak resident set size (:func:`rss_peak_bytes`,
``VmHWM`` reset through ``/proc/self/clear_refs``), which sees everything but only to a few hundred
KiB, and only in a fresh process (:mod:`attention.bench.memprobe`).
"""

import contextlib
import math
import os
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypedDict, TypeVar

import torch
from torch.utils import benchmark

L2_FLUSH_BYTES = 256 * 1024**2
T = TypeVar("T")


@dataclass(frozen=True)
class Timing:
    """Seconds per call: median and interquartile range over ``repeats`` blocks of ``number`` calls."""

    median_s: float
    iqr_s: float
    repeats: int
    number: int
    method: str


def _quartiles(times: list[float]) -> tuple[float, float]:
    q1, _, q3 = statistics.quantiles(times, n=4, method="inclusive")
    return statistics.median(times), q3 - q1


def time_cpu(fn: Callable[[], object], estimate: float, repeats: int = 7, min_time: float = 0.3,
             max_time: float = 4.0) -> Timing:
    """Median and IQR of ``fn()`` on CPU, from ``Timer.blocked_autorange``.

    ``estimate`` is the duration of one earlier call, in seconds. The timer measures blocks of
    calls (as many per block as it takes to make the timer's own overhead negligible) for about
    ``repeats`` calls' worth of time, at least ``min_time`` and at most ``max_time`` seconds,
    except that a call slower than ``max_time / 3`` still gets 3 blocks.
    """
    if repeats < 3:
        raise ValueError(f"repeats must be at least 3 to give an IQR, got {repeats}")
    run_time = min(max(min_time, repeats * estimate), max(max_time, 3 * estimate))
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    measurement = timer.blocked_autorange(min_run_time=run_time)
    times = list(measurement.times)  # seconds per call, one value per block
    while len(times) < 3:  # calls slower than estimated: measure again for the missing blocks
        more = timer.blocked_autorange(min_run_time=(3 - len(times)) * measurement.median)
        times += more.times
    median, iqr = _quartiles(times)
    return Timing(median, iqr, len(times), measurement.number_per_run, "Timer.blocked_autorange")


def time_cuda(
    fn: Callable[[], object], estimate: float, repeats: int = 50, max_time: float = 6.0,
    warmup_s: float = 0.2, graph: bool = False,
) -> Timing:
    """Median and IQR of ``fn()`` on the current CUDA device: CUDA events, L2 flushed each call.

    ``estimate`` (seconds per call) sizes the warm-up (about ``warmup_s``, 2 to 10 calls) and
    lowers the repeats of a call so slow that ``repeats`` of them would take longer than
    ``max_time`` (never below 5).

    The events time the GPU from the first launch to the last, so the host's own work between
    launches (Python, autograd, a Triton launcher's argument handling) is inside the window
    whenever the GPU waits for it: a call short on the GPU times the host. With ``graph``, one
    call is captured in a CUDA graph after the warm-up, and the graph is replayed, one launch,
    between the events: the GPU's time alone. The call must then be capturable (no
    synchronization, no new autotuning, gradients that exist already).
    """
    if repeats < 3:
        raise ValueError(f"repeats must be at least 3 to give an IQR, got {repeats}")
    estimate = max(estimate, 1e-9)
    repeats = max(min(repeats, 5), min(repeats, int(max_time / estimate)))
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    for _ in range(max(2, min(10, math.ceil(warmup_s / estimate)))):
        fn()
    torch.cuda.synchronize()
    timed, method = fn, "CUDA events, 256 MiB L2 flush before each call"
    if graph:
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured):
            fn()
        timed, method = captured.replay, method + ", the call replayed from a CUDA graph"
    events = [tuple(torch.cuda.Event(enable_timing=True) for _ in range(2)) for _ in range(repeats)]
    for start, end in events:
        flush.zero_()
        start.record()
        timed()
        end.record()
    torch.cuda.synchronize()
    times = [start.elapsed_time(end) / 1e3 for start, end in events]
    median, iqr = _quartiles(times)
    return Timing(median, iqr, repeats, 1, method)


def cuda_peak_bytes(fn: Callable[[], object]) -> int:
    """Bytes allocated at the peak of one call of ``fn()`` beyond those allocated before it."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    result = fn()
    torch.cuda.synchronize()
    del result
    return torch.cuda.max_memory_allocated() - before


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field} line")


def rss_peak_bytes(fn: Callable[[], object]) -> int:
    """Rise of this process's peak resident set size during one call of ``fn()`` (Linux only).

    Honest only in a process whose allocator returns freed memory to the system: see
    :mod:`attention.bench.memprobe`, which runs it in a fresh process.
    """
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")  # reset VmHWM to the current VmRSS
    before = _status_kib("VmRSS")
    result = fn()
    peak = _status_kib("VmHWM")
    del result
    return max(0, peak - before) * 1024


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence file descriptor 2 (the profiler's C++ start/stop lines) for the block."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


_BACKEND_OPS = {
    "aten::_scaled_dot_product_flash_attention_for_cpu": "sdpa: flash (CPU kernel)",
    "aten::_scaled_dot_product_flash_attention": "sdpa: flash",
    "aten::_scaled_dot_product_efficient_attention": "sdpa: efficient",
    "aten::_scaled_dot_product_cudnn_attention": "sdpa: cuDNN",
    "aten::_scaled_dot_product_attention_math": "sdpa: math",
    "aten::_native_multi_head_attention": "nn.MultiheadAttention fast path",
}
PROFILED_LABELS = frozenset(_BACKEND_OPS.values())  # a row's backend read from the profiler


def _is_attention_op(name: str) -> bool:
    """An ATen attention or softmax op, a compiled region, or FlexAttention: the ops worth recording."""
    if name.startswith("aten::"):
        return "attention" in name or "softmax" in name
    return name.startswith(("Torch-Compiled Region", "FlexAttention"))


class Kernels(TypedDict):
    """What :func:`profiled_call` saw run (its docstring says what each key holds)."""

    sdpa_backend: str | None
    ops: list[str]
    compiled: bool
    gpu_kernels: int | None


def profiled_call(
    fn: Callable[[], T], memory: bool = False
) -> tuple[T, Kernels, float, int | None]:
    """Run ``fn()`` once under the profiler: its result, the kernels that ran, its duration and,
    with ``memory=True``, its peak of CPU tensor memory.

    The kernels are ``{"sdpa_backend": the fused kernel seen (or None), "ops": sorted
    attention-related op names, "compiled": whether a torch.compile region ran, "gpu_kernels":
    the number of GPU kernels the call launched (memory copies and fills not counted; None
    without CUDA)}``. The duration
    includes the profiler's overhead: it only sizes the timer's blocks. The peak is the largest
    number of bytes of tensor storage alive at once during the call, counted from the profiler's
    allocation and free events of PyTorch's CPU allocator, above what was alive before the call.
    The profiler's raw events are read directly: building its summary tables would take far
    longer than the call itself for a loop of many small operations.
    """
    activities = [torch.profiler.ProfilerActivity.CPU]
    cuda = torch.cuda.is_available()
    if cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with _quiet_stderr(), torch.profiler.profile(activities=activities, profile_memory=memory) as prof:
        start = time.perf_counter()
        result = fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
    names, allocations, gpu_kernels = set(), [], 0
    for event in prof.profiler.kineto_results.events():
        if event.name() == "[memory]":
            if event.device_type() == torch.profiler.DeviceType.CPU:
                allocations.append((event.start_ns(), event.nbytes()))  # > 0 allocated, < 0 freed
        elif event.device_type() == torch.profiler.DeviceType.CUDA:
            gpu_kernels += not event.name().startswith(("Memcpy", "Memset"))
        else:
            names.add(event.name())
    labels = [label for op, label in _BACKEND_OPS.items() if op in names]
    seen: Kernels = {
        "sdpa_backend": " + ".join(labels) if labels else None,
        "ops": sorted(n for n in names if _is_attention_op(n)),
        "compiled": any(n.startswith("Torch-Compiled Region") for n in names),
        "gpu_kernels": gpu_kernels if cuda else None,
    }
    return result, seen, seconds, _peak_alive(allocations) if memory else None


def _peak_alive(allocations: list[tuple[int, int]]) -> int:
    """Most bytes alive at once, from (time, +bytes allocated / -bytes freed) events."""
    alive = peak = 0
    for _, nbytes in sorted(allocations):
        alive += nbytes
        peak = max(peak, alive)
    return peak
