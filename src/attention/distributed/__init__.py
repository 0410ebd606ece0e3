"""Context parallelism on ``torch.distributed``: one sequence sharded across the ranks of a group.

Notation (see CONTRIBUTING.md): b batch size, h query heads, h_kv key-value heads, t tokens of
the whole sequence, t_shard tokens of one rank's shard (``c`` in the code); N ranks.

- :func:`ring_attention`: keys and values travel round a ring of point-to-point sends, overlapped
  with each block's compute (Liu et al., 2023), forward and backward; contiguous or zig-zag shards.
- :func:`ulysses_attention`: all-to-alls (q, k and v in, the output back) trade the sequence
  shard for a head shard (DeepSpeed-Ulysses, Jacobs et al., 2023).
- :func:`shard_sequence` cuts a whole sequence into a rank's shard; :func:`count_traffic`
  (:mod:`attention.distributed.traffic`) counts the bytes a rank sends.

Every rank calls the same function with its own shard; any backend works (gloo on CPUs, NCCL on
GPUs). ``python -m torch.distributed.run --nproc-per-node 4 -m attention.distributed.demo`` runs
both. The single-process simulator :func:`attention.ring.ring_attention` shares the name of the
ring here: the top-level ``attention.ring_attention`` stays the simulator, and the real one is
reached through the package, ``attention.distributed.ring_attention``.
"""

from .ring import ring_attention, shard_positions, shard_sequence
from .traffic import Traffic, count_traffic
from .ulysses import ulysses_attention

__all__ = ["Traffic", "count_traffic", "ring_attention", "shard_positions", "shard_sequence",
           "ulysses_attention"]
