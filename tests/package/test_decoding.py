"""attention.decoding: split-KV attention equals full attention for every number of splits; its
merge is the online-softmax rescaling; half precision keeps float32 statistics."""

import math

import pytest
import torch
import torch.nn.functional as F
from _inputs import NON_BOOLS, gqa_half_grad_errors, qkv, refuses_non_bool
from torch import nn

from attention import TinyTransformer
from attention.decoding import split_kv_attention, weights_read_per_token


@pytest.mark.parametrize("num_splits", [1, 2, 7, 64, 100])
@pytest.mark.parametrize(("shape_q", "shape_kv"), [
    ((1, 1, 8), (1, 100, 8)),  # one query of one head
    ((2, 4, 3, 8), (2, 4, 100, 8)),  # a few queries per sequence and head
    ((2, 4, 1, 8), (1, 4, 100, 8)),  # leading dimensions that broadcast
])
def test_split_kv_equals_torchs_attention(shape_q, shape_kv, num_splits: int) -> None:
    q, k, v = qkv(shape_q, shape_kv)
    out, lse = split_kv_attention(q, k, v, num_splits=num_splits, return_lse=True)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), atol=1e-12, rtol=0)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    torch.testing.assert_close(lse, scores.logsumexp(dim=-1), atol=1e-12, rtol=0)


@pytest.mark.parametrize("h_kv", [1, 2, 8])
def test_split_kv_with_grouped_query_heads(h_kv: int) -> None:
    q, k, v = qkv((2, 8, 1, 16), (2, h_kv, 37, 16))
    out = split_kv_attention(q, k, v, num_splits=5, enable_gqa=True, scale=0.3)
    reference = F.scaled_dot_product_attention(q, k, v, enable_gqa=True, scale=0.3)
    torch.testing.assert_close(out, reference, atol=1e-12, rtol=0)


def test_the_merge_is_the_rescaling_of_the_partial_results() -> None:
    q, k, v = qkv((1, 1, 4), (1, 10, 4))
    parts = [split_kv_attention(q, k[:, j:j + 5], v[:, j:j + 5], num_splits=1, return_lse=True)
             for j in (0, 5)]
    (z_1, l_1), (z_2, l_2) = parts
    total = torch.logaddexp(l_1, l_2)
    merged = torch.exp(l_1 - total)[..., None] * z_1 + torch.exp(l_2 - total)[..., None] * z_2
    torch.testing.assert_close(merged, split_kv_attention(q, k, v, num_splits=2), atol=1e-15, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_precision_keeps_float32_statistics(dtype: torch.dtype) -> None:
    q, k, v = qkv((1, 4, 1, 64), (1, 4, 2048, 64), to=dtype)
    reference = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
    out = split_kv_attention(q, k, v, num_splits=16)
    assert out.dtype == dtype
    naive = torch.softmax(q @ (k / 8).transpose(-2, -1), dim=-1) @ v  # every step in dtype
    error = (out.double() - reference).abs().max().item()
    assert error <= 2 * (naive.double() - reference).abs().max().item()  # FlashAttention's rule
    assert error <= 1.2 * (reference.to(dtype).double() - reference).abs().max().item()


def test_the_default_scale_is_one_over_sqrt_d_k_when_values_are_wider() -> None:
    q, k, v = qkv((2, 3, 2, 4), (2, 3, 20, 4), (2, 3, 20, 16))  # d_k = 4, d_v = 16
    out = split_kv_attention(q, k, v, num_splits=3)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), atol=1e-12, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_precision_returns_the_lse_in_float32(dtype: torch.dtype) -> None:
    """The lse is a statistic: kept in the accumulation dtype, as the docstring says, and close
    to the float64 lse of the same rounded inputs."""
    q, k, v = qkv((1, 2, 1, 64), (1, 2, 300, 64), to=dtype)
    _, lse = split_kv_attention(q, k, v, num_splits=4, return_lse=True)
    assert lse.dtype == torch.float32
    exact = (q.double() @ k.double().transpose(-2, -1) / 8).logsumexp(dim=-1)  # (1, 2, 1)
    torch.testing.assert_close(lse.double(), exact, atol=1e-5, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_precision_applies_the_scale_after_the_float32_cast(dtype: torch.dtype) -> None:
    """0.3 is no power of two: q · 0.3 rounded in half precision moves the scores by about
    |s| · 2^-11 (2^-8 in bfloat16), far past the float32 lse's error against float64."""
    q, k, v = qkv((1, 2, 1, 64), (1, 2, 300, 64), to=dtype)
    _, lse = split_kv_attention(q, k, v, num_splits=4, scale=0.3, return_lse=True)
    exact = (q.double() @ k.double().transpose(-2, -1) * 0.3).logsumexp(dim=-1)  # (1, 2, 1)
    torch.testing.assert_close(lse.double(), exact, atol=1e-5, rtol=0)


def test_gradients_flow_through_the_merge_weights_as_through_sdpa() -> None:
    """z = Σ_r e^{lse_r - lse} z_r: the weights depend on q and k, and so do their gradients."""
    q, k, v = qkv((1, 2, 2, 4), (1, 2, 9, 4), requires_grad=True)
    got = torch.autograd.grad(split_kv_attention(q, k, v, num_splits=3).pow(2).sum(), (q, k, v))
    want = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v).pow(2).sum(), (q, k, v))
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


@pytest.mark.parametrize("num_splits", [1, 2, 4])
def test_scores_of_minus_inf_or_past_floats_range_give_sdpas_answer(num_splits) -> None:
    # keys of -inf, or scores past float32's range: a chunk with no finite score, and a row with
    # none at all, which torch's SDPA answers with zeros
    q, k, v = qkv((1, 1, 1, 2), (1, 1, 4, 2), (1, 1, 4, 3))  # float64
    q = q.abs()  # a key of -inf then gives a score of -inf, never -inf + inf
    k[..., 2:, :] = -math.inf  # the second half of the keys: a whole chunk for 2 and 4 splits
    torch.testing.assert_close(split_kv_attention(q, k, v, num_splits=num_splits),
                               F.scaled_dot_product_attention(q, k, v))
    big = torch.full((1, 1, 1, 2), 1e20), torch.ones(1, 1, 4, 2), v.float()
    big[1][..., 2:, :] = -1.0  # scores of -1e20 · 1e20: -inf in float32
    torch.testing.assert_close(split_kv_attention(*big, num_splits=num_splits),
                               F.scaled_dot_product_attention(*big))
    k[...] = -math.inf
    out, lse = split_kv_attention(q, k, v, num_splits=num_splits, return_lse=True)
    assert out.eq(0).all() and F.scaled_dot_product_attention(q, k, v).eq(0).all()
    assert lse.eq(-math.inf).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_chunks_weigh_by_their_keys_past_float32_lse_precision(dtype) -> None:
    """Three tied scores of 1e8 in chunks of 2 and 1 keys: a float32 lse_r of 1e8 + log 2
    rounds to 1e8, and weights e^{lse_r - lse} would count both chunks alike: (0 + 3) / 2
    instead of the mean of 0, 0 and 3."""
    q, k = torch.full((1, 1, 1, 1), 1e4, dtype=dtype), torch.full((1, 1, 3, 1), 1e4, dtype=dtype)
    v = torch.tensor([0.0, 0.0, 3.0], dtype=dtype).view(1, 1, 3, 1)
    out = split_kv_attention(q, k, v, num_splits=2, scale=1.0)
    assert out.item() == F.scaled_dot_product_attention(q, k, v, scale=1.0).item() == 1.0


@pytest.mark.parametrize("positions", ["learned", "rope"])
def test_a_decode_step_reads_every_weight_but_the_unused_embedding_rows(positions: str) -> None:
    with torch.device("meta"):  # shapes only
        model = TinyTransformer(50, 8, 2, 2, context_length=6, positions=positions)
    tables = {"tok_emb.weight", "pos_emb.embedding.weight"}
    rows = 8 * (2 if positions == "learned" else 1)  # one row of each table, width d = 8
    dense = sum(p.numel() for name, p in model.named_parameters() if name not in tables)
    assert weights_read_per_token(model) == dense + rows


def test_tied_weights_are_read_whole_once() -> None:
    with torch.device("meta"):
        untied = TinyTransformer(50, 8, 2, 1, context_length=6, positions="rope")
        tied = TinyTransformer(50, 8, 2, 1, context_length=6, positions="rope", tie_weights=True)
    # untied: the LM head (50 x 8) read whole plus one row of the embedding; tied: the shared
    # matrix read whole, once
    assert weights_read_per_token(untied) - weights_read_per_token(tied) == 8


def test_a_matrix_two_embeddings_share_loses_its_unread_rows_once() -> None:
    # counted once among the parameters, its unread rows were subtracted once per embedding
    with torch.device("meta"):
        model = nn.ModuleDict({"enc": nn.Embedding(1000, 8), "dec": nn.Embedding(1000, 8),
                               "proj": nn.Linear(8, 8)})
    model["dec"].weight = model["enc"].weight
    assert weights_read_per_token(model) == 8 + (8 * 8 + 8)  # one row, then the Linear


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gqa_half_precision_gradients_sum_the_heads_in_float32(dtype: torch.dtype) -> None:
    # flash-attn's rule: at most 2x the error of the plain float32 computation rounded once
    ours, base = gqa_half_grad_errors(
        lambda q, k, v: split_kv_attention(q, k, v, num_splits=3, enable_gqa=True), dtype)
    assert all(o <= 2 * b for o, b in zip(ours, base)), (ours, base)


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (((1, 1, 4), (1, 5, 4), 0), r"num_splits must be at least 1, got 0"),
            (((1, 1, 4), (1, 5, 4), 6), r"num_splits must be at most t_k=5 .*, got 6"),
            (((1, 1, 4), (1, 5, 4), 2.0), r"num_splits must be an integer.*got 2\.0 of type float"),
            (((1, 1, 4), (1, 5, 3), 1), r"same last dimension d_k, got 4 and 3"),
        ],
    )
    def test_num_splits_must_be_from_1_to_t_k_and_d_k_must_agree(self, args: tuple, message: str) -> None:
        shape_q, shape_kv, num_splits = args
        q, k, v = qkv(shape_q, shape_kv)
        with pytest.raises(ValueError, match=message):
            split_kv_attention(q, k, v, num_splits=num_splits)

    @pytest.mark.parametrize("scale", [math.nan, math.inf, "0.5"], ids=str)
    def test_scale_must_be_a_finite_number(self, scale: object) -> None:
        # NaN gave NaN outputs without a word; a string raised a TypeError from the product
        q, k, v = qkv((1, 1, 4), (1, 5, 4))
        with pytest.raises(ValueError, match=r"scale must be None or a finite number, got"):
            split_kv_attention(q, k, v, num_splits=2, scale=scale)

    def test_fewer_key_heads_without_enable_gqa(self) -> None:
        q, k, v = qkv((1, 4, 1, 4), (1, 2, 5, 4))
        with pytest.raises(ValueError, match=r"must broadcast, got \(1, 4\), \(1, 2\), \(1, 2\) "
                                             r"\(for fewer key and value heads .* enable_gqa=True\)"):
            split_kv_attention(q, k, v, num_splits=2)

    def test_key_heads_must_divide_the_query_heads(self) -> None:
        q, k, v = qkv((1, 6, 1, 4), (1, 4, 5, 4))
        with pytest.raises(ValueError, match=r"must divide the query's h=6, got 4"):
            split_kv_attention(q, k, v, num_splits=2, enable_gqa=True)

    @pytest.mark.parametrize("value", NON_BOOLS)
    @pytest.mark.parametrize(
        ("flag", "call"),
        [
            ("enable_gqa", lambda value: split_kv_attention(*qkv((1, 2, 1, 4), (1, 2, 8, 4)), num_splits=2, enable_gqa=value)),
            ("return_lse", lambda value: split_kv_attention(*qkv((1, 2, 1, 4), (1, 2, 8, 4)), num_splits=2, return_lse=value)),
        ],
    )
    def test_flags_must_be_bools(self, flag: str, call, value: object) -> None:
        with refuses_non_bool(flag, value):
            call(value)

    def test_weights_read_per_token_model_must_be_a_module(self) -> None:
        # a string raised an AttributeError ('str' object has no attribute 'parameters')
        with pytest.raises(ValueError, match=r"model must be a torch\.nn\.Module, got str"):
            weights_read_per_token("m")
