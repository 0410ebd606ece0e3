"""weights_from_lse: any rows of the weights from the log-sum-exp flash_attention (or flex
attention) saved, equal to the explicit weights in float64."""

import math

import numpy as np
import pytest
import torch
from _inputs import qkv
from torch.nn.attention.flex_attention import AuxRequest, create_block_mask, flex_attention

from attention import attention_weights, flash_attention, masks, weights_from_lse


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("score_mod", [None, masks.alibi(2), masks.soft_cap(1.5)], ids=["none", "alibi", "soft_cap"])
@pytest.mark.parametrize("rows", [slice(0, 12), slice(5, 9)])
def test_weights_from_flex_attentions_lse_under_its_mask_and_score_rules(score_mod, rows):
    q, k, v = qkv((2, 2, 12, 8))
    doc_ids = torch.tensor([[0] * 5 + [1] * 7, [0] * 2 + [1] * 6 + [2] * 4])  # (b, t): per row
    rule = masks.and_masks(masks.causal(), masks.document(doc_ids))
    block_mask = create_block_mask(rule, 2, None, 12, 12, device="cpu", BLOCK_SIZE=4)
    _, aux = flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=0.4,
                            return_aux=AuxRequest(lse=True))
    got = weights_from_lse(q[..., rows, :], k, aux.lse[..., rows], scale=0.4, mask_mod=rule,
                           score_mod=score_mod, row_offset=rows.start)
    scores = q @ k.transpose(-2, -1) * 0.4  # (b, h, t, t): the dense softmax, written out
    scores = scores if score_mod is None else masks.apply_score_mod(scores, score_mod)
    want = torch.softmax(scores.masked_fill(~masks.to_dense(rule, 12, 12, b=2, h=2), -math.inf), dim=-1)
    torch.testing.assert_close(got, want[..., rows, :], rtol=0, atol=1e-12)
    if score_mod is not None:  # the rule matters: without it the weights are wrong
        plain = weights_from_lse(q[..., rows, :], k, aux.lse[..., rows], scale=0.4, mask_mod=rule,
                                 row_offset=rows.start)
        assert (plain - want[..., rows, :]).abs().max() > 1e-3


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("rows", [slice(0, 13), slice(0, 1), slice(5, 9), slice(12, 13)])
def test_weights_of_any_block_of_rows_equal_the_explicit_weights(is_causal, rows):
    q, k, v = qkv((2, 3, 13, 8))
    _, lse = flash_attention(q, k, v, is_causal=is_causal, block_size=4, return_lse=True)
    got = weights_from_lse(q[..., rows, :], k, lse[..., rows], is_causal=is_causal,
                           row_offset=rows.start)
    want = attention_weights(q, k, is_causal=is_causal)[..., rows, :]
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    torch.testing.assert_close(got.sum(-1), torch.ones_like(got.sum(-1)), rtol=0, atol=1e-12)


def test_a_row_that_sees_nothing_has_lse_minus_inf_and_zero_weights():
    q, k, v = qkv((2, 3, 6, 8), (2, 3, 3, 8))  # bottom-right: queries 0, 1 and 2 sit before every key
    out, lse = flash_attention(
        q, k, v, is_causal=True, block_size=2, alignment="bottom_right", return_lse=True
    )
    assert bool((lse[..., :3] == -math.inf).all()) and bool(lse[..., 3:].isfinite().all())
    weights = weights_from_lse(q, k, lse, is_causal=True, row_offset=3 - 6)  # t_k - t_q
    assert not weights[..., :3, :].any() and not out[..., :3, :].any()
    want = attention_weights(q, k, attn_mask=torch.ones(6, 3, dtype=torch.bool).tril(-3))
    torch.testing.assert_close(weights, want, rtol=0, atol=1e-12)


def test_half_precision_keeps_lse_in_float32_and_weights_close():
    q, k, v = qkv((2, 3, 13, 8))
    out, lse = flash_attention(
        q.bfloat16(), k.bfloat16(), v.bfloat16(), is_causal=True, block_size=4, return_lse=True
    )
    assert out.dtype == torch.bfloat16 and lse.dtype == torch.float32
    weights = weights_from_lse(q.bfloat16(), k.bfloat16(), lse, is_causal=True)
    want = attention_weights(q, k, is_causal=True)
    plain = attention_weights(q.bfloat16(), k.bfloat16(), is_causal=True).double()
    assert weights.dtype == torch.bfloat16
    assert (weights.double() - want).abs().max() <= 2 * (plain - want).abs().max()


def test_grouped_query_heads_give_one_lse_per_query_head():
    g = torch.Generator().manual_seed(2)
    q = torch.randn(2, 4, 9, 8, generator=g, dtype=torch.float64)  # (b, h, t, d_h)
    k, v = (torch.randn(2, 2, 9, 8, generator=g, dtype=torch.float64) for _ in range(2))
    _, lse = flash_attention(q, k, v, is_causal=True, block_size=4, enable_gqa=True, return_lse=True)
    k_rep = k.repeat_interleave(2, dim=1)  # (b, h, t, d_h)
    torch.testing.assert_close(weights_from_lse(q, k_rep, lse, is_causal=True),
                               attention_weights(q, k, is_causal=True, enable_gqa=True), rtol=0, atol=1e-12)


def test_a_query_broadcast_against_a_batch_of_keys_takes_the_lse_flash_returns():
    """Leading dimensions broadcast as in a batched matmul: lse has the weights' rows' shape,
    (b, h, n) for a query (1, h, n, d_k) against keys (b, h, t_k, d_k), as flash_attention gives."""
    q, k, v = qkv((1, 2, 5, 8), (3, 2, 7, 8))
    _, lse = flash_attention(q, k, v, block_size=4, return_lse=True)
    assert lse.shape == (3, 2, 5)
    want = attention_weights(q, k)  # (3, 2, 5, 7)
    torch.testing.assert_close(weights_from_lse(q, k, lse), want, rtol=0, atol=1e-12)


def test_scale_zero_is_a_scale_not_the_default_and_gives_uniform_weights():
    q, k, v = qkv((2, 3, 5, 8), (2, 3, 7, 8))
    _, lse = flash_attention(q, k, v, scale=0.0, block_size=4, return_lse=True)
    got = weights_from_lse(q, k, lse, scale=0.0)
    torch.testing.assert_close(got, torch.full_like(got, 1 / 7), rtol=0, atol=1e-15)
    torch.testing.assert_close(got, attention_weights(q, k, scale=0.0), rtol=0, atol=1e-15)


def test_a_row_whose_lse_is_minus_inf_is_zero_even_where_its_scores_are_finite():
    """The rule is the lse's, not the mask's: no mask is passed here, every score is finite."""
    q, k, _ = qkv((2, 4, 8), (2, 6, 8))
    lse = torch.logsumexp(q @ k.transpose(-2, -1) / math.sqrt(8), dim=-1)  # (2, 4), float64
    lse[:, 1] = -math.inf
    got = weights_from_lse(q, k, lse)
    assert not got[:, 1].any()
    want = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(8), dim=-1)
    torch.testing.assert_close(got[:, [0, 2, 3]], want[:, [0, 2, 3]], rtol=0, atol=1e-12)


def test_row_offset_may_be_a_numpy_integer_as_every_count_may():
    # it was refused as "row_offset must be an integer, got np.int64(5)"
    q, k, v = qkv((2, 3, 13, 8))
    _, lse = flash_attention(q, k, v, is_causal=True, return_lse=True)
    rows = (q[..., 5:, :], k, lse[..., 5:])
    got = weights_from_lse(*rows, is_causal=True, row_offset=np.int64(5))
    torch.testing.assert_close(got, weights_from_lse(*rows, is_causal=True, row_offset=5), rtol=0, atol=0)


def test_a_mask_rule_may_answer_a_python_bool_as_dense_attention_takes_it():
    q, k, _ = qkv((1, 1, 4, 8), (1, 1, 4, 8))
    _, lse = masks.dense_attention(q, k, k, mask_mod=lambda b, h, i, j: True, return_lse=True)
    got = weights_from_lse(q, k, lse, mask_mod=lambda b, h, i, j: True)
    torch.testing.assert_close(got, attention_weights(q, k), rtol=0, atol=1e-12)


class TestBadInput:
    @pytest.mark.parametrize("call, message", [
        (lambda: weights_from_lse(torch.zeros(3, 4), torch.zeros(5, 3), torch.zeros(3)),
         r"same last dimension d_k, got 4 and 3"),
        (lambda: weights_from_lse(torch.zeros(3, 4), torch.zeros(5, 4), torch.zeros(4)),
         r"lse must have the shape of the weights' rows \(\.\.\., n\) = \(3,\), got \(4,\)"),
        (lambda: weights_from_lse(torch.zeros(1, 3, 4), torch.zeros(2, 5, 4), torch.zeros(1, 3)),
         r"lse must have the shape of the weights' rows \(\.\.\., n\) = \(2, 3\), got \(1, 3\)"),
        (lambda: weights_from_lse(torch.zeros(3, 4), torch.zeros(5, 4), torch.zeros(3, dtype=torch.int64)),
         r"lse must be floating point on the query's device cpu, got torch\.int64 on cpu"),
        (lambda: weights_from_lse(torch.zeros(3, 4), torch.zeros(5, 4), torch.zeros(3, device="meta")),
         r"lse must be floating point on the query's device cpu, got torch\.float32 on meta"),
        (lambda: weights_from_lse(torch.zeros(3, 4).half(), torch.zeros(5, 4).half(), torch.zeros(3).half()),
         r"lse must be float32 or float64, as the kernels return it for half inputs too, got torch\.float16"),
        (lambda: weights_from_lse(torch.zeros(3, 4), torch.zeros(5, 4), torch.zeros(3), row_offset=1.0),
         r"row_offset must be an integer, got 1.0"),
        (lambda: weights_from_lse(torch.zeros(3, 4), torch.zeros(5, 4), torch.zeros(3), row_offset=True),
         r"row_offset must be an integer, got True"),
        (lambda: weights_from_lse(torch.zeros(3, 4), torch.zeros(5, 4), torch.zeros(3), mask_mod=masks.causal()),
         r"mask_mod and score_mod need query \(b, h, n, d_k\), got shape \(3, 4\)"),
        (lambda: weights_from_lse(torch.zeros(2, 3, 4), torch.zeros(3, 5, 4), torch.zeros(2, 3)),
         r"leading dimensions of query and key must broadcast, got \(2,\), \(3,\)"),
        (lambda: weights_from_lse(torch.zeros(3, 4), torch.zeros(5, 4), torch.zeros(3), is_causal=1),
         r"is_causal must be a bool, got 1 of type int"),
    ])
    def test_weights_from_lse_needs_matching_shapes(self, call, message):
        with pytest.raises(ValueError, match=message):
            call()

    @pytest.mark.parametrize("rules, message", [
        (dict(mask_mod=lambda b, h, i, j: (j <= i).long()), r"mask_mod must answer True or False.*torch\.int64"),
        (dict(mask_mod="causal"), r"mask_mod must be a callable rule.*got str"),
        (dict(score_mod=2.0), r"score_mod must be a callable rule.*got float"),
        (dict(mask_mod=masks.document(torch.tensor([0, 0, 1]))),
         r"mask_mod and score_mod must hold a value for every index of b=1, h=1, rows 0 .. 3, t_k=4.* indexes past"),
    ], ids=["int answer", "mask not callable", "score not callable", "short doc_ids"])
    def test_rules_are_checked_as_dense_attention_checks_them(self, rules, message):
        """dense_attention, which made the lse, refuses these with a ValueError; weights_from_lse
        raised torch's RuntimeError (masked_fill of an int mask), a TypeError or an IndexError."""
        q, k = torch.zeros(2, 1, 1, 4, 8).unbind(0)
        with pytest.raises(ValueError, match=message):
            weights_from_lse(q, k, torch.zeros(1, 1, 4), **rules)

