"""Learned sinks in scaled_dot_product_attention and flash_attention: one logit per head in the
softmax denominator, the same as a zero-value key, as rescaling by the lse, with the gradient
derived in chapter 15."""

import pytest
import torch
from _inputs import qkv

from attention import flash_attention, sliding_window_mask, weights_from_lse
from attention.functional import causal_mask, scaled_dot_product_attention


def _inputs() -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    q, k, v = qkv((2, 4, 5, 3), (2, 2, 5, 3), generator=g)  # (b, h, t, d_k) with h_kv = 2
    sinks = torch.randn(4, dtype=torch.float64, generator=g)  # drawn after them
    return q, k, v, sinks


def test_sinks_equal_a_zero_value_key_scored_sigma() -> None:
    q, k, v, sinks = _inputs()
    out = scaled_dot_product_attention(q, k, v, is_causal=True, sinks=sinks, enable_gqa=True)
    keys = torch.cat([k.repeat_interleave(2, 1), torch.zeros(2, 4, 1, 3, dtype=q.dtype)], dim=2)
    values = torch.cat([v.repeat_interleave(2, 1), torch.zeros(2, 4, 1, 3, dtype=q.dtype)], dim=2)
    bias = torch.zeros(5, 5, dtype=q.dtype).masked_fill(~causal_mask(5, 5), float("-inf"))
    bias = torch.cat([bias.expand(4, 5, 5), sinks[:, None, None].expand(4, 5, 1)], dim=-1)
    expected = scaled_dot_product_attention(q, keys, values, attn_mask=bias)  # (2, 4, 5, 3)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-14)


def test_sinks_rescale_each_row_by_its_lse() -> None:
    """Z_sink = Z · ℓ / (ℓ + e^σ) = Z · sigmoid(lse - σ): the sink only shrinks each row."""
    q, k, v, sinks = _inputs()
    plain = scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    scores = q @ k.repeat_interleave(2, 1).transpose(-2, -1) / 3**0.5  # (2, 4, 5, 5)
    lse = scores.masked_fill(~causal_mask(5, 5), float("-inf")).logsumexp(-1)  # (2, 4, 5)
    shrink = torch.sigmoid(lse - sinks[:, None])[..., None]  # (2, 4, 5, 1)
    out = scaled_dot_product_attention(q, k, v, is_causal=True, sinks=sinks, enable_gqa=True)
    torch.testing.assert_close(out, plain * shrink, rtol=1e-12, atol=1e-14)


def test_sink_gradient_is_minus_sink_weight_times_d() -> None:
    """∂L/∂σ_h = -Σ_{b,i} α_i^sink D_i with D_i = dz_i · z_i; gradcheck for everything."""
    q, k, v, sinks = (x.requires_grad_() for x in _inputs())
    out = scaled_dot_product_attention(q, k, v, is_causal=True, sinks=sinks, enable_gqa=True)
    grad_out = torch.randn_like(out)
    (grad,) = torch.autograd.grad(out, sinks, grad_out)
    with torch.no_grad():
        scores = q @ k.repeat_interleave(2, 1).transpose(-2, -1) / 3**0.5
        scores = scores.masked_fill(~causal_mask(5, 5), float("-inf"))
        column = sinks[:, None, None].expand(2, 4, 5, 1)
        lse = torch.cat([scores, column], dim=-1).logsumexp(-1)  # (2, 4, 5), the sink included
        sink_weight = torch.exp(sinks[:, None] - lse)  # (2, 4, 5)
        expected = -(sink_weight * (grad_out * out).sum(-1)).sum((0, 2))  # (4,)
    torch.testing.assert_close(grad, expected, rtol=1e-12, atol=1e-14)
    assert torch.autograd.gradcheck(
        lambda *x: scaled_dot_product_attention(*x[:3], is_causal=True, sinks=x[3],
                                                enable_gqa=True),
        (q, k, v, sinks),
    )


# flash_attention's tiled forward and its hand-written backward, against the explicit kernel.
FLASH_CASES = [
    pytest.param({}, id="full"),
    pytest.param({"is_causal": True}, id="causal"),
    pytest.param({"is_causal": True, "window": 2}, id="window"),
    pytest.param({"is_causal": True, "alignment": "bottom_right"}, id="bottom-right"),
]


def _explicit(q, k, v, sinks, is_causal=False, window=None, alignment="top_left"):
    """scaled_dot_product_attention with the same mask written out (keys repeated for GQA)."""
    t_q, t_k = q.shape[-2], k.shape[-2]
    mask = None
    if is_causal:
        mask = sliding_window_mask(t_q, t_k, window or t_k, alignment=alignment)
    k, v = (x.repeat_interleave(q.shape[1] // x.shape[1], 1) for x in (k, v))
    return scaled_dot_product_attention(q, k, v, attn_mask=mask, sinks=sinks)


@pytest.mark.parametrize("options", FLASH_CASES)
def test_flash_sinks_equal_the_explicit_kernel_forward_and_backward(options: dict) -> None:
    q, k, v, sinks = (x.requires_grad_() for x in _inputs())
    q = q.detach()[..., :4, :].requires_grad_()  # t_q = 4 < t_k = 5: bottom-right differs
    out = flash_attention(q, k, v, sinks=sinks, enable_gqa=True, block_size=2, **options)
    expected = _explicit(q, k, v, sinks, **options)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-14)
    grad_out = torch.randn_like(out)
    ours = torch.autograd.grad(out, (q, k, v, sinks), grad_out)
    theirs = torch.autograd.grad(expected, (q, k, v, sinks), grad_out)
    for name, a, b in zip(("q", "k", "v", "sinks"), ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13, msg=name)


def test_flash_sinks_equal_a_zero_value_key_and_weights_from_the_lse() -> None:
    """The returned lse includes the sink: exp(s - lse) are the weights, rows summing below 1."""
    q, k, v, sinks = _inputs()
    k, v = (x.repeat_interleave(2, 1) for x in (k, v))  # (2, 4, 5, 3), one per query head
    out, lse = flash_attention(q, k, v, is_causal=True, sinks=sinks, block_size=2,
                               return_lse=True)
    zero = torch.zeros(2, 4, 1, 3, dtype=q.dtype)
    bias = torch.zeros(5, 5, dtype=q.dtype).masked_fill(~causal_mask(5, 5), float("-inf"))
    bias = torch.cat([bias.expand(4, 5, 5), sinks[:, None, None].expand(4, 5, 1)], dim=-1)
    as_key = scaled_dot_product_attention(q, torch.cat([k, zero], 2), torch.cat([v, zero], 2),
                                          attn_mask=bias)
    torch.testing.assert_close(out, as_key, rtol=1e-12, atol=1e-14)
    weights = weights_from_lse(q, k, lse, is_causal=True)  # (2, 4, 5, 5)
    torch.testing.assert_close(out, weights @ v, rtol=1e-12, atol=1e-14)
    sink_share = torch.exp(sinks[:, None] - lse)  # (2, 4, 5)
    torch.testing.assert_close(weights.sum(-1) + sink_share, torch.ones_like(lse))
    _, plain_lse = flash_attention(q, k, v, is_causal=True, return_lse=True)
    torch.testing.assert_close(lse, torch.logaddexp(plain_lse, sinks[:, None].expand_as(lse)))


def test_flash_sink_gradient_passes_gradcheck_with_the_lse() -> None:
    """gradcheck of out and lse together: lse's gradient reaches the sink as well."""
    q, k, v, sinks = (x[:1].requires_grad_() if x.dim() > 1 else x.requires_grad_()
                      for x in _inputs())  # one sequence: gradcheck is O(inputs · outputs)

    def run(*x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return flash_attention(*x[:3], sinks=x[3], enable_gqa=True, is_causal=True,
                               block_size=2, return_lse=True)

    assert torch.autograd.gradcheck(run, (q, k, v, sinks))


def test_flash_row_without_keys_keeps_its_sink_and_a_minus_inf_sink_is_no_sink() -> None:
    q, k, v, sinks = _inputs()
    empty = k[..., :0, :]  # t_k = 0: every row sees only its sink
    out, lse = flash_attention(q, empty, v[..., :0, :], sinks=sinks, enable_gqa=True,
                               return_lse=True)
    assert torch.equal(out, torch.zeros_like(out))
    torch.testing.assert_close(lse, sinks[:, None].expand_as(lse))
    none = torch.full_like(sinks, float("-inf"))
    torch.testing.assert_close(
        flash_attention(q, k, v, sinks=none, enable_gqa=True, is_causal=True, block_size=2),
        flash_attention(q, k, v, enable_gqa=True, is_causal=True), rtol=1e-12, atol=1e-14)


def test_flash_minus_inf_sink_on_a_row_that_sees_no_key_gets_a_zero_not_nan_gradient() -> None:
    """Bottom-right with t_q > t_k: the first rows see no key; a -inf sink leaves their lse -inf."""
    q, k, v = qkv((1, 2, 5, 4), (1, 2, 3, 4))
    sinks = torch.tensor([float("-inf"), 0.5], dtype=torch.float64, requires_grad=True)
    options = {"is_causal": True, "alignment": "bottom_right", "block_size": 2}
    out, lse = flash_attention(q, k, v, sinks=sinks, return_lse=True, **options)
    assert torch.isinf(lse[0, 0, :2]).all()  # the rows that saw neither a key nor a sink
    (grad,) = torch.autograd.grad(out.sum(), sinks)
    mask = causal_mask(5, 3, alignment="bottom_right")
    explicit = scaled_dot_product_attention(q, k, v, attn_mask=mask, sinks=sinks)
    (want,) = torch.autograd.grad(explicit.sum(), sinks)
    assert torch.isfinite(grad).all() and grad[0].item() == 0.0
    torch.testing.assert_close(grad, want, rtol=0, atol=1e-12)


def test_flash_half_precision_sinks_get_their_gradient_in_their_dtype() -> None:
    q, k, v, sinks = (x.to(torch.bfloat16).requires_grad_() for x in _inputs())
    out = flash_attention(q, k, v, sinks=sinks, enable_gqa=True, is_causal=True)
    (grad,) = torch.autograd.grad(out.float().sum(), sinks)
    exact = [x.detach().double().requires_grad_() for x in (q, k, v, sinks)]
    expected = torch.autograd.grad(
        _explicit(*exact, is_causal=True).sum(), exact[3])[0]
    assert out.dtype == grad.dtype == torch.bfloat16
    torch.testing.assert_close(grad.double(), expected, rtol=0.05, atol=0.05)


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    @pytest.mark.parametrize(("sinks", "got"), [
        (torch.zeros(3), r"shape \(3,\) and dtype torch.float32"),
        (torch.zeros(4, 1), r"shape \(4, 1\) and dtype torch.float32"),
        (torch.zeros(4, dtype=torch.long), r"shape \(4,\) and dtype torch.int64"),
        (torch.zeros(4, device="meta"), r"shape \(4,\) and dtype torch.float32 on meta"),
    ])
    def test_sinks_of_the_wrong_shape_or_dtype_are_refused(self, sinks: torch.Tensor, got: str) -> None:
        q, k, v, _ = _inputs()
        with pytest.raises(ValueError, match=r"sinks must be a float tensor of shape \(h,\) = \(4,\).*got " + got):
            scaled_dot_product_attention(q, k, v, sinks=sinks, enable_gqa=True)

    @pytest.mark.parametrize(
        "sinks, got",
        [
            (torch.zeros(3, dtype=torch.float64), r"shape \(3,\)"),
            (torch.zeros(4, 1, dtype=torch.float64), r"shape \(4, 1\)"),
            (torch.zeros(4, dtype=torch.long), "dtype torch.int64"),
            (torch.zeros(4, dtype=torch.float64, device="meta"), "on meta"),
            ([0.0] * 4, "list"),
        ],
    )
    def test_flash_refuses_sinks_of_the_wrong_shape_dtype_or_device(self, sinks, got) -> None:
        q, k, v, _ = _inputs()
        with pytest.raises(ValueError, match=r"sinks must be a float tensor of shape \(h,\) = \(4,\).*on cpu, got .*"
                           + got):
            flash_attention(q, k, v, sinks=sinks, enable_gqa=True)
