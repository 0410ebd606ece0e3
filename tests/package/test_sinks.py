"""Learned sinks in scaled_dot_product_attention: one logit per head in the softmax denominator,
the same as a zero-value key, as rescaling by the lse, with the gradient derived in chapter 15."""

import pytest
import torch
from _inputs import qkv

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


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    @pytest.mark.parametrize(("sinks", "got"), [
        (torch.zeros(3), r"shape \(3,\) and dtype torch.float32"),
        (torch.zeros(4, 1), r"shape \(4, 1\) and dtype torch.float32"),
        (torch.zeros(4, dtype=torch.long), r"shape \(4,\) and dtype torch.int64"),
    ])
    def test_sinks_of_the_wrong_shape_or_dtype_are_refused(self, sinks: torch.Tensor, got: str) -> None:
        q, k, v, _ = _inputs()
        with pytest.raises(ValueError, match=r"sinks must be a float tensor of shape \(h,\) = \(4,\).*got " + got):
            scaled_dot_product_attention(q, k, v, sinks=sinks, enable_gqa=True)
