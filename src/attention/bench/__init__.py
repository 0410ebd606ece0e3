"""Benchmark harness for the appendix: ``python -m attention.bench --help``.

Notation (see CONTRIBUTING.md): b batch size, t tokens, h heads, d_h head width, d = h * d_h
model width (d_in = d_out = d).

The harness measures; the models it compares the measurements with are teaching code of chapter
7 and live in the package: :mod:`attention.flops` (FLOP counts, documented device peaks and
bandwidths) and :mod:`attention.roofline` (lower-bound bytes, arithmetic intensity, the roof).

Modules, in the order a measurement flows through them:

- :mod:`~attention.bench.variants`: the implementations, at two levels (whole layers, bare
  attention kernels), and the float64 reference each is checked against before it is timed;
- :mod:`~attention.bench.timing`: timers (torch.utils.benchmark on CPU, CUDA events with an L2
  flush on GPU), peak memory, and the profiler check of which kernel actually ran;
- :mod:`~attention.bench.memprobe`: peak resident memory on CPU, in a fresh process (memory goal);
- :mod:`~attention.bench.peaks`: this machine's peaks, measured (``torch.mm``, STREAM copy and triad);
- :mod:`~attention.bench.sweep`, :mod:`~attention.bench.goals`: the sweep, and the goals it is
  held to (speed of the fused layer, memory and speed of ``flash_attention``);
- :mod:`~attention.bench.presets`: ``--preset quick``, a whole measurement for a short GPU slot;
- :mod:`~attention.bench.store`, :mod:`~attention.bench.merge`: results files written atomically,
  and merged when one device's measurements come in several runs;
- :mod:`~attention.bench.decode`: greedy decoding with and without the KV cache;
- :mod:`~attention.bench.linear`: linear attention's three forms against softmax attention over t;
- :mod:`~attention.bench.distributed`: ring and Ulysses attention on 2 and 4 gloo processes of this CPU;
- :mod:`~attention.bench.provenance`, :mod:`~attention.bench.schema`: what a results file
  records about its run, and the validator of its shape;
- :mod:`~attention.bench.parts`: the parts of a run (peaks, goals, decode, sweep, masks, linear),
  each one record that the command line, the schema, the merge and the appendix loop over;
- :mod:`~attention.bench.cli`: the command line.
"""

from ..flops import attention_flops, device_peak, projection_flops
from .schema import validate_results

__all__ = ["attention_flops", "device_peak", "projection_flops", "validate_results"]
