"""attention.kv_cache: the caches append in place, and a rolling one keeps its window and sinks."""

import pytest
import torch
from _inputs import qkv

from attention import GroupedQueryAttention, TinyTransformer
from attention.kv_cache import KVCache, ModelKVCache, RollingKVCache, storage_dtype
from attention.paged import PagedKVCache


def _filled(cache: RollingKVCache, t: int) -> RollingKVCache:
    """The cache after one append of t tokens of ones."""
    cache.append(torch.ones(1, 1, t, 1), torch.ones(1, 1, t, 1))
    return cache


def test_the_rolling_buffer_keeps_its_sinks_and_says_where_each_key_is() -> None:
    cache = RollingKVCache(1, 1, 3, 1, sinks=2)
    for p in range(9):
        keys, _ = cache.append(torch.full((1, 1, 1, 1), float(p)), torch.zeros(1, 1, 1, 1))
        expected = sorted({*range(min(p + 1, 2)), *range(max(0, p - 2), p + 1)})
        assert keys.flatten().tolist() == [float(j) for j in expected]
        assert cache.key_positions.tolist() == expected
    keys, _ = cache.append(torch.tensor([9.0, 10.0]).view(1, 1, 2, 1), torch.zeros(1, 1, 2, 1))
    assert cache.key_positions.tolist() == [0, 1, 7, 8, 9, 10]  # sinks, w - 1 kept, the new
    assert keys.flatten().tolist() == [0.0, 1.0, 7.0, 8.0, 9.0, 10.0]
    cache.reset()
    assert cache.length == 0 and cache.key_positions.tolist() == []


def test_appending_writes_in_place_and_returns_views() -> None:
    cache = KVCache(1, 2, 5, 3)
    with torch.no_grad():  # decoding; with autograd on, append returns copies (stored_tokens)
        keys, values = cache.append(torch.ones(1, 2, 2, 3), torch.full((1, 2, 2, 3), 2.0))
    assert keys.shape == (1, 2, 2, 3) and keys.data_ptr() == cache.keys.data_ptr()
    assert (cache.keys[:, :, :2] == 1).all() and (cache.values[:, :, 2:] == 0).all()
    cache.reset()
    assert cache.length == 0 and cache.append(keys, values)[0].shape == (1, 2, 2, 3)


def test_the_rolling_buffer_returns_the_window_in_order_of_position() -> None:
    cache = RollingKVCache(1, 1, 3, 1)
    for p in range(7):
        keys, _ = cache.append(torch.full((1, 1, 1, 1), float(p)), torch.zeros(1, 1, 1, 1))
        assert keys.flatten().tolist() == [float(j) for j in range(max(0, p - 2), p + 1)]
    keys, _ = cache.append(torch.tensor([7.0, 8.0]).view(1, 1, 2, 1), torch.zeros(1, 1, 2, 1))
    assert keys.flatten().tolist() == [5.0, 6.0, 7.0, 8.0]  # w - 1 kept, then the new ones
    assert sorted(cache.keys.flatten().tolist()) == [6.0, 7.0, 8.0]  # the last w tokens


def test_a_chunk_longer_than_the_window_leaves_the_last_w_tokens_in_their_slots() -> None:
    """Prefill of 7 tokens, w = 3, one sink: slot 0 keeps token 0, slot 1 + (p - 1) mod 3 token p."""
    cache = RollingKVCache(1, 1, 3, 1, sinks=1)
    cache.append(torch.arange(7.0).view(1, 1, 7, 1), torch.zeros(1, 1, 7, 1))
    assert cache.keys.flatten().tolist() == [0.0, 4.0, 5.0, 6.0]
    keys, _ = cache.append(torch.full((1, 1, 1, 1), 7.0), torch.zeros(1, 1, 1, 1))
    assert keys.flatten().tolist() == [0.0, 5.0, 6.0, 7.0]


def test_resetting_a_model_cache_empties_every_layer() -> None:
    cache = ModelKVCache([KVCache(1, 1, 4, 2) for _ in range(3)])
    for layer in cache.layers:
        layer.append(torch.ones(1, 1, 3, 2), torch.ones(1, 1, 3, 2))
    cache.reset()
    assert [layer.length for layer in cache.layers] == [0, 0, 0]
    for layer in cache.layers:  # each layer takes a full max_tokens again
        assert layer.append(torch.ones(1, 1, 4, 2), torch.ones(1, 1, 4, 2))[0].shape == (1, 1, 4, 2)


def test_moving_a_model_cache_moves_every_layer_and_the_positions() -> None:
    cache = ModelKVCache([KVCache(1, 1, 4, 2), RollingKVCache(1, 1, 2, 2, max_tokens=4, sinks=1)])
    for layer in cache.layers:
        layer.append(torch.ones(1, 1, 3, 2), torch.ones(1, 1, 3, 2))
    assert cache.to(device="meta", dtype=torch.float64) is cache and cache.length == 3
    for layer in cache.layers:
        assert layer.keys.device.type == layer.values.device.type == "meta"
        assert layer.keys.dtype == layer.values.dtype == torch.float64
    assert cache.layers[1].key_positions.device.type == "meta"


@pytest.mark.parametrize("make", [
    lambda: KVCache(2, 3, 9, 4, dtype=torch.float64),
    lambda: RollingKVCache(2, 3, 3, 4, dtype=torch.float64, sinks=1),
])
def test_append_returns_each_keys_own_values_in_every_cache(make: object) -> None:
    """Keys and values are two stores: the values returned are those appended at the positions
    of the keys returned, never the keys themselves (distinct draws, chunks of 4, 1, 3, 1)."""
    cache = make()  # type: ignore[operator]
    keys, values, _ = qkv((2, 3, 9, 4))
    start = 0
    for t in (4, 1, 3, 1):
        got_keys, got_values = cache.append(keys[:, :, start : start + t], values[:, :, start : start + t])
        start += t
        seen = getattr(cache, "key_positions", torch.arange(start))  # positions of the returned keys
        assert torch.equal(got_keys, keys[:, :, seen]) and torch.equal(got_values, values[:, :, seen])


@pytest.mark.parametrize("sinks", [0, 1])
def test_a_rolling_cache_on_the_meta_device_returns_the_shapes_of_one_on_the_cpu(sinks) -> None:
    """It chose the new tokens to keep with a bool mask, whose True entries the meta device
    cannot count: torch raised NotImplementedError (GroupedQueryAttention(window=w) built on
    meta could not run with its own new_cache)."""
    meta, cpu = (RollingKVCache(1, 2, 3, 4, sinks=sinks, device=d) for d in ("meta", "cpu"))
    for t in (2, 1, 4, 1):
        chunk = torch.ones(1, 2, t, 4)
        got, expected = meta.append(chunk.to("meta"), chunk.to("meta")), cpu.append(chunk, chunk)
        assert [x.shape for x in got] == [x.shape for x in expected]
        assert meta.key_positions.shape == cpu.key_positions.shape


@pytest.mark.parametrize("make", [KVCache, RollingKVCache])
def test_caches_are_made_on_the_device_and_dtype_asked_for(make: type) -> None:
    cache = make(1, 2, 3, 4, dtype=torch.float64, device="meta")  # w = 3 or max_tokens = 3
    assert cache.keys.device.type == cache.values.device.type == "meta"
    assert cache.keys.dtype == cache.values.dtype == torch.float64


@pytest.mark.parametrize(("weight", "keys"), [(torch.float32, torch.bfloat16),
                                               (torch.float16, torch.bfloat16),
                                               (torch.float64, torch.float64)])
def test_a_cache_under_autocast_takes_the_dtype_autocast_gives_keys(weight, keys) -> None:
    """Autocast casts every floating dtype but float64: its linear layers leave float64 keys."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert storage_dtype(torch.zeros(1, dtype=weight)) == keys
        assert torch.nn.functional.linear(torch.zeros(1, 2, dtype=weight),
                                          torch.zeros(3, 2, dtype=weight)).dtype == keys


def test_gradients_through_a_cache_equal_those_of_one_pass_over_all_tokens() -> None:
    """Each call saved views of the storage that the next call wrote into: backward raised
    autograd's "modified by an inplace operation". Decoding without autograd keeps the views."""
    torch.manual_seed(0)
    model, idx = TinyTransformer(11, 8, 2, 2, 8, positions="rope").double(), torch.tensor([[1, 2, 3, 4]])
    full = model(idx)
    weights = torch.randn_like(full)
    cache = ModelKVCache([KVCache(1, 2, 8, 4, dtype=torch.float64) for _ in range(2)])
    parts = torch.cat([model(idx[:, :2], cache=cache), model(idx[:, 2:3], cache=cache),
                       model(idx[:, 3:], cache=cache)], dim=1)
    want = torch.autograd.grad((full * weights).sum(), list(model.parameters()))
    got = torch.autograd.grad((parts * weights).sum(), list(model.parameters()))
    for x, y in zip(got, want):
        torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-12)
    cache = KVCache(1, 2, 5, 3, dtype=torch.float64)
    with torch.no_grad():
        keys, _ = cache.append(*qkv((1, 2, 2, 3), requires_grad=True)[:2])
    assert keys._base is cache.keys


def test_gradients_reach_the_query_projection_through_a_cache_of_frozen_keys() -> None:
    """Only W_query trains (keys and values need no gradient): the attention saved the stored
    keys for its gradient, the next call wrote into them, and backward raised autograd's
    "modified by an inplace operation"."""
    torch.manual_seed(0)
    gqa, x = GroupedQueryAttention(6, 8, 4, 4).double(), torch.randn(1, 3, 6, dtype=torch.float64)
    for name, parameter in gqa.named_parameters():
        parameter.requires_grad_(name.startswith("W_query"))
    cache = KVCache(1, 4, 8, 2, dtype=torch.float64)  # as many key heads as query heads: no copy
    parts = torch.cat([gqa(x[:, :2], cache=cache), gqa(x[:, 2:], cache=cache)], dim=1)
    weights = torch.randn_like(parts)
    want = torch.autograd.grad((gqa(x) * weights).sum(), gqa.W_query.weight)
    got = torch.autograd.grad((parts * weights).sum(), gqa.W_query.weight)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_a_float64_model_generates_with_its_cache_under_autocast() -> None:
    """Its cache was made in bfloat16 and refused the float64 keys autocast leaves alone."""
    model, idx = TinyTransformer(11, 8, 2, 1, 16).double(), torch.tensor([[1, 2]])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(model.generate(idx, 3), model.generate(idx, 3, use_cache=False))


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    def test_a_model_cache_whose_layers_hold_different_lengths_has_no_length(self) -> None:
        # a layer appended to on its own: TinyTransformer took the first layer's length as the
        # next position, and ran every other layer at another one
        cache = ModelKVCache([KVCache(1, 1, 4, 1), KVCache(1, 1, 4, 1)])
        cache.layers[0].append(torch.ones(1, 1, 2, 1), torch.ones(1, 1, 2, 1))
        with pytest.raises(ValueError, match=r"layers must share one length, as a model's layers "
                                             r"do, got \[2, 0\]"):
            _ = cache.length

    @pytest.mark.parametrize(
        ("make", "message"),
        [
            (lambda: RollingKVCache(1, 1, 2, 1, max_tokens=0), r"max_tokens must be at least 1, got 0"),
            (lambda: ModelKVCache([]), r"layers must hold at least one cache, got \[\]"),
            # a string of as many characters as the model has layers reached the blocks, which
            # raised an AttributeError ("'str' object has no attribute 'length'")
            (lambda: ModelKVCache("ab"), r"layers must be a list of caches, got str"),
            (lambda: ModelKVCache(KVCache(1, 1, 4, 1)), r"layers must be a list of caches, got KVCache"),
            (lambda: ModelKVCache([KVCache(1, 1, 4, 1), 1]),
             r"layers\[1\] must be a KVCache or a RollingKVCache, got int"),
            # its max_tokens, nbytes, reset and to raised an AttributeError
            (lambda: ModelKVCache([(pool := PagedKVCache(2, 2, 1, 1)).sequence(pool.add_sequence())]),
             r"layers\[0\] must be a KVCache or a RollingKVCache, got PagedSequence"),
            # the second layer refused a call that the first had already taken: lengths 5 and 0
            (lambda: ModelKVCache([KVCache(1, 2, 8, 8), KVCache(1, 2, 4, 8)]),
             r"layers must share one max_tokens, as a model's layers do, got \[8, 4\]"),
            (lambda: ModelKVCache([RollingKVCache(1, 1, 2, 1), KVCache(1, 1, 4, 1)]),
             r"layers must share one max_tokens, as a model's layers do, got \[None, 4\]"),
            (lambda: ModelKVCache([KVCache(1, 1, 4, 1), KVCache(2, 1, 4, 1)]),
             r"layers must share one batch size, as a model's layers do, got \[1, 2\]"),
            (lambda: ModelKVCache([_filled(RollingKVCache(1, 1, 2, 1), 3), RollingKVCache(1, 1, 2, 1)]),
             r"layers must share one length, as a model's layers do, got \[3, 0\]"),
            # [cache] * L: every layer appended to one cache, so layer 2 read layer 1's keys as
            # earlier tokens and rotated its own at the next positions, a silently wrong model
            (lambda: ModelKVCache([KVCache(1, 1, 4, 1)] * 3),
             r"layers\[0\] and layers\[1\] must be distinct caches \(each layer appends its own "
             r"keys\), got the same KVCache"),
            (lambda: KVCache(1, 1, 4, 1).append([1.0], [1.0]), r"keys must be a tensor \(b, h_kv, t, d_h\), got list"),
            # (b, h_kv, t) with t = d_h would broadcast over d_h without the rank check
            (lambda: KVCache(1, 2, 4, 2).append(torch.ones(1, 2, 2), torch.ones(1, 2, 2)),
             r"keys must have shape \(b, h_kv, t, d_h\) = \(1, 2, t, 2\), got \(1, 2, 2\)"),
            # a float64 chunk would be rounded into a float32 cache without a word
            (lambda: KVCache(1, 2, 4, 2).append(torch.ones(1, 2, 1, 2, dtype=torch.float64),
                                                torch.ones(1, 2, 1, 2, dtype=torch.float64)),
             r"keys must have the cache's dtype torch.float32, got torch.float64"),
            # a chunk on another device was copied into the cache without a word (the meta
            # device stands for a GPU: the copy into a KVCache's slots crossed devices)
            (lambda: KVCache(1, 2, 4, 2, device="meta").append(torch.ones(1, 2, 1, 2), torch.ones(1, 2, 1, 2)),
             r"keys must be on the cache's device meta, got cpu"),
            (lambda: RollingKVCache(1, 2, 3, 2, device="meta").append(torch.ones(1, 2, 1, 2), torch.ones(1, 2, 1, 2)),
             r"keys must be on the cache's device meta, got cpu"),
            (lambda: RollingKVCache(1, 2, 3, 2).append(torch.ones(1, 2, 1, 2), torch.ones(1, 2, 2, 2)),
             r"keys and values must hold the same number of tokens, got 1 and 2"),
            (lambda: KVCache(1, 1, 4, 1).append(torch.ones(1, 1, 5, 1), torch.ones(1, 1, 5, 1)),
             r"holds at most max_tokens=4 tokens, got 5 \(0 cached \+ 5 new\)"),
            # the bound counts the positions of the new tokens too, not only those cached before
            (lambda: _filled(RollingKVCache(1, 1, 2, 1, max_tokens=4), 3).append(
                torch.ones(1, 1, 2, 1), torch.ones(1, 1, 2, 1)),
             r"holds at most max_tokens=4 tokens, got 5 \(3 cached \+ 2 new\)"),
            (lambda: RollingKVCache(1, 1, 2, 1, sinks=-1), r"sinks must be an integer >= 0, got -1"),
        ],
    )
    def test_caches_refuse_bad_sizes_and_chunks(self, make: object, message: str) -> None:
        with pytest.raises(ValueError, match=message):
            make()
