"""Context parallelism on real processes: ring and Ulysses attention timed over gloo at N = 2, 4.

Notation (see CONTRIBUTING.md): b batch size, t tokens of the whole sequence, h heads (h_kv
key-value heads) of width d_h, N ranks, t_shard = t / N tokens per rank (``c`` in the code),
s bytes per number.

N processes on this machine (forked, gloo over 127.0.0.1, one thread each) run
:mod:`attention.distributed`: the ring with contiguous and zig-zag shards, and Ulysses, causal,
forward and forward+backward. Each rank's output is first checked against float64 attention of
its queries over the whole sequence; then every call starts after a barrier, and its time is the
slowest rank's (an all-reduce of the maximum). ``bytes_sent`` is what rank 0 handed to gloo in
one call (:func:`attention.distributed.count_traffic`); ``bytes_predicted`` the count of the model:
for the ring's forward, :func:`attention.ring.ring_attention_io`'s numbers sent per head times
b h_kv s, and with the backward twice that plus the N blocks of dK and dV that travel back; for
Ulysses, (N - 1) / N of q, k, v and the output, twice with the backward.

For the ring's forward pass two more times per step: ``compute_step_s``, the same call with every
transfer replaced by a local copy (the blocks it computes, masks and skips are the same), and
``transfer_step_s``, the N - 1 transfers alone, each divided by the N steps (N - 1 for the
transfers). The ring hides its transfers when the first is the larger: equation (11.9).
"""

import math
import socket
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import torch
import torch.distributed as dist
from torch.multiprocessing.spawn import start_processes

from .. import distributed as cp
from ..distributed import ring as ring_module
from ..ring import Sharding, ring_attention_io, ring_shards
from ..roofline import PASSES
from .rows import DistributedRow
from .sweep import Settings, exceeds

WORLD_SIZES = (2, 4)
SCHEMES: tuple[tuple[str, Sharding], ...] = (("ring", "contiguous"), ("ring", "zigzag"), ("ulysses", "contiguous"))
SHAPE = {"b": 1, "t": 2048, "h": 8, "h_kv": 8, "d_h": 64}
TOLERANCE = 2e-3  # float32 against float64, as the sweep's
METHOD = ("N forked processes on this machine, gloo over 127.0.0.1, one thread each; causal, float32, "
          "b = 1, t = 2048, h = h_kv = 8, d_h = 64; each rank's output checked against float64 first; a call "
          "starts after a barrier and takes the slowest rank's time; median and IQR over the repeats; bytes "
          "sent counted at the call on rank 0")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _slowest(value: float) -> float:
    """The largest of every rank's ``value`` (a time, an error); a NaN is taken as inf, which
    gloo's MAX keeps: it keeps or drops a NaN by the rank that holds it."""
    tensor = torch.tensor([math.inf if math.isnan(value) else value], dtype=torch.float64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return float(tensor)


def _time(fn: Callable[[], object], repeats: int) -> list[float]:
    """The slowest rank's seconds for each of ``repeats`` calls, after one untimed call."""
    fn()
    times = []
    for _ in range(repeats):
        dist.barrier()
        began = time.perf_counter()
        fn()
        times.append(_slowest(time.perf_counter() - began))
    return times


@contextmanager
def _local_copies() -> Iterator[None]:
    """The ring with every transfer replaced by a copy: the same blocks computed, nothing sent."""
    # equal shards: the incoming block has the held one's shape
    def pass_on(
        self: ring_module._Ring, block: torch.Tensor, incoming: torch.Tensor
    ) -> list[dist.Work]:
        incoming.copy_(block)
        return []

    with mock.patch.object(ring_module._Ring, "pass_on", pass_on):
        yield


def _reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor
) -> torch.Tensor:
    """float64 causal attention of this rank's queries over the whole sequence: (b, h, c, d_h)."""
    mask = torch.arange(k.shape[-2])[None, :] <= positions[:, None]  # (c, t)
    groups = q.shape[1] // k.shape[1]
    k, v = (x.double().repeat_interleave(groups, dim=1) for x in (k, v))
    return torch.nn.functional.scaled_dot_product_attention(q.double(), k, v, attn_mask=mask)


def _predicted(scheme: str, pass_name: str, world: int, b: int, t: int, h: int, h_kv: int, d_h: int,
               s: int) -> int | None:
    c = t // world
    if scheme == "ring":  # the IO model counts the forward; the backward sends the blocks again
        forward = b * h_kv * ring_attention_io(t, d_h, world, m_device=10**12).writes * s
        return forward if pass_name == "forward" else 2 * forward + world * b * h_kv * c * 2 * d_h * s
    slices = 2 * h + 2 * max(h_kv // world, 1) * world  # q and output, k and v (copies when h_kv < N)
    one_way = (world - 1) * b * c * d_h * s * slices // world
    return one_way if pass_name == "forward" else 2 * one_way


def _worker(
    rank: int, world: int, port: int, repeats: int, seed: int, shape: dict[str, Any], out: str
) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=300))
    b, t, h, h_kv, d_h = (shape[k] for k in ("b", "t", "h", "h_kv", "d_h"))
    rows = []
    for scheme, sharding in SCHEMES:
        torch.manual_seed(seed)
        q = torch.randn(b, h, t, d_h)
        k, v = (torch.randn(b, h_kv, t, d_h) for _ in range(2))
        positions = ring_shards(t, world, sharding)[rank]
        mine = [cp.shard_sequence(x, rank, world, sharding).requires_grad_() for x in (q, k, v)]
        fn: Callable[..., torch.Tensor] = (
            (lambda *a: cp.ring_attention(*a, is_causal=True, sharding=sharding))
            if scheme == "ring" else (lambda *a: cp.ulysses_attention(*a, is_causal=True)))
        got = fn(*mine).detach()
        want = _reference(q[..., positions, :], k, v, positions)
        error = _slowest(float((got.double() - want).abs().max() / want.abs().max()))
        for pass_name in PASSES:
            row = DistributedRow(
                scheme=scheme, sharding=sharding, world_size=world, pass_name=pass_name, b=b, t=t, h=h,
                h_kv=h_kv, d_h=d_h, dtype="float32", is_causal=True, status="ok", reason=None,
                max_rel_err=error, median_s=None, iqr_s=None, repeats=None, step_s=None,
                compute_step_s=None, transfer_step_s=None, bytes_sent=None,
                bytes_predicted=_predicted(scheme, pass_name, world, b, t, h, h_kv, d_h, 4))
            if exceeds(error, TOLERANCE):
                rows.append(replace(row, status="failed", reason=f"relative error {error:.2e} > {TOLERANCE:.0e}"))
                continue
            if pass_name == "forward":
                def call() -> object:
                    return fn(*mine)
            else:
                def call() -> object:
                    return fn(*mine).sum().backward()
            with torch.no_grad() if pass_name == "forward" else torch.enable_grad():
                with cp.count_traffic() as traffic:
                    call()
                times = _time(call, repeats)
            q1, _, q3 = statistics.quantiles(times, n=4, method="inclusive")
            median = statistics.median(times)
            row = replace(row, median_s=median, iqr_s=q3 - q1, repeats=len(times),
                          bytes_sent=traffic.sent.get("p2p", 0) + traffic.sent.get("all_to_all", 0),
                          step_s=median / world if scheme == "ring" else None)
            if scheme == "ring" and pass_name == "forward":
                with torch.no_grad(), _local_copies():
                    compute = statistics.median(_time(call, repeats))
                block = torch.cat([mine[1], mine[2]], dim=-1).detach().contiguous()  # (b, h_kv, c, 2 d_h)
                ring = ring_module._Ring(None)

                def transfers() -> None:
                    held = block
                    for _ in range(world - 1):
                        incoming = torch.empty_like(held)
                        for request in ring.pass_on(held, incoming):
                            request.wait()
                        held = incoming

                transfer = statistics.median(_time(transfers, repeats))
                row = replace(row, compute_step_s=compute / world, transfer_step_s=transfer / (world - 1))
            rows.append(row)
    if rank == 0:
        torch.save([r.to_json() for r in rows], Path(out) / "rows.pt")
    dist.destroy_process_group()


def run_distributed(settings: Settings, world_sizes: tuple[int, ...] = WORLD_SIZES,
                    shape: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The ``distributed`` rows of a results file (:class:`~attention.bench.rows.DistributedRow` as
    JSON): every N, scheme and pass (see the module docstring). CPU only: gloo processes.
    ``shape`` (keys b, t, h, h_kv, d_h; default :data:`SHAPE`) needs t a multiple of 2N."""
    shape = SHAPE if shape is None else shape
    for world in world_sizes:
        if shape["t"] % (2 * world) or shape["h"] % world:
            raise ValueError(f"equal shards of both shardings and Ulysses need t a multiple of 2N and h of N, "
                             f"got t={shape['t']}, h={shape['h']}, N={world}")
    if settings.device.type != "cpu":
        raise ValueError(f"the distributed part runs gloo processes on this CPU, got device {settings.device}")
    rows = []
    for world in world_sizes:
        with tempfile.TemporaryDirectory() as out:
            start_processes(_worker, nprocs=world, start_method="fork",
                            args=(world, _port(), settings.repeats, settings.seed, shape, out))
            rows += torch.load(Path(out) / "rows.pt")
    return rows
