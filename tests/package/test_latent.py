"""attention.latent: MLA's expanded and absorbed forms are one function, with and without a cache,
equal to DeepSeek-V2's equations written out head by head; its cache is d_c + d_R per token."""

import math

import pytest
import torch
from _inputs import NON_BOOLS, refuses_non_bool

from attention import RotaryEmbedding, kv_cache_bytes
from attention.latent import LatentKVCache, MultiHeadLatentAttention, latent_cache_bytes

CHUNKS = [(9,), (3, 1, 1, 1, 1, 1, 1), (2, 4, 1, 2)]  # one shot, prefill + decode, chunked


def _mla(q_rank: int | None = None) -> MultiHeadLatentAttention:
    torch.manual_seed(0)
    return MultiHeadLatentAttention(10, 12, 3, kv_rank=5, rope_dim=4, q_rank=q_rank).double()


def _reference(mla: MultiHeadLatentAttention, x: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """DeepSeek-V2's equations (9)-(19), one head and one query at a time, from the weights."""
    b, t, _ = x.shape
    h, d_h, d_r = mla.num_heads, mla.d_h, mla.rope_dim
    rope = RotaryEmbedding(d_r, base)
    c_kv = x @ mla.W_down_kv.weight.T  # (b, t, d_c)
    k_rope = rope(x @ mla.W_key_rope.weight.T)  # (b, t, d_R), position i for token i
    c_q = x if mla.W_down_query is None else x @ mla.W_down_query.weight.T
    heads = []
    for i in range(h):
        rows = slice(i * d_h, (i + 1) * d_h)
        q_c = c_q @ mla.W_up_query.weight[rows].T  # (b, t, d_h)
        q_r = rope(c_q @ mla.W_query_rope.weight[i * d_r:(i + 1) * d_r].T)  # (b, t, d_R)
        k_c = c_kv @ mla.W_up_key.weight[rows].T  # (b, t, d_h)
        v = c_kv @ mla.W_up_value.weight[rows].T  # (b, t, d_h)
        q = torch.cat([q_c, q_r], dim=-1)
        k = torch.cat([k_c, k_rope], dim=-1)
        out = torch.zeros(b, t, d_h, dtype=x.dtype)
        for s in range(t):  # query s sees keys 0 .. s
            scores = (q[:, s:s + 1] @ k[:, :s + 1].transpose(1, 2)) / math.sqrt(d_h + d_r)
            out[:, s] = (torch.softmax(scores, dim=-1) @ v[:, :s + 1])[:, 0]
        heads.append(out)
    return torch.cat(heads, dim=-1) @ mla.out_proj.weight.T  # (b, t, d_out)


@pytest.mark.parametrize("q_rank", [None, 6])
@pytest.mark.parametrize("absorbed", [False, True])
def test_mla_equals_the_papers_equations_written_out(q_rank: int | None, absorbed: bool) -> None:
    mla = _mla(q_rank)
    x = torch.randn(2, 9, 10, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(mla(x, absorbed=absorbed), _reference(mla, x), atol=1e-12,
                                   rtol=0)


def test_the_rotary_base_reaches_the_queries_and_the_shared_key() -> None:
    """base=50 turns the second pair of features by 1/sqrt(50) per position, not 1/100."""
    torch.manual_seed(0)
    mla = MultiHeadLatentAttention(10, 12, 3, kv_rank=5, rope_dim=4, base=50.0).double()
    x = torch.randn(1, 9, 10, dtype=torch.float64)
    with torch.no_grad():
        for absorbed in (False, True):
            torch.testing.assert_close(mla(x, absorbed=absorbed), _reference(mla, x, base=50.0),
                                       atol=1e-12, rtol=0)


@pytest.mark.parametrize("chunks", CHUNKS)
@pytest.mark.parametrize("q_rank", [None, 6])
def test_cached_decoding_equals_the_full_pass_in_both_forms(
    q_rank: int | None, chunks: tuple[int, ...]
) -> None:
    mla = _mla(q_rank)
    x = torch.randn(2, 9, 10, dtype=torch.float64)
    with torch.no_grad():
        full = mla(x)
        for absorbed in (False, True):
            cache = mla.new_cache(2, 9)
            out = torch.cat([mla(part, cache, absorbed=absorbed)
                             for part in x.split(chunks, dim=1)], dim=1)
            torch.testing.assert_close(out, full, atol=1e-12, rtol=0)
            assert cache.length == 9


def test_the_absorbed_form_never_expands_keys_or_values() -> None:
    mla = _mla()
    calls = []
    for module in (mla.W_up_key, mla.W_up_value):
        module.register_forward_hook(lambda m, args, out: calls.append(args[0].shape))
    x = torch.randn(1, 5, 10, dtype=torch.float64)
    with torch.no_grad():
        mla(x, absorbed=True)
        assert calls == []
        mla(x)
    assert calls == [(1, 5, 5), (1, 5, 5)]  # the expanded form up-projects every latent


def test_the_cache_holds_the_latent_and_the_rotary_key_only() -> None:
    mla = _mla()
    cache = mla.new_cache(3, 20)
    assert cache.latents.shape == (3, 20, 5) and cache.rope_keys.shape == (3, 20, 4)
    assert cache.nbytes == latent_cache_bytes(3, 20, 1, 5, 4, bytes_per_value=8)
    x = torch.randn(3, 4, 10, dtype=torch.float64)
    with torch.no_grad():
        mla(x, cache)
    torch.testing.assert_close(cache.latents[:, :4], mla.W_down_kv(x), atol=0, rtol=0)
    torch.testing.assert_close(cache.rope_keys[:, :4], RotaryEmbedding(4)(mla.W_key_rope(x)),
                               atol=0, rtol=0)


def test_gradients_through_the_cache_equal_those_of_one_pass_in_both_forms() -> None:
    """The expanded form saved views of the cache that the next call wrote into: backward raised
    autograd's "modified by an inplace operation"."""
    torch.manual_seed(0)
    mla, x = MultiHeadLatentAttention(8, 8, 2, 4, 2).double(), torch.randn(1, 4, 8, dtype=torch.float64)
    weights = torch.randn(1, 4, 8, dtype=torch.float64)
    want = torch.autograd.grad((mla(x) * weights).sum(), list(mla.parameters()))
    for absorbed in (False, True):
        cache = LatentKVCache(1, 8, 4, 2, dtype=torch.float64)
        out = torch.cat([mla(x[:, :2], cache, absorbed=absorbed), mla(x[:, 2:3], cache, absorbed=absorbed),
                         mla(x[:, 3:], cache, absorbed=absorbed)], dim=1)
        got = torch.autograd.grad((out * weights).sum(), list(mla.parameters()))
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_later_tokens_do_not_change_earlier_outputs() -> None:
    mla = _mla(6)
    x = torch.randn(1, 8, 10, dtype=torch.float64)
    y = x.clone()
    y[:, 5:] = torch.randn(1, 3, 10, dtype=torch.float64)
    with torch.no_grad():
        for absorbed in (False, True):
            torch.testing.assert_close(mla(x, absorbed=absorbed)[:, :5],
                                       mla(y, absorbed=absorbed)[:, :5], atol=1e-14, rtol=0)


def test_float32_absorbed_is_as_accurate_as_expanded() -> None:
    mla64 = _mla(6)
    x = torch.randn(2, 16, 10, dtype=torch.float64)
    mla32 = _mla(6).float()
    with torch.no_grad():
        reference = mla64(x)
        errors = [(mla32(x.float(), absorbed=a).double() - reference).abs().max().item()
                  for a in (False, True)]
    assert errors[1] <= 4 * errors[0] + 1e-7, errors


def test_reset_forgets_every_token_and_the_next_pass_overwrites_them() -> None:
    mla = _mla()
    x, y = torch.randn(2, 2, 4, 10, dtype=torch.float64)
    cache = mla.new_cache(2, 6)
    with torch.no_grad():
        mla(x, cache)
        cache.reset()
        assert cache.length == 0
        out = mla(y, cache)  # starts again at position 0, over y's tokens only
        torch.testing.assert_close(out, mla(y), atol=1e-12, rtol=0)
    assert cache.length == 4


def test_to_moves_latents_and_rotary_keys_in_place_and_returns_the_cache() -> None:
    cache = LatentKVCache(1, 4, 5, 4)
    assert cache.to(dtype=torch.float64) is cache
    assert cache.latents.dtype == cache.rope_keys.dtype == torch.float64
    latents, rope_keys = cache.append(torch.ones(1, 2, 5, dtype=torch.float64),
                                      torch.ones(1, 2, 4, dtype=torch.float64))
    assert latents.shape == (1, 2, 5) and rope_keys.shape == (1, 2, 4)


def test_new_cache_is_made_on_the_modules_device_and_dtype() -> None:
    mla = MultiHeadLatentAttention(10, 12, 3, kv_rank=5, rope_dim=4, device="meta",
                                   dtype=torch.float64)
    cache = mla.new_cache(2, 7)
    assert cache.latents.device.type == cache.rope_keys.device.type == "meta"
    assert cache.latents.dtype == cache.rope_keys.dtype == torch.float64


def test_a_new_cache_starts_zero_filled_even_from_uninitialized_memory() -> None:
    deterministic = torch.are_deterministic_algorithms_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)  # torch.empty now returns NaN
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        cache = LatentKVCache(2, 4, 5, 4, dtype=torch.float64)
    finally:
        torch.use_deterministic_algorithms(deterministic)
        torch.utils.deterministic.fill_uninitialized_memory = fill
    assert cache.latents.eq(0).all() and cache.rope_keys.eq(0).all()


def test_deepseek_v2_cache_is_that_of_gqa_with_two_and_a_quarter_groups() -> None:
    # DeepSeek-V2 (section 3.1.2): 60 layers, 128 heads of 128, d_c = 512, d_R = 64.
    mla = latent_cache_bytes(1, 1, 60, 512, 64, bytes_per_value=2)
    mha = kv_cache_bytes(1, 1, 60, 128, 128, bytes_per_value=2)
    assert mla == 60 * 576 * 2
    assert mla / mha == pytest.approx(576 / 32768)
    assert mla / kv_cache_bytes(1, 1, 60, 1, 128, bytes_per_value=2) == 2.25  # table 1


@pytest.mark.parametrize("absorbed", [False, True])
def test_a_cache_made_under_autocast_takes_the_latents_made_under_it(absorbed: bool) -> None:
    """new_cache took the weights' float32, which the bfloat16 latents of autocast did not fit."""
    torch.manual_seed(0)
    mla = MultiHeadLatentAttention(8, 8, 2, 4, 2)
    x = torch.randn(1, 5, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cache = mla.new_cache(1, 5)
        steps = torch.cat([mla(x[:, i:i + 1], cache=cache, absorbed=absorbed) for i in range(5)], 1)
        assert cache.latents.dtype == torch.bfloat16
        torch.testing.assert_close(steps, mla(x), atol=4e-3, rtol=0)


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    @pytest.mark.parametrize(
        ("make", "message"),
        [
            (lambda: MultiHeadLatentAttention(10, 12, 5, 4, 4),
             r"d_out must be divisible by num_heads.*got d_out=12 and num_heads=5"),
            (lambda: MultiHeadLatentAttention(10, 12, 3, 0, 4), r"kv_rank must be at least 1, got 0"),
            (lambda: MultiHeadLatentAttention(10, 12, 3, 4, 3), r"rope_dim must be even, got 3"),
            (lambda: MultiHeadLatentAttention(10, 12, 3, 4, 4, base=1.0), r"base must be a finite number > 1, got 1\.0"),
            (lambda: MultiHeadLatentAttention(10, 12, 3, 4, 4, q_rank=0), r"q_rank must be at least 1.*got 0"),
            (lambda: _mla()(torch.randn(1, 3, 9, dtype=torch.float64)), r"d_in=10, got 9"),
            (lambda: _mla()(torch.randn(3, 10, dtype=torch.float64)),
             r"must be 3-d.*got a 2-d tensor of shape \(3, 10\)"),
            (lambda: _mla()(torch.randn(1, 3, 10, dtype=torch.float64), cache=object()),
             r"cache must be a LatentKVCache.*got <object object"),
            (lambda: _mla()(torch.randn(1, 5, 10, dtype=torch.float64), _mla().new_cache(1, 4)),
             r"max_tokens=4 tokens, got 5"),
            (lambda: _mla()(torch.randn(2, 1, 10, dtype=torch.float64), _mla().new_cache(1, 4)),
             r"latents must have shape \(b, t, width\) = \(1, t, 5\), got \(2, 1, 5\)"),
            (lambda: LatentKVCache(1, 4, 5, 4, torch.float64).append(torch.ones(1, 1, 5),
                                                                   torch.ones(1, 1, 4)),
             r"latents must have the cache's dtype torch.float64, got torch.float32"),
            # a chunk on another device was copied into the cache without a word
            (lambda: LatentKVCache(1, 4, 5, 4, device="meta").append(torch.ones(1, 1, 5), torch.ones(1, 1, 4)),
             r"latents must be on the cache's device meta, got cpu"),
            (lambda: LatentKVCache(1, 4, 5, 4).append(torch.ones(1, 2, 5), torch.ones(1, 1, 4)),
             r"same number of tokens, got 2 and 1"),
            (lambda: latent_cache_bytes(1, 0, 1, 1, 1, 2), r"tokens must be at least 1, got 0"),
        ],
    )
    def test_ranks_inputs_and_cache_must_fit_each_other(self, make: object, message: str) -> None:
        with pytest.raises(ValueError, match=message):
            make()

    @pytest.mark.parametrize("value", NON_BOOLS)
    @pytest.mark.parametrize(
        ("flag", "call"),
        [
            ("absorbed", lambda value: MultiHeadLatentAttention(8, 8, 2, 4, 2)(torch.randn(1, 3, 8), absorbed=value)),
        ],
    )
    def test_flags_must_be_bools(self, flag: str, call, value: object) -> None:
        with refuses_non_bool(flag, value):
            call(value)
