"""Modules follow torch.nn: factory arguments, masks that checkpoints do not carry, state dicts
that convert to and from torch's, buffers that follow .to(), caches that move."""

import pytest
import torch
from torch import nn

from attention import (
    BlockAttention,
    CausalAttention,
    FusedMultiHeadAttention,
    GroupedQueryAttention,
    KVCache,
    LatentKVCache,
    MultiHeadAttention,
    MultiHeadAttentionWrapper,
    MultiHeadLatentAttention,
    PagedKVCache,
    RollingKVCache,
    RotaryEmbedding,
    TinyTransformer,
    TransformerBlock,
    from_torch_state_dict,
    to_torch_state_dict,
)


class RotaryTinyTransformer(TinyTransformer):
    """The key of TinyTransformer with rotary positions."""


BUILD = {
    CausalAttention: lambda **kw: CausalAttention(4, 4, 6, 0.0, **kw),
    MultiHeadAttentionWrapper: lambda **kw: MultiHeadAttentionWrapper(4, 4, 6, 0.0, 2, **kw),
    MultiHeadAttention: lambda **kw: MultiHeadAttention(4, 4, 6, 0.0, 2, **kw),
    FusedMultiHeadAttention: lambda **kw: FusedMultiHeadAttention(4, 4, 6, 0.0, 2, **kw),
    GroupedQueryAttention: lambda **kw: GroupedQueryAttention(4, 4, 2, 1, **kw),
    BlockAttention: lambda **kw: BlockAttention(4, 2, is_causal=True, **kw),
    TransformerBlock: lambda **kw: TransformerBlock(4, 2, 8, is_causal=True, **kw),
    MultiHeadLatentAttention: lambda **kw: MultiHeadLatentAttention(4, 4, 2, 2, 2, q_rank=2, **kw),
    TinyTransformer: lambda **kw: TinyTransformer(8, 4, 2, 1, 6, positions="learned", **kw),
    RotaryTinyTransformer: lambda **kw: TinyTransformer(8, 4, 2, 1, 6, positions="rope", **kw),
}


@pytest.mark.parametrize("cls", BUILD, ids=lambda cls: cls.__name__)
def test_modules_take_device_and_dtype(cls):
    module = BUILD[cls](device="meta", dtype=torch.float64)
    tensors = [*module.parameters(), *module.buffers()]
    assert tensors and all(x.device.type == "meta" for x in tensors)
    assert {p.dtype for p in module.parameters()} == {torch.float64}
    buffers = {x.dtype for x in module.buffers()}
    assert buffers <= {torch.bool, torch.float64}  # masks and RoPE's float64 frequencies


@pytest.mark.parametrize("cls", [CausalAttention, MultiHeadAttention, FusedMultiHeadAttention])
def test_causal_mask_is_a_bool_buffer_that_checkpoints_do_not_carry(cls):
    """A float context² buffer was saved in every checkpoint and failed to load at another
    context length."""
    module = BUILD[cls]()
    assert module.mask.dtype == torch.bool and "mask" not in module.state_dict()
    longer = type(module)(4, 4, 12, 0.0, *(() if cls is CausalAttention else (2,)))
    longer.load_state_dict(module.state_dict())  # another context length loads
    old = {**module.state_dict(), "mask": torch.triu(torch.ones(6, 6), diagonal=1)}
    module.load_state_dict(old)  # a checkpoint saved with the old float buffer still loads
    assert module.mask.dtype == torch.bool


@pytest.mark.parametrize("qkv_bias", [False, True])
def test_state_dicts_convert_to_and_from_torch_multihead_attention(qkv_bias):
    torch.manual_seed(0)
    ours = MultiHeadAttention(8, 8, 5, 0.0, num_heads=2, qkv_bias=qkv_bias).eval()
    theirs = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    theirs.load_state_dict(to_torch_state_dict(ours.state_dict()))
    x = torch.randn(3, 5, 8)
    future = torch.ones(5, 5, dtype=torch.bool).triu(1)  # torch: True = may not attend
    want, _ = theirs(x, x, x, attn_mask=future, need_weights=False)
    torch.testing.assert_close(ours(x), want, rtol=1e-5, atol=1e-6)
    back = MultiHeadAttention(8, 8, 5, 0.0, num_heads=2, qkv_bias=qkv_bias)
    back.load_state_dict(from_torch_state_dict(theirs.state_dict(), qkv_bias=qkv_bias))
    torch.testing.assert_close(back.eval()(x), ours(x), rtol=0, atol=0)
    with pytest.raises(ValueError, match="needs d_in = d_out, got 4 and 8"):
        to_torch_state_dict(MultiHeadAttention(4, 8, 5, 0.0, num_heads=2).state_dict())
    if not qkv_bias:
        nn.init.ones_(theirs.in_proj_bias)
        with pytest.raises(ValueError, match="in_proj_bias must be zero"):
            from_torch_state_dict(theirs.state_dict(), qkv_bias=False)


def test_rotary_frequencies_follow_to_and_stay_out_of_checkpoints():
    want = RotaryEmbedding(8).frequencies
    rotary = RotaryEmbedding(8).to(dtype=torch.float16, device="meta")
    assert rotary.frequencies.device.type == "meta"
    assert rotary.frequencies.dtype == torch.float64  # a cast to float16 would round θ_i
    assert torch.equal(rotary.to_empty(device="cpu").frequencies, want)  # recomputed, not garbage
    assert "frequencies" not in RotaryEmbedding(8).state_dict()


@pytest.mark.parametrize("make", [lambda: KVCache(1, 2, 8, 4),
                                  lambda: RollingKVCache(1, 2, 3, 4, sinks=1)])
def test_caches_move(make):
    cache = make()
    cache.append(torch.ones(1, 2, 2, 4), torch.ones(1, 2, 2, 4))
    moved = cache.to(device="meta", dtype=torch.float64)
    assert moved is cache and cache.length == 2
    assert cache.keys.device.type == cache.values.device.type == "meta"
    assert cache.keys.dtype == torch.float64


def test_latent_and_paged_caches_move():
    latent = LatentKVCache(1, 8, 4, 2).to(device="meta", dtype=torch.float64)
    assert {x.device.type for x in (latent.latents, latent.rope_keys)} == {"meta"}
    pool = PagedKVCache(4, 2, 1, 4).to(device="meta", dtype=torch.float64)
    assert pool.keys.device.type == pool.values.device.type == "meta"
    assert pool.keys.dtype == torch.float64
