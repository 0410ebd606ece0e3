"""attention.packing: packed sequences attend exactly as each sequence alone, in every form."""

import pytest
import torch
import torch.nn.functional as F
from _inputs import uninitialized_memory_filled
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from attention import masks as M
from attention.packing import (
    cu_seqlens_from_lengths,
    document_ids,
    pack,
    unpack,
    varlen_attention,
)

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")

LENGTHS = torch.tensor([5, 1, 8, 3])


def sequences(lengths=LENGTHS, h=2, d=4, seed=0):
    """Queries, keys and values of each sequence alone: lists of (h, t_i, d), float64."""
    g = torch.Generator().manual_seed(seed)
    return [[torch.randn(h, int(t), d, generator=g, dtype=torch.float64) for t in lengths]
            for _ in range(3)]


def packed_row(parts):
    """(1, h, t, d): the sequences end to end along the token axis."""
    return torch.cat(parts, dim=1)[None]


def test_cu_seqlens_and_document_ids():
    cu_seqlens = cu_seqlens_from_lengths(LENGTHS)
    assert cu_seqlens.dtype == torch.int32 and cu_seqlens.tolist() == [0, 5, 6, 14, 17]
    assert document_ids(cu_seqlens).tolist() == [0] * 5 + [1] + [2] * 8 + [3] * 3


def test_pack_and_unpack_are_inverse():
    x = torch.randn(4, 9, 3)  # (n, t_max, d) with padding after each length
    packed, cu_seqlens = pack(x, LENGTHS)
    assert packed.shape == (17, 3)
    assert torch.equal(packed[5], x[1, 0]) and torch.equal(packed[6:14], x[2, :8])
    padded = unpack(packed, cu_seqlens, t_max=9)
    real = torch.arange(9)[None, :] < LENGTHS[:, None]
    assert torch.equal(padded[real], x[real]) and not padded[~real].any()


@pytest.mark.parametrize("is_causal", [False, True])
def test_every_packed_form_equals_each_sequence_alone(is_causal):
    qs, ks, vs = sequences()
    alone = [F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
             for q, k, v in zip(qs, ks, vs)]  # (h, t_i, d) each
    want = packed_row(alone)  # (1, h, t, d)
    q, k, v = packed_row(qs), packed_row(ks), packed_row(vs)
    cu_seqlens = cu_seqlens_from_lengths(LENGTHS)
    total = int(cu_seqlens[-1])
    rule = M.document(document_ids(cu_seqlens))
    if is_causal:
        rule = M.and_masks(M.causal(), rule)
    dense = F.scaled_dot_product_attention(q, k, v, attn_mask=M.to_dense(rule, total, total))
    block_mask = create_block_mask(rule, None, None, total, total, device="cpu", BLOCK_SIZE=4)
    flex = flex_attention(q, k, v, block_mask=block_mask)
    layout = [x[0].transpose(0, 1) for x in (q, k, v)]  # (t, h, d): the varlen layout
    varlen = varlen_attention(*layout, cu_seqlens, is_causal=is_causal).transpose(0, 1)[None]
    for got in (dense, flex, varlen):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("is_causal", [False, True])
def test_empty_sequences_are_allowed_as_in_flash_attention(is_causal):
    # flash-attention's varlen tests pack batches with zero-length sequences (hopper/test_util.py,
    # zero_lengths): an empty sequence repeats an entry of cu_seqlens and changes nothing else.
    with_empty = torch.tensor([0, 5, 1, 0, 8, 3, 0])
    qs, ks, vs = sequences(with_empty)
    layout = [packed_row(x)[0].transpose(0, 1) for x in (qs, ks, vs)]  # (t, h, d)
    cu_seqlens = cu_seqlens_from_lengths(with_empty)
    assert cu_seqlens.tolist() == [0, 0, 5, 6, 6, 14, 17, 17]
    assert torch.equal(document_ids(cu_seqlens), torch.repeat_interleave(torch.arange(7), with_empty))
    got = varlen_attention(*layout, cu_seqlens, is_causal=is_causal)
    want = varlen_attention(*layout, cu_seqlens_from_lengths(LENGTHS), is_causal=is_causal)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    x = torch.randn(3, 4, 2)
    packed, cu = pack(x, torch.tensor([2, 0, 4]))
    assert cu.tolist() == [0, 2, 2, 6] and torch.equal(packed, torch.cat([x[0, :2], x[2]]))
    assert torch.equal(unpack(packed, cu), torch.stack([F.pad(x[0, :2], (0, 0, 0, 2)), x[1] * 0, x[2]]))


def test_unpack_restores_a_batch_of_empty_sequences_at_its_own_t_max_of_0():
    # pack of an (n, 0, ...) batch is valid, so unpack must take that batch's t_max back: it
    # refused t_max=0 ("t_max must be at least 1, got 0") though every length is 0
    x = torch.randn(3, 0, 4)
    packed, cu_seqlens = pack(x, torch.zeros(3, dtype=torch.long))
    assert torch.equal(unpack(packed, cu_seqlens, t_max=x.shape[1]), x)


@pytest.mark.parametrize("is_causal", [False, True])
def test_queries_of_a_sequence_without_keys_give_zeros_as_in_flash_attention(is_causal):
    # flash-attention's reference (attention_ref) zeroes a query row that sees no key, and SDPA
    # gives zeros for zero keys: the sequence's queries are zeros, never NaN
    g = torch.Generator().manual_seed(2)
    q, k = torch.randn(5, 2, 4, generator=g), torch.randn(3, 2, 4, generator=g)
    cu_q, cu_k = torch.tensor([0, 2, 5]), torch.tensor([0, 3, 3])  # sequence 1: 3 queries, no keys
    out = varlen_attention(q, k, k, cu_q, cu_k, is_causal=is_causal)
    assert torch.equal(out[2:], torch.zeros(3, 2, 4))
    first = F.scaled_dot_product_attention(*(x.transpose(0, 1) for x in (q[:2], k, k)),
                                           attn_mask=M.to_dense(M.causal("bottom_right", 2, 3), 2, 3) if is_causal else None)
    torch.testing.assert_close(out[:2], first.transpose(0, 1))


def test_a_packed_row_without_the_document_mask_leaks_across_documents():
    qs, ks, vs = sequences()
    want = packed_row([F.scaled_dot_product_attention(q, k, v) for q, k, v in zip(qs, ks, vs)])
    leaked = F.scaled_dot_product_attention(packed_row(qs), packed_row(ks), packed_row(vs))
    assert (leaked - want).abs().max() > 0.1


def test_varlen_causal_is_aligned_bottom_right_like_flash_attention():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2 + 3, 1, 4, generator=g, dtype=torch.float64)  # queries: 2 and 3
    k, v = (torch.randn(4 + 6, 1, 4, generator=g, dtype=torch.float64) for _ in range(2))
    cu_q, cu_k = cu_seqlens_from_lengths(torch.tensor([2, 3])), cu_seqlens_from_lengths(
        torch.tensor([4, 6]))
    out = varlen_attention(q, k, v, cu_q, cu_k, is_causal=True)
    first = F.scaled_dot_product_attention(
        q[:2].transpose(0, 1), k[:4].transpose(0, 1), v[:4].transpose(0, 1),
        attn_mask=torch.ones(2, 4, dtype=torch.bool).tril(2))
    torch.testing.assert_close(out[:2].transpose(0, 1), first, rtol=0, atol=1e-12)


def test_unpack_writes_zeros_in_the_padding_even_from_uninitialized_memory():
    with uninitialized_memory_filled():  # torch.empty now returns NaN (or the largest int)
        padded = unpack(torch.ones(4, 2), torch.tensor([0, 3, 4]), t_max=5)
    real = torch.arange(5)[None, :] < torch.tensor([3, 1])[:, None]
    assert padded[real].eq(1).all() and padded[~real].eq(0).all()


@pytest.mark.parametrize("is_causal", [False, True])
def test_varlen_uses_the_scale_it_is_given(is_causal):
    qs, ks, vs = sequences()
    want = packed_row([F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=0.3)
                       for q, k, v in zip(qs, ks, vs)])[0].transpose(0, 1)  # (t, h, d)
    layout = [packed_row(x)[0].transpose(0, 1) for x in (qs, ks, vs)]  # (t, h, d)
    got = varlen_attention(*layout, cu_seqlens_from_lengths(LENGTHS), is_causal=is_causal, scale=0.3)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("scale", [-0.7, 0.0])
def test_varlen_causal_with_a_scale_at_most_zero_is_finite(scale):
    # torch's fused CPU kernel gives nan rows for is_causal=True with a scale <= 0; the answer
    # is softmax(scale · Q Kᵀ) V under the causal mask, as torch's math backend computes it
    qs, ks, vs = sequences()
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        want = packed_row([F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
                           for q, k, v in zip(qs, ks, vs)])[0].transpose(0, 1)  # (t, h, d)
    layout = [packed_row(x)[0].transpose(0, 1) for x in (qs, ks, vs)]  # (t, h, d)
    got = varlen_attention(*layout, cu_seqlens_from_lengths(LENGTHS), is_causal=True, scale=scale)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_varlen_takes_one_key_and_value_head_shared_by_every_query_head():
    qs, ks, vs = sequences(h=3)
    ks, vs = [k[:1] for k in ks], [v[:1] for v in vs]  # (1, t_i, d): one shared head
    want = packed_row([F.scaled_dot_product_attention(q, k.expand_as(q), v.expand_as(q))
                       for q, k, v in zip(qs, ks, vs)])[0].transpose(0, 1)  # (t, h, d)
    q, k, v = [packed_row(x)[0].transpose(0, 1) for x in (qs, ks, vs)]  # k, v: (t, 1, d)
    got = varlen_attention(q, k, v, cu_seqlens_from_lengths(LENGTHS))
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("shared", ["key", "value"])
def test_varlen_takes_one_shared_head_for_key_or_value_alone(shared):
    qs, ks, vs = sequences(h=3)
    if shared == "key":
        ks = [k[:1] for k in ks]  # (1, t_i, d): one key head, three value heads
    else:
        vs = [v[:1] for v in vs]
    want = packed_row([F.scaled_dot_product_attention(q, k.expand_as(q), v.expand_as(q))
                       for q, k, v in zip(qs, ks, vs)])[0].transpose(0, 1)  # (t, h, d)
    q, k, v = [packed_row(x)[0].transpose(0, 1) for x in (qs, ks, vs)]  # (t, h or 1, d)
    got = varlen_attention(q, k, v, cu_seqlens_from_lengths(LENGTHS))
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("is_causal", [False, True])
def test_varlen_with_enable_gqa_reads_each_key_value_head_with_its_group(is_causal):
    qs, ks, vs = sequences(h=4)
    ks, vs = [k[:2] for k in ks], [v[:1] for v in vs]  # 2 key heads, 1 value head, h = 4
    want = packed_row([F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, enable_gqa=True)
                       for q, k, v in zip(qs, ks, vs)])[0].transpose(0, 1)  # (t, h, d)
    q, k, v = [packed_row(x)[0].transpose(0, 1) for x in (qs, ks, vs)]  # k, v: (t, 2, d)
    got = varlen_attention(q, k, v, cu_seqlens_from_lengths(LENGTHS), is_causal=is_causal, enable_gqa=True)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize(("is_causal", "lengths_k"), [(False, (40, 70)), (True, (40, 70)), (True, (60, 30))])
def test_varlen_in_half_precision_meets_flash_attentions_rule(dtype, is_causal, lengths_k):
    """Against float64 on the same rounded inputs, at most twice the error of attention computed
    step by step in ``dtype`` (flash-attention's rule), and within 1.5 times the error of rounding
    the exact output once (measured 1.00-1.20); t_q != t_k takes torch's masked path."""
    g = torch.Generator().manual_seed(0)
    lengths_q = (50, 40)
    q = (2 * torch.randn(sum(lengths_q), 4, 64, generator=g)).to(dtype)  # (t, h, d)
    k = (2 * torch.randn(sum(lengths_k), 4, 64, generator=g)).to(dtype)
    v = torch.randn(sum(lengths_k), 4, 64, generator=g).to(dtype)
    cu_q, cu_k = (torch.tensor([0, n[0], sum(n)], dtype=torch.int32) for n in (lengths_q, lengths_k))

    def plain(compute: torch.dtype) -> torch.Tensor:  # every step in ``compute``, a sequence at a time
        outs = []
        for q0, q1, k0, k1 in zip(cu_q.tolist(), cu_q[1:].tolist(), cu_k.tolist(), cu_k[1:].tolist()):
            qs, ks, vs = (x.to(compute).transpose(0, 1) for x in (q[q0:q1], k[k0:k1], v[k0:k1]))
            scores = qs @ ks.transpose(1, 2) / 8  # (h, t_q, t_k)
            if is_causal:  # bottom-right: query i sees keys j <= i + t_k - t_q
                hidden = torch.ones(q1 - q0, k1 - k0, dtype=torch.bool).triu(k1 - k0 - (q1 - q0) + 1)
                scores = scores.masked_fill(hidden, float("-inf"))
            weights = torch.softmax(scores, dim=-1).nan_to_num()  # a row with no key: 0, as flash's
            outs.append((weights @ vs).transpose(0, 1))
        return torch.cat(outs)

    out, reference = varlen_attention(q, k, v, cu_q, cu_k, is_causal=is_causal), plain(torch.float64)
    assert out.dtype == dtype
    error = (out.double() - reference).abs().max().item()
    assert error <= 2 * (plain(dtype).double() - reference).abs().max().item()
    # and as a fused kernel's float32 statistics give: near one rounding of the exact output
    assert error <= 1.5 * (reference.to(dtype).double() - reference).abs().max().item()


class TestBadInput:
    @pytest.mark.parametrize("call, message", [
        (lambda: cu_seqlens_from_lengths(torch.tensor([3, -1])), r"lengths must be .* values >= 0, got \[3, -1\]"),
        (lambda: cu_seqlens_from_lengths(torch.tensor([2**31 - 1, 5])),
         r"lengths must sum to at most 2\*\*31 - 1 \(int32\), got 2147483652"),
        (lambda: cu_seqlens_from_lengths(torch.tensor([2.0])),
         r"lengths must be a non-empty 1-d integer.*got \[2\.0\]"),
        (lambda: document_ids(torch.tensor([1, 3])), r"cu_seqlens must be .* never falls, got \[1, 3\]"),
        (lambda: pack(torch.zeros(2, 3, 1), LENGTHS), r"x must be \(n, t_max, ...\) with n = 4.*got shape \(2, 3, 1\)"),
        (lambda: unpack(torch.zeros(5, 2), torch.tensor([0, 2, 4])),
         r"ending at the number of packed tokens 5.*got \[0, 2, 4\]"),
        (lambda: unpack(torch.zeros(4, 2), torch.tensor([0, 2, 4]), t_max=1),
         r"t_max must be at least the longest length 2, got 1"),
        (lambda: unpack(torch.zeros(4, 2), torch.tensor([0, 2, 4]), t_max=4.0), r"t_max must be an integer >= 0, got 4.0"),
        (lambda: unpack(torch.zeros(4, 2), torch.tensor([0, 2, 4]), t_max=-1), r"t_max must be an integer >= 0, got -1"),
        (lambda: unpack(torch.tensor(1.0), torch.tensor([0, 1])), r"packed must be \(t, ...\), one row per packed token, got shape \(\)"),
        (lambda: pack([[1, 2]], torch.tensor([2])), r"x must be \(n, t_max, ...\) with n = 1 rows .*got shape list"),
        (lambda: varlen_attention(torch.zeros(1, 4, 2), torch.zeros(4, 1, 2), torch.zeros(4, 1, 2), torch.tensor([0, 4])),
         r"cu_seqlens must be .* ending at the number of packed tokens 1.*got \[0, 4\]"),
        (lambda: varlen_attention(torch.zeros(4, 2), torch.zeros(4, 1, 2), torch.zeros(4, 1, 2), torch.tensor([0, 4])),
         r"query must be \(t, h, d\) in the varlen layout.*got shape \(4, 2\)"),
        (lambda: varlen_attention(torch.zeros(4, 1, 2), torch.zeros(4, 1, 2), torch.zeros(4, 1, 2), torch.tensor([0, 4]), torch.tensor([0, 1, 4])),
         r"must count the same sequences, got 1 and 2"),
        (lambda: varlen_attention(torch.zeros(4, 4, 2), torch.zeros(4, 2, 2), torch.zeros(4, 2, 2), torch.tensor([0, 4])),
         r"key and value must have the query's h=4 heads \(or 1, shared; .* enable_gqa=True\), got 2 and 2"),
        (lambda: varlen_attention(torch.zeros(4, 4, 2), torch.zeros(4, 3, 2), torch.zeros(4, 3, 2), torch.tensor([0, 4]),
                                  enable_gqa=True),
         r"with enable_gqa=True, key's number of heads \(dim 1\) must divide the query's h=4, got 3"),
        (lambda: varlen_attention(torch.zeros(4, 1, 2), torch.zeros(4, 1, 2), torch.zeros(4, 1, 2), torch.tensor([0, 4]), enable_gqa=1),
         r"enable_gqa must be a bool, got 1 of type int"),
        (lambda: cu_seqlens_from_lengths(torch.tensor([[3, 2]])),
         r"lengths must be a non-empty 1-d integer.*got \[\[3, 2\]\]"),
        (lambda: cu_seqlens_from_lengths(torch.tensor([], dtype=torch.long)),
         r"lengths must be a non-empty 1-d integer.*got \[\]"),
        (lambda: document_ids(torch.tensor([0, 2, 1, 4])), r"never falls, got \[0, 2, 1, 4\]"),
        (lambda: document_ids(torch.tensor([0.0, 2.0])), r"1-d integer tensor .* got \[0\.0, 2\.0\]"),
        (lambda: varlen_attention(torch.zeros(4, 1, 2), torch.zeros(4, 1, 2), torch.zeros(4, 1, 2), torch.tensor([0, 4]), is_causal=1),
         r"is_causal must be a bool, got 1 of type int"),
        (lambda: varlen_attention(torch.zeros(4, 1, 2), torch.zeros(4, 1, 2), torch.zeros(3, 1, 2), torch.tensor([0, 4])),
         r"key and value must have the same number of tokens t_k, got 4 and 3"),
        (lambda: pack(torch.zeros(2, 2, 1), torch.tensor([3, 1])), r"t_max >= 3, got shape \(2, 2, 1\)"),
        # uint8's diff wraps (100 - 200 = 156 > 0): it passed as rising, 356 ids for 100 tokens
        (lambda: document_ids(torch.tensor([0, 200, 100], dtype=torch.uint8)),
         r"never falls, got \[0, 200, 100\]"),
        # the int64 sum wrapped to a negative total, under the int32 bound: cu_seqlens [0, 0, 0, 0]
        (lambda: cu_seqlens_from_lengths(torch.tensor([2**62] * 3)),
         r"lengths must sum to at most 2\*\*31 - 1 \(int32\), got 13835058055282163712"),
        # complex numbers are not floating point: torch's comparisons raised NotImplementedError
        (lambda: cu_seqlens_from_lengths(torch.tensor([2 + 0j])),
         r"lengths must be a non-empty 1-d integer.*got \[\(2\+0j\)\]"),
        (lambda: document_ids(torch.tensor([0j, 2])), r"1-d integer tensor .* got \[0j, \(2\+0j\)\]"),
        # x.dim() ran first: "'list' object has no attribute 'dim'"
        (lambda: varlen_attention([[[0.0]]], torch.zeros(1, 1, 1), torch.zeros(1, 1, 1), torch.tensor([0, 1])),
         r"query must be \(t, h, d\) in the varlen layout, got list"),
    ])
    def test_lengths_and_cu_seqlens_must_describe_the_packed_tokens(self, call, message):
        with pytest.raises(ValueError, match=message):
            call()
