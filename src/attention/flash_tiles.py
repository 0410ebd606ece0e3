"""The tiles of :func:`attention.flash_attention`: which keys each block of queries sees, the
masks of the tiles that cross an edge (built once per shape), and the in-place tile products.

Notation (see CONTRIBUTING.md): t_q / t_k queries / keys, n_q / n_k rows of a query / key tile,
g query heads per key-value head (grouped-query attention), N batch and key-value heads
together. A query block's visible keys are [lo, hi); tiles wholly below the diagonal (and inside
the window) need no mask, tiles wholly above it are never formed, and only the tiles that cross
an edge are masked, with a bias of 0 and -inf. The masks are those of :mod:`attention.masks`'
rules.
"""

import torch
from torch import Tensor
from torch.types import Device

from . import masks


class Tiles:
    """Which keys each query may see, tile by tile; builds each distinct mask only once.

    Args:
        offset: None without causality, else the position of query 0 (query i sits at
            i + offset).
        window: None or w, the number of latest keys a query sees.
        device: where the masks are built.

    Examples:
        >>> tiles = Tiles(offset=0, window=None, device=torch.device("cpu"))
        >>> tiles.key_range(q_start=4, n_q=2, t_k=8)  # rows 4 and 5 see keys 0 .. 5
        (0, 6)
        >>> tiles.hidden(4, 2, 4, 2)  # the diagonal tile
        tensor([[False,  True],
                [False, False]])
    """

    def __init__(self, offset: int | None, window: int | None, device: Device) -> None:
        self.offset, self.window, self.device = offset, window, device
        self.masks: dict[tuple[int, int, int], Tensor] = {}
        self.biases: dict[tuple[int, int, int, torch.dtype], Tensor] = {}
        self.exact = False  # set once a hidden score was nan or +inf: fill, do not add, then

    def key_range(self, q_start: int, n_q: int, t_k: int) -> tuple[int, int]:
        """Keys [lo, hi) that at least one query of the block q_start .. q_start + n_q - 1
        sees."""
        if self.offset is None:
            return 0, t_k
        hi = min(t_k, q_start + n_q + self.offset)  # past the last row's diagonal
        lo = 0 if self.window is None else max(0, q_start + self.offset - self.window + 1)
        return lo, max(lo, hi)

    def hidden(self, q_start: int, n_q: int, k_start: int, n_k: int) -> Tensor | None:
        """(n_q, n_k), True where the query may not see the key; None when it sees them all."""
        if self.offset is None:
            return None
        first, last = q_start + self.offset, q_start + n_q - 1 + self.offset  # row positions
        below_diagonal = k_start + n_k - 1 <= first
        inside_window = self.window is None or k_start > last - self.window
        if below_diagonal and inside_window:
            return None
        key = (first - k_start, n_q, n_k)
        if key not in self.masks:  # row r, column c: query first + r, key k_start + c
            rule = masks.causal() if self.window is None else masks.sliding_window(self.window)
            query_pos = torch.arange(first, first + n_q, device=self.device)  # (n_q,)
            key_pos = torch.arange(k_start, k_start + n_k, device=self.device)  # (n_k,)
            self.masks[key] = ~masks.visible(rule, query_pos, key_pos)  # (n_q, n_k)
        return self.masks[key]

    def mask_(self, s: Tensor, q_start: int, n_q: int, k_start: int, n_k: int) -> bool:
        """Sets the scores s (N, g n_q, n_k) that the queries may not see to -inf, in place.

        Adds a bias of 0 or -inf, which is about ten times faster on a CPU than
        ``masked_fill_``; the two differ only where a hidden score is nan or +inf, which the
        bias turns into nan. So the forward pass checks each biased tile (see
        ``_flash_forward``) and sets ``exact`` if it met one; from then on the mask is filled
        in. Returns whether a bias was added.
        """
        hide = self.hidden(q_start, n_q, k_start, n_k)
        if hide is None:
            return False
        s = s.view(s.shape[0], s.shape[1] // n_q, n_q, n_k)  # (N, g, n_q, n_k)
        if self.exact:
            s.masked_fill_(hide, float("-inf"))
            return False
        key = (q_start + (self.offset or 0) - k_start, n_q, n_k, s.dtype)
        if key not in self.biases:
            self.biases[key] = torch.zeros(
                hide.shape, dtype=s.dtype, device=s.device
            ).masked_fill_(hide, float("-inf"))  # (n_q, n_k)
        s.add_(self.biases[key])
        return True


def key_blocks(lo: int, hi: int, block_k: int) -> list[tuple[int, int]]:
    """(k_start, n_k) covering keys [lo, hi), full blocks laid backwards from hi.

    Args:
        lo: first key.
        hi: one past the last key.
        block_k: rows of a full key block.

    Returns:
        The blocks, from hi backwards; only the last one (nearest lo) may be short.

    Examples:
        >>> key_blocks(0, 10, 4)
        [(6, 4), (2, 4), (0, 2)]
    """
    starts = [(max(lo, end - block_k), end) for end in range(hi, lo, -block_k)]
    return [(start, end - start) for start, end in starts]


def tile_view(buffer: Tensor, n: int, rows: int, cols: int) -> Tensor:
    """A contiguous (n, rows, cols) tile in the front of the 1-d ``buffer``.

    Every tile of a pass is written into the same memory: a new 3 MB tensor per tile would be
    allocated and freed dozens of times per call, and the C library's allocator now and then
    hands such a block back to the operating system, so that the next one costs page faults.

    Args:
        buffer: 1-d memory of at least n · rows · cols numbers.
        n: batch of the tile.
        rows: its rows.
        cols: its columns.

    Returns:
        A view (n, rows, cols) of the buffer's front.

    Examples:
        >>> tile_view(torch.arange(10.0), 1, 2, 3)
        tensor([[[0., 1., 2.],
                 [3., 4., 5.]]])
    """
    return buffer[: n * rows * cols].view(n, rows, cols)


def score_tile(
    q_blk: Tensor, k_blk: Tensor, tiles: Tiles, out: Tensor, *where: int
) -> tuple[Tensor, bool]:
    """Scores of one block of (already scaled) queries against one key block; -inf where hidden.

    Args:
        q_blk: (N, g n_q, d_k), the g query heads of each key-value head as stacked rows.
        k_blk: (N, n_k, d_k).
        tiles: the masks of the call.
        out: (N, g n_q, n_k), where the scores are written.
        *where: (q_start, n_q, k_start, n_k).

    Returns:
        (scores, biased): the scores (``out``), and whether a bias hid some of them.

    Examples:
        >>> tiles = Tiles(offset=0, window=None, device=torch.device("cpu"))
        >>> q = k = torch.ones(1, 2, 1)  # N = 1, g = 1, n_q = n_k = 2, d_k = 1
        >>> score_tile(q, k, tiles, torch.empty(1, 2, 2), 0, 2, 0, 2)
        (tensor([[[1., -inf],
                 [1., 1.]]]), True)
    """
    s = torch.bmm(q_blk, k_blk.transpose(1, 2), out=out)  # (N, g n_q, n_k)
    return s, tiles.mask_(s, *where)


def add_product_(acc: Tensor, a: Tensor, b: Tensor) -> None:
    """acc += a @ b in place, batched; with ``out=`` since FlopCounterMode skips ``baddbmm_``.

    Args:
        acc: the accumulator (N, n, m), changed in place.
        a: (N, n, k).
        b: (N, k, m).

    Examples:
        >>> acc = torch.ones(1, 1, 1)
        >>> add_product_(acc, torch.full((1, 1, 2), 2.0), torch.ones(1, 2, 1))
        >>> acc
        tensor([[[5.]]])
    """
    torch.baddbmm(acc, a, b, out=acc)
