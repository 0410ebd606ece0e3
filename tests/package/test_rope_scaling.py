"""RoPE's scaling rules against the formulas of their sources, each written out in float64.

Position interpolation (Chen et al., 2023); the "NTK-aware" base of Peng et al., 2023, eq. 16;
YaRN's eqs. 17-22; Meta's ``apply_scaling`` for Llama 3.1. Dynamic NTK scaling and YaRN's
temperature on a partly rotated head are checked against Hugging Face's ``transformers`` itself
(its frequencies are float32, so to float32 precision).
"""

import math

import numpy as np
import pytest
import torch
from _inputs import FAST, NON_BOOLS, refuses_non_bool, seeded_randn, seeds
from _rope import rotate_pairs_by_hand
from hypothesis import given
from hypothesis import strategies as st

from attention import (
    DynamicNTKScaling,
    Llama3Scaling,
    NTKAwareScaling,
    PositionInterpolation,
    RotaryEmbedding,
    YaRNScaling,
)
from attention.rope_scaling import rope_frequencies


def _theta(d: int, base: float) -> list[float]:
    return [base ** (-2 * i / d) for i in range(d // 2)]


def _yarn_by_hand(d: int, base: float, s: float, L: int, alpha: float, beta: float) -> list[float]:
    """YaRN, section 3.2: r(d) = L / λ_d (eq. 17), the ramp γ (eq. 18), h(θ_d) (eq. 20)."""
    out = []
    for theta in _theta(d, base):
        r = L / (2 * math.pi / theta)
        gamma = 0.0 if r < alpha else 1.0 if r > beta else (r - alpha) / (beta - alpha)
        out.append((1 - gamma) * theta / s + gamma * theta)
    return out


def _llama3_by_hand(d: int, base: float, factor: float, old_context: int, low: float,
                    high: float) -> list[float]:
    """Meta's apply_scaling for Llama 3.1 (llama-models, models/llama3/model.py), one by one."""
    low_freq_wavelen, high_freq_wavelen = old_context / low, old_context / high
    out = []
    for freq in _theta(d, base):
        wavelen = 2 * math.pi / freq
        if wavelen < high_freq_wavelen:
            out.append(freq)
        elif wavelen > low_freq_wavelen:
            out.append(freq / factor)
        else:
            smooth = (old_context / wavelen - low) / (high - low)
            out.append((1 - smooth) * freq / factor + smooth * freq)
    return out


def _check_frequencies(rope: RotaryEmbedding, expected: list[float]) -> None:
    expected = torch.tensor(expected, dtype=torch.float64)
    torch.testing.assert_close(rope.frequencies, expected, rtol=1e-13, atol=0)


def test_a_numpy_base_or_factor_is_taken_as_a_float() -> None:
    assert torch.equal(rope_frequencies(8, np.float32(10000)), rope_frequencies(8, 10000.0))
    assert PositionInterpolation(factor=np.int64(4)).factor == 4.0
    rope = RotaryEmbedding(8, base=np.float32(10000))
    assert rope.base == 10000.0 and torch.equal(rope.frequencies, RotaryEmbedding(8).frequencies)


def test_a_numpy_original_context_is_taken_as_an_int() -> None:
    # It was refused as "original_context must be an integer >= 1 (tokens), got np.int64(64)",
    # where every size of the package (check_sizes) takes a NumPy integer.
    for rule in (YaRNScaling(4.0, np.int64(64)), Llama3Scaling(8.0, np.int64(64)),
                 DynamicNTKScaling(4.0, np.int64(64))):
        assert rule.original_context == 64 and type(rule.original_context) is int
    assert torch.equal(YaRNScaling(4.0, np.int64(64)).frequencies(8, 10000.0),
                       YaRNScaling(4.0, 64).frequencies(8, 10000.0))


def test_a_numpy_length_is_taken_as_an_int() -> None:
    # It was refused as "length must be an integer >= 0 (tokens), got np.int64(5)", from a
    # rotary embedding called with a NumPy start, which every other count (check_counts) takes.
    rule = DynamicNTKScaling(2.0, 4)
    assert rule.stretch(np.int64(6)) == rule.stretch(6) == 2.0
    rope, x = RotaryEmbedding(8, scaling=rule), torch.randn(1, 1, 3, 8)
    assert torch.equal(rope(x, start=np.int64(2)), rope(x, start=2))


@pytest.mark.parametrize("factor", [1.5, 4.0, 32.0])
def test_position_interpolation_divides_every_frequency(factor: float) -> None:
    """Chen et al. (2023): f'(x, m) = f(x, m L / L'), position m read as m / factor."""
    rope = RotaryEmbedding(16, scaling=PositionInterpolation(factor))
    _check_frequencies(rope, [theta / factor for theta in _theta(16, 10000.0)])
    x = seeded_randn(10, 3, 16)
    by_hand = [rotate_pairs_by_hand(x[p].tolist(), (p + 7) / factor, False, 10000.0)
               for p in range(3)]  # token p + 7 rotated as if it sat at (p + 7) / factor
    torch.testing.assert_close(rope(x, start=7), torch.tensor(by_hand, dtype=torch.float64))


@pytest.mark.parametrize(("d_h", "rotary_dim", "factor"), [(128, 128, 8.0), (96, 24, 4.0),
                                                           (4, 4, 4.0)])
def test_ntk_aware_scaling_is_a_new_base(d_h: int, rotary_dim: int, factor: float) -> None:
    """b' = b s^(|D| / (|D| - 2)) (Peng et al., eq. 16), |D| the rotated width."""
    rope = RotaryEmbedding(d_h, rotary_dim=rotary_dim, scaling=NTKAwareScaling(factor))
    new_base = 10000.0 * factor ** (rotary_dim / (rotary_dim - 2))
    _check_frequencies(rope, _theta(rotary_dim, new_base))
    theta = _theta(rotary_dim, 10000.0)  # the first pair kept, the last stretched by the factor
    assert rope.frequencies[0].item() == pytest.approx(theta[0], rel=1e-14)
    assert rope.frequencies[-1].item() == pytest.approx(theta[-1] / factor, rel=1e-12)


@pytest.mark.parametrize(("d", "base", "s", "L"), [(128, 10000.0, 16.0, 4096), (64, 500000.0, 8.0,
                                                   8192), (4, 10000.0, 4.0, 16)])
def test_yarn_frequencies_follow_the_papers_ramp(d: int, base: float, s: float, L: int) -> None:
    rope = RotaryEmbedding(d, base, scaling=YaRNScaling(s, original_context=L))
    _check_frequencies(rope, _yarn_by_hand(d, base, s, L, alpha=1.0, beta=32.0))
    rope = RotaryEmbedding(d, base, scaling=YaRNScaling(s, L, beta_fast=8.0, beta_slow=2.0))
    _check_frequencies(rope, _yarn_by_hand(d, base, s, L, alpha=2.0, beta=8.0))


def test_yarn_keeps_fast_pairs_and_interpolates_slow_ones() -> None:
    """Pairs turning more than beta_fast times over L keep θ; fewer than beta_slow: θ / s."""
    d, L, s = 128, 4096, 16.0
    theta = torch.tensor(_theta(d, 10000.0), dtype=torch.float64)
    turns = L * theta / (2 * math.pi)
    scaled = RotaryEmbedding(d, scaling=YaRNScaling(s, L)).frequencies
    assert (turns > 32).sum() > 0 and (turns < 1).sum() > 0  # both kinds occur at this size
    assert torch.equal(scaled[turns > 32], theta[turns > 32])
    torch.testing.assert_close(scaled[turns < 1], theta[turns < 1] / s, rtol=1e-15, atol=0)


@pytest.mark.parametrize("factor", [2.0, 16.0])
def test_yarn_temperature_divides_the_rotated_part_or_every_score(factor: float) -> None:
    """sqrt(1/t) = 0.1 ln s + 1 (YaRN eq. 22) on queries and keys: on the rotated features by
    default (cos and sin scaled, as deployed code does), on all of them with "head"."""
    q, k = seeded_randn(11, 5, 16), seeded_randn(12, 5, 16)  # (t, d_h)
    rule = YaRNScaling(factor, 64)
    assert rule.attention_factor == pytest.approx(0.1 * math.log(factor) + 1.0, rel=1e-15)
    cold = YaRNScaling(factor, 64, attention_factor=1.0)
    full, full_cold = RotaryEmbedding(16, scaling=rule), RotaryEmbedding(16, scaling=cold)
    torch.testing.assert_close(full(q) @ full(k).T,
                               (full_cold(q) @ full_cold(k).T) * rule.attention_factor**2)
    assert torch.equal(full_cold.frequencies, full.frequencies)
    cold_partial = RotaryEmbedding(16, rotary_dim=8, scaling=cold)
    rotated = cold_partial(q)[:, :8] @ cold_partial(k)[:, :8].T  # (t, t): the rotated part
    passed = q[:, 8:] @ k[:, 8:].T  # (t, t): the part without positions
    partial = RotaryEmbedding(16, rotary_dim=8, scaling=rule)
    torch.testing.assert_close(partial(q) @ partial(k).T,
                               rotated * rule.attention_factor**2 + passed)
    head = RotaryEmbedding(16, rotary_dim=8, scaling=YaRNScaling(factor, 64,
                                                                 scaled_features="head"))
    torch.testing.assert_close(head(q) @ head(k).T,
                               (rotated + passed) * rule.attention_factor**2)


def _hf_rope_config(kind: str, **rope: float) -> object:
    """A GPT-NeoX configuration of transformers with the given RoPE parameters."""
    transformers = pytest.importorskip("transformers")
    return transformers.GPTNeoXConfig(
        hidden_size=128, num_attention_heads=4, max_position_embeddings=rope.pop("context", 64),
        rope_parameters={"rope_type": kind, "rope_theta": 10000.0, **rope},
    )


def test_yarn_on_a_partly_rotated_head_is_what_transformers_computes() -> None:
    """GPT-NeoX in transformers with YaRN on 8 of 32 features: same frequencies, same factor,
    and the factor on the rotated features only (HF multiplies cos and sin)."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.models.gpt_neox.modeling_gpt_neox import (
        GPTNeoXRotaryEmbedding,
        apply_rotary_pos_emb,
    )

    # beta 2 and 1.5 put no pair inside the ramp (turns 10.2, 1.02, 0.10, 0.01), so the paper's
    # ramp in turns and the code's ramp in pair indices give the same frequencies
    config = _hf_rope_config("yarn", factor=4.0, original_max_position_embeddings=64,
                             partial_rotary_factor=0.25, beta_fast=2.0, beta_slow=1.5, context=256)
    rule = YaRNScaling(4.0, 64, beta_fast=2.0, beta_slow=1.5)
    ours = RotaryEmbedding(32, rotary_dim=8, scaling=rule)
    inv_freq, factor = ROPE_INIT_FUNCTIONS["yarn"](config)
    torch.testing.assert_close(ours.frequencies, inv_freq.double(), rtol=1e-6, atol=0)
    assert factor == pytest.approx(rule.attention_factor, rel=1e-15)
    q, k = seeded_randn(21, 1, 4, 9, 32), seeded_randn(22, 1, 4, 9, 32)  # (b, h, t, d_h)
    cos, sin = GPTNeoXRotaryEmbedding(config)(q, torch.arange(100, 109)[None])  # (b, t, d_rot)
    hf_q, hf_k = apply_rotary_pos_emb(q, k, cos, sin)  # float32 cos and sin on float64 q, k
    torch.testing.assert_close(ours(q, start=100), hf_q, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours(k, start=100), hf_k, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours(q)[..., 8:], q[..., 8:], rtol=0, atol=0)  # not scaled



@pytest.mark.parametrize(("context", "beta_fast", "beta_slow", "truncate"), [
    (4096, 32.0, 1.0, True),  # pairs 5.2 .. 11.3, rounded out to 5 .. 12
    (4096, 32.0, 1.0, False),  # the same, kept real
    (4096, 32.0, 0.05, True),  # the slow end past the last pair: clipped to d_rot - 1
    (64, 32.0, 12.0, True),  # both ends at pair 0: the zero-width guard
])
def test_yarn_index_ramp_is_what_transformers_computes(context: int, beta_fast: float,
                                                       beta_slow: float, truncate: bool) -> None:
    """ramp="index": HF's (and the authors') ramp over pair indices, boundaries floored and
    ceiled unless truncate=False, clipped to [0, d_rot - 1] (float32 there)."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = _hf_rope_config("yarn", factor=8.0, original_max_position_embeddings=context,
                             beta_fast=beta_fast, beta_slow=beta_slow, truncate=truncate,
                             partial_rotary_factor=1.0, context=8 * context)
    inv_freq, _ = ROPE_INIT_FUNCTIONS["yarn"](config)  # (16,): head width 32
    rule = YaRNScaling(8.0, context, beta_fast=beta_fast, beta_slow=beta_slow, ramp="index",
                       truncate=truncate)
    ours = rule.frequencies(32, 10000.0)
    torch.testing.assert_close(ours, inv_freq.double(), rtol=1e-6, atol=0)


@pytest.mark.parametrize("length", [1, 40, 64, 65, 100, 1000])
def test_dynamic_ntk_scaling_is_what_transformers_computes(length: int) -> None:
    """HF's dynamic rule: base (s l / L - (s - 1))^(d / (d - 2)), l at least L (float32 there)."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = _hf_rope_config("dynamic", factor=4.0, partial_rotary_factor=0.5, context=64)
    inv_freq, factor = ROPE_INIT_FUNCTIONS["dynamic"](config, seq_len=length)  # (d_rot/2,)
    rule = DynamicNTKScaling(4.0, original_context=64)
    torch.testing.assert_close(rule.frequencies(16, 10000.0, length), inv_freq.double(),
                               rtol=1e-6, atol=0)
    assert factor == 1.0
    x = seeded_randn(23, 2, length, 32)  # (b, t, d_h): the module uses the frequencies of start + t
    fixed = RotaryEmbedding(32, rotary_dim=16, scaling=NTKAwareScaling(rule.stretch(length)))
    dynamic = RotaryEmbedding(32, rotary_dim=16, scaling=rule)
    torch.testing.assert_close(dynamic(x), fixed(x), rtol=1e-12, atol=1e-12)
    assert rule.stretch(length) == max(1.0, 4.0 * length / 64 - 3.0)


def test_dynamic_ntk_scaling_with_a_large_factor_is_still_one_within_training() -> None:
    # κ t / t_train - (κ - 1) cancelled to 0.0 at t = t_train for κ = 1e300, and the rule
    # refused its own stretch: "factor must be a finite number >= 1, got 0.0".
    rule = DynamicNTKScaling(1e300, original_context=64)
    assert rule.stretch(64) == 1.0 and rule.stretch(65) == 1e300 / 64 + 1.0
    torch.testing.assert_close(rule.frequencies(8, 10000.0, 64),
                               rope_frequencies(8, 10000.0), rtol=1e-15, atol=0)


def test_shift_turns_rotated_vectors_further_without_the_attention_factor() -> None:
    """R_p R_δ = R_(p+δ): shifting a rotated key by δ is rotating it at p + δ, factor once."""
    rope = RotaryEmbedding(16, rotary_dim=8, scaling=YaRNScaling(4.0, 64))
    x = seeded_randn(25, 2, 3, 16)  # (b, t, d_h)
    torch.testing.assert_close(rope.shift(rope(x, start=5), 7), rope(x, start=12))
    torch.testing.assert_close(rope.shift(x, 0), x, rtol=0, atol=0)


def test_dynamic_scaling_needs_keys_rotated_at_the_current_length() -> None:
    """A key rotated when the sequence was short no longer matches once s has grown."""
    rope = RotaryEmbedding(16, scaling=DynamicNTKScaling(4.0, original_context=32))
    k = seeded_randn(24, 1, 80, 16)  # (b, t, d_h): 80 tokens, past the 32 of training
    early = rope(k[:, :40])  # keys 0..39 rotated at length 40 (as a cache of rotated keys holds)
    late = rope(k)[:, :40]  # the same keys rotated at length 80
    torch.testing.assert_close(early[:, :1], late[:, :1])  # position 0 does not turn
    assert (early[:, 1:] - late[:, 1:]).abs().max() > 1e-3


@pytest.mark.parametrize(("d", "base", "config"), [
    (128, 500000.0, {}),  # Llama 3.1: head width 128, base 500,000 (Meta's defaults)
    (64, 10000.0, {"factor": 4.0, "original_context": 2048, "low_freq_factor": 2.0,
                   "high_freq_factor": 16.0}),
])
def test_llama3_scaling_is_metas_rule(d: int, base: float, config: dict) -> None:
    rule = Llama3Scaling(**config)
    rope = RotaryEmbedding(d, base, scaling=rule)
    _check_frequencies(rope, _llama3_by_hand(d, base, rule.factor, rule.original_context,
                                             rule.low_freq_factor, rule.high_freq_factor))
    assert rope.attention_factor == 1.0


@pytest.mark.parametrize("make", [
    lambda: PositionInterpolation(1), lambda: NTKAwareScaling(1.0), lambda: YaRNScaling(1, 16),
    lambda: Llama3Scaling(factor=1.0),
])
def test_a_factor_of_one_changes_nothing(make: object) -> None:
    x = seeded_randn(13, 2, 7, 16)
    scaled = RotaryEmbedding(16, scaling=make())  # type: ignore[operator]
    plain = RotaryEmbedding(16)
    torch.testing.assert_close(scaled(x, start=100), plain(x, start=100), rtol=1e-14, atol=1e-14)


@FAST
@given(m=st.integers(0, 300), n=st.integers(0, 300), shift=st.integers(0, 3000), seed=seeds,
       rule=st.sampled_from([PositionInterpolation(3.0), NTKAwareScaling(3.0),
                             YaRNScaling(3.0, 32), Llama3Scaling(3.0, 32)]))
def test_scaled_rope_scores_still_see_only_the_offset(
    m: int, n: int, shift: int, seed: int, rule: object
) -> None:
    rope = RotaryEmbedding(8, scaling=rule)  # type: ignore[arg-type]
    q, k = seeded_randn(seed, 1, 8), seeded_randn(seed + 1, 1, 8)
    score = (rope(q, start=m) * rope(k, start=n)).sum()
    shifted = (rope(q, start=m + shift) * rope(k, start=n + shift)).sum()
    torch.testing.assert_close(score, shifted, atol=1e-9, rtol=1e-9)


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    @pytest.mark.parametrize(
        ("make", "message"),
        [
            (lambda: PositionInterpolation(0.5), r"factor must be a finite number >= 1, got 0.5"),
            (lambda: rope_frequencies(3, 1e4), r"rotary_dim must be even, got 3"),
            (lambda: rope_frequencies(0, 1e4), r"rotary_dim must be at least 1, got 0"),
            (lambda: rope_frequencies(4, -2.0), r"base must be a finite number > 1, got -2.0"),
            (lambda: PositionInterpolation(True), r"factor must be a finite number >= 1, got True"),
            (lambda: NTKAwareScaling(float("inf")), r"factor must be a finite number >= 1, got inf"),
            (lambda: NTKAwareScaling("2"), r"factor must be a finite number >= 1, got '2'"),
            (lambda: YaRNScaling(float("nan"), 16), r"factor must be a finite number >= 1, got nan"),
            (lambda: YaRNScaling(2.0, 0), r"original_context must be an integer >= 1 .* got 0"),
            (lambda: YaRNScaling(2.0, 16.0), r"original_context must be an integer >= 1.*got 16\.0"),
            (lambda: YaRNScaling(2.0, 16, beta_fast=1.0, beta_slow=1.0),
             r"beta_slow must be less than beta_fast.*got beta_slow=1 and beta_fast=1"),
            (lambda: YaRNScaling(2.0, 16, beta_slow=0.0), r"beta_slow must be a finite number > 0.*got 0\.0"),
            (lambda: YaRNScaling(2.0, 16, attention_factor=0.0),
             r"attention_factor must be a finite number > 0, got 0.0"),
            (lambda: Llama3Scaling(low_freq_factor=4.0, high_freq_factor=1.0),
             r"low_freq_factor must be less than high_freq_factor, got low_freq_factor=4 and "
             r"high_freq_factor=1"),
            (lambda: Llama3Scaling(original_context=-1), r"original_context must be .* got -1"),
            (lambda: Llama3Scaling(factor=0.9), r"factor must be a finite number >= 1, got 0.9"),
            (lambda: YaRNScaling(2.0, 16, scaled_features="all"),
             r"scaled_features must be 'rotated' or 'head', got 'all'"),
            (lambda: DynamicNTKScaling(0.5, 16), r"factor must be a finite number >= 1, got 0.5"),
            (lambda: DynamicNTKScaling(2.0, 0), r"original_context must be an integer >= 1 .* got 0"),
            (lambda: DynamicNTKScaling(2.0, 16).stretch(-1),
             r"length must be an integer >= 0, got -1"),
            (lambda: DynamicNTKScaling(2.0, 16).stretch(True),
             r"length must be an integer >= 0, got True"),
            (lambda: Llama3Scaling(low_freq_factor=0.0),
             r"low_freq_factor must be a finite number > 0, got 0\.0"),
            (lambda: NTKAwareScaling(2.0).frequencies(2, 10000.0),
             r"NTK-aware scaling needs rotary_dim >= 4 .* got 2"),
        ],
    )
    def test_factors_contexts_and_ramps_must_be_valid(self, make: object, message: str) -> None:
        with pytest.raises(ValueError, match=message):
            make()  # type: ignore[operator]

    def test_yarn_ramp_must_be_turns_or_index(self) -> None:
        with pytest.raises(ValueError, match=r"ramp must be 'turns' or 'index'.*got 'pairs'"):
            YaRNScaling(4.0, 64, ramp="pairs")

    @pytest.mark.parametrize("value", NON_BOOLS)
    @pytest.mark.parametrize(
        ("flag", "call"),
        [
            ("truncate", lambda value: YaRNScaling(4.0, 4096, truncate=value)),
            ("truncate", lambda value: YaRNScaling(4.0, 4096, ramp="index", truncate=value)),
        ],
        ids=["turns", "index"],
    )
    def test_flags_must_be_bools(self, flag: str, call, value: object) -> None:
        with refuses_non_bool(flag, value):
            call(value)


@pytest.mark.parametrize("features", ["rotated", "head"])
def test_without_the_attention_factor_the_turn_is_a_pure_rotation(features):
    """rotary(x, attention_factor=False): YaRN's frequencies, without its temperature on the
    scaled features (what a kernel's features take: chapter 12's elu + 1)."""
    rotary = RotaryEmbedding(8, rotary_dim=4, scaling=YaRNScaling(4.0, 64, scaled_features=features))
    x = seeded_randn(1, 2, 5, 8)  # (h, t, d_h)
    turned, n = rotary(x, 3), rotary.scaled_dim
    pure = rotary(x, 3, attention_factor=False)
    factor = rotary.attention_factor
    assert factor > 1
    torch.testing.assert_close(pure, torch.cat([turned[..., :n] / factor, turned[..., n:]], -1))
    assert torch.allclose(pure.norm(dim=-1), x.norm(dim=-1))  # a rotation keeps lengths
    for value in NON_BOOLS:
        with refuses_non_bool("attention_factor", value):
            rotary(x, attention_factor=value)
