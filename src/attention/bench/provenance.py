"""Where and how a benchmark ran: hardware, software versions, settings, date and command.

Every results file carries this record so that a number on the appendix page can always be
traced to the machine, the library versions and the exact command that produced it.
"""

import datetime
import importlib.metadata
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

import torch

_REPO = Path(__file__).resolve().parents[3]


def _run(*command: str) -> str | None:
    """stdout of a command, stripped, or None when it is missing or fails."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def git_commit() -> dict[str, object]:
    """The checkout's commit and whether tracked files differ from it (None outside git).

    A copy of the tree sent to another machine may carry no ``.git``, or a stale one: the
    environment variable ``ATTENTION_COMMIT`` then names the commit, and the record says so. If
    ``python -m book.tree check`` found every file of the copy equal to that commit's, the
    caller says so in ``ATTENTION_TREE_CHECKED`` (the record it checked against), and the
    tree counts as clean.
    """
    if os.environ.get("ATTENTION_COMMIT"):
        if os.environ.get("ATTENTION_TREE_CHECKED"):
            return {"commit": os.environ["ATTENTION_COMMIT"], "dirty": False,
                    "source": "a copy of the tree, every file checked against the commit's blob hashes "
                              f"(python -m book.tree check {os.environ['ATTENTION_TREE_CHECKED']})"}
        return {"commit": os.environ["ATTENTION_COMMIT"], "dirty": None,
                "source": "the environment variable ATTENTION_COMMIT (a copy of the tree)"}
    commit = _run("git", "-C", str(_REPO), "rev-parse", "HEAD")
    status = _run("git", "-C", str(_REPO), "status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def load_average() -> list[float]:
    """1, 5 and 15 minute load averages: a busy machine makes timings slower and noisier."""
    return [round(x, 2) for x in os.getloadavg()]


def command_line(argv: list[str] | None) -> str:
    """The command as typed: this process's own, or ``python -m attention.bench`` with ``argv``."""
    if argv is None:
        return shlex.join(sys.orig_argv)
    return shlex.join(["python", "-m", "attention.bench", *argv])


def provenance(device: torch.device, command: str) -> dict[str, object]:
    """Hardware, versions, thread count, TF32 settings, date and command of this run."""
    record: dict[str, object] = {
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": command,
        "git": git_commit(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "triton": _version("triton"),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)),
        "torch_threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "device_type": device.type,
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        record |= {
            "device_name": props.name,
            "device_memory_bytes": props.total_memory,
            "compute_capability": f"{props.major}.{props.minor}",
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
            "driver": _run("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"),
            "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
            "tf32_cudnn": torch.backends.cudnn.allow_tf32,
        }
    else:
        record["device_name"] = _cpu_model()
    return record
