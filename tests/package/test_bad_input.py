"""Every bad input raises ValueError naming the expected and the actual value."""

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from _inputs import qkv

from attention import (
    AdditiveAttention,
    AttentionDecoder,
    BidirectionalSelfAttention,
    CausalAttention,
    CrossAttention,
    FusedMultiHeadAttention,
    MultiHeadAttention,
    MultiHeadAttentionWrapper,
    SelfAttentionV1,
    SelfAttentionV2,
    Seq2Seq,
    Seq2SeqEncoder,
    attention_weights,
    flash_attention,
    plot_attention,
    scaled_dot_product_attention,
)

MULTIHEAD_CLASSES = [MultiHeadAttention, FusedMultiHeadAttention, MultiHeadAttentionWrapper]
CAUSAL_CLASSES = [CausalAttention, *MULTIHEAD_CLASSES]


def _build(cls: type, context_length: int = 6, dropout: float = 0.0) -> torch.nn.Module:
    """A module of class ``cls`` with d_in = 3, d_out = 4 (and 2 heads where it has heads)."""
    if cls is CausalAttention:
        return cls(3, 4, context_length, dropout)
    return cls(3, 4, 2, context_length, dropout)


@pytest.mark.parametrize("cls", [MultiHeadAttention, FusedMultiHeadAttention])
def test_d_out_not_divisible_by_num_heads(cls: type) -> None:
    with pytest.raises(ValueError, match=r"divisible by num_heads, got d_out=10 and num_heads=4"):
        cls(3, 10, context_length=6, dropout=0.0, num_heads=4)


@pytest.mark.parametrize("cls", MULTIHEAD_CLASSES)
def test_no_heads(cls: type) -> None:
    with pytest.raises(ValueError, match=r"num_heads must be at least 1, got 0"):
        cls(3, 4, context_length=6, dropout=0.0, num_heads=0)


@pytest.mark.parametrize("dropout", [-0.1, 1.0, 1.5])
@pytest.mark.parametrize("cls", CAUSAL_CLASSES)
def test_dropout_outside_unit_interval(cls: type, dropout: float) -> None:
    with pytest.raises(ValueError, match=rf"dropout must be in \[0, 1\), got {dropout}"):
        _build(cls, dropout=dropout)


@pytest.mark.parametrize("dropout_p", [-0.5, 1.0])
def test_functional_dropout_p_outside_unit_interval(dropout_p: float) -> None:
    x = torch.randn(2, 4, 3)
    with pytest.raises(ValueError, match=rf"dropout_p must be in \[0, 1\), got {dropout_p}"):
        scaled_dot_product_attention(x, x, x, dropout_p=dropout_p)


@pytest.mark.parametrize("cls", CAUSAL_CLASSES)
def test_sequence_longer_than_context_length(cls: type) -> None:
    module = _build(cls, context_length=6)
    with pytest.raises(ValueError, match=r"at most context_length=6, got 7"):
        module(torch.randn(2, 7, 3))


@pytest.mark.parametrize("cls", [*CAUSAL_CLASSES, SelfAttentionV1, SelfAttentionV2])
def test_last_dimension_not_d_in(cls: type) -> None:
    module = cls(3, 4) if cls in (SelfAttentionV1, SelfAttentionV2) else _build(cls)
    with pytest.raises(ValueError, match=r"last dimension d_in=3, got 5"):
        module(torch.randn(2, 4, 5))


@pytest.mark.parametrize(
    ("module", "x", "message"),
    [
        (SelfAttentionV1(3, 2), torch.randn(3), r"2-d or 3-d, got a 1-d tensor of shape \(3,\)"),
        (SelfAttentionV2(3, 2), torch.randn(1, 2, 4, 3), r"2-d or 3-d, got a 4-d tensor"),
        (CausalAttention(3, 2, 6, 0.0), torch.randn(1, 1, 4, 3), r"2-d or 3-d, got a 4-d tensor"),
        (MultiHeadAttention(3, 4, 2, 6, 0.0), torch.randn(4, 3), r"must be 3-d, got a 2-d tensor"),
        (FusedMultiHeadAttention(3, 4, 2, 6, 0.0), torch.randn(4, 3), r"3-d, got a 2-d tensor"),
    ],
    ids=["V1", "V2", "causal", "multihead", "fused"],
)
def test_wrong_rank(module: torch.nn.Module, x: torch.Tensor, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        module(x)


@pytest.mark.parametrize(
    ("mask_shape", "scores_shape"),
    [((4, 5), (2, 3, 5, 7)), ((5, 1, 7), (2, 3, 5, 7)), ((1, 2, 3, 5, 7), (2, 3, 5, 7))],
)
def test_mask_that_cannot_broadcast_to_the_scores(mask_shape: tuple, scores_shape: tuple) -> None:
    b, h, t_q, t_k = scores_shape
    q, k = torch.randn(b, h, t_q, 8), torch.randn(b, h, t_k, 8)
    expected = re.escape(f"broadcast to the scores' shape {scores_shape}, got shape {mask_shape}")
    for mask in (torch.ones(mask_shape, dtype=torch.bool), torch.zeros(mask_shape)):
        with pytest.raises(ValueError, match=expected):
            scaled_dot_product_attention(q, k, k, attn_mask=mask)


def test_mismatched_query_key_value() -> None:
    with pytest.raises(ValueError, match=r"same last dimension d_k, got 4 and 5"):
        attention_weights(torch.randn(3, 4), torch.randn(3, 5))
    with pytest.raises(ValueError, match=r"same number of tokens t_k, got 3 and 2"):
        scaled_dot_product_attention(torch.randn(3, 4), torch.randn(3, 4), torch.randn(2, 4))
    expected = r"query must have at least 2 dimensions .*got a 1-d tensor of shape \(4,\)"
    with pytest.raises(ValueError, match=expected):
        attention_weights(torch.randn(4), torch.randn(3, 4))


def test_mask_with_is_causal() -> None:
    x = torch.randn(4, 3)
    with pytest.raises(ValueError, match=r"attn_mask must be None when is_causal=True"):
        scaled_dot_product_attention(x, x, x, attn_mask=torch.ones(4, 4) > 0, is_causal=True)


def test_plot_attention_bad_input() -> None:
    with pytest.raises(ValueError, match=r"2-d \(t_q, t_k\) matrix, got shape \(2, 3, 3\)"):
        plot_attention(torch.rand(2, 3, 3))
    with pytest.raises(ValueError, match=r"col_labels must have 3 entries, got 2"):
        plot_attention(torch.rand(2, 3), col_labels=["a", "b"])


@pytest.mark.parametrize("context_length", [0, -1])
@pytest.mark.parametrize("cls", CAUSAL_CLASSES)
def test_context_length_below_one(cls: type, context_length: int) -> None:
    expected = f"context_length must be at least 1, got {context_length}"
    with pytest.raises(ValueError, match=expected):
        _build(cls, context_length=context_length)


HEADED_BUILDERS = {
    "multihead": lambda h: MultiHeadAttention(3, 4, h, 6, 0.0),
    "fused": lambda h: FusedMultiHeadAttention(3, 4, h, 6, 0.0),
    "wrapper": lambda h: MultiHeadAttentionWrapper(3, 4, h, 6, 0.0),
    "cross": lambda h: CrossAttention(3, 5, 4, h, 0.0),
    "bidirectional": lambda h: BidirectionalSelfAttention(3, 4, h, 0.0),
}


@pytest.mark.parametrize(
    ("num_heads", "message"),
    [(2.0, "2.0 of type float"), ("2", "'2' of type str"), (True, "True of type bool")],
)
@pytest.mark.parametrize("name", HEADED_BUILDERS)
def test_num_heads_not_an_integer(name: str, num_heads: object, message: str) -> None:
    with pytest.raises(ValueError, match=f"num_heads must be an integer, got {message}"):
        HEADED_BUILDERS[name](num_heads)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: SelfAttentionV1(3, 0), "d_out must be at least 1, got 0"),
        (lambda: SelfAttentionV2(3, 0), "d_out must be at least 1, got 0"),
        (lambda: CausalAttention(3, 0, 6, 0.0), "d_out must be at least 1, got 0"),
        (lambda: MultiHeadAttentionWrapper(3, 0, 2, 6, 0.0), "d_out must be at least 1, got 0"),
        (lambda: MultiHeadAttention(3, 0, 2, 6, 0.0), "d_out must be at least 1, got 0"),
        (lambda: FusedMultiHeadAttention(3, 0, 2, 6, 0.0), "d_out must be at least 1, got 0"),
        (lambda: CrossAttention(3, 5, 0, 2, 0.0), "d_out must be at least 1, got 0"),
        (lambda: BidirectionalSelfAttention(3, 0, 2, 0.0), "d_out must be at least 1, got 0"),
        (lambda: SelfAttentionV1(3.0, 4), "d_in must be an integer, got 3.0 of type float"),
        (lambda: SelfAttentionV2(3, 4.0), "d_out must be an integer, got 4.0 of type float"),
        (lambda: MultiHeadAttention(0, 4, 2, 6, 0.0), "d_in must be at least 1, got 0"),
        (lambda: BidirectionalSelfAttention(0, 4, 2, 0.0), "d_in must be at least 1, got 0"),
        (lambda: CrossAttention(3, 0, 4, 2, 0.0), "d_kv must be at least 1, got 0"),
        (lambda: CausalAttention(3, 4, 6.0, 0.0), "context_length must be an integer, got 6.0"),
        (lambda: AdditiveAttention(3, 5, 0), "d_attn must be at least 1, got 0"),
        (lambda: Seq2SeqEncoder(11, 4, 0), "d_hidden must be at least 1, got 0"),
        (lambda: AttentionDecoder(0, 4, 6, 5), "vocab_size must be at least 1, got 0"),
    ],
)
def test_sizes_not_positive_integers(build, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        build()


def test_sizes_of_any_integer_type_are_accepted() -> None:
    mha = MultiHeadAttention(np.int64(3), 4, context_length=6, dropout=0.0, num_heads=np.int32(2))
    assert mha(torch.randn(1, 5, 3)).shape == (1, 5, 4)


@pytest.mark.parametrize("p", [-0.1, 1.0])
@pytest.mark.parametrize("cls", [MultiHeadAttention, FusedMultiHeadAttention])
def test_proj_dropout_outside_unit_interval(cls: type, p: float) -> None:
    with pytest.raises(ValueError, match=rf"proj_dropout must be in \[0, 1\), got {p}"):
        cls(3, 4, 2, 6, 0.0, proj_dropout=p)


def test_dropout_not_a_number() -> None:
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\), got '0.1'"):
        CausalAttention(3, 4, 6, "0.1")


def _seq2seq() -> Seq2Seq:
    return Seq2Seq(Seq2SeqEncoder(11, 4, 6), AttentionDecoder(11, 4, 6, 5))


@pytest.mark.parametrize(
    ("src", "message"),
    [
        (torch.tensor([1, 2, 3]), "src must be 2-d, got a 1-d tensor of shape (3,)"),
        (torch.tensor(4), "src must be 2-d, got a 0-d tensor of shape ()"),
        (torch.ones(2, 3, 1, dtype=torch.long), "src must be 2-d, got a 3-d tensor"),
        (torch.ones(2, 3), "src must hold integer token ids (torch.int64 or torch.int32)"),
        (torch.ones(2, 0, dtype=torch.long), "src must have at least 1 token, got shape (2, 0)"),
    ],
    ids=["1-d", "0-d", "3-d", "float", "empty"],
)
def test_seq2seq_bad_source(src: torch.Tensor, message: str) -> None:
    model = _seq2seq()
    tgt_in = torch.zeros(2, 4, dtype=torch.long)
    for call in (lambda: model(src, tgt_in), lambda: model.greedy_decode(src, 3, bos=0)):
        with pytest.raises(ValueError, match=re.escape(message)):
            call()


def test_seq2seq_bad_target() -> None:
    model = _seq2seq()
    src = torch.zeros(2, 5, dtype=torch.long)
    with pytest.raises(ValueError, match=re.escape("tgt_in must be 2-d, got a 1-d tensor")):
        model(src, torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="same batch size b, got 2 and 3"):
        model(src, torch.zeros(3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="max_len must be at least 1, got 0"):
        model.greedy_decode(src, 0, bos=0)


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (0, 0)])
def test_plot_attention_empty_matrix(shape: tuple[int, int]) -> None:
    expected = re.escape(f"at least one row (query) and one column (key), got shape {shape}")
    with pytest.raises(ValueError, match=expected):
        plot_attention(torch.rand(shape))


# --- the functional API: shapes, dtypes and masks that torch refuses ----------------------


# --- bad input -------------------------------------------------------------------------------


def test_zero_width_queries_and_keys_raise() -> None:
    """d_k = 0 has no scale 1/sqrt(d_k); it used to raise ZeroDivisionError."""
    q, k, v = (x.detach() for x in qkv(2, 3, 5, d_k=0))
    for fn in (
        lambda: scaled_dot_product_attention(q, k, v),
        lambda: attention_weights(q, k),
        lambda: flash_attention(q, k, v),
    ):
        with pytest.raises(ValueError, match="d_k must be at least 1.*got d_k = 0"):
            fn()


@pytest.mark.parametrize(
    "dtypes", [(torch.float32, torch.float64, torch.float64), (torch.float64,) * 2 + (torch.half,)]
)
def test_mixed_dtypes_raise(dtypes) -> None:
    q, k, v = (x.detach().to(dt) for x, dt in zip(qkv(2, 3, 5), dtypes))
    listed = ", ".join(f"{name} {dt} on cpu" for name, dt in zip(("query", "key", "value"), dtypes))
    with pytest.raises(ValueError, match=f"query, key, value must share one dtype, got {listed}"):
        scaled_dot_product_attention(q, k, v)
    if dtypes[0] != dtypes[1]:
        with pytest.raises(ValueError, match="query, key must share one dtype"):
            attention_weights(q, k)


@pytest.mark.parametrize(
    "query_dtype, mask_dtype",
    [
        (torch.float32, torch.uint8),
        (torch.float32, torch.int32),
        (torch.float64, torch.int64),
        (torch.float32, torch.float64),
        (torch.float32, torch.float16),
        (torch.bfloat16, torch.float16),
    ],
)
def test_masks_torch_refuses_raise_value_error(query_dtype, mask_dtype) -> None:
    """An integer 0/1 mask used to be added to the scores as if it were additive."""
    q, k, v = (x.detach().to(query_dtype) for x in qkv(2, 3, 5))
    mask = torch.ones(3, 5, dtype=mask_dtype)
    with pytest.raises(RuntimeError, match="Expected attn_mask dtype"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # torch refuses it too
    message = f"torch.float32 or the query's {query_dtype}, got {mask_dtype}"
    with pytest.raises(ValueError, match=message):
        scaled_dot_product_attention(q, k, v, attn_mask=mask)
    with pytest.raises(ValueError, match=message):
        attention_weights(q, k, attn_mask=mask)
