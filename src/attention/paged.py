"""A paged KV cache: many sequences in fixed-size blocks of one shared pool (vLLM's PagedAttention,
Kwon et al. 2023).

Notation (see CONTRIBUTING.md):
    t      number of new tokens in one call
    h_kv   key/value heads, d_h width of one head
    p      position of a token in its sequence (from 0)

A contiguous cache reserves the longest length (or the model's context) for every sequence. A
paged cache gives each sequence a block table instead, the list of its blocks in order, and takes
a free block only when the sequence's last one is full, so at most ``block_size - 1`` slots per
sequence are unused; blocks return to the pool when a sequence ends. A :class:`PagedSequence`
is one sequence's view, with the ``length`` and ``append`` of every cache of
:mod:`attention.kv_cache`.
"""

from numbers import Integral

import torch
from torch import Tensor
from torch.types import Device

from ._checks import check_sizes
from .kv_cache import check_chunk

__all__ = ["PagedKVCache", "PagedSequence"]


class PagedKVCache:
    """Keys and values of many sequences in one pool of fixed-size blocks (PagedAttention).

    The pool holds ``num_blocks`` blocks of ``block_size`` tokens, (num_blocks, h_kv,
    block_size, d_h) for keys and for values. Each sequence has a block table, the list of its
    blocks in order: token p of the sequence is in block ``table[p // block_size]`` at offset
    ``p % block_size``. A sequence takes a free block only when its last one is full, so at most
    block_size - 1 slots per sequence are unused, and blocks return to the pool when it ends.
    A new pool has every block free and no sequence.

    Args:
        num_blocks: blocks in the pool.
        block_size: tokens per block.
        num_kv_heads: h_kv, key/value heads.
        d_h: width of one head.
        dtype: dtype of the pool (torch's default if None).
        device: device of the pool.

    Raises:
        ValueError: if a size is not an integer >= 1.

    Examples:
        >>> pool = PagedKVCache(num_blocks=4, block_size=2, num_kv_heads=1, d_h=2)
        >>> seq = pool.add_sequence()
        >>> keys, values = pool.append(seq, torch.ones(1, 1, 3, 2), torch.ones(1, 1, 3, 2))
        >>> keys.shape, pool.block_tables[seq], pool.free_blocks
        (torch.Size([1, 1, 3, 2]), [0, 1], [2, 3])
    """

    def __init__(
        self, num_blocks: int, block_size: int, num_kv_heads: int, d_h: int,
        dtype: torch.dtype | None = None, device: Device = None,
    ) -> None:
        check_sizes(
            num_blocks=num_blocks, block_size=block_size, num_kv_heads=num_kv_heads, d_h=d_h
        )
        self.block_size = block_size
        shape = (num_blocks, num_kv_heads, block_size, d_h)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)  # (blocks, h_kv, size, d_h)
        self.values = torch.zeros(shape, dtype=dtype, device=device)
        self.free_blocks = list(range(num_blocks))
        self.block_tables: dict[int, list[int]] = {}  # sequence id -> its blocks, in order
        self.lengths: dict[int, int] = {}  # sequence id -> tokens stored
        self._next_id = 0

    @property
    def nbytes(self) -> int:
        """Bytes of the whole pool of keys and values."""
        return self.keys.nbytes + self.values.nbytes

    def add_sequence(self) -> int:
        """Start a sequence with no tokens and no blocks; return its id."""
        seq, self._next_id = self._next_id, self._next_id + 1
        self.block_tables[seq], self.lengths[seq] = [], 0
        return seq

    def _check_sequence(self, seq: int) -> None:
        # an integer id: 0.0 and False hash as 0 and would find sequence 0
        if isinstance(seq, bool) or not isinstance(seq, Integral) or seq not in self.block_tables:
            raise ValueError(
                f"seq must be one of the sequences {sorted(self.block_tables)}, got {seq!r}"
            )

    def append(self, seq: int, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Store keys, values (1, h_kv, t, d_h) of sequence ``seq``; return all of its tokens.

        The result, (1, h_kv, n + t, d_h) each, is gathered from the sequence's blocks: a copy,
        equal to what a contiguous :class:`KVCache` returns.

        Raises:
            ValueError: if seq is not a sequence of the pool, keys or values are not (1, h_kv, t,
                d_h) of its dtype and device, or the pool has too few free blocks.
        """
        self._check_sequence(seq)
        _, h_kv, size, d_h = self.keys.shape
        check_chunk(keys, values, (1, h_kv, d_h), self.keys)
        table, n, t = self.block_tables[seq], self.lengths[seq], keys.shape[2]
        needed = -(-(n + t) // size) - len(table)  # blocks to add: ceil((n + t) / size) - held
        if needed > len(self.free_blocks):
            raise ValueError(
                f"the pool has {len(self.free_blocks)} free blocks, sequence {seq} needs {needed}"
            )
        table += [self.free_blocks.pop(0) for _ in range(needed)]
        positions = torch.arange(n, n + t, device=self.keys.device)  # (t,)
        # long even for an empty table: torch.tensor([]) is float, which cannot index
        blocks = torch.tensor(table, device=self.keys.device, dtype=torch.long)[positions // size]  # (t,)
        self.keys[blocks, :, positions % size] = keys[0].transpose(0, 1)  # (t, h_kv, d_h)
        self.values[blocks, :, positions % size] = values[0].transpose(0, 1)
        self.lengths[seq] = n + t
        return self.gather(seq)

    def gather(self, seq: int) -> tuple[Tensor, Tensor]:
        """Keys and values (1, h_kv, n, d_h) of sequence ``seq``, read through its block table."""
        self._check_sequence(seq)
        n, size = self.lengths[seq], self.block_size
        positions = torch.arange(n, device=self.keys.device)  # (n,)
        blocks = torch.tensor(self.block_tables[seq], device=self.keys.device, dtype=torch.long)
        blocks = blocks[positions // size]  # (n,)
        keys = self.keys[blocks, :, positions % size].transpose(0, 1)  # (h_kv, n, d_h)
        values = self.values[blocks, :, positions % size].transpose(0, 1)
        return keys[None], values[None]  # (1, h_kv, n, d_h) each

    def free(self, seq: int) -> None:
        """End sequence ``seq``: its blocks go back to the pool."""
        self._check_sequence(seq)
        self.free_blocks += self.block_tables.pop(seq)
        del self.lengths[seq]

    def to(
        self, device: Device = None, dtype: torch.dtype | None = None
    ) -> "PagedKVCache":
        """Move the pool to ``device`` and ``dtype``, in place (the block tables are positions,
        not tensors); returns the pool."""
        self.keys = self.keys.to(device=device, dtype=dtype)
        self.values = self.values.to(device=device, dtype=dtype)
        return self

    def sequence(self, seq: int) -> "PagedSequence":
        """Sequence ``seq`` seen as a one-sequence cache that attention layers accept."""
        return PagedSequence(self, seq)  # which checks seq


class PagedSequence:
    """One sequence of a :class:`PagedKVCache`, with the ``length`` and ``append`` of a cache.

    Args:
        pool: the pool that stores the sequence.
        seq: the sequence's id, from :meth:`PagedKVCache.add_sequence`.

    Raises:
        ValueError: if pool is not a PagedKVCache or seq is not one of its sequences (added and
            not freed).

    Examples:
        >>> pool = PagedKVCache(num_blocks=2, block_size=4, num_kv_heads=1, d_h=2)
        >>> view = pool.sequence(pool.add_sequence())
        >>> _ = view.append(torch.ones(1, 1, 3, 2), torch.ones(1, 1, 3, 2))
        >>> view.length
        3
    """

    def __init__(self, pool: PagedKVCache, seq: int) -> None:
        if not isinstance(pool, PagedKVCache):  # its length and append read the pool's
            raise ValueError(f"pool must be a PagedKVCache, got {type(pool).__name__}")
        pool._check_sequence(seq)  # here, not at the first length or append far from this call
        self.pool, self.seq = pool, seq

    @property
    def length(self) -> int:
        """Tokens stored for this sequence (a ValueError once the sequence is freed)."""
        self.pool._check_sequence(self.seq)
        return self.pool.lengths[self.seq]

    def append(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """As :meth:`PagedKVCache.append` for this sequence."""
        return self.pool.append(self.seq, keys, values)
