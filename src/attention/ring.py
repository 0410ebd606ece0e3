"""Ring attention (Liu et al., 2023), simulated in one process: attention across N devices.

Notation (see CONTRIBUTING.md): ``...`` leading batch dimensions (b, h), t tokens, d_k and d_v
the widths of keys and values, d_h = d_k = d_v in the counts; N = ``world_size`` devices,
t_shard = t / N tokens per device (``c`` in the code), r a device and l a step of the ring,
both counted from 0; lse a log-sum-exp; J and J' two disjoint sets of keys.

The sequence is cut into N shards; device r holds the queries, keys and values of its shard.
Keys and values travel round the ring: at step l device r holds the key-value block of device
(r - l) mod N, attends its queries to it, and passes it on to device r + 1 while it receives the
next one. Each step gives a partial output Z and its lse for the block's keys, and the
partials are merged with the online-softmax rule of chapter 7 (equation 7.8, with the outputs
kept normalized; equation 11.8):

    lse = log(exp(lse_J) + exp(lse_J')),    Z = exp(lse_J - lse) Z_J + exp(lse_J' - lse) Z_J'.

After N steps each device holds exact attention for its queries. With causal attention, the
block of a later device is useless to an earlier one: with contiguous shards device 0 then idles for
N - 1 steps while device N - 1 works at every one. *Zig-zag* sharding cuts the sequence into 2N
chunks and gives device r chunks r and 2N - 1 - r (one early, one late), so that every device
attends as many visible pairs as every other at every step (as in zhuzilin/ring-flash-attention's
``zigzag_ring_flash_attn`` and Llama 3's context parallelism). Striped Attention (Brandon et al.,
2023) balances the ring differently: it deals the tokens out round-robin, device r holding
positions r, r + N, r + 2N, ...

:func:`ring_work` counts the visible score pairs each device attends at each step;
:func:`ring_attention_io` counts, with the two-level memory of :mod:`attention.io_model`, the
numbers one device receives and sends, and the memory that overlapping them with compute needs.
"""

import math
from typing import Literal, get_args

import torch
from torch import Tensor

from . import masks
from ._checks import (
    accumulation_dtype,
    attention_kernel,
    check_batch_dims,
    check_flags,
    check_qkv,
    check_scale,
    check_sizes,
)
from .flash import flash_attention
from .io_model import IOCount, TwoLevelMemory

__all__ = ["ring_attention", "ring_attention_io", "ring_shards", "ring_work"]

Sharding = Literal["contiguous", "zigzag"]
SHARDINGS: tuple[Sharding, ...] = get_args(Sharding)


def ring_shards(t: int, world_size: int, sharding: Sharding = "contiguous") -> list[Tensor]:
    """The positions each of the N devices holds: N int64 tensors, together 0 .. t - 1.

    ``"contiguous"``: device r holds chunk r of N. ``"zigzag"``: the sequence is cut into 2N
    chunks and device r holds chunks r and 2N - 1 - r. Chunks differ by at most one token.

    Args:
        t: number of tokens.
        world_size: N, the number of devices.
        sharding: ``"contiguous"`` or ``"zigzag"``.

    Returns:
        N tensors of positions, one per device.

    Raises:
        ValueError: if a size is not an integer >= 1, sharding is unknown, or there are fewer
            tokens than chunks.

    Examples:
        >>> ring_shards(8, 2, "zigzag")
        [tensor([0, 1, 6, 7]), tensor([2, 3, 4, 5])]
    """
    check_sizes(t=t, world_size=world_size)
    if sharding not in SHARDINGS:
        raise ValueError(f"sharding must be one of {SHARDINGS}, got {sharding!r}")
    pieces = 2 * world_size if sharding == "zigzag" else world_size
    if pieces > t:
        raise ValueError(f"{sharding} sharding over world_size={world_size} needs t >= {pieces} "
                         f"tokens (one per chunk), got t={t}")
    chunks = torch.arange(t).tensor_split(pieces)
    if sharding == "contiguous":
        return list(chunks)
    return [torch.cat([chunks[r], chunks[pieces - 1 - r]]) for r in range(world_size)]


def _visible(q_pos: Tensor, k_pos: Tensor, is_causal: bool) -> Tensor:
    """(c_q, c_k), True where the query at q_pos may see the key at k_pos."""
    if not is_causal:
        return torch.ones(len(q_pos), len(k_pos), dtype=torch.bool)
    return masks.visible(masks.causal(), q_pos, k_pos)  # (c_q, c_k)


def ring_work(t: int, world_size: int, is_causal: bool = False,
              sharding: Sharding = "contiguous") -> Tensor:
    """Score pairs (query, key) device r attends at step l: an int64 tensor (N, N) [l, r].

    A block that no query of the device may see is skipped (0 work); otherwise the count is the
    visible pairs, what a kernel computes that skips every hidden pair (a tiled kernel also
    computes the hidden pairs of the tiles that straddle the diagonal). A synchronous ring's step
    lasts as long as its busiest device: the sum over l of the row maxima.

    Args:
        t: number of tokens.
        world_size: N, the number of devices.
        is_causal: count only the pairs a causal mask lets through.
        sharding: ``"contiguous"`` or ``"zigzag"``.

    Returns:
        The work (N, N), steps by devices.

    Raises:
        ValueError: as :func:`ring_shards`, or if is_causal is not a bool.

    Examples:
        >>> ring_work(8, 2, is_causal=True), ring_work(8, 2, is_causal=True, sharding="zigzag")
        (tensor([[10, 10],
                [ 0, 16]]), tensor([[10, 10],
                [ 8,  8]]))
    """
    check_flags(is_causal=is_causal)
    shards = ring_shards(t, world_size, sharding)
    work = torch.zeros(world_size, world_size, dtype=torch.int64)  # (N steps, N devices)
    for step in range(world_size):
        for r in range(world_size):
            source = (r - step) % world_size  # whose keys device r holds at this step
            work[step, r] = int(_visible(shards[r], shards[source], is_causal).sum())
    return work


def _merge(out: Tensor, lse: Tensor, out_b: Tensor, lse_b: Tensor) -> tuple[Tensor, Tensor]:
    """Online-softmax merge of two normalized partials (equation 7.8 in log-sum-exp form)."""
    new = torch.logaddexp(lse, lse_b)  # (..., c_q); -inf while neither saw a key
    safe = new.masked_fill(new == -math.inf, 0.0)
    weight_a, weight_b = torch.exp(lse - safe), torch.exp(lse_b - safe)  # (..., c_q) each
    return weight_a[..., None] * out + weight_b[..., None] * out_b, new


@attention_kernel
def ring_attention(
    query: Tensor, key: Tensor, value: Tensor, *, world_size: int, is_causal: bool = False,
    sharding: Sharding = "contiguous", scale: float | None = None,
) -> Tensor:
    """Self-attention computed as N devices in a ring would, in one process; equal to SDPA.

    One sequence of t tokens is sharded over ``world_size`` devices by :func:`ring_shards`. The
    devices run one after another here; what each computes at each step, and what it skips, is
    what it would compute on its own device. Half-precision inputs are computed in float32.
    Equal to SDPA up to rounding, and in float32 the merges round differently from SDPA: each
    weighs a partial by exp(lse_J - lse), and a float32 lse is rounded to 2^-24 of its size, an
    error a single softmax does not have; in half precision the output's own rounding hides it
    while |lse| stays below about 2^13 (float16) or 2^16 (bfloat16). Past |s| = 2^24 an lse
    cannot hold the log of a count of keys at all: keys tied at such a score are weighed by
    partial, not counted (q = 1e4 against four keys of 1e4, scale 1, two devices: 3.0 for
    values 0 .. 3, where SDPA gives their mean 1.5), as in any merge through a float32 lse
    (ring-flash-attention's too).
    Differentiable: each partial's lse carries its gradient into the merge weights
    (``flash_attention``'s lse is differentiable), so the gradients equal SDPA's.

    Args:
        query: (..., t, d_k).
        key: (..., t, d_k).
        value: (..., t, d_v). Leading dimensions of the three broadcast, as in SDPA.
        world_size: N, the number of devices.
        is_causal: SDPA's (query i sees keys j <= i, by position whatever the sharding).
        sharding: ``"contiguous"`` or ``"zigzag"``.
        scale: multiplies the scores; defaults to 1/sqrt(d_k).

    Returns:
        Z (..., t, d_v) in the original token order.

    Raises:
        ValueError: if query, key and value do not agree (dtype, device, one t, one d_k) or
            their leading dimensions do not broadcast, the sharding does not fit t, scale is
            not None or a finite number, or is_causal is not a bool.
        TypeError: flash-attn's keywords and older names (``causal``, ``softmax_scale``,
            ``window_size``, ``causal_alignment``), with the keyword this function takes.

    Examples:
        >>> _ = torch.manual_seed(0)
        >>> q, k, v = torch.randn(3, 1, 2, 8, 4).unbind(0)  # (b, h, t, d_k) each
        >>> out = ring_attention(q, k, v, world_size=2, is_causal=True, sharding="zigzag")
        >>> sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        >>> torch.allclose(out, sdpa, atol=1e-6)
        True
    """
    scale = check_scale(scale)
    check_qkv(query, key, value)
    check_flags(is_causal=is_causal)
    if query.shape[-2] != key.shape[-2] or key.shape[-2] != value.shape[-2]:
        raise ValueError(
            "ring attention shards one sequence: query, key and value must have the same t, "
            f"got {query.shape[-2]}, {key.shape[-2]}, {value.shape[-2]}"
        )
    batch = check_batch_dims(("query", query), ("key", key), ("value", value))
    t = query.shape[-2]
    runs = [_runs(positions) for positions in ring_shards(t, world_size, sharding)]
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    acc = accumulation_dtype(query.dtype)
    q, k, v = (x.to(acc) for x in (query, key, value))  # partials and merges in float32 for half
    # (q0, q1) -> running Z (..., n, d_v) and lse (..., n) of the queries q0 .. q1 - 1
    state: dict[tuple[int, int], tuple[Tensor, Tensor]] = {}
    for step in range(world_size):
        for r in range(world_size):
            for q0, q1 in runs[r]:  # the queries device r holds
                for k0, k1 in runs[(r - step) % world_size]:  # the block it holds at this step
                    if is_causal and k0 >= q1:
                        continue  # every key after every query: the device skips it
                    # Distinct runs do not overlap, so a block that is not all visible is the
                    # query's own run (k0 = q0, k1 = q1): causal attention aligned top-left.
                    partial = flash_attention(
                        q[..., q0:q1, :], k[..., k0:k1, :], v[..., k0:k1, :],
                        is_causal=is_causal and k1 > q0, scale=scale, return_lse=True,
                    )  # Z (..., n, d_v) and lse (..., n) of this block
                    seen = state.get((q0, q1))
                    state[q0, q1] = partial if seen is None else _merge(*seen, *partial)
    result = v.new_empty(*batch, t, v.shape[-1])  # (..., t, d_v), the leading dims broadcast
    for (q0, q1), (out, _) in state.items():
        result[..., q0:q1, :] = out
    return result.to(value.dtype)


def _runs(positions: Tensor) -> list[tuple[int, int]]:
    """The contiguous runs [start, end) of a shard's sorted positions: one or two chunks."""
    breaks = (positions.diff() != 1).nonzero().flatten().tolist()  # where a new run starts - 1
    starts = [0, *(b + 1 for b in breaks)]
    ends = [*(b + 1 for b in breaks), len(positions)]
    return [(int(positions[a]), int(positions[e - 1]) + 1) for a, e in zip(starts, ends)]


def ring_attention_io(t: int, d_h: int, world_size: int, m_device: int) -> IOCount:
    """One device's traffic over the ring, counted with :class:`~attention.io_model.TwoLevelMemory`.

    The device's memory (``m_device`` numbers) is the fast memory; the ring is the slow one: a
    block received from the previous device is a load (reads), a block sent to the next one a
    store (writes). Its own c = t / N queries, keys and values, the running Z and its lse (one
    number per query: the merge of two partials needs no more) are made on the device (no
    traffic). To hide communication behind compute, it receives the next K and V while it still
    holds the current ones: 6 c d_h + c numbers at once. Per
    device: N - 1 blocks of K and V received and sent, 2 (N - 1) c d_h numbers each way.

    Args:
        t: number of tokens.
        d_h: head width.
        world_size: N, the number of devices.
        m_device: one device's memory, in numbers.

    Returns:
        Numbers received (reads) and sent (writes), and the most held at once.

    Raises:
        ValueError: if a size is not an integer >= 1, t is not a multiple of world_size, or the
            blocks do not fit in m_device.

    Examples:
        >>> ring_attention_io(t=1024, d_h=64, world_size=4, m_device=10**6)
        IOCount(reads=98304, writes=98304, peak=98560)
    """
    check_sizes(t=t, d_h=d_h, world_size=world_size, m_device=m_device)
    if t % world_size:
        raise ValueError(f"t must be a multiple of world_size for equal shards, got t={t}, "
                         f"world_size={world_size}")
    c = t // world_size
    blocks = "two blocks" if world_size > 1 else "one block"  # of K and V at once: this one and the next
    need = (6 if world_size > 1 else 4) * c * d_h + c  # Q, Z, the blocks of K and V, and lse
    if m_device < need:
        raise ValueError(f"m_device must hold Q, Z, lse and {blocks} of K and V, "
                         f"{need} numbers for t_shard={c}, d_h={d_h}, got m_device={m_device}")
    mem = TwoLevelMemory(m_device)
    mem.allocate("Q_r", c, d_h)  # (c, d_h): this device's queries, never sent
    mem.allocate("O_r", c, d_h)  # (c, d_h) running output
    mem.allocate("lse_r", c, 1)  # (c, 1) running log-sum-exp, all that merging partials needs
    mem.allocate("K_0", c, d_h)  # (c, d_h): its own keys and values, the first block it uses
    mem.allocate("V_0", c, d_h)
    for step in range(1, world_size):
        mem.load(f"K_{step}", c, d_h)  # receive the next block while computing on the current one
        mem.load(f"V_{step}", c, d_h)
        mem.store(f"K_{step - 1}")  # send the current block on
        mem.store(f"V_{step - 1}")
        mem.free(f"K_{step - 1}", f"V_{step - 1}")
    return mem.count()
