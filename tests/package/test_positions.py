"""Positions: the sinusoidal table, learned positions, RoPE and ALiBi, against their formulas.

RoPE's partial rotation is checked against GPT-NeoX's and GPT-J's rules, and its four scaling rules
against the formulas of their sources (Chen et al., 2023; the "NTK-aware" base of Peng et al.,
2023, eq. 16; YaRN's eqs. 17-22; Meta's ``apply_scaling`` for Llama 3.1), each written out below in
float64. Dynamic NTK scaling and YaRN's temperature on a partly rotated head are checked against
Hugging Face's ``transformers`` itself (its frequencies are float32, so to float32 precision).
"""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attention import (
    DynamicNTKScaling,
    LearnedPositions,
    Llama3Scaling,
    NTKAwareScaling,
    PositionInterpolation,
    RotaryEmbedding,
    YaRNScaling,
    alibi_bias,
    alibi_slopes,
    rotary_permutation,
    sinusoidal_positions,
)

FAST = settings(max_examples=25, deadline=None)
seeds = st.integers(min_value=0, max_value=2**31 - 1)


def _randn(seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# --- sinusoidal table -------------------------------------------------------------------------


def test_sinusoidal_table_is_the_formula_of_vaswani_et_al() -> None:
    t, d = 7, 6
    expected = [
        [
            math.sin(p / 10000 ** (k / d)) if k % 2 == 0 else math.cos(p / 10000 ** ((k - 1) / d))
            for k in range(d)
        ]
        for p in range(t)
    ]
    table = sinusoidal_positions(t, d)
    assert table.shape == (t, d) and table.dtype == torch.get_default_dtype()
    expected = torch.tensor(expected, dtype=torch.float64)
    torch.testing.assert_close(table.double(), expected, atol=1e-7, rtol=0)


@pytest.mark.parametrize("k", [1, 3, 10])
def test_shifting_a_position_by_k_is_one_linear_map_for_every_position(k: int) -> None:
    """PE(p + k) = PE(p) M_k, M_k block-diagonal with the rotations [[cos, -sin], [sin, cos]]."""
    t, d = 40, 8
    table = sinusoidal_positions(t + k, d).double()
    m_k = torch.zeros(d, d, dtype=torch.float64)
    for i in range(d // 2):
        angle = k / 10000 ** (2 * i / d)
        c, s = math.cos(angle), math.sin(angle)
        m_k[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, -s], [s, c]])
    torch.testing.assert_close(table[:t] @ m_k, table[k:], atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    ("t", "d", "message"),
    [(4, 5, r"d must be even .* got 5"), (0, 4, r"t must be at least 1, got 0"),
     (4, 2.0, r"d must be an integer, got 2.0")],
)
def test_sinusoidal_bad_sizes(t: int, d: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        sinusoidal_positions(t, d)


# --- learned positions ------------------------------------------------------------------------


def test_learned_positions_add_one_trained_row_per_position() -> None:
    torch.manual_seed(0)
    positions = LearnedPositions(context_length=6, d=4)
    x = torch.randn(2, 3, 4)
    table = positions.embedding.weight.detach()  # (6, 4)
    torch.testing.assert_close(positions(x).detach(), x + table[:3])
    torch.testing.assert_close(positions(x, start=3).detach(), x + table[3:6])


def test_learned_positions_refuse_positions_past_the_table() -> None:
    positions = LearnedPositions(context_length=6, d=4)
    with pytest.raises(ValueError, match=r"at most context_length=6, got 7"):
        positions(torch.zeros(1, 7, 4))
    with pytest.raises(ValueError, match=r"at most context_length=6, got 8"):
        positions(torch.zeros(1, 3, 4), start=5)
    with pytest.raises(ValueError, match=r"last dimension d=4, got 5"):
        positions(torch.zeros(1, 3, 5))
    with pytest.raises(ValueError, match=r"start must be an integer >= 0, got -1"):
        positions(torch.zeros(1, 3, 4), start=-1)


# --- rotary embeddings ------------------------------------------------------------------------


def _rotate_pairs_by_hand(x: list[float], p: int, interleaved: bool, base: float) -> list[float]:
    """Rotate feature pair i of one token at position p by p base^(-2i/d), pair by pair."""
    d = len(x)
    out = list(x)
    for i in range(d // 2):
        a, b = (2 * i, 2 * i + 1) if interleaved else (i, i + d // 2)
        angle = p * base ** (-2 * i / d)
        out[a] = x[a] * math.cos(angle) - x[b] * math.sin(angle)
        out[b] = x[a] * math.sin(angle) + x[b] * math.cos(angle)
    return out


@pytest.mark.parametrize("interleaved", [False, True])
def test_rope_rotates_each_pair_by_position_times_frequency(interleaved: bool) -> None:
    x = _randn(0, 5, 6)
    rope = RotaryEmbedding(6, base=100.0, interleaved=interleaved)
    expected = [_rotate_pairs_by_hand(x[p].tolist(), p + 2, interleaved, 100.0) for p in range(5)]
    torch.testing.assert_close(rope(x, start=2), torch.tensor(expected, dtype=torch.float64))


@FAST
@given(m=st.integers(0, 200), n=st.integers(0, 200), shift=st.integers(0, 500), seed=seeds,
       interleaved=st.booleans(), rotary_dim=st.sampled_from([2, 4, 8]))
def test_rope_score_depends_only_on_the_offset_m_minus_n(
    m: int, n: int, shift: int, seed: int, interleaved: bool, rotary_dim: int
) -> None:
    """<R_m q, R_n k> = <R_(m+s) q, R_(n+s) k>: the score sees m - n only, partial or not."""
    rope = RotaryEmbedding(8, interleaved=interleaved, rotary_dim=rotary_dim)
    q, k = _randn(seed, 1, 8), _randn(seed + 1, 1, 8)
    score = (rope(q, start=m) * rope(k, start=n)).sum()
    shifted = (rope(q, start=m + shift) * rope(k, start=n + shift)).sum()
    torch.testing.assert_close(score, shifted, atol=1e-9, rtol=1e-9)


def test_rope_start_continues_the_positions() -> None:
    rope = RotaryEmbedding(8)
    x = _randn(1, 2, 3, 10, 8)  # (b, h, t, d_h)
    torch.testing.assert_close(rope(x)[..., 4:, :], rope(x[..., 4:, :], start=4))


def test_the_two_pairings_are_the_same_up_to_a_permutation() -> None:
    halves, interleaved = RotaryEmbedding(8), RotaryEmbedding(8, interleaved=True)
    perm = rotary_permutation(8)
    assert perm.tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    x = _randn(2, 2, 5, 8)
    torch.testing.assert_close(halves(x[..., perm]), interleaved(x)[..., perm])
    assert not torch.allclose(halves(x), interleaved(x))  # the pairing does matter


def test_permuting_query_and_key_weights_turns_one_pairing_into_the_other() -> None:
    """A model trained with interleaved pairs equals one with halves, W_q, W_k rows permuted."""
    tokens = _randn(3, 6, 5)  # (t, d_in)
    w_q, w_k = _randn(4, 8, 5), _randn(5, 8, 5)  # nn.Linear layout: (d_h, d_in)
    halves, interleaved = RotaryEmbedding(8), RotaryEmbedding(8, interleaved=True)
    perm = rotary_permutation(8)
    scores = interleaved(tokens @ w_q.T) @ interleaved(tokens @ w_k.T).T  # (t, t)
    permuted = halves(tokens @ w_q[perm].T) @ halves(tokens @ w_k[perm].T).T  # (t, t)
    torch.testing.assert_close(permuted, scores)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: RotaryEmbedding(7), r"d_h must be even .* got 7"),
        (lambda: RotaryEmbedding(8, base=1.0), r"base must be a number > 1, got 1.0"),
        (lambda: RotaryEmbedding(8)(torch.zeros(3, 6)), r"d_h=8, got shape \(3, 6\)"),
        (lambda: RotaryEmbedding(8)(torch.zeros(8)), r"d_h=8, got shape \(8,\)"),
        (lambda: RotaryEmbedding(8)(torch.zeros(3, 8), start=1.5), r"start must be .* 1.5"),
        (lambda: rotary_permutation(3), r"d_h must be even .* got 3"),
    ],
)
def test_rope_bad_input(make: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()  # type: ignore[operator]


# --- partial rotary: GPT-NeoX's rotary_pct and GPT-J's rotary_dim ------------------------------


def _gpt_neox_rotary(x: torch.Tensor, rotary_pct: float, base: float, start: int) -> torch.Tensor:
    """GPT-NeoX's rule, written out (megatron/model/transformer.py, positional_embeddings.py).

    The first int(d_h * rotary_pct) features are rotated with frequencies computed for that
    width; rotate_half pairs feature i with i + d_rot/2 of the rotated part; the rest is kept.
    """
    d_h = x.shape[-1]
    d_rot = int(d_h * rotary_pct)
    inv_freq = 1.0 / base ** (torch.arange(0, d_rot, 2, dtype=torch.float64) / d_rot)
    positions = torch.arange(start, start + x.shape[-2], dtype=torch.float64)
    angles = torch.outer(positions, inv_freq).repeat(1, 2)  # (t, d_rot): both halves
    rot, kept = x[..., :d_rot], x[..., d_rot:]
    half_turn = torch.cat([-rot[..., d_rot // 2 :], rot[..., : d_rot // 2]], dim=-1)
    return torch.cat([rot * angles.cos() + half_turn * angles.sin(), kept], dim=-1)


def _gpt_j_rotary(x: torch.Tensor, rotary_dim: int, base: float, start: int) -> torch.Tensor:
    """GPT-J's rule, written out (Hugging Face's modeling_gptj): rotate_every_two on the first
    rotary_dim features, pairs (2i, 2i+1), sines and cosines repeated for both of a pair."""
    inv_freq = 1.0 / base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    positions = torch.arange(start, start + x.shape[-2], dtype=torch.float64)
    angles = torch.outer(positions, inv_freq).repeat_interleave(2, dim=-1)  # (t, rotary_dim)
    rot, kept = x[..., :rotary_dim], x[..., rotary_dim:]
    every_two = torch.stack([-rot[..., 1::2], rot[..., 0::2]], dim=-1).flatten(-2)
    return torch.cat([rot * angles.cos() + every_two * angles.sin(), kept], dim=-1)


@pytest.mark.parametrize(("d_h", "rotary_pct"), [(96, 0.25), (64, 0.5), (16, 1.0)])
def test_partial_rotary_is_gpt_neox_rule(d_h: int, rotary_pct: float) -> None:
    """(96, 0.25) is a head of GPT-NeoX-20B: 6144 / 64 heads, rotary_pct 0.25 (configs/20B.yml)."""
    x = _randn(7, 2, 3, 9, d_h)  # (b, h, t, d_h)
    rope = RotaryEmbedding(d_h, rotary_dim=int(d_h * rotary_pct))
    expected = _gpt_neox_rotary(x, rotary_pct, 10000.0, start=5)
    torch.testing.assert_close(rope(x, start=5), expected, atol=1e-12, rtol=0)


def test_partial_interleaved_rotary_is_gpt_j_rule() -> None:
    x = _randn(8, 2, 6, 32)  # (b, t, d_h); GPT-J itself: d_h = 256, rotary_dim = 64
    rope = RotaryEmbedding(32, interleaved=True, rotary_dim=8)
    torch.testing.assert_close(rope(x, start=3), _gpt_j_rotary(x, 8, 10000.0, start=3),
                               atol=1e-12, rtol=0)


@pytest.mark.parametrize("interleaved", [False, True])
def test_partial_rotary_passes_the_rest_and_uses_d_rot_frequencies(interleaved: bool) -> None:
    x = _randn(9, 4, 12)  # (t, d_h)
    partial = RotaryEmbedding(12, interleaved=interleaved, rotary_dim=4)
    full_of_four = RotaryEmbedding(4, interleaved=interleaved)  # a head of width d_rot
    assert torch.equal(partial(x, start=2)[..., 4:], x[..., 4:])
    torch.testing.assert_close(partial(x, start=2)[..., :4], full_of_four(x[..., :4], start=2))
    torch.testing.assert_close(partial.frequencies, torch.tensor([1.0, 0.01], dtype=torch.float64))
    assert torch.equal(RotaryEmbedding(12, rotary_dim=12)(x), RotaryEmbedding(12)(x))


# --- scaling rules, against their sources ------------------------------------------------------


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


@pytest.mark.parametrize("factor", [1.5, 4.0, 32.0])
def test_position_interpolation_divides_every_frequency(factor: float) -> None:
    """Chen et al. (2023): f'(x, m) = f(x, m L / L'), position m read as m / factor."""
    rope = RotaryEmbedding(16, scaling=PositionInterpolation(factor))
    _check_frequencies(rope, [theta / factor for theta in _theta(16, 10000.0)])
    x = _randn(10, 3, 16)
    by_hand = [_rotate_pairs_by_hand(x[p].tolist(), (p + 7) / factor, False, 10000.0)
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
    q, k = _randn(11, 5, 16), _randn(12, 5, 16)  # (t, d_h)
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
    q, k = _randn(21, 1, 4, 9, 32), _randn(22, 1, 4, 9, 32)  # (b, h, t, d_h)
    cos, sin = GPTNeoXRotaryEmbedding(config)(q, torch.arange(100, 109)[None])  # (b, t, d_rot)
    hf_q, hf_k = apply_rotary_pos_emb(q, k, cos, sin)  # float32 cos and sin on float64 q, k
    torch.testing.assert_close(ours(q, start=100), hf_q, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours(k, start=100), hf_k, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours(q)[..., 8:], q[..., 8:], rtol=0, atol=0)  # not scaled


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
    x = _randn(23, 2, length, 32)  # (b, t, d_h): the module uses the frequencies of start + t
    fixed = RotaryEmbedding(32, rotary_dim=16, scaling=NTKAwareScaling(rule.stretch(length)))
    dynamic = RotaryEmbedding(32, rotary_dim=16, scaling=rule)
    torch.testing.assert_close(dynamic(x), fixed(x), rtol=1e-12, atol=1e-12)
    assert rule.stretch(length) == max(1.0, 4.0 * length / 64 - 3.0)


def test_shift_turns_rotated_vectors_further_without_the_attention_factor() -> None:
    """R_p R_δ = R_(p+δ): shifting a rotated key by δ is rotating it at p + δ, factor once."""
    rope = RotaryEmbedding(16, rotary_dim=8, scaling=YaRNScaling(4.0, 64))
    x = _randn(25, 2, 3, 16)  # (b, t, d_h)
    torch.testing.assert_close(rope.shift(rope(x, start=5), 7), rope(x, start=12))
    torch.testing.assert_close(rope.shift(x, 0), x, rtol=0, atol=0)


def test_dynamic_scaling_needs_keys_rotated_at_the_current_length() -> None:
    """A key rotated when the sequence was short no longer matches once s has grown."""
    rope = RotaryEmbedding(16, scaling=DynamicNTKScaling(4.0, original_context=32))
    k = _randn(24, 1, 80, 16)  # (b, t, d_h): 80 tokens, past the 32 of training
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
    x = _randn(13, 2, 7, 16)
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
    q, k = _randn(seed, 1, 8), _randn(seed + 1, 1, 8)
    score = (rope(q, start=m) * rope(k, start=n)).sum()
    shifted = (rope(q, start=m + shift) * rope(k, start=n + shift)).sum()
    torch.testing.assert_close(score, shifted, atol=1e-9, rtol=1e-9)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: RotaryEmbedding(8, rotary_dim=3), r"rotary_dim must be even .* got 3"),
        (lambda: RotaryEmbedding(8, rotary_dim=10), r"rotary_dim must be at most d_h=8, got 10"),
        (lambda: RotaryEmbedding(8, rotary_dim=0), r"rotary_dim must be at least 1, got 0"),
        (lambda: RotaryEmbedding(8, rotary_dim=4.0), r"rotary_dim must be an integer, got 4.0"),
        (lambda: RotaryEmbedding(8, scaling=4.0), r"scaling must be None or one of .* got 4.0"),
        (lambda: RotaryEmbedding(8, rotary_dim=2, scaling=NTKAwareScaling(2.0)),
         r"NTK-aware scaling needs rotary_dim >= 4 .* got 2"),
        (lambda: PositionInterpolation(0.5), r"factor must be a finite number >= 1, got 0.5"),
        (lambda: PositionInterpolation(True), r"factor must be a finite number >= 1, got True"),
        (lambda: NTKAwareScaling(float("inf")), r"factor must be a finite number >= 1, got inf"),
        (lambda: NTKAwareScaling("2"), r"factor must be a finite number >= 1, got '2'"),
        (lambda: YaRNScaling(float("nan"), 16), r"factor must be a finite number >= 1, got nan"),
        (lambda: YaRNScaling(2.0, 0), r"original_context must be an integer >= 1 .* got 0"),
        (lambda: YaRNScaling(2.0, 16.0), r"original_context must be an integer >= 1 .* 16.0"),
        (lambda: YaRNScaling(2.0, 16, beta_fast=1.0, beta_slow=1.0),
         r"beta_slow must be less than beta_fast .* beta_slow=1 and beta_fast=1"),
        (lambda: YaRNScaling(2.0, 16, beta_slow=0.0), r"beta_slow must be a finite number > 0"),
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
         r"length must be an integer >= 0 \(tokens\), got -1"),
        (lambda: RotaryEmbedding(8, rotary_dim=2, scaling=DynamicNTKScaling(2.0, 16)),
         r"NTK-aware scaling needs rotary_dim >= 4 .* got 2"),
        (lambda: RotaryEmbedding(8, scaling=DynamicNTKScaling(2.0, 16)).shift(torch.ones(1, 8), 1),
         r"shift needs fixed frequencies"),
        (lambda: RotaryEmbedding(8).shift(torch.ones(1, 8), -1),
         r"start must be an integer >= 0, got -1"),
    ],
)
def test_partial_and_scaled_rope_bad_input(make: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()  # type: ignore[operator]


# --- ALiBi ------------------------------------------------------------------------------------

# Press et al. (2022): 2^(-8/n), 2^(-16/n), ... for n a power of two; otherwise the slopes of the
# largest power of two below n, then every other slope of twice that many heads.
EXPECTED_SLOPES = {
    1: [1 / 256],
    3: [1 / 16, 1 / 256, 1 / 4],
    8: [1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256],
    12: [1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256]
    + [2**-0.5, 2**-1.5, 2**-2.5, 2**-3.5],
    16: [2 ** (-k / 2) for k in range(1, 17)],
}


@pytest.mark.parametrize("num_heads", sorted(EXPECTED_SLOPES))
def test_alibi_slopes_follow_the_papers_recipe(num_heads: int) -> None:
    expected = torch.tensor(EXPECTED_SLOPES[num_heads], dtype=torch.float64)
    torch.testing.assert_close(alibi_slopes(num_heads).double(), expected, rtol=1e-6, atol=0)


def test_alibi_bias_is_minus_slope_times_distance() -> None:
    bias = alibi_bias(2, 4, 4)  # slopes 1/16, 1/256
    assert bias.shape == (2, 4, 4)
    for h, slope in enumerate([1 / 16, 1 / 256]):
        for i in range(4):
            for j in range(4):
                assert bias[h, i, j].item() == pytest.approx(-slope * (i - j))


def test_alibi_queries_are_the_last_positions_when_fewer_than_keys() -> None:
    full = alibi_bias(3, 7, 7)
    torch.testing.assert_close(alibi_bias(3, 2, 7), full[:, 5:, :])
    torch.testing.assert_close(alibi_bias(3, 1, 7)[:, 0, -1], torch.zeros(3))  # same position


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: alibi_slopes(0), r"num_heads must be at least 1, got 0"),
        (lambda: alibi_bias(2, 5, 3), r"t_q must be at most t_k .* got t_q=5 and t_k=3"),
        (lambda: alibi_bias(2, 0, 3), r"t_q must be at least 1, got 0"),
    ],
)
def test_alibi_bad_input(make: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()  # type: ignore[operator]
