"""The IO model of Dao et al. (2022), simulated: the elements attention moves to and from memory.

A fast memory of ``m_sram`` elements (SRAM on a GPU, a cache on a CPU) sits in front of a slow
memory (HBM, main memory). Every number starts and ends in slow memory; arithmetic happens only
on numbers held in fast memory. The algorithms below do no arithmetic at all: they request blocks
of their matrices by shape ("load rows ``i0:i1`` of Q", "store this tile of the score matrix"),
and :class:`TwoLevelMemory` counts the elements read from and written to slow memory, and refuses
(``ValueError``) any request that would make the working set exceed ``m_sram``. Counting sizes
instead of values makes a run over ``t`` = 4096 tokens take milliseconds.

Notation (see CONTRIBUTING.md):
    t         tokens (queries and keys alike)
    d_h       head width (the paper's d)
    m_sram    fast-memory size in elements (the paper's M; M is the mask in this book)
    B_q, B_k  block sizes: B_q query rows and B_k key rows per tile (the paper's B_r, B_c);
              T_q^std, T_q^tiled = ceil(t / B_q) query blocks of standard and of tiled
              attention, each with its own B_q (standard_blocks, tiled_blocks)
    Q, K, V   (t, d_h) inputs; S = QK^T / sqrt(d_h) (t, t) scaled scores; A = softmax(S) (t, t);
              Z = AV (t, d_h)

Theorem 2 of Dao et al. (2022): standard attention makes Theta(t d_h + t^2) accesses to slow
memory, FlashAttention Theta(t^2 d_h^2 / m_sram) for d_h <= m_sram <= t d_h. The simulated
counts below reproduce both; their exact values are :func:`standard_io_formula` and
:func:`tiled_io_formula`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral

__all__ = [
    "IOCount",
    "TwoLevelMemory",
    "standard_attention_io",
    "standard_blocks",
    "standard_io_formula",
    "tiled_attention_io",
    "tiled_blocks",
    "tiled_io_formula",
]


@dataclass(frozen=True)
class IOCount:
    """Elements read from and written to slow memory, and the most fast memory ever held.

    Args:
        reads: elements read from slow memory.
        writes: elements written to slow memory.
        peak: the most elements held in fast memory at once.

    Examples:
        >>> IOCount(reads=10, writes=4).total
        14
    """

    reads: int
    writes: int
    peak: int = 0

    @property
    def total(self) -> int:
        """Reads plus writes: the paper's number of HBM accesses."""
        return self.reads + self.writes


class TwoLevelMemory:
    """A fast memory of ``m_sram`` elements in front of a slow memory, counting the traffic.

    ``load`` brings a block from slow memory (counted as reads), ``allocate`` makes room for a
    block computed on the spot (no traffic), ``store`` writes a held block to slow memory (counted
    as writes) and ``free`` drops blocks. Holding more than ``m_sram`` elements raises ValueError.

    Args:
        m_sram: capacity of the fast memory, in elements.

    Raises:
        ValueError: if m_sram is not an integer >= 1 (NumPy's are taken).

    Examples:
        >>> mem = TwoLevelMemory(m_sram=16)
        >>> mem.load("Q_i", 2, 4)
        >>> mem.allocate("O_i", 2, 4)
        >>> mem.store("O_i")
        >>> mem.count()
        IOCount(reads=8, writes=8, peak=16)
    """

    def __init__(self, m_sram: int) -> None:
        self.m_sram = _check_positive("m_sram", m_sram)
        self.held: dict[str, int] = {}  # block name -> elements
        self.reads = 0
        self.writes = 0
        self.peak = 0

    def load(self, name: str, rows: int, cols: int) -> None:
        """Read a (rows, cols) block from slow memory into fast memory.

        Raises:
            ValueError: as :meth:`allocate`.
        """
        self.allocate(name, rows, cols)
        self.reads += self.held[name]  # rows * cols, as Python ints

    def allocate(self, name: str, rows: int, cols: int) -> None:
        """Hold a (rows, cols) block computed in fast memory (an accumulator, a tile of scores).

        Raises:
            ValueError: if name is not a str, rows or cols is not an integer >= 1, or the block
                is already held or does not fit in m_sram.
        """
        _check_name(name)
        rows = _check_positive("rows", rows)  # a negative block would count negative traffic
        cols = _check_positive("cols", cols)
        if name in self.held:
            raise ValueError(f"block {name!r} is already held; free it first")
        used = sum(self.held.values()) + rows * cols
        if used > self.m_sram:
            raise ValueError(
                f"working set must fit in fast memory of m_sram={self.m_sram} elements, "
                f"got {used} elements with {name!r} ({rows} x {cols})"
            )
        self.held[name] = rows * cols
        self.peak = max(self.peak, used)

    def store(self, name: str) -> None:
        """Write a held block to slow memory; it stays held.

        Raises:
            ValueError: if name is not a str or the block is not held.
        """
        _check_name(name)
        if name not in self.held:
            raise ValueError(f"block {name!r} must be held to be stored; held: {sorted(self.held)}")
        self.writes += self.held[name]

    def free(self, *names: str) -> None:
        """Drop held blocks (no traffic: fast memory is simply reused).

        Raises:
            ValueError: if a name is not a str or a block is not held.
        """
        for name in names:
            _check_name(name)
            if name not in self.held:
                raise ValueError(f"block {name!r} must be held to be freed; held: {sorted(self.held)}")
            del self.held[name]

    def count(self) -> IOCount:
        """The traffic so far."""
        return IOCount(self.reads, self.writes, self.peak)


def _check_positive(name: str, value: int) -> int:
    """``value`` as a Python int if it is an integer >= 1, NumPy's among them: the counts
    multiply sizes (t * t, rows * cols), which would overflow silently in int64."""
    if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def _check_sizes(t: int, d_h: int, m_sram: int) -> tuple[int, int, int]:
    """(t, d_h, m_sram) as Python ints, each checked by :func:`_check_positive`."""
    return _check_positive("t", t), _check_positive("d_h", d_h), _check_positive("m_sram", m_sram)


def _check_name(name: object) -> None:
    """Require a block name that is a str (a list is unhashable: no dict key)."""
    if not isinstance(name, str):
        raise ValueError(f"block name must be a str, got {name!r} of type {type(name).__name__}")


def standard_blocks(t: int, d_h: int, m_sram: int) -> tuple[int, int]:
    """Tile sizes (B_q, B_k) of the two matrix products of standard attention.

    A tile holds a block of B_q rows of Q (or of Z), B_k rows of K (or of V) and the B_q x B_k
    tile of S (or of A): B_q d_h + B_k d_h + B_q B_k <= m_sram.
    B_k = min(t, d_h, m_sram // (2 d_h)), and B_q is the most rows that then fit, at most t.
    The softmax holds one row of t scores, so m_sram >= t is needed too.

    Args:
        t: number of tokens.
        d_h: width of a head.
        m_sram: capacity of the fast memory, in elements.

    Returns:
        (B_q, B_k).

    Raises:
        ValueError: if a size is not an integer >= 1, or m_sram is too small for one tile.

    Examples:
        >>> standard_blocks(t=64, d_h=8, m_sram=256)
        (12, 8)
    """
    t, d_h, m_sram = _check_sizes(t, d_h, m_sram)
    block_k = min(t, d_h, m_sram // (2 * d_h))
    block_q = min(t, (m_sram - block_k * d_h) // (d_h + block_k)) if block_k >= 1 else 0
    needed = max(2 * d_h + 1, t)  # one row each of Q, K and S; one row of S for the softmax
    if block_q < 1 or m_sram < t:
        raise ValueError(f"standard attention needs m_sram >= {needed} elements, got {m_sram}")
    return block_q, block_k


def tiled_blocks(t: int, d_h: int, m_sram: int) -> tuple[int, int]:
    """Tile sizes (B_q, B_k) of tiled attention: the most query rows per tile that fit.

    Fast memory holds Q_i and the accumulator O_i (B_q x d_h each), the running maximum m_i and
    sum l_i (B_q each), K_j and V_j (B_k x d_h each) and the B_q x B_k tile of S:
    2 B_q d_h + 2 B_q + 2 B_k d_h + B_q B_k <= m_sram. As in Dao et al. (2022), key tiles get
    B_k = min(t, d_h, m_sram // (4 d_h)) rows, a quarter of fast memory at most, and query tiles
    B_q = min(t, (m_sram - 2 B_k d_h) // (2 d_h + 2 + B_k)) rows: about m_sram / (3 d_h) once
    m_sram >> d_h^2. (The paper takes B_r = min(ceil(M / 4d), d) query rows and
    B_c = ceil(M / 4d) key rows in its key-outer loop order; here the roles swap, because the
    query-outer order re-reads K and V, and the re-read blocks should be few.)

    Arguments as in :func:`standard_blocks`.

    Returns:
        (B_q, B_k).

    Raises:
        ValueError: if a size is not an integer >= 1, or m_sram < 4 d_h + 3.

    Examples:
        >>> tiled_blocks(t=64, d_h=8, m_sram=256)
        (4, 8)
    """
    t, d_h, m_sram = _check_sizes(t, d_h, m_sram)
    block_k = min(t, d_h, m_sram // (4 * d_h))
    block_q = min(t, (m_sram - 2 * block_k * d_h) // (2 * d_h + 2 + block_k)) if block_k >= 1 else 0
    if block_q < 1:
        raise ValueError(f"tiled attention needs m_sram >= {4 * d_h + 3} elements, got {m_sram}")
    return block_q, block_k


def standard_attention_io(t: int, d_h: int, m_sram: int) -> IOCount:
    """Count the slow-memory traffic of standard attention (Dao et al., 2022, Algorithm 0).

    Three passes, each through slow memory: S = QK^T / sqrt(d_h) tile by tile, written out;
    A = softmax(S) one row at a time, read and written; Z = AV tile by tile, reading A and V.

    Arguments as in :func:`standard_blocks`.

    Returns:
        The reads, writes and peak of fast memory.

    Raises:
        ValueError: if a size is not an integer >= 1, or m_sram is too small for one tile.

    Examples:
        >>> standard_attention_io(t=64, d_h=8, m_sram=256)
        IOCount(reads=14848, writes=8704, peak=256)
    """
    t, d_h, m_sram = _check_sizes(t, d_h, m_sram)
    block_q, block_k = standard_blocks(t, d_h, m_sram)
    mem = TwoLevelMemory(m_sram)
    for q_start in range(0, t, block_q):  # 1. S = Q K^T
        rows = min(block_q, t - q_start)
        mem.load("Q_i", rows, d_h)  # (B_q, d_h)
        for k_start in range(0, t, block_k):
            cols = min(block_k, t - k_start)
            mem.load("K_j", cols, d_h)  # (B_k, d_h)
            mem.allocate("S_ij", rows, cols)  # (B_q, B_k) = Q_i K_j^T
            mem.store("S_ij")
            mem.free("K_j", "S_ij")
        mem.free("Q_i")
    for _ in range(t):  # 2. A = softmax(S), row by row, in place
        mem.load("S_row", 1, t)  # (1, t)
        mem.store("S_row")  # now a row of A
        mem.free("S_row")
    for q_start in range(0, t, block_q):  # 3. Z = A V
        rows = min(block_q, t - q_start)
        mem.allocate("Z_i", rows, d_h)  # (B_q, d_h) accumulator
        for k_start in range(0, t, block_k):
            cols = min(block_k, t - k_start)
            mem.load("A_ij", rows, cols)  # (B_q, B_k)
            mem.load("V_j", cols, d_h)  # (B_k, d_h)
            mem.free("A_ij", "V_j")
        mem.store("Z_i")
        mem.free("Z_i")
    return mem.count()


def tiled_attention_io(
    t: int, d_h: int, m_sram: int, block_size: int | tuple[int, int] | list[int] | None = None
) -> IOCount:
    """Count the slow-memory traffic of tiled attention in FlashAttention-2's loop order.

    For each block of B_q queries (outer loop) it walks over all blocks of B_k keys and values
    (inner loop), keeping Q_i, O_i, m_i and l_i in fast memory throughout; then it writes O_i and
    the log-sum-exp lse_i = m_i + log l_i (kept for the backward pass).

    Other arguments as in :func:`standard_blocks`.

    Args:
        block_size: B (B_q = B_k = B) or (B_q, B_k), a tuple or a list; by default
            :func:`tiled_blocks` chooses it from ``m_sram``.

    Returns:
        The reads, writes and peak of fast memory.

    Raises:
        ValueError: if a size is not an integer >= 1, block_size not one or a pair of them, or
            the tiles do not fit in m_sram.

    Examples:
        >>> tiled_attention_io(t=64, d_h=8, m_sram=256)
        IOCount(reads=16896, writes=576, peak=232)
    """
    t, d_h, m_sram = _check_sizes(t, d_h, m_sram)
    if block_size is None:
        block_q, block_k = tiled_blocks(t, d_h, m_sram)
    elif isinstance(block_size, (tuple, list)):  # a list pair as torch takes sizes
        if len(block_size) != 2:
            raise ValueError(f"block_size must be a positive int or a pair (B_q, B_k) of them, "
                             f"got {block_size!r}")
        block_q = _check_positive("block_size", block_size[0])
        block_k = _check_positive("block_size", block_size[1])
    else:
        block_q = block_k = _check_positive("block_size", block_size)
    mem = TwoLevelMemory(m_sram)
    for q_start in range(0, t, block_q):
        rows = min(block_q, t - q_start)
        mem.load("Q_i", rows, d_h)  # (B_q, d_h)
        mem.allocate("O_i", rows, d_h)  # (B_q, d_h) running output
        mem.allocate("m_i", rows, 1)  # (B_q, 1) running maximum
        mem.allocate("l_i", rows, 1)  # (B_q, 1) running sum
        for k_start in range(0, t, block_k):
            cols = min(block_k, t - k_start)
            mem.load("K_j", cols, d_h)  # (B_k, d_h)
            mem.load("V_j", cols, d_h)  # (B_k, d_h)
            mem.allocate("S_ij", rows, cols)  # (B_q, B_k) = Q_i K_j^T, used and dropped
            mem.free("K_j", "V_j", "S_ij")
        mem.store("O_i")  # O_i / l_i
        mem.store("l_i")  # now lse_i = m_i + log l_i
        mem.free("Q_i", "O_i", "m_i", "l_i")
    return mem.count()


def standard_io_formula(t: int, d_h: int, m_sram: int | None = None) -> int:
    """Exact total of :func:`standard_attention_io`: 2 t d_h (1 + T_q^std) + 4 t^2.

    T_q^std = ceil(t / B_q) with B_q from :func:`standard_blocks`. Pass 1 reads Q once (t d_h)
    and K once per query block (T_q^std t d_h) and writes S (t^2); pass 2 reads S and writes A
    (2 t^2); pass 3 reads A (t^2) and V once per query block (T_q^std t d_h) and writes Z
    (t d_h). With ``m_sram=None``, T_q^std = 1: the count when a query block holds all t rows,
    4 t d_h + 4 t^2, the Theta(t d_h + t^2) of Dao et al.'s Theorem 2.

    Other arguments as in :func:`standard_blocks`.

    Args:
        m_sram: capacity of the fast memory, in elements; None: one query block.

    Returns:
        Reads plus writes, in elements.

    Raises:
        ValueError: if a size is not an integer >= 1, or m_sram is too small for one tile.

    Examples:
        >>> standard_io_formula(t=64, d_h=8, m_sram=256) == standard_attention_io(64, 8, 256).total
        True
    """
    t, d_h = _check_positive("t", t), _check_positive("d_h", d_h)
    blocks_q = 1 if m_sram is None else math.ceil(t / standard_blocks(t, d_h, m_sram)[0])
    return 2 * t * d_h * (1 + blocks_q) + 4 * t * t


def tiled_io_formula(t: int, d_h: int, m_sram: int) -> int:
    """Exact total of :func:`tiled_attention_io`, default blocks: 2 t d_h (1 + T_q^tiled) + t.

    T_q^tiled = ceil(t / B_q) with B_q from :func:`tiled_blocks`. Q is read once and Z written
    once (2 t d_h), lse written once (t), K and V read once per query block (2 t d_h T_q^tiled).
    With B_q ~ m_sram / (3 d_h), T_q^tiled ~ 3 t d_h / m_sram and the total is about
    6 t^2 d_h^2 / m_sram: Theorem 2's Theta(t^2 d_h^2 / m_sram). Once
    m_sram >= t (3 d_h + 2) + 2 d_h^2, one query block holds everything and the total stops
    falling, at 4 t d_h + t: each input read once, the output written once.

    Arguments as in :func:`standard_blocks`.

    Returns:
        Reads plus writes, in elements.

    Raises:
        ValueError: if a size is not an integer >= 1, or m_sram < 4 d_h + 3.

    Examples:
        >>> tiled_io_formula(t=64, d_h=8, m_sram=256) == tiled_attention_io(64, 8, 256).total
        True
    """
    t, d_h, m_sram = _check_sizes(t, d_h, m_sram)
    blocks_q = math.ceil(t / tiled_blocks(t, d_h, m_sram)[0])
    return 2 * t * d_h * (1 + blocks_q) + t
