"""Invariants for every input (hypothesis): probabilities, causality, permutations, dropout."""

import torch
from _inputs import FAST, seeded_randn, seeds
from hypothesis import given
from hypothesis import strategies as st

from attention import (
    CausalAttention,
    FusedMultiHeadAttention,
    MultiHeadAttention,
    MultiHeadAttentionWrapper,
    attention_weights,
    scaled_dot_product_attention,
)

sizes = st.integers(min_value=1, max_value=6)


@FAST
@given(b=sizes, t_q=sizes, t_k=sizes, d_k=sizes, is_causal=st.booleans(), seed=seeds)
def test_weights_are_nonnegative_and_rows_sum_to_one(
    b: int, t_q: int, t_k: int, d_k: int, is_causal: bool, seed: int
) -> None:
    q, k = seeded_randn(seed, b, t_q, d_k) * 5, seeded_randn(seed + 1, b, t_k, d_k) * 5
    weights = attention_weights(q, k, is_causal=is_causal)
    assert (weights >= 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(b, t_q, dtype=torch.float64))


@FAST
@given(t_q=sizes, t_k=sizes, seed=seeds)
def test_masked_rows_sum_to_one_or_to_zero_when_nothing_is_visible(
    t_q: int, t_k: int, seed: int
) -> None:
    q, k = seeded_randn(seed, t_q, 4), seeded_randn(seed + 1, t_k, 4)
    mask = seeded_randn(seed + 2, t_q, t_k) > 0
    weights = attention_weights(q, k, attn_mask=mask)
    assert (weights[~mask] == 0).all()
    torch.testing.assert_close(weights.sum(-1), mask.any(-1).double())


def _causal_modules(d_in: int, t: int, h: int) -> list[torch.nn.Module]:
    d_out = 2 * h
    fused = FusedMultiHeadAttention(d_in, d_out, h, t, 0.0, use_sdpa=False)
    fused_sdpa = FusedMultiHeadAttention(d_in, d_out, h, t, 0.0, use_sdpa=True)
    return [
        CausalAttention(d_in, d_out, t, 0.0),
        MultiHeadAttentionWrapper(d_in, 2, h, t, 0.0),
        MultiHeadAttention(d_in, d_out, h, t, 0.0),
        fused,
        fused_sdpa,
    ]


@FAST
@given(b=sizes, t=st.integers(2, 7), d_in=sizes, h=st.integers(1, 3), data=st.data(), seed=seeds)
def test_future_tokens_do_not_change_earlier_outputs(
    b: int, t: int, d_in: int, h: int, data: st.DataObject, seed: int
) -> None:
    cut = data.draw(st.integers(1, t - 1), label="cut")
    x = seeded_randn(seed, b, t, d_in)
    changed = x.clone()
    changed[:, cut:] = seeded_randn(seed + 1, b, t - cut, d_in)  # new future, same past
    for module in _causal_modules(d_in, t, h):
        module = module.double()
        with torch.no_grad():
            torch.testing.assert_close(module(changed)[:, :cut], module(x)[:, :cut])


@FAST
@given(b=sizes, t_q=sizes, t_k=sizes, d=sizes, seed=seeds, data=st.data())
def test_unmasked_attention_is_permutation_equivariant(
    b: int, t_q: int, t_k: int, d: int, seed: int, data: st.DataObject
) -> None:
    q, k, v = seeded_randn(seed, b, t_q, d), seeded_randn(seed + 1, b, t_k, d), seeded_randn(seed + 2, b, t_k, d)
    perm_q = torch.tensor(data.draw(st.permutations(range(t_q)), label="perm_q"))
    perm_k = torch.tensor(data.draw(st.permutations(range(t_k)), label="perm_k"))
    out = scaled_dot_product_attention(q, k, v)
    # reordering the queries reorders the outputs the same way
    torch.testing.assert_close(scaled_dot_product_attention(q[:, perm_q], k, v), out[:, perm_q])
    # reordering the key-value pairs together changes nothing
    torch.testing.assert_close(scaled_dot_product_attention(q, k[:, perm_k], v[:, perm_k]), out)


@FAST
@given(t=st.integers(2, 8), p=st.floats(0.05, 0.9), seed=seeds)
def test_dropout_zeroes_or_rescales_each_weight(t: int, p: float, seed: int) -> None:
    q, k = seeded_randn(seed, 2, t, 4), seeded_randn(seed + 1, 2, t, 4)
    weights = attention_weights(q, k, is_causal=True)
    dropped = attention_weights(q, k, is_causal=True, dropout_p=p)
    kept = dropped != 0
    torch.testing.assert_close(dropped[kept], weights[kept] / (1 - p))


@FAST
@given(t=st.integers(2, 6), p=st.floats(0.1, 0.9), seed=seeds)
def test_module_dropout_is_identity_in_eval_and_rescales_survivors_in_train(
    t: int, p: float, seed: int
) -> None:
    torch.manual_seed(seed)
    mha = MultiHeadAttention(3, 4, context_length=t, dropout=p, num_heads=2).double()
    x = seeded_randn(seed, 2, t, 3)
    with torch.no_grad():
        eval_out, eval_weights = mha.eval()(x, return_weights=True)
        no_dropout = MultiHeadAttention(3, 4, context_length=t, dropout=0.0, num_heads=2).double()
        no_dropout.load_state_dict(mha.state_dict())
        torch.testing.assert_close(eval_out, no_dropout(x))
        _, train_weights = mha.train()(x, return_weights=True)
    kept = train_weights != 0
    torch.testing.assert_close(train_weights[kept], eval_weights[kept] / (1 - p))
