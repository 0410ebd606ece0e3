"""BlockAttention: one mask rule, and QK-norm bounds the scores."""

import pytest
import torch
from _inputs import NON_BOOLS, randomize, refuses_non_bool, seeded_randn

from attention import BlockAttention, KVCache, RollingKVCache, RotaryEmbedding, TransformerBlock
from attention.inference import window_visible


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


def _heads(x: torch.Tensor) -> torch.Tensor:
    """(b, t, d) -> (b, h, t, d_h) for h = 2."""
    b, t, d = x.shape
    return x.view(b, t, 2, d // 2).transpose(1, 2)


def test_forward_is_the_formula_written_out_in_float64() -> None:
    """Q, K, V = x W_q, x W_k, x W_v; each head's Q and K normed by its own gain (q_norm,
    k_norm, with norm_eps), then rotated; softmax(Q Kᵀ / sqrt(d_h) + causal) V, heads merged, W_o."""
    attn = randomize(BlockAttention(
        8, 2, is_causal=True, rotary=RotaryEmbedding(4), qk_norm="rms", norm_eps=0.5,
    ).double())
    gain_q, gain_k = seeded_randn(5, 4), seeded_randn(6, 4)  # one gain each, not shared
    with torch.no_grad():
        attn.q_norm.weight.copy_(gain_q)
        attn.k_norm.weight.copy_(gain_k)
    x = seeded_randn(0, 2, 5, 8)
    w_q, w_k, w_v = attn.qkv.weight.split(8)
    b_q, b_k, b_v = attn.qkv.bias.split(8)
    q, k, v = (_heads(x @ w.T + bias) for w, bias in ((w_q, b_q), (w_k, b_k), (w_v, b_v)))

    def rms(y: torch.Tensor, gain: torch.Tensor) -> torch.Tensor:
        return gain * y / torch.sqrt(y.pow(2).mean(-1, keepdim=True) + 0.5)

    heads = attn.heads(x)  # before the rotation
    for got, want in zip(heads, (rms(q, gain_q), rms(k, gain_k), v), strict=True):
        torch.testing.assert_close(got, want, atol=1e-14, rtol=0)
    q, k = attn.rotary(rms(q, gain_q)), attn.rotary(rms(k, gain_k))
    scores = (q @ k.transpose(-2, -1) / 2.0).masked_fill(~torch.ones(5, 5).tril().bool(), -torch.inf)
    weights = torch.softmax(scores, dim=-1)
    context = (weights @ v).transpose(1, 2).reshape(2, 5, 8)
    out, got_weights = attn(x)
    torch.testing.assert_close(got_weights, weights, atol=1e-14, rtol=0)
    torch.testing.assert_close(out, attn.out_proj(context), atol=1e-13, rtol=0)


def test_a_causal_block_keeps_a_mask_that_hides_more_than_the_future() -> None:
    torch.manual_seed(0)
    attn = BlockAttention(8, 2, is_causal=True).double()
    x = seeded_randn(1, 1, 4, 8)
    keep = torch.ones(4, 4, dtype=torch.bool)
    keep[1:, 0] = False  # key 0 hidden from queries 1.. (query 0 still sees it)
    _, weights = attn(x, keep)
    assert not weights[..., 1:, 0].any() and not weights.triu(1).any()
    plain = BlockAttention(8, 2).double()
    plain.load_state_dict(attn.state_dict())
    _, unmasked = plain(x, keep & torch.ones(4, 4, dtype=torch.bool).tril())
    torch.testing.assert_close(weights, unmasked, atol=1e-15, rtol=0)


@pytest.mark.parametrize("qk_norm", [None, "rms"])
def test_decoding_in_chunks_with_a_cache_equals_one_forward(qk_norm) -> None:
    """Each chunk's queries and keys are rotated from their own positions n .. n + t - 1, and
    the causal mask of t queries against n + t keys is aligned bottom-right."""
    attn = randomize(BlockAttention(8, 2, is_causal=True, rotary=RotaryEmbedding(4),
                                    qk_norm=qk_norm).double())
    x = seeded_randn(2, 2, 7, 8)
    full, full_weights = attn(x)
    cache = KVCache(2, 2, 7, 4, dtype=torch.float64)
    start = 0
    for t in (3, 1, 3):
        out, weights = attn(x[:, start:start + t], cache=cache)
        torch.testing.assert_close(out, full[:, start:start + t], atol=1e-13, rtol=0)
        torch.testing.assert_close(weights, full_weights[:, :, start:start + t, :start + t],
                                   atol=1e-14, rtol=0)
        start += t


@pytest.mark.parametrize("is_causal", [False, True])
def test_a_mask_with_a_cache_covers_all_cached_keys(is_causal) -> None:
    """With n cached tokens, attn_mask is (t, n + t): one row per query, one column per key,
    old and new; each chunk's rows of the full mask give the one-forward result."""
    attn = randomize(BlockAttention(8, 2, is_causal=is_causal, rotary=RotaryEmbedding(4)).double())
    x = seeded_randn(4, 2, 6, 8)
    keep = torch.ones(6, 6, dtype=torch.bool).tril()  # causal either way: chunks see no future
    keep[:, 1] = False  # key 1 hidden from every query, a padded token
    full, full_weights = attn(x, keep)
    cache = KVCache(2, 2, 6, 4, dtype=torch.float64)
    start = 0
    for t in (2, 3, 1):
        out, weights = attn(x[:, start:start + t], keep[start:start + t, :start + t], cache=cache)
        torch.testing.assert_close(out, full[:, start:start + t], atol=1e-13, rtol=0)
        torch.testing.assert_close(weights, full_weights[:, :, start:start + t, :start + t],
                                   atol=1e-14, rtol=0)
        assert not weights[..., 1].any()
        start += t


@pytest.mark.parametrize("sinks", [0, 1])
def test_decoding_with_a_rolling_cache_equals_one_forward_under_its_window(sinks) -> None:
    """Each query of a chunk sees its own window (and the sinks), not the first query's."""
    attn = randomize(BlockAttention(8, 2, is_causal=True, rotary=RotaryEmbedding(4)).double())
    x = seeded_randn(3, 1, 8, 8)
    positions = torch.arange(8)
    visible = window_visible(positions, positions, 3, sinks)  # (8, 8)
    full, _ = attn(x, visible)
    cache = RollingKVCache(1, 2, window=3, d_h=4, dtype=torch.float64, sinks=sinks)
    start = 0
    for t in (2, 3, 1, 2):
        out, _ = attn(x[:, start:start + t], cache=cache)
        torch.testing.assert_close(out, full[:, start:start + t], atol=1e-13, rtol=0)
        start += t


def test_a_causal_block_adds_a_float32_mask_to_half_precision_scores_in_float32() -> None:
    """As without is_causal: the mask was rounded to bfloat16 first (100.7 became 100.5)."""
    causal = BlockAttention(8, 2, is_causal=True).to(torch.bfloat16)
    plain = BlockAttention(8, 2).to(torch.bfloat16)
    plain.load_state_dict(causal.state_dict())
    x = seeded_randn(5, 1, 6, 8).to(torch.bfloat16)
    bias = 100 + 2 * torch.rand(6, 6, generator=torch.Generator().manual_seed(6))  # float32
    hidden = torch.ones(6, 6, dtype=torch.bool).triu(1)
    out, weights = causal(x, bias)
    expected_out, expected_weights = plain(x, bias.masked_fill(hidden, float("-inf")))
    assert torch.equal(weights, expected_weights) and torch.equal(out, expected_out)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_context_is_as_close_to_float64_as_float32_rounded_once(dtype) -> None:
    """A V ran in half precision on rounded weights: the bfloat16 context was off by 0.0183,
    the float16 one by 0.0025, where torch's SDPA (nn.TransformerEncoderLayer's path, float32
    rounded once) is off by 0.0149 and 0.0018. The weights returned stay in x's dtype."""
    attn = BlockAttention(8, 1, dtype=dtype)
    with torch.no_grad():
        attn.qkv.weight.copy_(torch.eye(8).repeat(3, 1)), attn.out_proj.weight.copy_(torch.eye(8))
        attn.qkv.bias.zero_(), attn.out_proj.bias.zero_()
    x = (1.5 * seeded_randn(0, 4, 64, 8)).to(dtype)  # queries = keys = values = x
    out, weights = attn(x)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    want = sdpa(x.double()[:, None], x.double()[:, None], x.double()[:, None])[:, 0]
    torch_error = (sdpa(x[:, None], x[:, None], x[:, None])[:, 0].double() - want).abs().max()
    assert out.dtype == weights.dtype == dtype
    assert (out.double() - want).abs().max() <= 1.05 * torch_error


def test_dropout_acts_on_weights_and_output_in_training_only() -> None:
    torch.manual_seed(0)
    attn = BlockAttention(8, 2, dropout=0.5).double()
    x = seeded_randn(4, 2, 6, 8)
    reference = BlockAttention(8, 2).double()
    reference.load_state_dict(attn.state_dict())
    attn.eval()
    out, weights = attn(x)
    expected_out, expected_weights = reference(x)
    assert torch.equal(out, expected_out) and torch.equal(weights, expected_weights)
    attn.train()
    torch.manual_seed(1)
    out, weights = attn(x)
    assert (weights == 0).any()  # dropped weights (the rest scaled by 2)
    assert (out == 0).float().mean() > 0.25  # SA(x) dropped too: about half its entries are 0


def test_bias_false_leaves_no_bias_in_the_projections_the_gate_or_the_norms() -> None:
    attn = BlockAttention(8, 2, qk_norm="layer", output_gate=True, bias=False)
    assert all(not name.endswith("bias") for name, _ in attn.named_parameters())

class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    def test_norm_eps_must_be_a_positive_number_with_a_qk_norm(self) -> None:
        with pytest.raises(ValueError, match=r"eps must be a finite number > 0, got -1\.0"):
            BlockAttention(8, 2, qk_norm="rms", norm_eps=-1.0)

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
        with pytest.raises(ValueError, match=message):
            BlockAttention(8, 2).heads(torch.randn(shape))

    @pytest.mark.parametrize("is_causal", [False, True])
    def test_a_mask_must_broadcast_to_the_scores(self, is_causal) -> None:
        block = BlockAttention(8, 2, is_causal=is_causal)
        with pytest.raises(ValueError, match=r"attn_mask must broadcast to the scores' shape "
                                             r"\(1, 2, 4, 4\), got shape \(5, 5\)"):
            block(torch.randn(1, 4, 8), torch.ones(5, 5, dtype=torch.bool))

    def test_a_mask_needs_a_query_and_a_key_dimension(self) -> None:
        """nn.MultiheadAttention refuses a 1-d attn_mask; it was broadcast over every query."""
        with pytest.raises(ValueError, match=r"attn_mask must have at least 2 dimensions \(\.\.\., t_q, "
                                             r"t_k\), got shape \(4,\)"):
            BlockAttention(8, 2)(torch.randn(1, 4, 8), torch.ones(4, dtype=torch.bool))

    def test_torchs_causal_bias_is_refused_with_the_mask_to_pass(self) -> None:
        """A CausalBias is a Tensor subclass without a mask's shape; it used to end in torch's
        AttributeError ('CausalBias' object has no attribute 'variant')."""
        from torch.nn.attention.bias import causal_upper_left  # loads torch._dynamo: here only

        with pytest.raises(ValueError, match=r"got torch's CausalBias .*pass causal_mask"):
            BlockAttention(8, 2)(torch.randn(1, 4, 8), causal_upper_left(4, 4))

    @pytest.mark.parametrize("cache", ["kv", [1.0], 3])
    def test_a_cache_must_have_length_and_append(self, cache) -> None:
        # was an AttributeError: 'str' object has no attribute 'length'
        with pytest.raises(ValueError, match=r"cache must be a KV cache with length and append"):
            BlockAttention(8, 2, is_causal=True)(torch.randn(1, 4, 8), cache=cache)

    @pytest.mark.parametrize(("new_cache", "t_k"), [
        (lambda: KVCache(1, 2, 8, 4), 5),  # 3 cached + 2 new
        (lambda: RollingKVCache(1, 2, window=2, d_h=4, sinks=1), 4),  # sink 0, key 2, 2 new
    ])
    @pytest.mark.parametrize("is_causal", [False, True])
    def test_a_refused_mask_leaves_the_cache_as_it_was(self, new_cache, t_k, is_causal) -> None:
        """The mask was checked after x's keys were appended: a refused call left them in the
        cache, at positions every later call then read."""
        cache = new_cache()
        block = BlockAttention(8, 2, is_causal=is_causal)
        block(torch.randn(1, 3, 8), cache=cache)
        x = torch.randn(1, 2, 8)
        with pytest.raises(ValueError, match=rf"attn_mask must broadcast to the scores' shape "
                                             rf"\(1, 2, 2, {t_k}\), got shape \(2, 9\)"):
            block(x, torch.ones(2, 9, dtype=torch.bool), cache=cache)
        with pytest.raises(ValueError, match=r"attn_mask must be bool .* got torch.int64"):
            block(x, torch.ones(2, t_k, dtype=torch.long), cache=cache)
        assert cache.length == 3
        _, weights = block(x, torch.ones(2, t_k, dtype=torch.bool), cache=cache)
        assert weights.shape == (1, 2, 2, t_k) and cache.length == 5

    @pytest.mark.parametrize("is_causal", [False, True])
    def test_an_integer_mask_is_refused(self, is_causal):
        """An int 0/1 mask was added to the scores of a causal block and refused otherwise."""
        block = BlockAttention(8, 2, is_causal=is_causal)
        keep = torch.ones(4, 4, dtype=torch.bool).tril()
        with pytest.raises(ValueError, match=r"attn_mask must be bool .* got torch.int64"):
            block(torch.randn(1, 4, 8), keep.long())

    @pytest.mark.parametrize(("rotary", "message"), [
        (RotaryEmbedding(8), r"rotary must rotate heads of width d_h=4, got d_h=8"),
        ("rope", r"rotary must be a RotaryEmbedding or None, got str"),  # was an AttributeError
    ])
    def test_rotary_must_be_a_rotary_embedding_of_width_d_h(self, rotary, message: str) -> None:
        with pytest.raises(ValueError, match=message):
            BlockAttention(8, 2, rotary=rotary)

    @pytest.mark.parametrize("value", NON_BOOLS)
    @pytest.mark.parametrize(
        ("flag", "call"),
        [
            ("bias", lambda value: BlockAttention(8, 2, bias=value)),
        ],
    )
    def test_flags_must_be_bools(self, flag: str, call, value: object) -> None:
        with refuses_non_bool(flag, value):
            call(value)
