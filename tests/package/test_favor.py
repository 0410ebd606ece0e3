"""FAVOR+ (attention.favor): the kernel estimate unbiased, orthogonal rows standard normal, and
the output's mean and error within what the variance derived in chapter 12 allows."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from _inputs import NON_BOOLS, qkv, refuses_non_bool

from attention.favor import (
    favor_attention,
    favor_error_variance,
    positive_random_features,
    random_projection,
)
from attention.linear import FORMS

F64 = torch.float64


def test_positive_random_features_estimate_the_softmax_kernel_without_bias():
    # E[phi(x).phi(y)] = exp(x.y) and, per feature, Var = exp(2 x.y) (exp(|x + y|^2) - 1)
    # (chapter 12). The mean of N independent m-feature estimates is within 5 standard errors.
    d, m, draws = 4, 8, 1500
    generator = torch.Generator().manual_seed(7)
    x, y = torch.randn(2, 3, d, generator=generator, dtype=F64) * 0.4  # three pairs
    for orthogonal in (False, True):
        estimates = torch.stack([
            (positive_random_features(x, g) * positive_random_features(y, g)).sum(-1)
            for g in (random_projection(m, d, orthogonal, generator, F64) for _ in range(draws))
        ])  # (draws, 3)
        exact = torch.exp((x * y).sum(-1))
        variance = torch.exp(2 * (x * y).sum(-1)) * torch.expm1(((x + y) ** 2).sum(-1)) / m
        standard_error = (variance / draws).sqrt()
        assert ((estimates.mean(0) - exact).abs() < 5 * standard_error).all(), orthogonal
        # a sample variance of such skewed estimates is itself noisy: within a factor of 2.
        # Orthogonal features have at most the variance of independent ones (Choromanski et al.)
        assert (estimates.var(0) < 2 * variance).all(), orthogonal
        assert orthogonal or (estimates.var(0) > variance / 2).all()
    assert (estimates > 0).all()  # positive features: no negative kernel estimate, ever


def test_orthogonal_rows_are_orthogonal_and_each_row_is_standard_normal():
    generator = torch.Generator().manual_seed(0)
    g = random_projection(10, 4, True, generator, F64)  # blocks of 4, 4, 2 rows
    for block in (g[:4], g[4:8], g[8:]):
        gram = block @ block.T
        torch.testing.assert_close(gram, torch.diag(gram.diagonal()), atol=1e-12, rtol=0)
    # A uniformly random rotation has no preferred sign: without the sign correction of QR,
    # every first row would point the same way in its first coordinate.
    first = torch.stack([random_projection(4, 4, True, generator, F64)[0] for _ in range(2000)])
    assert first.mean(0).abs().max() < 5 / math.sqrt(2000)
    assert first.pow(2).mean(0).sub(1).abs().max() < 0.15  # variance 1 per coordinate


def test_favor_output_mean_and_error_are_what_the_variance_predicts():
    # The output is a ratio of unbiased estimates: to first order in 1/m its error has the
    # variance of favor_error_variance and its mean is off by
    # -(1/m) sum_ab alpha_a alpha_b (v_a - z) exp((x + y_a).(x + y_b)).
    d, m, draws = 4, 64, 2000
    query, key, value = qkv((6, d), seed=11, scale=0.3)
    value = value / 0.3
    exact = F.scaled_dot_product_attention(query, key, value)
    generator = torch.Generator().manual_seed(5)
    errors = torch.stack([
        favor_attention(query, key, value, num_features=m, projection=random_projection(m, d, False, generator, F64)) - exact
        for _ in range(draws)
    ])  # (draws, t, d_v)
    predicted = favor_error_variance(query, key, value, num_features=m)  # (t, d_v)
    x, y = query * d**-0.25, key * d**-0.25
    alpha = torch.softmax(x @ y.T, -1)
    s = x[:, None, :] + y[None, :, :]
    gram = torch.exp(s @ s.transpose(-2, -1))  # (t, t_k, t_k)
    deviation = value[None] - exact[:, None]  # (t, t_k, d_v)
    bias = -torch.einsum("ia,ib,iac,iab->ic", alpha, alpha, deviation, gram) / m
    assert ((errors.mean(0) - bias).abs() < 5 * (predicted / draws).sqrt() + 2 * bias.abs()).all()
    ratio = errors.pow(2).mean(0) / (predicted + bias**2)
    assert 0.8 < ratio.mean() < 1.2 and ratio.min() > 0.6


def test_favor_converges_to_softmax_attention_causal_or_not():
    query, key, value = qkv((2, 2, 12, 8), seed=2, scale=0.5)
    for causal in (False, True):
        exact = F.scaled_dot_product_attention(query, key, value, is_causal=causal)
        errors = [(favor_attention(query, key, value, num_features=m, seed=1, is_causal=causal) - exact).pow(2).mean()
                  for m in (16, 4096)]
        assert errors[1] < errors[0] / 20
        predicted = favor_error_variance(query, key, value, num_features=4096, is_causal=causal).mean()
        assert errors[1] < 4 * predicted


def test_favor_forms_agree_and_the_seed_fixes_the_draw():
    query, key, value = qkv((1, 2, 20, 8))
    outs = [favor_attention(query, key, value, num_features=32, seed=3, is_causal=True, form=f) for f in FORMS]
    for out in outs[1:]:
        torch.testing.assert_close(out, outs[0], rtol=1e-10, atol=1e-12)
    assert not torch.equal(outs[0], favor_attention(query, key, value, num_features=32, seed=4, is_causal=True))


def test_favor_is_finite_for_large_scores():
    # Without the shared maximum subtracted from the exponents, exp overflows in float32.
    query, key, value = (x.float() for x in qkv((1, 16, 64), scale=6.0))
    out = favor_attention(query, key, value, num_features=64, seed=0, is_causal=True)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("form", FORMS)
def test_favor_with_no_keys_gives_zero_rows_as_in_sdpa(form: str) -> None:
    """t_k = 0: every normalizer is 0 and each row is 0, torch's SDPA's answer (as in
    linear_attention); the error variance is 0 too."""
    query, key, value = qkv((2, 3, 4), (2, 0, 4), (2, 0, 5))
    want = F.scaled_dot_product_attention(query, key, value)  # (2, 3, 5) of zeros
    got = favor_attention(query, key, value, num_features=8, seed=0, form=form)
    torch.testing.assert_close(got, want, atol=0, rtol=0)
    variance = favor_error_variance(query, key, value, num_features=8)
    torch.testing.assert_close(variance, want, atol=0, rtol=0)


@pytest.mark.parametrize("orthogonal", [False, True])
def test_the_seed_draws_the_projection_random_projection_draws(orthogonal: bool) -> None:
    """favor_attention(seed=s) is favor_attention with random_projection's Ψ from a generator
    seeded with s, orthogonal or not as asked."""
    query, key, value = qkv((2, 6, 4), seed=3, scale=0.5)
    psi = random_projection(16, 4, orthogonal, torch.Generator().manual_seed(9))
    got = favor_attention(query, key, value, num_features=16, seed=9, orthogonal=orthogonal)
    want = favor_attention(query, key, value, num_features=16, projection=psi.double())
    torch.testing.assert_close(got, want, atol=1e-6, rtol=0)  # Ψ drawn in float32


def test_projection_dtype_is_the_one_asked_for() -> None:
    generator = torch.Generator().manual_seed(0)
    for orthogonal in (False, True):
        assert random_projection(5, 3, orthogonal, generator, F64).dtype == F64
        assert random_projection(5, 3, orthogonal, generator).dtype == torch.float32


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_favor_in_half_precision_is_the_float32_estimate_rounded_once(dtype: torch.dtype) -> None:
    """Half-precision inputs are computed in float32 and the output rounded once to their dtype."""
    query, key, value = qkv((2, 12, 8), seed=4, to=dtype)
    got = favor_attention(query, key, value, num_features=32, seed=0, is_causal=True)
    assert got.dtype == dtype
    want = favor_attention(query.float(), key.float(), value.float(), num_features=32, seed=0,
                           is_causal=True)
    torch.testing.assert_close(got, want.to(dtype), atol=0, rtol=0)


def test_orthogonal_rows_have_the_length_of_a_standard_normal_vector() -> None:
    """|ψ|² of a row is chi-squared with d_k degrees of freedom: mean d_k, variance 2 d_k (not a
    fixed length sqrt(d_k), which would keep each coordinate's variance at 1 all the same)."""
    g = random_projection(4000, 4, True, torch.Generator().manual_seed(1), F64)
    squared = g.pow(2).sum(-1)
    assert abs(squared.mean() - 4) < 0.2 and 6.5 < squared.var() < 9.5


def test_a_query_s_estimate_does_not_depend_on_the_other_queries() -> None:
    """Each query's features are rescaled by their own maximum: a long query's exponents, far
    below a short one's, do not underflow to 0 in float32 when the two are run together."""
    query, key, value = (x.float() for x in qkv((1, 2, 4), (1, 5, 4), seed=5))
    query = query * torch.tensor([0.1, 30.0])[:, None]
    together = favor_attention(query, key, value, num_features=32, seed=0)
    for i in range(2):
        alone = favor_attention(query[:, i:i + 1], key, value, num_features=32, seed=0)
        torch.testing.assert_close(together[:, i:i + 1], alone, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("is_causal", [False, True])
def test_error_variance_is_the_double_sum_of_chapter_12(is_causal: bool) -> None:
    """Var ~ (1/m) sum_ab alpha_ia alpha_ib (v_ac - z_ic)(v_bc - z_ic) exp((x_i + y_a).(x_i + y_b)),
    summed term by term in float64 at scores of order 1 (where exp(x_i . y_a) is not 1)."""
    query, key, value = qkv((2, 5, 4), seed=6)
    x, y = query * 4**-0.25, key * 4**-0.25
    scores = x @ y.transpose(-2, -1)
    if is_causal:
        scores = scores.masked_fill(~torch.ones(5, 5, dtype=torch.bool).tril(), -torch.inf)
    alpha = torch.softmax(scores, -1)  # (2, t_q, t_k)
    z = alpha @ value
    s = x[:, :, None, :] + y[:, None, :, :]  # (2, t_q, t_k, d_k): x_i + y_a
    gram = torch.exp(s @ s.transpose(-2, -1))  # (2, t_q, t_k, t_k)
    deviation = value[:, None] - z[:, :, None]  # (2, t_q, t_k, d_v)
    want = torch.einsum("nia,nib,niac,nibc,niab->nic", alpha, alpha, deviation, deviation, gram) / 7
    got = favor_error_variance(query, key, value, num_features=7, is_causal=is_causal)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-10)

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_error_variance_keeps_what_a_dominant_key_leaves(dtype: torch.dtype) -> None:
    """Two keys, d_k = 1: x = (4.5), y = (4.5, 0), v = (1, 0). The first key takes all but
    sigma(-20.25) of the weight, and v_1 - z = sigma(-20.25) is multiplied by exp(81): the
    double sum is close to exp(40.5). Subtracting z from v_1 gave 0, and a variance of 1.6e-9."""
    query, key = torch.tensor([[4.5]], dtype=dtype), torch.tensor([[4.5], [0.0]], dtype=dtype)
    value = torch.tensor([[1.0], [0.0]], dtype=dtype)
    rest = torch.sigmoid(torch.tensor(-20.25, dtype=torch.float64))  # alpha_2 = 1 - alpha_1
    alpha, deviation = (1 - rest, rest), (rest, rest - 1)  # v_a - z
    sums = torch.tensor([[81.0, 40.5], [40.5, 20.25]], dtype=torch.float64)  # (x + y_a)(x + y_b)
    want = sum(alpha[a] * alpha[b] * deviation[a] * deviation[b] * sums[a, b].exp()
               for a in range(2) for b in range(2))
    got = favor_error_variance(query, key, value, num_features=1)
    torch.testing.assert_close(got.double(), want.reshape(1, 1), rtol=1e-5, atol=0)


def test_error_variance_is_finite_where_a_weight_underflows_beside_an_overflowing_exponential() -> None:
    """x = sqrt(30), y = (0, -4 sqrt(30)) in float32: alpha_2 = e^-120 underflows to 0 and
    exp(y_2 y_2) = e^480 overflows to inf; their product entered the sum as NaN."""
    root = math.sqrt(30)
    query, key = torch.tensor([[root]]), torch.tensor([[0.0], [-4 * root]])
    value = torch.tensor([[1.0], [0.0]])
    got = favor_error_variance(query, key, value, num_features=1)
    want = favor_error_variance(query.double(), key.double(), value.double(), num_features=1)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=0)


def test_error_variance_of_equal_values_is_zero_where_the_exponential_overflows() -> None:
    """Equal values: z = v exactly, no deviation, a variance of 0, even where the pairs' largest
    exponent (x + y_1)^2 = 6400 overflows exp in float64: 0 times inf gave NaN."""
    query, key = torch.tensor([[40.0]], dtype=F64), torch.tensor([[40.0], [0.0]], dtype=F64)
    value = torch.tensor([[3.0, -1.0], [3.0, -1.0]], dtype=F64)
    for got in (favor_error_variance(query, key, value, num_features=4),
                favor_error_variance(key, key, value, num_features=4, is_causal=True)):
        assert torch.equal(got, torch.zeros_like(got)), got


# Bad input ------------------------------------------------------------------------------------


def test_a_numpy_integer_seed_draws_the_projection_of_that_int():
    """As torch.manual_seed takes one: it was refused ("seed must be an integer ..., got
    np.int64(3)"), torch.Generator.manual_seed raising a TypeError for it."""
    q, k, v = qkv((2, 5, 4))
    want = favor_attention(q, k, v, num_features=8, seed=3)
    torch.testing.assert_close(favor_attention(q, k, v, num_features=8, seed=np.int64(3)), want,
                               rtol=0, atol=0)


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    def test_favor_features_seed_and_projection_must_be_valid(self):
        q, k, v = qkv((2, 5, 4))
        with pytest.raises(ValueError, match="num_features must be at least 1, got 0"):
            favor_attention(q, k, v, num_features=0)
        with pytest.raises(ValueError, match=r"seed must be an integer in .*got 1\.5"):
            favor_attention(q, k, v, num_features=8, seed=1.5)
        with pytest.raises(ValueError, match=r"projection must have shape \(num_features, d_k\).*got \(8, 3\)"):
            favor_attention(q, k, v, num_features=8, projection=torch.randn(8, 3, dtype=F64))
        with pytest.raises(ValueError, match=r"projection must have shape \(num_features, d_k\).*got list"):
            favor_attention(q, k, v, num_features=1, projection=[[0.0] * q.shape[-1]])
        with pytest.raises(ValueError, match=r"projection must have shape \(m, d_k\).*got \(8, 3\)"):
            positive_random_features(q, torch.randn(8, 3))
        # a projection on another device failed inside the matrix product, an integer one was cast
        with pytest.raises(ValueError, match=r"projection must be floating point on the query's "
                                             r"device cpu, got torch\.float64 on meta"):
            favor_attention(q, k, v, num_features=8, projection=torch.randn(8, 4, dtype=F64, device="meta"))
        with pytest.raises(ValueError, match=r"projection must be floating point on the query's "
                                             r"device cpu, got torch\.int64 on cpu"):
            favor_attention(q, k, v, num_features=8, projection=torch.ones(8, 4, dtype=torch.int64))
        with pytest.raises(ValueError, match=r"seed must be an integer in .*got True"):
            favor_attention(q, k, v, num_features=8, seed=True)
        with pytest.raises(ValueError, match=r"seed must be an integer in \[-2\*\*63, 2\*\*64\).*got 18446744073709551616"):
            favor_attention(q, k, v, num_features=8, seed=2**64)
        with pytest.raises(ValueError, match=r"projection must have shape \(m, d_k\).*got \(4,\)"):
            positive_random_features(q, torch.randn(4))
        # lists raised an AttributeError
        with pytest.raises(ValueError, match=r"projection must have shape \(m, d_k\).*got list"):
            positive_random_features(q, [[0.0] * q.shape[-1]])
        with pytest.raises(ValueError, match=r"x must be a floating-point tensor \(\.\.\., d_k\), got list"):
            positive_random_features([[0.5, 0.0]], torch.randn(4, 2))
        # torch's IndexError and RuntimeError were raised
        with pytest.raises(ValueError, match=r"x must be a floating-point tensor .*got torch\.float32 of shape \(\)"):
            positive_random_features(torch.tensor(1.0), torch.randn(4, 1))
        with pytest.raises(ValueError, match=r"x's dtype and device, torch\.float32 on cpu, got torch\.float64 on cpu"):
            positive_random_features(torch.randn(3, 2), torch.randn(4, 2, dtype=F64))

    @pytest.mark.parametrize("orthogonal", [True, False])
    def test_projection_dtype_must_be_floating_point(self, orthogonal):
        # orthogonal rows came back truncated to integers; independent ones raised torch's error
        with pytest.raises(ValueError, match=r"dtype must be a floating-point torch\.dtype, got torch\.int64"):
            random_projection(4, 2, orthogonal=orthogonal, dtype=torch.int64)

    @pytest.mark.parametrize("orthogonal", [True, False])
    def test_projection_generator_must_be_a_generator(self, orthogonal):
        # a TypeError from torch.randn, listing its overloads
        with pytest.raises(ValueError, match=r"generator must be a torch\.Generator or None, got 3 of type int"):
            random_projection(4, 2, orthogonal=orthogonal, generator=3)

    @pytest.mark.parametrize("value", NON_BOOLS)
    @pytest.mark.parametrize(
        ("flag", "call"),
        [
            ("orthogonal", lambda value: random_projection(4, 4, orthogonal=value)),
            ("orthogonal", lambda value: favor_attention(*qkv((1, 6, 4)), num_features=4, orthogonal=value)),
            ("orthogonal", lambda value: favor_attention(
                *qkv((1, 6, 4)), num_features=4, projection=torch.randn(4, 4), orthogonal=value)),
        ],
        ids=["random_projection", "favor_attention", "favor_attention with a projection"],
    )
    def test_flags_must_be_bools(self, flag: str, call, value: object) -> None:
        with refuses_non_bool(flag, value):
            call(value)
