"""FAVOR+ (Choromanski et al., 2021): softmax attention estimated with positive random features.

Notation (see CONTRIBUTING.md):
    ...    leading batch dimensions (b, h)
    t      tokens (t_q queries, t_k keys and values; t_q = t_k when causal)
    d_k    width of queries and keys, d_v width of values
    m      number of random features (``num_features``)

FAVOR+ estimates the softmax kernel itself with m positive random features,
phi(x) = exp(x Ψ^T - |x|^2 / 2) / sqrt(m), whose dot product has expectation exp(x . y) when the
rows of Ψ are standard normal (orthogonal rows keep that, and for m <= d_k lower the variance);
queries and keys are first divided by d_k^(1/4), so that x . y = q . k / sqrt(d_k). The features
then run through any form of linear attention (:mod:`attention.linear`).
"""

import math

import torch
from torch import Tensor
from torch.types import Device

from ._checks import (
    accumulation_dtype,
    attention_kernel,
    check_flags,
    check_generator,
    check_seed,
    check_sizes,
    shape_or_type,
)
from .linear import Form, check_linear_inputs, kernel_attention

__all__ = [
    "favor_attention",
    "favor_error_variance",
    "positive_random_features",
    "random_projection",
]


def positive_random_features(x: Tensor, projection: Tensor) -> Tensor:
    """phi(x) = exp(x Ψ^T - |x|^2 / 2) / sqrt(m) (..., t, m) for Ψ = ``projection`` (m, d_k).

    With the rows of Ψ drawn from N(0, I), E[phi(x) . phi(y)] = exp(x . y) for every x and y:
    an unbiased estimate of the softmax kernel with positive features (Choromanski et al., 2021,
    Lemma 1).

    Args:
        x: queries or keys (..., d_k): one vector, or (..., t, d_k).
        projection: Ψ (m, d_k).

    Returns:
        phi(x) (..., m), positive.

    Raises:
        ValueError: if x is not a floating-point tensor of at least 1 dimension, or projection
            is not a tensor (m, d_k) with x's d_k, dtype and device.

    Examples:
        >>> psi = random_projection(4096, 2, False, torch.Generator().manual_seed(0))  # N(0, I) rows
        >>> x, y = torch.tensor([[0.5, 0.0]]), torch.tensor([[0.5, 0.5]])
        >>> estimate = positive_random_features(x, psi) @ positive_random_features(y, psi).T
        >>> round(estimate.item(), 2), round(math.exp(0.25), 2)  # the estimate and exp(x . y)
        (1.27, 1.28)
    """
    if not isinstance(x, Tensor) or x.dim() < 1 or not x.is_floating_point():
        got = f"{x.dtype} of shape {tuple(x.shape)}" if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"x must be a floating-point tensor (..., d_k), got {got}")
    if (not isinstance(projection, Tensor) or projection.dim() != 2
            or projection.shape[1] != x.shape[-1]):
        raise ValueError(
            f"projection must have shape (m, d_k) with d_k={x.shape[-1]}, "
            f"got {shape_or_type(projection)}"
        )
    if projection.dtype != x.dtype or projection.device != x.device:  # x Ψ^T needs one of each
        raise ValueError(f"projection must have x's dtype and device, {x.dtype} on {x.device}, "
                         f"got {projection.dtype} on {projection.device}")
    m = projection.shape[0]
    squared = (x * x).sum(dim=-1, keepdim=True) / 2  # (..., t, 1)
    return torch.exp(x @ projection.transpose(0, 1) - squared) / math.sqrt(m)  # (..., t, m)


def random_projection(
    num_features: int,
    d_k: int,
    orthogonal: bool = True,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float32,
    device: Device = None,
) -> Tensor:
    """Ψ (m, d_k) whose rows are each distributed as N(0, I_{d_k}).

    ``orthogonal=False``: independent rows. ``orthogonal=True``: in blocks of d_k rows, the rows
    of a block are orthogonal, each block an independent uniformly random rotation; each row
    is then scaled to the length of an independent N(0, I) vector, so that each row alone is
    still N(0, I) and the estimate stays unbiased (the Performer code's default scaling; its
    rotations come from a plain QR, without the sign correction that makes them uniform here).

    Args:
        num_features: m, the rows.
        d_k: width of queries and keys.
        orthogonal: orthogonal rows within each block of d_k.
        generator: the random generator to draw from (torch's global one if None).
        dtype: dtype of Ψ.
        device: device of Ψ.

    Returns:
        Ψ (m, d_k).

    Raises:
        ValueError: if num_features or d_k is not an integer >= 1, orthogonal is not a bool,
            generator is not a torch.Generator or None, or dtype is not a floating-point dtype.

    Examples:
        >>> psi = random_projection(2, 2, generator=torch.Generator().manual_seed(0))
        >>> abs((psi[0] @ psi[1]).item()) < 1e-6  # orthogonal rows
        True
    """
    check_sizes(num_features=num_features, d_k=d_k)
    check_flags(orthogonal=orthogonal)
    check_generator(generator)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:  # an int Ψ is truncated
        raise ValueError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
    if not orthogonal:
        return torch.randn(num_features, d_k, generator=generator, dtype=dtype, device=device)
    blocks = []
    for _ in range(math.ceil(num_features / d_k)):
        gaussian = torch.randn(d_k, d_k, generator=generator, dtype=torch.float64, device=device)
        rotation, triangular = torch.linalg.qr(gaussian)  # (d_k, d_k) each
        # QR's orthogonal factor is uniformly random only once its column signs follow the
        # triangular factor's diagonal (Mezzadri, 2007): without that, its columns lean towards
        # some directions (Householder QR makes the first one's first coordinate negative).
        signs = torch.sign(torch.diagonal(triangular))  # (d_k,)
        blocks.append((rotation * signs).T)  # (d_k, d_k): orthonormal rows
    directions = torch.cat(blocks)[:num_features]  # (m, d_k)
    lengths = torch.randn(
        num_features, d_k, generator=generator, dtype=torch.float64, device=device
    ).norm(dim=1, keepdim=True)  # (m, 1): chi-distributed with d_k degrees of freedom
    return (directions * lengths).to(dtype)  # (m, d_k)


def favor_features(x: Tensor, projection: Tensor, over: tuple[int, ...]) -> Tensor:
    """Positive random features of x / d_k^(1/4), divided by exp of their largest exponent.

    The maximum is taken ``over`` the feature dimension (queries: one per query) or the token and
    feature dimensions (keys: one per head). A factor shared by a query's features, or by all
    keys, cancels between numerator and normalizer: in exact arithmetic the output is unchanged,
    and exp no longer overflows. The keys' maximum includes later keys, though: in float32, if
    every exponent of every key a causal query sees lies more than 150 ln 2 (about 104) below it,
    all those features underflow to 0, and the query's output is a row of 0.
    """
    x = x.to(accumulation_dtype(x.dtype)) * x.shape[-1] ** -0.25  # (..., t, d_k)
    exponent = x @ projection.to(x.dtype).transpose(0, 1) - (x * x).sum(-1, keepdim=True) / 2
    if exponent.numel() == 0:  # no key (t_k = 0) or no query: nothing to rescale, no maximum
        return exponent  # (..., 0, m)
    return torch.exp(exponent - exponent.amax(dim=over, keepdim=True))  # (..., t, m)


@attention_kernel
def favor_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    num_features: int,
    seed: int | None = None,
    is_causal: bool = False,
    orthogonal: bool = True,
    form: Form = "chunked",
    projection: Tensor | None = None,
) -> Tensor:
    """FAVOR+: softmax attention estimated with m positive random features.

    It costs the features, 2 t m d_k FLOPs each for the queries and the keys, plus the form's own
    term (:func:`~attention.linear.linear_attention_flops` with r = m): O(t m (d_k + d_v)) in all
    for the recurrent form, O(t C (m + d_v)) more for the chunked one (C = 64), and
    O(t^2 (m + d_v)) for the parallel one. Before the stabilizing factors, which cancel in the ratio, the numerator
    and the normalizer are unbiased estimates; the ratio is not. For moderate scores the error
    falls as 1 / sqrt(m) (:func:`favor_error_variance`), for large ones more slowly. In float32,
    a causal query whose keys all lie far below a later key's largest exponent gets a row of 0
    (the keys' stabilizing maximum is shared; see the book's section 12.3).

    Args:
        query: (..., t_q, d_k).
        key: (..., t_k, d_k), the query's dtype and leading dimensions.
        value: (..., t_k, d_v), likewise.
        num_features: m, the number of random features.
        seed: seeds the random projection (a new ``torch.Generator``); None draws it from
            torch's global generator.
        is_causal: query i sees keys j <= i only.
        orthogonal: orthogonal random features (:func:`random_projection`).
        form: the form of linear attention that runs (the result is the same).
        projection: a given Ψ (m, d_k) instead of a random one (``num_features`` must be m).

    Returns:
        An estimate of ``softmax(Q K^T / sqrt(d_k)) V``, (..., t_q, d_v); with no key (t_k = 0),
        rows of 0, as torch's SDPA gives them.

    Raises:
        ValueError: if the inputs do not agree (as :func:`linear_attention`), is_causal or
            orthogonal is not a bool, num_features is not an integer >= 1, seed is neither None
            nor an integer torch.Generator takes, or projection is not (num_features, d_k) or not
            floating point on the query's device.
        TypeError: flash-attn's keywords and older names (``causal``, ``softmax_scale``,
            ``window_size``, ``causal_alignment``), with the keyword this function takes.

    Examples:
        >>> _ = torch.manual_seed(0)
        >>> q, k, v = (0.5 * torch.randn(3, 1, 6, 4)).unbind(0)
        >>> estimate = favor_attention(q, k, v, num_features=256, seed=0, is_causal=True)
        >>> exact = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        >>> (estimate - exact).abs().max().item() < 0.1
        True
    """
    check_linear_inputs(query, key, value, is_causal, form, 1)
    # orthogonal: also when a projection is given, which leaves it unread
    check_flags(orthogonal=orthogonal)
    if seed is not None:
        seed = check_seed(seed)
    check_sizes(num_features=num_features)
    d_k = query.shape[-1]
    if projection is None:
        # the meta device has no generator (nor values to draw): the projection's shape only
        generator = (None if seed is None or query.is_meta
                     else torch.Generator(query.device).manual_seed(seed))
        projection = random_projection(
            num_features, d_k, orthogonal, generator, device=query.device
        )  # (m, d_k)
    elif not isinstance(projection, Tensor) or tuple(projection.shape) != (num_features, d_k):
        got = shape_or_type(projection)
        raise ValueError(
            f"projection must have shape (num_features, d_k) = ({num_features}, {d_k}), got {got}"
        )
    elif not projection.is_floating_point() or projection.device != query.device:
        # cast to the inputs' dtype below, but never moved: x Ψ^T failed inside torch
        raise ValueError(f"projection must be floating point on the query's device {query.device}, "
                         f"got {projection.dtype} on {projection.device}")
    phi_q = favor_features(query, projection, over=(-1,))  # (..., t_q, m)
    phi_k = favor_features(key, projection, over=(-2, -1))  # (..., t_k, m)
    return kernel_attention(phi_q, phi_k, value, is_causal, form, 64)[0].to(value.dtype)


@attention_kernel
def favor_error_variance(
    query: Tensor, key: Tensor, value: Tensor, *, num_features: int, is_causal: bool = False
) -> Tensor:
    """The variance of FAVOR+'s output error to first order in 1 / m, for independent features.

    With x_i = q_i / d_k^(1/4), y_j = k_j / d_k^(1/4), alpha the softmax weights and z = alpha V:

        Var[z_hat_ic] ~ (1/m) sum_{a,b} alpha_ia alpha_ib (v_ac - z_ic) (v_bc - z_ic)
                                        exp((x_i + y_a) . (x_i + y_b))

    (equation (12.13) of the book). Each deviation is summed as v_a - z_i = sum_c alpha_ic
    (v_a - v_c): subtracting z_i from v_a would cancel to 0 where one key takes nearly all the
    weight, and lose a deviation that an enormous exponential multiplies. The weights of the
    pairs (a, b) are taken in log space, shifted by their largest per query, so that a weight
    that underflows and an exponential that overflows never meet as 0 * inf. Memory grows as
    t_q t_k^2: the function is meant for the book's short sequences.

    Args:
        query: (..., t_q, d_k).
        key: (..., t_k, d_k), the query's dtype and leading dimensions.
        value: (..., t_k, d_v), likewise.
        num_features: m.
        is_causal: query i sees keys j <= i only.

    Returns:
        The variance (..., t_q, d_v), in the accumulation dtype.

    Raises:
        ValueError: if the inputs do not agree (as :func:`linear_attention`), is_causal is not
            a bool, or num_features is not an integer >= 1.
        TypeError: flash-attn's keywords and older names (``causal``, ``softmax_scale``,
            ``window_size``, ``causal_alignment``), with the keyword this function takes.

    Examples:
        >>> _ = torch.manual_seed(0)
        >>> q, k, v = torch.randn(3, 1, 4, 2).unbind(0)
        >>> var = favor_error_variance(q, k, v, num_features=100)
        >>> torch.allclose(100 * var, favor_error_variance(q, k, v, num_features=1))  # falls as 1/m
        True
    """
    check_linear_inputs(query, key, value, is_causal, "parallel", 1)
    check_sizes(num_features=num_features)
    acc = accumulation_dtype(query.dtype)
    x = query.to(acc) * query.shape[-1] ** -0.25  # (..., t_q, d_k)
    y = key.to(acc) * key.shape[-1] ** -0.25  # (..., t_k, d_k)
    v = value.to(acc)
    scores = x @ y.transpose(-2, -1)  # (..., t_q, t_k)
    if is_causal:
        future = ~torch.ones_like(scores, dtype=torch.bool).tril()  # (..., t_q, t_k)
        scores = scores.masked_fill(future, float("-inf"))
    if scores.shape[-1] == 0:  # no key: no estimate to err
        return scores @ v  # (..., t_q, d_v) of zeros
    lse = scores.logsumexp(dim=-1, keepdim=True)  # (..., t_q, 1)
    alpha = (scores - lse).exp()  # (..., t_q, t_k)
    pairs = v[..., :, None, :] - v[..., None, :, :]  # (..., t_k, t_k, d_v): v_a - v_c
    deviation = torch.einsum("...ic,...acd->...iad", alpha, pairs)  # (..., t_q, t_k, d_v)
    # log of alpha_ia alpha_ib exp((x_i + y_a) . (x_i + y_b)): |x_i|^2 + h_ia + h_ib + y_a . y_b
    h = 2 * scores - lse  # (..., t_q, t_k), -inf for a hidden key
    log_w = (h[..., :, :, None] + h[..., :, None, :] + (y @ y.transpose(-2, -1))[..., None, :, :]
             + (x * x).sum(-1)[..., :, None, None])  # (..., t_q, t_k, t_k)
    shift = log_w.amax(dim=(-2, -1))[..., None]  # (..., t_q, 1): finite, key 0 is always seen
    w = (log_w - shift[..., None]).exp()  # (..., t_q, t_k, t_k), at most 1
    quadratic = (deviation * (w @ deviation)).sum(dim=-2)  # (..., t_q, d_v)
    # 0 stays 0 (equal values) even where exp(shift) overflows
    return torch.where(quadratic == 0, quadratic, quadratic * shift.exp()) / num_features

