"""attention.ring: ring attention equals full attention; its work and traffic, counted."""

import pytest
import torch
import torch.nn.functional as F
from _inputs import NON_BOOLS, qkv, refuses_non_bool

from attention.ring import ring_attention, ring_attention_io, ring_shards, ring_work


@pytest.mark.parametrize("sharding", ["contiguous", "zigzag"])
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("world_size, t", [(1, 24), (2, 24), (3, 24), (4, 26), (4, 8)])  # (4, 8): one token a chunk
def test_equals_full_attention(sharding, is_causal, world_size, t):
    q, k, v = qkv((2, 3, t, 8))
    out = ring_attention(q, k, v, world_size=world_size, is_causal=is_causal, sharding=sharding)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    torch.testing.assert_close(out, want, rtol=0, atol=1e-12)


def test_half_precision_is_accumulated_in_float32():
    q, k, v = qkv((2, 3, 16, 8))
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    got = ring_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), world_size=4, is_causal=True,
                         sharding="zigzag")
    plain = F.scaled_dot_product_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), is_causal=True)
    assert got.dtype == torch.bfloat16
    assert (got.double() - want).abs().max() <= 2 * (plain.double() - want).abs().max()


@pytest.mark.parametrize("sharding", ["contiguous", "zigzag"])
def test_scale_multiplies_the_scores_and_defaults_to_one_over_sqrt_d_k(sharding):
    q, k, v = qkv((2, 2, 12, 4), v_shape=(2, 2, 12, 16))  # d_k = 4, d_v = 16
    for scale in (None, 0.3):
        out = ring_attention(q, k, v, world_size=3, is_causal=True, sharding=sharding, scale=scale)
        want = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
        torch.testing.assert_close(out, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_precision_rounds_once_at_the_end(dtype):
    """Partials and merges in float32: the result is the exact attention of the rounded inputs
    rounded once (within 1.2 times that rounding), not rounded again at each of the merges."""
    q, k, v = qkv((2, 3, 32, 8), to=dtype)
    exact = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    got = ring_attention(q, k, v, world_size=4, is_causal=True, sharding="zigzag")
    error, rounding = ((y.double() - exact).abs().max().item() for y in (got, exact.to(dtype)))
    assert error <= 1.2 * rounding, f"error {error:.3g} > 1.2 x rounding once {rounding:.3g}"


def test_shards_cover_the_sequence_once():
    for sharding in ("contiguous", "zigzag"):
        shards = ring_shards(20, 4, sharding)
        assert torch.equal(torch.cat(shards).sort().values, torch.arange(20))
    assert [s.tolist() for s in ring_shards(16, 4, "zigzag")] == [
        [0, 1, 14, 15], [2, 3, 12, 13], [4, 5, 10, 11], [6, 7, 8, 9]]


def test_contiguous_is_the_default_sharding():
    assert [s.tolist() for s in ring_shards(6, 2)] == [[0, 1, 2], [3, 4, 5]]
    assert torch.equal(ring_work(8, 2, is_causal=True), ring_work(8, 2, True, "contiguous"))


def test_causal_work_is_unbalanced_with_contiguous_shards_and_balanced_with_zigzag():
    t, world_size = 64, 4
    total = t * (t + 1) // 2  # visible pairs of causal attention
    contiguous = ring_work(t, world_size, True, "contiguous")  # (steps, devices)
    zigzag = ring_work(t, world_size, True, "zigzag")
    assert contiguous.sum() == zigzag.sum() == total
    assert contiguous[:, 0].tolist() == [136, 0, 0, 0]  # device 0 idles after step 0
    assert contiguous[:, 3].tolist() == [136, 256, 256, 256]
    assert contiguous[:, 1].tolist() == [136, 256, 0, 0]  # step k: the block of device r - k
    assert contiguous.max(dim=1).values.sum() == 136 + 3 * 256  # the busiest device sets the pace
    assert (zigzag == zigzag[:, :1]).all()  # every device does the same at every step
    assert zigzag.max(dim=1).values.sum() == total // world_size
    assert ring_work(t, world_size).sum() == t * t  # not causal: every pair, evenly


def test_io_counts_each_block_received_and_sent_once():
    t, d_h, world_size = 1024, 64, 8
    c = t // world_size
    count = ring_attention_io(t, d_h, world_size, m_device=10**6)
    assert count.reads == count.writes == 2 * (world_size - 1) * c * d_h
    assert count.peak == 6 * c * d_h + c  # Q, Z, lse, and two blocks of K and V


class TestBadInput:
    @pytest.mark.parametrize("call, message", [
        (lambda: ring_shards(8, 0), r"world_size must be at least 1, got 0"),
        (lambda: ring_shards(8, 2, "striped"), r"sharding must be one of \('contiguous', 'zigzag'\), got 'striped'"),
        (lambda: ring_shards(6, 4, "zigzag"), r"zigzag sharding over world_size=4 needs t >= 8 tokens.*got t=6"),
        (lambda: ring_attention(qkv((2, 3, 7, 8))[0], *qkv((2, 3, 8, 8))[1:], world_size=2),
         r"the same t, got 7, 8, 8"),
        (lambda: ring_attention(torch.zeros(8), torch.zeros(8), torch.zeros(8), world_size=2),
         r"query must have at least 2 dimensions.*got a 1-d tensor of shape \(8,\)"),
        (lambda: ring_attention(*qkv((3, 2, 8, 4), (2, 2, 8, 4)), world_size=2),
         r"leading dimensions of query, key and value must broadcast, got \(3, 2\), \(2, 2\)"),
        (lambda: ring_attention_io(10, 4, 3, 100), r"t must be a multiple of world_size.*got t=10, world_size=3"),
        (lambda: ring_attention(*qkv((1, 8, 4)), world_size=2, is_causal=1),
         r"is_causal must be a bool, got 1 of type int"),
    ])
    def test_world_size_sharding_and_shapes_must_fit(self, call, message):
        with pytest.raises(ValueError, match=message):
            call()

    @pytest.mark.parametrize("t, world_size, m_device, message", [
        # one block short of double buffering
        (1024, 8, 49_000, r"two blocks of K and V, 49280 numbers for t_shard=128, d_h=64, got m_device=49000"),
        # one device: its own block only, nothing travels
        (128, 1, 32_000, r"one block of K and V, 32896 numbers for t_shard=128, d_h=64, got m_device=32000"),
    ])
    def test_io_model_refuses_a_device_too_small_for_the_working_set(self, t, world_size, m_device, message):
        with pytest.raises(ValueError, match=r"m_device must hold Q, Z, lse and " + message):
            ring_attention_io(t, 64, world_size, m_device=m_device)

    @pytest.mark.parametrize("value", NON_BOOLS)
    @pytest.mark.parametrize(
        ("flag", "call"),
        [
            ("is_causal", lambda value: ring_work(8, 2, is_causal=value)),
        ],
    )
    def test_flags_must_be_bools(self, flag: str, call, value: object) -> None:
        with refuses_non_bool(flag, value):
            call(value)


def test_leading_dimensions_broadcast_as_in_sdpa():
    # a query shared by the batch: the output takes the broadcast shape, as SDPA's does
    q, k, v = qkv((1, 2, 8, 4), (3, 2, 8, 4))
    out = ring_attention(q, k, v, world_size=2, is_causal=True)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))


@pytest.mark.parametrize("sharding, is_causal", [("contiguous", False), ("zigzag", True)])
def test_gradients_pass_gradcheck_through_the_merges(sharding, is_causal):
    """The merge weights exp(lse_a - lse) come from each partial's lse: its gradient counts."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 1, 6, 4, generator=g, dtype=torch.float64, requires_grad=True)
               for _ in range(3))
    ring = lambda q, k, v: ring_attention(  # noqa: E731
        q, k, v, world_size=3 if sharding == "contiguous" else 2, is_causal=is_causal,
        sharding=sharding,
    )
    assert torch.autograd.gradcheck(ring, (q, k, v))
    want = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
                               .pow(2).sum(), (q, k, v))
    got = torch.autograd.grad(ring(q, k, v).pow(2).sum(), (q, k, v))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
