"""The document mask, timed four ways: dense SDPA, FlexAttention, packed (varlen) and padded.

Notation (see CONTRIBUTING.md): n documents (document m has t_m tokens) packed into one row of
t = t_1 + ... + t_n tokens, t_max the longest; h heads of width d_h; B the block size of a
BlockMask (128, FlexAttention's default).

Every document attends causally to itself only (chapter 11's causal document mask). The lengths
are drawn once per t from the seed: n - 1 cut points uniform over the row. The four variants
compute the same outputs and form score matrices of different sizes (:func:`scores_formed`):

    sdpa-dense-mask    one row (1, h, t, d_h), SDPA with the dense (t, t) boolean mask  t²
    flex-block-mask    torch.compile(flex_attention) with the rule's BlockMask   (document tiles) · B²
    varlen             attention.packing.varlen_attention, SDPA per document        Σ t_m²
    sdpa-padded        the documents padded to (n, h, t_max, d_h), SDPA is_causal    n · t_max²

Each is checked against a float64 reference (each document alone) before it is timed, forward
only, in float32. ``flops`` is the useful work, 4 · h · d_h · Σ t_m (t_m + 1) / 2, the same for
every variant; ``scores_formed`` counts the score matrices each forms, by one convention for
all: whole matrices (or whole tiles), before any causal skipping (see :func:`scores_formed`).
"""

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F

from ..masks import and_masks, block_sparsity, causal, document, to_dense
from ..packing import cu_seqlens_from_lengths, document_ids, unpack, varlen_attention
from .rows import MaskRow
from .sweep import Settings, exceeds
from .timing import time_cpu, time_cuda

SEQ_LENS = (512, 1024, 2048)  # t, packed tokens per row
DOCUMENTS = 8  # n
BLOCK_SIZE = 128  # FlexAttention's default B
TOLERANCE = 2e-3  # float32 against float64, as the sweep's
VARIANTS = {
    "sdpa-dense-mask": "F.scaled_dot_product_attention on the packed row, dense boolean document mask",
    "flex-block-mask": "torch.compile(flex_attention) on the packed row, BlockMask of the document rule",
    "varlen": "attention.packing.varlen_attention: SDPA on each document alone (is_causal)",
    "sdpa-padded": "F.scaled_dot_product_attention on the documents padded to t_max (is_causal)",
}
METHOD = ("the causal document mask of chapter 11 over one packed row of t tokens holding 8 documents "
          "(lengths drawn from the seed); each variant checked against float64 first, then timed "
          "forward in float32 like the sweep; flops = 4 h d_h sum t_m (t_m + 1) / 2, the useful work")


def document_lengths(t: int, n: int, seed: int) -> torch.Tensor:
    """n lengths >= 1 that sum to t: the row cut at n - 1 distinct points drawn from ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    cuts = torch.randperm(t - 1, generator=generator)[: n - 1].sort().values + 1  # (n - 1,)
    return torch.diff(torch.cat([torch.tensor([0]), cuts, torch.tensor([t])]))  # (n,)


def _calls(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor,
           device: torch.device, compile_flex: bool) -> dict[str, Any]:
    """The four variants as functions of no arguments, for the packed q, k, v (1, h, t, d_h)."""
    t = q.shape[2]
    cu_seqlens = cu_seqlens_from_lengths(lengths)
    rule = and_masks(causal(), document(document_ids(cu_seqlens).to(device)))
    dense = to_dense(rule, t, t, device=device)  # (t, t)
    q_var, k_var, v_var = (x[0].transpose(0, 1).contiguous() for x in (q, k, v))  # (t, h, d_h)
    q_pad, k_pad, v_pad = (unpack(x, cu_seqlens).transpose(1, 2) for x in (q_var, k_var, v_var))  # (n, h, t_max, d_h)
    calls = {
        "sdpa-dense-mask": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=dense),
        "varlen": lambda: varlen_attention(q_var, k_var, v_var, cu_seqlens.to(device), is_causal=True
                                           ).transpose(0, 1)[None],  # (1, h, t, d_h)
        "sdpa-padded": lambda: _repack(F.scaled_dot_product_attention(q_pad, k_pad, v_pad, is_causal=True),
                                       lengths),
    }
    if compile_flex:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        torch._dynamo.reset()
        block_mask = create_block_mask(rule, None, None, t, t, device=device, BLOCK_SIZE=BLOCK_SIZE)
        flex = torch.compile(flex_attention, dynamic=False, fullgraph=True)
        calls["flex-block-mask"] = lambda: flex(q, k, v, block_mask=block_mask)
    return calls


def _repack(out: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """(n, h, t_max, d_h) padded outputs back to the packed row (1, h, t, d_h)."""
    real = torch.arange(out.shape[2], device=out.device) < lengths.to(out.device)[:, None]
    return out.transpose(1, 2)[real].transpose(0, 1)[None]  # (1, h, t, d_h)


def scores_formed(variant: str, lengths: torch.Tensor) -> int:
    """Score entries per head that ``variant`` forms for documents of ``lengths``.

    One convention for every form: its score matrices counted whole, before any causal skipping
    (SDPA with a dense mask computes all of them; SDPA with is_causal and FlexAttention skip
    the blocks above the diagonal, a third to a half of theirs at the sizes of chapter 11). The dense mask forms t², the padded batch n · t_max², the
    per-document loop Σ t_m², and FlexAttention its B x B tiles that the document rule alone
    keeps, times B²: Σ t_m² and the hidden pairs of the tiles that cross a document boundary.
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {tuple(VARIANTS)}, got {variant!r}")
    t, t_max, n = int(lengths.sum()), int(lengths.max()), len(lengths)
    if variant == "flex-block-mask":
        rule = document(document_ids(cu_seqlens_from_lengths(lengths)))
        return int((block_sparsity(rule, t, t, BLOCK_SIZE) > 0).sum()) * BLOCK_SIZE**2
    return {"sdpa-dense-mask": t * t, "varlen": int((lengths**2).sum()),
            "sdpa-padded": n * t_max * t_max}[variant]


def measure_form(call: Callable[[], torch.Tensor], want: torch.Tensor, row: MaskRow, settings: Settings) -> MaskRow:
    """One form: checked against the float64 ``want``, then timed like the sweep's variants."""
    cuda = settings.device.type == "cuda"
    try:
        call()  # warm-up: a compiled form compiles here
        began = time.perf_counter()
        out = call()
        if cuda:
            torch.cuda.synchronize()
        estimate = time.perf_counter() - began
        error = float((out.double() - want).abs().max() / want.abs().max())
        row = replace(row, max_rel_err=error)
        if exceeds(error, TOLERANCE):
            return replace(row, status="failed", reason=f"relative error {error:.2e} > {TOLERANCE:.0e}")
        if cuda:
            timing = time_cuda(call, estimate, settings.repeats, settings.max_time, settings.warmup_s)
        else:
            timing = time_cpu(call, estimate, settings.repeats, settings.min_time, settings.max_time)
    except Exception as error:  # recorded in the results, never hidden
        message = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return replace(row, status="unsupported", reason=f"{type(error).__name__}: {message}")
    return replace(row, median_s=timing.median_s, iqr_s=timing.iqr_s, repeats=timing.repeats,
                   number=timing.number, tflops=row.flops / timing.median_s / 1e12)


def run_masks(settings: Settings, seq_lens: tuple[int, ...] = SEQ_LENS) -> list[dict[str, Any]]:
    """The ``masks`` rows of a results file (:class:`~attention.bench.rows.MaskRow` as JSON):
    every t, every form (see the module docstring).

    ``settings`` is the sweep's :class:`~attention.bench.sweep.Settings`: its device, seed,
    heads h (d_h = d_model / h), repeats and times, and ``compile`` (FlexAttention is skipped
    without it).
    """
    device, h = settings.device, settings.heads
    d_h = settings.d_model // h
    rows = []
    for t in seq_lens:
        lengths = document_lengths(t, DOCUMENTS, settings.seed)
        torch.manual_seed(settings.seed)
        q, k, v = (torch.randn(1, h, t, d_h, device=device) for _ in range(3))  # (1, h, t, d_h)
        cu_seqlens = cu_seqlens_from_lengths(lengths)
        q64, k64, v64 = (x[0].transpose(0, 1).double() for x in (q, k, v))  # (t, h, d_h), float64
        want = varlen_attention(q64, k64, v64, cu_seqlens.to(device), is_causal=True)  # (t, h, d_h)
        want = want.transpose(0, 1)[None]  # (1, h, t, d_h)
        useful = 4.0 * h * d_h * float((lengths * (lengths + 1) // 2).sum())
        calls = _calls(q, k, v, lengths, device, settings.compile)
        for variant, summary in VARIANTS.items():
            row = MaskRow(
                variant=variant, summary=summary, t=t, lengths=lengths.tolist(), h=h, d_h=d_h,
                dtype="float32", pass_name="forward", status="ok", reason=None,
                block_size=BLOCK_SIZE if variant == "flex-block-mask" else None,
                scores_formed=scores_formed(variant, lengths), flops=useful, max_rel_err=None,
                median_s=None, iqr_s=None, repeats=None, number=None, tflops=None,
            )
            if variant not in calls:
                row = replace(row, status="skipped", reason="torch.compile turned off (--no-compile)")
            else:
                row = measure_form(calls[variant], want, row, settings)
            rows.append(row.to_json())
    return rows
