"""What both schemes share: the process group, and the checks every rank agrees on.

Notation (see CONTRIBUTING.md): b batch size, h query heads, h_kv key-value heads, t_shard
tokens of a rank's shard (``c`` in the code), d_k and d_v the widths of keys and values; N ranks
in the process group.

Every check that could differ between ranks (a dtype, a head count, a shard length) is settled
by one all-gather of a few integers before any tensor travels, so that every rank sees the same
table and raises the same error: a rank that refused its input never leaves the others waiting
in a send that has no receiver.
"""

import math
import struct
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch import Tensor

from .._checks import check_flags, check_qkv, check_scale

if TYPE_CHECKING:
    from .traffic import Traffic

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# The integers each rank contributes: ok (1, or 0 when its own input is malformed), then its shapes
# and options, which must agree across ranks except for c; the scale travels as its float64 bits.
FIELDS = ("ok", "function", "b", "h", "h_kv", "c", "d_k", "d_v", "dtype", "is_causal", "sharding",
          "requires_grad", "scale")
FUNCTIONS = ("ring_attention", "ulysses_attention")  # what each rank called: one for all


# the Traffic logs of attention.distributed.traffic.count_traffic now open
OPEN_LOGS: list["Traffic"] = []


def note(kind: str, nbytes: int) -> None:
    """Add ``nbytes`` of ``kind`` to every open traffic log."""
    for log in OPEN_LOGS:
        log.add(kind, nbytes)


def merge(out: Tensor, lse: Tensor, out_b: Tensor, lse_b: Tensor) -> tuple[Tensor, Tensor]:
    """Two partials normalized over disjoint keys, merged by equation (11.8): Z (..., c, d_v),
    lse (..., c); a query that has seen no key yet has lse = -inf and contributes nothing."""
    new = torch.logaddexp(lse, lse_b)  # (..., c)
    safe = new.masked_fill(new == -math.inf, 0.0)
    return torch.exp(lse - safe)[..., None] * out + torch.exp(lse_b - safe)[..., None] * out_b, new


def group_info(group: dist.ProcessGroup | None, name: str) -> tuple[int, int]:
    """(rank, N) in ``group``; RuntimeError without an initialised default process group."""
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            f"{name} runs on every rank of a process group: call "
            "torch.distributed.init_process_group first (or run under torchrun), got none initialised"
        )
    return dist.get_rank(group), dist.get_world_size(group)


def global_rank(group: dist.ProcessGroup | None, rank: int) -> int:
    """The global rank of ``rank`` of ``group`` (point-to-point ops address global ranks)."""
    return rank if group is None else dist.get_global_rank(group, rank)


def local_problem(q: Tensor, k: Tensor, v: Tensor) -> str | None:
    """What is wrong with this rank's own query, key, value (b, h, c, d), or None."""
    try:
        check_qkv(q, k, v, min_dim=4)
    except ValueError as error:
        return str(error)
    for name, x in (("query", q), ("key", k), ("value", v)):
        if x.dim() != 4:
            return f"{name} must be (b, h, c, d), got shape {tuple(x.shape)}"
    if k.shape[:3] != v.shape[:3]:
        return f"k and v must share (b, h_kv, c), got {tuple(k.shape)} and {tuple(v.shape)}"
    if q.shape[0] != k.shape[0] or q.shape[2] != k.shape[2]:
        return f"q and k must share b and c, got {tuple(q.shape)} and {tuple(k.shape)}"
    if q.shape[-1] != k.shape[-1]:
        return f"q and k must share d_k, got {q.shape[-1]} and {k.shape[-1]}"
    if q.shape[1] < 1 or k.shape[1] < 1:  # h % h_kv below; a rank that raised would leave the others waiting
        return f"h and h_kv must be at least 1, got h={q.shape[1]}, h_kv={k.shape[1]}"
    if q.shape[1] % k.shape[1]:
        return f"h must be a multiple of h_kv (grouped-query attention), got h={q.shape[1]}, h_kv={k.shape[1]}"
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in DTYPES:
        return f"q, k and v must share one dtype among {DTYPES}, got {q.dtype}, {k.dtype}, {v.dtype}"
    if q.shape[2] < 1:
        return f"a shard must hold at least one token, got c={q.shape[2]}"
    return None


def _bits(x: float) -> int:
    """The float64 x as the int64 of the same bits, to travel in the table of integers."""
    return struct.unpack("<q", struct.pack("<d", x))[0]


def _float(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<q", bits))[0]


def _table_device(q: object, group: dist.ProcessGroup | None) -> torch.device:
    """Where the table travels: a device type every rank picks alike from the group's backends,
    whatever its q (the CPU where the group has a CPU backend, such as gloo; else its device
    type, CUDA for nccl), on q's device where q is a tensor of that type."""
    kinds = [part.split(":")[0] for part in dist.get_backend_config(group).split(",")]
    kind = "cpu" if "cpu" in kinds else kinds[0]
    if kind == "cpu":
        return torch.device("cpu")
    if isinstance(q, Tensor) and q.device.type == kind:
        return q.device
    return torch.device(kind, torch.accelerator.current_device_index())


def agree(q: Tensor, k: Tensor, v: Tensor, *, is_causal: bool, sharding: int, scale: float | None,
          group: dist.ProcessGroup | None, name: str,
          refused: str | None = None) -> tuple[list[int], float | None]:
    """Exchange every rank's shapes and options; raise the same error on every rank, or return the
    shard lengths c of ranks 0 .. N - 1 and the checked scale (a float, or None for 1/sqrt(d_k)).
    ``refused``: what the caller found wrong with this rank's input, refused in the exchange too."""
    problem = local_problem(q, k, v) or refused
    try:  # refused in the exchange, so that no rank is left waiting
        check_flags(is_causal=is_causal)
        scale = check_scale(scale)
    except ValueError as error:
        problem = problem or str(error)
    if problem is not None and not (dist.is_available() and dist.is_initialized()):
        raise ValueError(f"{name}: {problem}")  # no process group: no rank can be waiting
    rank, world = group_info(group, name)
    if problem is None:
        row = [1, FUNCTIONS.index(name), q.shape[0], q.shape[1], k.shape[1], q.shape[2], q.shape[3], v.shape[3],
               DTYPES.index(q.dtype), int(is_causal), sharding,
               int(torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v))),
               _bits(q.shape[3] ** -0.5 if scale is None else scale)]
    else:
        row = [0] + [-1] * (len(FIELDS) - 1)
    mine = torch.tensor(row, dtype=torch.int64, device=_table_device(q, group))
    table = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(table, mine, group=group)
    note("all_gather", mine.numel() * mine.element_size())
    rows = [t.tolist() for t in table]  # (N, fields)
    if problem is not None:
        raise ValueError(f"{name}, rank {rank}: {problem}")
    refusing = [r for r, values in enumerate(rows) if values[0] == 0]
    if refusing:
        raise ValueError(f"{name}: rank(s) {refusing} refused their input (see their error); "
                         f"every rank must pass well-formed q, k, v and valid options")
    for i, key in enumerate(FIELDS):
        if key in ("ok", "c"):
            continue
        values = [values[i] for values in rows]
        if len(set(values)) > 1:
            shown = ([str(DTYPES[x]) for x in values] if key == "dtype"
                     else [FUNCTIONS[x] for x in values] if key == "function"
                     else [bool(x) for x in values] if key in ("is_causal", "requires_grad")
                     else [_float(x) for x in values] if key == "scale" else values)
            verb = "call" if key == "function" else "pass"
            raise ValueError(f"{name}: every rank must {verb} the same {key}, got {shown} on ranks 0 .. {world - 1}")
    return [values[FIELDS.index("c")] for values in rows], scale
