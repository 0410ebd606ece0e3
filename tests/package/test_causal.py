"""CausalAttention: the book's printed tensor, the mask, dropout, batching."""

import re

import pytest
import torch
from _inputs import check_refuses_non_bools, randomize, seeded_randn
from _reference import book_tensor

from attention import CausalAttention, causal_mask, journey_batch, scaled_dot_product_attention

# The book's notebook ("Approach #4") prints the output of a two-head MultiHeadAttentionWrapper
# built right after torch.manual_seed(123) (BOOK_WRAPPER_OUTPUT, tests/package/_reference.py). Its
# first head is the first CausalAttention(3, 2, 6, 0.0) drawn after that seed, so columns 0-1 of
# that printout are this module's output for each copy of the batch.
BOOK_CAUSAL_OUTPUT = book_tensor("BOOK_WRAPPER_OUTPUT")[..., :2]  # (2, 6, 2)


def test_reproduces_book_with_seed_123() -> None:
    torch.manual_seed(123)
    ca = CausalAttention(3, 2, context_length=6, dropout=0.0)
    with torch.no_grad():
        out = ca(journey_batch())
    assert out.shape == (2, 6, 2)
    torch.testing.assert_close(out, BOOK_CAUSAL_OUTPUT, atol=1e-4, rtol=0)


def test_mask_buffer_is_the_upper_triangle_and_not_a_parameter() -> None:
    ca = CausalAttention(3, 2, context_length=5, dropout=0.0)
    assert torch.equal(ca.mask, ~causal_mask(5))
    assert "mask" in dict(ca.named_buffers()) and "mask" not in ca.state_dict()
    assert all(p is not ca.mask for p in ca.parameters())


def test_equals_functional_sdpa_with_is_causal() -> None:
    ca = CausalAttention(4, 3, context_length=8, dropout=0.0, qkv_bias=True)
    x = torch.randn(2, 5, 4)
    with torch.no_grad():
        expected = scaled_dot_product_attention(
            ca.W_query(x), ca.W_key(x), ca.W_value(x), is_causal=True
        )
        torch.testing.assert_close(ca(x), expected)


def test_unbatched_input_equals_batch_of_one_and_shorter_sequences_work() -> None:
    ca = CausalAttention(3, 2, context_length=6, dropout=0.0)
    x = torch.randn(4, 3)  # t = 4 < context_length
    with torch.no_grad():
        torch.testing.assert_close(ca(x), ca(x[None])[0])


def test_dropout_only_in_training_mode() -> None:
    torch.manual_seed(0)
    ca = CausalAttention(3, 2, context_length=6, dropout=0.5)
    x = journey_batch()
    with torch.no_grad():
        ca.eval()
        first, second = ca(x), ca(x)
        ca.train()
        dropped = ca(x)
    torch.testing.assert_close(first, second)
    assert not torch.allclose(first, dropped)


def test_qkv_bias_gives_all_three_projections_a_bias_float64_formula() -> None:
    ca = randomize(CausalAttention(4, 3, context_length=8, dropout=0.0, qkv_bias=True)).double()
    x = seeded_randn(0, 2, 6, 4)
    with torch.no_grad():
        q, k, v = (x @ p.weight.T + p.bias for p in (ca.W_query, ca.W_key, ca.W_value))
        scores = (q @ k.transpose(-2, -1) / 3**0.5).masked_fill(~causal_mask(6), float("-inf"))
        torch.testing.assert_close(ca(x), torch.softmax(scores, dim=-1) @ v)


def test_future_tokens_get_exactly_zero_weight_even_for_huge_scores() -> None:
    """-inf, not a large negative number: a past score far below it must still win."""
    ca = CausalAttention(1, 1, context_length=4, dropout=0.0).double()
    with torch.no_grad():
        for p, w in ((ca.W_query, 1.0), (ca.W_key, -1.0), (ca.W_value, 1.0)):
            p.weight.fill_(w)
        x = torch.tensor([[[1000.0], [5.0], [-7.0]]], dtype=torch.float64)  # score(0, 0) = -1e6
        out = ca(x)
    assert out[0, 0, 0] == 1000.0  # token 0 sees only itself, however low its score


def test_float16_scores_beyond_its_range_give_sdpa_s_answer() -> None:
    """Q Kᵀ was computed in float16: a score past 65504 became inf and its row nan, where torch's
    SDPA (and the package's), reading the same float16 projections, answers."""
    ca = CausalAttention(8, 8, context_length=4, dropout=0.0, dtype=torch.float16)
    with torch.no_grad():
        for p in (ca.W_query, ca.W_key, ca.W_value):
            p.weight.copy_(torch.eye(8))
        x = torch.full((1, 4, 8), 100.0, dtype=torch.float16)  # q·k = 8 · 100² = 80000 > 65504
        expected = torch.nn.functional.scaled_dot_product_attention(x, x, x, is_causal=True)
        out = ca(x)
    assert out.isfinite().all()
    torch.testing.assert_close(out, expected)


def test_float16_autocast_keeps_the_scores_in_float32_as_torchs_sdpa_does() -> None:
    """Under autocast the float32 product Q Kᵀ ran in float16 again: a score past 65504 was
    inf and its row nan, where torch's SDPA under the same autocast answers."""
    ca = CausalAttention(8, 8, context_length=4, dropout=0.0)
    with torch.no_grad():
        for p in (ca.W_query, ca.W_key, ca.W_value):
            p.weight.copy_(torch.eye(8))
        x = torch.full((1, 4, 8), 100.0)  # q·k = 8 · 100² = 80000 > 65504
        x[0, :, 0] = torch.arange(4.0)  # values that differ, so that the weights matter
        with torch.autocast("cpu", dtype=torch.float16):
            out = ca(x)
            expected = torch.nn.functional.scaled_dot_product_attention(x, x, x, is_causal=True)
    assert out.dtype == expected.dtype == torch.float16 and out.isfinite().all()
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_context_is_as_close_to_float64_as_float32_rounded_once(dtype) -> None:
    """A V ran in half precision on rounded weights: the bfloat16 context was off by 0.0163,
    the float16 one by 0.0023, where torch's SDPA and float32 rounded once are off by 0.0149
    and 0.0017."""
    ca = CausalAttention(8, 8, context_length=64, dropout=0.0, dtype=dtype)
    with torch.no_grad():
        for p in (ca.W_query, ca.W_key, ca.W_value):
            p.weight.copy_(torch.eye(8))
        x = (1.5 * seeded_randn(0, 4, 64, 8)).to(dtype)  # queries = keys = values = x
        out = ca(x)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    exact = sdpa(*3 * [x.double()], is_causal=True)  # (4, 64, 8)
    once = sdpa(*3 * [x.float()], is_causal=True).to(dtype)  # float32, rounded once
    assert (out.double() - exact).abs().max() <= 1.01 * (once.double() - exact).abs().max()


def test_a_meta_module_loaded_with_assign_builds_its_mask_on_the_tensors_device() -> None:
    """load_state_dict(..., assign=True) gave the parameters the checkpoint's CPU tensors and
    left the mask, in no checkpoint, on the meta device: the forward raised "Tensor on device
    cpu is not on the expected device meta!"."""
    torch.manual_seed(0)
    trained = CausalAttention(4, 4, context_length=6, dropout=0.0)
    loaded = torch.nn.Sequential(CausalAttention(4, 4, context_length=6, dropout=0.0, device="meta"))
    loaded.load_state_dict({f"0.{k}": v for k, v in trained.state_dict().items()}, assign=True)
    assert torch.equal(loaded[0].mask, trained.mask)
    x = seeded_randn(0, 2, 5, 4).float()
    assert torch.equal(loaded(x), trained(x))


def test_dtype_and_device_arguments_reach_parameters_and_mask() -> None:
    ca = CausalAttention(4, 3, context_length=5, dropout=0.0, dtype=torch.float64)
    assert {p.dtype for p in ca.parameters()} == {torch.float64}
    meta = CausalAttention(4, 3, context_length=5, dropout=0.0, device="meta")
    assert meta.mask.device.type == "meta" and meta.W_query.weight.device.type == "meta"


def test_an_old_checkpoint_with_a_saved_mask_loads_strictly_also_when_nested() -> None:
    """The saved mask is dropped under the module's own prefix, at any depth."""
    ca = CausalAttention(4, 3, context_length=5, dropout=0.0)
    old = {**ca.state_dict(), "mask": torch.zeros(5, 5, dtype=torch.bool)}
    ca.load_state_dict(old)  # strict
    assert torch.equal(ca.mask, ~causal_mask(5))
    outer = torch.nn.Sequential(CausalAttention(4, 3, context_length=5, dropout=0.0))
    outer.load_state_dict({f"0.{k}": v for k, v in old.items()})
    assert torch.equal(outer[0].mask, ~causal_mask(5))


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    @pytest.mark.parametrize("dropout", [-0.1, 1.0, 1.5])
    def test_dropout_must_be_in_the_unit_interval(self, dropout: float) -> None:
        with pytest.raises(ValueError, match=rf"dropout must be in \[0, 1\), got {dropout}"):
            CausalAttention(3, 4, 6, dropout)

    def test_dropout_must_be_a_number(self) -> None:
        with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\), got '0.1'"):
            CausalAttention(3, 4, 6, "0.1")

    def test_sequence_must_fit_the_context_length(self) -> None:
        with pytest.raises(ValueError, match=r"at most context_length=6, got 7"):
            CausalAttention(3, 4, 6, 0.0)(torch.randn(2, 7, 3))

    def test_last_dimension_must_be_d_in(self) -> None:
        with pytest.raises(ValueError, match=r"last dimension d_in=3, got 5"):
            CausalAttention(3, 4, 6, 0.0)(torch.randn(2, 4, 5))

    def test_input_must_be_2d_or_3d(self) -> None:
        with pytest.raises(ValueError, match=r"2-d or 3-d, got a 4-d tensor"):
            CausalAttention(3, 2, 6, 0.0)(torch.randn(1, 1, 4, 3))

    @pytest.mark.parametrize("context_length", [0, -1])
    def test_context_length_must_be_at_least_one(self, context_length: int) -> None:
        with pytest.raises(ValueError, match=f"context_length must be at least 1, got {context_length}"):
            CausalAttention(3, 4, context_length, 0.0)

    @pytest.mark.parametrize(
        ("build", "message"),
        [
            (lambda: CausalAttention(3, 0, 6, 0.0), "d_out must be at least 1, got 0"),
            (lambda: CausalAttention(3, 4, 6.0, 0.0), "context_length must be an integer, got 6.0"),
        ],
    )
    def test_sizes_must_be_positive_integers(self, build, message: str) -> None:
        with pytest.raises(ValueError, match=re.escape(message)):
            build()

    def test_flags_must_be_bools(self) -> None:
        check_refuses_non_bools("qkv_bias", lambda value: CausalAttention(3, 2, 6, 0.0, qkv_bias=value))
