"""Named presets: a whole measurement sized to fit a short GPU slot, in one command.

A preset fixes the sweep's sequence lengths, timing effort and time budget, and cuts the sweep
into stages, most important first: bfloat16 (the GPU section's tables and plots), the compiled
variants at the shortest and longest t, then float16, then float32. The parts that are quick
and stand alone (peaks, goals, decoding) run before the sweep. Options given on the command line
override a preset's values.
"""

from dataclasses import dataclass

from .sweep import Stage


@dataclass(frozen=True)
class Preset:
    """What ``--preset NAME`` sets: see the module docstring."""

    name: str
    gpu_seq_lens: tuple[int, ...]
    cpu_seq_lens: tuple[int, ...]
    dtypes: tuple[str, ...]
    repeats: int
    max_time: float
    warmup_s: float
    time_budget_s: float
    decode_repeats: int
    decode_max_time: float

    def stages(self, seq_lens: tuple[int, ...], dtypes: tuple[str, ...]) -> tuple[Stage, ...]:
        """Eager variants in the first dtype, compiled ones at the shortest and longest of
        ``seq_lens``, then the other dtypes, eager."""
        first, *rest = dtypes
        ends = tuple(sorted({min(seq_lens), max(seq_lens)}))  # --seq-lens may come in any order
        return (Stage((first,), compiled=False), Stage((first,), ends, compiled=True),
                *(Stage((dtype,), compiled=False) for dtype in rest))


# Sized from the H200 runs (about 0.3 to 0.9 s a row at 20 repeats and 1 s at most, a compiled
# row several seconds): about 600 eager rows and 16 compiled ones fit in 7.5 minutes.
PRESETS = {
    "quick": Preset(
        name="quick", gpu_seq_lens=(1024, 2048, 4096, 8192, 16384), cpu_seq_lens=(128, 256, 512, 1024),
        dtypes=("bf16", "fp16", "fp32"), repeats=10, max_time=0.5, warmup_s=0.05, time_budget_s=450.0,
        decode_repeats=3, decode_max_time=10.0,
    ),
}
