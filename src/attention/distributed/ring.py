"""Ring attention on a real process group: each rank holds one shard, K and V go round the ring.

Notation (see CONTRIBUTING.md): b batch size, h query heads, h_kv key-value heads (G = h / h_kv
queries per key-value head), t_shard tokens of a rank's shard (``c`` in the code), d_k and d_v
the widths of keys and values; N ranks, rank r, step l, lse a log-sum-exp.

The single-process simulator :func:`attention.ring.ring_attention` is the model; this is the
same algorithm with the devices made real. At step l rank r holds the key-value block of rank
(r - l) mod N. It posts the send of that block to rank r + 1 and the receive of the next one
from rank r - 1 (``batch_isend_irecv``), computes its queries against the block it holds while
they travel, and only then waits: communication overlaps the block's compute. Partials merge by
equation (11.8). The backward pass (FlashAttention-2's, tile by tile, with D = rowsum(dZ ⊙ Z)
and the final lse) sends the blocks round again, and with each block an accumulator of its dK
and dV: every rank adds its share and passes it on, and after N steps the accumulator arrives
complete at the rank that owns the block.
"""

import math
from collections.abc import Mapping, Sequence
from numbers import Integral
from typing import Any, NoReturn, cast

import torch
import torch.distributed as dist
from torch import Tensor
from torch.types import Device

from .._checks import accumulation_dtype, attention_kernel, check_counts, shape_or_type
from ..ring import SHARDINGS, Sharding, ring_shards
from ._common import agree, global_rank, merge, note

__all__ = ["ring_attention", "shard_positions", "shard_sequence"]


def shard_positions(lengths: Sequence[int], sharding: Sharding, device: Device = None) -> list[Tensor]:
    """The positions each rank's shard holds, from the shard lengths c of ranks 0 .. N - 1.

    ``"contiguous"``: rank r holds the c_r tokens after those of rank r - 1 (any lengths >= 1).
    ``"zigzag"``: the shards of :func:`attention.ring.ring_shards` (2N chunks of t, rank r holding
    chunks r and 2N - 1 - r).

    Args:
        lengths: the shard length c of each rank, in rank order (a list, a tuple or an array).
        sharding: ``"contiguous"`` or ``"zigzag"``.
        device: where the position tensors go.

    Returns:
        N int64 tensors of positions, one per rank.

    Raises:
        ValueError: if sharding is unknown, lengths is not a sequence, a length is not an
            integer >= 0, or zig-zag lengths are not those of ``ring_shards``.

    Examples:
        >>> shard_positions([3, 2], "contiguous")
        [tensor([0, 1, 2]), tensor([3, 4])]
    """
    if sharding not in SHARDINGS:
        raise ValueError(f"sharding must be one of {SHARDINGS}, got {sharding!r}")
    # a dict would be read by its keys, a str by its characters
    if isinstance(lengths, (str, Mapping)) or not hasattr(lengths, "__len__"):
        raise ValueError(f"lengths must be a sequence of shard lengths, one per rank, got {lengths!r}")
    check_counts(**{f"lengths[{r}]": n for r, n in enumerate(lengths)})
    lengths = [int(n) for n in lengths]  # a tuple or an array too: compared with a list below
    t, world = sum(lengths), len(lengths)
    if sharding == "contiguous":
        starts = [sum(lengths[:r]) for r in range(world)]
        return [torch.arange(s, s + n, device=device) for s, n in zip(starts, lengths)]
    if t < 2 * world:
        raise ValueError(f"zigzag sharding over N={world} ranks needs t >= {2 * world} tokens, got t={t}")
    shards = ring_shards(t, world, "zigzag")
    expected = [len(s) for s in shards]
    if lengths != expected:
        raise ValueError(f"zigzag sharding of t={t} tokens over N={world} ranks needs shard lengths "
                         f"{expected} (attention.ring.ring_shards), got {lengths}")
    return [s.to(device) for s in shards]


def shard_sequence(x: Tensor, rank: int, world_size: int, sharding: Sharding = "contiguous") -> Tensor:
    """Rank ``rank``'s shard of a whole sequence: the rows :func:`attention.ring.ring_shards`
    gives it.

    Args:
        x: the whole sequence (..., t, d).
        rank: the rank whose shard to take, from 0.
        world_size: N, the number of ranks.
        sharding: ``"contiguous"`` or ``"zigzag"``.

    Returns:
        The shard (..., c, d).

    Raises:
        ValueError: if x is not a tensor of at least 2 dimensions, ``ring_shards`` refuses t,
            N or the sharding, or rank is not an integer in [0, N).

    Examples:
        >>> shard_sequence(torch.arange(8.0)[:, None], 0, 2, "zigzag").flatten()
        tensor([0., 1., 6., 7.])
    """
    if not isinstance(x, Tensor) or x.dim() < 2:  # a 1-d x would be sharded along no axis
        raise ValueError(f"x must be a tensor (..., t, d), got {shape_or_type(x)}")
    shards = ring_shards(x.shape[-2], world_size, sharding)
    # a NumPy integer too, as every count of the package
    if isinstance(rank, bool) or not isinstance(rank, Integral) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be an integer in [0, {world_size}), got {rank!r}")
    positions = shards[rank]
    return x.index_select(-2, positions.to(x.device))  # (..., c, d)


Run = tuple[int, int, int]  # first local row, last + 1, first position


def _runs(positions: Tensor) -> list[Run]:
    """The contiguous runs of a shard: (first local row, last + 1, first position) for each."""
    breaks = [0, *((positions.diff() != 1).nonzero().flatten() + 1).tolist(), len(positions)]
    return [(lo, hi, int(positions[lo])) for lo, hi in zip(breaks, breaks[1:])]


Tile = tuple[slice, slice, Tensor | None]


def _tiles(
    q_runs: list[Run], k_runs: list[Run], is_causal: bool, device: torch.device
) -> list[Tile]:
    """The (query rows, key rows, mask) pairs of runs where some query sees some key; the mask
    (n_q, n_k) is None where every query sees every key. A zig-zag shard is two runs (one on rank
    N - 1, whose chunks N - 1 and N are adjacent), so a block splits into up to four tiles, of
    which causal attention skips the invisible ones whole; a tile that straddles the diagonal is
    computed whole and masked, so it costs its hidden pairs too."""
    tiles = []
    for q_lo, q_hi, q0 in q_runs:
        for k_lo, k_hi, k0 in k_runs:
            n_q, n_k = q_hi - q_lo, k_hi - k_lo
            if is_causal and k0 >= q0 + n_q:
                continue  # every key after every query
            mask = None
            if is_causal and k0 + n_k - 1 > q0:  # straddles the diagonal
                mask = (k0 + torch.arange(n_k, device=device))[None, :] <= (q0 + torch.arange(n_q, device=device))[:, None]
            tiles.append((slice(q_lo, q_hi), slice(k_lo, k_hi), mask))
    return tiles


def _expand(x: Tensor, groups: int) -> Tensor:
    """(b, h_kv, c, d) -> (b, h, c, d): each key-value head serves G query heads."""
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def _block_forward(q: Tensor, k: Tensor, v: Tensor, visible: Tensor | None, scale: float) -> tuple[Tensor, Tensor]:
    """Output (b, h, c_q, d_v), normalized over this block's keys, and its lse (b, h, c_q)."""
    groups = q.shape[1] // k.shape[1]
    s = q @ _expand(k, groups).transpose(-2, -1) * scale  # (b, h, c_q, c_k)
    if visible is not None:
        s = s.masked_fill(~visible, -math.inf)
    # the weights by the stable softmax, not exp(s - lse): past |s| = 2^24 a float32 lse cannot
    # hold log c_k, and keys tied at the top score would each weigh 1, summing the values
    m = s.amax(dim=-1, keepdim=True)  # (b, h, c_q, 1); -inf where a query sees none
    m = m.masked_fill(m == -math.inf, 0.0)
    p = torch.exp(s - m)  # (b, h, c_q, c_k)
    total = p.sum(dim=-1, keepdim=True)  # (b, h, c_q, 1); 0 where a query sees none
    lse = (m + total.log())[..., 0]  # (b, h, c_q); -inf where a query sees none of the block
    return p @ _expand(v, groups) / total.masked_fill(total == 0, 1.0), lse


def _block_backward(q: Tensor, k: Tensor, v: Tensor, d_out: Tensor, lse: Tensor, delta: Tensor,
                    visible: Tensor | None, scale: float) -> tuple[Tensor, Tensor, Tensor]:
    """FlashAttention-2's backward for one block: dQ (b, h, c_q, d_k), dK, dV (b, h_kv, c_k, d)."""
    b, h_kv, c_k, _ = k.shape
    groups = q.shape[1] // h_kv
    k_all, v_all = _expand(k, groups), _expand(v, groups)  # (b, h, c_k, d)
    s = q @ k_all.transpose(-2, -1) * scale  # (b, h, c_q, c_k)
    if visible is not None:
        s = s.masked_fill(~visible, -math.inf)
    p = torch.exp(s - lse[..., None])  # (b, h, c_q, c_k): the final weights, 0 where masked
    d_v = p.transpose(-2, -1) @ d_out  # (b, h, c_k, d_v)
    d_s = p * (d_out @ v_all.transpose(-2, -1) - delta[..., None])  # (b, h, c_q, c_k)
    d_q = d_s @ k_all * scale  # (b, h, c_q, d_k)
    d_k = d_s.transpose(-2, -1) @ q * scale  # (b, h, c_k, d_k)
    def fold(x: Tensor) -> Tensor:
        return x.view(b, h_kv, groups, c_k, x.shape[-1]).sum(dim=2)  # (b, h_kv, c_k, d)
    return d_q, fold(d_k), fold(d_v)


class _Ring:
    """The ring of one call: who sends to whom, and the posted transfers of a step."""

    def __init__(self, group: dist.ProcessGroup | None):
        self.group = group
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        self.next = global_rank(group, (self.rank + 1) % self.world)
        self.prev = global_rank(group, (self.rank - 1) % self.world)

    def pass_on(self, block: Tensor, incoming: Tensor) -> list[dist.Work]:
        """Post: send ``block`` to the next rank, receive ``incoming`` from the previous one."""
        note("p2p", block.numel() * block.element_size())
        ops = [dist.P2POp(dist.isend, block, self.next, self.group),
               dist.P2POp(dist.irecv, incoming, self.prev, self.group)]
        return dist.batch_isend_irecv(ops)


def _wait(requests: list[dist.Work]) -> None:
    for request in requests:
        request.wait()


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor, positions: list[Tensor],
                is_causal: bool, scale: float, group: dist.ProcessGroup | None) -> Tensor:
        ring = _Ring(group)
        acc = accumulation_dtype(q.dtype)
        d_k = k.shape[-1]
        q_acc = q.to(acc)
        block = torch.cat([k, v], dim=-1).contiguous()  # (b, h_kv, c, d_k + d_v): one message per step
        runs = [_runs(p) for p in positions]
        out = q_acc.new_zeros(*q.shape[:3], v.shape[-1])  # (b, h, c, d_v), merged over the blocks seen
        lse = q_acc.new_full(q.shape[:3], -math.inf)  # (b, h, c)
        for step in range(ring.world):
            source = (ring.rank - step) % ring.world  # whose block this rank holds now
            requests, incoming = [], None
            if step < ring.world - 1:  # post the next block's transfer before computing on this one
                nxt = (ring.rank - step - 1) % ring.world
                incoming = block.new_empty(*block.shape[:2], len(positions[nxt]), block.shape[-1])
                requests = ring.pass_on(block, incoming)
            kv = block.to(acc)
            for rows, cols, mask in _tiles(runs[ring.rank], runs[source], is_causal, q.device):
                partial = _block_forward(q_acc[..., rows, :], kv[..., cols, :d_k], kv[..., cols, d_k:], mask, scale)
                out[..., rows, :], lse[..., rows] = merge(out[..., rows, :], lse[..., rows], *partial)
            _wait(requests)
            block = cast(Tensor, incoming)  # None after the last step, when block is not read again
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.positions, ctx.runs, ctx.is_causal, ctx.scale, ctx.group = positions, runs, is_causal, scale, group
        return out.to(v.dtype)

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        grads = _RingAttentionBackward.apply(grad_out, *ctx.saved_tensors, ctx.positions, ctx.runs,
                                             ctx.is_causal, ctx.scale, ctx.group)
        return *grads, None, None, None, None


class _RingAttentionBackward(torch.autograd.Function):
    """The ring's backward as a graph node of its own, so that differentiating it raises, as
    flash_attention's does: the dK, dV that arrive from other ranks come through irecv, which
    autograd cannot follow, so it would differentiate only this rank's part, silently."""

    @staticmethod
    def forward(ctx: Any, grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor,
                lse: Tensor, positions: list[Tensor], runs: list[list[Run]], is_causal: bool,
                scale: float, group: dist.ProcessGroup | None) -> tuple[Tensor, Tensor, Tensor]:
        ring = _Ring(group)
        acc, d_k = out.dtype, k.shape[-1]
        q_acc, d_out = q.to(acc), grad_out.to(acc)
        delta = (d_out * out).sum(dim=-1)  # (b, h, c_q): D = rowsum(dZ ⊙ Z)
        d_q = torch.zeros_like(q_acc)
        block = torch.cat([k, v], dim=-1).contiguous()  # (b, h_kv, c, d_k + d_v)
        grads = torch.zeros(block.shape, dtype=acc, device=block.device)  # dK, dV so far of the block held
        arriving = grads  # the accumulator in flight from the previous rank
        pending: list[dist.Work] = []  # the requests of its transfer
        for step in range(ring.world):
            source = (ring.rank - step) % ring.world
            requests, incoming = [], None
            if step < ring.world - 1:
                nxt = (ring.rank - step - 1) % ring.world
                incoming = block.new_empty(*block.shape[:2], len(positions[nxt]), block.shape[-1])
                requests = ring.pass_on(block, incoming)
            tiles = _tiles(runs[ring.rank], runs[source], is_causal, q.device)
            own = None  # dK, dV of the block held, from this rank's tiles
            if tiles:
                own, kv = torch.zeros(block.shape, dtype=acc, device=block.device), block.to(acc)
                for rows, cols, mask in tiles:
                    dq, dk, dv = _block_backward(q_acc[..., rows, :], kv[..., cols, :d_k], kv[..., cols, d_k:],
                                                 d_out[..., rows, :], lse[..., rows], delta[..., rows], mask, scale)
                    d_q[..., rows, :] += dq
                    own[..., cols, :] += torch.cat([dk, dv], dim=-1)  # (b, h_kv, n_k, d_k + d_v)
            _wait(pending)  # this block's dK, dV from the ranks it met before this one
            grads = arriving if own is None else arriving + own
            if ring.world > 1:  # pass it on; the one arriving belongs to the next block held, and
                # after the last step it is this rank's own block, complete
                nxt = (ring.rank - step - 1) % ring.world
                arriving = grads.new_empty(*grads.shape[:2], len(positions[nxt]), grads.shape[-1])
                pending = ring.pass_on(grads, arriving)
            _wait(requests)
            block = cast(Tensor, incoming)  # None after the last step, when block is not read again
        _wait(pending)
        grads = arriving if ring.world > 1 else grads
        d_kv = grads  # (b, h_kv, c, d_k + d_v): this rank's own block, every rank's share summed
        return d_q.to(q.dtype), d_kv[..., :d_k].to(k.dtype), d_kv[..., d_k:].to(v.dtype)

    @staticmethod
    def backward(ctx: Any, *grads: Tensor | None) -> NoReturn:
        raise RuntimeError(
            "ring_attention has first derivatives only: its backward passes dK and dV round the "
            "ring, which autograd cannot differentiate; for second derivatives gather the "
            "sequence and use scaled_dot_product_attention"
        )


@attention_kernel
def ring_attention(query: Tensor, key: Tensor, value: Tensor, *, is_causal: bool = False,
                   sharding: Sharding = "contiguous", scale: float | None = None,
                   group: dist.ProcessGroup | None = None) -> Tensor:
    """Attention over a sequence sharded across the ranks of ``group``: this rank's output shard.

    Call it on every rank with that rank's shard; K and V travel round the ring (see the module
    docstring), and so does the backward pass, which every rank must run too. Half precision is
    computed in float32. Each block's partial is normalized by its own softmax, and partials
    merge through their lse, which for float32 and half inputs is a float32 number, with the
    limits :func:`attention.ring.ring_attention` states: past |s| = 2^24 keys tied at the top
    score in different blocks are weighed by block, not counted, and the backward, which
    recomputes P = exp(S - lse), weighs tied keys 1 each, as ``flash_attention``'s does.
    Gradients are first-order only: the backward is hand-written, so a
    second derivative raises a RuntimeError (on every rank) instead of returning a wrong value.

    Args:
        query: this rank's queries (b, h, c, d_k).
        key: its keys (b, h_kv, c, d_k); h_kv may divide h (grouped-query attention: the ring
            carries h_kv heads).
        value: its values (b, h_kv, c, d_v).
        is_causal: SDPA's causal mask, by position in the whole sequence.
        sharding: which positions each rank holds (:func:`shard_positions`): ``"contiguous"``
            shards of any lengths >= 1, or ``"zigzag"`` ones (those of
            ``attention.ring.ring_shards``).
        scale: the score scale, 1 / sqrt(d_k) by default.
        group: the process group, the default one if None.

    Returns:
        This rank's output shard (b, h, c, d_v).

    Raises:
        RuntimeError: if no process group is initialised.
        ValueError: on every rank, if any rank's input is malformed: an unknown sharding, an
            is_causal that is not a bool, a scale that is not None or a finite number, or
            tensors that do not agree; or if it differs from the others' in anything but c
            (dtype, heads, widths, is_causal, sharding, the scale, and whether gradients are
            taken), or a shard holds no token, or the shard lengths do not fit the sharding.
        TypeError: flash-attn's keywords and older names (``causal``, ``softmax_scale``,
            ``window_size``, ``causal_alignment``), with the keyword this function takes.

    Examples:
        >>> q = torch.randn(1, 2, 4, 8)  # outside torch.distributed: refused
        >>> ring_attention(q, q, q)
        Traceback (most recent call last):
            ...
        RuntimeError: ring_attention runs on every rank of a process group: ...
    """
    q, k, v = query, key, value
    known = sharding in SHARDINGS  # if not, refused in the exchange, on every rank
    lengths, scale = agree(q, k, v, is_causal=is_causal, sharding=SHARDINGS.index(sharding) if known else -1,
                           scale=scale, group=group, name="ring_attention",
                           refused=None if known else f"sharding must be one of {SHARDINGS}, got {sharding!r}")
    positions = shard_positions(lengths, sharding, q.device)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return _RingAttention.apply(q, k, v, positions, is_causal, scale, group)
