"""Selections the model computes: top-k, MoBA, NSA and DeepSeek Sparse Attention."""

import math
from unittest import mock

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from _inputs import qkv
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from attention import sparse
from attention.latent import LatentKVCache
from attention.masks import dense_attention, sliding_window, to_dense

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")

B, H, T, D, BLOCK = 2, 3, 16, 8, 4


def _causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_topk_mask_keeps_the_k_best_visible_keys_of_each_query():
    scores = torch.randn(T, T, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    k = 5
    mask = to_dense(sparse.topk_mask(scores, k), T, T)  # (t, t)
    assert not mask.triu(1).any(), "a query selected a later key"
    assert mask.sum(dim=1).tolist() == [min(i + 1, k) for i in range(T)]
    for i in range(T):
        best = scores[i, : i + 1].topk(min(i + 1, k)).indices
        assert set(best.tolist()) == set(mask[i].nonzero().flatten().tolist())


def test_selecting_before_the_causal_mask_would_see_the_future():
    scores = torch.arange(T, dtype=torch.float64).expand(T, T)  # later keys score higher
    after = to_dense(sparse.topk_mask(scores, 3), T, T)
    before = to_dense(sparse.topk_mask(scores, 3, is_causal=False), T, T) & torch.ones(T, T).tril().bool()
    assert after.sum(dim=1).tolist() == [min(i + 1, 3) for i in range(T)]
    assert before[:-3].sum() < after[:-3].sum(), "masking after selecting should lose keys"


@pytest.mark.parametrize("rule_name", ["topk", "block_topk", "moba"])
def test_dense_and_flex_forms_are_equal_in_float64(rule_name):
    q, k, v = qkv((B, H, T, D), seed=123)
    if rule_name == "topk":
        rule = sparse.topk_mask(q @ k.transpose(-2, -1), 5)
    elif rule_name == "block_topk":
        scores = torch.randn(B, H, T, T // BLOCK, dtype=torch.float64)
        rule = sparse.block_topk_mask(scores, 2, BLOCK, keep_first=True)
    else:
        rule = sparse.moba_mask(q, k, block_size=BLOCK, top_k=2)
    dense = dense_attention(q, k, v, mask_mod=rule)
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=to_dense(rule, T, T, B, H))
    block_mask = create_block_mask(rule, B, H, T, T, device="cpu", BLOCK_SIZE=BLOCK)
    flex = flex_attention(q, k, v, block_mask=block_mask)
    torch.testing.assert_close(dense, sdpa, rtol=0, atol=1e-14)
    torch.testing.assert_close(flex, dense, rtol=0, atol=1e-14)


def test_block_selection_keeps_the_own_and_first_block_and_no_later_one():
    scores = torch.randn(B, H, T, T // BLOCK, dtype=torch.float64)
    scores[..., 0] = -1e9  # the first block would never win on its score
    mask = to_dense(sparse.block_topk_mask(scores, 2, BLOCK, keep_first=True), T, T, B, H)
    blocks = mask.view(B, H, T, T // BLOCK, BLOCK).any(dim=-1)  # (b, h, t, T_k)
    for i in range(T):
        assert blocks[..., i, i // BLOCK].all() and blocks[..., i, 0].all()
        assert not blocks[..., i, i // BLOCK + 1:].any()
        assert mask[..., i, i + 1:].sum() == 0
        assert (blocks[..., i, :].sum(dim=-1) == min(2, i // BLOCK + 1)).all()


def test_block_selection_keeps_the_own_and_first_block_against_inf_scores():
    # The always-kept blocks were boosted to +inf: a block scoring +inf tied with them and beat
    # them, so a query lost its own block and itself. (A NaN score is refused: TestBadInput.)
    scores = torch.zeros(B, H, T, T // BLOCK, dtype=torch.float64)
    scores[..., 1] = math.inf
    mask = to_dense(sparse.block_topk_mask(scores, 2, BLOCK, keep_first=True), T, T, B, H)
    blocks = mask.view(B, H, T, T // BLOCK, BLOCK).any(dim=-1)  # (b, h, t, T_k)
    for i in range(T):
        assert blocks[..., i, i // BLOCK].all() and blocks[..., i, 0].all()
        assert mask[..., i, i].all(), f"query {i} does not see itself"


def test_moba_gives_nan_to_the_rows_that_see_a_nan_key_as_sdpa_does():
    # block_topk_mask refuses NaN scores; moba_mask ranks a block whose mean key is NaN first,
    # so every row that sees the NaN key attends to it, and no other row turns NaN
    q, k, v = qkv((1, 1, T, D), seed=123)
    k[..., 6, 0] = math.nan  # key 6, in block 1
    out = sparse.moba_attention(q, k, v, block_size=BLOCK, top_k=2)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert out.isnan().any(-1).flatten().tolist() == [i >= 6 for i in range(T)]
    assert torch.equal(out.isnan(), expected.isnan())


def test_block_sizes_may_be_numpy_integers():
    # check_sizes takes a NumPy integer, but t_k = T_k · B became one too, and the causal rule
    # refused it: "t_k must be an integer >= 0, got np.int64(16)".
    q, k, v = qkv((B, H, T, D), seed=123)
    scores = torch.randn(T, T // BLOCK, dtype=torch.float64)
    expected = to_dense(sparse.block_topk_mask(scores, 2, BLOCK), T, T)
    assert torch.equal(to_dense(sparse.block_topk_mask(scores, 2, np.int64(BLOCK)), T, T), expected)
    torch.testing.assert_close(sparse.moba_attention(q, k, v, block_size=np.int64(BLOCK), top_k=2),
                               sparse.moba_attention(q, k, v, block_size=BLOCK, top_k=2))


def test_moba_keeps_the_own_block_and_the_earlier_blocks_with_the_best_mean_key():
    q, k, _ = qkv((B, H, T, D), seed=123)
    top, n_blocks = 2, T // BLOCK
    mask = to_dense(sparse.moba_mask(q, k, block_size=BLOCK, top_k=top), T, T, B, H)  # (b, h, t, t)
    blocks = mask.view(B, H, T, n_blocks, BLOCK).any(dim=-1)  # (b, h, t, T_k)
    gate = q @ k.unflatten(-2, (n_blocks, BLOCK)).mean(-2).transpose(-2, -1)  # (b, h, t, T_k)
    for i in range(T):
        own = i // BLOCK
        expected = torch.zeros(B, H, n_blocks, dtype=torch.bool)
        expected[..., own] = True
        if own:  # the other top - 1 blocks: the best of the complete blocks before the own one
            best = gate[..., i, :own].topk(min(top - 1, own), dim=-1).indices
            expected[..., :own] = expected[..., :own].scatter(-1, best, True)
        assert torch.equal(blocks[..., i, :], expected), f"query {i}"


@pytest.mark.parametrize("scale", [None, -0.5], ids=["default", "negative"])
def test_nsa_selects_the_blocks_the_compressed_branch_weighs_most(scale):
    """A negative scale reverses the compressed branch's ranking: the selection follows the
    weights of the scale given, not of the default 1/sqrt(d_k)."""
    q, k, v = qkv((B, H, T, D), seed=123)
    ones = torch.ones(B, H, T, 1, dtype=torch.float64)
    gates = torch.cat([0 * ones, ones, 0 * ones], -1)  # the selected branch alone
    selected = sparse.nsa_attention(q, k, v, gates, block_size=BLOCK, top_k=3, window=5,
                                    scale=scale)
    sign = 1 if scale is None else math.copysign(1, scale)  # the ranking's direction
    means = k.unflatten(-2, (T // BLOCK, BLOCK)).mean(-2)  # (b, h, T_k, d)
    mask = torch.zeros(B, H, T, T, dtype=torch.bool)
    for i in range(T):
        own = i // BLOCK
        chosen = torch.zeros(B, H, T // BLOCK, dtype=torch.bool)
        chosen[..., [0, own]] = True
        if own > 1:  # one free choice among blocks 1 .. own - 1, all complete before query i
            scores = sign * q[..., i : i + 1, :] @ means[..., 1:own, :].transpose(-2, -1)  # (b, h, 1, ·)
            chosen[..., 1:own] = chosen[..., 1:own].scatter(-1, scores.argmax(-1), True)
        mask[..., i, : i + 1] = chosen.repeat_interleave(BLOCK, dim=-1)[..., : i + 1]
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    torch.testing.assert_close(selected, expected, rtol=0, atol=1e-14)


def test_moba_with_every_block_is_causal_attention():
    q, k, v = qkv((B, H, T, D), seed=123)
    torch.testing.assert_close(sparse.moba_attention(q, k, v, block_size=BLOCK, top_k=T // BLOCK),
                               _causal_attention(q, k, v), rtol=0, atol=1e-14)


def test_each_nsa_branch_alone_is_its_own_attention():
    q, k, v = qkv((B, H, T, D), seed=123)
    ones = torch.ones(B, H, T, 1, dtype=torch.float64)
    zeros = torch.zeros_like(ones)
    sliding = dense_attention(q, k, v, mask_mod=sliding_window(5))
    torch.testing.assert_close(
        sparse.nsa_attention(q, k, v, torch.cat([zeros, zeros, ones], -1), block_size=BLOCK, top_k=2,
                      window=5), sliding,
        rtol=0, atol=1e-14)
    every_block = torch.cat([zeros, ones, zeros], -1)
    torch.testing.assert_close(sparse.nsa_attention(q, k, v, every_block, block_size=BLOCK, top_k=T // BLOCK,
                                             window=5),
                               _causal_attention(q, k, v), rtol=0, atol=1e-14)
    compressed = sparse.nsa_attention(q, k, v, torch.cat([ones, zeros, zeros], -1), block_size=BLOCK,
                               top_k=2, window=5)
    assert compressed[..., : BLOCK - 1, :].abs().max() == 0, "no complete block before them"
    i = 9  # sees the complete blocks 0 and 1, written out
    keys = k[..., : 2 * BLOCK, :].unflatten(-2, (2, BLOCK)).mean(-2)  # (b, h, 2, d)
    values = v[..., : 2 * BLOCK, :].unflatten(-2, (2, BLOCK)).mean(-2)
    weights = (q[..., i : i + 1, :] @ keys.transpose(-2, -1) / math.sqrt(D)).softmax(-1)
    torch.testing.assert_close(compressed[..., i : i + 1, :], weights @ values, rtol=0,
                               atol=1e-14)


def test_dsa_gather_form_equals_the_dense_form_and_all_keys_is_causal():
    q, k, v = qkv((B, H, T, D), seed=123)
    index = torch.randn(B, T, T, dtype=torch.float64)
    dense = sparse.dsa_attention(q, k, v, index, top_k=5)
    torch.testing.assert_close(sparse.dsa_attention(q, k, v, index, top_k=5, gather=True), dense,
                               rtol=0, atol=1e-14)
    torch.testing.assert_close(sparse.dsa_attention(q, k, v, index, top_k=T), _causal_attention(q, k, v),
                               rtol=0, atol=1e-14)
    # a batch or a head of 1 broadcast against the others', as the dense form allows
    for one in ((q[:1], k, v, index[:1]), (q, k[:1], v[:1], index), (q[:1], k[:1], v, index[:1]),
                (q[:, :1], k, v, index), (q, k[:, :1], v, index)):
        torch.testing.assert_close(sparse.dsa_attention(*one, top_k=5, gather=True),
                                   sparse.dsa_attention(*one, top_k=5), rtol=0, atol=1e-14)


def test_queries_after_a_cache_select_bottom_right():
    q, k, v = qkv((B, H, T, D), seed=123)
    q = q[..., -5:, :]  # the 5 newest queries, at positions 11 .. 15, against all 16 keys
    index = torch.randn(B, 5, T, dtype=torch.float64)
    mask = to_dense(sparse.topk_mask(index[:, None], 13), 5, T, B, 1)  # (b, 1, t_q, t_k)
    assert mask.sum(-1).flatten().tolist() == [12, 13, 13, 13, 13] * B
    assert not (mask & ~torch.ones(5, T, dtype=torch.bool).tril(T - 5)).any()
    torch.testing.assert_close(sparse.dsa_attention(q, k, v, index, top_k=13, gather=True),
                               sparse.dsa_attention(q, k, v, index, top_k=13), rtol=0, atol=1e-14)


@pytest.mark.parametrize("form", ["moba", "dsa", "dsa gather"])
def test_a_query_block_at_the_end_of_a_cache_sees_what_it_sees_in_the_whole_sequence(form):
    """The documented alignment: for t_q < t_k the causal mask is aligned bottom-right, query i
    seeing keys j <= i + t_k - t_q, so the last 5 queries against all 16 keys give the last 5 rows
    of the whole sequence's output."""
    q, k, v = qkv((B, H, T, D), seed=123)
    index = torch.randn(B, T, T, dtype=torch.float64, generator=torch.Generator().manual_seed(1))

    def attend(q_rows: torch.Tensor, index_rows: torch.Tensor) -> torch.Tensor:
        if form == "moba":
            return sparse.moba_attention(q_rows, k, v, block_size=BLOCK, top_k=2)
        return sparse.dsa_attention(q_rows, k, v, index_rows, top_k=5, gather=form == "dsa gather")

    tail = attend(q[..., -5:, :], index[:, -5:])
    torch.testing.assert_close(tail, attend(q, index)[..., -5:, :], rtol=0, atol=1e-14)


def test_dsa_gather_gives_zero_to_a_query_that_sees_no_key_as_sdpa_does():
    """t_q = 6 queries after t_k = 4 keys, aligned bottom-right: queries 0 and 1 see no key.
    torch's SDPA and the dense form give them 0; the gather form gave nan (softmax of -infs)."""
    q, k, v = qkv((B, H, 6, D), (B, H, 4, D))
    index = torch.randn(B, 6, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    mask = to_dense(sparse.topk_mask(index[:, None], 2), 6, 4, B, 1)  # (b, 1, t_q, t_k)
    assert not mask[..., :2, :].any() and mask[..., 2:, :].any(-1).all()
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert not sdpa[..., :2, :].any()
    for gather in (False, True):
        out = sparse.dsa_attention(q, k, v, index, top_k=2, gather=gather)
        torch.testing.assert_close(out, sdpa, rtol=0, atol=1e-14, msg=f"gather={gather}")


def _rounding_errors(out: torch.Tensor, exact: torch.Tensor) -> tuple[float, float]:
    """(error of out, error of the exact answer rounded once to out's dtype), against float64."""
    return tuple((x.double() - exact).abs().max().item() for x in (out, exact.to(out.dtype)))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_dsa_in_half_precision_is_the_exact_answer_rounded_once(dtype):
    """Both forms keep scores, softmax and sums in float32 and round once, as dense_attention and
    the fused kernels do; the gather form computed them in the input dtype (2 to 3 times the
    rounding error). The reference is torch's SDPA in float64 on the same rounded inputs."""
    q, k, v = qkv((1, 2, 113, 32), (1, 2, 203, 32), dtype=torch.float32, to=dtype)
    index = torch.randn(1, 113, 203, generator=torch.Generator().manual_seed(1))
    mask = to_dense(sparse.topk_mask(index[:, None], 16), 113, 203, 1, 1)  # (b, 1, t_q, t_k)
    exact = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask)
    for gather in (False, True):
        out = sparse.dsa_attention(q, k, v, index, top_k=16, gather=gather)
        assert out.dtype == dtype
        error, rounding = _rounding_errors(out, exact)
        assert error <= 1.2 * rounding, f"gather={gather}: {error:.3g} > 1.2 x {rounding:.3g}"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_nsa_in_half_precision_is_the_exact_answer_rounded_once(dtype):
    """Block means, selection scores, the three branches and their gated sum in float32, rounded
    once: each branch rounded to the input dtype before the sum was 2.8 times the rounding error
    in float16, and bfloat16 scores selected other blocks than the exact ones."""
    q, k, v = qkv((1, 2, 64, 32), dtype=torch.float32, to=dtype)
    gates = torch.rand(1, 2, 64, 3, generator=torch.Generator().manual_seed(2)).to(dtype)
    sizes = dict(block_size=8, top_k=3, window=16)
    exact = sparse.nsa_attention(q.double(), k.double(), v.double(), gates.double(), **sizes)
    out = sparse.nsa_attention(q, k, v, gates, **sizes)
    assert out.dtype == dtype
    error, rounding = _rounding_errors(out, exact)
    assert error <= 1.2 * rounding, f"{error:.3g} > 1.2 x rounding once {rounding:.3g}"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("larger", [1, 2])
def test_half_precision_selections_rank_blocks_by_float32_scores(dtype, larger):
    """Blocks 1 and 2 of a query's past differ by half an ulp of ``dtype`` in their mean key,
    which rounds away in ``dtype``: a tie that torch.topk breaks either way. Scored in float32,
    as the exact scores, the larger one wins (each order is tried, so a tie-break cannot pass)."""
    eps = torch.finfo(dtype).eps  # 1 + eps is representable; the mean 1 + eps / 2 is not
    k = torch.zeros(1, 1, 8, 2, dtype=torch.float64)  # 4 blocks of 2 keys; block 0 and 3 score 0
    k[..., 2:6, 0] = 1.0
    k[..., 2 * larger + 1, 0] = 1 + eps  # block `larger` has the mean 1 + eps / 2, the other 1
    q = torch.tensor([1.0, 0.0], dtype=torch.float64).expand(1, 1, 8, 2)
    for select, top_k in ((sparse.moba_mask, 2), (sparse.nsa_mask, 3)):  # one free block besides the kept ones
        exact = to_dense(select(q, k, block_size=2, top_k=top_k), 8, 8, 1, 1)
        assert exact[0, 0, 7, 2 * larger] and not exact[0, 0, 7, 2 * (3 - larger)]
        half = to_dense(select(q.to(dtype), k.to(dtype), block_size=2, top_k=top_k), 8, 8, 1, 1)
        assert torch.equal(half, exact), select.__name__


def test_nsa_takes_float32_gates_for_a_half_precision_query():
    """The gates are mixed in float32, so gates of the query's dtype or float32 give one output."""
    q, k, v = qkv((1, 2, 32, 16), dtype=torch.float32, to=torch.bfloat16)
    gates = torch.rand(1, 2, 32, 3, generator=torch.Generator().manual_seed(2)).bfloat16()
    sizes = dict(block_size=8, top_k=2, window=8)
    out = sparse.nsa_attention(q, k, v, gates, **sizes)
    assert out.dtype == torch.bfloat16
    assert torch.equal(sparse.nsa_attention(q, k, v, gates.float(), **sizes), out)


def test_dsa_flops_count_the_pairs():
    indexer, selected, dense = sparse.dsa_flops(10, 4, 2, 3, 1, 5, 6)
    per_pair = 2 * 2 * (2 * 3 + 1)
    assert dense == per_pair * 55 and selected == per_pair * (1 + 2 + 3 + 4 * 7)
    assert indexer == 2 * 5 * 7 * 55


def test_dsa_flops_price_a_dense_prefill_in_the_expanded_form():
    """head_dim changes the dense baseline only: 2 h (2 d_h + d_h^R) per pair, not 2 h (2 d_c +
    d_h^R); the selected attention stays absorbed."""
    absorbed = sparse.dsa_flops(10, 4, 2, 3, 1, 5, 6)
    expanded = sparse.dsa_flops(10, 4, 2, 3, 1, 5, 6, head_dim=2)
    assert expanded[:2] == absorbed[:2]
    assert expanded[2] == 2 * 2 * (2 * 2 + 1) * 55
    # at DeepSeek-V3.2's sizes the expanded form is 3.4 times cheaper per pair
    sizes = dict(num_heads=128, kv_rank=512, rope_dim=64, index_heads=64, index_dim=128)
    ratio = sparse.dsa_flops(1, 1, **sizes)[2] / sparse.dsa_flops(1, 1, **sizes, head_dim=128)[2]
    assert ratio == pytest.approx((2 * 512 + 64) / (2 * 128 + 64))


def test_dsa_equals_transformers_deepseek_v32_attention():
    """Same weights, float64: identical selections and outputs (SDPA, whose softmax keeps
    float64; transformers' indexer computes its scores in float32)."""
    from transformers import AutoConfig  # imported here: its import costs seconds
    from transformers.models.deepseek_v32 import modeling_deepseek_v32 as ds

    top_k, b, t, d = 5, 2, 12, 32
    config = AutoConfig.for_model(
        "deepseek_v32", hidden_size=d, num_attention_heads=4, num_key_value_heads=4,
        q_lora_rank=16, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8,
        index_n_heads=3, index_head_dim=8, index_topk=top_k, num_hidden_layers=1,
        vocab_size=10, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    attn = ds.DeepseekV32Attention(config, 0).double()
    with torch.no_grad():  # norms away from their initial 1 and 0
        for name, p in attn.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.3 * torch.randn_like(p))
    x = torch.randn(b, t, d, dtype=torch.float64)
    cos_sin = ds.DeepseekV32RotaryEmbedding(config)(x, torch.arange(t)[None].expand(b, t))
    hidden = torch.finfo(torch.float64).min
    mask = torch.full((t, t), hidden, dtype=torch.float64).triu(1).expand(b, 1, t, t)
    seen = {}
    sdpa = ds.ALL_ATTENTION_FUNCTIONS["sdpa"]

    def capture(module, q, k, v, m, **kwargs):
        seen.update(q=q, k=k, v=v, scale=kwargs["scaling"])
        return sdpa(module, q, k, v, m, **kwargs)

    attn.indexer.register_forward_hook(
        lambda mod, args, out: seen.update(x=args[0], q_latent=args[1], indices=out))
    with mock.patch.dict(ds.ALL_ATTENTION_FUNCTIONS._local_mapping, {"sdpa": capture}):
        reference, _ = attn(x, cos_sin, mask)

    indexer = sparse.LightningIndexer(d, 16, 3, 8, 4).double()
    names = {"wq_b": "W_query", "wk": "W_key", "k_norm": "key_norm", "weights_proj": "W_weights"}
    indexer.load_state_dict({names[n.split(".")[0]] + "." + n.split(".")[1]: p
                             for n, p in attn.indexer.state_dict().items()})
    with torch.no_grad():
        scores = indexer(seen["x"], seen["q_latent"])  # (b, t, t)
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        theirs = torch.zeros(b, t, t, dtype=torch.bool).scatter(-1, seen["indices"].long(), True)
        ours = to_dense(sparse.topk_mask(scores[:, None], top_k), t, t, b, 1)[:, 0]
        assert torch.equal(ours, theirs & causal)  # theirs lists hidden keys too, in rows < k
        assert ours.sum(-1).tolist() == [[min(i + 1, top_k) for i in range(t)]] * b
        for gather in (False, True):
            context = sparse.dsa_attention(seen["q"], seen["k"], seen["v"], scores, top_k=top_k,
                                    scale=seen["scale"], gather=gather)  # (b, h, t, d_v)
            out = attn.o_proj(context.transpose(1, 2).reshape(b, t, -1))
            torch.testing.assert_close(out, reference, rtol=0, atol=1e-14)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_half_precision_indexer_scores_in_float32_and_selects_as_transformers(dtype):
    """Scores rounded to the half dtype tied keys that transformers' indexer (float32 scores)
    ranks apart: 2 of 128 rows in bfloat16 and 1 in float16 selected other keys."""
    from transformers import AutoConfig
    from transformers.models.deepseek_v32 import modeling_deepseek_v32 as ds

    top_k, b, t, d = 8, 2, 64, 32
    config = AutoConfig.for_model(
        "deepseek_v32", hidden_size=d, num_attention_heads=4, q_lora_rank=16, kv_lora_rank=16,
        qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8, index_n_heads=4, index_head_dim=16,
        index_topk=top_k, num_hidden_layers=1, vocab_size=10,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    torch.manual_seed(0)
    theirs = ds.DeepseekV32Indexer(config, 0)
    with torch.no_grad():
        for name, p in theirs.named_parameters():
            p.copy_(1 + 0.3 * torch.randn_like(p) if "norm" in name else 0.5 * torch.randn_like(p))
    names = {"wq_b": "W_query", "wk": "W_key", "k_norm": "key_norm", "weights_proj": "W_weights"}
    ours = sparse.LightningIndexer(d, 16, 4, 16, 4)
    ours.load_state_dict({names[n.split(".")[0]] + "." + n.split(".")[1]: p
                          for n, p in theirs.state_dict().items()})
    theirs, ours = theirs.to(dtype), ours.to(dtype)
    x, c_q = torch.randn(b, t, d, dtype=dtype), torch.randn(b, t, 16, dtype=dtype)
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    with torch.no_grad():
        cos_sin = ds.DeepseekV32RotaryEmbedding(config)(x, torch.arange(t)[None].expand(b, t))
        indices = theirs(x, c_q, cos_sin, causal, None).long()  # (b, t, k)
        scores = ours(x, c_q)  # (b, t, t)
    chosen = torch.zeros(b, t, t, dtype=torch.bool).scatter(-1, indices, True) & causal
    assert torch.equal(to_dense(sparse.topk_mask(scores[:, None], top_k), t, t, b, 1)[:, 0], chosen)
    assert scores.dtype == torch.float32


def test_selections_give_the_output_shape_on_the_meta_device():
    # the NaN checks read values: "Tensor.item() cannot be called on meta tensors", where
    # torch's SDPA and dense_attention give the shape
    q = k = v = torch.zeros(1, 2, 4, 8, device="meta")
    outputs = [
        *(sparse.dsa_attention(q, k, v, torch.zeros(1, 4, 4, device="meta"), top_k=2, gather=g)
          for g in (False, True)),
        sparse.moba_attention(q, k, v, block_size=2, top_k=1),
        sparse.nsa_attention(q, k, v, torch.zeros(1, 2, 4, 3, device="meta"), block_size=2,
                             top_k=2, window=2),
    ]
    assert [(o.shape, o.device.type) for o in outputs] == [((1, 2, 4, 8), "meta")] * 4


def test_indexer_with_a_cache_scores_chunk_by_chunk_as_all_at_once() -> None:
    """Generating: the cached index keys keep their positions, so each chunk's rows are the same."""
    torch.manual_seed(0)
    indexer = sparse.LightningIndexer(8, 4, 2, 6, 4).double()
    x, c_q = torch.randn(2, 7, 8, dtype=torch.float64), torch.randn(2, 7, 4, dtype=torch.float64)
    with torch.no_grad():
        whole = indexer(x, c_q)  # (2, 7, 7)
        cache = sparse.IndexedLatentKVCache(2, 7, kv_rank=3, rope_dim=2, index_dim=6,
                                     dtype=torch.float64)
        rows = []
        for lo, hi in ((0, 4), (4, 5), (5, 7)):
            cache.append(x.new_zeros(2, hi - lo, 3), x.new_zeros(2, hi - lo, 2))
            rows.append(indexer(x[:, lo:hi], c_q[:, lo:hi], cache=cache))  # (2, t, hi)
    for (lo, hi), chunk in zip(((0, 4), (4, 5), (5, 7)), rows):
        torch.testing.assert_close(chunk, whole[:, lo:hi, :hi], rtol=1e-14, atol=1e-14)
    assert cache.index_length == cache.length == 7 and cache.nbytes == 2 * 7 * 11 * 8



def test_indexer_gradients_through_the_cache_equal_those_of_all_tokens_at_once() -> None:
    """Each call's scores saved a view of the cache's index keys that the next call wrote into:
    backward raised autograd's "modified by an inplace operation"."""
    torch.manual_seed(0)
    indexer = sparse.LightningIndexer(8, 4, 2, 6, 4).double()
    x, c_q = torch.randn(1, 5, 8, dtype=torch.float64), torch.randn(1, 5, 4, dtype=torch.float64)
    spans, weights = ((0, 3), (3, 4), (4, 5)), torch.randn(1, 5, 5, dtype=torch.float64)
    whole = indexer(x, c_q)
    want = torch.autograd.grad(sum((whole[:, lo:hi, :hi] * weights[:, lo:hi, :hi]).sum()
                                   for lo, hi in spans), list(indexer.parameters()))
    cache = sparse.IndexedLatentKVCache(1, 5, kv_rank=3, rope_dim=2, index_dim=6, dtype=torch.float64)
    loss = torch.zeros((), dtype=torch.float64)
    for lo, hi in spans:
        cache.append(x.new_zeros(1, hi - lo, 3), x.new_zeros(1, hi - lo, 2))
        loss = loss + (indexer(x[:, lo:hi], c_q[:, lo:hi], cache=cache) * weights[:, lo:hi, :hi]).sum()
    for got, expected in zip(torch.autograd.grad(loss, list(indexer.parameters())), want):
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)

class TestBadInput:
    def test_flags_must_be_bools(self) -> None:  # a string is truthy: it would pass as True
        q = torch.randn(1, 2, 4, 3)
        with pytest.raises(ValueError, match=r"gather must be a bool, got 'no' of type str"):
            sparse.dsa_attention(q, q, q, torch.randn(1, 4, 4), top_k=2, gather="no")
        with pytest.raises(ValueError, match=r"is_causal must be a bool, got 1 of type int"):
            sparse.topk_mask(torch.randn(4, 4), 2, is_causal=1)
        with pytest.raises(ValueError, match=r"keep_first must be a bool, got 'yes' of type str"):
            sparse.block_topk_mask(torch.randn(4, 2), 2, 2, keep_first="yes")

    @pytest.mark.parametrize(
        ("sizes", "message"),
        [
            ({"rope_dim": 3}, r"index_dim and rope_dim must be even .*got index_dim=4 and rope_dim=3"),
            ({"index_dim": 3}, r"index_dim and rope_dim must be even .*got index_dim=3 and rope_dim=2"),
            ({"rope_dim": 6}, r"rope_dim must be at most index_dim=4, got 6"),
            ({"rope_dim": None}, r"rope_dim must be an integer, got None"),
        ],
    )
    def test_indexer_sizes_are_named_as_the_indexer_names_them(self, sizes, message) -> None:
        # RotaryEmbedding's messages named rotary_dim and d_h; None rotated every feature
        with pytest.raises(ValueError, match=message):
            sparse.LightningIndexer(**({"d_in": 8, "q_rank": 4, "index_heads": 2, "index_dim": 4,
                                        "rope_dim": 2} | sizes))

    @pytest.mark.parametrize("gather", [False, True])
    def test_selections_refuse_a_nan_score_they_rank(self, gather) -> None:
        # torch.topk ranks NaN first: the row kept the key (or block) whose score is undefined
        scores = torch.zeros(4, 4, dtype=torch.float64)
        scores[2, 1] = math.nan
        nan = r"must be numbers where a query ranks them, not NaN \(torch.topk ranks NaN first\)"
        with pytest.raises(ValueError, match=rf"^scores {nan}, got NaN at index \(2, 1\)$"):
            sparse.topk_mask(scores, 1)
        with pytest.raises(ValueError, match=rf"^block_scores {nan}, got NaN at index \(2, 1\)$"):
            sparse.block_topk_mask(scores, 2, 1)  # block 1 of query 2: not its own, ranked
        q = torch.randn(1, 2, 4, 3)
        with pytest.raises(ValueError, match=rf"^index_scores {nan}, got NaN at index \(0, 2, 1\)$"):
            sparse.dsa_attention(q, q, q, scores[None], top_k=1, gather=gather)
        # never ranked: the later keys (hidden), and with them each query's own block (kept)
        zeros = torch.zeros(4, 4, dtype=torch.float64)
        later = zeros.masked_fill(torch.ones(4, 4, dtype=torch.bool).triu(1), math.nan)
        own = later.masked_fill(torch.eye(4, dtype=torch.bool), math.nan)
        assert torch.equal(to_dense(sparse.topk_mask(later, 1), 4, 4),
                           to_dense(sparse.topk_mask(zeros, 1), 4, 4))
        assert torch.equal(to_dense(sparse.block_topk_mask(own, 1, 1), 4, 4),
                           to_dense(sparse.block_topk_mask(zeros, 1, 1), 4, 4))
        torch.testing.assert_close(sparse.dsa_attention(q, q, q, later[None], top_k=1, gather=gather),
                                   sparse.dsa_attention(q, q, q, zeros[None], top_k=1, gather=gather))

    @pytest.mark.parametrize("gather", [False, True])
    def test_dsa_index_scores_must_be_floating_point(self, gather) -> None:
        q = torch.randn(1, 2, 5, 4)
        with pytest.raises(ValueError, match=r"index_scores must be a floating-point tensor on the "
                                             r"query's device cpu, got \(torch.int64, 'cpu'\)"):
            sparse.dsa_attention(q, q, q, torch.randint(0, 5, (1, 5, 5)), top_k=2, gather=gather)

    def test_the_indexer_checks_its_tokens_and_query_latents(self) -> None:
        indexer = sparse.LightningIndexer(8, 4, 2, 4, 2)
        with pytest.raises(ValueError, match=r"x must have last dimension d_in=8, got 7"):
            indexer(torch.randn(1, 5, 7), torch.randn(1, 5, 4))
        with pytest.raises(ValueError, match=r"q_latent must have x's \(b, t\) = \(1, 5\), got \(1, 4\)"):
            indexer(torch.randn(1, 5, 8), torch.randn(1, 4, 4))
        with pytest.raises(ValueError, match=r"x must be 3-d, got a 2-d tensor of shape \(5, 8\)"):
            indexer(torch.randn(5, 8), torch.randn(5, 4))

    def test_the_indexer_needs_an_indexed_cache_holding_its_latents(self) -> None:
        # start = cache.length - t came out negative: "start must be an integer >= 0, got -5",
        # and a plain LatentKVCache had no append_index_keys (an AttributeError).
        indexer = sparse.LightningIndexer(8, 4, 2, 4, 2)
        x, c_q = torch.randn(1, 5, 8), torch.randn(1, 5, 4)
        cache = sparse.IndexedLatentKVCache(1, 8, kv_rank=3, rope_dim=2, index_dim=4)
        with pytest.raises(ValueError, match=r"cache must hold the latents of x's 5 tokens after "
                                             r"its 0 indexed ones \(append them first\): 5 "
                                             r"latents, got 0"):
            indexer(x, c_q, cache=cache)
        latent = LatentKVCache(1, 8, kv_rank=3, rope_dim=2)
        latent.append(torch.zeros(1, 5, 3), torch.zeros(1, 5, 2))
        with pytest.raises(ValueError, match=r"cache must be an IndexedLatentKVCache, got "
                                             r"LatentKVCache"):
            indexer(x, c_q, cache=latent)

    def test_index_keys_may_not_lag_the_latents_or_change_dtype(self) -> None:
        cache = sparse.IndexedLatentKVCache(2, 7, kv_rank=3, rope_dim=2, index_dim=6,
                                     dtype=torch.float64)
        cache.append(torch.zeros(2, 2, 3, dtype=torch.float64), torch.zeros(2, 2, 2, dtype=torch.float64))
        with pytest.raises(ValueError, match=r"2 latents are stored, and 0 \+ 1 index keys would be"):
            cache.append_index_keys(torch.ones(2, 1, 6, dtype=torch.float64))
        with pytest.raises(ValueError, match=r"dtype torch\.float64, got \(2, 2, 6\) and torch\.float32"):
            cache.append_index_keys(torch.ones(2, 2, 6))

    def test_index_keys_must_be_on_the_caches_device(self) -> None:
        # copied over without a word (cpu keys into a meta cache), as LatentKVCache.append
        # refuses them; meta keys into a cpu cache failed inside torch (NotImplementedError)
        cache = sparse.IndexedLatentKVCache(1, 4, 3, 2, 5, device="meta")
        cache.append(torch.zeros(1, 2, 3, device="meta"), torch.zeros(1, 2, 2, device="meta"))
        with pytest.raises(ValueError, match=r"keys must be on the cache's device meta, got cpu"):
            cache.append_index_keys(torch.ones(1, 2, 5))
        assert cache.index_length == 0

    def test_index_keys_must_follow_the_latents_and_have_their_width(self) -> None:
        cache = sparse.IndexedLatentKVCache(2, 7, kv_rank=3, rope_dim=2, index_dim=6,
                                     dtype=torch.float64)
        keys = torch.zeros(2, 1, 6, dtype=torch.float64)
        with pytest.raises(ValueError, match="index keys must follow the latents"):
            cache.append_index_keys(keys)
        cache.append(torch.zeros(2, 1, 3, dtype=torch.float64),
                     torch.zeros(2, 1, 2, dtype=torch.float64))
        with pytest.raises(ValueError, match=r"keys must have shape \(b, t, 6\) with b=2.*got"):
            cache.append_index_keys(keys[..., :5])
        with pytest.raises(ValueError, match=r"dtype torch\.float64, got list$"):  # AttributeError
            cache.append_index_keys([[[0.0] * 6]])

    def test_top_k_below_one(self):
        with pytest.raises(ValueError, match=r"top_k must be at least 1, got 0"):
            sparse.topk_mask(torch.zeros(4, 4), 0)

    def test_top_k_below_the_always_kept_blocks(self):
        with pytest.raises(ValueError, match=r"at least the 2 always-kept blocks, got 1"):
            sparse.block_topk_mask(torch.zeros(8, 2), 1, 4, keep_first=True)

    def test_nsa_mask_needs_the_first_and_own_block(self):
        q, k, _ = qkv((B, H, T, D), seed=123)
        with pytest.raises(ValueError, match=r"at least the 2 always-kept blocks, got 1"):
            sparse.nsa_mask(q, k, block_size=BLOCK, top_k=1)

    def test_nsa_needs_as_many_queries_as_keys(self):
        # sparse.nsa_mask's compressed branch places query i at position i, its selection at
        # t_k - t_q + i: with t_q < t_k the two disagreed and the mask came out silently wrong.
        q, k, v = qkv((B, H, T, D), seed=123)
        message = r"NSA is self-attention: key must hold t_k = t_q = 4 tokens, got t_k=16"
        with pytest.raises(ValueError, match=message):
            sparse.nsa_mask(q[..., -4:, :], k, block_size=BLOCK, top_k=2)
        with pytest.raises(ValueError, match=message):
            sparse.nsa_attention(q[..., -4:, :], k, v, torch.ones(B, H, 4, 3), block_size=BLOCK,
                          top_k=2, window=4)

    def test_dsa_gather_checks_query_key_and_value(self):
        q, k, v = qkv((B, H, T, D), seed=123)
        scores = torch.zeros(B, T, T, dtype=q.dtype)
        with pytest.raises(ValueError, match=r"same last dimension d_k, got 8 and 7"):
            sparse.dsa_attention(q, k[..., :7], v, scores, top_k=2, gather=True)

    def test_moba_needs_4d_tensors(self):
        q, k, _ = qkv((B, H, T, D), seed=123)
        with pytest.raises(ValueError, match=r"query must be \(b, h, t, d\), got shape \(3, 16, 8\)"):
            sparse.moba_mask(q[0], k[0], block_size=BLOCK, top_k=2)

    def test_moba_refuses_batches_and_heads_that_do_not_broadcast(self):
        # The gate's matmul ran first and raised torch's "size of tensor a (4) must match".
        q, k, v = qkv((B, H, T, D), seed=123)
        with pytest.raises(ValueError, match=r"leading dimensions of query and key must broadcast, "
                                             r"got \(2, 3\), \(2, 2\)"):
            sparse.moba_mask(q, k[:, :2], block_size=BLOCK, top_k=2)  # 2 key heads for 3 queries'
        with pytest.raises(ValueError, match=r"leading dimensions of query, key and value must broadcast"):
            sparse.moba_attention(q, k[:1].repeat(B + 1, 1, 1, 1), v, block_size=BLOCK, top_k=2)

    def test_nsa_mask_refuses_batches_and_heads_that_do_not_broadcast(self):
        # The compressed scores' matmul ran first and raised torch's "size of tensor a (3) must
        # match the size of tensor b (2)".
        q, k, _ = qkv((B, H, T, D), seed=123)
        with pytest.raises(ValueError, match=r"leading dimensions of query and key must broadcast, "
                                             r"got \(2, 3\), \(2, 2\)"):
            sparse.nsa_mask(q, k[:, :2], block_size=BLOCK, top_k=2)

    def test_selections_refuse_mixed_dtypes_before_scoring(self):
        # The block scores' matmul ran first and raised torch's "expected scalar type Double".
        q, k, v = qkv((B, H, T, D), seed=123)
        message = r"query, key must share one dtype, got query torch.float64 on cpu, key torch.float32"
        with pytest.raises(ValueError, match=message):
            sparse.moba_mask(q, k.float(), block_size=BLOCK, top_k=2)
        with pytest.raises(ValueError, match=message):
            sparse.nsa_mask(q, k.float(), block_size=BLOCK, top_k=2)
        with pytest.raises(ValueError, match=message.replace("key must", "key, value must")):
            sparse.moba_attention(q, k.float(), v, block_size=BLOCK, top_k=2)
        with pytest.raises(ValueError, match=r"query, key, value must share one dtype.*value "
                                             r"torch\.float32"):
            sparse.moba_attention(q, k, v.float(), block_size=BLOCK, top_k=2)
        with pytest.raises(ValueError, match=r"query, key, value must share one dtype.*value "
                                             r"torch\.float32"):  # refused before NSA upcasts
            sparse.nsa_attention(q.half(), k.half(), v.float(), torch.zeros(B, H, T, 3), block_size=BLOCK,
                          top_k=2, window=4)

    @pytest.mark.parametrize("shape", [(2, 1), (1, 2)])
    def test_a_selection_for_fewer_sequences_or_heads_is_refused_not_wrapped(self, shape):
        # b % 2 and h % 2 gave sequence (head) 2 the selection of 0, where only a size of 1
        # broadcasts: torch's SDPA refuses a mask of batch 2 for 4 sequences
        rule = sparse.topk_mask(torch.randn(*shape, T, T), 2)
        with pytest.raises(ValueError, match=r"mask_mod must hold a value for every index"):
            to_dense(rule, T, T, b=4, h=4)
        q, k, v = qkv((4, 4, T, D), seed=123)
        with pytest.raises(ValueError, match=r"mask_mod must hold a value for every index"):
            dense_attention(q, k, v, mask_mod=rule)
        block_rule = sparse.block_topk_mask(torch.randn(*shape, T, T // BLOCK), 2, BLOCK)
        with pytest.raises(ValueError, match=r"mask_mod must hold a value for every index"):
            to_dense(block_rule, T, T, b=4, h=4)

    def test_block_size_must_divide(self):
        q, k, v = qkv((B, H, T, D), seed=123)
        with pytest.raises(ValueError, match=r"block_size must divide the keys' t_k=16, got "
                                             r"block_size=5"):
            sparse.moba_attention(q, k, v, block_size=5, top_k=2)

    def test_scores_must_be_a_matrix(self):
        with pytest.raises(ValueError, match=r"scores must be a floating.*got \(\(4,\), torch\.float32\)"):
            sparse.topk_mask(torch.zeros(4), 2)

    def test_gates_must_have_one_per_branch(self):
        q, k, v = qkv((B, H, T, D), seed=123)
        with pytest.raises(ValueError, match=r"gates must have shape .* got \(2, 3, 16, 2\)"):
            sparse.nsa_attention(q, k, v, torch.zeros(B, H, T, 2), block_size=BLOCK, top_k=2, window=4)

    def test_gates_must_be_floats_of_the_querys_dtype_and_device(self):
        # Float64 gates silently made a float32 output float64; integer gates were accepted.
        q, k, v = qkv((B, H, T, D), seed=123, dtype=torch.float32)
        sizes = dict(block_size=BLOCK, top_k=2, window=4)
        gates = torch.full((B, H, T, 3), 0.5)
        for wrong, got in ((gates.double(), "torch.float64 on cpu"), (gates.long(), "torch.int64 on cpu"),
                           (gates.to("meta"), "torch.float32 on meta")):
            with pytest.raises(ValueError, match=rf"gates must be torch\.float32 on cpu, as the "
                                                 rf"query, got {got}"):
                sparse.nsa_attention(q, k, v, wrong, **sizes)
        with pytest.raises(ValueError, match=r"gates must be torch\.bfloat16 or torch\.float32 on "
                                             r"cpu, as the query, got torch\.float16 on cpu"):
            sparse.nsa_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), gates.half(), **sizes)
        with pytest.raises(ValueError, match=r"gates must have shape .* got list"):
            sparse.nsa_attention(q, k, v, gates.tolist(), **sizes)

    def test_gates_must_lie_in_0_1(self):
        # NSA's gates are a sigmoid's outputs; 5 g - 2 ran and mixed the branches with -2 and 3.
        q, k, v = qkv((B, H, T, D), seed=123)
        sizes = dict(block_size=BLOCK, top_k=2, window=4)
        gates = torch.rand(B, H, T, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
        gates[0, 0, 0] = torch.tensor([0.0, 1.0, 0.5])  # the ends are gates too
        sparse.nsa_attention(q, k, v, gates, **sizes)
        gates[0, 1, 2, 0], gates[1, 2, 3, 1] = -0.25, 3.0
        with pytest.raises(ValueError, match=r"gates must be in \[0, 1\], got values in \[-0\.25, 3\]"):
            sparse.nsa_attention(q, k, v, gates, **sizes)
        gates[0, 1, 2, 0], gates[1, 2, 3, 1] = 0.5, math.nan
        with pytest.raises(ValueError, match=r"gates must be in \[0, 1\], got nan"):
            sparse.nsa_attention(q, k, v, gates, **sizes)

    def test_index_scores_must_have_one_per_query_and_key(self):
        q, k, v = qkv((B, H, T, D), seed=123)
        with pytest.raises(ValueError, match=r"index_scores must have shape .* got \(2, 16\)"):
            sparse.dsa_attention(q, k, v, torch.zeros(B, T), top_k=2)

    def test_dsa_flops_head_dim_must_be_a_size(self):
        with pytest.raises(ValueError, match=r"head_dim must be at least 1, got 0"):
            sparse.dsa_flops(10, 4, 2, 3, 1, 5, 6, head_dim=0)

    def test_top_k_above_the_keys_is_clamped(self):
        mask = to_dense(sparse.topk_mask(torch.zeros(3, 3), 10), 3, 3)
        assert torch.equal(mask, torch.ones(3, 3, dtype=torch.bool).tril())


def test_a_visible_key_scoring_minus_inf_is_kept_when_the_row_has_room():
    """A row with fewer visible keys than top_k keeps them all, a key scoring -inf included:
    the hidden keys were masked to -inf too, and torch.topk broke that tie for hidden keys, so
    such rows kept fewer keys, in the dense and gather forms and in the block selection."""
    t, top_k = 5, 3
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
    # hidden keys score 1; rows 0-2 (at most 3 visible keys): key 0 scores 0, the others -inf;
    # rows 3-4: key j scores -j, so keys 0, 1 and 2 are their top 3
    scores = torch.where(j > i, 1.0, torch.where((i < top_k) & (j > 0), -math.inf, -j * 1.0))
    scores = scores.double()
    want_mask = (j <= i) & (j < top_k)
    assert torch.equal(to_dense(sparse.topk_mask(scores, top_k), t, t), want_mask)
    own_kept = (j <= i) & ((j < top_k - 1) | (j == i))  # blocks of 1 key: the own one is kept
    assert torch.equal(to_dense(sparse.block_topk_mask(scores, top_k, 1), t, t), own_kept)
    q, k, v = qkv((1, 2, t, 4), seed=7)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=want_mask)
    for gather in (False, True):
        got = sparse.dsa_attention(q, k, v, scores[None], top_k=top_k, gather=gather)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-14, msg=f"gather={gather}")


def test_dsa_takes_its_scale_in_both_forms():
    """scale multiplies the scores (not 1/sqrt(d_k)) in the dense and the gather form: SDPA with
    the selection as its mask and that scale."""
    q, k, v = qkv((B, H, T, D), seed=123)
    index = torch.randn(B, T, T, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    mask = to_dense(sparse.topk_mask(index[:, None], 5), T, T, B, 1)  # (b, 1, t, t)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3)
    for gather in (False, True):
        got = sparse.dsa_attention(q, k, v, index, top_k=5, scale=0.3, gather=gather)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-14, msg=f"gather={gather}")


def test_nsa_compressed_branch_sees_a_block_once_it_has_ended():
    """Query i attends to the means of blocks n with (n + 1) B <= i + 1: the block ending at i is
    seen by query i itself, written out as SDPA over the block means."""
    q, k, v = qkv((B, H, T, D), seed=123)
    ones = torch.ones(B, H, T, 1, dtype=torch.float64)
    compressed = sparse.nsa_attention(q, k, v, torch.cat([ones, 0 * ones, 0 * ones], -1),
                               block_size=BLOCK, top_k=2, window=5)
    keys, values = (x.unflatten(-2, (T // BLOCK, BLOCK)).mean(-2) for x in (k, v))  # (b, h, T_k, d)
    ends = torch.arange(1, T // BLOCK + 1) * BLOCK - 1  # block n ends at token (n + 1) B - 1
    seen = ends[None, :] <= torch.arange(T)[:, None]  # (t, T_k)
    rows = slice(BLOCK - 1, None)  # every query from the end of block 0 on sees a block
    want = F.scaled_dot_product_attention(q[..., rows, :], keys, values, attn_mask=seen[rows])
    torch.testing.assert_close(compressed[..., rows, :], want, rtol=0, atol=1e-14)


def test_indexer_scores_are_the_written_out_sum_over_index_heads():
    """I_ij = sum_l eta_il ReLU(q_il . k_j / sqrt(d_I)) / sqrt(h_I) (equation (14.2)), entry by
    entry from the indexer's own rotated queries and normalized keys."""
    torch.manual_seed(0)
    h_i, d_i = 3, 6
    indexer = sparse.LightningIndexer(8, 4, h_i, d_i, 4).double()
    x, c_q = torch.randn(1, 5, 8, dtype=torch.float64), torch.randn(1, 5, 4, dtype=torch.float64)
    with torch.no_grad():
        scores = indexer(x, c_q)[0]  # (t, t)
        queries = indexer.rotary(indexer.W_query(c_q).view(1, 5, h_i, d_i).transpose(1, 2))[0]
        keys = indexer.rotary(indexer.key_norm(indexer.W_key(x)))[0]  # (t, d_I)
        eta = indexer.W_weights(x)[0]  # (t, h_I)
    want = torch.zeros(5, 5, dtype=torch.float64)
    for i in range(5):
        for j in range(5):
            want[i, j] = sum(eta[i, l] * max(queries[l, i] @ keys[j] / math.sqrt(d_i), 0.0)
                             for l in range(h_i)) / math.sqrt(h_i)
    torch.testing.assert_close(scores, want, rtol=1e-13, atol=1e-13)


class TestIndexedCache:
    def _cache(self) -> sparse.IndexedLatentKVCache:
        return sparse.IndexedLatentKVCache(2, 7, kv_rank=3, rope_dim=2, index_dim=6, dtype=torch.float64)

    @staticmethod
    def _append_latents(cache: sparse.IndexedLatentKVCache, t: int) -> None:
        dtype = cache.index_keys.dtype
        cache.append(torch.zeros(2, t, 3, dtype=dtype), torch.zeros(2, t, 2, dtype=dtype))

    def test_reset_forgets_the_index_keys_too(self) -> None:
        cache = self._cache()
        self._append_latents(cache, 3)
        cache.append_index_keys(torch.ones(2, 3, 6, dtype=torch.float64))
        cache.reset()
        assert cache.index_length == 0
        self._append_latents(cache, 2)
        keys = torch.full((2, 2, 6), 2.0, dtype=torch.float64)
        assert torch.equal(cache.append_index_keys(keys), keys)

    def test_to_moves_the_index_keys(self) -> None:
        cache = self._cache().to(dtype=torch.float32)
        assert cache.index_keys.dtype == torch.float32
        self._append_latents(cache, 1)
        assert cache.append_index_keys(torch.ones(2, 1, 6)).dtype == torch.float32
