"""DeepSpeed-Ulysses (Jacobs et al., 2023): all-to-alls trade the sequence shard for a head shard.

Notation (see CONTRIBUTING.md): b batch size, h query heads, h_kv key-value heads, t_shard =
t / N tokens of a rank's shard (``c`` in the code), d_k and d_v the widths of keys and values;
N ranks, rank r.

Rank r holds every head of its c tokens. An all-to-all (one for each of q, k and v) sends rank j
the heads j h / N .. (j + 1) h / N - 1 of those tokens and receives, from every rank, its tokens of
rank r's heads: rank r then holds the whole sequence for h / N heads, and attention is ordinary
attention, any kernel. One more all-to-all brings the outputs back to their sequence shards. The
all-to-alls of q and of the output each move a fraction (N - 1) / N of the rank's tensor, whatever
N, and so do those of k and v when N divides h_kv; when h_kv < N, each of the N - 1 other ranks
gets its own copy of a key-value head, and k and v each move (N - 1) / h_kv of the rank's tensor.
h must be a multiple of N, and h_kv a multiple or a divisor of N.
"""

from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor

from .._checks import attention_kernel, torch_takes_is_causal
from ..functional import causal_mask
from ._common import agree, note

__all__ = ["ulysses_attention"]


class _AllToAll(torch.autograd.Function):
    """Slot j of x (N, ...) goes to rank j; slot i of the result came from rank i. Its gradient is
    the same exchange run backwards, itself differentiable: second derivatives go through it."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, group: dist.ProcessGroup | None) -> Tensor:
        ctx.group = group
        return _exchange(x, group)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return _AllToAll.apply(grad, ctx.group), None


def _exchange(x: Tensor, group: dist.ProcessGroup | None) -> Tensor:
    x = x.contiguous()
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x, group=group)
    note("all_to_all", (x.shape[0] - 1) * x[0].numel() * x.element_size())  # the slot kept is not sent
    return out


def _kv_heads(h: int, h_kv: int, world: int) -> tuple[int, list[int]]:
    """Key-value heads each rank receives (n_kv), and the first of them for ranks 0 .. N - 1.

    With h_kv a multiple of N each rank takes its own h_kv / N heads; with N a multiple of h_kv
    the G = h / h_kv query heads of one key-value head span N / h_kv ranks, each of which gets a copy.
    """
    if h_kv % world == 0:
        n_kv = h_kv // world
        return n_kv, [j * n_kv for j in range(world)]
    groups = h // h_kv
    return 1, [j * (h // world) // groups for j in range(world)]


@attention_kernel
def ulysses_attention(query: Tensor, key: Tensor, value: Tensor, *, is_causal: bool = False,
                      scale: float | None = None, group: dist.ProcessGroup | None = None) -> Tensor:
    """Attention over a sequence in contiguous equal shards, by heads: this rank's output shard.

    Call it on every rank, rank r holding tokens r c .. (r + 1) c - 1. Attention on the gathered
    heads is ``F.scaled_dot_product_attention``, so the gradient is autograd's, with each
    all-to-all's reversed.

    Other arguments as in :func:`~attention.distributed.ring.ring_attention`.

    Args:
        query: this rank's queries (b, h, c, d_k); h must be a multiple of N.
        key: its keys (b, h_kv, c, d_k); h_kv a multiple or a divisor of N (a key-value head is
            then copied to the ranks that share it).
        is_causal: SDPA's causal mask over the whole sequence.

    Returns:
        This rank's output shard (b, h, c, d_v).

    Raises:
        RuntimeError: if no process group is initialised.
        ValueError: on every rank, for the inputs :func:`~attention.distributed.ring_attention`
            refuses, such as an is_causal that is not a bool, and shards of different lengths,
            an N that does not divide h, or an h_kv that is neither a multiple nor a divisor of
            N.
        TypeError: flash-attn's keywords and older names (``causal``, ``softmax_scale``,
            ``window_size``, ``causal_alignment``), with the keyword this function takes.

    Examples:
        >>> q = torch.randn(1, 2, 4, 8)  # outside torch.distributed: refused
        >>> ulysses_attention(q, q, q)
        Traceback (most recent call last):
            ...
        RuntimeError: ulysses_attention runs on every rank of a process group: ...
    """
    q, k, v = query, key, value
    lengths, scale = agree(q, k, v, is_causal=is_causal, sharding=0, scale=scale, group=group,
                           name="ulysses_attention")
    world, rank = len(lengths), dist.get_rank(group)
    b, h, c, _ = q.shape
    h_kv = k.shape[1]
    if len(set(lengths)) > 1:
        raise ValueError(f"ulysses_attention needs shards of equal length on every rank, got c = {lengths}")
    if h % world:
        raise ValueError(f"ulysses_attention splits the h heads over the N ranks: h must be a multiple "
                         f"of N, got h={h}, N={world}")
    if h_kv % world and world % h_kv:
        raise ValueError(f"ulysses_attention needs h_kv a multiple or a divisor of N, got h_kv={h_kv}, N={world}")
    if b == 0:  # nothing to send, on every rank (b is agreed): SDPA's empty answer, as ring's
        return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale, enable_gqa=True)
    heads = h // world
    n_kv, kv_first = _kv_heads(h, h_kv, world)

    def to_heads(x: Tensor, n: int, first: list[int]) -> Tensor:
        send = torch.stack([x[:, f:f + n] for f in first])  # (N, b, n, c, d): slot j for rank j
        # (N, b, n, c, d): slot i holds rank i's tokens
        got: Tensor = _AllToAll.apply(send, group)
        return got.permute(1, 2, 0, 3, 4).reshape(b, n, world * c, x.shape[-1])  # (b, n, t, d)

    q_heads = to_heads(q, heads, [j * heads for j in range(world)])  # (b, h / N, t, d_k)
    k_heads, v_heads = (to_heads(x, n_kv, kv_first) for x in (k, v))  # (b, n_kv, t, d)
    # Which received key-value head serves each of this rank's query heads.
    serve = (torch.arange(rank * heads, (rank + 1) * heads) // (h // h_kv) - kv_first[rank]).to(q.device)
    fused = is_causal and torch_takes_is_causal(world * c, world * c, scale)  # else a mask
    mask = causal_mask(world * c, device=q.device) if is_causal and not fused else None  # (t, t)
    out = F.scaled_dot_product_attention(q_heads, k_heads[:, serve], v_heads[:, serve], attn_mask=mask,
                                         is_causal=fused, scale=scale)  # (b, h / N, t, d_v)
    send = out.view(b, heads, world, c, -1).permute(2, 0, 1, 3, 4)  # (N, b, h / N, c, d_v)
    # (N, b, h / N, c, d_v): slot i holds rank i's heads
    got: Tensor = _AllToAll.apply(send, group)
    return got.permute(1, 0, 2, 3, 4).reshape(b, h, c, -1)  # (b, h, c, d_v)
