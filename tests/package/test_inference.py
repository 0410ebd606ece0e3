"""attention.inference: cached decoding equals the full pass; GQA equals torch and MHA."""

import pytest
import torch
import torch.nn.functional as F
from _inputs import NON_BOOLS, refuses_non_bool, seeded_randn

from attention import MultiHeadAttention, sliding_window_mask
from attention.inference import GroupedQueryAttention, sink_window_mask
from attention.kv_cache import KVCache, RollingKVCache, kv_cache_bytes

HEADS = [4, 2, 1]  # h_kv for h = 4: multi-head, grouped-query, multi-query
CHUNKS = [(3, 1, 1, 1, 1, 1, 1), (2, 4, 1, 2), (9,)]  # prefill + one at a time, chunked, one-shot


def _gqa(num_kv_heads: int, window: int | None = None) -> GroupedQueryAttention:
    torch.manual_seed(0)
    return GroupedQueryAttention(6, 8, 4, num_kv_heads, qkv_bias=True, window=window).double()


def _torch_reference(gqa: GroupedQueryAttention, x: torch.Tensor) -> torch.Tensor:
    """The same projections, attention by F.scaled_dot_product_attention(enable_gqa=True)."""
    b, t, _ = x.shape
    q = gqa.W_query(x).view(b, t, 4, 2).transpose(1, 2)  # (b, h, t, d_h)
    k = gqa.W_key(x).view(b, t, -1, 2).transpose(1, 2)  # (b, h_kv, t, d_h)
    v = gqa.W_value(x).view(b, t, -1, 2).transpose(1, 2)
    if gqa.window is None:
        z = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    else:
        i, j = torch.arange(t)[:, None], torch.arange(t)
        allowed = (j <= i) & (j > i - gqa.window)  # (t, t): i - w < j <= i, written out
        z = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)
    return gqa.out_proj(z.transpose(1, 2).reshape(b, t, 8))


@pytest.mark.parametrize("window", [None, 1, 3])
@pytest.mark.parametrize("num_kv_heads", HEADS)
def test_gqa_equals_torchs_sdpa_with_enable_gqa(num_kv_heads: int, window: int | None) -> None:
    gqa = _gqa(num_kv_heads, window)
    x = torch.randn(2, 9, 6, dtype=torch.float64)
    torch.testing.assert_close(gqa(x), _torch_reference(gqa, x), atol=1e-12, rtol=0)


@pytest.mark.parametrize("chunks", CHUNKS)
@pytest.mark.parametrize("window", [None, 3])
@pytest.mark.parametrize("num_kv_heads", HEADS)
def test_cached_decoding_equals_the_full_pass(
    num_kv_heads: int, window: int | None, chunks: tuple[int, ...]
) -> None:
    gqa = _gqa(num_kv_heads, window)
    x = torch.randn(2, 9, 6, dtype=torch.float64)
    cache = gqa.new_cache(2, 9)
    assert isinstance(cache, KVCache if window is None else RollingKVCache)
    outputs = [gqa(part, cache=cache) for part in x.split(chunks, dim=1)]
    torch.testing.assert_close(torch.cat(outputs, dim=1), gqa(x), atol=1e-10, rtol=0)
    assert cache.length == 9


@pytest.mark.parametrize("num_kv_heads", HEADS)
def test_a_full_cache_with_a_windowed_module_equals_the_rolling_one(num_kv_heads: int) -> None:
    gqa = _gqa(num_kv_heads, window=2)
    x = torch.randn(1, 9, 6, dtype=torch.float64)
    full = KVCache(1, num_kv_heads, 9, 2, dtype=torch.float64)
    rolling = gqa.new_cache(1, 9)
    for part in x.split((4, 1, 1, 3), dim=1):
        torch.testing.assert_close(gqa(part, full), gqa(part, rolling), atol=1e-12, rtol=0)


def test_gqa_with_as_many_kv_heads_as_heads_is_multi_head_attention() -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(6, 8, context_length=9, dropout=0.0, num_heads=4, qkv_bias=True).double()
    gqa = GroupedQueryAttention.from_multihead(mha)
    x = torch.randn(2, 9, 6, dtype=torch.float64)
    torch.testing.assert_close(gqa(x), mha(x), atol=1e-12, rtol=0)


@pytest.mark.parametrize("num_kv_heads", [2, 1])
def test_conversion_mean_pools_the_key_and_value_heads_of_each_group(num_kv_heads: int) -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(6, 8, context_length=9, dropout=0.0, num_heads=4, qkv_bias=True).double()
    gqa = GroupedQueryAttention.from_multihead(mha, num_kv_heads)
    g = 4 // num_kv_heads
    for name in ("W_key", "W_value"):
        heads = getattr(mha, name).weight.split(2)  # 4 x (d_h, d_in)
        pooled = [sum(heads[k * g : (k + 1) * g]) / g for k in range(num_kv_heads)]
        torch.testing.assert_close(getattr(gqa, name).weight, torch.cat(pooled), atol=0, rtol=0)
    x = torch.randn(2, 9, 6, dtype=torch.float64)
    assert not torch.allclose(gqa(x), mha(x))  # pooling changes the keys and values ...
    with torch.no_grad():  # ... unless the heads of each group were equal already
        for name in ("W_key", "W_value"):
            for p in getattr(mha, name).parameters():  # each group's first head, g times
                first = p.view(num_kv_heads, g, 2, -1)[:, :1]  # (h_kv, 1, d_h, d_in or 1)
                p.copy_(first.expand(-1, g, -1, -1).reshape(p.shape))
    torch.testing.assert_close(
        GroupedQueryAttention.from_multihead(mha, num_kv_heads)(x), mha(x), atol=1e-12, rtol=0
    )


def test_conversion_keeps_the_dropout_the_training_mode_and_the_window() -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(6, 8, context_length=9, dropout=0.5, num_heads=4).double().eval()
    x = torch.randn(1, 9, 6, dtype=torch.float64)
    gqa = GroupedQueryAttention.from_multihead(mha)
    assert (gqa.dropout, gqa.training) == (0.5, False)
    torch.testing.assert_close(gqa(x), mha(x), atol=1e-12, rtol=0)  # eval: no dropout drawn
    windowed = GroupedQueryAttention.from_multihead(mha, window=2)
    reference = GroupedQueryAttention(6, 8, 4, 4, 0.5, window=2).double().eval()
    reference.load_state_dict(gqa.state_dict())
    torch.testing.assert_close(windowed(x), reference(x), atol=1e-12, rtol=0)


def test_eval_mode_turns_the_attention_dropout_off() -> None:
    torch.manual_seed(0)
    gqa = GroupedQueryAttention(6, 8, 4, 2, dropout=0.5).double().eval()
    plain = GroupedQueryAttention(6, 8, 4, 2).double()
    plain.load_state_dict(gqa.state_dict())
    x = torch.randn(1, 5, 6, dtype=torch.float64)
    torch.testing.assert_close(gqa(x), plain(x), atol=1e-12, rtol=0)


def test_cache_memory_is_the_formula_and_rolling_memory_does_not_grow() -> None:
    cache = _gqa(2).new_cache(3, 50)
    assert cache.nbytes == kv_cache_bytes(3, 50, 1, 2, 2, 8) == 2 * 3 * 50 * 2 * 2 * 8
    gqa = _gqa(2, window=3)
    short, long = gqa.new_cache(3, 10), gqa.new_cache(3, 1000)
    x = torch.randn(3, 100, 6, dtype=torch.float64)
    for token in x.split(1, dim=1):
        gqa(token, cache=long)
    assert short.nbytes == long.nbytes == kv_cache_bytes(3, 3, 1, 2, 2, 8)
    assert long.length == 100


@pytest.mark.parametrize("window", [None, 2])
def test_new_cache_is_made_on_the_modules_device_and_dtype(window: int | None) -> None:
    gqa = GroupedQueryAttention(6, 8, 4, 2, window=window, device="meta", dtype=torch.float64)
    cache = gqa.new_cache(1, 4)
    assert cache.keys.device.type == cache.values.device.type == "meta"
    assert cache.keys.dtype == cache.values.dtype == torch.float64


SINKS = [(3, 1), (3, 2), (1, 4), (4, 9)]  # (w, n_sink): with n_sink >= t, every key is a sink


def _sink_gqa(num_kv_heads: int, window: int, sinks: int) -> GroupedQueryAttention:
    torch.manual_seed(0)
    return GroupedQueryAttention(6, 8, 4, num_kv_heads, qkv_bias=True, window=window,
                                 sinks=sinks).double()


@pytest.mark.parametrize(("window", "sinks"), SINKS)
@pytest.mark.parametrize("num_kv_heads", HEADS)
def test_sinks_and_window_equal_torchs_sdpa_under_the_mask_written_out(
    num_kv_heads: int, window: int, sinks: int
) -> None:
    gqa = _sink_gqa(num_kv_heads, window, sinks)
    x = torch.randn(2, 9, 6, dtype=torch.float64)
    i, j = torch.arange(9)[:, None], torch.arange(9)
    allowed = (j <= i) & ((j > i - window) | (j < sinks))  # (t, t): StreamingLLM's keys
    assert torch.equal(sink_window_mask(9, 9, window, sinks), allowed)
    q = gqa.W_query(x).view(2, 9, 4, 2).transpose(1, 2)  # (b, h, t, d_h)
    k = gqa.W_key(x).view(2, 9, -1, 2).transpose(1, 2)  # (b, h_kv, t, d_h)
    v = gqa.W_value(x).view(2, 9, -1, 2).transpose(1, 2)
    z = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)
    reference = gqa.out_proj(z.transpose(1, 2).reshape(2, 9, 8))
    torch.testing.assert_close(gqa(x), reference, atol=1e-12, rtol=0)


@pytest.mark.parametrize("chunks", CHUNKS)
@pytest.mark.parametrize(("window", "sinks"), SINKS)
def test_cached_decoding_with_sinks_equals_the_full_pass(
    window: int, sinks: int, chunks: tuple[int, ...]
) -> None:
    gqa = _sink_gqa(2, window, sinks)
    x = torch.randn(2, 9, 6, dtype=torch.float64)
    cache = gqa.new_cache(2, 9)
    outputs = [gqa(part, cache=cache) for part in x.split(chunks, dim=1)]
    torch.testing.assert_close(torch.cat(outputs, dim=1), gqa(x), atol=1e-10, rtol=0)
    assert cache.nbytes == kv_cache_bytes(2, sinks + window, 1, 2, 2, 8)


def _fill(gqa: GroupedQueryAttention, cache: object, t: int) -> None:
    gqa(torch.randn(1, t, 6, dtype=torch.float64), cache)


@pytest.mark.parametrize(("t_q", "t_k"), [(0, 3), (3, 0), (0, 0)])
def test_sink_window_mask_of_no_queries_or_no_keys_is_empty_as_the_causal_mask(t_q, t_k) -> None:
    for alignment in ("top_left", "bottom_right"):
        mask = sink_window_mask(t_q, t_k, 2, sinks=1, alignment=alignment)
        assert mask.dtype == torch.bool and mask.shape == (t_q, t_k)


def test_sink_window_mask_aligns_top_left_by_default() -> None:
    """Query i sits at position i unless asked otherwise, as in sliding_window_mask."""
    i, j = torch.arange(3)[:, None], torch.arange(6)
    allowed = (j <= i) & ((j > i - 2) | (j < 1))  # (t_q, t_k), written out at positions 0 .. 2
    assert torch.equal(sink_window_mask(3, 6, 2, sinks=1), allowed)
    assert torch.equal(sink_window_mask(3, 6, 2, sinks=1), sink_window_mask(3, 6, 2, 1, alignment="top_left"))


@pytest.mark.parametrize(("t_q", "t_k", "window", "sinks"),
                         [(2, 5, 2, 1), (3, 9, 3, 2), (4, 4, 2, 1), (2, 6, 3, 0)])
def test_sink_window_mask_bottom_right_puts_the_last_query_at_the_last_key(
    t_q: int, t_k: int, window: int, sinks: int
) -> None:
    """Query i sits at position t_k - t_q + i: the queries of a call after t_k - t_q cached keys."""
    i, j = torch.arange(t_k - t_q, t_k)[:, None], torch.arange(t_k)
    allowed = (j <= i) & ((j > i - window) | (j < sinks))  # (t_q, t_k), written out
    mask = sink_window_mask(t_q, t_k, window, sinks, alignment="bottom_right")
    assert torch.equal(mask, allowed)
    if sinks == 0:
        assert torch.equal(mask, sliding_window_mask(t_q, t_k, window, alignment="bottom_right"))


@pytest.mark.parametrize("qkv_bias", [False, True])
def test_only_the_output_projection_has_a_bias_without_qkv_bias(qkv_bias: bool) -> None:
    """The key bias adds q . b_k to every score of a query, which softmax ignores: only the
    parameters (and so the state dict a checkpoint loads into) show it."""
    gqa = GroupedQueryAttention(6, 8, 4, 2, qkv_bias=qkv_bias)
    projections = ["W_query", "W_key", "W_value"]
    expected = [f"{name}.{p}" for name in projections for p in ("weight", "bias")[: 1 + qkv_bias]]
    assert [name for name, _ in gqa.named_parameters()] == [*expected, "out_proj.weight", "out_proj.bias"]


def test_sliding_window_mask_aligned_bottom_right() -> None:
    mask = sliding_window_mask(2, 5, 3, alignment="bottom_right")
    assert mask.tolist() == [
        [False, True, True, True, False],  # query 0 sits at position 3: keys 1, 2, 3
        [False, False, True, True, True],  # query 1 at position 4: keys 2, 3, 4
    ]


@pytest.mark.parametrize("window", [None, 3])
def test_a_cache_made_under_autocast_takes_the_keys_made_under_it(window: int | None) -> None:
    """new_cache took the weights' float32, which the bfloat16 keys of autocast did not fit."""
    torch.manual_seed(0)
    gqa = GroupedQueryAttention(8, 8, 2, 1, window=window, sinks=0)
    x = torch.randn(1, 6, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cache = gqa.new_cache(1, 6)
        steps = torch.cat([gqa(x[:, i:i + 1], cache=cache) for i in range(6)], dim=1)
        torch.testing.assert_close(steps, gqa(x))
    assert cache.keys.dtype == torch.bfloat16


@pytest.mark.parametrize(("num_kv_heads", "window"), [(1, None), (2, None), (1, 3)])
def test_float16_autocast_keeps_the_scores_in_float32_as_torchs_sdpa_does(
    num_kv_heads: int, window: int | None
) -> None:
    """Under autocast the attention's float32 product Q Kᵀ ran in float16 again: a score past
    65504 was inf and its row nan, where torch's SDPA under the same autocast answers."""
    torch.manual_seed(0)
    gqa = GroupedQueryAttention(8, 8, 2, num_kv_heads, window=window)
    with torch.no_grad():
        gqa.W_query.weight.mul_(1000.0)  # scores past 10⁵
        gqa.W_key.weight.mul_(1000.0)
        x = seeded_randn(0, 2, 5, 8).float()
        with torch.autocast("cpu", dtype=torch.float16):
            out = gqa(x)
            q = gqa.W_query(x).view(2, 5, 2, 4).transpose(1, 2)  # (b, h, t, d_h)
            k, v = (w(x).view(2, 5, num_kv_heads, 4).transpose(1, 2) for w in (gqa.W_key, gqa.W_value))
            mask = torch.ones(5, 5, dtype=torch.bool).tril(0).triu(-(window or 5) + 1)  # (t, t)
            context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
            expected = gqa.out_proj(context.transpose(1, 2).reshape(2, 5, 8))
    assert out.dtype == expected.dtype == torch.float16 and out.isfinite().all()
    torch.testing.assert_close(out, expected)


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    def test_the_conversion_takes_the_books_multi_head_attention_only(self) -> None:
        with pytest.raises(ValueError, match=r"mha must be a MultiHeadAttention, got MultiheadAttention"):
            GroupedQueryAttention.from_multihead(torch.nn.MultiheadAttention(8, 2))

    @pytest.mark.parametrize(
        ("make", "message"),
        [
            (lambda: GroupedQueryAttention(6, 8, 4, 3),
             r"num_heads must be divisible by num_kv_heads.*got num_heads=4 and num_kv_heads=3"),
            (lambda: GroupedQueryAttention(6, 8, 4, 0), r"num_kv_heads must be at least 1, got 0"),
            (lambda: GroupedQueryAttention(6, 8, 4, 2, window=0), r"window must be at least 1.*got 0"),
            (lambda: GroupedQueryAttention(6, 9, 4, 2),
             r"d_out must be divisible by num_heads.*got d_out=9 and num_heads=4"),
            (lambda: _gqa(2)(torch.randn(1, 3, 5, dtype=torch.float64)), r"d_in=6, got 5"),
            (lambda: _gqa(2).new_cache(1, 0), r"max_tokens must be at least 1, got 0"),
            # with a window, None gave a RollingKVCache without a bound, against the docstring
            (lambda: _gqa(2, 2).new_cache(1, None), r"max_tokens must be an integer, got None of type NoneType"),
            (lambda: _fill(_gqa(2), _gqa(2).new_cache(1, 4), 5), r"max_tokens=4 tokens, got 5"),
            (lambda: _fill(_gqa(2, 2), _gqa(2, 2).new_cache(1, 4), 5), r"max_tokens=4 tokens, got 5"),
            (lambda: _fill(_gqa(2), _gqa(2).new_cache(2, 4), 1), r"\(2, 2, t, 2\), got \(1, 2, 1, 2\)"),
            (lambda: _fill(_gqa(2, 3), _gqa(2, 2).new_cache(1, 4), 1),
             r"window=3 and sinks=0, got window=2 and sinks=0"),
            (lambda: _fill(_gqa(2), RollingKVCache(1, 2, 2, 2, dtype=torch.float64), 1),
             r"window=None and sinks=0, got window=2"),
            (lambda: GroupedQueryAttention(6, 8, 4, 2, sinks=1), r"sinks=1 needs a window.*got None"),
            # was an AttributeError: 'str' object has no attribute 'length'
            (lambda: _gqa(2)(torch.randn(1, 3, 6, dtype=torch.float64), cache="kv"),
             r"cache must be a KV cache with length and append .*, got str"),
            (lambda: GroupedQueryAttention(6, 8, 4, 2, window=2, sinks=-1),
             r"sinks must be an integer.*got -1"),
            (lambda: _fill(_sink_gqa(2, 2, 1), _gqa(2, 2).new_cache(1, 4), 1),
             r"window=2 and sinks=1, got window=2 and sinks=0"),
            (lambda: sink_window_mask(2, 4, 2, sinks=True), r"^sinks must be an integer >= 0, got True"),
            (lambda: sink_window_mask(-1, 4, 2), r"t_q must be an integer >= 0, got -1"),
            # was a RuntimeError from torch.arange without the check of t_k
            (lambda: sink_window_mask(2, -1, 2), r"t_k must be an integer >= 0, got -1"),
            (lambda: sink_window_mask(2, 4, 2, alignment="bottom-right"),
             r"alignment must be one of \('top_left', 'bottom_right'\), got 'bottom-right'"),
            (lambda: KVCache(1, 2, 4, 2).append(torch.ones(1, 2, 1, 2), torch.ones(1, 2, 2, 2)),
             r"same number of tokens, got 1 and 2"),
            (lambda: _fill(_gqa(2), KVCache(1, 2, 4, 2), 1),
             r"keys must have the cache's dtype torch.float32, got torch.float64"),
            (lambda: kv_cache_bytes(1, 0, 1, 1, 1, 2), r"tokens must be at least 1, got 0"),
            (lambda: kv_cache_bytes(1, 1, 1, 1, 1, 0.5), r"bytes_per_value must be an integer.*got 0\.5 of type float"),
            (lambda: GroupedQueryAttention.from_multihead(
                MultiHeadAttention(6, 8, 4, 4, 0.0, proj_dropout=0.1)), r"proj_dropout=0.*got 0\.1"),
        ],
    )
    def test_heads_windows_and_caches_must_fit_each_other(self, make: object, message: str) -> None:
        with pytest.raises(ValueError, match=message):
            make()

    @pytest.mark.parametrize("value", NON_BOOLS)
    @pytest.mark.parametrize(
        ("flag", "call"),
        [
            ("qkv_bias", lambda value: GroupedQueryAttention(8, 8, 2, 1, qkv_bias=value)),
        ],
    )
    def test_flags_must_be_bools(self, flag: str, call, value: object) -> None:
        with refuses_non_bool(flag, value):
            call(value)
