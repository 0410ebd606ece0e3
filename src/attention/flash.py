"""FlashAttention's algorithm, written in plain PyTorch so that it can be read line by line.

Notation (see CONTRIBUTING.md): ``...`` any leading batch dimensions (for example ``b, h``),
``t_q`` / ``t_k`` number of queries / keys, ``d_k`` width of queries and keys, ``d_v`` width of
values, ``n_q`` / ``n_k`` rows in the current query / key block (at most ``block_size``).

Attention is computed tile by tile: a block of queries meets a block of keys, and only that
``(n_q, n_k)`` tile of scores ever exists. The softmax over a full row is assembled from the
tiles with the *online softmax*. For one query row, after some key blocks have been seen, keep

    m   = the largest score seen so far,
    l   = sum over seen keys of exp(ω_j - m),
    acc = sum over seen keys of exp(ω_j - m) · v_j.

A new block with scores s_j raises the maximum to m_new = max(m, max_j s_j). Every old term was
computed against m, and exp(ω - m) · exp(m - m_new) = exp(ω - m_new), so rescaling by
exp(m - m_new) puts the old terms on the new reference point:

    l   ← exp(m - m_new) · l   + sum_j exp(s_j - m_new)
    acc ← exp(m - m_new) · acc + sum_j exp(s_j - m_new) · v_j

After the last block, z = acc / l is exactly softmax(ω) V, because softmax is unchanged when
every score is shifted by the same m. No exponent is ever positive, so nothing overflows.

The forward pass keeps only the output and the log-sum-exp L = m + log l of each row. The
backward pass recomputes each tile's weights from it, P = exp(S - L), and with
D = rowsum(dO ∘ O) (equal to rowsum(P ∘ dP), since O = P V) it accumulates, tile by tile,

    dV += Pᵀ dO,   dP = dO Vᵀ,   dS = P ∘ (dP - D),   dQ += scale · dS K,   dK += scale · dSᵀ Q

so memory stays O(t · d) in both passes instead of O(t_q · t_k). A row that meets no finite
score (t_k = 0, or all its scores -inf) gets output 0 and L = +inf, so that its P = 0 backward:
FlashAttention-2's convention, where exp(-inf - (-inf)) would otherwise give nan.

Precision, as in fused kernels: for float16 and bfloat16 inputs every statistic and accumulator
(S, m, l, acc and L forward; D, P, dP, dS and the dQ, dK, dV sums backward) is float32. Each tile
is upcast as it is read, and each result is rounded to the input dtype once, when it is written.
Rounding acc and l to 8 or 11 bits after every key block instead would add an error per block.
"""

import math

import torch
from torch import Tensor

from .functional import _accumulation_dtype

__all__ = ["flash_attention"]


def _causal_tile_mask(
    q_start: int, n_q: int, k_start: int, n_k: int, device: torch.device
) -> Tensor:
    """True where query ``q_start + i`` may see key ``k_start + j``: j ≤ i, aligned top-left."""
    rows = torch.arange(q_start, q_start + n_q, device=device)  # (n_q,)
    cols = torch.arange(k_start, k_start + n_k, device=device)  # (n_k,)
    return cols[None, :] <= rows[:, None]  # (n_q, n_k)


def _score_tile(
    q_blk: Tensor, k_blk: Tensor, scale: float, is_causal: bool, q_start: int, k_start: int
) -> Tensor:
    """Scaled scores of one query block against one key block; -inf where causality forbids."""
    s = q_blk @ k_blk.transpose(-2, -1) * scale  # (..., n_q, n_k)
    if is_causal and k_start + k_blk.shape[-2] - 1 > q_start:  # the tile crosses the diagonal
        allowed = _causal_tile_mask(q_start, q_blk.shape[-2], k_start, k_blk.shape[-2], s.device)
        s = s.masked_fill(~allowed, float("-inf"))
    return s


def _flash_forward(
    query: Tensor, key: Tensor, value: Tensor, is_causal: bool, block_size: int, scale: float
) -> tuple[Tensor, Tensor]:
    """Tiled forward pass: returns the output (..., t_q, d_v) and the log-sum-exp L (..., t_q).

    m, l, acc and L are kept in the accumulation dtype (float32 for half inputs); each tile is
    upcast as it is read and each output row is rounded once, when it is written.
    """
    acc_dtype = _accumulation_dtype(query.dtype)
    t_q, t_k = query.shape[-2], key.shape[-2]
    # Tiles above the diagonal are skipped, unless a value is nan or inf: then every tile is
    # visited, so that 0 · nan = nan reaches each row exactly as it does in A V. A finite sum
    # means every value is finite (an overflowing sum of finite values only costs the skipping),
    # and the sum allocates no (t_k, d_v) temporary, which isfinite(value) would.
    skip_above = is_causal and bool(torch.isfinite(value.sum(dtype=acc_dtype)))
    out = query.new_empty(*query.shape[:-1], value.shape[-1])  # (..., t_q, d_v)
    lse = query.new_empty(query.shape[:-1], dtype=acc_dtype)  # (..., t_q)
    for q_start in range(0, t_q, block_size):
        q_blk = query[..., q_start : q_start + block_size, :].to(acc_dtype)  # (..., n_q, d_k)
        n_q = q_blk.shape[-2]
        m = q_blk.new_full((*query.shape[:-2], n_q), float("-inf"))  # (..., n_q)
        l = q_blk.new_zeros((*query.shape[:-2], n_q))  # (..., n_q)
        acc = q_blk.new_zeros((*query.shape[:-2], n_q, value.shape[-1]))  # (..., n_q, d_v)
        for k_start in range(0, t_k, block_size):
            if skip_above and k_start > q_start + n_q - 1:
                break  # this key block and all later ones lie above the diagonal
            k_blk = key[..., k_start : k_start + block_size, :].to(acc_dtype)  # (..., n_k, d_k)
            v_blk = value[..., k_start : k_start + block_size, :].to(acc_dtype)  # (..., n_k, d_v)
            s = _score_tile(q_blk, k_blk, scale, is_causal, q_start, k_start)  # (..., n_q, n_k)
            m_new = torch.maximum(m, s.amax(dim=-1))  # (..., n_q)
            # A row whose scores are all -inf so far is shifted by 0, not by -inf: its
            # exp(-inf - 0) = 0 instead of exp(-inf + inf) = nan (FlashAttention-2 does the same).
            shift = m_new.masked_fill(m_new == float("-inf"), 0.0)  # (..., n_q)
            p = torch.exp(s - shift[..., None])  # (..., n_q, n_k), 0 where masked
            rescale = torch.exp(m - shift)  # (..., n_q), 0 while m = -inf
            l = rescale * l + p.sum(dim=-1)
            acc = rescale[..., None] * acc + p @ v_blk  # (..., n_q, d_v)
            m = m_new
        # l >= 1 once a row has met a finite score (its maximum contributes exp(0) = 1). A row
        # that met none (t_k = 0, or only -inf scores) has l = 0 and acc = 0: its output is 0,
        # and L = +inf, as FlashAttention-2 stores it, so that the backward's P = exp(S - L) = 0.
        no_mass = l == 0  # (..., n_q)
        z = acc / l.masked_fill(no_mass, 1.0)[..., None]  # (..., n_q, d_v)
        out[..., q_start : q_start + n_q, :] = z  # rounded to the input dtype, once
        lse[..., q_start : q_start + n_q] = (m + torch.log(l)).masked_fill(no_mass, float("inf"))
    return out, lse


def _flash_backward(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    out: Tensor,
    lse: Tensor,
    grad_out: Tensor,
    is_causal: bool,
    block_size: int,
    scale: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """Tiled backward pass: recomputes each tile's weights from L and returns dQ, dK, dV.

    D, P, dP, dS and the dQ, dK, dV accumulators are in the accumulation dtype (float32 for half
    inputs); each gradient is rounded to its input's dtype once, at the end.
    """
    acc_dtype = lse.dtype
    t_q, t_k = query.shape[-2], key.shape[-2]
    grad_q = torch.zeros_like(query, dtype=acc_dtype)  # (..., t_q, d_k)
    grad_k = torch.zeros_like(key, dtype=acc_dtype)  # (..., t_k, d_k)
    grad_v = torch.zeros_like(value, dtype=acc_dtype)  # (..., t_k, d_v)
    d = (grad_out.to(acc_dtype) * out.to(acc_dtype)).sum(dim=-1)  # (..., t_q), the D above
    for k_start in range(0, t_k, block_size):
        k_blk = key[..., k_start : k_start + block_size, :].to(acc_dtype)  # (..., n_k, d_k)
        v_blk = value[..., k_start : k_start + block_size, :].to(acc_dtype)  # (..., n_k, d_v)
        first_q = k_start if is_causal else 0  # query blocks before k_start lie above the diagonal
        for q_start in range(first_q, t_q, block_size):
            q_blk = query[..., q_start : q_start + block_size, :].to(acc_dtype)  # (..., n_q, d_k)
            n_q = q_blk.shape[-2]
            do_blk = grad_out[..., q_start : q_start + n_q, :].to(acc_dtype)  # (..., n_q, d_v)
            s = _score_tile(q_blk, k_blk, scale, is_causal, q_start, k_start)  # (..., n_q, n_k)
            p = torch.exp(s - lse[..., q_start : q_start + n_q, None])  # (..., n_q, n_k)
            grad_v[..., k_start : k_start + block_size, :] += (
                p.transpose(-2, -1) @ do_blk
            )  # (..., n_k, d_v)
            dp = do_blk @ v_blk.transpose(-2, -1)  # (..., n_q, n_k)
            ds = p * (dp - d[..., q_start : q_start + n_q, None])  # (..., n_q, n_k)
            grad_q[..., q_start : q_start + n_q, :] += scale * ds @ k_blk  # (..., n_q, d_k)
            grad_k[..., k_start : k_start + block_size, :] += (
                scale * ds.transpose(-2, -1) @ q_blk
            )  # (..., n_k, d_k)
    return grad_q.to(query.dtype), grad_k.to(key.dtype), grad_v.to(value.dtype)


class _FlashAttention(torch.autograd.Function):
    """Autograd wrapper: saves Q, K, V, O and L (all O(t · d)), never the score matrix."""

    @staticmethod
    def forward(ctx, query, key, value, is_causal, block_size, scale):  # type: ignore[override]
        out, lse = _flash_forward(query, key, value, is_causal, block_size, scale)
        ctx.save_for_backward(query, key, value, out, lse)
        ctx.is_causal, ctx.block_size, ctx.scale = is_causal, block_size, scale
        return out

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        query, key, value, out, lse = ctx.saved_tensors
        grads = _FlashAttentionBackward.apply(
            grad_out, query, key, value, out, lse, ctx.is_causal, ctx.block_size, ctx.scale
        )
        return *grads, None, None, None


class _FlashAttentionBackward(torch.autograd.Function):
    """The tiled backward as a graph node of its own, so that differentiating it raises.

    O and L come out of the forward as constants, so autograd could not differentiate the tiled
    backward correctly. ``once_differentiable`` is not enough: its error node is detached from
    Q, K and V, so ``torch.autograd.grad(dq.sum(), q, allow_unused=True)`` returns None, a zero.
    """

    @staticmethod
    def forward(ctx, grad_out, query, key, value, out, lse, *args):  # type: ignore[override]
        return _flash_backward(query, key, value, out, lse, grad_out, *args)  # dQ, dK, dV

    @staticmethod
    def backward(ctx, *grads):  # type: ignore[override]
        raise RuntimeError(
            "flash_attention has first derivatives only: its tiled backward cannot be "
            "differentiated again; for second derivatives use scaled_dot_product_attention"
        )


def flash_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    is_causal: bool = False,
    block_size: int = 64,
    *,
    scale: float | None = None,
) -> Tensor:
    """Exact attention softmax(Q Kᵀ · scale) V computed in tiles, with FlashAttention's backward.

    Args:
        query: (..., t_q, d_k).
        key: (..., t_k, d_k).
        value: (..., t_k, d_v). Leading dimensions of the three broadcast against each other.
        is_causal: query i attends keys j ≤ i only, aligned top-left exactly like
            ``torch.nn.functional.scaled_dot_product_attention(..., is_causal=True)``.
        block_size: rows per query block and per key block; only (block_size, block_size)
            tiles of scores are formed.
        scale: multiplies the scores; defaults to 1/sqrt(d_k).

    Returns:
        (..., t_q, d_v), equal to scaled dot-product attention up to rounding (float32
        statistics for half inputs, see the module docstring). With no keys (t_k = 0) every row
        is zero, as in torch. A nan or inf in a query, or in a key or value the query may see,
        propagates as in :func:`attention.scaled_dot_product_attention`: a key that causality
        hides never reaches the row, and a nan or inf in a hidden value does, through
        0 · nan = nan, as in A V (tiles above the diagonal are then visited, not skipped).

    Gradients are first-order only: the backward is hand-written and itself not differentiable,
    so a second derivative raises a RuntimeError instead of returning a wrong value.

    Raises:
        ValueError: a tensor with fewer than 2 dimensions, query and key of different widths,
            d_k = 0, key and value of different lengths, leading dimensions that do not
            broadcast, mixed dtypes, or block_size < 1.
    """
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        if tensor.dim() < 2:
            raise ValueError(
                f"{name} must have shape (..., t, d), at least 2-d, got shape {tuple(tensor.shape)}"
            )
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"query and key must have the same width d_k, got {query.shape[-1]} and {key.shape[-1]}"
        )
    if query.shape[-1] == 0:
        raise ValueError("d_k must be at least 1 (the scale is 1 / sqrt(d_k)), got d_k = 0")
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"key and value must have the same length t_k, "
            f"got {key.shape[-2]} and {value.shape[-2]}"
        )
    if not (query.dtype == key.dtype == value.dtype):
        raise ValueError(
            "query, key and value must share one dtype, "
            f"got {query.dtype}, {key.dtype}, {value.dtype}"
        )
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be an integer >= 1, got {block_size!r}")
    try:
        batch = torch.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    except RuntimeError:
        raise ValueError(
            "leading dimensions of query, key and value must broadcast, got "
            f"{tuple(query.shape[:-2])}, {tuple(key.shape[:-2])}, {tuple(value.shape[:-2])}"
        ) from None
    query = query.expand(*batch, *query.shape[-2:])  # (..., t_q, d_k)
    key = key.expand(*batch, *key.shape[-2:])  # (..., t_k, d_k)
    value = value.expand(*batch, *value.shape[-2:])  # (..., t_k, d_v)
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    return _FlashAttention.apply(query, key, value, is_causal, block_size, scale)
