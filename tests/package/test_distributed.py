"""attention.distributed on real gloo processes (CPU): equal to SDPA on the gathered sequence.

One group of forked processes per world size runs every case and writes its errors to a file;
the tests read them. Processes talk over 127.0.0.1 only.
"""

import re
import socket
import time
from datetime import timedelta
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from attention import ring_shards, ring_work
from attention.distributed import (
    count_traffic,
    demo,
    ring_attention,
    shard_positions,
    shard_sequence,
    ulysses_attention,
)
from attention.distributed._common import _table_device
from attention.distributed.ring import _runs, _tiles
from attention.ring import ring_attention_io

B, D_H = 2, 8
TS = (24, 21)  # 24 is a multiple of 2N for N = 2, 4; 21 of neither N nor 2N
# Every sharding, causal or not: t a multiple of 2N without and with grouped queries (h_kv = 2),
# and t a multiple of neither N nor 2N with them.
RING = [(sharding, causal, t, 4, h_kv) for sharding in ("contiguous", "zigzag") for causal in (False, True)
        for t, h_kv in ((TS[0], 4), (TS[0], 2), (TS[1], 2))]
# Ulysses needs equal shards (t a multiple of N) and h a multiple of N; h_kv = 2 with N = 4 is
# a divisor of N (each key-value head copied to two ranks), with N = 2 a multiple.
ULYSSES = [(causal, 24, h, h_kv) for causal in (False, True) for h, h_kv in ((4, 4), (4, 2))]
# Each scheme on a sharding it takes, for the cases of the scale and of subgroups.
SCHEMES = {"ring": ("zigzag", partial(ring_attention, sharding="zigzag")),
           "ulysses": ("contiguous", ulysses_attention)}
DEADLINE_S = 60  # a run past this is a hang: the test kills it and fails


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _init(rank: int, world: int, port: int, timeout_s: float) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=timeout_s))


def _spawn(worker, world: int, out_dir: Path) -> list[dict]:
    """Run worker(rank, world, port, out_dir) on ``world`` forked processes; each rank's results."""
    context = mp.start_processes(worker, args=(world, _free_port(), str(out_dir)), nprocs=world,
                                 join=False, start_method="fork")
    deadline = time.monotonic() + DEADLINE_S
    while not context.join(timeout=1):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail(f"world size {world}: processes still running after {DEADLINE_S} s")
    return [torch.load(out_dir / f"rank{r}.pt") for r in range(world)]


def _case(rank, world, fn, sharding, causal, t, h, h_kv, seed, dtype=torch.float64, d_v=D_H, scale=None):
    """Largest difference of output and gradients from SDPA in float64 on the whole sequence (of
    the inputs rounded to ``dtype``), the bytes sent, and in half precision the largest ratio,
    tensor by tensor, of that difference to the rounding of SDPA's own result to ``dtype``."""
    torch.manual_seed(seed)
    def draw(*shape):
        return torch.randn(*shape, dtype=torch.float64).to(dtype).double().requires_grad_()
    q, k, v = draw(B, h, t, D_H), draw(B, h_kv, t, D_H), draw(B, h_kv, t, d_v)
    w = draw(B, h, t, d_v).detach()  # the loss is sum(w * out)
    with sdpa_kernel(SDPBackend.MATH):  # torch's fused CPU kernel gives nan for a scale <= 0
        want = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True, scale=scale)  # (b, h, t, d_v)
    (want * w).sum().backward()
    def part(x):
        return shard_sequence(x.detach(), rank, world, sharding)  # (b, ., c, d)
    mine = [part(x).to(dtype).requires_grad_() for x in (q, k, v)]
    with count_traffic() as traffic:
        out = fn(*mine, is_causal=causal, scale=scale)
        (out * part(w).to(dtype)).sum().backward()
    exact = [part(want)] + [part(y.grad) for y in (q, k, v)]
    errors = [float((x.detach().double() - y).abs().max()) for x, y in zip([out] + [x.grad for x in mine], exact)]
    ratio = None if dtype == torch.float64 else max(
        e / float((y.to(dtype).double() - y).abs().max()) for e, y in zip(errors, exact))
    return max(errors), dict(traffic.sent), ratio


def _second_order(rank, world, fn, sharding):
    """Second derivatives (of sum(g_q) + |g_k|² + sum(g_v), g the gradients of |out|², causal):
    the largest difference from explicit float64 attention on the whole sequence, or the message
    of the error refusing them; as _case's results, with no traffic and no ratio."""
    torch.manual_seed(500)
    full = [torch.randn(B, 4, 24, D_H, dtype=torch.float64, requires_grad=True) for _ in range(3)]
    mine = [shard_sequence(x.detach(), rank, world, sharding).requires_grad_() for x in full]

    def second(out, inputs):
        g = torch.autograd.grad(out.square().sum(), inputs, create_graph=True)
        (g[0].sum() + g[1].square().sum() + g[2].sum()).backward()

    scores = full[0] @ full[1].transpose(-2, -1) / D_H**0.5  # (b, h, t, t)
    second(torch.softmax(scores.masked_fill(torch.ones(24, 24).triu(1).bool(), -torch.inf), -1) @ full[2], full)
    try:
        with sdpa_kernel(SDPBackend.MATH):  # torch's CPU flash backward has no derivative itself
            second(fn(*mine, is_causal=True), mine)
    except RuntimeError as error:
        return str(error), {}, None
    return max(float((m.grad - shard_sequence(x.grad, rank, world, sharding)).abs().max())
               for m, x in zip(mine, full)), {}, None


def _correctness(rank: int, world: int, port: int, out_dir: str) -> None:
    _init(rank, world, port, timeout_s=DEADLINE_S)
    results = {}
    for i, (sharding, causal, t, h, h_kv) in enumerate(RING):
        def fn(*a, **kw):
            return ring_attention(*a, sharding=sharding, **kw)
        results["ring", sharding, causal, t, h, h_kv] = _case(rank, world, fn, sharding, causal, t, h, h_kv, i)
    for i, (causal, t, h, h_kv) in enumerate(ULYSSES):
        results["ulysses", "contiguous", causal, t, h, h_kv] = _case(
            rank, world, ulysses_attention, "contiguous", causal, t, h, h_kv, 100 + i)
    def zigzag(*a, **kw):
        return ring_attention(*a, sharding="zigzag", **kw)
    results["ring bfloat16"] = _case(rank, world, zigzag, "zigzag", True, 21, 4, 2, 200, torch.bfloat16)
    for dtype in (torch.float32, torch.bfloat16):  # rank 0's two keys tied at a score of 1e8
        q, k = (torch.full((1, 1, 2, 1), x, dtype=dtype) for x in (1e4, 1e4 if rank == 0 else -1e4))
        v = torch.tensor([0.0, 1.0], dtype=dtype).view(1, 1, 2, 1)
        results["ties", dtype] = ring_attention(q, k, v, scale=1.0).flatten().tolist(), {}, None
    # Values wider than keys (d_v = 12, d_k = 8), and the scale: its default, or one given.
    for name, (sharding, fn) in SCHEMES.items():
        for scale in (None, 0.3, -0.5):  # -0.5: torch's fused CPU kernel gives nan for is_causal
            results["scale", name, scale] = _case(rank, world, fn, sharding, True, 24, 4, 2, 300, d_v=12, scale=scale)
    for name, (sharding, fn) in SCHEMES.items():
        results["second", name] = _second_order(rank, world, fn, sharding)
    # Subgroups, made by every rank: rank 0 alone (N = 1: the ring holds its own block, nothing
    # travels), and the odd ranks (with N = 4 ranks 1 and 3, group ranks 0 and 1: a send must
    # address the global rank of the next group rank).
    for members in ([0], list(range(1, world, 2))):
        group = dist.new_group(members)
        for name, (sharding, fn) in SCHEMES.items():
            if rank in members:
                results["group", tuple(members), name] = _case(
                    members.index(rank), len(members), partial(fn, group=group), sharding, True, 24, 4, 2, 400)
                if members == [0]:  # contiguous heads, d_v = d_k: torch's fused kernel, nan there
                    results["alone", name] = _case(0, 1, partial(fn, group=group), sharding, True, 24, 4, 2,
                                                   300, scale=-0.5)
    dist.destroy_process_group()
    torch.save(results, Path(out_dir) / f"rank{rank}.pt")


@pytest.fixture(scope="module", params=(2, 4), ids=lambda n: f"N={n}")
def run(request, tmp_path_factory):
    world = request.param
    began = time.perf_counter()
    ranks = _spawn(_correctness, world, tmp_path_factory.mktemp(f"world{world}"))
    return world, ranks, time.perf_counter() - began


def test_equal_to_sdpa_on_the_gathered_sequence(run):
    world, ranks, _ = run
    cases = [key for key in ranks[0] if key[0] in ("ring", "ulysses")]
    assert len(cases) == len(RING) + len(ULYSSES)
    worst = {key: max(r[key][0] for r in ranks) for key in cases}
    bad = {key: err for key, err in worst.items() if not err < 1e-12}
    assert not bad, f"world size {world}: output or gradient error >= 1e-12 in {bad}"


def test_half_precision_is_computed_in_float32(run):
    """bfloat16 inputs, float32 partials and gradient sums: within bfloat16's rounding of the
    inputs and the result (inputs and gradients of order 1)."""
    _, ranks, _ = run
    assert max(r["ring bfloat16"][0] for r in ranks) < 0.1


def test_half_precision_rounds_once_at_the_end(run):
    """Partials, lse, D = rowsum(dO ⊙ O) and the dK, dV accumulators in float32: the output and
    the gradients are float64 SDPA on the rounded inputs, rounded once (within 1.2 times that
    rounding), not rounded again in a bfloat16 lse or at each rank's share of dK and dV."""
    _, ranks, _ = run
    ratio = max(r["ring bfloat16"][2] for r in ranks)
    assert ratio <= 1.2, f"error {ratio:.2f} times the rounding once"


def test_keys_tied_past_float32_lse_precision_weigh_as_in_sdpa(run):
    """Rank 0's two keys score 1e8, every other key -1e8: SDPA gives the mean of rank 0's values
    0 and 1. A float32 lse of 1e8 + log 2 rounds to 1e8, and the block's weights exp(s - lse)
    gave each tied key weight 1 (sum 2): their sum 1.0, on every rank and in both dtypes."""
    world, ranks, _ = run
    for dtype in (torch.float32, torch.bfloat16):
        q = torch.full((1, 1, 2 * world, 1), 1e4, dtype=dtype)
        k = torch.tensor([1e4, 1e4] + [-1e4] * (2 * world - 2), dtype=dtype).view(1, 1, -1, 1)
        v = torch.tensor([0.0, 1.0] * world, dtype=dtype).view(1, 1, -1, 1)
        want = F.scaled_dot_product_attention(q, k, v, scale=1.0).flatten().tolist()
        assert want == [0.5] * 2 * world
        assert [r["ties", dtype][0] for r in ranks] == [[0.5, 0.5]] * world, (world, dtype)


def test_scale_multiplies_the_scores_and_defaults_to_one_over_sqrt_d_k(run):
    """d_v = 12 != d_k = 8: the default scale is d_k's, and a given one is used (a negative one
    too, where torch's fused CPU kernel gives nan), forward and back."""
    world, ranks, _ = run
    worst = {key: max(r[key][0] for r in ranks) for key in ranks[0] if key[0] == "scale"}
    assert len(worst) == 3 * len(SCHEMES) and all(err < 1e-12 for err in worst.values()), (world, worst)
    alone = {key: ranks[0][key][0] for key in ranks[0] if key[0] == "alone"}  # a group of rank 0
    assert len(alone) == len(SCHEMES) and all(err < 1e-12 for err in alone.values()), alone


def test_a_subgroup_is_a_ring_of_its_own_ranks(run):
    """On rank 0 alone (a ring of one, which sends nothing) and on the odd ranks, whose group ranks
    are not their global ones: equal to SDPA, gradients included."""
    world, ranks, _ = run
    worst = {}
    for r in ranks:
        for key, (err, sent, _) in r.items():
            if key[0] == "group":
                worst[key] = max(worst.get(key, 0.0), err)
                if len(key[1]) == 1 and key[2] == "ring":
                    assert set(sent) == {"all_gather"}, (key, sent)  # the one exchange of the checks
    assert len(worst) == 2 * len(SCHEMES) and all(err < 1e-12 for err in worst.values()), (world, worst)


def test_second_derivatives_are_right_or_refused_on_every_rank(run):
    """Ulysses differentiates its all-to-all again: equal to explicit attention. The ring's
    backward is a graph node that refuses to be differentiated, on every rank: autograd cannot
    follow the dK and dV that arrive by irecv, and gave wrong second derivatives silently."""
    world, ranks, _ = run
    assert max(r["second", "ulysses"][0] for r in ranks) < 1e-12, world
    assert all(r["second", "ring"][0].startswith("ring_attention has first derivatives only")
               for r in ranks), [r["second", "ring"][0] for r in ranks]


def test_ring_sends_what_the_io_model_counts(run):
    """Forward and backward: N - 1 blocks of K and V forward, N - 1 again backward, N dK, dV."""
    world, ranks, _ = run
    for key, (_, sent, _) in ranks[0].items():
        if key[0] != "ring" or key[3] % world:
            continue
        _, _, _, t, _, h_kv = key
        io = ring_attention_io(t, D_H, world, m_device=10**9)  # numbers per head, forward
        block_bytes = B * h_kv * io.writes * 8  # K and V of N - 1 steps, float64
        assert sent["p2p"] == 2 * block_bytes + world * B * h_kv * 2 * (t // world) * D_H * 8, key


def test_ulysses_moves_the_all_to_all_fraction(run):
    world, ranks, _ = run
    for key, (_, sent, _) in ranks[0].items():
        if key[0] != "ulysses":
            continue
        _, _, _, t, h, h_kv = key
        c, kv_heads = t // world, max(h_kv // world, 1)
        per_slot = B * c * D_H * 8 * (2 * h // world + 2 * kv_heads)  # q and output; k and v
        assert sent["all_to_all"] == 2 * (world - 1) * per_slot, key  # forward and backward


def _bad(rank: int, world: int, port: int, out_dir: str) -> None:
    _init(rank, world, port, timeout_s=10)
    outcomes = {}

    def attempt(name, call):
        began = time.perf_counter()
        try:
            call()
            outcomes[name] = ("no error", "", time.perf_counter() - began)
        except Exception as error:  # every outcome is reported to the test
            outcomes[name] = (type(error).__name__, str(error), time.perf_counter() - began)

    def shard(c, h=2, h_kv=2, dtype=torch.float64, dims=4):
        shape = (1, h, c, 4)[4 - dims:]
        return torch.randn(shape, dtype=dtype), *(torch.randn(1, h_kv, c, 4, dtype=dtype) for _ in range(2))

    float32_on_rank_1 = torch.float32 if rank == 1 else torch.float64
    attempt("dtypes", lambda: ring_attention(*shard(4, dtype=float32_on_rank_1)))
    attempt("ulysses dtypes", lambda: ulysses_attention(*shard(4, dtype=float32_on_rank_1)))
    attempt("zigzag lengths", lambda: ring_attention(*shard(6 if rank == 0 else 4), sharding="zigzag"))
    attempt("ulysses lengths", lambda: ulysses_attention(*shard(3 if rank == 0 else 2)))
    attempt("ulysses heads", lambda: ulysses_attention(*shard(4, h=3, h_kv=3)))
    attempt("one malformed rank", lambda: ring_attention(*shard(4, dims=4 if rank == 0 else 3)))
    attempt("causal on one rank", lambda: ring_attention(*shard(4), is_causal=rank == 0))
    attempt("ring on one rank, ulysses on the other",  # both hung in their first transfer
            lambda: (ring_attention if rank == 0 else ulysses_attention)(*shard(4)))
    attempt("scale on one rank", lambda: ulysses_attention(*shard(4), scale=0.25 if rank == 0 else None))
    # refused on one rank only: the others must not wait in the exchange
    attempt("unknown sharding on one rank",
            lambda: ring_attention(*shard(4), sharding="striped" if rank == 0 else "contiguous"))
    attempt("is_causal not a bool on one rank", lambda: ring_attention(*shard(4), is_causal=1 if rank == 0 else True))
    attempt("a scale that is text", lambda: ring_attention(*shard(4), scale="0.5"))
    attempt("a scale past float's range on one rank",
            lambda: ring_attention(*shard(4), scale=10**400 if rank == 0 else None))
    attempt("a list query on one rank", lambda: ring_attention(
        *(lambda q, k, v: (q.tolist() if rank == 0 else q, k, v))(*shard(4))))
    attempt("a NumPy and a tensor scale", lambda: (ring_attention(*shard(4), scale=np.float64(0.5)),
                                                  ulysses_attention(*shard(4), scale=torch.tensor(0.5))))
    attempt("a valid call after it", lambda: ring_attention(*shard(4), scale=0.5))  # allowed
    attempt("contiguous unequal", lambda: ring_attention(*shard(5 if rank == 0 else 3)))  # allowed
    attempt("a shard of no token on one rank", lambda: ring_attention(*shard(0 if rank == 1 else 4)))
    attempt("grouped heads", lambda: ring_attention(*shard(4, h=3, h_kv=2)))
    # h_kv = 0 raised ZeroDivisionError on that rank alone, before the exchange: the other waited
    attempt("no key heads on one rank", lambda: ring_attention(*shard(4, h_kv=0 if rank == 1 else 2)))

    def empty_batch() -> None:  # a reshape of 0 elements raised torch's RuntimeError
        out = ulysses_attention(*(x[:0] for x in shard(4)))
        if out.shape != (0, 2, 4, 4):
            raise AssertionError(f"expected an empty (0, 2, 4, 4) output, got {tuple(out.shape)}")

    attempt("ulysses empty batch", empty_batch)
    attempt("ulysses kv heads", lambda: ulysses_attention(*shard(4, h=6, h_kv=3)))
    q, k, v = shard(4)
    attempt("key and value heads", lambda: ring_attention(q, k, v[:, :1]))
    attempt("query and key lengths", lambda: ulysses_attention(q, k[..., :2, :], v[..., :2, :]))
    attempt("sharding on one rank", lambda: ring_attention(q, k, v, sharding="zigzag" if rank == 0 else "contiguous"))
    attempt("requires_grad on one rank", lambda: ring_attention(q.requires_grad_(rank == 0), k, v))
    with torch.no_grad():  # no backward will run: requires_grad may differ (allowed)
        attempt("requires_grad under no_grad", lambda: ring_attention(q.requires_grad_(rank == 0), k, v))
    # A rank that never calls: the others' first exchange ends at the group's gloo timeout.
    short = dist.new_group(timeout=timedelta(seconds=0.5))
    if rank == 0:
        attempt("absent rank", lambda: ring_attention(*shard(4), group=short))
    torch.save(outcomes, Path(out_dir) / f"rank{rank}.pt")
    if rank != 0:
        time.sleep(1)  # stay until rank 0 has timed out, so that its wait is the timeout's
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def bad_run(tmp_path_factory):
    return _spawn(_bad, 2, tmp_path_factory.mktemp("bad"))


@pytest.mark.parametrize("case, kind, words", [
    ("dtypes", "ValueError", "same dtype"),
    ("ulysses dtypes", "ValueError", "same dtype"),
    ("zigzag lengths", "ValueError", "needs shard lengths [5, 5]"),
    ("ulysses lengths", "ValueError", "equal length"),
    ("ulysses heads", "ValueError", "h=3, N=2"),
    ("one malformed rank", "ValueError", "at least 4 dimensions"),
    ("causal on one rank", "ValueError", "same is_causal, got [True, False]"),
    ("ring on one rank, ulysses on the other", "ValueError",
     "every rank must call the same function, got ['ring_attention', 'ulysses_attention']"),
    ("grouped heads", "ValueError", "h must be a multiple of h_kv (grouped-query attention), got h=3, h_kv=2"),
    ("ulysses kv heads", "ValueError", "h_kv a multiple or a divisor of N, got h_kv=3, N=2"),
    ("no key heads on one rank", "ValueError", "h and h_kv must be at least 1, got h=2, h_kv=0"),
    ("key and value heads", "ValueError", "k and v must share (b, h_kv, c)"),
    ("query and key lengths", "ValueError", "q and k must share b and c"),
    ("sharding on one rank", "ValueError", "same sharding"),
    ("requires_grad on one rank", "ValueError", "same requires_grad"),
    ("scale on one rank", "ValueError", "same scale, got [0.25, 0.5] on ranks 0 .. 1"),
    ("unknown sharding on one rank", "ValueError", "sharding must be one of ('contiguous', 'zigzag'), got 'striped'"),
    ("is_causal not a bool on one rank", "ValueError", "is_causal must be a bool, got 1"),
    ("a scale that is text", "ValueError", "scale must be None or a finite number, got '0.5'"),
    ("a scale past float's range on one rank", "ValueError", "scale must be None or a finite number"),
    ("a list query on one rank", "ValueError", "query must be a torch.Tensor, got list"),
    ("a shard of no token on one rank", "ValueError", "a shard must hold at least one token, got c=0"),
])
def test_bad_input_fails_on_every_rank_without_waiting(bad_run, case, kind, words):
    for rank, outcomes in enumerate(bad_run):
        name, message, seconds = outcomes[case]
        assert name == kind, (rank, name, message)
        assert seconds < 5, f"rank {rank} took {seconds:.1f} s: it waited instead of failing"
    assert any(words in outcomes[case][1] for outcomes in bad_run), [o[case][1] for o in bad_run]


def test_an_empty_batch_gives_an_empty_output_as_sdpa_does(bad_run):
    assert [outcomes["ulysses empty batch"][:2] for outcomes in bad_run] == [("no error", "")] * 2


def test_contiguous_shards_may_differ_in_length(bad_run):
    assert all(outcomes["contiguous unequal"][0] == "no error" for outcomes in bad_run)


def test_a_call_after_a_refused_one_runs(bad_run):  # nothing of the refused call is left posted
    assert all(outcomes["a valid call after it"][0] == "no error" for outcomes in bad_run)


def test_numpy_and_tensor_scales_are_taken_as_torch_takes_them(bad_run):
    assert all(outcomes["a NumPy and a tensor scale"][0] == "no error" for outcomes in bad_run)


def test_requires_grad_may_differ_under_no_grad(bad_run):
    assert all(outcomes["requires_grad under no_grad"][0] == "no error" for outcomes in bad_run)


def test_shard_sequence_takes_the_rows_of_ring_shards_contiguous_by_default():
    x = torch.arange(10.0)[:, None]  # (t, 1)
    for sharding in ("contiguous", "zigzag"):
        for rank, rows in enumerate(ring_shards(10, 2, sharding)):
            assert torch.equal(shard_sequence(x, rank, 2, sharding), x[rows])
    assert shard_sequence(x, 1, 2).flatten().tolist() == [5, 6, 7, 8, 9]


def test_a_rank_that_never_calls_ends_in_the_gloo_timeout(bad_run):
    name, message, seconds = bad_run[0]["absent rank"]
    assert name in ("RuntimeError", "DistBackendError") and seconds < 10, (name, message, seconds)


@pytest.mark.parametrize("config, device", [
    ("cpu:gloo,cuda:gloo", "cpu"), ("cpu:gloo,cuda:nccl", "cpu"), ("cuda:nccl", "cuda:3"), ("xpu:xccl", "xpu:3"),
])
def test_every_rank_sends_the_table_on_a_device_type_its_group_has(monkeypatch, config, device):
    # a rank whose q is no tensor (refused) picks the type its peers pick, from the group alone
    monkeypatch.setattr(dist, "get_backend_config", lambda group=None: config)
    monkeypatch.setattr(torch.accelerator, "current_device_index", lambda: 3)
    assert _table_device([[1.0]], None) == torch.device(device)
    assert _table_device(torch.zeros(1), None) == torch.device(device)


@pytest.mark.parametrize("lengths", [[5, 5], (5, 5), np.array([5, 5])], ids=["list", "tuple", "array"])
def test_zigzag_lengths_may_be_any_sequence_of_counts(lengths):
    """A tuple was compared with ring_shards' list, never equal: contiguous shards took (3, 2),
    zigzag ones refused (5, 5) as not [5, 5], and a NumPy array raised NumPy's ValueError on
    the truth value of an array."""
    for sharding in ("contiguous", "zigzag"):
        got = shard_positions(lengths, sharding)
        assert [p.tolist() for p in got] == [p.tolist() for p in shard_positions([5, 5], sharding)]


def test_no_process_group_is_a_runtime_error():
    q = torch.randn(1, 2, 4, 4)
    for fn in (ring_attention, ulysses_attention):
        with pytest.raises(RuntimeError, match="init_process_group"):
            fn(q, q, q)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--tokens", "7"], "--tokens must be at least 2N = 8 on 4 ranks, got 7"),
        (["--heads", "6", "--kv-heads", "4"], "--heads must be a multiple of --kv-heads, got 6 and 4"),
        (["--head-dim", "0"], "--head-dim must be at least 1, got 0"),
    ],
)
def test_the_demo_refuses_sizes_it_cannot_shard_before_starting(monkeypatch, capsys, argv, words):
    """As torchrun starts it on 4 ranks: a usage error, not a traceback from every rank."""
    for name, value in {"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "4"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(dist, "init_process_group", lambda *a, **kw: pytest.fail("started a process group"))
    with pytest.raises(SystemExit) as exit_:
        demo.main(argv)
    assert exit_.value.code == 2 and words in capsys.readouterr().err


def test_the_run_takes_seconds(run):
    world, _, seconds = run
    assert seconds < 30, f"world size {world}: {seconds:.1f} s"


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    @pytest.mark.parametrize("fn", [ring_attention, ulysses_attention])
    def test_the_kernel_conventions_hold_before_any_process_group(self, fn):
        q = torch.randn(1, 2, 4, 4)
        with pytest.raises(TypeError, match="did you mean is_causal"):
            fn(q, q, q, causal=True)
        with pytest.raises(ValueError, match=r"is_causal must be a bool.*got tensor\(True\) of type Tensor"):
            fn(q, q, q, is_causal=torch.tensor(True))

    @pytest.mark.parametrize("rank", [-1, 2, True])
    def test_a_shard_belongs_to_a_rank_of_the_group(self, rank):
        # -1 and True took another rank's shard silently; 2 was an IndexError
        with pytest.raises(ValueError, match=rf"rank must be an integer in \[0, 2\), got {rank}"):
            shard_sequence(torch.zeros(1, 8, 4), rank, 2, "zigzag")

    @pytest.mark.parametrize(("x", "got"), [(torch.zeros(8), r"\(8,\)"), ([[0.0]] * 8, "list")])
    def test_the_sequence_is_a_tensor_of_rows(self, x, got):
        # a 1-d x was an IndexError, a list an AttributeError
        with pytest.raises(ValueError, match=rf"x must be a tensor \(\.\.\., t, d\), got {got}"):
            shard_sequence(x, 0, 2)

    def test_a_numpy_rank_is_taken(self):
        x = torch.arange(8.0)[:, None]
        assert torch.equal(shard_sequence(x, np.int64(1), 2), shard_sequence(x, 1, 2))

    @pytest.mark.parametrize("lengths", [5, None, {3: 1}, "32"])
    def test_shard_lengths_are_a_sequence(self, lengths):
        # 5 and None were Python's TypeError (not iterable); a dict was read by its keys, a str
        # by its characters
        with pytest.raises(ValueError, match=r"lengths must be a sequence of shard lengths, one per rank, got "
                                             + re.escape(repr(lengths))):
            shard_positions(lengths, "contiguous")

    @pytest.mark.parametrize("lengths", [[2.5, 1], [3, -1]])
    def test_shard_lengths_are_counts(self, lengths):
        # 2.5 gave float positions; -1 was torch's RuntimeError from arange
        with pytest.raises(ValueError, match=r"lengths\[\d\] must be an integer >= 0"):
            shard_positions(lengths, "contiguous")


def _computed_pace(t: int, world: int, sharding: str) -> int:
    """Pairs of the tiles the ring computes (a diagonal tile whole), busiest rank per step."""
    runs = [_runs(shard) for shard in ring_shards(t, world, sharding)]
    return sum(
        max(sum((q.stop - q.start) * (k.stop - k.start)
                for q, k, _ in _tiles(runs[r], runs[(r - step) % world], True, torch.device("cpu")))
            for r in range(world))
        for step in range(world)
    )


@pytest.mark.parametrize("world", [2, 3, 4, 8])
def test_zigzag_computes_at_most_2n_over_n_plus_1_fewer_pairs_per_step(world) -> None:
    """Chapter 11 reads the measured ring speed-ups against 2N/(N + 1), the ratio of the
    contiguous ring's pace to the zig-zag one's in pairs the tiles compute; ring_work's ratio of
    visible pairs is higher, since diagonal tiles are computed whole."""
    t = 64 * world
    contiguous, zigzag = (_computed_pace(t, world, s) for s in ("contiguous", "zigzag"))
    assert contiguous * (world + 1) == zigzag * 2 * world
    visible = [int(ring_work(t, world, is_causal=True, sharding=s).max(dim=1).values.sum())
               for s in ("contiguous", "zigzag")]
    assert visible[0] * (world + 1) > visible[1] * 2 * world
