"""Peak memory of a CPU variant, in a fresh process: ``python -m attention.bench.memprobe SPEC``.

The parent (:func:`measure_in_subprocess`) starts this module with one JSON argument naming a
problem and a variant, and with glibc's mmap threshold pinned at 64 KiB
(``MALLOC_MMAP_THRESHOLD_``): every allocation above that is mapped on its own and unmapped when
freed, so the resident set size follows the tensors alive and nothing is served, unseen, from
memory an earlier call left behind. The answer is one JSON object on stdout.
"""

import gc
import json
import os
import subprocess
import sys

import torch

from .timing import profiled_call, rss_peak_bytes
from .variants import Problem, get_variant, make_call, make_inputs

MMAP_THRESHOLD = 64 * 1024


def problem_to_dict(problem: Problem) -> dict[str, object]:
    """A JSON-ready description of a CPU problem."""
    return {
        "level": problem.level, "b": problem.b, "t": problem.t, "h": problem.h, "d_h": problem.d_h,
        "dtype": str(problem.dtype).removeprefix("torch."), "backward": problem.backward,
    }


def measure_in_subprocess(
    problem: Problem, name: str, seed: int, timeout: float = 1800
) -> dict[str, object]:
    """Peak memory of one variant on ``problem``, measured in a fresh Python process.

    Returns ``{"rss_peak_bytes": int, "allocator_peak_bytes": int}``, or ``{"error": message}``.
    """
    if problem.device.type != "cpu":
        raise ValueError(f"memprobe measures CPU problems only, got device {problem.device}")
    spec = json.dumps({"problem": problem_to_dict(problem), "variant": name, "seed": seed,
                       "threads": torch.get_num_threads()})
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(MMAP_THRESHOLD))
    done = subprocess.run(
        [sys.executable, "-m", "attention.bench.memprobe", spec],
        capture_output=True, text=True, env=env, timeout=timeout,
    )
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["no message"]
        return {"error": f"memprobe exited with {done.returncode}: {tail[0]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> None:
    """Measure the variant named in the JSON spec ``argv[0]`` and print the JSON answer.

    Three calls: a warm-up (one-time buffers are not the call's working set), one measured by
    its resident memory, and one under the profiler for the allocator's count, which the profiler's
    own bookkeeping would have inflated had it run during the second.
    """
    spec = json.loads(argv[0])
    torch.set_num_threads(spec["threads"])
    p = spec["problem"]
    problem = Problem(p["level"], p["b"], p["t"], p["h"], p["d_h"], getattr(torch, p["dtype"]),
                      torch.device("cpu"), p["backward"])
    inputs = make_inputs(problem, spec["seed"])
    call = make_call(get_variant(spec["variant"]).build(problem, inputs), problem, inputs)
    call()
    gc.collect()
    rss = rss_peak_bytes(call)
    gc.collect()
    allocator = profiled_call(call, memory=True)[3]
    print(json.dumps({"rss_peak_bytes": rss, "allocator_peak_bytes": allocator}))


if __name__ == "__main__":
    main(sys.argv[1:])
