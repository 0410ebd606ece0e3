"""attention.streaming: a cache of n_sink + w tokens per layer whose keys sit at their positions
within the cache, checked against StreamingLLM's own rule written out, against a fresh run on the
cached tokens, and against an explicit mask."""

import pytest
import torch
import torch.nn.functional as F

from attention import (
    DynamicNTKScaling,
    GroupedQueryAttention,
    ModelKVCache,
    RollingKVCache,
    RotaryEmbedding,
    TinyTransformer,
    TransformerBlock,
    YaRNScaling,
    sink_window_mask,
)
from attention.streaming import StreamingKVCache, streaming_cache

WINDOWS = [(4, 0), (4, 1), (6, 3), (1, 2)]  # (w, n_sink)


def _model(layers: int, positions: str | None = "rope") -> TinyTransformer:
    torch.manual_seed(0)
    model = TinyTransformer(16, 16, 2, layers, 8, positions=positions, mlp=True)
    return model.double().eval()


def _stream(model: TinyTransformer, idx: torch.Tensor, cache: ModelKVCache) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([model(idx[:, i:i + 1], cache=cache) for i in range(idx.shape[1])], 1)


def _streamingllm(model: TinyTransformer, idx: torch.Tensor, w: int, sinks: int) -> torch.Tensor:
    """Xiao et al.'s rule as their code applies it: keys cached before the rotation, and at every
    step all of them rotated by their index in the cache, the query by the last index."""
    b, t = idx.shape
    cached = [([], [], []) for _ in model.blocks]  # per layer: keys, values, positions
    logits = []
    for i in range(t):
        x = model.tok_emb(idx[:, i:i + 1])  # (b, 1, d)
        for block, (keys, values, positions) in zip(model.blocks, cached):
            h, d_h, attn = block.num_heads, block.d_h, block.attn
            q, k, v = attn.qkv(block.norm1(x)).split(block.d_model, dim=2)
            q, k, v = (z.view(b, 1, h, d_h).transpose(1, 2) for z in (q, k, v))
            for store, new in ((keys, k), (values, v), (positions, i)):
                store.append(new)
            keep = [n for n, j in enumerate(positions) if j < sinks or j > i - w]  # evict
            for store in (keys, values, positions):
                store[:] = [store[n] for n in keep]
            k_all, v_all = torch.cat(keys, dim=2), torch.cat(values, dim=2)  # (b, h, t_k, d_h)
            if attn.rotary is not None:
                k_all = attn.rotary(k_all)  # positions 0 .. t_k - 1 in the cache
                q = attn.rotary(q, start=k_all.shape[2] - 1)
            z = F.scaled_dot_product_attention(q, k_all, v_all).transpose(1, 2).reshape(b, 1, -1)
            x = x + attn.out_proj(z)
            x = x + block.feed_forward(block.norm2(x))
        logits.append(model.lm_head(model.final_norm(x)))
    return torch.cat(logits, dim=1)


@pytest.mark.parametrize(("w", "sinks"), WINDOWS)
@pytest.mark.parametrize("positions", ["rope", None])
def test_streaming_equals_streamingllms_rule_written_out(
    w: int, sinks: int, positions: str | None
) -> None:
    model = _model(2, positions)
    idx = torch.randint(16, (2, 20), generator=torch.Generator().manual_seed(1))
    cache = streaming_cache(model, 2, w, sinks)
    with torch.no_grad():
        reference = _streamingllm(model, idx, w, sinks)
    torch.testing.assert_close(_stream(model, idx, cache), reference, atol=1e-12, rtol=0)
    assert cache.nbytes == 2 * 2 * (2 * 2 * (sinks + w) * 8) * 8  # L · K,V · (b, h, slots, d_h)


def test_sinks_turn_without_a_second_attention_factor() -> None:
    """Under YaRN the keys already carry sqrt(1/τ): moving a sink only rotates it."""
    model = _model(2)
    for block in model.blocks:  # partial rotation, so the factor shows in the scores
        block.attn.rotary = RotaryEmbedding(8, rotary_dim=4, scaling=YaRNScaling(4.0, 4))
    idx = torch.randint(16, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        reference = _streamingllm(model, idx, 4, 2)
    torch.testing.assert_close(_stream(model, idx, streaming_cache(model, 2, 4, 2)), reference,
                               atol=1e-12, rtol=0)


@pytest.mark.parametrize(("w", "sinks"), WINDOWS)
def test_one_layer_streaming_equals_a_fresh_run_on_the_cached_tokens(w: int, sinks: int) -> None:
    model = _model(1)
    idx = torch.randint(16, (2, 20), generator=torch.Generator().manual_seed(2))
    streamed = _stream(model, idx, streaming_cache(model, 2, w, sinks))
    with torch.no_grad():
        for i in range(20):
            kept = [j for j in range(i + 1) if j < sinks or j > i - w]
            fresh = model(idx[:, kept])[:, -1]  # the kept tokens at positions 0, 1, ...
            torch.testing.assert_close(streamed[:, i], fresh, atol=1e-12, rtol=0)


def test_before_any_eviction_streaming_is_the_full_model() -> None:
    model = _model(2)
    idx = torch.randint(16, (3, 7), generator=torch.Generator().manual_seed(3))
    cache = streaming_cache(model, 3, 5, 2)
    with torch.no_grad():
        prefill = model(idx, cache=cache)  # 7 = n_sink + w tokens in one call
        torch.testing.assert_close(prefill, model(idx), atol=1e-12, rtol=0)
        model(idx[:, :1], cache=cache)  # the first eviction: one token at a time from now on


@pytest.mark.parametrize(("w", "sinks"), WINDOWS)
def test_without_positions_streaming_is_the_model_under_the_explicit_mask(
    w: int, sinks: int
) -> None:
    model = _model(2, positions=None)
    idx = torch.randint(16, (2, 15), generator=torch.Generator().manual_seed(4))
    i, j = torch.arange(15)[:, None], torch.arange(15)[None, :]
    allowed = (j <= i) & ((j > i - w) | (j < sinks))  # (t, t), written out
    assert torch.equal(sink_window_mask(15, 15, w, sinks), allowed)
    with torch.no_grad():
        x = model.tok_emb(idx)
        for block in model.blocks:
            x = block(x, attn_mask=allowed)
        reference = model.lm_head(model.final_norm(x))
    torch.testing.assert_close(_stream(model, idx, streaming_cache(model, 2, w, sinks)), reference,
                               atol=1e-12, rtol=0)


def test_a_rolling_cache_alone_keeps_positions_in_the_text() -> None:
    model = _model(1)
    idx = torch.randint(16, (1, 12), generator=torch.Generator().manual_seed(5))
    text = ModelKVCache([RollingKVCache(1, 2, 4, 8, dtype=torch.float64, sinks=1)])
    cache = streaming_cache(model, 1, 4, 1)
    a, b = _stream(model, idx, text), _stream(model, idx, cache)
    torch.testing.assert_close(a[:, :5], b[:, :5], atol=1e-12, rtol=0)  # nothing evicted yet
    assert (a[:, 5:] - b[:, 5:]).abs().max() > 1e-6  # then the sink is elsewhere in each


@pytest.mark.parametrize(("w", "sinks"), WINDOWS)
@pytest.mark.parametrize("chunk", [1, 3, 5])
def test_a_rolling_cache_in_chunks_is_the_model_under_the_window_mask(
    w: int, sinks: int, chunk: int
) -> None:
    # Positions in the text, so the cached model must equal the whole sequence under the window
    # and sinks mask, whatever the size of the chunks it is fed in, evictions included.
    model = _model(2)
    idx = torch.randint(16, (2, 15), generator=torch.Generator().manual_seed(6))
    mask = sink_window_mask(15, 15, w, sinks)  # (t, t)
    with torch.no_grad():
        x = model.tok_emb(idx)
        for block in model.blocks:
            x = block(x, attn_mask=mask)
        reference = model.lm_head(model.final_norm(x))
        cache = ModelKVCache(
            [RollingKVCache(2, 2, w, 8, dtype=torch.float64, sinks=sinks) for _ in model.blocks]
        )
        chunks = [model(idx[:, i:i + chunk], cache=cache) for i in range(0, 15, chunk)]
    torch.testing.assert_close(torch.cat(chunks, dim=1), reference, atol=1e-12, rtol=0)


def test_the_cache_is_made_on_the_models_device_and_dtype() -> None:
    model = _model(2).to("meta")  # built on the CPU: initializing on meta first costs a second
    for layer in streaming_cache(model, 1, 4, 1).layers:
        assert layer.keys.device.type == layer.values.device.type == "meta"
        assert layer.keys.dtype == layer.values.dtype == torch.float64


def test_streaming_cache_keeps_no_sinks_by_default() -> None:
    model = _model(1)
    cache = streaming_cache(model, 1, 4)
    assert cache.layers[0].sinks == 0 and cache.layers[0].keys.shape[2] == 4


def test_streaming_on_the_meta_device_gives_the_logits_shape() -> None:
    """The sinks were counted with int() of a sum over the positions, which the meta device
    cannot read: the first call past the first eviction raised "Tensor.item() cannot be called
    on meta tensors", where a RollingKVCache gives the shape."""
    model = TinyTransformer(16, 16, 2, 2, 8, positions="rope", device="meta")
    cache = streaming_cache(model, 2, window=3, sinks=1)
    for _ in range(6):
        logits = model(torch.zeros(2, 1, dtype=torch.long, device="meta"), cache=cache)
    assert logits.shape == (2, 1, 16) and logits.device.type == "meta" and cache.length == 6


def test_a_streaming_cache_made_under_autocast_takes_the_keys_made_under_it() -> None:
    """streaming_cache took the weights' float32, which autocast's bfloat16 keys did not fit."""
    model = TinyTransformer(16, 16, 2, 2, 8, positions="rope").eval()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cache = streaming_cache(model, 1, window=3, sinks=1)
        for token in range(6):
            logits = model(torch.tensor([[token]]), cache=cache)
    assert cache.layers[0].keys.dtype == torch.bfloat16 and logits.shape == (1, 1, 16)


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    @pytest.mark.parametrize(
        ("make", "message"),
        [
            (lambda: streaming_cache(_model(1, "learned"), 1, 4, 1), r"got 'learned'"),
            (lambda: streaming_cache(_model(1, "alibi"), 1, 4, 1), r"got 'alibi'"),
            (lambda: streaming_cache(_model(1, "sinusoidal"), 1, 4, 1), r"got 'sinusoidal'"),
            (lambda: streaming_cache(_model(1), 1, 4, -1), r"sinks must be an integer >= 0, got -1"),
            (lambda: streaming_cache(_model(1), 1, 0, 1), r"window must be at least 1, got 0"),
            (lambda: StreamingKVCache(1, 2, 4, 8, 1, RotaryEmbedding(4)),
             r"rotary must rotate keys of width d_h=8, got d_h=4"),
            (lambda: StreamingKVCache(1, 2, 4, 8, 1, "rope"),
             r"rotary must be a RotaryEmbedding or None, got str"),
            (lambda: streaming_cache("m", 1, 4), r"model must be a TinyTransformer, got str"),
            (lambda: StreamingKVCache(1, 2, 4, 8, 1, RotaryEmbedding(8, scaling=DynamicNTKScaling(
                2.0, 4))), r"rotary must have fixed frequencies"),
        ],
    )
    def test_streaming_needs_rotary_positions_and_positive_sizes(self, make: object, message: str) -> None:
        with pytest.raises(ValueError, match=message):
            make()

    @pytest.mark.parametrize(("layer_rotary", "cache_rotary", "got"), [
        (RotaryEmbedding(4), None, "no rotary"),
        (RotaryEmbedding(4), RotaryEmbedding(4, base=100.0), "base=100,"),
        (RotaryEmbedding(4), RotaryEmbedding(4, interleaved=True), "interleaved=True"),
        (None, RotaryEmbedding(4), "base=10000,"),
    ], ids=["none", "base", "interleaved", "layer-without"])
    def test_a_cache_that_rotates_otherwise_than_the_layer_is_refused(
        self, layer_rotary: RotaryEmbedding | None, cache_rotary: RotaryEmbedding | None,
        got: str,
    ) -> None:
        """Past the first eviction the cache turned its sinks with its own rotary: one of another
        rule (or none, or one where the layer rotates nothing) changed the outputs by 0.02 to
        0.07 without an error. The refused call leaves the cache empty."""
        block = TransformerBlock(8, 2, 16, is_causal=True, rotary=layer_rotary)
        cache = StreamingKVCache(1, 2, 3, 4, sinks=1, rotary=cache_rotary)
        with pytest.raises(ValueError, match=rf"cache.rotary must rotate keys as the layer's .*"
                                             rf"got .*{got}"):
            block(torch.randn(1, 1, 8), cache=cache)
        assert cache.length == 0
        if layer_rotary is None:
            gqa = GroupedQueryAttention(8, 8, 2, 2, window=3, sinks=1)
            with pytest.raises(ValueError, match=r"\(no rotary\), got RotaryEmbedding"):
                gqa(torch.randn(1, 1, 8), cache=cache)

    def test_a_cache_with_an_equal_rotary_is_taken(self) -> None:
        """An equal rotary, not the layer's own (a copied model's cache, say), turns alike."""
        torch.manual_seed(0)
        block = TransformerBlock(8, 2, 16, is_causal=True, rotary=RotaryEmbedding(4)).eval()
        x = torch.randn(1, 8, 8)
        outs = []
        for rotary in (block.attn.rotary, RotaryEmbedding(4)):
            cache = StreamingKVCache(1, 2, 3, 4, sinks=1, rotary=rotary)
            with torch.no_grad():
                outs.append(torch.cat([block(x[:, i:i + 1], cache=cache) for i in range(8)], 1))
        torch.testing.assert_close(outs[0], outs[1], atol=0, rtol=0)

    @pytest.mark.parametrize(("cached", "t"), [(0, 8), (5, 3)], ids=["first-call", "straddling"])
    def test_a_chunk_that_runs_past_the_first_eviction_is_refused(self, cached: int, t: int) -> None:
        """n_sink + w = 7: a chunk that ends past token 7 would need one δ per query, whatever
        the cache held before it (the count is of cached and new tokens together)."""
        cache = StreamingKVCache(1, 2, 5, 8, 2, RotaryEmbedding(8), dtype=torch.float64)
        if cached:
            cache.append(*torch.ones(2, 1, 2, cached, 8, dtype=torch.float64))
        with pytest.raises(ValueError, match=rf"one at a time, got {t} tokens after {cached}"):
            cache.append(*torch.ones(2, 1, 2, t, 8, dtype=torch.float64))

    def test_after_the_first_eviction_tokens_come_one_at_a_time(self) -> None:
        model = _model(2)
        idx = torch.randint(16, (3, 7), generator=torch.Generator().manual_seed(3))
        cache = streaming_cache(model, 3, 5, 2)
        with torch.no_grad():
            model(idx, cache=cache)  # 7 = n_sink + w tokens in one call
            model(idx[:, :1], cache=cache)  # the first eviction
            with pytest.raises(ValueError, match=r"one at a time, got 2 tokens after 8"):
                model(idx[:, :2], cache=cache)
