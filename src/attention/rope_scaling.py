"""Stretching RoPE past its training length: five rules that change its frequencies.

Notation (see CONTRIBUTING.md):
    d_rot      width of the rotated part of a head (``rotary_dim``; d_rot = d_h unless partial)
    i          a rotated pair, i = 0 .. d_rot/2 - 1, turning by θ_i = base^(-2i/d_rot) radians
               per token (``base`` is 10000 in RoFormer); its wavelength λ_i = 2π / θ_i is the
               number of tokens per full turn
    t_train    the context length the model was trained on (``original_context``)
    κ          the stretch factor (``factor``): the papers define it as the target length over
               t_train; released models set it apart from the served length (Llama 3.1: κ = 8,
               Llama 3.2 1B: κ = 32, both 8K -> 128K)
    ν_i        t_train / λ_i, the number of turns pair i makes over the training context
    τ          a softmax temperature: the scores are divided by τ

A rule replaces each θ_i by θ'_i, so that every wavelength grows by λ'_i / λ_i = θ_i / θ'_i:

    PositionInterpolation  θ'_i = θ_i / κ for every pair                    (Chen et al., 2023)
    NTKAwareScaling        the base becomes base · κ^(d_rot / (d_rot - 2)), so that
                           θ'_i = θ_i κ^(-2i / (d_rot - 2))                  (bloc97, 2023)
    YaRNScaling            θ'_i = (1 - γ(ν_i)) θ_i / κ + γ(ν_i) θ_i, with the ramp
                           γ(ν) = clamp((ν - ν_lo) / (ν_hi - ν_lo), 0, 1); and
                           the rotated features times sqrt(1/τ) = 0.1 ln κ + 1 (Peng et al., 2023)
    Llama3Scaling          the same ramp without the temperature, ν_lo and ν_hi named
                           ``low_freq_factor`` and ``high_freq_factor``      (Meta's Llama 3.1 code)
    DynamicNTKScaling      NTK-aware scaling whose factor follows the t tokens read so far:
                           κ_t = max(1, κ t / t_train - (κ - 1))             (emozilla, 2023; YaRN 3.3)
                           (emozilla is the Reddit name of Jeffrey Quesnelle, YaRN's second author)

Each rule is a frozen dataclass that checks its parameters when it is made; ``frequencies``
returns the θ'_i in float64 and ``attention_factor`` the number that multiplies the rotated
queries and keys (1 except for YaRN). Pass one to ``RotaryEmbedding(..., scaling=rule)``.
"""

import math
from dataclasses import dataclass
from numbers import Integral
from typing import Literal, get_args

import torch
from torch import Tensor

from ._checks import check_counts, check_flags, check_number, check_sizes

__all__ = [
    "DynamicNTKScaling",
    "Llama3Scaling",
    "NTKAwareScaling",
    "PositionInterpolation",
    "RopeScaling",
    "YaRNScaling",
    "rope_frequencies",
]


def rope_frequencies(rotary_dim: int, base: float) -> Tensor:
    """RoPE's θ_i = base^(-2i/d_rot), i = 0 .. d_rot/2 - 1: shape (rotary_dim/2,), float64.

    Args:
        rotary_dim: d_rot, the width of the rotated part of a head; even.
        base: the base of the frequencies (10000 in RoFormer).

    Returns:
        θ (rotary_dim/2,) in float64, from 1 down.

    Raises:
        ValueError: if rotary_dim is not an even integer >= 2 or base not a finite number > 1.

    Examples:
        >>> rope_frequencies(4, 10000.0)
        tensor([1.0000, 0.0100], dtype=torch.float64)
    """
    check_sizes(rotary_dim=rotary_dim)
    if rotary_dim % 2:  # θ_i turns the pair (2i, 2i + 1)
        raise ValueError(f"rotary_dim must be even, got {rotary_dim}")
    base = check_number("base", base, 1.0, inclusive=False)  # 1 turns nothing; below 1, the wrong way
    even = torch.arange(0, rotary_dim, 2, dtype=torch.float64)  # (d_rot/2,): 2i
    return base ** (-even / rotary_dim)  # (d_rot/2,)


def _context(value: object) -> int:
    """``value`` as an int if it is an integer >= 1 (a Python or NumPy one): a number of tokens."""
    if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
        raise ValueError(f"original_context must be an integer >= 1 (tokens), got {value!r}")
    return int(value)


def _ramp_frequencies(
    theta: Tensor, factor: float, original_context: int, low: float, high: float
) -> Tensor:
    """θ'_i = (1 - γ(ν_i)) θ_i / κ + γ(ν_i) θ_i with ν_i = t_train θ_i / (2π): (d_rot/2,)."""
    turns = original_context * theta / (2 * math.pi)  # (d_rot/2,): ν_i = t_train / λ_i
    ramp = ((turns - low) / (high - low)).clamp(0.0, 1.0)  # (d_rot/2,): γ(ν_i)
    return (1 - ramp) * theta / factor + ramp * theta  # (d_rot/2,)


def _check_ramp(rule: object, low: str, high: str, unit: str = "") -> None:
    """Check the ramp's bounds, the fields ``low`` and ``high`` of ``rule``: 0 < ν_lo < ν_hi."""
    lo = check_number(low, getattr(rule, low), 0.0, inclusive=False)
    hi = check_number(high, getattr(rule, high), 0.0, inclusive=False)
    if not lo < hi:
        raise ValueError(f"{low} must be less than {high}{unit}, got {low}={lo:g} and {high}={hi:g}")
    object.__setattr__(rule, low, lo)
    object.__setattr__(rule, high, hi)


@dataclass(frozen=True)
class _Stretch:
    """What every rule but YaRN shares: the stretch κ, checked, and queries and keys unscaled."""

    factor: float

    def __post_init__(self) -> None:
        """Check that the factor stretches (κ >= 1)."""
        object.__setattr__(self, "factor", check_number("factor", self.factor, 1.0))

    @property
    def attention_factor(self) -> float:
        """Queries and keys are not rescaled: 1."""
        return 1.0


@dataclass(frozen=True)
class PositionInterpolation(_Stretch):
    """Position interpolation (Chen et al., 2023): every frequency divided by ``factor``.

    Rotating token p by p (θ_i / κ) rotates it as if it sat at position p / κ: the positions
    0 .. κ t_train are squeezed into the range 0 .. t_train that training saw. Every wavelength
    grows by κ, the shortest ones too, so neighbors end up κ times closer in angle than in
    training.

    Args:
        factor: κ >= 1, the stretch.

    Raises:
        ValueError: if factor is not a finite number >= 1.

    Examples:
        >>> PositionInterpolation(factor=4.0).frequencies(4, 10000.0)
        tensor([0.2500, 0.0025], dtype=torch.float64)
    """

    def frequencies(self, rotary_dim: int, base: float) -> Tensor:
        """θ'_i = θ_i / κ: shape (rotary_dim/2,), float64."""
        return rope_frequencies(rotary_dim, base) / self.factor  # (d_rot/2,)


@dataclass(frozen=True)
class NTKAwareScaling(_Stretch):
    """NTK-aware scaling (bloc97, 2023, later formalized in YaRN, Peng et al., 2023): a larger base.

    The base becomes base' = base · κ^(d_rot / (d_rot - 2)), chosen so that the last pair's
    frequency base'^(-(d_rot-2)/d_rot) is exactly its old one divided by κ, while pair 0
    (θ_0 = 1) does not change. In between, θ'_i = θ_i κ^(-2i/(d_rot-2)): the stretch grows
    geometrically with i. Needs at least two pairs (rotary_dim >= 4).

    Args:
        factor: κ >= 1, the stretch.

    Raises:
        ValueError: if factor is not a finite number >= 1 (and, from ``frequencies``, if
            rotary_dim < 4).

    Examples:
        >>> NTKAwareScaling(factor=4.0).frequencies(4, 10000.0)
        tensor([1.0000, 0.0025], dtype=torch.float64)
    """

    def base(self, rotary_dim: int, base: float) -> float:
        """The new base, base · κ^(d_rot / (d_rot - 2)).

        Raises:
            ValueError: if rotary_dim is below 4.
        """
        if rotary_dim < 4:
            raise ValueError(
                f"NTK-aware scaling needs rotary_dim >= 4 (two pairs: one kept, one "
                f"stretched by the factor), got {rotary_dim}"
            )
        return base * self.factor ** (rotary_dim / (rotary_dim - 2))

    def frequencies(self, rotary_dim: int, base: float) -> Tensor:
        """θ'_i = base'^(-2i/d_rot), base' the new base: shape (rotary_dim/2,), float64."""
        return rope_frequencies(rotary_dim, self.base(rotary_dim, base))  # (d_rot/2,)


ScaledFeatures = Literal["rotated", "head"]  # the features YaRN's temperature multiplies
SCALED_FEATURES: tuple[ScaledFeatures, ...] = get_args(ScaledFeatures)
Ramp = Literal["turns", "index"]  # linear in ν_i (the paper's) or in the pair index (the code's)
RAMPS: tuple[Ramp, ...] = get_args(Ramp)


@dataclass(frozen=True)
class YaRNScaling:
    """YaRN (Peng et al., 2023): "NTK-by-parts" frequencies and an attention temperature.

    Pair i turns ν_i = t_train / λ_i times over the training context (the paper's r). Pairs with
    ν_i < ν_lo (``beta_slow``, the paper's α) are interpolated by κ as in
    :class:`PositionInterpolation`; pairs with ν_i > ν_hi (``beta_fast``, the paper's β) keep
    their frequency; in between the frequency moves linearly in ν_i from one to the other (the
    paper's equations for γ and h, section 3.2). Defaults are the paper's values for Llama:
    ν_lo = 1, ν_hi = 32.

    The scores are divided by a temperature τ with sqrt(1/τ) = 0.1 ln κ + 1 (section 3.4), which
    :class:`~attention.RotaryEmbedding` applies by multiplying queries and keys by sqrt(1/τ)
    (``attention_factor``; pass ``attention_factor`` to choose another value, 1.0 to turn it off).
    ``scaled_features`` says which features: "rotated" (the default) multiplies the rotated
    d_rot only, as the authors' code, Hugging Face's and vLLM's do by scaling cos and sin;
    "head" multiplies all d_h, so that the whole score is divided by τ. The two differ only when
    rotary_dim < d_h.

    The authors' code, and Hugging Face's, ramp linearly over the pair index i between rounded
    boundaries instead of linearly in ν_i: their frequencies differ in the ramp (exercise 8.6).
    ``ramp="index"`` computes theirs: the pair i_lo whose ν is ν_hi, floored, and the pair i_hi
    whose ν is ν_lo, ceiled (unless ``truncate=False``), clipped to [0, d_rot - 1], and
    γ_i = 1 - clamp((i - i_lo) / (i_hi - i_lo), 0, 1). Checkpoints trained with this ramp need it:
    those fine-tuned with the authors' or Hugging Face's code, and models whose own code computes
    it, such as DeepSeek-V3 and gpt-oss (whose code keeps the boundaries real: ``truncate=False``).

    Args:
        factor: κ >= 1, the stretch.
        original_context: t_train, the context length the model was trained on.
        beta_fast: ν_hi > 0: pairs turning more often than this keep their frequency.
        beta_slow: ν_lo, 0 < ν_lo < ν_hi: pairs turning less often are interpolated by κ.
        attention_factor: sqrt(1/τ) > 0; None takes the paper's 0.1 ln κ + 1.
        scaled_features: ``"rotated"`` or ``"head"``, the features sqrt(1/τ) multiplies.
        ramp: ``"turns"`` (linear in ν_i, the paper's) or ``"index"`` (the authors' code).
        truncate: with ``ramp="index"``, floor and ceil the boundary pairs (False keeps them real).

    Raises:
        ValueError: if a number is out of its range, original_context is not an integer >= 1,
            beta_slow >= beta_fast, or truncate is not a bool.

    Examples:
        >>> yarn = YaRNScaling(factor=4.0, original_context=64)
        >>> round(yarn.attention_factor, 4)
        1.1386
    """

    factor: float
    original_context: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float | None = None
    scaled_features: ScaledFeatures = "rotated"
    ramp: Ramp = "turns"
    truncate: bool = True

    def __post_init__(self) -> None:
        """Check every parameter; fill in the paper's temperature if none is given."""
        if self.scaled_features not in SCALED_FEATURES:
            raise ValueError(
                f"scaled_features must be 'rotated' or 'head', got {self.scaled_features!r}"
            )
        if self.ramp not in RAMPS:
            raise ValueError(f"ramp must be 'turns' or 'index', got {self.ramp!r}")
        check_flags(truncate=self.truncate)  # with either ramp, though only "index" reads it
        factor = check_number("factor", self.factor, 1.0)
        object.__setattr__(self, "factor", factor)
        object.__setattr__(self, "original_context", _context(self.original_context))
        _check_ramp(self, "beta_slow", "beta_fast", " (turns over the training context)")
        if self.attention_factor is None:
            object.__setattr__(self, "attention_factor", 0.1 * math.log(factor) + 1.0)
        else:
            value = check_number("attention_factor", self.attention_factor, 0.0, inclusive=False)
            object.__setattr__(self, "attention_factor", value)

    def frequencies(self, rotary_dim: int, base: float) -> Tensor:
        """θ'_i = (1 - γ(ν_i)) θ_i / κ + γ(ν_i) θ_i: shape (rotary_dim/2,), float64."""
        theta = rope_frequencies(rotary_dim, base)  # (d_rot/2,)
        if self.ramp == "index":
            return self._index_ramp(theta, rotary_dim, base)
        return _ramp_frequencies(
            theta, self.factor, self.original_context, self.beta_slow, self.beta_fast
        )


    def _index_ramp(self, theta: Tensor, rotary_dim: int, base: float) -> Tensor:
        """The authors' ramp over the pair index between the pairs that turn ν_hi and ν_lo times."""

        def pair(turns: float) -> float:  # i with t_train θ_i / (2π) = turns, as a real number
            return rotary_dim * math.log(self.original_context / (turns * 2 * math.pi)) / (
                2 * math.log(base)
            )

        low, high = pair(self.beta_fast), pair(self.beta_slow)
        if self.truncate:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, rotary_dim - 1)
        if low == high:
            high += 0.001  # the authors' guard against a zero-width ramp
        index = torch.arange(rotary_dim // 2, dtype=torch.float64)  # (d_rot/2,)
        toward_interpolation = ((index - low) / (high - low)).clamp(0.0, 1.0)  # (d_rot/2,): 1 - γ_i
        return toward_interpolation * theta / self.factor + (1 - toward_interpolation) * theta


@dataclass(frozen=True)
class Llama3Scaling(_Stretch):
    """The frequency-dependent scaling of Llama 3.1 (Meta's ``apply_scaling``).

    Wavelengths shorter than t_train / ``high_freq_factor`` are kept, wavelengths longer than
    t_train / ``low_freq_factor`` are stretched by κ, and in between the frequency moves
    linearly in t_train / λ_i: YaRN's ramp with ν_lo = ``low_freq_factor`` and
    ν_hi = ``high_freq_factor``, without a temperature. The defaults are Meta's values for
    Llama 3.1: κ = 8, t_train = 8192, factors 1 and 4 (its models use base 500,000).

    Args:
        factor: κ >= 1, the stretch.
        original_context: t_train, the context length the model was trained on.
        low_freq_factor: ν_lo > 0: wavelengths longer than t_train / ν_lo are stretched by κ.
        high_freq_factor: ν_hi > ν_lo: wavelengths shorter than t_train / ν_hi are kept.

    Raises:
        ValueError: if a number is out of its range, original_context is not an integer >= 1, or
            low_freq_factor >= high_freq_factor.

    Examples:
        >>> Llama3Scaling().frequencies(4, 500000.0)
        tensor([1.0000e+00, 5.2485e-04], dtype=torch.float64)
    """

    factor: float = 8.0
    original_context: int = 8192
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0

    def __post_init__(self) -> None:
        """Check every parameter."""
        super().__post_init__()
        object.__setattr__(self, "original_context", _context(self.original_context))
        _check_ramp(self, "low_freq_factor", "high_freq_factor")

    def frequencies(self, rotary_dim: int, base: float) -> Tensor:
        """Meta's rule, written as YaRN's ramp: shape (rotary_dim/2,), float64."""
        theta = rope_frequencies(rotary_dim, base)  # (d_rot/2,)
        return _ramp_frequencies(
            theta, self.factor, self.original_context, self.low_freq_factor, self.high_freq_factor
        )


@dataclass(frozen=True)
class DynamicNTKScaling(_Stretch):
    """Dynamic NTK scaling (emozilla, 2023; Peng et al., 2023, section 3.3): factor set by length.

    Dynamic NTK scaling was first posted on Reddit by emozilla, the Reddit name of Jeffrey
    Quesnelle, YaRN's second author.

    While a sequence is no longer than t_train nothing changes; past it, the frequencies are
    those of :class:`NTKAwareScaling` with the factor κ_t = κ t / t_train - (κ - 1), t the number
    of tokens read so far (the last position plus one). This is Hugging Face's rule
    (``_compute_dynamic_ntk_parameters``); with κ = 1 it is YaRN's max(1, t / t_train) (the
    paper's s). The frequencies change with t, so every key must be rotated with those of the
    current length: a cache must hold keys before rotation, or the old keys keep the old
    frequencies.

    Args:
        factor: κ >= 1.
        original_context: t_train, the context length the model was trained on.

    Raises:
        ValueError: if factor is not a finite number >= 1 or original_context not an integer
            >= 1 (and, from ``stretch`` and ``frequencies``, if a length is not an integer >= 0).

    Examples:
        >>> rule = DynamicNTKScaling(factor=2.0, original_context=16)
        >>> rule.stretch(8), rule.stretch(32)  # nothing changes within t_train
        (1.0, 3.0)
    """

    factor: float
    original_context: int

    def __post_init__(self) -> None:
        """Check the factor (κ >= 1) and the training length."""
        super().__post_init__()
        object.__setattr__(self, "original_context", _context(self.original_context))

    def stretch(self, length: int) -> float:
        """The factor κ_t for t = ``length`` tokens: max(1, κ t / t_train - (κ - 1)).

        Raises:
            ValueError: if length is not an integer >= 0.
        """
        check_counts(length=length)  # a NumPy integer too, as every count of the package
        length = max(int(length), self.original_context)
        # κ (t - t_train) / t_train + 1, the same number without subtracting κ t / t_train and
        # κ - 1: their difference cancelled to 0 for a large κ, and κ_t = 0 was refused
        return self.factor * (length - self.original_context) / self.original_context + 1.0

    def frequencies(self, rotary_dim: int, base: float, length: int = 0) -> Tensor:
        """NTK-aware θ'_i for the factor κ_t, t = ``length``: shape (rotary_dim/2,), float64."""
        return NTKAwareScaling(self.stretch(length)).frequencies(rotary_dim, base)  # (d_rot/2,)


RopeScaling = (
    PositionInterpolation | NTKAwareScaling | YaRNScaling | Llama3Scaling | DynamicNTKScaling
)
