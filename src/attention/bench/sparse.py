"""Chapter 14's selections timed against causal softmax attention over t.

Notation (see CONTRIBUTING.md): b batch size, t tokens, h heads, d_h head width (d_k = d_v = d_h),
k_top keys each query keeps, B block size, w window; h_I and d_I the indexer's heads and width.

Variants, on Q, K, V (b, h, t, d_h) with b = tokens // t, as the delta part; each selection keeps
about k_top keys per query, so that they compare at one budget:

- ``softmax-sdpa``: ``torch.nn.functional.scaled_dot_product_attention``, the baseline;
- ``dsa-indexer``: :class:`attention.sparse.LightningIndexer` alone, the scores of every pair:
  h_I = h / 2 heads (DeepSeek-V3.2 has 64 for 128 heads) of width d_I = d_h, RoPE on half of it,
  on tokens x (b, t, h d_h) and query latents (b, t, d_h);
- ``dsa-dense``, ``dsa-gathered``: the indexer, then :func:`attention.sparse.dsa_attention` over
  the k_top keys it ranks highest, masking the t × t scores or gathering the keys (t × k_top);
- ``moba``: :func:`attention.sparse.moba_attention` with k_top / B blocks of B keys;
- ``nsa``: :func:`attention.sparse.nsa_attention` with k_top / B selected blocks of B keys, a
  window of w = k_top keys and gates drawn in [0, 1].

The check (float64): the selection is the one the timed call makes (DSA: the timed call's index
scores; MoBA and NSA: their rules on the same inputs in the same dtype), since a float64
selection may rank two near-equal scores the other way and pick another key. The attention over
that selection is computed in float64, one head at a time to bound memory (b t^2 numbers at
once): the same form for DSA, and the masked softmax of each branch for MoBA and NSA (NSA's
branches mixed by its gates); softmax against causal softmax attention, the indexer against
itself in float64. The indexer runs without gradients (DeepSeek trains it apart from the model's
loss), so its row has no backward pass.

FLOPs count the work of the selection as defined, whatever the form computes: 4 d_h per kept
query-key pair and head (x 3.5 with the backward pass), 2 h_I (d_I + 1) per pair for the indexer
(:func:`attention.sparse.dsa_flops`'s count), 2 d_h per query, block and head for MoBA's gate.
A dense form computes every pair and masks most, so its FLOP/s read low.
"""

from collections.abc import Callable
from dataclasses import asdict
from typing import Any, cast

import torch
from torch import Tensor
from torch.nn import functional as F

from ..flops import BACKWARD_FACTOR, attention_flops
from ..masks import MaskMod, dense_attention, sliding_window, to_dense
from ..sparse import LightningIndexer, dsa_attention, moba_attention, moba_mask, nsa_attention, nsa_mask
from .linear import Form, measure_variant, qkv_inputs
from .rows import SparseRow
from .sweep import Settings, kernel_problems

VARIANTS = ("softmax-sdpa", "dsa-indexer", "dsa-dense", "dsa-gathered", "moba", "nsa")
TOP_K, BLOCK_SIZE = 256, 64  # 1/4 … 1/64 of t = 1024 … 16384: DeepSeek's 2048 of 8K … 128K
METHOD = (
    "causal attention on Q, K, V (b, h, t, d_h), b = tokens // t; DSA (lightning indexer of h/2 heads "
    "of width d_h, then k_top keys, dense or gathered), MoBA (k_top/B blocks of B) and NSA (k_top/B "
    "blocks of B, a window of k_top, gates ~ U(0, 1)), each keeping about k_top keys per query; the "
    "attention checked in float64, one head at a time, over the selection the timed call made, before "
    "it is timed as the sweep times; FLOPs: 4 d_h per kept pair and head (x 3.5 with backward) plus "
    "the indexer's 2 h_I (d_I + 1) per pair and MoBA's gate"
)


def check_sizes(seq_lens: tuple[int, ...], head_dims: tuple[int, ...], top_k: int, block_size: int) -> None:
    """Raise ValueError unless B divides k_top and every t, k_top / B >= 2 (NSA's first and own
    blocks), and 4 divides every d_h (the indexer rotates d_h / 2 features in two halves)."""
    if top_k < 1 or block_size < 1 or top_k % block_size or top_k // block_size < 2:
        raise ValueError(f"the sparse part needs a block size B dividing k_top with k_top / B >= 2, "
                         f"got k_top={top_k} and B={block_size}")
    if any(t % block_size for t in seq_lens):
        raise ValueError(f"the sparse part needs B={block_size} to divide every t, got t = {list(seq_lens)}")
    if any(d_h % 4 for d_h in head_dims):
        raise ValueError(f"the sparse part needs head widths divisible by 4, got {list(head_dims)}")


def _pairs(t: int, keep: Callable[[Tensor], Tensor]) -> int:
    """Σ over queries i < t of keep(i): the query-key pairs a selection keeps per head."""
    return int(keep(torch.arange(t)).sum())


def _block_keys(block_size: int, blocks: int) -> Callable[[Tensor], Tensor]:
    """Keys of query i under a block selection: its own block up to i and up to blocks - 1
    earlier blocks, as many as there are."""
    return lambda i: (i // block_size).clamp(max=blocks - 1) * block_size + i % block_size + 1


def _head_by_head(h: int, attend: Callable[[int], Tensor]) -> Tensor:
    """attend(j) (b, 1, t, d) for each head j, concatenated: (b, h, t, d)."""
    return torch.cat([attend(j) for j in range(h)], dim=1)


def _rule(mask: Tensor) -> MaskMod:
    """The rule of a dense mask (b, 1, t, t)."""
    return lambda b, h, q_idx, kv_idx: mask[b, h, q_idx, kv_idx]


def _block_means(x: Tensor, block_size: int) -> Tensor:
    """(b, h, t, d) -> (b, h, t / B, d): the mean of each block of B rows."""
    return x.unflatten(2, (x.shape[2] // block_size, block_size)).mean(dim=3)


def _indexer(h: int, d_h: int, seed: int) -> LightningIndexer:
    """The indexer of the DSA variants, drawn from ``seed`` without touching the global generator."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return LightningIndexer(h * d_h, d_h, index_heads=max(1, h // 2), index_dim=d_h, rope_dim=d_h // 2)


def _dsa_inputs(b: int, h: int, t: int, d_h: int, generator: torch.Generator,
                device: torch.device) -> list[Tensor]:
    """Q, K, V (b, h, t, d_h), then the tokens x (b, t, h d_h) and query latents (b, t, d_h)."""
    x = torch.randn(b, t, h * d_h, generator=generator, device=device)
    return [*qkv_inputs(b, h, t, d_h, generator, device), x, torch.randn(b, t, d_h, generator=generator,
                                                                         device=device)]


def _nsa_inputs(b: int, h: int, t: int, d_h: int, generator: torch.Generator,
                device: torch.device) -> list[Tensor]:
    """Q, K, V (b, h, t, d_h), then gates (b, h, t, 3) in [0, 1]."""
    return [*qkv_inputs(b, h, t, d_h, generator, device), torch.rand(b, h, t, 3, generator=generator,
                                                                     device=device)]


def _attention_flops(per_head_pairs: int, b: int, h: int, d_h: int, backward: bool) -> float:
    return 4.0 * b * h * d_h * per_head_pairs * ((1.0 + BACKWARD_FACTOR) if backward else 1.0)


def sparse_form(name: str, h: int, d_h: int, top_k: int = TOP_K, block_size: int = BLOCK_SIZE,
                seed: int = 123) -> Form:
    """The ``sparse`` part's variant ``name`` for h heads of width d_h (see the module docstring)."""
    if name not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {name!r}")
    blocks, window = top_k // block_size, top_k
    state: dict[str, Any] = {}  # what the first timed call selected, for the check

    if name == "softmax-sdpa":
        def sdpa(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        return Form(sdpa, lambda q, k, v: _head_by_head(
            h, lambda j: sdpa(q[:, j:j + 1], k[:, j:j + 1], v[:, j:j + 1])),
            lambda b, h_, t, d, backward: attention_flops(b, h_, t, d, causal=True, backward=backward))

    if name.startswith("dsa"):
        indexer = _indexer(h, d_h, seed)
        copies = {torch.float32: indexer}  # the same weights in each dtype the run uses

        def index(x: Tensor, q_latent: Tensor) -> Tensor:
            if x.dtype not in copies:
                copies[x.dtype] = _indexer(h, d_h, seed).to(x.dtype)
            with torch.no_grad():  # DeepSeek trains the indexer apart from the model's loss
                return copies[x.dtype](x, q_latent)  # (b, t, t)

        def indexer_flops(b: int, t: int) -> float:
            return 2.0 * b * indexer.index_heads * (indexer.index_dim + 1) * t * (t + 1) // 2

        if name == "dsa-indexer":
            def reference(x: Tensor, q_latent: Tensor) -> Tensor:  # one batch row at a time
                double = _indexer(h, d_h, seed).double()
                with torch.no_grad():
                    return torch.cat([double(x[i:i + 1], q_latent[i:i + 1]) for i in range(len(x))])

            return Form(index, reference, lambda b, h_, t, d, backward: indexer_flops(b, t),
                        inputs=lambda b, h_, t, d, g, dev: _dsa_inputs(b, h_, t, d, g, dev)[3:],
                        grad_inputs=0)
        gather = name == "dsa-gathered"

        def dsa(q: Tensor, k: Tensor, v: Tensor, x: Tensor, q_latent: Tensor) -> Tensor:
            scores = index(x, q_latent)
            if "checked" not in state:  # the first call's selection, which the check reads
                state.update(scores=scores, checked=True)
            return dsa_attention(q, k, v, scores, top_k=top_k, gather=gather)

        def dsa_reference(q: Tensor, k: Tensor, v: Tensor, x: Tensor, q_latent: Tensor) -> Tensor:
            scores = state.pop("scores")  # the timed call's selection, in its dtype
            return _head_by_head(h, lambda j: dsa_attention(
                q[:, j:j + 1], k[:, j:j + 1], v[:, j:j + 1], scores, top_k=top_k, gather=gather))

        def dsa_flops(b: int, h_: int, t: int, d: int, backward: bool) -> float:
            kept = _pairs(t, lambda i: (i + 1).clamp(max=top_k))
            return indexer_flops(b, t) + _attention_flops(kept, b, h_, d, backward)

        return Form(dsa, dsa_reference, dsa_flops, _dsa_inputs)

    def selection(q: Tensor, k: Tensor) -> Tensor:
        """The timed call's selection (b, h, t, t), from Q and K in the timed call's dtype."""
        rule = (moba_mask(q, k, block_size=block_size, top_k=blocks) if name == "moba"
                else nsa_mask(q, k, block_size=block_size, top_k=blocks))
        return to_dense(rule, q.shape[2], k.shape[2], q.shape[0], q.shape[1], device=q.device)

    if name == "moba":
        def moba(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
            if "checked" not in state:  # the first call's dtype, in which the check selects
                state.update(dtype=q.dtype, checked=True)
            return moba_attention(q, k, v, block_size=block_size, top_k=blocks)

        def moba_reference(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
            dtype = state.pop("dtype")
            chosen = selection(q.detach().to(dtype), k.detach().to(dtype))  # (b, h, t, t)
            return _head_by_head(h, lambda j: dense_attention(
                q[:, j:j + 1], k[:, j:j + 1], v[:, j:j + 1], mask_mod=_rule(chosen[:, j:j + 1])))

        def moba_flops(b: int, h_: int, t: int, d: int, backward: bool) -> float:
            kept = _pairs(t, _block_keys(block_size, blocks))
            return 2.0 * b * h_ * t * (t // block_size) * d + _attention_flops(kept, b, h_, d, backward)

        return Form(moba, moba_reference, moba_flops)

    def nsa(q: Tensor, k: Tensor, v: Tensor, gates: Tensor) -> Tensor:
        if "checked" not in state:  # the first call's dtype, in which the check selects
            state.update(dtype=q.dtype, checked=True)
        return nsa_attention(q, k, v, gates, block_size=block_size, top_k=blocks, window=window)

    def complete(b: Tensor, h_: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return (kv_idx + 1) * block_size <= q_idx + 1  # the block has ended at the query

    def nsa_reference(q: Tensor, k: Tensor, v: Tensor, gates: Tensor) -> Tensor:
        dtype = state.pop("dtype")
        chosen = selection(q.detach().to(dtype), k.detach().to(dtype))  # (b, h, t, t)

        def head(j: int) -> Tensor:  # the three branches of equation (14.4), mixed by the gates
            qj, kj, vj = q[:, j:j + 1], k[:, j:j + 1], v[:, j:j + 1]
            branches = (
                dense_attention(qj, _block_means(kj, block_size), _block_means(vj, block_size),
                                mask_mod=complete),
                dense_attention(qj, kj, vj, mask_mod=_rule(chosen[:, j:j + 1])),
                dense_attention(qj, kj, vj, mask_mod=sliding_window(window)),
            )
            # three branches: a tensor, never the 0 that sum() returns for an empty sequence
            return cast(Tensor, sum(g[..., None] * z for g, z in zip(gates[:, j:j + 1].unbind(-1), branches)))

        return _head_by_head(h, head)

    def nsa_flops(b: int, h_: int, t: int, d: int, backward: bool) -> float:
        kept = (_pairs(t, lambda i: (i + 1) // block_size) + _pairs(t, _block_keys(block_size, blocks))
                + _pairs(t, lambda i: (i + 1).clamp(max=window)))
        return _attention_flops(kept, b, h_, d, backward)

    return Form(nsa, nsa_reference, nsa_flops, _nsa_inputs)


def measure_sparse(
    name: str, b: int, h: int, t: int, d_h: int, dtype: torch.dtype, backward: bool, settings: Settings,
    top_k: int = TOP_K, block_size: int = BLOCK_SIZE, seed: int = 123,
) -> SparseRow:
    """One row of the sparse part: :func:`~attention.bench.linear.measure_variant` on the variant's
    form, or a skipped row for the indexer's backward pass."""
    sizes = {"top_k": top_k, "block_size": block_size, "window": top_k}
    if name == "dsa-indexer" and backward:
        return SparseRow(variant=name, pass_name="forward+backward", b=b, h=h, t=t, d_h=d_h,
                         dtype=str(dtype).removeprefix("torch."), status="skipped",
                         reason="the indexer runs without gradients: DeepSeek trains it apart from "
                         "the model's loss", max_rel_err=None, median_s=None, iqr_s=None, repeats=None,
                         number=None, flops=None, tflops=None, **sizes)
    form = sparse_form(name, h, d_h, top_k, block_size, seed)
    row = asdict(measure_variant(name, form, b, h, t, d_h, dtype, backward, settings, block_size, seed))
    del row["chunk_size"], row["run"]
    return SparseRow(**(row | sizes))  # row's fields and sizes' do not overlap


def run_sparse(settings: Settings, top_k: int = TOP_K, block_size: int = BLOCK_SIZE,
               rows: list[dict[str, Any]] | None = None,
               done: Callable[[SparseRow], None] | None = None) -> list[dict[str, Any]]:
    """The ``sparse`` rows of a results file (:class:`~attention.bench.rows.SparseRow` as JSON):
    every head width of ``settings``, dtype, pass, t and variant, appended to ``rows``;
    ``done(row)`` after each (the command line saves the file, so that a run killed at a long t
    keeps the rows before it)."""
    check_sizes(settings.seq_lens, settings.head_dims, top_k, block_size)
    rows = [] if rows is None else rows
    for p in kernel_problems(settings):
        for name in VARIANTS:
            row = measure_sparse(name, p.b, p.h, p.t, p.d_h, p.dtype, p.backward, settings, top_k,
                                 block_size, settings.seed)
            rows.append(row.to_json())
            if done is not None:
                done(row)
    return rows
