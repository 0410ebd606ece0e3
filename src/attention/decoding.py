"""A decode step: the weights it reads, and split-KV attention (Flash-Decoding) for its query.

Notation (see CONTRIBUTING.md): ``...`` leading batch dimensions (for example b, h); t_q queries
(one per sequence and head in a decode step, or a few), t_k cached keys, d_k width of queries
and keys, d_v width of values; the keys are cut into n_split chunks J_1 .. J_n_split of
consecutive positions (sizes differing by at most one); β memory bandwidth in bytes per second,
s bytes per number.

A decode step reads every weight of the model and the whole cache to make one token per
sequence, with about two FLOPs per weight read, so its speed is bounded by the bandwidth:

    tokens/s <= β / (s · weights read + cache bytes read)

:func:`weights_read_per_token` counts the weights (all but the unused rows of the embeddings).

Its attention has one query per sequence and head. Without splitting, a FlashAttention-2-style
kernel runs b · h_kv thread blocks at decode (the G query heads of a group share one), each
walking through all t_k keys, however many processors the GPU has. Flash-Decoding (Dao, Haziza,
Massa and Sizov, 2023), which FlashAttention-2 has included since version 2.2, also splits the
keys: chunk r is attended to on its own, giving a partial context vector and the log-sum-exp of
the query's scaled scores s_j,

    z_r = Σ_{j ∈ J_r} e^{s_j - lse_r} v_j ,     lse_r = log Σ_{j ∈ J_r} e^{s_j}

and the chunks are merged exactly, by the rescaling the online softmax applies between blocks
(chapter 7):

    lse = log Σ_r e^{lse_r} ,      z = Σ_r e^{lse_r - lse} z_r .

Every chunk can run on its own processor; the merge reads n_split vectors and n_split numbers
per query. Here each lse_r is kept as its two parts, m_r = max_{j ∈ J_r} s_j and
l_r = Σ_{j ∈ J_r} e^{s_j - m_r}, and z_r weighs l_r e^{m_r - m} / Σ_r' l_r' e^{m_r' - m}, m the
largest m_r: the same e^{lse_r - lse}, but past |s| = 2^24 a float32 lse_r cannot hold
log l_r <= log |J_r| (it rounds to m_r), and weights made from it would count every chunk
alike, however many of its keys tie for the maximum. With float16 or bfloat16 inputs the
scores, the partial results and the merge are computed in float32, as fused kernels do, and the
output is rounded once.
"""

import math
from typing import Literal, TypedDict, Unpack, overload

import torch
from torch import Tensor, nn

from ._checks import (
    accumulation_dtype,
    attention_kernel,
    check_batch_dims,
    check_flags,
    check_qkv,
    check_scale,
    check_sizes,
)
from .functional import repeat_kv_heads

__all__ = ["split_kv_attention", "weights_read_per_token"]


def weights_read_per_token(model: nn.Module) -> int:
    """Parameters one decode step of ``model`` reads: all of them, but one row of each embedding.

    A token looks up one row of each ``nn.Embedding`` (token and learned positions) and
    multiplies every other weight; the unembedding (``lm_head``) is read whole, also when it
    shares the token embedding's matrix (tied weights, counted once); a matrix that several
    embeddings share is counted as one. Works on the ``meta`` device, where a model has shapes
    and no memory.

    Args:
        model: the model, on any device (``meta`` included).

    Returns:
        The number of parameters read.

    Raises:
        ValueError: if ``model`` is not a ``torch.nn.Module``.

    Examples:
        >>> model = torch.nn.Sequential(torch.nn.Embedding(100, 8), torch.nn.Linear(8, 100))
        >>> weights_read_per_token(model)  # one row of 8, then 8 x 100 + 100
        908
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    total = sum(p.numel() for p in model.parameters())  # a shared parameter counts once
    multiplied = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)}
    tables = {id(m.weight): m for m in model.modules() if isinstance(m, nn.Embedding)}  # shared: one
    for key, module in tables.items():
        if key not in multiplied:
            total -= (module.num_embeddings - 1) * module.embedding_dim  # rows not read
    return total


class SplitKVOptions(TypedDict, total=False):
    """The keyword options of :func:`split_kv_attention` besides ``num_splits`` and
    ``return_lse``, which its overloads (one per value of that flag) share."""

    scale: float | None
    enable_gqa: bool


@overload
def split_kv_attention(
    query: Tensor, key: Tensor, value: Tensor, *, num_splits: int, return_lse: Literal[False] = False,
    **options: Unpack[SplitKVOptions],
) -> Tensor: ...
@overload
def split_kv_attention(
    query: Tensor, key: Tensor, value: Tensor, *, num_splits: int, return_lse: Literal[True],
    **options: Unpack[SplitKVOptions],
) -> tuple[Tensor, Tensor]: ...
@overload
def split_kv_attention(
    query: Tensor, key: Tensor, value: Tensor, *, num_splits: int, return_lse: bool = False,
    **options: Unpack[SplitKVOptions],
) -> Tensor | tuple[Tensor, Tensor]: ...


@attention_kernel
def split_kv_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    num_splits: int,
    scale: float | None = None,
    enable_gqa: bool = False,
    return_lse: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Attention softmax(Q Kᵀ · scale) V over all keys, computed in ``num_splits`` key chunks.

    Each chunk gives a partial context vector and its lse; the partials are merged exactly (see
    the module docstring).

    Args:
        query: (..., t_q, d_k); every query sees every key (a decode step has no mask).
        key: (..., t_k, d_k); with ``enable_gqa``, (..., h_kv, t_k, d_k) with h_kv dividing the
            query's h, query head i using key head i // (h / h_kv) as in torch.
        value: (..., t_k, d_v), like key.
        num_splits: n_split, chunks of consecutive keys, 1 <= num_splits <= t_k.
        scale: multiplies the scores; defaults to 1 / sqrt(d_k).
        enable_gqa: grouped-query attention, as in torch.
        return_lse: also return the log-sum-exp lse of each query's scaled scores.

    Returns:
        (..., t_q, d_v), equal to ``torch.nn.functional.scaled_dot_product_attention`` up to
        rounding; with ``return_lse``, also lse of shape (..., t_q), in the accumulation dtype.

    Raises:
        ValueError: if query, key and value do not agree (dtype, device, widths, lengths,
            leading dimensions that do not broadcast), num_splits is not an integer in
            [1, t_k], h_kv does not divide h, scale is not None or a finite number, or
            enable_gqa or return_lse is not a bool.
        TypeError: flash-attn's keywords and older names (``causal``, ``softmax_scale``,
            ``window_size``, ``causal_alignment``), with the keyword this function takes.

    Examples:
        >>> _ = torch.manual_seed(0)
        >>> q = torch.randn(1, 4, 1, 8)  # one new token, h = 4 heads
        >>> k, v = torch.randn(2, 1, 2, 64, 8).unbind(0)  # h_kv = 2 heads of 64 cached tokens
        >>> out = split_kv_attention(q, k, v, num_splits=4, enable_gqa=True)
        >>> sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        >>> torch.allclose(out, sdpa, atol=1e-6)
        True
    """
    scale = check_scale(scale)
    check_flags(enable_gqa=enable_gqa, return_lse=return_lse)
    check_qkv(query, key, value)
    check_sizes(num_splits=num_splits)
    t_k = key.shape[-2]
    if num_splits > t_k:
        raise ValueError(
            f"num_splits must be at most t_k={t_k} (each chunk needs a key), got {num_splits}"
        )
    acc = accumulation_dtype(query.dtype)
    if enable_gqa:  # upcast first: the repeat's backward sums the g heads' gradients in acc
        key = repeat_kv_heads(query, key.to(acc), "key")  # (..., h, t_k, d_k)
        value = repeat_kv_heads(query, value.to(acc), "value")  # (..., h, t_k, d_v)
    check_batch_dims(("query", query), ("key", key), ("value", value), gqa=not enable_gqa)
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    q = query.to(acc) * scale  # (..., t_q, d_k)
    outputs, maxima, sums = [], [], []
    chunks = zip(key.tensor_split(num_splits, dim=-2), value.tensor_split(num_splits, dim=-2))
    for k_r, v_r in chunks:  # (..., n_r, d_k) and (..., n_r, d_v): chunk r
        scores = q @ k_r.to(acc).transpose(-2, -1)  # (..., t_q, n_r): one chunk's scores
        # lse_r in two parts, m_r and l_r (nothing needs the gradient of m_r: it cancels); a
        # chunk with no finite score has m_r = -inf and l_r = 0, and gives z_r = 0
        m_r = scores.detach().amax(dim=-1, keepdim=True)  # (..., t_q, 1)
        p = torch.exp(scores - m_r.masked_fill(m_r == -math.inf, 0.0))  # (..., t_q, n_r)
        l_r = p.sum(dim=-1, keepdim=True)  # (..., t_q, 1)
        # e^{s_j - lse_r} as p / l_r: its weights sum to 1 even where lse_r cannot hold log n_r
        outputs.append(p @ v_r.to(acc) / l_r.masked_fill(l_r == 0, 1.0))  # (..., t_q, d_v): z_r
        maxima.append(m_r)
        sums.append(l_r)
    partial = torch.stack(outputs)  # (n_split, ..., t_q, d_v)
    # e^{lse_r - lse} = l_r e^{m_r - m} / Σ_r' l_r' e^{m_r' - m}, m the largest m_r: a chunk at
    # -inf weighs 0, and a row with no finite score at all is 0, as torch's SDPA gives
    partial_max = torch.stack(maxima)  # (n_split, ..., t_q, 1)
    m = partial_max.amax(dim=0)  # (..., t_q, 1)
    m = m.masked_fill(m == -math.inf, 0.0)  # a row with no finite score: any finite m
    weights = torch.stack(sums) * (partial_max - m).exp()  # (n_split, ..., t_q, 1)
    total = weights.sum(dim=0)  # (..., t_q, 1): Σ_r l_r e^{m_r - m}
    lse = m + total.log()  # (..., t_q, 1): lse = log Σ_r e^{lse_r}; -inf for no finite score
    out = (weights * partial).sum(dim=0) / total.masked_fill(total == 0, 1.0)  # (..., t_q, d_v)
    out = out.to(query.dtype)
    return (out, lse[..., 0]) if return_lse else out

