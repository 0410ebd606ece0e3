"""Linear attention that forgets and corrects: scalar decay, the delta rule and Gated DeltaNet.

Notation (see CONTRIBUTING.md):
    b      batch size
    h      heads: h_k query/key heads, h_v value heads (h_v a multiple of h_k: grouped heads)
    t      tokens
    d_k    width of queries and keys, d_v width of values
    C      chunk size of the chunked form (``chunk_size``)
    S_i    the state (d_k, d_v) of one (batch, head) after token i, read as q S_i
    g_i    log decay of step i (<= 0), a_i = exp(g_i); gbar_i = g_1 + ... + g_i its running sum
    Lambda  the decay mask, Lambda_ij = exp(gbar_i - gbar_j) for j <= i, else 0

Tokens are rows, as in the book. Every rule here keeps a state S_i (no normalizer, unlike
chapter 12's linear attention) and reads it with the scaled query, z_i = q_i S_i / sqrt(d_k):

    decay (RetNet, Mamba-2's SSD)          S_i = a_i S_{i-1} + k_i^T v_i
    delta rule (Schlag et al., DeltaNet)   S_i = S_{i-1} + beta_i k_i^T (v_i - k_i S_{i-1})
    gated delta rule (Gated DeltaNet)      S_i = a_i (I - beta_i k_i^T k_i) S_{i-1} + beta_i k_i^T v_i

with beta_i in [0, 1]. (GLA's decay is diag(a_i), one factor per key feature: not the scalar
decay here.) Each rule has a recurrent form (one token at a time: the definition) and a
chunked form (matrix products within chunks of C tokens, the state carried across them); scalar
decay also has a parallel form, (Lambda o Q K^T) V. The chunked delta rule solves one unit
lower-triangular system per chunk (the UT transform of Joffrain et al., 2006, as Yang et al., 2024
use it for DeltaNet). The forms agree in float64 (tests/package/test_delta.py).
"""

import math
from typing import Literal, TypedDict, Unpack, get_args, overload

import torch
from torch import Tensor

from ._checks import (
    accumulation_dtype,
    autocast_as_sdpa,
    check_flags,
    check_qkv,
    check_scale,
    check_sizes,
    shape_or_type,
)

__all__ = [
    "DELTA_FORMS",
    "DECAY_FORMS",
    "DecayForm",
    "DeltaForm",
    "decayed_linear_attention",
    "delta_attention_matrix",
    "delta_rule",
    "delta_rule_flops",
    "gated_delta_rule",
]

DecayForm = Literal["recurrent", "parallel", "chunked"]
DeltaForm = Literal["recurrent", "chunked"]
DECAY_FORMS: tuple[DecayForm, ...] = get_args(DecayForm)
DELTA_FORMS: tuple[DeltaForm, ...] = get_args(DeltaForm)


class DecayOptions(TypedDict, total=False):
    """The keyword options of :func:`decayed_linear_attention` besides ``output_final_state``,
    which its overloads (one per value of that flag) share."""

    form: DecayForm
    chunk_size: int
    scale: float | None
    initial_state: Tensor | None


class DeltaOptions(TypedDict, total=False):
    """The keyword options of :func:`delta_rule` and :func:`gated_delta_rule` besides
    ``output_final_state``, which their overloads share."""

    form: DeltaForm
    chunk_size: int
    scale: float | None
    initial_state: Tensor | None


def _check(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    g: Tensor | None,
    beta: Tensor | None,
    form: str,
    forms: tuple[str, ...],
    chunk_size: int,
    initial_state: Tensor | None,
    required: tuple[str, ...] = (),
) -> None:
    """Shapes, dtypes and ranges of the inputs; ValueError naming expected and actual. g and
    beta may be None (not used) unless named in ``required``."""
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        if not isinstance(tensor, Tensor) or tensor.dim() != 4:
            got = (f"shape {tuple(tensor.shape)}" if isinstance(tensor, Tensor)
                   else type(tensor).__name__)
            raise ValueError(f"{name} must be 4-d (b, h, t, d), got {got}")
    if query.shape != key.shape:
        raise ValueError(
            f"query and key must have one shape (b, h_k, t, d_k), got {tuple(query.shape)} "
            f"and {tuple(key.shape)}"
        )
    b, h_k, t, d_k = key.shape
    h_v, d_v = value.shape[1], value.shape[3]
    if value.shape[0] != b or value.shape[2] != t:
        raise ValueError(
            f"value must be (b={b}, h_v, t={t}, d_v), got shape {tuple(value.shape)}"
        )
    if (h_v % h_k if h_k else h_v) != 0:  # no key heads: no value heads either
        raise ValueError(f"value heads h_v must be a multiple of h_k={h_k}, got h_v={h_v}")
    check_qkv(query, key, value)  # floating point, one dtype, one device: every kernel's check
    values = not query.is_meta  # meta tensors hold none: shapes only, as torch's SDPA on meta
    for name, x in (("beta", beta), ("g", g)):  # beta first: delta_rule makes g from it
        if x is None and name not in required:
            continue
        if not isinstance(x, Tensor):
            raise ValueError(f"{name} must be a tensor (b, h_v, t), got {type(x).__name__}")
        if x.device != query.device:
            raise ValueError(f"{name} must be on the query's device {query.device}, got {x.device}")
        if x.shape != (b, h_v, t):
            raise ValueError(f"{name} must have shape (b, h_v, t) = {(b, h_v, t)}, got {tuple(x.shape)}")
        if not x.is_floating_point():
            raise ValueError(f"{name} must be floating point, got {x.dtype}")
        if values and x.isnan().any():  # NaN passes the range checks below: NaN > 0 is False
            raise ValueError(
                f"{name} must not be NaN, got NaN in {int(x.isnan().sum())} of its {x.numel()} values"
            )
    if values and g is not None and g.numel() and g.max() > 0:
        raise ValueError(f"g is a log decay and must be <= 0 everywhere, got a maximum of {g.max().item():.4g}")
    if values and beta is not None and beta.numel() and (beta.min() < 0 or beta.max() > 1):
        raise ValueError(
            f"beta must lie in [0, 1], got values from {beta.min().item():.4g} to "
            f"{beta.max().item():.4g}"
        )
    if form not in forms:
        raise ValueError(f"form must be one of {forms}, got {form!r}")
    check_sizes(chunk_size=chunk_size)
    if initial_state is None:
        return
    if not isinstance(initial_state, Tensor):
        raise ValueError(
            f"initial_state must be a torch.Tensor or None, got {type(initial_state).__name__}"
        )
    if not initial_state.is_floating_point() or initial_state.device != value.device:
        raise ValueError(  # an integer state would be cast silently
            f"initial_state must be floating point on value's device {value.device}, got "
            f"{initial_state.dtype} on {initial_state.device}"
        )
    if initial_state.shape != (b, h_v, d_k, d_v):
        raise ValueError(
            f"initial_state must have shape (b, h_v, d_k, d_v) = {(b, h_v, d_k, d_v)}, got "
            f"{tuple(initial_state.shape)}"
        )


def _prepare(
    query: Tensor, key: Tensor, value: Tensor, scale: float | None, initial_state: Tensor | None
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """q (scaled), k, v in the accumulation dtype, q and k repeated to h_v heads; the state S_0."""
    b, h_k, t, d_k = key.shape
    h_v, d_v = value.shape[1], value.shape[3]
    dtype = accumulation_dtype(value.dtype)  # float32 for half precision, as fused kernels
    q, k, v = query.to(dtype), key.to(dtype), value.to(dtype)
    # grouped heads (G_v = h_v / h_k): query/key head j serves value heads j G_v ... (j + 1) G_v - 1
    if h_v != h_k:
        q = q.repeat_interleave(h_v // h_k, dim=1)  # (b, h_v, t, d_k)
        k = k.repeat_interleave(h_v // h_k, dim=1)  # (b, h_v, t, d_k)
    q = q * (d_k**-0.5 if scale is None else scale)
    # a copy even in its dtype: S_t is a new tensor, for t = 0 too (the caller's S_0 unshared)
    state = (
        v.new_zeros(b, h_v, d_k, d_v) if initial_state is None
        else initial_state.to(v.dtype, copy=True)
    )  # (b, h_v, d_k, d_v)
    return q, k, v, state


def _log_decay(g: Tensor, dtype: torch.dtype) -> Tensor:
    """g in ``dtype``, raised to a floor whose exp is exactly 0 in ``dtype``, as exp(-inf) is.

    g = -inf (a_i = 0: forget everything) is a decay the recurrence takes; the other forms sum g
    over chunks and segments, which the floor keeps finite. The floor, the log of the smallest
    subnormal less a margin for exp's rounding, changes no exp(g) and no g above it; sums of t
    such floors (float32: -111.3 each) stay far from overflowing.
    """
    finfo = torch.finfo(dtype)
    return g.to(dtype).clamp_min(math.log(finfo.tiny * finfo.eps) - 8.0)


def _decay_mask(g: Tensor) -> Tensor:
    """Lambda (..., t, t) from g (..., t): exp(g_{j+1} + ... + g_i) = exp(gbar_i - gbar_j) for
    j <= i, else 0.

    Each entry sums its own segment of g (Mamba-2's stable ``segsum``): the difference of two
    running sums cancels, and once gbar is large (resets, floored to about -111 each in float32,
    or strong decays) its spacing exceeds the small g that follow, which it then loses.
    """
    t = g.shape[-1]
    later = torch.ones(t, t, dtype=torch.bool, device=g.device).tril(-1)  # (t, t): l > j
    # row i, column j: the sum of g_l over j < l <= i (0 on the diagonal)
    segments = g[..., :, None].expand(*g.shape, t).masked_fill(~later, 0).cumsum(-2)
    keep = torch.ones_like(later).tril()  # j <= i
    return segments.masked_fill(~keep, float("-inf")).exp()  # exp(-inf) = 0 above the diagonal


@overload
def decayed_linear_attention(
    query: Tensor, key: Tensor, value: Tensor, g: Tensor, *,
    output_final_state: Literal[False] = ..., **options: Unpack[DecayOptions],
) -> Tensor: ...
@overload
def decayed_linear_attention(
    query: Tensor, key: Tensor, value: Tensor, g: Tensor, *,
    output_final_state: Literal[True], **options: Unpack[DecayOptions],
) -> tuple[Tensor, Tensor]: ...
@autocast_as_sdpa
def decayed_linear_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    g: Tensor,
    *,
    form: DecayForm = "recurrent",
    chunk_size: int = 64,
    scale: float | None = None,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Linear attention with a scalar decay per head and step: S_i = exp(g_i) S_{i-1} + k_i^T v_i.

    Args:
        query: (b, h_k, t, d_k).
        key: (b, h_k, t, d_k).
        value: (b, h_v, t, d_v), h_v a multiple of h_k.
        g: (b, h_v, t), the log decay, <= 0 (0 never forgets: chapter 12's state without a
            normalizer; -inf forgets everything before the step, in every form).
        form: ``"recurrent"``, ``"parallel"`` ((Lambda o Q K^T) V) or ``"chunked"``: one result.
        chunk_size: C, tokens per chunk of the chunked form.
        scale: multiplies the queries; None means d_k^(-1/2).
        initial_state: S_0 (b, h_v, d_k, d_v), or None for zeros.
        output_final_state: also return S_t after the last token.

    Returns:
        z (b, h_v, t, d_v) in value's dtype, and S_t (b, h_v, d_k, d_v) in the accumulation dtype
        when ``output_final_state``.

    Raises:
        ValueError: g is not a tensor, a shape, dtype or device does not match (initial_state's
            included: a floating tensor on value's device), g > 0 or NaN, an unknown form, a
            chunk_size below 1, a scale that is not None or a finite number, or an
            output_final_state that is not a bool.

    Examples:
        >>> _ = torch.manual_seed(0)
        >>> q, k, v = torch.randn(3, 1, 2, 6, 4).unbind(0)
        >>> g = torch.zeros(1, 2, 6)  # no decay: causal linear attention with phi(x) = x
        >>> out = decayed_linear_attention(q, k, v, g)
        >>> torch.allclose(out, delta_attention_matrix(q, k, g) @ v, atol=1e-5)
        True
    """
    scale = check_scale(scale)
    check_flags(output_final_state=output_final_state)
    _check(query, key, value, g, None, form, DECAY_FORMS, chunk_size, initial_state, ("g",))
    q, k, v, state = _prepare(query, key, value, scale, initial_state)
    g = _log_decay(g, v.dtype)
    t = v.shape[2]
    if form == "recurrent":
        rows = []
        for i in range(t):
            state = g[..., i, None, None].exp() * state + k[..., i, :, None] * v[..., i, None, :]
            rows.append((q[..., i, None, :] @ state).squeeze(-2))  # (b, h_v, d_v)
        out = torch.stack(rows, dim=-2) if rows else v.new_zeros(v.shape)  # (b, h_v, t, d_v)
    else:
        step = max(t, 1) if form == "parallel" else chunk_size  # t = 0: range(0, 0, 0) raised
        chunks = []
        for start in range(0, t, step):
            q_c, k_c, v_c = (x[..., start : start + step, :] for x in (q, k, v))  # (.., C, d)
            g_cum = g[..., start : start + step].cumsum(-1)  # (b, h_v, C): gbar within the chunk
            lam = _decay_mask(g[..., start : start + step])  # (b, h_v, C, C): Lambda
            within = ((q_c @ k_c.transpose(-2, -1)) * lam) @ v_c  # (.., C, d_v)
            chunks.append(within + (q_c * g_cum[..., None].exp()) @ state)  # earlier chunks
            to_end = lam[..., -1, :]  # (b, h_v, C): decay from s to the chunk's end
            state = g_cum[..., -1, None, None].exp() * state + (
                k_c * to_end[..., None]
            ).transpose(-2, -1) @ v_c  # (b, h_v, d_k, d_v)
        out = torch.cat(chunks, dim=-2) if chunks else v.new_zeros(v.shape)  # (b, h_v, t, d_v)
    out = out.to(value.dtype)
    return (out, state) if output_final_state else out


def _delta_chunked(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor,
                   chunk_size: int) -> tuple[Tensor, Tensor]:
    """The gated delta rule by chunks (the book's equations (13.9) and (13.10)): within a chunk,
    with gbar the running sum of g counted from its start and Lambda its decay mask,

        D = (I + tril(diag(beta) (K K^T o Lambda), -1))^-1 diag(beta) (V - diag(exp gbar) K S_0)
        Z = diag(exp gbar) Q S_0 + (Lambda o Q K^T) D
        S_C = exp(gbar_C) S_0 + (diag(exp(gbar_C - gbar)) K)^T D

    where row j of D is what token j writes into the state (``d`` below; the chapter's U is D for
    S_0 = 0).
    """
    t = v.shape[2]
    chunks = []
    for start in range(0, t, chunk_size):
        q_c, k_c, v_c = (x[..., start : start + chunk_size, :] for x in (q, k, v))  # (.., C, d)
        g_cum = g[..., start : start + chunk_size].cumsum(-1)  # (b, h_v, C)
        b_c = beta[..., start : start + chunk_size, None]  # (b, h_v, C, 1)
        lam = _decay_mask(g[..., start : start + chunk_size])  # (b, h_v, C, C): Lambda
        decay = g_cum[..., None].exp()  # (b, h_v, C, 1)
        lower = (b_c * (k_c @ k_c.transpose(-2, -1)) * lam).tril(-1)  # (b, h_v, C, C)
        eye = torch.eye(lower.shape[-1], dtype=lower.dtype, device=lower.device)
        rhs = b_c * (v_c - decay * (k_c @ state))  # (b, h_v, C, d_v)
        d = torch.linalg.solve_triangular(eye + lower, rhs, upper=False, unitriangular=True)  # (b, h_v, C, d_v): D
        chunks.append(decay * (q_c @ state) + ((q_c @ k_c.transpose(-2, -1)) * lam) @ d)
        to_end = lam[..., -1, :, None]  # (b, h_v, C, 1): decay from s to the chunk's end
        state = g_cum[..., -1, None, None].exp() * state + (k_c * to_end).transpose(-2, -1) @ d
    out = torch.cat(chunks, dim=-2) if chunks else v.new_zeros(v.shape)  # (b, h_v, t, d_v)
    return out, state


@overload
def gated_delta_rule(
    query: Tensor, key: Tensor, value: Tensor, g: Tensor, beta: Tensor, *,
    output_final_state: Literal[False] = ..., **options: Unpack[DeltaOptions],
) -> Tensor: ...
@overload
def gated_delta_rule(
    query: Tensor, key: Tensor, value: Tensor, g: Tensor, beta: Tensor, *,
    output_final_state: Literal[True], **options: Unpack[DeltaOptions],
) -> tuple[Tensor, Tensor]: ...
@autocast_as_sdpa
def gated_delta_rule(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    g: Tensor,
    beta: Tensor,
    *,
    form: DeltaForm = "recurrent",
    chunk_size: int = 64,
    scale: float | None = None,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Gated DeltaNet's rule: S_i = exp(g_i) (I - beta_i k_i^T k_i) S_{i-1} + beta_i k_i^T v_i.

    Args:
        query: (b, h_k, t, d_k); Gated DeltaNet L2-normalises queries and keys first (the layer
            does; this function does not).
        key: (b, h_k, t, d_k).
        value: (b, h_v, t, d_v), h_v a multiple of h_k (grouped heads, as Qwen3-Next).
        g: (b, h_v, t), the log decay, <= 0 (-inf forgets everything before the step).
        beta: (b, h_v, t), the write strength, in [0, 1].
        form: ``"recurrent"`` (token by token) or ``"chunked"`` (UT form): one result.
        chunk_size: C, tokens per chunk of the chunked form.
        scale: multiplies the queries; None means d_k^(-1/2).
        initial_state: S_0 (b, h_v, d_k, d_v), or None for zeros.
        output_final_state: also return S_t after the last token.

    Returns:
        z (b, h_v, t, d_v) in value's dtype, and S_t (b, h_v, d_k, d_v) in the accumulation dtype
        when ``output_final_state``.

    Raises:
        ValueError: g or beta is not a tensor, a shape, dtype or device does not match
            (initial_state's included: a floating tensor on value's device), g > 0 or NaN, beta
            outside [0, 1] or NaN, an unknown form, a chunk_size below 1, a scale that is not
            None or a finite number, or an output_final_state that is not a bool.

    Examples:
        >>> _ = torch.manual_seed(0)
        >>> q, k, v = torch.randn(3, 1, 2, 6, 4).unbind(0)
        >>> k = torch.nn.functional.normalize(k, dim=-1)
        >>> g, beta = -torch.rand(1, 2, 6), torch.rand(1, 2, 6)
        >>> out = gated_delta_rule(q, k, v, g, beta)
        >>> torch.allclose(out, delta_attention_matrix(q, k, g, beta) @ v, atol=1e-5)
        True
    """
    scale = check_scale(scale)
    check_flags(output_final_state=output_final_state)
    _check(query, key, value, g, beta, form, DELTA_FORMS, chunk_size, initial_state, ("g", "beta"))
    q, k, v, state = _prepare(query, key, value, scale, initial_state)
    g, beta = _log_decay(g, v.dtype), beta.to(v.dtype)
    if form == "chunked":
        out, state = _delta_chunked(q, k, v, g, beta, state, chunk_size)
    else:
        rows = []
        for i in range(v.shape[2]):
            k_i = k[..., i, :]  # (b, h_v, d_k)
            state = g[..., i, None, None].exp() * state  # forget
            read = (k_i[..., None, :] @ state).squeeze(-2)  # (b, h_v, d_v): what S recalls for k
            write = beta[..., i, None] * (v[..., i, :] - read)  # (b, h_v, d_v): the correction
            state = state + k_i[..., :, None] * write[..., None, :]  # (b, h_v, d_k, d_v)
            rows.append((q[..., i, None, :] @ state).squeeze(-2))  # (b, h_v, d_v)
        out = torch.stack(rows, dim=-2) if rows else v.new_zeros(v.shape)  # (b, h_v, t, d_v)
    out = out.to(value.dtype)
    return (out, state) if output_final_state else out


@overload
def delta_rule(
    query: Tensor, key: Tensor, value: Tensor, beta: Tensor, *,
    output_final_state: Literal[False] = ..., **options: Unpack[DeltaOptions],
) -> Tensor: ...
@overload
def delta_rule(
    query: Tensor, key: Tensor, value: Tensor, beta: Tensor, *,
    output_final_state: Literal[True], **options: Unpack[DeltaOptions],
) -> tuple[Tensor, Tensor]: ...
@autocast_as_sdpa
def delta_rule(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    beta: Tensor,
    *,
    form: DeltaForm = "recurrent",
    chunk_size: int = 64,
    scale: float | None = None,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """DeltaNet's rule, S_i = S_{i-1} + beta_i k_i^T (v_i - k_i S_{i-1}): the gated rule, g = 0.

    Arguments as in :func:`gated_delta_rule`, without g.

    Returns:
        z (b, h_v, t, d_v), and S_t (b, h_v, d_k, d_v) when ``output_final_state``.

    Raises:
        ValueError: as :func:`gated_delta_rule`, an output_final_state that is not a bool among
            them.

    Examples:
        >>> _ = torch.manual_seed(0)
        >>> q, k, v = torch.randn(3, 1, 2, 6, 4).unbind(0)
        >>> k, beta = torch.nn.functional.normalize(k, dim=-1), torch.rand(1, 2, 6)
        >>> recurrent = delta_rule(q, k, v, beta)
        >>> chunked = delta_rule(q, k, v, beta, form="chunked", chunk_size=2)
        >>> torch.allclose(recurrent, chunked, atol=1e-5)
        True
    """
    g = torch.zeros_like(beta) if isinstance(beta, Tensor) else None  # gated_delta_rule checks
    return gated_delta_rule(  # type: ignore[call-overload]  # a bool, not a Literal, here
        query, key, value, g, beta, form=form, chunk_size=chunk_size, scale=scale,
        initial_state=initial_state, output_final_state=output_final_state,
    )


def delta_attention_matrix(
    query: Tensor,
    key: Tensor,
    g: Tensor | None = None,
    beta: Tensor | None = None,
    *,
    scale: float | None = None,
) -> Tensor:
    """The weights W (b, h, t, t) with Z = W V for a rule started from a zero state.

    Every rule here is linear in the values, so its output is a weighted sum of them, like
    attention's; only the weights differ (they need not be positive or sum to 1). With the
    decay mask Lambda (all ones on and below the diagonal when g is None):

        sum rule (g = 0, no beta)    W = tril(Q K^T)
        decay (g, no beta)           W = Lambda o Q K^T
        (gated) delta rule (beta)    W = (Lambda o Q K^T) (I + tril(diag(beta)(K K^T o Lambda), -1))^-1 diag(beta)

    with Q scaled by ``scale``: the book's equation (13.11). One head per value head
    (h_k = h_v).

    Args:
        query: (b, h, t, d_k).
        key: (b, h, t, d_k).
        g: the log decay (b, h, t), <= 0 (None: no decay).
        beta: the delta rule's writing strength (b, h, t) (None: no delta rule).
        scale: multiplies the queries (None: d_k^(-1/2)).

    Returns:
        W (b, h, t, t).

    Raises:
        ValueError: if the tensors do not agree in shape, dtype or device, g > 0 or NaN, beta
            outside [0, 1] or NaN, or scale is not None or a finite number.

    Examples:
        >>> q = k = torch.eye(3)[None, None]  # (b, h, t, d_k) = (1, 1, 3, 3)
        >>> delta_attention_matrix(q, k, scale=1.0)  # the sum rule: tril(Q K^T)
        tensor([[[[1., 0., 0.],
                  [0., 1., 0.],
                  [0., 0., 1.]]]])
    """
    scale = check_scale(scale)
    if not (isinstance(query, Tensor) and isinstance(key, Tensor)) or (
        query.dim() != 4 or query.shape != key.shape
    ):
        raise ValueError(
            f"query and key must be 4-d (b, h, t, d_k) of one shape, got {shape_or_type(query)} "
            f"and {shape_or_type(key)}"
        )
    value_like = key[..., :1]  # (b, h, t, 1): only its shape and dtype are used
    _check(query, key, value_like, g, beta, "recurrent", DELTA_FORMS, 1, None)
    q, k, _, _ = _prepare(query, key, value_like, scale, None)
    t = k.shape[2]
    lam = torch.ones(t, t, dtype=k.dtype, device=k.device).tril() if g is None else (
        _decay_mask(_log_decay(g, k.dtype))
    )  # (b, h, t, t) or (t, t)
    weights = (q @ k.transpose(-2, -1)).tril() * lam  # (b, h, t, t)
    if beta is None:
        return weights
    b_col = beta.to(k.dtype)[..., None]  # (b, h, t, 1)
    lower = (b_col * (k @ k.transpose(-2, -1)) * lam).tril(-1)  # (b, h, t, t)
    eye = torch.eye(t, dtype=k.dtype, device=k.device)
    # W = (Lambda o Q K^T) (I + lower)^-1 diag(beta): solve X (I + lower) = weights, transposed
    solved = torch.linalg.solve_triangular(
        (eye + lower).transpose(-2, -1), weights.transpose(-2, -1), upper=True, unitriangular=True
    ).transpose(-2, -1)  # (b, h, t, t)
    return solved * b_col.transpose(-2, -1)


def delta_rule_flops(t: int, d_k: int, d_v: int, *, chunk_size: int = 64, delta: bool = True) -> int:
    """FLOPs of the matrix products of one (batch, head) of the chunked form, an (a, b) @ (b, c)
    product counting 2 a b c and the triangular solve C^2 d_v (a last, shorter chunk as it is).

    Per chunk of C tokens, scalar decay (``delta=False``, equation (13.5)): Q K^T and its product
    with V, 2 C^2 (d_k + d_v); Q S_0 and the state's update K^T V, 4 C d_k d_v. The gated delta
    rule (equations (13.9) and (13.10)) adds K K^T (2 C^2 d_k), K S_0 (2 C d_k d_v) and the solve
    (C^2 d_v): 4 C^2 d_k + 3 C^2 d_v + 6 C d_k d_v.

    Args:
        t: tokens.
        d_k: width of queries and keys.
        d_v: width of values.
        chunk_size: C, tokens per chunk.
        delta: the gated delta rule (True) or scalar decay (False).

    Returns:
        The FLOPs, an int.

    Raises:
        ValueError: if a size is not an integer >= 1, or delta is not a bool.

    Examples:
        >>> delta_rule_flops(128, 64, 64, chunk_size=64, delta=False)
        4194304
    """
    t, d_k, d_v, chunk_size = check_sizes(t=t, d_k=d_k, d_v=d_v, chunk_size=chunk_size)  # ints
    check_flags(delta=delta)
    total = 0
    for start in range(0, t, chunk_size):
        c = min(chunk_size, t - start)
        if delta:
            total += 4 * c * c * d_k + 3 * c * c * d_v + 6 * c * d_k * d_v
        else:
            total += 2 * c * c * (d_k + d_v) + 4 * c * d_k * d_v
    return total
