"""BlockAttention: one mask rule, and QK-norm bounds the scores."""

import pytest
import torch
from _inputs import randomize

from attention import BlockAttention, TransformerBlock


@pytest.mark.parametrize("is_causal", [False, True])
def test_a_bool_mask_hides_keys_and_a_float_mask_adds(is_causal):
    """One mask rule, causal or not: an int 0/1 mask was once added to a causal block's scores."""
    torch.manual_seed(0)
    block = BlockAttention(8, 2, is_causal=is_causal)
    x = torch.randn(1, 4, 8)
    keep = torch.ones(4, 4, dtype=torch.bool).tril()
    out, weights = block(x, keep)  # bool: True = may attend
    assert not weights[..., ~keep].any()
    additive = torch.zeros(4, 4).masked_fill(~keep, float("-inf"))
    torch.testing.assert_close(block(x, additive)[0], out)  # a float mask adds


def test_qk_norm_bounds_the_scores_however_large_the_weights() -> None:
    """|q̂ · k̂| <= max|γ_q| max|γ_k| d_h for RMS-normalized rows (exercise 9.7), so with gains
    of 1 a scaled score is at most d_h / sqrt(d_h) = 2 here."""
    torch.manual_seed(0)
    x = torch.randn(1, 6, 8, dtype=torch.float64)
    for qk_norm in (False, True):
        attn = BlockAttention(8, 2, qk_norm="rms" if qk_norm else None, bias=False).double()
        with torch.no_grad():
            attn.qkv.weight.mul_(1000.0)
        q, k, _ = attn.qkv(x).split(8, dim=2)
        if qk_norm:
            q, k = attn.q_norm(q.view(1, 6, 2, 4)), attn.k_norm(k.view(1, 6, 2, 4))
        scores = torch.einsum("bihd,bjhd->bhij", q.view(1, 6, 2, 4), k.view(1, 6, 2, 4)) / 2.0
        assert (scores.abs().max() <= 4 / 2.0 + 1e-9) == qk_norm


def test_output_gate_scales_each_head_s_context_by_a_sigmoid_of_the_input() -> None:
    """Gated attention (Qiu et al., 2025): (A V ⊙ sigmoid(x W_g)) W_o; the other draws unchanged."""
    torch.manual_seed(0)
    plain = BlockAttention(8, 2, is_causal=True).double()
    torch.manual_seed(0)
    gated = randomize(BlockAttention(8, 2, is_causal=True, output_gate=True).double())
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    _, weights = gated(x)
    v = gated.qkv(x)[..., 16:].view(2, 5, 2, 4).transpose(1, 2)  # (b, h, t, d_h)
    context = (weights @ v).transpose(1, 2).reshape(2, 5, 8)
    expected = gated.out_proj(context * torch.sigmoid(x @ gated.gate.weight.T + gated.gate.bias))
    torch.testing.assert_close(gated(x)[0], expected, rtol=1e-13, atol=1e-14)
    torch.manual_seed(0)
    redrawn = BlockAttention(8, 2, is_causal=True, output_gate=True).double()
    assert torch.equal(redrawn.qkv.weight, plain.qkv.weight) and plain.gate is None
    block = TransformerBlock(8, 2, 16, is_causal=True, output_gate=True)
    assert block.attn.gate.weight.shape == (8, 8)


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    def test_output_gate_must_be_a_bool(self) -> None:
        with pytest.raises(ValueError, match="output_gate must be a bool, got 'yes'"):
            BlockAttention(8, 2, output_gate="yes")  # type: ignore[arg-type]

    @pytest.mark.parametrize(
        ("shape", "message"),
        [
            ((4, 8), r"x must be 3-d, got a 2-d tensor of shape \(4, 8\)"),
            ((1, 4, 7), r"x must have last dimension d_model=8, got 7"),
        ],
    )
    def test_x_must_be_b_t_d(self, shape, message) -> None:
        with pytest.raises(ValueError, match=message):
            BlockAttention(8, 2)(torch.randn(shape))

    @pytest.mark.parametrize("is_causal", [False, True])
    def test_a_mask_must_broadcast_to_the_scores(self, is_causal) -> None:
        block = BlockAttention(8, 2, is_causal=is_causal)
        with pytest.raises(ValueError, match=r"attn_mask must broadcast to the scores' shape "
                                             r"\(1, 2, 4, 4\), got shape \(5, 5\)"):
            block(torch.randn(1, 4, 8), torch.ones(5, 5, dtype=torch.bool))

    @pytest.mark.parametrize("is_causal", [False, True])
    def test_an_integer_mask_is_refused(self, is_causal):
        """An int 0/1 mask was added to the scores of a causal block and refused otherwise."""
        block = BlockAttention(8, 2, is_causal=is_causal)
        keep = torch.ones(4, 4, dtype=torch.bool).tril()
        with pytest.raises(ValueError, match=r"attn_mask must be bool .* got torch.int64"):
            block(torch.randn(1, 4, 8), keep.long())
