"""FlashAttention's algorithm, written in plain PyTorch so that it can be read line by line.

Notation (see CONTRIBUTING.md): ``...`` any leading batch dimensions (for example ``b, h``),
``t_q`` / ``t_k`` number of queries / keys, ``d_k`` width of queries and keys, ``d_v`` width of
values, ``n_q`` / ``n_k`` rows in the current query / key block, ``g`` query heads per key-value
head (1 without grouped-query attention), ``N`` all leading dimensions flattened into one;
``O``, ``P``, ``dO`` and ``dP`` are FlashAttention's names for the output, the weights and their
gradients (the book's Z, A, dZ and dA), ``S`` the scaled scores and ``lse`` the log-sum-exp.

Attention is computed tile by tile: a block of queries meets a block of keys, and only that
``(n_q, n_k)`` tile of scores ever exists. The softmax over a full row is assembled from the
tiles with the *online softmax*. For one query row, with s_j its scaled score against key j,
after some key blocks have been seen, keep

    m   = the largest score seen so far,
    l   = sum over seen keys of exp(s_j - m),
    acc = sum over seen keys of exp(s_j - m) · v_j.

A new block with scores s_j raises the maximum to m_new = max(m, max_j s_j). Every old term was
computed against m, and exp(s_j - m) · exp(m - m_new) = exp(s_j - m_new), so rescaling by
exp(m - m_new) puts the old terms on the new reference point:

    l   ← exp(m - m_new) · l   + sum_j exp(s_j - m_new)
    acc ← exp(m - m_new) · acc + sum_j exp(s_j - m_new) · v_j

After the last block, z = acc / l is exactly softmax(s) V, s the scaled scores, because softmax
is unchanged when every score is shifted by the same m. No exponent is ever positive, so nothing
overflows.

The forward pass keeps only the output and the log-sum-exp lse = m + log l of each row. The
backward pass recomputes each tile's weights from it, P = exp(S - lse), and with
D = rowsum(dO ⊙ O) (equal to rowsum(P ⊙ dP), since O = P V) it accumulates, tile by tile,

    dV += Pᵀ dO,   dP = dO Vᵀ,   dS = P ⊙ (dP - D),   dQ += scale · dS K,   dK += scale · dSᵀ Q

so memory stays O(t · d) in both passes instead of O(t_q · t_k). The returned lse is
differentiable too: ∂lse_i/∂s_ij = P_ij, so a gradient dlse of it (ring attention merges partial
outputs with weights made from their lse) enters as dS = P ⊙ (dP - (D - dlse)). A row that meets
no finite score (t_k = 0, or all its scores -inf) gets output 0 and lse = -inf, as
FlexAttention and torch return it; the backward treats its lse as +inf, so that its
P = exp(S - lse) = 0 instead of exp(-inf - (-inf)) = nan (FlashAttention-2 stores +inf).

Learned sinks (gpt-oss): one logit σ per query head in every row's softmax denominator, a key
of score σ and value zero. It starts each row's m at σ and its l at 1 before the first tile;
lse then includes it, so the backward's P = exp(S - lse) needs nothing new, and dσ is
-Σ_i P_sink,i (D_i - dlse_i), P_sink,i = exp(σ - lse_i): chapter 15, equation (15.2).

Masks without a mask tensor. Query i sits at position i + offset, with offset 0 for causal
attention aligned top-left (torch's ``is_causal``) and t_k - t_q aligned bottom-right (torch's
``causal_lower_right``); it sees key j when j <= i + offset and, with a window w, also
j > i + offset - w. A tile that no query of its block may see is skipped, a tile that every
query sees entirely is used as it is, and only the tiles that cross an edge are masked.

Speed in plain PyTorch (each line of Python costs microseconds, so there are few per tile):

- large tiles (see :func:`default_block_sizes`);
- queries are multiplied by the scale once, not every tile of scores;
- the exponentials, the rescaling and the accumulation run in place (``sub_``, ``exp2_``,
  ``baddbmm`` into its own input), and each pass writes its tiles of scores (and dP) into one
  buffer made at its start, not into a new tensor per tile;
- a query block's key blocks are laid out backwards from its last visible key, so that at most
  one of them crosses the causal diagonal;
- a mask is added as a bias of 0 and -inf, built once per distinct tile shape;
- the backward pass cuts the scaled queries, dO, lse and D into blocks once, instead of once per
  tile;
- grouped-query attention stacks the g query heads of a key-value head as rows of one block, so
  a key tile is read once for all of them and never copied.

Scores are kept in base 2, as FlashAttention-2's kernels and the Triton tutorial keep them: with
c = scale · log2(e), exp(scale · ω) = 2^(c · ω), so c is folded into the queries with the scale
and ``exp2`` replaces ``exp`` (both are within about one ulp of float64). A GPU evaluates 2^x in
one instruction, and c then joins the subtraction of the row maximum in one fused multiply-add;
the loop keeps the kernels' base so that it reads like them.

Precision, as in fused kernels: for float16 and bfloat16 inputs every statistic and accumulator
(S, m, l, acc and lse forward; D, P, dP, dS and the dQ, dK, dV sums backward) is float32. K and
V are upcast once, Q one block at a time, and each result is rounded to the input dtype once,
when it is written.
Rounding acc and l to 8 or 11 bits after every key block instead would add an error per block.
The output is also saved for the backward unrounded (float32, 2 more bytes per element than the
rounded one), and D is formed from it: D is the P-weighted mean of the row's dP, so dP - D
cancels, and the rounding error of a half-precision O would pass whole into every dS of the row.
FlashAttention-2 forms D from the rounded O (``dot_do_o`` in its flash_bwd_preprocess_kernel.h);
in bfloat16 at t_q = 64, t_k = 4, d_h = 64, doing so makes dQ several times less accurate than
the exact answer rounded once, which forming D from the unrounded O gives
(tests/package/test_half_precision.py).
"""

import math
from typing import Any, Literal, NoReturn, TypedDict, Unpack, overload

import torch
from torch import Tensor

from ._checks import (
    Alignment,
    accumulation_dtype,
    attention_kernel,
    check_batch_dims,
    check_block_size,
    check_causal_options,
    check_flags,
    check_kv_heads,
    check_qkv,
    check_scale,
    check_sinks,
)
from .flash_tiles import Tiles, add_product_, key_blocks, score_tile, tile_view

__all__ = ["default_block_sizes", "flash_attention"]

LOG2E = math.log2(math.e)  # scores times LOG2E are in base 2: exp(x) = 2 ** (x · LOG2E)


def default_block_sizes(t_q: int, t_k: int) -> tuple[int, int]:
    """Rows per query block and per key block when ``block_size`` is not given.

    128 queries by 512 keys from t_k = 2048 on, 128 by 128 below. Chosen by timing h = 12,
    d_h = 64, causal, float32 on the book's 2-core CPU against torch's SDPA in the same process,
    for blocks of 64 to 1024 rows: at t = 2048, 128 x 512 was the fastest of 128 x 256,
    256 x 256, 256 x 512, 512 x 512, 64 x 512, 128 x 512 and 128 x 1024, forward and backward
    (fewer tiles, so fewer lines of Python per FLOP, while a tile of 128 rows stays in the
    cache); at t = 512 the smaller tile was faster. Neither block is longer than the sequence it
    cuts.

    Args:
        t_q: number of queries.
        t_k: number of keys.

    Returns:
        (B_q, B_k), rows per query block and per key block.

    Examples:
        >>> default_block_sizes(4096, 4096), default_block_sizes(100, 100)
        ((128, 512), (100, 100))
    """
    return max(1, min(128, t_q)), max(1, min(512 if t_k >= 2048 else 128, t_k))


def _flash_forward(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    sinks: Tensor | None,
    scale: float,
    tiles: Tiles,
    blocks: tuple[int, int],
) -> tuple[Tensor, Tensor]:
    """Tiled forward pass: returns the output (N, g, t_q, d_v) and the log-sum-exp lse
    (N, g, t_q).

    query (N, g, t_q, d_k), key (N, t_k, d_k), value (N, t_k, d_v); ``sinks`` (N, g) in the
    accumulation dtype, each row's learned sink logit, or None. A sink is one more score with a
    value of zero: it starts the row's m at σ and its l at 1, and lse includes it. m, l, acc,
    lse and the
    returned output are in the accumulation dtype (float32 for half inputs): the caller rounds
    the output to the input dtype once, and the backward's D is formed from the unrounded one.
    Scores and m are in base 2 (times log2 e); lse is returned in natural units.
    """
    acc_dtype = accumulation_dtype(query.dtype)
    n, g, t_q, d_k = query.shape
    t_k, d_v = key.shape[1], value.shape[2]
    block_q, block_k = blocks
    # Tiles that no query may see are skipped, unless a value is nan or inf: then every tile is
    # visited, so that 0 · nan = nan reaches each row exactly as it does in A V. A finite sum
    # means every value is finite (an overflowing sum of finite values only costs the skipping),
    # and the sum allocates no (t_k, d_v) temporary, which isfinite(value) would. Under
    # torch.compile that test would be a data-dependent branch: every tile is visited, and
    # masks are filled in (tiles.exact), which needs no test either; so on the meta device,
    # which has shapes but no values to test.
    if torch.compiler.is_compiling() or value.is_meta:
        skip, tiles.exact = False, True
    else:
        skip = tiles.offset is not None and bool(torch.isfinite(value.sum(dtype=acc_dtype)))
    key, value = key.to(acc_dtype), value.to(acc_dtype)  # upcast once (no copy if they are)
    out = query.new_empty(n, g, t_q, d_v, dtype=acc_dtype)
    lse = query.new_empty(n, g, t_q, dtype=acc_dtype)
    scores = query.new_empty(n * g * min(block_q, t_q) * min(block_k, t_k), dtype=acc_dtype)
    for q_start in range(0, t_q, block_q):
        n_q = min(block_q, t_q - q_start)
        rows = slice(q_start, q_start + n_q)
        q_blk = (query[:, :, rows].to(acc_dtype) * (scale * LOG2E)).reshape(n, g * n_q, d_k)
        m = l = acc = None  # (N, g n_q), (N, g n_q), (N, g n_q, d_v), set by the first tile
        if sinks is not None:  # the sink's term exp(σ - m) = 1 (0 for σ = -inf), its value 0
            m = (sinks * LOG2E)[:, :, None].expand(n, g, n_q).reshape(n, g * n_q)
            l = (m != -math.inf).to(acc_dtype)  # (N, g n_q)
            acc = query.new_zeros(n, g * n_q, d_v, dtype=acc_dtype)
        lo, hi = tiles.key_range(q_start, n_q, t_k) if skip else (0, t_k)
        for k_start, n_k in key_blocks(lo, hi, block_k):
            keys = slice(k_start, k_start + n_k)
            where = (q_start, n_q, k_start, n_k)
            tile = tile_view(scores, n, g * n_q, n_k)  # (N, g n_q, n_k), this tile's memory
            s, biased = score_tile(q_blk, key[:, keys], tiles, tile, *where)
            s_max = s.amax(dim=-1)  # (N, g n_q)
            if biased and bool(s_max.isnan().any()):  # maybe a hidden nan or inf: fill instead
                tiles.exact = True
                s, _ = score_tile(q_blk, key[:, keys], tiles, tile, *where)
                s_max = s.amax(dim=-1)
            m_new = s_max if m is None else torch.maximum(m, s_max)  # (N, g n_q)
            # A row whose scores are all -inf so far is shifted by 0, not by -inf: its
            # exp(-inf - 0) = 0 instead of exp(-inf + inf) = nan (FlashAttention-2 does the
            # same).
            shift = m_new.nan_to_num(nan=math.nan, posinf=math.inf, neginf=0.0)  # (N, g n_q)
            p = s.sub_(shift[..., None]).exp2_()  # (N, g n_q, n_k), 0 where hidden; in place
            if m is None or l is None or acc is None:  # the first tile (all three set together)
                l, acc = p.sum(dim=-1), torch.bmm(p, value[:, keys])  # (N, g n_q), (.., d_v)
            else:
                rescale = (m - shift).exp2_()  # (N, g n_q), 0 while m = -inf
                l.mul_(rescale).add_(p.sum(dim=-1))
                add_product_(acc.mul_(rescale[..., None]), p, value[:, keys])  # (N, g n_q, d_v)
            m = m_new
            del s, p  # one tile at a time: free it before the next one is made
        # the block sees no key (t_k = 0, say) nor a sink: zero output, lse = -inf
        if m is None or l is None or acc is None:
            out[:, :, rows] = 0.0
            lse[:, :, rows] = -math.inf
            continue
        # l >= 1 once a row has met a finite score (its maximum contributes exp(0) = 1). A row
        # that met none (only -inf scores) has l = 0 and acc = 0: its output is 0, and
        # lse = -inf, the log of an empty sum (the backward reads it as +inf).
        no_mass = l == 0  # (N, g n_q)
        z = acc.div_(l.masked_fill(no_mass, 1.0)[..., None])  # (N, g n_q, d_v)
        out[:, :, rows] = z.view(n, g, n_q, d_v)
        lse_2 = m + l.log2()  # (N, g n_q), in base 2; lse = lse_2 · ln 2
        lse[:, :, rows] = lse_2.mul_(math.log(2.0)).masked_fill_(no_mass, -math.inf).view(
            n, g, n_q
        )
    return out, lse


def _flash_backward(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    out: Tensor,
    lse: Tensor,
    sinks: Tensor | None,
    grad_out: Tensor,
    grad_lse: Tensor | None,
    scale: float,
    tiles: Tiles,
    blocks: tuple[int, int],
) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """Tiled backward pass: recomputes each tile's weights from lse; returns dQ, dK, dV, dsinks.

    ``grad_lse`` (N, g, t_q), the gradient of the returned lse, or None: it moves D to D - dlse.
    ``sinks`` (N, g) or None. The lse includes the sink, so every recomputed P is the weight
    with the sink in its denominator; the sink's own gradient is -Σ_i P_sink,i (D_i - dlse_i)
    over each row's queries (its value is zero, so its dP is zero), with P_sink = exp(σ - lse).

    ``out`` is the forward's output before rounding. D, P, dP, dS and the dQ, dK, dV
    accumulators are in the accumulation dtype (float32 for half inputs); each gradient is
    rounded to its input's dtype once, at the end. Scores are recomputed in base 2, like the
    forward's, so the queries carry c = scale · log2 e and the dK sum is divided by log2 e at
    the end.
    """
    acc_dtype = lse.dtype
    n, g, t_q, d_k = query.shape
    t_k, d_v = key.shape[1], value.shape[2]
    block_q, block_k = blocks
    d = (grad_out.to(acc_dtype) * out).sum(dim=-1)  # (N, g, t_q), the D above, from float32 O
    if grad_lse is not None:
        d = d - grad_lse.to(acc_dtype)  # dS = P ⊙ (dP - (D - dlse)): lse's own gradient
    key, value = key.to(acc_dtype), value.to(acc_dtype)  # upcast once (no copy if they are)
    # Every query block is visited once per key block: cut it (and dO, lse, D) out once, here.
    q_blocks = []  # (q_start, n_q, c Q, dO, lse log2 e, D, dQ / scale accumulator)
    for q_start in range(0, t_q, block_q):
        n_q = min(block_q, t_q - q_start)
        rows, r = slice(q_start, q_start + n_q), g * n_q
        q_blk = (query[:, :, rows].to(acc_dtype) * (scale * LOG2E)).reshape(n, r, d_k)  # c Q
        do_blk = grad_out[:, :, rows].to(acc_dtype).reshape(n, r, d_v)  # (N, g n_q, d_v)
        lse_blk = lse[:, :, rows].reshape(n, r, 1) * LOG2E  # (N, g n_q, 1), in base 2
        # a row that saw no key has lse = -inf: read as +inf, so that its P = 0, not nan
        lse_blk.nan_to_num_(nan=math.nan, posinf=math.inf, neginf=math.inf)
        d_blk = d[:, :, rows].reshape(n, r, 1)  # (N, g n_q, 1)
        grad_q = query.new_zeros(n, r, d_k, dtype=acc_dtype)  # (N, g n_q, d_k)
        q_blocks.append((q_start, n_q, q_blk, do_blk, lse_blk, d_blk, grad_q))
    size = n * g * min(block_q, t_q) * min(block_k, t_k)
    scores, grads = (query.new_empty(size, dtype=acc_dtype) for _ in range(2))  # P, dS tiles
    grad_k = key.new_zeros(n, t_k, d_k)  # (N, t_k, d_k)
    grad_v = value.new_zeros(n, t_k, d_v)  # (N, t_k, d_v)
    for k_start in range(0, t_k, block_k):
        n_k = min(block_k, t_k - k_start)
        dk = grad_k[:, k_start : k_start + n_k]  # (N, n_k, d_k), summed over query blocks
        dv = grad_v[:, k_start : k_start + n_k]  # (N, n_k, d_v)
        for q_start, n_q, q_blk, do_blk, lse_blk, d_blk, grad_q in q_blocks:
            # Only the keys the forward pass visited: those some query of the block may see.
            lo, hi = tiles.key_range(q_start, n_q, t_k)
            first, end = max(lo, k_start), min(hi, k_start + n_k)
            if first >= end:
                continue  # no query of this block sees a key of this block
            keys, cols = slice(first, end), slice(first - k_start, end - k_start)
            k_blk, v_blk = key[:, keys], value[:, keys]  # (N, n, d_k), (N, n, d_v)
            r, n_cols = g * n_q, end - first
            tile = tile_view(scores, n, r, n_cols)  # (N, g n_q, n)
            s, _ = score_tile(q_blk, k_blk, tiles, tile, q_start, n_q, first, n_cols)
            # (N, g n_q, n), P = exp(S - lse) = 2^(c S - lse log2 e)
            p = s.sub_(lse_blk).exp2_()
            dp = torch.bmm(do_blk, v_blk.transpose(1, 2), out=tile_view(grads, n, r, n_cols))
            ds = dp.sub_(d_blk).mul_(p)  # (N, g n_q, n), dS = P ⊙ (dP - D), in place
            add_product_(grad_q, ds, k_blk)  # (N, g n_q, d_k)
            add_product_(dv[:, cols], p.transpose(1, 2), do_blk)  # the g heads summed
            add_product_(dk[:, cols], ds.transpose(1, 2), q_blk)  # c = scale · log2 e in q_blk
            del s, p, dp, ds  # free the tiles before the next ones are made
    if q_blocks:
        grad_q = torch.cat([blk[-1].view(n, g, blk[1], d_k) for blk in q_blocks], dim=2)
    else:
        grad_q = torch.zeros_like(query, dtype=acc_dtype)  # (N, g, t_q, d_k)
    grad_k.mul_(1.0 / LOG2E)  # c dSᵀ Q / log2 e = scale · dSᵀ Q
    grad_sinks = None
    if sinks is not None:  # a row with lse = -inf saw nothing, not even its sink: P_sink = 0
        p_sink = (sinks[:, :, None] - lse.nan_to_num(neginf=math.inf)).exp()  # (N, g, t_q)
        grad_sinks = -(p_sink * d).sum(dim=-1)  # (N, g); d is D - dlse
    grads_qkv = (grad_q * scale).to(query.dtype), grad_k.to(key.dtype), grad_v.to(value.dtype)
    return *grads_qkv, grad_sinks


class _FlashAttention(torch.autograd.Function):
    """Autograd wrapper: saves Q, K, V, O and lse (all O(t · d)), never the score matrix.

    O is saved unrounded (float32 for half inputs), for the backward's D; the caller gets it
    rounded to the input dtype.
    """

    @staticmethod
    def forward(
        ctx: Any, query: Tensor, key: Tensor, value: Tensor, sinks: Tensor | None, scale: float,
        tiles: Tiles, blocks: tuple[int, int],
    ) -> tuple[Tensor, Tensor]:
        out, lse = _flash_forward(query, key, value, sinks, scale, tiles, blocks)
        ctx.save_for_backward(query, key, value, out, lse, sinks)
        ctx.scale, ctx.tiles, ctx.blocks = scale, tiles, blocks
        ctx.set_materialize_grads(False)  # so no zero gradient of lse is allocated for backward
        return out.to(query.dtype), lse  # out rounded once (no copy when the dtypes agree)

    @staticmethod
    def backward(
        ctx: Any, grad_out: Tensor | None, grad_lse: Tensor | None
    ) -> tuple[Tensor | None, ...]:
        if grad_out is None and grad_lse is None:  # no gradient reached either output
            return None, None, None, None, None, None, None
        query, key, value, out, lse, sinks = ctx.saved_tensors
        if grad_out is None:  # only lse is used (grads are not materialized)
            grad_out = torch.zeros_like(out)
        grads = _FlashAttentionBackward.apply(
            grad_out, grad_lse, query, key, value, out, lse, sinks, ctx.scale, ctx.tiles,
            ctx.blocks,
        )
        return *grads, None, None, None


class _FlashAttentionBackward(torch.autograd.Function):
    """The tiled backward as a graph node of its own, so that differentiating it raises.

    O and lse come out of the forward as constants, so autograd could not differentiate the
    tiled backward correctly. ``once_differentiable`` is not enough: its error node is detached
    from Q, K and V, so ``torch.autograd.grad(dq.sum(), q, allow_unused=True)`` returns None, a
    zero.
    """

    @staticmethod
    def forward(
        ctx: Any, grad_out: Tensor, grad_lse: Tensor | None, query: Tensor, key: Tensor,
        value: Tensor, out: Tensor, lse: Tensor, sinks: Tensor | None, *args: Any,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        return _flash_backward(query, key, value, out, lse, sinks, grad_out, grad_lse, *args)

    @staticmethod
    def backward(ctx: Any, *grads: Tensor | None) -> NoReturn:
        raise RuntimeError(
            "flash_attention has first derivatives only: its tiled backward cannot be "
            "differentiated again; for second derivatives use scaled_dot_product_attention"
        )


class FlashOptions(TypedDict, total=False):
    """The keyword options of :func:`flash_attention` besides ``return_lse``, which its
    overloads (one per value of that flag) share."""

    is_causal: bool
    block_size: int | tuple[int, int] | None
    scale: float | None
    enable_gqa: bool
    alignment: Alignment
    window: int | None
    sinks: Tensor | None


@overload
def flash_attention(
    query: Tensor, key: Tensor, value: Tensor, *, return_lse: Literal[False] = False,
    **options: Unpack[FlashOptions],
) -> Tensor: ...
@overload
def flash_attention(
    query: Tensor, key: Tensor, value: Tensor, *, return_lse: Literal[True],
    **options: Unpack[FlashOptions],
) -> tuple[Tensor, Tensor]: ...
@overload
def flash_attention(
    query: Tensor, key: Tensor, value: Tensor, *, return_lse: bool = False,
    **options: Unpack[FlashOptions],
) -> Tensor | tuple[Tensor, Tensor]: ...


@attention_kernel
def flash_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    is_causal: bool = False,
    block_size: int | tuple[int, int] | None = None,
    scale: float | None = None,
    enable_gqa: bool = False,
    alignment: Alignment = "top_left",
    window: int | None = None,
    sinks: Tensor | None = None,
    return_lse: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Exact attention softmax(Q Kᵀ · scale) V computed in tiles, with FlashAttention's
    backward.

    Gradients are first-order only: the backward is hand-written and itself not differentiable,
    so a second derivative raises a RuntimeError instead of returning a wrong value. The
    backward recomputes the weights as P = exp(S - lse) from a float32 lse (for float32 and
    half inputs), as FlashAttention and torch's fused CPU kernel do: past |s| = 2^24 the lse
    cannot hold the log of a count of keys, and keys tied at the top score each get P = 1
    (q = 1e4 against four keys of 1e4, scale 1: dV = 1 per key, not 1/4); the forward pass,
    which never exponentiates lse, is exact there.

    Args:
        query: (..., t_q, d_k); with ``enable_gqa``, (..., h, t_q, d_k).
        key: (..., t_k, d_k); with ``enable_gqa``, (..., h_kv, t_k, d_k).
        value: (..., t_k, d_v); with ``enable_gqa``, (..., h_kv, t_k, d_v). Leading dimensions
            of the three broadcast against each other.
        is_causal: query i attends keys j ≤ i only, aligned top-left exactly like
            ``torch.nn.functional.scaled_dot_product_attention(..., is_causal=True)``.
        block_size: rows per query block and per key block, one integer for both or a pair
            (query rows, key rows); only tiles of that size are formed. None (the default)
            takes :func:`default_block_sizes`.
        scale: multiplies the scores; defaults to 1/sqrt(d_k).
        enable_gqa: grouped-query attention as in torch: query head i uses key and value head
            i // (h // h_kv), so h must be a multiple of h_kv.
        alignment: with ``is_causal``, ``"top_left"`` (query i at position i, torch's
            ``is_causal``) or ``"bottom_right"`` (query i at position t_k - t_q + i, so the last
            query sees every key, as ``torch.nn.attention.bias.causal_lower_right``).
        window: with ``is_causal``, each query sees only the ``window`` latest keys up to its
            own position p: keys j with p - window < j ≤ p, the mask of
            :func:`~attention.sliding_window_mask` with the same alignment. Tiles outside it are
            skipped. flash-attn's ``window_size=(w - 1, 0)`` (w - 1 keys to the left, none to
            the right) is ``window=w`` with ``is_causal=True`` and ``alignment="bottom_right"``,
            flash-attn's alignment.
        sinks: learned attention sinks (h,), one logit per query head (h = query.shape[-3]),
            float, on the query's device, or None: each row's softmax denominator gets one more
            term exp(σ), as if the row saw one more key of score σ and value zero (gpt-oss's
            sinks, as in :func:`~attention.scaled_dot_product_attention`); not multiplied by
            ``scale``; differentiable, its gradient -Σ_i α_i^sink (D_i - dlse_i), dlse the
            gradient reaching the lse that ``return_lse`` returns (0 if none does) (chapter 15,
            equation (15.2)).
        return_lse: also return the log-sum-exp lse = log Σ_j exp(scale · q_i · k_j) of each
            query over the keys it sees, (..., t_q) (with ``enable_gqa`` (..., h, t_q)), in the
            accumulation dtype (float32 for half inputs), as FlashAttention's kernels store it
            for the backward pass: -inf for a row that sees no key (as FlexAttention). It is
            differentiable (ring attention merges partials with weights made from it). With
            ``sinks`` the sum includes the sink's exp(σ), so that exp(s_ij - lse) are the
            weights with the sink.
            :func:`weights_from_lse` rebuilds any rows of the attention weights from it.

    Returns:
        (..., t_q, d_v), or the pair (output, lse) with ``return_lse``; the output equals
        scaled dot-product attention up to rounding (float32 statistics for half inputs, see
        the module docstring). A row that may see no key is zero, as in torch: all rows when
        t_k = 0, the first t_q - t_k with bottom-right alignment and t_q > t_k, and with a
        window w a query at position p >= t_k - 1 + w.
        A nan or inf in a query, or in a key or value the query may see, propagates as in
        :func:`attention.scaled_dot_product_attention`: a key that the mask hides never reaches
        the row, and a nan or inf in a hidden value does, through 0 · nan = nan, as in A V
        (hidden tiles are then visited, not skipped).

    Raises:
        ValueError: a tensor with fewer than 2 dimensions (3 with ``enable_gqa``), query and key
            of different widths, d_k = 0, key and value of different lengths, leading
            dimensions that do not broadcast, tensors that are not floating point or not of one
            dtype and one device, a bad ``block_size``, h not a multiple of h_kv, an
            ``is_causal``, ``enable_gqa`` or ``return_lse`` that is not a bool, an unknown
            ``alignment``, a ``window`` < 1, an alignment or window without ``is_causal``, a
            ``scale`` that is not None or a finite number, or ``sinks`` that are not a float
            tensor of shape (h,) on the query's device.
        TypeError: flash-attn's keywords and older names (``causal``, ``softmax_scale``,
            ``window_size``, ``causal_alignment``), with the keyword this function takes.

    Examples:
        >>> _ = torch.manual_seed(0)
        >>> q, k, v = torch.randn(3, 1, 2, 6, 8).unbind(0)  # (b, h, t, d_k) each
        >>> out, lse = flash_attention(q, k, v, is_causal=True, block_size=2, return_lse=True)
        >>> sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        >>> torch.allclose(out, sdpa, atol=1e-6), lse.shape
        (True, torch.Size([1, 2, 6]))
    """
    scale = check_scale(scale)
    check_flags(enable_gqa=enable_gqa, return_lse=return_lse)
    min_dim = 3 if enable_gqa else 2
    check_qkv(query, key, value, min_dim=min_dim)
    block_size = check_block_size(block_size)  # Python ints
    window = check_causal_options(is_causal, alignment, window)
    check_sinks(sinks, query)
    if enable_gqa:
        h = query.shape[-3]
        check_kv_heads(query, key, "key")
        check_kv_heads(query, value, "value")
        if key.shape[-3] != value.shape[-3]:  # torch allows it: give each query head its own
            key = key.repeat_interleave(h // key.shape[-3], dim=-3)  # (..., h, t_k, d_k)
            value = value.repeat_interleave(h // value.shape[-3], dim=-3)  # (..., h, t_k, d_v)
        heads, g = key.shape[-3], h // key.shape[-3]
    else:
        heads, g = 1, 1
    # Each tensor's own leading dimensions: the three may differ in rank, as torch allows.
    leads = [x.shape[: x.dim() - min_dim] for x in (query, key, value)]
    batch = check_batch_dims(
        ("query", query), ("key", key), ("value", value), min_dim=min_dim, gqa=not enable_gqa
    )
    (t_q, d_k), (t_k, d_v) = query.shape[-2:], value.shape[-2:]
    n = math.prod(batch) * heads
    # expand, then reshape (a copy where a dimension was broadcast): autograd's expand sums the
    # gradient back to each input's own shape, as torch's SDPA returns it.
    query, key, value = (
        x.expand(*batch, *x.shape[len(lead) :]) for x, lead in zip((query, key, value), leads)
    )  # each (*batch, [heads,] t, d)
    query = query.reshape(n, g, t_q, d_k)  # (N, g, t_q, d_k)
    key = key.reshape(n, t_k, d_k)  # (N, t_k, d_k)
    value = value.reshape(n, t_k, d_v)  # (N, t_k, d_v)
    scale = 1.0 / math.sqrt(d_k) if scale is None else float(scale)
    if block_size is None:
        blocks = default_block_sizes(t_q, t_k)
    else:
        blocks = block_size if isinstance(block_size, tuple) else (block_size, block_size)
    offset = None if not is_causal else (0 if alignment == "top_left" else t_k - t_q)
    tiles = Tiles(offset, window, query.device)
    sink_rows = None  # (N, g): the sink of each row's head, differentiable back to (h,)
    if sinks is not None:
        # query head k is the last batch dimension, or with GQA head k = i_kv · g + i of the
        # key-value head i_kv: row (N, i)
        if enable_gqa:
            sink_rows = sinks.view(heads, g).expand(*batch, heads, g).reshape(n, g)
        else:
            sink_rows = sinks.expand(*batch).reshape(n, 1)
        sink_rows = sink_rows.to(accumulation_dtype(query.dtype))
    out, lse = _FlashAttention.apply(query, key, value, sink_rows, scale, tiles, blocks)
    heads_dim = [g * heads] if enable_gqa else []
    out = out.view(*batch, *heads_dim, t_q, d_v)  # (..., t_q, d_v)
    return (out, lse.view(*batch, *heads_dim, t_q)) if return_lse else out
