"""attention.paged: a pool of fixed-size blocks gives what one contiguous cache gives."""

import pytest
import torch

from attention.inference import GroupedQueryAttention
from attention.kv_cache import KVCache
from attention.paged import PagedKVCache, PagedSequence


def _gqa(num_kv_heads: int, window: int | None = None) -> GroupedQueryAttention:
    torch.manual_seed(0)
    return GroupedQueryAttention(6, 8, 4, num_kv_heads, qkv_bias=True, window=window).double()


def _fill(gqa: GroupedQueryAttention, cache: object, t: int) -> None:
    gqa(torch.randn(1, t, 6, dtype=torch.float64), cache)


@pytest.mark.parametrize("window", [None, 2])
def test_paged_cache_gives_the_contiguous_result(window: int | None) -> None:
    gqa = _gqa(2, window)
    pool = PagedKVCache(num_blocks=8, block_size=3, num_kv_heads=2, d_h=2, dtype=torch.float64)
    a, b = pool.add_sequence(), pool.add_sequence()
    xa, xb = torch.randn(1, 8, 6, dtype=torch.float64), torch.randn(1, 5, 6, dtype=torch.float64)
    outs = {a: [gqa(xa[:, :4], pool.sequence(a))], b: [gqa(xb[:, :2], pool.sequence(b))]}
    for step in range(4):  # the two sequences take turns, so their blocks interleave in the pool
        outs[a].append(gqa(xa[:, 4 + step : 5 + step], pool.sequence(a)))
        if step < 3:
            outs[b].append(gqa(xb[:, 2 + step : 3 + step], pool.sequence(b)))
    # a: 4 tokens in blocks 0, 1; b: 2 in block 2; b's 4th token opens block 3, a's 7th block 4
    assert pool.block_tables == {a: [0, 1, 4], b: [2, 3]}
    for seq, x, prefill in ((a, xa, 4), (b, xb, 2)):
        contiguous = KVCache(1, 2, x.shape[1], 2, dtype=torch.float64)
        parts = x.split([prefill] + [1] * (x.shape[1] - prefill), dim=1)  # as the pool got them
        expected = torch.cat([gqa(part, contiguous) for part in parts], dim=1)
        torch.testing.assert_close(torch.cat(outs[seq], dim=1), expected, atol=1e-10, rtol=0)
        keys, values = pool.gather(seq)
        torch.testing.assert_close(keys, contiguous.keys, atol=0, rtol=0)
        torch.testing.assert_close(values, contiguous.values, atol=0, rtol=0)
    pool.free(a)
    assert sorted(pool.free_blocks) == [0, 1, 4, 5, 6, 7]
    assert pool.nbytes == 2 * 8 * 2 * 3 * 2 * 8


def test_the_pool_is_made_on_the_device_and_dtype_asked_for() -> None:
    pool = PagedKVCache(2, 2, 1, 1, dtype=torch.float64, device="meta")
    assert pool.keys.device.type == pool.values.device.type == "meta"
    assert pool.keys.dtype == pool.values.dtype == torch.float64


def test_a_sequence_may_take_the_last_free_block() -> None:
    pool = PagedKVCache(num_blocks=2, block_size=2, num_kv_heads=1, d_h=1)
    keys = torch.arange(4.0).view(1, 1, 4, 1)
    pool.append(pool.add_sequence(), keys, -keys)
    assert pool.free_blocks == [] and pool.block_tables == {0: [0, 1]}
    assert torch.equal(pool.gather(0)[0], keys) and torch.equal(pool.gather(0)[1], -keys)


def test_freeing_a_sequence_leaves_the_others_and_its_id_is_not_reused() -> None:
    pool = PagedKVCache(num_blocks=4, block_size=2, num_kv_heads=1, d_h=1)
    a, b = pool.add_sequence(), pool.add_sequence()
    keys = torch.arange(3.0).view(1, 1, 3, 1)
    pool.append(b, keys, -keys)
    pool.free(a)
    c = pool.add_sequence()
    assert c not in (a, b) and pool.lengths == {b: 3, c: 0}
    assert pool.block_tables == {b: [0, 1], c: []}
    assert torch.equal(pool.gather(b)[0], keys) and torch.equal(pool.gather(b)[1], -keys)


def test_appending_no_tokens_to_a_new_sequence_returns_no_keys_as_a_kv_cache_does() -> None:
    pool = PagedKVCache(num_blocks=2, block_size=2, num_kv_heads=1, d_h=1)
    empty = torch.ones(1, 1, 0, 1)
    keys, values = pool.append(pool.add_sequence(), empty, empty)
    expected = KVCache(1, 1, 2, 1).append(empty, empty)
    assert keys.shape == values.shape == expected[0].shape == (1, 1, 0, 1)
    assert pool.block_tables == {0: []} and pool.lengths == {0: 0}


def test_to_moves_keys_and_values_in_place_and_returns_the_pool() -> None:
    pool = PagedKVCache(num_blocks=2, block_size=2, num_kv_heads=1, d_h=1)
    assert pool.to(dtype=torch.float64) is pool
    assert pool.keys.dtype == pool.values.dtype == torch.float64
    keys = torch.arange(3.0, dtype=torch.float64).view(1, 1, 3, 1)
    got = pool.append(pool.add_sequence(), keys, -keys)  # the pool now takes float64 tokens
    assert torch.equal(got[0], keys) and torch.equal(got[1], -keys)


def _exhaust() -> None:
    pool = PagedKVCache(2, 2, 1, 1)
    pool.append(pool.add_sequence(), torch.ones(1, 1, 2, 1), torch.ones(1, 1, 2, 1))
    pool.append(0, torch.ones(1, 1, 3, 1), torch.ones(1, 1, 3, 1))


def _pool_with(sequences: int) -> PagedKVCache:
    pool = PagedKVCache(2, 2, 1, 1)
    for _ in range(sequences):
        pool.add_sequence()
    return pool


def _free_twice() -> None:
    pool = _pool_with(1)
    pool.free(0)
    pool.free(0)


def _on_meta() -> PagedKVCache:
    """A pool on the meta device (it stands for a GPU) with one sequence, 0."""
    pool = PagedKVCache(2, 2, 1, 1, device="meta")
    pool.add_sequence()
    return pool


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    def test_a_freed_sequence_has_no_length(self) -> None:
        pool = PagedKVCache(num_blocks=2, block_size=2, num_kv_heads=1, d_h=1)
        view = pool.sequence(pool.add_sequence())
        pool.free(view.seq)
        with pytest.raises(ValueError, match=r"seq must be one of the sequences \[\], got 0"):
            view.length

    @pytest.mark.parametrize(
        ("make", "message"),
        [
            (lambda: PagedKVCache(2, 2, 1, 1).append(0, torch.ones(1, 1, 1, 1), torch.ones(1, 1, 1, 1)),
             r"seq must be one of the sequences \[\], got 0"),
            # a chunk on another device was copied into the pool's blocks without a word
            (lambda: _on_meta().append(0, torch.ones(1, 1, 1, 1), torch.ones(1, 1, 1, 1)),
             r"keys must be on the cache's device meta, got cpu"),
            (lambda: _fill(_gqa(2), PagedKVCache(1, 2, 2, 2, torch.float64).sequence(0), 1),
             r"one of the sequences.*got 0"),
            (lambda: _exhaust(), r"the pool has 1 free blocks, sequence 0 needs 2"),
            (lambda: _pool_with(1).append(0, torch.ones(2, 1, 1, 1), torch.ones(2, 1, 1, 1)),
             r"keys must have shape \(b, h_kv, t, d_h\) = \(1, 1, t, 1\), got \(2, 1, 1, 1\)"),
            (lambda: _pool_with(1).gather(1), r"one of the sequences \[0\], got 1"),
            (lambda: _free_twice(), r"one of the sequences \[\], got 0"),
            # ids are dict keys: 0.0 and False hashed as 0 and wrote into sequence 0; a list
            # raised a TypeError (unhashable)
            (lambda: _pool_with(1).gather(0.0), r"one of the sequences \[0\], got 0\.0"),
            (lambda: _pool_with(1).gather(False), r"one of the sequences \[0\], got False"),
            (lambda: _pool_with(1).free([0]), r"one of the sequences \[0\], got \[0\]"),
            # its length raised an AttributeError ('NoneType' object has no attribute ...)
            (lambda: PagedSequence(None, 0), r"pool must be a PagedKVCache, got NoneType"),
            # a view of no sequence was made, and refused at its first length or append
            (lambda: PagedSequence(_pool_with(1), 1), r"seq must be one of the sequences \[0\], got 1$"),
            (lambda: PagedSequence(_pool_with(1), 0.0), r"seq must be one of the sequences \[0\], got 0\.0$"),
        ],
    )
    def test_sequences_must_exist_and_fit_the_pool(self, make: object, message: str) -> None:
        with pytest.raises(ValueError, match=message):
            make()
