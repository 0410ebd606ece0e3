"""Where a call of the Triton kernel spends its time at small t, on a GPU.

    python tools/gpu/profile_floor.py OUTPUT_DIR [--trace]

For the sweep's shape at t = 1024 (bfloat16, causal, b · t = 16,384, h · d_h = 768), d_h 64
and 128, it times each call below three ways and writes ``floor.json``:

- ``host_us``: the host's time per call, launches queued without waiting (the GPU keeps up);
- ``events_us``: CUDA events around each call after a 256 MiB L2 flush, as the bench does;
- ``graph_us``: the same call replayed from a CUDA graph (the GPU's time alone).

The calls: ``public`` (``triton_flash_attention``: checks, autograd, autotuner, launch),
``unchecked`` (``triton_forward.forward``: the autotuner and the launch), ``sdpa[flash]``, and
the public call and SDPA forward and backward as the bench runs them. Then, for d_h = 64,
``floor.txt`` lists the host's Python functions over 200 public calls (cProfile, slowest first)
and the torch profiler's CPU and CUDA tables over 20 forward and 20 forward+backward calls,
whose trace ``--trace`` writes to ``floor-trace.json``.
"""

import cProfile
import io
import json
import math
import pstats
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from attention.bench.provenance import command_line, provenance
from attention.bench.timing import time_cuda
from attention.triton_flash import triton_flash_attention
from attention.triton_forward import forward


def host_us(fn, calls: int = 200) -> float:
    """Host microseconds per call, with the calls queued back to back."""
    torch.cuda.synchronize()
    began = time.perf_counter()
    for _ in range(calls):
        fn()
    seconds = time.perf_counter() - began
    torch.cuda.synchronize()
    return seconds / calls * 1e6


def fwd_bwd(fn, grad_out):
    """The bench's forward+backward call: gradients accumulate into the inputs' ``.grad``."""
    def call():
        out = fn()
        out.backward(grad_out)
        return out.detach()
    return call


def profiled(fn, calls: int, trace: Path | None = None) -> str:
    """The torch profiler's CPU and CUDA table over ``calls`` calls (and its trace, if asked)."""
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    if trace is not None:
        prof.export_chrome_trace(str(trace))
    return prof.key_averages().table(sort_by="cpu_time_total", row_limit=30)


def main(out: Path, trace: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rows, t, report = [], 1024, []
    for d_h in (64, 128):
        b, h = 16384 // t, 768 // d_h
        q, k, v = (torch.randn(b, h, t, d_h, device="cuda", dtype=torch.bfloat16)
                   for _ in range(3))
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        for x in leaves:
            x.grad = torch.zeros_like(x)
        grad_out = torch.randn_like(q)
        scale = 1 / math.sqrt(d_h)

        def sdpa(q=q, k=k, v=v):
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        calls = {
            "public": lambda: triton_flash_attention(q, k, v, is_causal=True),
            "unchecked": lambda: forward(q, k, v, None, scale, True, 0, None, None,
                                         False, False, False),
            "sdpa[flash]": sdpa,
            "public fwd+bwd": fwd_bwd(lambda: triton_flash_attention(*leaves, is_causal=True),
                                      grad_out),
            "sdpa[flash] fwd+bwd": fwd_bwd(lambda: sdpa(*leaves), grad_out),
        }
        for name, fn in calls.items():
            fn()
            torch.cuda.synchronize()
            row = {"d_h": d_h, "t": t, "b": b, "h": h, "call": name, "host_us": host_us(fn)}
            for key, graph in (("events_us", False), ("graph_us", True)):
                try:
                    row[key] = time_cuda(fn, 1e-4, repeats=50, max_time=1.0,
                                         graph=graph).median_s * 1e6
                except Exception as error:  # a call that cannot be captured keeps its other rows
                    row[key] = f"{type(error).__name__}: {error}"
            print(json.dumps(row), flush=True)
            rows.append(row)
        if d_h == 64:
            profile = cProfile.Profile()
            profile.enable()
            host_us(calls["public"])
            profile.disable()
            text = io.StringIO()
            pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(40)
            report += ["cProfile, 200 public forward calls:", text.getvalue(),
                       "torch profiler, 20 public forward calls:", profiled(calls["public"], 20),
                       "torch profiler, 20 public forward+backward calls:",
                       profiled(calls["public fwd+bwd"], 20,
                                out / "floor-trace.json" if trace else None)]
            (out / "floor.txt").write_text("\n".join(report))
    record = {"provenance": provenance(torch.device("cuda"), command_line(None)), "rows": rows}
    (out / "floor.json").write_text(json.dumps(record, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "gpu-results"), "--trace" in sys.argv[2:])
