"""Both schemes on real processes, each rank checked against one process's SDPA.

Run ``torchrun --nproc-per-node 4 -m attention.distributed.demo`` (or ``python -m
torch.distributed.run ...``): gloo on CPUs, NCCL when every rank has a GPU. Every rank draws the
whole sequence from the same seed, keeps its shard, runs ring attention (contiguous and zig-zag
shards) and Ulysses, forward and backward, and prints its largest difference from SDPA on the
whole sequence.
"""

import argparse
import os
from collections.abc import Callable
from typing import cast

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ..ring import Sharding
from . import ring_attention, shard_sequence, ulysses_attention


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="torchrun --nproc-per-node N -m attention.distributed.demo",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=64, help="t, the whole sequence (default: 64)")
    ap.add_argument("--heads", type=int, default=8, help="h query heads (default: 8)")
    ap.add_argument("--kv-heads", type=int, default=4, help="h_kv key-value heads (default: 4)")
    ap.add_argument("--head-dim", type=int, default=16, help="d_h (default: 16)")
    ap.add_argument("--seed", type=int, default=123)
    args = ap.parse_args(argv)
    if "RANK" not in os.environ:
        ap.error("run it under torchrun, which sets RANK and WORLD_SIZE: "
                 "torchrun --nproc-per-node 4 -m attention.distributed.demo")
    world = int(os.environ["WORLD_SIZE"])
    for name in ("tokens", "heads", "kv_heads", "head_dim"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.tokens < 2 * world:  # zig-zag sharding cuts the sequence into 2N chunks
        ap.error(f"--tokens must be at least 2N = {2 * world} on {world} ranks, got {args.tokens}")
    if args.heads % args.kv_heads:
        ap.error(f"--heads must be a multiple of --kv-heads, got {args.heads} and {args.kv_heads}")
    cuda = torch.cuda.is_available() and torch.cuda.device_count() >= int(os.environ["LOCAL_WORLD_SIZE"])
    device = torch.device(f"cuda:{os.environ['LOCAL_RANK']}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    dtype = torch.float64 if not cuda else torch.float32  # NCCL GPUs: float32 (float64 is slow there)
    torch.manual_seed(args.seed)
    shape = (1, args.heads, args.tokens, args.head_dim)
    q = torch.randn(shape, dtype=dtype, device=device, requires_grad=True)
    k, v = (torch.randn(1, args.kv_heads, args.tokens, args.head_dim, dtype=dtype, device=device,
                        requires_grad=True) for _ in range(2))
    lines = []
    for causal in (False, True):
        for x in (q, k, v):
            x.grad = None
        want = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        want.square().sum().backward()  # a loss whose gradient is not constant
        grads = [cast(torch.Tensor, x.grad).clone() for x in (q, k, v)]  # filled by backward()
        runs: list[tuple[str, Sharding, Callable[..., torch.Tensor]]] = [
            ("ring", "contiguous",
             lambda *a, **kw: ring_attention(*a, sharding="contiguous", **kw)),
            ("ring", "zigzag", lambda *a, **kw: ring_attention(*a, sharding="zigzag", **kw)),
            ("ulysses", "contiguous", ulysses_attention)]
        for scheme, sharding, fn in runs:
            def part(x: torch.Tensor) -> torch.Tensor:
                return shard_sequence(x.detach(), rank, world, sharding)  # (1, ., c, d_h)
            mine = [part(x).requires_grad_() for x in (q, k, v)]
            try:
                out = fn(*mine, is_causal=causal)
            except ValueError as error:  # every rank refuses alike (Ulysses: h not a multiple of N)
                lines.append(f"rank {rank}/{world}: {scheme:<7} {sharding:<10} causal={causal!s:<5} refused: {error}")
                continue
            out.square().sum().backward()
            difference = max([float((out.detach() - part(want)).abs().max())]
                             + [float((cast(torch.Tensor, x.grad) - part(g)).abs().max())
                                for x, g in zip(mine, grads)])
            lines.append(f"rank {rank}/{world} {dist.get_backend()}: {scheme:<7} {sharding:<10} "
                         f"causal={causal!s:<5} max |difference| from SDPA, output and gradients: {difference:.1e}")
    for turn in range(world):  # rank by rank, so that the lines of two ranks do not interleave
        if turn == rank:
            print("\n".join(lines), flush=True)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
