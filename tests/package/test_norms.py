"""RMSNorm equals torch.nn.RMSNorm; what it keeps and drops from LayerNorm; norm_matrix."""

import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from _inputs import NON_BOOLS, refuses_non_bool, seeded_randn
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from attention import RMSNorm
from attention.norms import make_norm, norm_matrix


def _random_gain(norm: nn.Module) -> nn.Module:
    with torch.no_grad():
        for parameter in norm.parameters():
            parameter.uniform_(-1.5, 1.5)  # any gain (and bias), not the initial ones
    return norm


@pytest.mark.parametrize("eps", [1e-5, 1e-6, 0.1])
@pytest.mark.parametrize("shape", [(7,), (3, 7), (2, 4, 5, 7)])
def test_rmsnorm_equals_torch_rmsnorm_in_float64(shape: tuple, eps: float) -> None:
    torch.manual_seed(0)
    ours = _random_gain(RMSNorm(7, eps).double())
    theirs = nn.RMSNorm(7, eps=eps, dtype=torch.float64)
    theirs.load_state_dict(ours.state_dict())  # both keep γ as "weight"
    x = 3 * torch.randn(shape, dtype=torch.float64) + 1
    torch.testing.assert_close(ours(x), theirs(x), atol=1e-14, rtol=0)
    expected = ours.weight * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    torch.testing.assert_close(ours(x), expected, atol=1e-14, rtol=0)


def test_rms_norm_in_float16_does_not_overflow_where_torch_does_not() -> None:
    """x² overflows float16 once |x| > 256; torch keeps the mean square in float32."""
    x = torch.full((1, 8), 300.0, dtype=torch.float16)
    theirs = nn.RMSNorm(8, eps=1e-5, dtype=torch.float16)
    torch.testing.assert_close(RMSNorm(8, dtype=torch.float16)(x), theirs(x))  # ones, not zeros


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_rms_norm_in_half_precision_equals_torchs_float32_computation(
    dtype: torch.dtype,
) -> None:
    torch.manual_seed(0)
    ours = _random_gain(RMSNorm(256)).to(dtype)
    theirs = nn.RMSNorm(256, eps=1e-5, dtype=dtype)
    theirs.load_state_dict(ours.state_dict())
    x = (100 * torch.randn(64, 256)).to(dtype)
    got = ours(x)
    assert got.dtype == dtype
    torch.testing.assert_close(got, theirs(x), atol=0, rtol=0)
    # against float64, as accurate as the exact answer rounded once (2x: float32 then half)
    x64, gain = x.double(), ours.weight.double()
    exact = gain * x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-5)
    rounding = (exact.to(dtype).double() - exact).abs().max()
    assert (got.double() - exact).abs().max() <= 2 * rounding


def test_rms_norm_in_float32_keeps_its_float32_formula() -> None:
    """Half precision is upcast; float32 (and float64) inputs are computed as written."""
    torch.manual_seed(0)
    norm = _random_gain(RMSNorm(16))
    x = 5 * torch.randn(4, 16)
    expected = norm.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5))
    assert torch.equal(norm(x), expected)


def test_a_numpy_eps_is_taken_as_a_float() -> None:
    for kind in ("layer", "rms"):
        assert make_norm(kind, 4, np.float32(0.25)).eps == 0.25


@pytest.mark.parametrize("kind", ["layer", "rms"])
@pytest.mark.parametrize("eps", [np.float32(0.25), torch.tensor(0.25)])
def test_either_kind_keeps_its_eps_as_a_python_float(kind: str, eps: object) -> None:
    # LayerNorm kept a 0-d tensor or a NumPy scalar as given, RMSNorm the float it reads
    assert type(make_norm(kind, 4, eps).eps) is float


def test_an_offset_gain_is_the_offset_plus_the_weight_summed_in_float32() -> None:
    """Gemma's and Qwen3-Next's norms store γ - 1; transformers adds the 1 in float32. The sum
    rounded to bfloat16 first moved outputs by a bfloat16 step (17-22% of them in test_hf)."""
    torch.manual_seed(0)
    norm = RMSNorm(32, offset=1.0)
    assert torch.equal(norm.weight, torch.zeros(32))  # γ = 1 to start, as Gemma's norm
    x = torch.randn(4, 32, dtype=torch.float64)
    torch.testing.assert_close(norm.double()(x), RMSNorm(32).double()(x), rtol=0, atol=0)
    half = _random_gain(RMSNorm(32, offset=1.0)).bfloat16()
    x = torch.randn(4, 32, dtype=torch.bfloat16)
    x32 = x.float()
    expected = (1.0 + half.weight.float()) * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-5))
    torch.testing.assert_close(half(x), expected.bfloat16(), rtol=0, atol=0)


def test_norm_matrix_of_an_offset_rmsnorm_is_its_whole_gain() -> None:
    # the weight of a Gemma-style norm stores γ - 1: its matrix is diag(1 + weight)
    norm = _random_gain(RMSNorm(4, offset=1.0))
    torch.testing.assert_close(norm_matrix(norm), torch.diag(1.0 + norm.weight.detach()))


def test_layernorm_is_rmsnorm_of_the_centred_vector_plus_beta() -> None:
    torch.manual_seed(0)
    ln = _random_gain(nn.LayerNorm(9, eps=1e-5, dtype=torch.float64))
    rms = RMSNorm(9, eps=1e-5).double()
    rms.weight.data.copy_(ln.weight.data)
    x = 4 * torch.randn(5, 9, dtype=torch.float64) - 2
    centred = x - x.mean(-1, keepdim=True)
    torch.testing.assert_close(ln(x), rms(centred) + ln.bias, atol=1e-13, rtol=0)
    assert not torch.allclose(ln(x), rms(x) + ln.bias, atol=1e-3)  # x's mean is not 0


def test_rmsnorm_ignores_scale_but_not_shift() -> None:
    torch.manual_seed(0)
    rms = RMSNorm(6, eps=1e-12).double()
    x = torch.randn(4, 6, dtype=torch.float64)
    torch.testing.assert_close(rms(7.5 * x), rms(x), atol=1e-10, rtol=0)
    assert not torch.allclose(rms(x + 1.0), rms(x), atol=1e-3)
    ln = nn.LayerNorm(6, eps=1e-12, dtype=torch.float64)
    torch.testing.assert_close(ln(x + 1.0), ln(x), atol=1e-10, rtol=0)  # LayerNorm re-centres


def test_the_gradient_of_a_weight_before_rmsnorm_shrinks_as_the_weight_grows() -> None:
    """RMSNorm(x c W) = RMSNorm(x W), so dL/d(cW) = dL/dW / c: Zhang and Sennrich's argument."""
    torch.manual_seed(0)
    rms = RMSNorm(5, eps=1e-300).double()  # eps -> 0: exactly scale-free
    x, target = torch.randn(8, 4, dtype=torch.float64), torch.randn(8, 5, dtype=torch.float64)
    weight = torch.randn(4, 5, dtype=torch.float64)
    grads = []
    for scale in (1.0, 10.0):
        w = (scale * weight).requires_grad_()
        F.mse_loss(rms(x @ w), target).backward()
        grads.append(w.grad)
    torch.testing.assert_close(grads[1], grads[0] / 10, atol=1e-12, rtol=0)


@pytest.mark.parametrize("kind", ["layer", "rms"])
@given(data=st.data())
@settings(max_examples=20, deadline=None)
def test_norm_matrix_is_the_linear_part(kind: str, data: st.DataObject) -> None:
    """norm(x) = (x N) / s + β, s the token's standard deviation (LayerNorm) or RMS."""
    seed = data.draw(st.integers(0, 2**16))
    torch.manual_seed(seed)
    norm = _random_gain(make_norm(kind, 6, eps=1e-5).double())
    x = torch.randn(3, 6, dtype=torch.float64) * data.draw(st.floats(0.1, 10.0))
    if kind == "layer":
        s = torch.sqrt(x.var(-1, correction=0, keepdim=True) + 1e-5)
        expected = x @ norm_matrix(norm) / s + norm.bias
    else:
        expected = x @ norm_matrix(norm) / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)
    torch.testing.assert_close(norm(x), expected, atol=1e-12, rtol=0)


def test_make_norm_builds_each_kind() -> None:
    assert isinstance(make_norm("rms", 4), RMSNorm)
    layer = make_norm("layer", 4, eps=1e-6, bias=False)
    assert isinstance(layer, nn.LayerNorm) and layer.bias is None and layer.eps == 1e-6


@pytest.mark.parametrize("kind", ["layer", "rms"])
def test_make_norm_passes_eps_and_dtype_to_either_kind(kind: str) -> None:
    norm = make_norm(kind, 4, eps=1e-3, dtype=torch.float64)
    assert norm.eps == 1e-3 and norm.weight.dtype == torch.float64
    x = seeded_randn(0, 3, 4)
    if kind == "rms":
        expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-3)
    else:
        centred = x - x.mean(-1, keepdim=True)
        expected = centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + 1e-3)
    torch.testing.assert_close(norm(x), expected, atol=1e-14, rtol=0)


@pytest.mark.parametrize("kind", ["layer", "rms"])
def test_norm_matrix_is_detached_from_the_gain(kind: str) -> None:
    matrix = norm_matrix(make_norm(kind, 3))
    assert not matrix.requires_grad and matrix.grad_fn is None


@pytest.mark.parametrize("affine", [True, False])
def test_norm_matrix_of_torchs_rmsnorm_is_its_gain(affine: bool) -> None:
    # x Γ / rms(x) is what torch.nn.RMSNorm computes: Γ = diag(γ), or I without a gain
    norm = nn.RMSNorm(3, eps=1e-5, elementwise_affine=affine, dtype=torch.float64)
    if affine:
        nn.init.normal_(norm.weight, generator=torch.Generator().manual_seed(0))
    x = seeded_randn(1, 5, 3)
    rms = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)
    torch.testing.assert_close(x @ norm_matrix(norm).double() / rms, norm(x), atol=1e-12, rtol=0)


def test_norm_matrix_of_a_layernorm_without_gain_is_the_centring_matrix() -> None:
    """No γ (elementwise_affine=False) is γ = 1: Γ = I - 11ᵀ/d, as LayerNorm computes (in
    torch's default dtype: such a LayerNorm holds no tensor to take a dtype from)."""
    norm = nn.LayerNorm(3, elementwise_affine=False)
    matrix = norm_matrix(norm)
    torch.testing.assert_close(matrix, torch.eye(3) - 1 / 3, atol=0, rtol=0)
    x = seeded_randn(1, 5, 3)
    s = torch.sqrt(x.var(-1, correction=0, keepdim=True) + norm.eps)
    torch.testing.assert_close(x @ matrix.double() / s, norm(x), atol=1e-6, rtol=0)


class TestBadInput:
    def test_an_eps_that_requires_grad_is_refused(self) -> None:  # the float would drop it
        with pytest.raises(ValueError, match=r"eps must be a number or a tensor that does not require grad .*got tensor\(0.2500, requires_grad=True\)"):
            make_norm("layer", 4, torch.tensor(0.25, requires_grad=True))

    @pytest.mark.parametrize(
        ("make", "message"),
        [
            (lambda: RMSNorm(0), r"d must be at least 1, got 0"),
            (lambda: RMSNorm(4, eps=0.0), r"eps must be a finite number > 0, got 0.0"),
            (lambda: RMSNorm(4, eps=True), r"eps must be a finite number > 0, got True"),
            (lambda: RMSNorm(4)(torch.zeros(2, 5)), r"\(\.\.\., d\) with d=4, got \(2, 5\)"),
            (lambda: RMSNorm(4)(torch.tensor(1.0)), r"with d=4, got \(\)"),
            (lambda: RMSNorm(4)(torch.ones(2, 4, dtype=torch.long)), r"x must be a floating-point tensor, got torch.int64"),
            (lambda: RMSNorm(4)([1.0] * 4), r"x must be a floating-point tensor, got list"),
            (lambda: make_norm("batch", 4), r"norm must be one of \('layer', 'rms'\), got 'batch'"),
            (lambda: RMSNorm(4, eps=math.inf), r"eps must be a finite number > 0, got inf"),
            (lambda: RMSNorm(4, offset=-1.0), r"offset must be a finite number >= 0, got -1.0"),
            (lambda: RMSNorm(4, offset=math.nan), r"offset must be a finite number >= 0, got nan"),
            (lambda: make_norm("layer", 0), r"d must be at least 1, got 0"),
            (lambda: make_norm("layer", 4, eps=-1.0), r"eps must be a finite number > 0, got -1.0"),
            (lambda: norm_matrix(nn.Linear(2, 2)), r"RMSNorm or a 1-d nn.RMSNorm or nn.LayerNorm, got Linear"),
            (lambda: norm_matrix(nn.LayerNorm((2, 3))), r"1-d nn.RMSNorm or nn.LayerNorm, got LayerNorm"),
            (lambda: norm_matrix(nn.RMSNorm((2, 3))), r"1-d nn.RMSNorm or nn.LayerNorm, got RMSNorm"),
        ],
    )
    def test_sizes_eps_and_norm_kinds_must_be_valid(self, make: object, message: str) -> None:
        with pytest.raises(ValueError, match=message):
            make()  # type: ignore[operator]

    @pytest.mark.parametrize("value", NON_BOOLS)
    @pytest.mark.parametrize(
        ("flag", "call"),
        [
            ("bias", lambda value: make_norm("layer", 4, bias=value)),
            ("bias", lambda value: make_norm("rms", 4, bias=value)),
        ],
        ids=["layer", "rms"],
    )
    def test_flags_must_be_bools(self, flag: str, call, value: object) -> None:
        with refuses_non_bool(flag, value):
            call(value)


def test_rms_norm_returns_the_inputs_dtype_as_torch_does_when_the_gain_is_wider():
    """A bfloat16 x with a float32 γ gives bfloat16, torch.nn.RMSNorm's answer, not float32."""
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(0)).bfloat16()
    ours, theirs = RMSNorm(8, eps=1e-5), torch.nn.RMSNorm(8, eps=1e-5)
    with torch.no_grad():
        ours.weight.copy_(torch.linspace(0.5, 2.0, 8))
        theirs.weight.copy_(ours.weight)
        with warnings.catch_warnings():  # torch: no fused kernel for mixed dtypes
            warnings.simplefilter("ignore", UserWarning)
            want = theirs(x)
        got = ours(x)
    assert got.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(got, want, rtol=0, atol=0)
