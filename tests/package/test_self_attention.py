"""SelfAttentionV1 and V2: the book's printed tensors, weight transfer, batching."""

import re

import pytest
import torch
from _inputs import check_refuses_non_bools, randomize, seeded_randn
from _reference import book_tensor

from attention import SelfAttentionV1, SelfAttentionV2, attention_weights, journey_inputs

# Printed by the book's notebook ("Approach #2"): tests/package/_reference.py.
BOOK_V1_W_QUERY = book_tensor("BOOK_V1_W_QUERY")
BOOK_V1_WEIGHTS_2 = book_tensor("BOOK_V1_WEIGHTS_2")
BOOK_V1_OUTPUT = book_tensor("BOOK_V1_OUTPUT")
BOOK_V2_W_KEY = book_tensor("BOOK_V2_W_KEY")
BOOK_V2_OUTPUT = book_tensor("BOOK_V2_OUTPUT")


def test_v1_reproduces_book_with_seed_123() -> None:
    torch.manual_seed(123)
    sa_v1 = SelfAttentionV1(3, 2)
    inputs = journey_inputs()
    with torch.no_grad():
        torch.testing.assert_close(sa_v1.W_query, BOOK_V1_W_QUERY, atol=1e-4, rtol=0)
        query_2 = inputs[1] @ sa_v1.W_query  # "journey", x^(2)
        weights_2 = attention_weights(query_2[None], inputs @ sa_v1.W_key)[0]
        torch.testing.assert_close(weights_2, BOOK_V1_WEIGHTS_2, atol=1e-4, rtol=0)
        torch.testing.assert_close(sa_v1(inputs), BOOK_V1_OUTPUT, atol=1e-4, rtol=0)


def test_v2_reproduces_book_with_seed_789() -> None:
    torch.manual_seed(789)
    sa_v2 = SelfAttentionV2(3, 2)
    with torch.no_grad():
        torch.testing.assert_close(sa_v2.W_key.weight, BOOK_V2_W_KEY, atol=1e-4, rtol=0)
        torch.testing.assert_close(sa_v2(journey_inputs()), BOOK_V2_OUTPUT, atol=1e-4, rtol=0)
    assert sa_v2.W_key.bias is None


def test_v1_with_v2_weights_transposed_equals_v2() -> None:
    sa_v1, sa_v2 = SelfAttentionV1(3, 2), SelfAttentionV2(3, 2)
    with torch.no_grad():
        for name in ("W_query", "W_key", "W_value"):
            getattr(sa_v1, name).copy_(getattr(sa_v2, name).weight.T)
        inputs = journey_inputs()
        torch.testing.assert_close(sa_v1(inputs), sa_v2(inputs))


def test_batched_input_equals_each_sequence_alone() -> None:
    batch = torch.rand(3, 5, 4)
    for module in (SelfAttentionV1(4, 2), SelfAttentionV2(4, 2, qkv_bias=True)):
        with torch.no_grad():
            out = module(batch)
            assert out.shape == (3, 5, 2)
            for i in range(3):
                torch.testing.assert_close(out[i], module(batch[i]))


def plain_self_attention(x, q, k, v):
    """softmax(Q Kᵀ / sqrt(d_k)) V in float64, written out."""
    scores = q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5
    return torch.softmax(scores, dim=-1) @ v


def test_v2_with_qkv_bias_adds_a_bias_to_every_projection() -> None:
    sa = randomize(SelfAttentionV2(4, 3, qkv_bias=True)).double()
    assert all(getattr(sa, n).bias is not None for n in ("W_query", "W_key", "W_value"))
    x = seeded_randn(0, 2, 5, 4)
    q, k, v = (x @ p.weight.T + p.bias for p in (sa.W_query, sa.W_key, sa.W_value))
    with torch.no_grad():
        torch.testing.assert_close(sa(x), plain_self_attention(x, q, k, v).detach())


@pytest.mark.parametrize("cls", [SelfAttentionV1, SelfAttentionV2])
def test_dtype_argument_sets_the_parameters_and_output_dtype(cls: type) -> None:
    sa = cls(4, 3, dtype=torch.float64)
    assert {p.dtype for p in sa.parameters()} == {torch.float64}
    assert sa(seeded_randn(1, 5, 4)).dtype == torch.float64


@pytest.mark.parametrize("cls", [SelfAttentionV1, SelfAttentionV2])
def test_float16_scores_beyond_its_range_give_sdpa_s_answer(cls: type) -> None:
    """Q Kᵀ in float16 overflowed past 65504 to inf, and the row's softmax to nan; the scores and
    softmax are kept in float32, as torch's SDPA keeps them for the same float16 projections."""
    sa = cls(8, 8, dtype=torch.float16)
    with torch.no_grad():
        for p in sa.parameters():  # identity projections, V1's and V2's alike
            p.copy_(torch.eye(8, dtype=torch.float16))
        x = torch.full((1, 4, 8), 100.0, dtype=torch.float16)  # q·k = 8 · 100² = 80000 > 65504
        out = sa(x)
    expected = torch.nn.functional.scaled_dot_product_attention(x, x, x)
    assert out.dtype == torch.float16 and out.isfinite().all()
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("cls", [SelfAttentionV1, SelfAttentionV2])
def test_float16_autocast_keeps_the_scores_in_float32_as_torchs_sdpa_does(cls: type) -> None:
    """Under autocast the float32 product Q Kᵀ ran in float16 again: a score past 65504 was
    inf, its row nan (and every gradient nan), where torch's SDPA under the same autocast
    answers."""
    sa = cls(8, 8)
    with torch.no_grad():
        for p in sa.parameters():  # identity projections, V1's and V2's alike
            p.copy_(torch.eye(8))
    x = torch.full((1, 4, 8), 100.0)  # q·k = 8 · 100² = 80000 > 65504
    x[0, :, 0] = torch.arange(4.0)  # values that differ, so that the weights matter
    with torch.autocast("cpu", dtype=torch.float16):
        out = sa(x)
        expected = torch.nn.functional.scaled_dot_product_attention(x, x, x)
    out.float().sum().backward()
    assert out.dtype == expected.dtype == torch.float16 and out.isfinite().all()
    torch.testing.assert_close(out, expected)
    assert all(p.grad.isfinite().all() for p in sa.parameters())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_context_is_as_close_to_float64_as_float32_rounded_once(dtype) -> None:
    """A V ran in half precision on rounded weights: the bfloat16 context was off by 0.0183,
    the float16 one by 0.0025, where torch's SDPA (float32, rounded once) is off by 0.0149 and
    0.0018."""
    sa = SelfAttentionV2(8, 8, dtype=dtype)
    with torch.no_grad():
        for p in sa.parameters():
            p.copy_(torch.eye(8))
    x = (1.5 * seeded_randn(0, 4, 64, 8)).to(dtype)  # queries = keys = values = x
    out = sa(x)
    x64 = x.double()
    want = torch.nn.functional.scaled_dot_product_attention(x64, x64, x64)
    sdpa = torch.nn.functional.scaled_dot_product_attention(x, x, x)
    assert (out.double() - want).abs().max() <= 1.05 * (sdpa.double() - want).abs().max()


@pytest.mark.parametrize("cls", [SelfAttentionV1, SelfAttentionV2])
def test_every_weight_is_trainable_and_gets_a_gradient(cls: type) -> None:
    sa = cls(4, 3, dtype=torch.float64)
    (sa(seeded_randn(2, 5, 4)) * seeded_randn(3, 5, 3)).sum().backward()
    for name, p in sa.named_parameters():
        assert p.requires_grad and p.grad is not None and p.grad.abs().sum() > 0, name


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    @pytest.mark.parametrize("cls", [SelfAttentionV1, SelfAttentionV2])
    def test_last_dimension_must_be_d_in(self, cls: type) -> None:
        with pytest.raises(ValueError, match=r"last dimension d_in=3, got 5"):
            cls(3, 4)(torch.randn(2, 4, 5))

    @pytest.mark.parametrize(
        ("module", "x", "message"),
        [
            (SelfAttentionV1(3, 2), torch.randn(3), r"2-d or 3-d, got a 1-d tensor of shape \(3,\)"),
            (SelfAttentionV2(3, 2), torch.randn(1, 2, 4, 3), r"2-d or 3-d, got a 4-d tensor"),
        ],
        ids=["V1", "V2"],
    )
    def test_input_must_be_2d_or_3d(self, module: torch.nn.Module, x: torch.Tensor, message: str) -> None:
        with pytest.raises(ValueError, match=message):
            module(x)

    @pytest.mark.parametrize(
        ("build", "message"),
        [
            (lambda: SelfAttentionV1(3, 0), "d_out must be at least 1, got 0"),
            (lambda: SelfAttentionV2(3, 0), "d_out must be at least 1, got 0"),
            (lambda: SelfAttentionV1(3.0, 4), "d_in must be an integer, got 3.0 of type float"),
            (lambda: SelfAttentionV2(3, 4.0), "d_out must be an integer, got 4.0 of type float"),
        ],
    )
    def test_sizes_must_be_positive_integers(self, build, message: str) -> None:
        with pytest.raises(ValueError, match=re.escape(message)):
            build()

    def test_flags_must_be_bools(self) -> None:
        check_refuses_non_bools("qkv_bias", lambda value: SelfAttentionV2(3, 2, qkv_bias=value))
