"""Positions: the sinusoidal table, learned positions, RoPE and ALiBi, against their formulas.

RoPE's partial rotation is checked against GPT-NeoX's and GPT-J's rules; its scaling rules are
in test_rope_scaling.py.
"""

import math

import pytest
import torch
from _inputs import FAST, NON_BOOLS, refuses_non_bool, seeded_randn, seeds
from _rope import rotate_pairs_by_hand
from hypothesis import given
from hypothesis import strategies as st

from attention import (
    DynamicNTKScaling,
    LearnedPositions,
    NTKAwareScaling,
    RotaryEmbedding,
    alibi_bias,
    alibi_slopes,
    causal_mask,
    rotary_permutation,
    sinusoidal_positions,
)

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


# --- learned positions ------------------------------------------------------------------------


def test_learned_positions_add_one_trained_row_per_position() -> None:
    torch.manual_seed(0)
    positions = LearnedPositions(context_length=6, d=4)
    x = torch.randn(2, 3, 4)
    table = positions.embedding.weight.detach()  # (6, 4)
    torch.testing.assert_close(positions(x).detach(), x + table[:3])
    torch.testing.assert_close(positions(x, start=3).detach(), x + table[3:6])


# --- rotary embeddings ------------------------------------------------------------------------


@pytest.mark.parametrize("interleaved", [False, True])
def test_rope_rotates_each_pair_by_position_times_frequency(interleaved: bool) -> None:
    x = seeded_randn(0, 5, 6)
    rope = RotaryEmbedding(6, base=100.0, interleaved=interleaved)
    expected = [rotate_pairs_by_hand(x[p].tolist(), p + 2, interleaved, 100.0) for p in range(5)]
    torch.testing.assert_close(rope(x, start=2), torch.tensor(expected, dtype=torch.float64))


@FAST
@given(m=st.integers(0, 200), n=st.integers(0, 200), shift=st.integers(0, 500), seed=seeds,
       interleaved=st.booleans(), rotary_dim=st.sampled_from([2, 4, 8]))
def test_rope_score_depends_only_on_the_offset_m_minus_n(
    m: int, n: int, shift: int, seed: int, interleaved: bool, rotary_dim: int
) -> None:
    """<R_m q, R_n k> = <R_(m+s) q, R_(n+s) k>: the score sees m - n only, partial or not."""
    rope = RotaryEmbedding(8, interleaved=interleaved, rotary_dim=rotary_dim)
    q, k = seeded_randn(seed, 1, 8), seeded_randn(seed + 1, 1, 8)
    score = (rope(q, start=m) * rope(k, start=n)).sum()
    shifted = (rope(q, start=m + shift) * rope(k, start=n + shift)).sum()
    torch.testing.assert_close(score, shifted, atol=1e-9, rtol=1e-9)


def test_rope_start_continues_the_positions() -> None:
    rope = RotaryEmbedding(8)
    x = seeded_randn(1, 2, 3, 10, 8)  # (b, h, t, d_h)
    torch.testing.assert_close(rope(x)[..., 4:, :], rope(x[..., 4:, :], start=4))


def test_dynamic_rope_rotates_tokens_after_start_with_the_frequencies_of_start_plus_t() -> None:
    """A decode step at position 40 reads 41 tokens: it rotates as the whole 41-token pass does,
    with NTK-aware frequencies stretched for length 41, not for its own t = 1 (past 32 trained)."""
    rule = DynamicNTKScaling(4.0, original_context=32)
    rope = RotaryEmbedding(16, scaling=rule)
    x = seeded_randn(10, 2, 41, 16)  # (b, t, d_h)
    fixed = RotaryEmbedding(16, scaling=NTKAwareScaling(rule.stretch(41)))  # κ_41 = 2.125
    torch.testing.assert_close(rope(x[:, 38:], start=38), fixed(x, start=0)[:, 38:], atol=1e-12, rtol=0)
    torch.testing.assert_close(rope(x[:, 40:], start=40), rope(x)[:, 40:], atol=1e-12, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_rope_moved_to_half_precision_keeps_exact_angles_far_out(dtype: torch.dtype) -> None:
    """Module.to(dtype) would round the frequencies to dtype, and a frequency off by one part in
    256 turns position 5000 by up to 20 radians; RoPE keeps them in float64, so the half result
    is the float64 rotation of the same rounded input within a few roundings."""
    x = seeded_randn(2, 2, 4, 64).to(dtype)  # (h, t, d_h), already rounded
    exact = RotaryEmbedding(64)(x.double(), start=5000)
    ours = RotaryEmbedding(64).to(dtype)(x, start=5000)
    assert ours.dtype == dtype
    error, rounding = ((y.double() - exact).abs().max().item() for y in (ours, exact.to(dtype)))
    assert error <= 3 * rounding, f"error {error:.3g} > 3 x rounding once {rounding:.3g}"


def test_the_two_pairings_are_the_same_up_to_a_permutation() -> None:
    halves, interleaved = RotaryEmbedding(8), RotaryEmbedding(8, interleaved=True)
    perm = rotary_permutation(8)
    assert perm.tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    x = seeded_randn(2, 2, 5, 8)
    torch.testing.assert_close(halves(x[..., perm]), interleaved(x)[..., perm])
    assert not torch.allclose(halves(x), interleaved(x))  # the pairing does matter


def test_permuting_query_and_key_weights_turns_one_pairing_into_the_other() -> None:
    """A model trained with interleaved pairs equals one with halves, W_q, W_k rows permuted."""
    tokens = seeded_randn(3, 6, 5)  # (t, d_in)
    w_q, w_k = seeded_randn(4, 8, 5), seeded_randn(5, 8, 5)  # nn.Linear layout: (d_h, d_in)
    halves, interleaved = RotaryEmbedding(8), RotaryEmbedding(8, interleaved=True)
    perm = rotary_permutation(8)
    scores = interleaved(tokens @ w_q.T) @ interleaved(tokens @ w_k.T).T  # (t, t)
    permuted = halves(tokens @ w_q[perm].T) @ halves(tokens @ w_k[perm].T).T  # (t, t)
    torch.testing.assert_close(permuted, scores)


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
    x = seeded_randn(7, 2, 3, 9, d_h)  # (b, h, t, d_h)
    rope = RotaryEmbedding(d_h, rotary_dim=int(d_h * rotary_pct))
    expected = _gpt_neox_rotary(x, rotary_pct, 10000.0, start=5)
    torch.testing.assert_close(rope(x, start=5), expected, atol=1e-12, rtol=0)


def test_partial_interleaved_rotary_is_gpt_j_rule() -> None:
    x = seeded_randn(8, 2, 6, 32)  # (b, t, d_h); GPT-J itself: d_h = 256, rotary_dim = 64
    rope = RotaryEmbedding(32, interleaved=True, rotary_dim=8)
    torch.testing.assert_close(rope(x, start=3), _gpt_j_rotary(x, 8, 10000.0, start=3),
                               atol=1e-12, rtol=0)


@pytest.mark.parametrize("interleaved", [False, True])
def test_partial_rotary_passes_the_rest_and_uses_d_rot_frequencies(interleaved: bool) -> None:
    x = seeded_randn(9, 4, 12)  # (t, d_h)
    partial = RotaryEmbedding(12, interleaved=interleaved, rotary_dim=4)
    full_of_four = RotaryEmbedding(4, interleaved=interleaved)  # a head of width d_rot
    assert torch.equal(partial(x, start=2)[..., 4:], x[..., 4:])
    torch.testing.assert_close(partial(x, start=2)[..., :4], full_of_four(x[..., :4], start=2))
    torch.testing.assert_close(partial.frequencies, torch.tensor([1.0, 0.01], dtype=torch.float64))
    assert torch.equal(RotaryEmbedding(12, rotary_dim=12)(x), RotaryEmbedding(12)(x))


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


def test_alibi_bias_of_no_queries_or_no_keys_is_empty_as_the_causal_mask() -> None:
    for t_q, t_k in ((0, 3), (0, 0)):
        assert causal_mask(t_q, t_k).shape == (t_q, t_k)
        assert alibi_bias(2, t_q, t_k).shape == (2, t_q, t_k)


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


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    @pytest.mark.parametrize(
        ("t", "d", "message"),
        [(4, 5, r"d must be even .* got 5"), (0, 4, r"t must be at least 1, got 0"),
         (4, 2.0, r"d must be an integer, got 2.0")],
    )
    def test_sinusoidal_d_must_be_even_and_sizes_positive(self, t: int, d: int, message: str) -> None:
        with pytest.raises(ValueError, match=message):
            sinusoidal_positions(t, d)

    @pytest.mark.parametrize("table", [lambda dtype: sinusoidal_positions(4, 2, dtype),
                                       lambda dtype: alibi_bias(2, 3, 3, dtype)])
    def test_position_tables_take_a_floating_point_dtype(self, table) -> None:
        assert table(torch.float64).dtype == torch.float64 and table(None).dtype == torch.float32
        with pytest.raises(ValueError, match=r"dtype must be a floating-point dtype, got torch.int64"):
            table(torch.int64)

    def test_rotary_embedding_refuses_integer_input(self) -> None:
        # cos and sin take x's dtype: in int64 they would be 0 or 1
        with pytest.raises(ValueError, match=r"x must be a floating-point tensor, got torch.int64"):
            RotaryEmbedding(4)(torch.ones(1, 3, 4, dtype=torch.long))

    def test_learned_positions_take_a_tensor(self) -> None:
        with pytest.raises(ValueError, match=r"input must be a 3-d tensor, got list"):
            LearnedPositions(context_length=4, d=2)([[0.0, 0.0]])

    def test_learned_positions_refuse_positions_past_the_table(self) -> None:
        positions = LearnedPositions(context_length=6, d=4)
        with pytest.raises(ValueError, match=r"at most context_length=6, got 7"):
            positions(torch.zeros(1, 7, 4))
        with pytest.raises(ValueError, match=r"at most context_length=6, got 8"):
            positions(torch.zeros(1, 3, 4), start=5)
        with pytest.raises(ValueError, match=r"last dimension d=4, got 5"):
            positions(torch.zeros(1, 3, 5))
        with pytest.raises(ValueError, match=r"start must be an integer >= 0, got -1"):
            positions(torch.zeros(1, 3, 4), start=-1)

    @pytest.mark.parametrize(
        ("make", "message"),
        [
            (lambda: RotaryEmbedding(7), r"d_h must be even .* got 7"),
            (lambda: RotaryEmbedding(8, base=1.0), r"base must be a finite number > 1, got 1.0"),
            (lambda: RotaryEmbedding(8, base=10**400), r"base must be a finite number > 1, got 1000"),
            (lambda: RotaryEmbedding(8)(torch.zeros(3, 6)), r"d_h=8, got shape \(3, 6\)"),
            (lambda: RotaryEmbedding(8)(torch.zeros(8)), r"d_h=8, got shape \(8,\)"),
            (lambda: RotaryEmbedding(8)(torch.zeros(3, 8), start=1.5), r"start must be an integer >= 0.*got 1\.5"),
            (lambda: rotary_permutation(3), r"d_h must be even .* got 3"),
        ],
    )
    def test_rope_d_h_must_be_even_and_inputs_fit(self, make: object, message: str) -> None:
        with pytest.raises(ValueError, match=message):
            make()  # type: ignore[operator]

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
            (lambda: RotaryEmbedding(8, rotary_dim=2, scaling=DynamicNTKScaling(2.0, 16)),
             r"NTK-aware scaling needs rotary_dim >= 4 .* got 2"),
            (lambda: RotaryEmbedding(8, scaling=DynamicNTKScaling(2.0, 16)).shift(torch.ones(1, 8), 1),
             r"shift needs fixed frequencies"),
            (lambda: RotaryEmbedding(8).shift(torch.ones(1, 8), -1),
             r"start must be an integer >= 0, got -1"),
        ],
    )
    def test_rotary_dim_and_scalings_must_be_valid(self, make: object, message: str) -> None:
        with pytest.raises(ValueError, match=message):
            make()  # type: ignore[operator]

    @pytest.mark.parametrize(
        ("make", "message"),
        [
            (lambda: alibi_slopes(0), r"num_heads must be at least 1, got 0"),
            (lambda: alibi_bias(2, 5, 3), r"t_q must be at most t_k .* got t_q=5 and t_k=3"),
            (lambda: alibi_bias(2, -1, 3), r"t_q must be an integer >= 0, got -1"),
        ],
    )
    def test_alibi_heads_and_t_q_must_be_valid(self, make: object, message: str) -> None:
        with pytest.raises(ValueError, match=message):
            make()  # type: ignore[operator]

    @pytest.mark.parametrize("value", NON_BOOLS)
    @pytest.mark.parametrize(
        ("flag", "call"),
        [
            ("interleaved", lambda value: RotaryEmbedding(4, interleaved=value)),
        ],
    )
    def test_flags_must_be_bools(self, flag: str, call, value: object) -> None:
        with refuses_non_bool(flag, value):
            call(value)
