"""Where is each token? Absolute, rotary and linear-bias position information.

Notation (see CONTRIBUTING.md):
    b      batch size (any number of leading dimensions is written ``...``)
    t      number of tokens (t_q queries, t_k keys)
    d      width of a token vector (``d_model``); p a position, counted from 0
    h      number of heads, d_h width of one head (queries and keys are rotated per head)
    d_rot  width of the rotated part of a head (``rotary_dim``, d_rot <= d_h)

Four ways to tell attention where a token is:

    sinusoidal_positions   PE[p, 2i] = sin(p θ_i), PE[p, 2i+1] = cos(p θ_i),
                           θ_i = 10000^(-2i/d), added to the token embeddings (Vaswani et al.)
    LearnedPositions       one trained vector per position, added to the embeddings (GPT-2)
    RotaryEmbedding        rotate each pair of query/key features by the angle p θ_i,
                           θ_i = base^(-2i/d_rot), the first d_rot features of each head
                           (all by default) (Su et al., RoFormer); scaled by the rules of
                           :mod:`attention.rope_scaling` to read longer sequences
    alibi_bias             add -m_η (i - j) to the score of query i against key j, one slope m_η
                           per head η (Press et al., ALiBi)

The tables are computed in float64 and returned in torch's default dtype (float32 unless changed).
"""

import math
from collections.abc import Callable
from typing import Self, cast

import torch
from torch import Tensor, nn
from torch.types import Device

from ._checks import check_context_length, check_counts, check_flags, check_input, check_number, check_sizes
from .rope_scaling import DynamicNTKScaling, RopeScaling, rope_frequencies

__all__ = [
    "LearnedPositions",
    "RotaryEmbedding",
    "alibi_bias",
    "alibi_slopes",
    "rotary_permutation",
    "sinusoidal_positions",
]


def _check_even(name: str, value: int) -> None:
    """Require an even width: features are rotated or paired two by two."""
    if value % 2 != 0:
        raise ValueError(f"{name} must be even (features come in pairs), got {value}")


def _check_start(start: int) -> None:
    """Require a first position that is an integer >= 0."""
    check_counts(start=start)


def _table_dtype(dtype: torch.dtype | None) -> torch.dtype:
    """The dtype of a table computed in float64: torch's default for None, else a float one."""
    if dtype is None:
        return torch.get_default_dtype()
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating-point dtype, got {dtype!r}")
    return dtype


def sinusoidal_positions(t: int, d: int, dtype: torch.dtype | None = None) -> Tensor:
    """The sinusoidal position table of Vaswani et al. (2017), shape (t, d).

    Row p is the position vector of token p (p = 0 .. t-1): PE[p, 2i] = sin(p / 10000^(2i/d))
    and PE[p, 2i+1] = cos(p / 10000^(2i/d)). Any t works: the table has no parameters and no
    longest length.

    Args:
        t: number of positions, the rows of the table.
        d: width of a position vector; even.
        dtype: dtype of the table, rounded once from float64 (torch's default if None).

    Returns:
        PE (t, d): sin, cos, sin, cos, ... along each row.

    Raises:
        ValueError: if t or d is not an integer >= 1, d is odd, or dtype is not a floating-point
            dtype.

    Examples:
        >>> sinusoidal_positions(3, 4)
        tensor([[ 0.0000,  1.0000,  0.0000,  1.0000],
                [ 0.8415,  0.5403,  0.0100,  0.9999],
                [ 0.9093, -0.4161,  0.0200,  0.9998]])
    """
    check_sizes(t=t, d=d)
    _check_even("d", d)
    dtype = _table_dtype(dtype)
    positions = torch.arange(t, dtype=torch.float64)  # (t,)
    angles = positions[:, None] * rope_frequencies(d, 10000.0)  # (t, d/2)
    table = torch.stack([angles.sin(), angles.cos()], dim=-1)  # (t, d/2, 2)
    return table.reshape(t, d).to(dtype)  # (t, d): sin, cos, sin, cos, ...


class LearnedPositions(nn.Module):
    """Learned absolute positions, as in GPT-2: an ``nn.Embedding`` of positions.

    ``forward(x, start=0)`` returns x + P[start : start + t] for tokens x (b, t, d), P the
    (context_length, d) table: the vectors of positions start .. start + t - 1 are added to the
    token embeddings. A position past ``context_length - 1`` has no vector to look up: a
    ValueError.

    Args:
        context_length: number of positions with a trainable vector.
        d: width of each vector (the embedding width).
        device: where the table is created (torch's default when None).
        dtype: its dtype (torch's default when None).

    Raises:
        ValueError: if context_length or d is not an integer >= 1.

    Examples:
        >>> positions = LearnedPositions(context_length=8, d=4)
        >>> positions(torch.zeros(2, 5, 4)).shape
        torch.Size([2, 5, 4])
    """

    def __init__(
        self, context_length: int, d: int, *, device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        """One trainable vector of width ``d`` for each of ``context_length`` positions."""
        super().__init__()
        check_sizes(context_length=context_length, d=d)
        self.context_length = context_length
        self.d = d
        self.embedding = nn.Embedding(context_length, d, device=device, dtype=dtype)  # (t_max, d)

    def forward(self, x: Tensor, start: int = 0) -> Tensor:
        """x (b, t, d) plus the vectors of positions start .. start + t - 1: shape (b, t, d).

        Raises:
            ValueError: if x is not (b, t, d), start is not an integer >= 0, or start + t exceeds
                context_length.
        """
        check_input(x, self.d, ranks=(3,), width_name="d")
        _check_start(start)
        check_context_length(start + x.shape[1], self.context_length)
        positions = torch.arange(start, start + x.shape[1], device=x.device)  # (t,)
        return x + self.embedding(positions)  # (b, t, d) + (t, d)


def rotary_permutation(d_h: int) -> Tensor:
    """The feature order that turns interleaved pairs into halves: shape (d_h,).

    ``perm = [0, 2, 4, ..., d_h-2, 1, 3, ..., d_h-1]`` sends feature 2i to place i and feature
    2i+1 to place i + d_h/2, so that the interleaved pair (2i, 2i+1) becomes the halves pair
    (i, i + d_h/2). Hence, for any x (..., t, d_h),

        RotaryEmbedding(d_h, interleaved=False)(x[..., perm])
            == RotaryEmbedding(d_h, interleaved=True)(x)[..., perm]

    and, since a dot product does not change when both vectors are permuted alike, permuting
    the query and key output features of each head (the rows of W_q and W_k in ``nn.Linear``)
    turns a model trained with one pairing into the same model with the other.

    Args:
        d_h: width of a head; even.

    Returns:
        perm (d_h,), a permutation of 0 .. d_h - 1 (int64).

    Raises:
        ValueError: if d_h is not an integer >= 1, or is odd.

    Examples:
        >>> rotary_permutation(6)
        tensor([0, 2, 4, 1, 3, 5])
    """
    check_sizes(d_h=d_h)
    _check_even("d_h", d_h)
    return torch.cat([torch.arange(0, d_h, 2), torch.arange(1, d_h, 2)])  # (d_h,)


class RotaryEmbedding(nn.Module):
    """Rotary position embedding (RoPE, Su et al.), applied to queries or keys of width d_h.

    Feature pair i of the token at position p is rotated by the angle p θ_i, with
    θ_i = base^(-2i/d_rot), i = 0 .. d_rot/2 - 1:

        (x_a, x_b) -> (x_a cos(p θ_i) - x_b sin(p θ_i),  x_a sin(p θ_i) + x_b cos(p θ_i))

    Only the first ``rotary_dim`` = d_rot features are rotated (all d_h by default); the others
    pass through unchanged, as in GPT-NeoX (``rotary_pct``) and GPT-J (``rotary_dim``). The
    frequencies are those of a head of width d_rot, not d_h. ``interleaved=True`` pairs features
    (2i, 2i+1), as in the RoFormer paper, Meta's Llama code and GPT-J; ``interleaved=False``
    (the default) pairs (i, i + d_rot/2), the two halves of the rotated part, as in GPT-NeoX and
    Hugging Face's Llama. The two are the same up to a permutation of the features
    (:func:`rotary_permutation`).

    ``scaling``, one of the rules of :mod:`attention.rope_scaling`, replaces the θ_i to stretch
    the model past its training length; :class:`~attention.rope_scaling.YaRNScaling` also
    multiplies the rotated features (or all d_h, with ``scaled_features="head"``) by its
    ``attention_factor`` sqrt(1/τ). The module has no parameters; ``frequencies`` holds the θ_i
    used, in float64: a buffer that follows ``.to(device)`` (and ``to_empty``, recomputed), stays
    float64 under ``.to(dtype)`` and is not saved in the state dict (``persistent=False``). With
    :class:`~attention.rope_scaling.DynamicNTKScaling` they depend on the length:
    ``forward(x, start)`` rotates with those of length start + t (``frequencies`` holds those of
    the training length), so keys rotated at another length do not match.

    Args:
        d_h: width of a head (of the queries and keys it rotates); even.
        base: the base of θ_i, > 1.
        interleaved: pair features (2i, 2i+1) instead of (i, i + d_rot/2).
        rotary_dim: d_rot, the number of leading features rotated; even, at most d_h (all of them
            by default).
        scaling: a rule that stretches the frequencies (None: plain RoPE).
        device: where the frequencies are kept.

    Raises:
        ValueError: if d_h or rotary_dim is not an even integer >= 1, rotary_dim > d_h, base is
            not a finite number > 1, interleaved is not a bool, or scaling is not a rule of
            :mod:`attention.rope_scaling`.

    Examples:
        >>> rope = RotaryEmbedding(d_h=4)
        >>> rope(torch.ones(1, 3, 4))  # position 0 is not rotated
        tensor([[[ 1.0000,  1.0000,  1.0000,  1.0000],
                 [-0.3012,  0.9900,  1.3818,  1.0099],
                 [-1.3254,  0.9798,  0.4932,  1.0198]]])
    """

    frequencies: Tensor

    def __init__(
        self,
        d_h: int,
        base: float = 10000.0,
        interleaved: bool = False,
        *,
        rotary_dim: int | None = None,
        scaling: RopeScaling | None = None,
        device: Device = None,
    ) -> None:
        super().__init__()
        check_sizes(d_h=d_h)
        _check_even("d_h", d_h)
        base = check_number("base", base, 1.0, inclusive=False)  # 1 turns nothing
        check_flags(interleaved=interleaved)
        rotary_dim = d_h if rotary_dim is None else rotary_dim
        check_sizes(rotary_dim=rotary_dim)
        _check_even("rotary_dim", rotary_dim)
        if rotary_dim > d_h:
            raise ValueError(f"rotary_dim must be at most d_h={d_h}, got {rotary_dim}")
        if scaling is not None and not isinstance(scaling, RopeScaling):
            raise ValueError(
                f"scaling must be None or one of PositionInterpolation, NTKAwareScaling, "
                f"YaRNScaling, Llama3Scaling, DynamicNTKScaling, got {scaling!r}"
            )
        self.d_h, self.rotary_dim = d_h, rotary_dim
        self.base = base
        self.interleaved = interleaved
        self.scaling = scaling
        self.register_buffer("frequencies", self._frequencies(device), persistent=False)
        # YaRNScaling replaces an attention_factor of None by the paper's value when it is made
        self.attention_factor = 1.0 if scaling is None else cast(float, scaling.attention_factor)

    def _frequencies(self, device: Device) -> Tensor:
        """θ_i (d_rot/2,) in float64 on ``device``, from the base and the scaling rule."""
        if self.scaling is None:
            theta = rope_frequencies(self.rotary_dim, self.base)  # (d_rot/2,) float64
        else:
            theta = self.scaling.frequencies(self.rotary_dim, self.base)  # (d_rot/2,) float64
        return theta.to(device)

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> Self:
        """Every move of the module (``.to``, ``.cuda``, ``to_empty``) moves the frequencies, but
        a cast to float16 would round θ_i: they are recomputed in float64 on the new device."""
        super()._apply(fn, recurse)  # type: ignore[no-untyped-call]  # torch leaves it untyped
        self.frequencies = self._frequencies(self.frequencies.device)
        return self

    def forward(self, x: Tensor, start: int = 0, *, attention_factor: bool = True) -> Tensor:
        """x (..., t, d_h) with token i rotated by its position start + i: shape (..., t, d_h).

        With ``attention_factor=False`` the turn is a pure rotation, without YaRN's attention
        factor (a softmax temperature), as features that no softmax reads need it.

        Raises:
            ValueError: if x is not (..., t, d_h), start is not an integer >= 0, or
                attention_factor is not a bool.
        """
        self._check(x)
        _check_start(start)
        check_flags(attention_factor=attention_factor)
        frequencies = self.frequencies  # (d_rot/2,) float64
        if isinstance(self.scaling, DynamicNTKScaling):  # s follows the length read so far
            frequencies = self.scaling.frequencies(self.rotary_dim, self.base, start + x.shape[-2])
        positions = torch.arange(start, start + x.shape[-2], dtype=torch.float64)  # (t,)
        return self._rotate(x, positions, frequencies, self.attention_factor if attention_factor else 1.0)

    def shift(self, x: Tensor, offset: int) -> Tensor:
        """Already rotated x (..., t, d_h), every token turned by ``offset`` positions more.

        R_p R_δ = R_(p+δ): a key rotated at position p becomes the key rotated at p + δ.

        A pure rotation, without YaRN's attention factor, which x already carries. Refused under
        dynamic scaling, whose frequencies depend on the length: rotate unrotated keys instead.

        Raises:
            ValueError: if x is not (..., t, d_h), offset is not an integer >= 0, or the scaling is
                dynamic.
        """
        self._check(x)
        _check_start(offset)
        if isinstance(self.scaling, DynamicNTKScaling):
            raise ValueError(
                "shift needs fixed frequencies; with DynamicNTKScaling they change with the length "
                "(rotate the unrotated keys by their positions instead)"
            )
        positions = torch.full((x.shape[-2],), float(offset), dtype=torch.float64)  # (t,)
        return self._rotate(x, positions, self.frequencies, 1.0)

    def _check(self, x: Tensor) -> None:
        """Require a floating-point x of shape (..., t, d_h): cos and sin take x's dtype."""
        if not isinstance(x, Tensor) or not x.is_floating_point():
            got = x.dtype if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"x must be a floating-point tensor, got {got}")
        if x.dim() < 2 or x.shape[-1] != self.d_h:
            raise ValueError(
                f"x must have shape (..., t, d_h) with d_h={self.d_h}, got shape {tuple(x.shape)}"
            )

    def _rotate(self, x: Tensor, positions: Tensor, frequencies: Tensor, factor: float) -> Tensor:
        """Token i of x (..., t, d_h) turned by positions[i] θ, its rotated part times factor."""
        half = self.rotary_dim // 2
        angles = positions.to(x.device)[:, None] * frequencies.to(x.device)  # (t, d_rot/2)
        # YaRN's temperature, as deployed code applies it: cos and sin times sqrt(1/τ), so only
        # the rotated features are scaled (scaled_features="head" scales the rest below)
        cos = (angles.cos() * factor).to(x.dtype)  # (t, d_rot/2)
        sin = (angles.sin() * factor).to(x.dtype)  # (t, d_rot/2)
        rotated, passed = x[..., : self.rotary_dim], x[..., self.rotary_dim :]  # d_rot, d_h - d_rot
        if self.interleaved:
            x_a, x_b = rotated[..., 0::2], rotated[..., 1::2]  # (..., t, d_rot/2) each
        else:
            x_a, x_b = rotated[..., :half], rotated[..., half:]  # (..., t, d_rot/2) each
        rot_a = x_a * cos - x_b * sin  # (..., t, d_rot/2)
        rot_b = x_a * sin + x_b * cos  # (..., t, d_rot/2)
        if self.interleaved:
            rotated = torch.stack([rot_a, rot_b], dim=-1).flatten(-2)  # (..., t, d_rot)
        else:
            rotated = torch.cat([rot_a, rot_b], dim=-1)  # (..., t, d_rot)
        if factor != 1.0 and self.scaled_dim > self.rotary_dim:
            passed = passed * factor  # every feature scaled: the whole score divided by τ
        return torch.cat([rotated, passed], dim=-1)  # (..., t, d_h)

    @property
    def scaled_dim(self) -> int:
        """The leading features that the attention factor multiplies: the rotated d_rot, or all
        d_h with ``scaled_features="head"``."""
        head = getattr(self.scaling, "scaled_features", "rotated") == "head"
        return self.d_h if head else self.rotary_dim

    def extra_repr(self) -> str:
        """The settings, shown when the module is printed."""
        parts = [f"d_h={self.d_h}", f"base={self.base:g}", f"interleaved={self.interleaved}"]
        if self.rotary_dim != self.d_h:
            parts.append(f"rotary_dim={self.rotary_dim}")
        if self.scaling is not None:
            parts.append(f"scaling={self.scaling}")
        return ", ".join(parts)


def check_rotary(rotary: object, d_h: int, what: str = "heads") -> None:
    """Require None or a :class:`RotaryEmbedding` that rotates ``what`` of width d_h (a layer's
    ``rotary`` argument)."""
    if rotary is None:
        return
    if not isinstance(rotary, RotaryEmbedding):
        raise ValueError(f"rotary must be a RotaryEmbedding or None, got {type(rotary).__name__}")
    if rotary.d_h != d_h:
        raise ValueError(f"rotary must rotate {what} of width d_h={d_h}, got d_h={rotary.d_h}")


def _rotation(rotary: RotaryEmbedding | None) -> str:
    """What decides how ``rotary`` turns a key, as a message shows it."""
    if rotary is None:
        return "no rotary"
    return (f"RotaryEmbedding(d_h={rotary.d_h}, base={rotary.base:g}, interleaved="
            f"{rotary.interleaved}, rotary_dim={rotary.rotary_dim}, scaling={rotary.scaling!r})")


def check_cache_rotary(cache: object, rotary: RotaryEmbedding | None) -> None:
    """Require a cache that turns the keys it holds (a StreamingKVCache, whose ``rotary`` turns
    its sinks further) to turn them as the layer's ``rotary`` did, or not at all without one: a
    cache with another rotation turned the sinks by angles of another rule, and a layer's
    scores came out wrong without an error. Other caches have no ``rotary`` and pass."""
    if not hasattr(cache, "rotary"):
        return
    theirs, ours = _rotation(cache.rotary), _rotation(rotary)
    if theirs != ours:
        raise ValueError(f"cache.rotary must rotate keys as the layer's rotary does ({ours}), "
                         f"got {theirs}")


def alibi_slopes(num_heads: int) -> Tensor:
    """The ALiBi slope m_η of each head η = 1 .. h (Press et al., 2022): shape (h,).

    For h a power of two the slopes are the geometric sequence that starts at 2^(-8/h) with
    that ratio: 2^(-8/h), 2^(-16/h), ..., 2^(-8) (for 8 heads 1/2, 1/4, ..., 1/256). Otherwise,
    as in the authors' code: the h' slopes of the largest power of two h' < h, followed by the
    first h - h' of the odd-numbered slopes (1st, 3rd, 5th, ...) of the sequence for 2h' heads.
    For 12 heads: 1/2, ..., 1/256, then 2^(-0.5), 2^(-1.5), 2^(-2.5), 2^(-3.5).

    Args:
        num_heads: h, the number of heads.

    Returns:
        The slopes (h,) in torch's default dtype.

    Raises:
        ValueError: if num_heads is not an integer >= 1.

    Examples:
        >>> alibi_slopes(4)
        tensor([0.2500, 0.0625, 0.0156, 0.0039])
    """
    return alibi_slopes64(num_heads).to(torch.get_default_dtype())  # (h,)


def alibi_slopes64(num_heads: int) -> Tensor:
    """:func:`alibi_slopes` in float64 (shared with :mod:`attention.masks`)."""
    check_sizes(num_heads=num_heads)

    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * k / n) for k in range(1, n + 1)]

    lower = 2 ** int(math.floor(math.log2(num_heads)))  # largest power of two <= h
    slopes = power_of_two(lower) + power_of_two(2 * lower)[0::2][: num_heads - lower]
    return torch.tensor(slopes, dtype=torch.float64)  # (h,)


def alibi_bias(num_heads: int, t_q: int, t_k: int, dtype: torch.dtype | None = None) -> Tensor:
    """ALiBi's additive bias -m_η (i - j) of query i against key j, shape (h, t_q, t_k).

    Positions are aligned bottom-right, as when a model decodes with a cache of keys: the last
    query and the last key share a position, so query i (0 .. t_q-1) sits at t_k - t_q + i
    and t_q must be at most t_k. With t_q = t_k, query i is at position i. Keys after their
    query (j > i) get a positive bias: ALiBi is meant for causal attention, whose mask hides
    them. (The package's :func:`~attention.causal_mask` aligns top-left, so for t_q < t_k use
    a bottom-right mask with this bias.)

    Args:
        num_heads: h, the number of heads (one slope each, :func:`alibi_slopes`).
        t_q: number of queries, the last t_q positions.
        t_k: number of keys.
        dtype: dtype of the bias, rounded once from float64 (torch's default if None).

    Returns:
        The bias (h, t_q, t_k) to add to the scaled scores.

    Raises:
        ValueError: if num_heads is not an integer >= 1, t_q or t_k is not an integer >= 0,
            t_q > t_k, or dtype is not a floating-point dtype. No queries or no keys give an
            empty bias, as :func:`~attention.causal_mask` gives an empty mask.

    Examples:
        >>> alibi_bias(1, 2, 3)
        tensor([[[-0.0039,  0.0000,  0.0039],
                 [-0.0078, -0.0039,  0.0000]]])
    """
    check_sizes(num_heads=num_heads)
    check_counts(t_q=t_q, t_k=t_k)
    if t_q > t_k:
        raise ValueError(
            f"t_q must be at most t_k (queries are the last t_q positions), got t_q={t_q} "
            f"and t_k={t_k}"
        )
    dtype = _table_dtype(dtype)
    query_pos = torch.arange(t_k - t_q, t_k, dtype=torch.float64)  # (t_q,)
    key_pos = torch.arange(t_k, dtype=torch.float64)  # (t_k,)
    offset = key_pos[None, :] - query_pos[:, None]  # (t_q, t_k), j - i = -(i - j)
    slopes = alibi_slopes64(num_heads)  # (h,)
    return (slopes[:, None, None] * offset).to(dtype)  # (h, t_q, t_k)


