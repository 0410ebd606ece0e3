"""Linear attention in three equal forms (Katharopoulos et al., 2020).

Notation (see CONTRIBUTING.md):
    ...    leading batch dimensions (b, h)
    t      tokens (t_q queries, t_k keys and values; t_q = t_k when causal)
    d_k    width of queries and keys, d_v width of values
    r      width of the features phi(x): d_k for elu(x) + 1, m for FAVOR+
    C      chunk size of the chunked form (``chunk_size``)

Softmax attention weighs value j by the kernel exp(q_i . k_j / sqrt(d_k)). Linear attention
replaces that kernel by a dot product of positive features, phi(q_i) . phi(k_j), and the sums
can then be reordered: with causal masking, query i needs only the running sums

    S_i = sum_{j <= i} phi(k_j)^T v_j   (r, d_v)     and     u_i = sum_{j <= i} phi(k_j)   (r,)

    z_i = phi(q_i) S_i / (phi(q_i) . u_i)

Three forms compute the same z (the tests check them equal in float64), at these costs:
    parallel   (phi(Q) phi(K)^T, lower triangle) V over its row sums   O(t^2 (r + d_v))
    recurrent  S_i and u_i updated token by token (a linear RNN)        O(t r d_v)
    chunked    parallel within chunks of C tokens, the state across     O(t r d_v + t C (r + d_v))
u_i is carried as one more column of S_i: the values get a column of ones, [v_j, 1].

FAVOR+ (:mod:`attention.favor`) runs these forms with random features that estimate the softmax
kernel.
"""

from collections.abc import Callable
from typing import Literal, TypedDict, Unpack, cast, get_args, overload

import torch
import torch.nn.functional as F
from torch import Tensor

from ._checks import (
    accumulation_dtype,
    attention_kernel,
    check_flags,
    check_qkv,
    check_scale,
    check_sizes,
    renamed,
    shape_or_type,
)

__all__ = [
    "FORMS",
    "FeatureMapName",
    "Form",
    "elu_plus_one",
    "linear_attention",
    "linear_attention_flops",
    "linear_attention_weights",
]

Form = Literal["parallel", "recurrent", "chunked"]
FORMS: tuple[Form, ...] = get_args(Form)
FeatureMap = Callable[[Tensor], Tensor]


def elu_plus_one(x: Tensor) -> Tensor:
    """phi(x) = elu(x) + 1, Katharopoulos et al.'s feature map: x + 1 for x > 0, exp(x) else.

    Positive everywhere, so every kernel value phi(q) . phi(k) is positive, as exp is.

    Args:
        x: queries or keys, any shape.

    Returns:
        phi(x), the shape of x.

    Examples:
        >>> elu_plus_one(torch.tensor([-1.0, 0.0, 2.0]))
        tensor([0.3679, 1.0000, 3.0000])
    """
    return F.elu(x) + 1


FeatureMapName = Literal["elu+1"]
FEATURE_MAPS: dict[FeatureMapName, FeatureMap] = {"elu+1": elu_plus_one}  # keys checked by mypy


def apply_feature_map(x: Tensor, feature_map: str | FeatureMap, name: str) -> Tensor:
    """phi(x) (..., t, r), computed in the accumulation dtype; refuses negative features."""
    if isinstance(feature_map, str):
        if feature_map not in FEATURE_MAPS:
            raise ValueError(
                f"feature_map must be one of {tuple(FEATURE_MAPS)} or a callable, "
                f"got {feature_map!r}"
            )
        feature_map = FEATURE_MAPS[feature_map]
    elif not callable(feature_map):
        raise ValueError(f"feature_map must be a name or a callable, got {feature_map!r}")
    phi = feature_map(x.to(accumulation_dtype(x.dtype)))  # (..., t, r)
    if not isinstance(phi, Tensor) or phi.shape[:-1] != x.shape[:-1]:  # one row of r per token
        got = shape_or_type(phi)
        raise ValueError(f"feature_map must map {name} (..., t, d) to (..., t, r), keeping "
                         f"{tuple(x.shape[:-1])}, got {got}")
    if not phi.is_meta and (phi < 0).any():  # a negative feature can make a normalizer <= 0
        raise ValueError(f"feature_map must give features >= 0, got a negative feature of {name}")
    return phi


def feature_pair(query: Tensor, key: Tensor, feature_map: str | FeatureMap) -> tuple[Tensor, Tensor]:
    """phi(Q) (..., t_q, r) and phi(K) (..., t_k, r), refusing features of two widths."""
    phi_q = apply_feature_map(query, feature_map, "query")
    phi_k = apply_feature_map(key, feature_map, "key")
    if phi_q.shape[-1] != phi_k.shape[-1]:
        raise ValueError(
            f"feature_map must give queries and keys features of one width r, got "
            f"{phi_q.shape[-1]} and {phi_k.shape[-1]}"
        )
    return phi_q, phi_k


def check_linear_inputs(
    query: Tensor, key: Tensor, value: Tensor, is_causal: bool, form: Form, chunk_size: int
) -> None:
    check_qkv(query, key, value)
    check_flags(is_causal=is_causal)
    if not (query.shape[:-2] == key.shape[:-2] == value.shape[:-2]):
        raise ValueError(
            f"query, key and value must have the same leading dimensions, got "
            f"{tuple(query.shape[:-2])}, {tuple(key.shape[:-2])} and {tuple(value.shape[:-2])}"
        )
    if is_causal and query.shape[-2] != key.shape[-2]:
        raise ValueError(
            f"causal linear attention needs as many queries as keys, got t_q={query.shape[-2]} "
            f"and t_k={key.shape[-2]}"
        )
    if form not in FORMS:
        raise ValueError(f"form must be one of {FORMS}, got {form!r}")
    check_sizes(chunk_size=chunk_size)


def divide_rows(numerator: Tensor, normalizer: Tensor) -> Tensor:
    """numerator / normalizer, a row whose normalizer is 0 (no key, or features that are 0
    against every key) giving a row of 0: softmax attention's answer for a row that sees no key
    (torch's SDPA), where 0 / 0 would be NaN. normalizer: (..., t_q, 1)."""
    return numerator / normalizer.masked_fill(normalizer == 0, 1)


def _divide_by_normalizer(out: Tensor) -> Tensor:
    """z (..., t_q, d_v) from [numerator, normalizer] (..., t_q, d_v + 1), as :func:`divide_rows`."""
    return divide_rows(out[..., :-1], out[..., -1:])  # (..., t_q, d_v)


def kernel_attention(
    phi_q: Tensor, phi_k: Tensor, value: Tensor, causal: bool, form: Form, chunk_size: int,
    initial_state: Tensor | None = None, want_state: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """z (..., t_q, d_v) from features phi_q (..., t_q, r) and phi_k (..., t_k, r), in one form,
    and (with ``want_state``, else None where it costs a product) the final state [S, u]
    (..., r, d_v + 1) after every key, from ``initial_state`` on."""
    ones = value.new_ones(*value.shape[:-1], 1)  # (..., t_k, 1): the normalizer's column
    v1 = torch.cat([value, ones], dim=-1).to(phi_q.dtype)  # (..., t_k, d_v + 1)
    r, w = phi_k.shape[-1], v1.shape[-1]
    # (..., r, w), a copy even in its dtype: the final state is a new tensor, for t = 0 too
    state = None if initial_state is None else initial_state.to(phi_q.dtype, copy=True)
    final = None
    if form == "parallel":
        kernel = phi_q @ phi_k.transpose(-2, -1)  # (..., t_q, t_k)
        out = (kernel.tril() if causal else kernel) @ v1  # (..., t_q, d_v + 1)
        if state is not None:
            out = out + phi_q @ state  # the earlier tokens' share
        if want_state:
            final = phi_k.transpose(-2, -1) @ v1 + (0 if state is None else state)
        return _divide_by_normalizer(out), final
    if state is None:
        state = phi_k.new_zeros(*phi_k.shape[:-2], r, w)  # (..., r, d_v + 1)
    if not causal:  # recurrent and chunked keep one state of every key: S = phi(K)^T [V, 1]
        final = state + phi_k.transpose(-2, -1) @ v1  # (..., r, d_v + 1)
        out = phi_q @ final  # (..., t_q, d_v + 1)
    elif form == "recurrent":
        rows = []
        for i in range(phi_q.shape[-2]):
            state = state + phi_k[..., i, :, None] @ v1[..., i, None, :]  # (..., r, d_v + 1)
            rows.append((phi_q[..., i, None, :] @ state).squeeze(-2))  # (..., d_v + 1)
        # (..., t, d_v + 1); no token (t = 0): no row
        out = torch.stack(rows, dim=-2) if rows else phi_q.new_zeros(*phi_q.shape[:-1], w)
    else:  # chunked: exact within a chunk, the state of all earlier chunks across them
        chunks = []
        for start in range(0, phi_q.shape[-2], chunk_size):
            end = start + chunk_size
            q_c, k_c = phi_q[..., start:end, :], phi_k[..., start:end, :]  # (..., C, r) each
            v_c = v1[..., start:end, :]  # (..., C, d_v + 1)
            within = (q_c @ k_c.transpose(-2, -1)).tril() @ v_c  # (..., C, d_v + 1)
            chunks.append(within + q_c @ state)  # (..., C, d_v + 1)
            state = state + k_c.transpose(-2, -1) @ v_c  # (..., r, d_v + 1)
        # (..., t, d_v + 1); no token (t = 0): no chunk
        out = torch.cat(chunks, dim=-2) if chunks else phi_q.new_zeros(*phi_q.shape[:-1], w)
    if causal:
        final = state  # the loop's state after the last token
    return _divide_by_normalizer(out), final  # (..., t_q, d_v): numerator over normalizer


class LinearOptions(TypedDict, total=False):
    """The keyword options of :func:`linear_attention` besides ``output_final_state``: the
    overloads, one per value of that flag, share them."""

    feature_map: FeatureMapName | FeatureMap
    is_causal: bool
    form: Form
    chunk_size: int
    scale: float | None
    initial_state: Tensor | None


@overload
def linear_attention(
    query: Tensor, key: Tensor, value: Tensor, *, output_final_state: Literal[False] = False,
    **options: Unpack[LinearOptions],
) -> Tensor: ...
@overload
def linear_attention(
    query: Tensor, key: Tensor, value: Tensor, *, output_final_state: Literal[True],
    **options: Unpack[LinearOptions],
) -> tuple[Tensor, Tensor]: ...
@overload
def linear_attention(
    query: Tensor, key: Tensor, value: Tensor, *, output_final_state: bool = False,
    **options: Unpack[LinearOptions],
) -> Tensor | tuple[Tensor, Tensor]: ...
@attention_kernel
def linear_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    feature_map: FeatureMapName | FeatureMap = "elu+1",
    is_causal: bool = False,
    form: Form = "parallel",
    chunk_size: int = 64,
    scale: float | None = None,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Linear attention (..., t_q, d_v): z_i = sum_j phi(q_i).phi(k_j) v_j / sum_j phi(q_i).phi(k_j)

    Args:
        query: (..., t_q, d_k), floating point.
        key: (..., t_k, d_k), the query's dtype and leading dimensions (no broadcasting).
        value: (..., t_k, d_v), likewise.
        feature_map: ``"elu+1"`` (:func:`elu_plus_one`) or a callable (..., t, d_k) -> (..., t, r)
            whose features are >= 0 (a negative one is a ValueError).
        is_causal: query i sees keys j <= i only (needs t_q = t_k); False by default, as in
            torch's SDPA.
        form: ``"parallel"``, ``"recurrent"`` or ``"chunked"``: the same result, at different
            costs (see the module docstring and :func:`linear_attention_flops`).
        chunk_size: C, tokens per chunk of the chunked form.
        scale: multiplies the queries before the feature map; None (the default) applies none,
            as Katharopoulos et al. (flash-linear-attention's ``scale``, 1/sqrt(d_k) by default,
            instead multiplies the features after the map, and cancels when the output is
            normalized).
        initial_state: the state [S, u] (..., r, d_v + 1) of earlier tokens, S in the first d_v
            columns and the normalizer u in the last, as ``output_final_state`` returns it;
            every query also sees those tokens. None: no earlier token.
        output_final_state: also return the state after the last key, so that a chunked
            prefill can be followed by recurrent decoding (as flash-linear-attention's
            functions return ``(o, final_state)``).

    Returns:
        (..., t_q, d_v), or (output, final_state) with ``output_final_state``. Half-precision
        inputs are computed in float32 and the output rounded once; the state stays float32.
        A query whose normalizer is 0 (no key, t_k = 0, or features that are 0 against every
        key) gets a row of 0, as torch's SDPA gives a row that sees no key.

    Raises:
        ValueError: if query, key and value do not agree (dtype, device, leading dimensions,
            widths), is_causal has t_q != t_k or is not a bool, form or feature_map is unknown,
            a feature is negative, chunk_size is not an integer >= 1, scale is not None or a
            finite number, output_final_state is not a bool, or initial_state has another
            shape than (..., r, d_v + 1), is not floating point or is not on the value's
            device.
        TypeError: flash-attn's keywords and older names (``causal``, ``softmax_scale``,
            ``window_size``, ``causal_alignment``), with the keyword this function takes.

    Examples:
        >>> _ = torch.manual_seed(0)
        >>> q, k, v = torch.randn(3, 1, 8, 4).unbind(0)  # (b, t, d_k) each
        >>> z = linear_attention(q, k, v, is_causal=True)
        >>> z_prefill, state = linear_attention(
        ...     q[:, :6], k[:, :6], v[:, :6], is_causal=True, form="chunked", chunk_size=4,
        ...     output_final_state=True)  # a prefill of 6 tokens, and the state after them
        >>> z_next = linear_attention(q[:, 6:], k[:, 6:], v[:, 6:], is_causal=True,
        ...                           form="recurrent", initial_state=state)
        >>> torch.allclose(torch.cat([z_prefill, z_next], dim=1), z, atol=1e-6), state.shape
        (True, torch.Size([1, 4, 5]))
    """
    scale = check_scale(scale)
    check_linear_inputs(query, key, value, is_causal, form, chunk_size)
    check_flags(output_final_state=output_final_state)
    if scale is not None:  # after the cast: a half query times the scale could overflow
        query = query.to(accumulation_dtype(query.dtype)) * scale
    phi_q, phi_k = feature_pair(query, key, feature_map)  # (..., t_q, r), (..., t_k, r)
    width = (*query.shape[:-2], phi_k.shape[-1], value.shape[-1] + 1)
    if initial_state is not None and (
        not isinstance(initial_state, Tensor) or tuple(initial_state.shape) != width
    ):
        got = tuple(initial_state.shape) if isinstance(initial_state, Tensor) else initial_state
        raise ValueError(f"initial_state must have shape (..., r, d_v + 1) = {width}, got {got}")
    if initial_state is not None and (
        not initial_state.is_floating_point() or initial_state.device != value.device
    ):  # an integer state would be cast silently
        raise ValueError(
            f"initial_state must be floating point on the value's device {value.device}, got "
            f"{initial_state.dtype} on {initial_state.device}"
        )
    out, final = kernel_attention(
        phi_q, phi_k, value, is_causal, form, chunk_size, initial_state, output_final_state
    )
    out = out.to(value.dtype)
    return (out, cast(Tensor, final)) if output_final_state else out  # final: asked for above


@attention_kernel
def linear_attention_weights(
    query: Tensor, key: Tensor, *, feature_map: FeatureMapName | FeatureMap = "elu+1",
    is_causal: bool = False,
) -> Tensor:
    """The weights linear attention gives each value: (..., t_q, t_k), rows summing to 1.

    alpha_ij = phi(q_i).phi(k_j) / sum_j' phi(q_i).phi(k_j') over the visible keys; the parallel
    form's output is these weights times V. A row whose sum is 0 is 0, as in
    :func:`linear_attention`.

    Args:
        query: (..., t_q, d_k).
        key: (..., t_k, d_k), the query's dtype and leading dimensions.
        feature_map: ``"elu+1"`` or a callable, as in :func:`linear_attention`.
        is_causal: query i sees keys j <= i only (needs t_q = t_k).

    Returns:
        The weights (..., t_q, t_k), rows summing to 1 or, where no key has a weight, to 0.

    Raises:
        ValueError: as :func:`linear_attention`, an is_causal that is not a bool among them.
        TypeError: flash-attn's keywords and older names (``causal``, ``softmax_scale``,
            ``window_size``, ``causal_alignment``), with the keyword this function takes.

    Examples:
        >>> q = torch.zeros(1, 3, 2)  # phi(0) = 1: every visible key weighs the same
        >>> linear_attention_weights(q, q, is_causal=True)
        tensor([[[1.0000, 0.0000, 0.0000],
                 [0.5000, 0.5000, 0.0000],
                 [0.3333, 0.3333, 0.3333]]])
    """
    check_linear_inputs(query, key, key, is_causal, "parallel", 1)
    phi_q, phi_k = feature_pair(query, key, feature_map)  # (..., t_q, r), (..., t_k, r)
    kernel = phi_q @ phi_k.transpose(-2, -1)  # (..., t_q, t_k)
    kernel = kernel.tril() if is_causal else kernel
    return divide_rows(kernel, kernel.sum(dim=-1, keepdim=True)).to(query.dtype)  # a sum of 0: zeros


@renamed(causal="is_causal")
def linear_attention_flops(
    t: int, r: int, d_v: int, form: Form, *, is_causal: bool = False, chunk_size: int = 64
) -> int:
    """FLOPs of the matrix products of one (batch, head) of :func:`linear_attention`.

    An (a, b) @ (b, c) product counts 2 a b c; values carry the normalizer's column, so d_v + 1.
    parallel: 2 t^2 (r + d_v + 1), the whole t x t product then masked. recurrent, causal: 4 t r
    (d_v + 1), one outer product and one read per token. chunked, causal: 4 t r (d_v + 1) plus
    2 t C (r + d_v + 1) within the chunks (C = chunk_size, a last shorter chunk counted as it is).
    recurrent and chunked without a mask: 4 t r (d_v + 1), one state of all keys.

    Args:
        t: number of tokens.
        r: width of the features.
        d_v: width of the values.
        form: ``"parallel"``, ``"recurrent"`` or ``"chunked"``.
        is_causal: causal attention.
        chunk_size: C, tokens per chunk of the chunked form.

    Returns:
        The FLOPs.

    Raises:
        ValueError: if a size is not an integer >= 1, form is unknown, or is_causal is not a
            bool.
        TypeError: flash-attn's keyword ``causal``, naming the one this function takes.

    Examples:
        >>> [linear_attention_flops(4096, 64, 64, form, is_causal=True)
        ...  for form in ("parallel", "recurrent", "chunked")]
        [4328521728, 68157440, 135790592]
    """
    # as Python ints: NumPy's np.int32 would wrap around
    t, r, d_v, chunk_size = check_sizes(t=t, r=r, d_v=d_v, chunk_size=chunk_size)
    if form not in FORMS:
        raise ValueError(f"form must be one of {FORMS}, got {form!r}")
    check_flags(is_causal=is_causal)
    w = d_v + 1
    if form == "parallel":
        return 2 * t * t * (r + w)
    if form == "recurrent" or not is_causal:
        return 4 * t * r * w
    sizes = [min(chunk_size, t - start) for start in range(0, t, chunk_size)]
    return 4 * t * r * w + sum(2 * c * c * (r + w) for c in sizes)
