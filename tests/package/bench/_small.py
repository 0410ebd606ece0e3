"""The small CPU sweep that the tests of the linear and delta parts share: one t, one head width,
float32, a few quick repeats."""

import json
from pathlib import Path

import torch

from attention.bench.cli import main
from attention.bench.sweep import Settings

SMALL = Settings(device=torch.device("cpu"), levels=("kernel",), seq_lens=(24,), d_model=16, heads=2,
                 head_dims=(8,), tokens=48, batch=None, dtypes=("fp32",), passes=("forward",),
                 variants=None, compile=False, memory=False, repeats=3, min_time=0.001, max_time=0.05,
                 seed=0, progress=False)


def run_small(directory: Path, part: str, *options: str) -> dict:
    """The results file of ``python -m attention.bench`` run with SMALL's sizes on ``part``."""
    out = directory / f"{part}.json"
    main(["--device", "cpu", "--parts", part, "--seq-lens", "24", "--d-model", "16", "--heads", "2",
          "--head-dims", "8", "--tokens", "48", "--repeats", "3", "--min-time", "0.001", "--max-time", "0.05",
          *options, "--no-progress", "--output", str(out)])
    return json.loads(out.read_text())
