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

so memory stays O(t · d) in both passes instead of O(t_q · t_k).
"""

import math

import torch
from torch import Tensor

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
    """Tiled forward pass: returns the output (..., t_q, d_v) and the log-sum-exp L (..., t_q)."""
    t_q, t_k = query.shape[-2], key.shape[-2]
    out = query.new_zeros(*query.shape[:-1], value.shape[-1])  # (..., t_q, d_v)
    lse = query.new_full(query.shape[:-1], float("-inf"))  # (..., t_q)
    for q_start in range(0, t_q, block_size):
        q_blk = query[..., q_start : q_start + block_size, :]  # (..., n_q, d_k)
        n_q = q_blk.shape[-2]
        m = query.new_full((*query.shape[:-2], n_q), float("-inf"))  # (..., n_q)
        l = query.new_zeros((*query.shape[:-2], n_q))  # (..., n_q)
        acc = query.new_zeros((*query.shape[:-2], n_q, value.shape[-1]))  # (..., n_q, d_v)
        for k_start in range(0, t_k, block_size):
            if is_causal and k_start > q_start + n_q - 1:
                break  # this key block and all later ones lie above the diagonal
            k_blk = key[..., k_start : k_start + block_size, :]  # (..., n_k, d_k)
            v_blk = value[..., k_start : k_start + block_size, :]  # (..., n_k, d_v)
            s = _score_tile(q_blk, k_blk, scale, is_causal, q_start, k_start)  # (..., n_q, n_k)
            m_new = torch.maximum(m, s.amax(dim=-1))  # (..., n_q), finite: every row sees a key
            p = torch.exp(s - m_new[..., None])  # (..., n_q, n_k), 0 where masked
            rescale = torch.exp(m - m_new)  # (..., n_q), 0 on the first block (m = -inf)
            l = rescale * l + p.sum(dim=-1)
            acc = rescale[..., None] * acc + p @ v_blk  # (..., n_q, d_v)
            m = m_new
        # l >= 1 once a row has seen a key (its maximum contributes exp(0) = 1); a row that saw
        # none (only when t_k = 0) has l = 0 and acc = 0, so clamping leaves its output at 0.
        out[..., q_start : q_start + n_q, :] = acc / l.clamp_min(1.0)[..., None]
        lse[..., q_start : q_start + n_q] = m + torch.log(l)
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
    """Tiled backward pass: recomputes each tile's weights from L and returns dQ, dK, dV."""
    t_q, t_k = query.shape[-2], key.shape[-2]
    grad_q, grad_k, grad_v = torch.zeros_like(query), torch.zeros_like(key), torch.zeros_like(value)
    d = (grad_out * out).sum(dim=-1)  # (..., t_q), the D of the docstring
    for k_start in range(0, t_k, block_size):
        k_blk = key[..., k_start : k_start + block_size, :]  # (..., n_k, d_k)
        v_blk = value[..., k_start : k_start + block_size, :]  # (..., n_k, d_v)
        first_q = k_start if is_causal else 0  # query blocks before k_start lie above the diagonal
        for q_start in range(first_q, t_q, block_size):
            q_blk = query[..., q_start : q_start + block_size, :]  # (..., n_q, d_k)
            do_blk = grad_out[..., q_start : q_start + block_size, :]  # (..., n_q, d_v)
            n_q = q_blk.shape[-2]
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
    return grad_q, grad_k, grad_v


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
        grads = _flash_backward(
            query, key, value, out, lse, grad_out, ctx.is_causal, ctx.block_size, ctx.scale
        )
        return *grads, None, None, None


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
        (..., t_q, d_v), equal to scaled dot-product attention up to rounding. With no keys
        (t_k = 0) every row is zero, as in torch.

    Raises:
        ValueError: a tensor with fewer than 2 dimensions, query and key of different widths,
            key and value of different lengths, leading dimensions that do not broadcast,
            mixed dtypes, or block_size < 1.
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
