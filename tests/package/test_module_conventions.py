"""Modules follow torch.nn: factory arguments, masks that checkpoints do not carry, state dicts
that convert to and from torch's, buffers that follow .to(), caches that move."""

import importlib
import inspect
import io
import pkgutil

import pytest
import torch
from _inputs import uninitialized_memory_filled
from torch import nn

import attention
from attention import (
    AdditiveAttention,
    AttentionDecoder,
    BidirectionalSelfAttention,
    BlockAttention,
    CausalAttention,
    CrossAttention,
    FusedMultiHeadAttention,
    GatedDeltaNet,
    GroupedQueryAttention,
    KernelBlockAttention,
    KVCache,
    LatentKVCache,
    LearnedPositions,
    LightningIndexer,
    MultiHeadAttention,
    MultiHeadAttentionWrapper,
    MultiHeadLatentAttention,
    PagedKVCache,
    RMSNorm,
    RollingKVCache,
    RotaryEmbedding,
    SelfAttentionV1,
    SelfAttentionV2,
    Seq2Seq,
    Seq2SeqEncoder,
    TinyTransformer,
    TransformerBlock,
    from_torch_state_dict,
    random_projection,
    to_torch_state_dict,
)
from attention.delta_model import RecurrentBlockAttention
from attention.hf import CausalLM


class RotaryTinyTransformer(TinyTransformer):
    """The key of TinyTransformer with rotary positions."""


BUILD = {
    CausalAttention: lambda **kw: CausalAttention(4, 4, 6, 0.0, **kw),
    MultiHeadAttentionWrapper: lambda **kw: MultiHeadAttentionWrapper(4, 4, 2, 6, 0.0, **kw),
    MultiHeadAttention: lambda **kw: MultiHeadAttention(4, 4, 2, 6, 0.0, **kw),
    FusedMultiHeadAttention: lambda **kw: FusedMultiHeadAttention(4, 4, 2, 6, 0.0, **kw),
    GroupedQueryAttention: lambda **kw: GroupedQueryAttention(4, 4, 2, 1, **kw),
    BlockAttention: lambda **kw: BlockAttention(4, 2, is_causal=True, **kw),
    TransformerBlock: lambda **kw: TransformerBlock(4, 2, 8, is_causal=True, **kw),
    MultiHeadLatentAttention: lambda **kw: MultiHeadLatentAttention(4, 4, 2, 2, 2, q_rank=2, **kw),
    TinyTransformer: lambda **kw: TinyTransformer(8, 4, 2, 1, 6, positions="learned", **kw),
    RotaryTinyTransformer: lambda **kw: TinyTransformer(8, 4, 2, 1, 6, positions="rope", **kw),
    SelfAttentionV1: lambda **kw: SelfAttentionV1(3, 2, **kw),
    SelfAttentionV2: lambda **kw: SelfAttentionV2(3, 2, **kw),
    CrossAttention: lambda **kw: CrossAttention(3, 5, 4, 2, 0.0, **kw),
    BidirectionalSelfAttention: lambda **kw: BidirectionalSelfAttention(3, 4, 2, 0.0, **kw),
    AdditiveAttention: lambda **kw: AdditiveAttention(4, 3, 5, **kw),
    Seq2SeqEncoder: lambda **kw: Seq2SeqEncoder(10, 4, 3, **kw),
    AttentionDecoder: lambda **kw: AttentionDecoder(10, 4, 3, 5, **kw),
    GatedDeltaNet: lambda **kw: GatedDeltaNet(16, 2, 2, 4, 4, **kw),
    LightningIndexer: lambda **kw: LightningIndexer(8, 4, 2, 4, 2, **kw),
    RMSNorm: lambda **kw: RMSNorm(4, **kw),
    LearnedPositions: lambda **kw: LearnedPositions(6, 4, **kw),
    # θ_i stay float64 whatever the model's dtype (a cast would round them): device= only.
    RotaryEmbedding: lambda device, dtype: RotaryEmbedding(4, device=device),
}

# Modules that make no parameters of their own dtype: they take over the modules they are given,
# and what they add follows those (built here from a float64 meta BlockAttention or model).
WRAPPERS = {
    Seq2Seq: lambda **kw: Seq2Seq(Seq2SeqEncoder(10, 4, 3, **kw), AttentionDecoder(10, 4, 3, 5, **kw)),
    KernelBlockAttention: lambda **kw: KernelBlockAttention(
        BlockAttention(4, 2, is_causal=True, **kw), "favor",
        random_projection(3, 2).to(**kw)),
    RecurrentBlockAttention: lambda **kw: RecurrentBlockAttention(
        BlockAttention(4, 2, is_causal=True, **kw), "gated_delta"),
}
# A model converted from transformers' weights: its tensors are the loaded ones.
CONVERTED = {CausalLM}


def public_module_classes() -> set[type]:
    """Every nn.Module subclass a public module of the package defines and exports."""
    found = set()
    for info in pkgutil.walk_packages(attention.__path__, "attention."):
        if any(part.startswith("_") for part in info.name.split(".")) or ".bench" in info.name:
            continue
        module = importlib.import_module(info.name)
        names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
        found |= {o for n in names if inspect.isclass(o := getattr(module, n))
                  and issubclass(o, nn.Module) and o.__module__ == module.__name__}
    return found


def test_every_public_module_class_is_checked_for_factory_arguments():
    checked = set(BUILD) | set(WRAPPERS) | CONVERTED
    missing = sorted(c.__name__ for c in public_module_classes() - checked)
    assert missing == [], f"nn.Module subclasses without a factory-argument check: {missing}"


@pytest.mark.parametrize("cls", [*BUILD, *WRAPPERS], ids=lambda cls: cls.__name__)
def test_modules_take_device_and_dtype(cls):
    module = {**BUILD, **WRAPPERS}[cls](device="meta", dtype=torch.float64)
    tensors = [*module.parameters(), *module.buffers()]
    assert tensors and all(x.device.type == "meta" for x in tensors)
    assert {p.dtype for p in module.parameters()} <= {torch.float64}
    buffers = {x.dtype for x in module.buffers()}
    assert buffers <= {torch.bool, torch.float64}  # masks and RoPE's float64 frequencies


@pytest.mark.parametrize("cls", [*BUILD, *WRAPPERS], ids=lambda cls: cls.__name__)
def test_modules_built_on_meta_then_loaded_equal_modules_built_in_place(cls):
    """Built on the meta device, moved with to_empty and loaded from a checkpoint (how large
    models are loaded), a module holds what one built in place holds: a buffer the checkpoint
    does not carry (a causal mask, RoPE's frequencies) is rebuilt, not left uninitialized."""
    build = {**BUILD, **WRAPPERS}[cls]
    torch.manual_seed(0)
    built = build(device="cpu", dtype=torch.float32)
    with uninitialized_memory_filled():
        loaded = build(device="meta", dtype=torch.float32).to_empty(device="cpu")
    loaded.load_state_dict(built.state_dict())
    for (name, want), (_, got) in zip(built.named_buffers(), loaded.named_buffers(), strict=True):
        assert torch.equal(got, want), f"{cls.__name__}.{name} is not rebuilt after to_empty"


@pytest.mark.parametrize("cls", [*BUILD, *WRAPPERS], ids=lambda cls: cls.__name__)
def test_modules_pickle_whole(cls):
    """``torch.save(model)`` pickles the module itself (so do copies sent to other processes):
    every hook and attribute is importable, and the copy holds the same tensors."""
    module = {**BUILD, **WRAPPERS}[cls](device="cpu", dtype=torch.float32)
    buffer = io.BytesIO()
    torch.save(module, buffer)
    buffer.seek(0)
    copy = torch.load(buffer, weights_only=False)
    for (name, want), (_, got) in zip(module.state_dict(keep_vars=True).items(),
                                      copy.state_dict(keep_vars=True).items(), strict=True):
        assert torch.equal(got, want), f"{cls.__name__}.{name} differs after a round trip"
    for (name, want), (_, got) in zip(module.named_buffers(), copy.named_buffers(), strict=True):
        assert torch.equal(got, want), f"{cls.__name__}.{name} differs after a round trip"


@pytest.mark.parametrize("cls", [CausalAttention, MultiHeadAttention, FusedMultiHeadAttention])
def test_a_move_that_changes_nothing_keeps_the_causal_mask(cls):
    """Rebuilt under inference mode, the mask became an inference tensor that training cannot
    save for backward; a shared module lost its shared mask."""
    module = BUILD[cls]()
    mask = module.mask
    with torch.inference_mode():
        module.to("cpu").float()
    assert module.share_memory().mask is mask and mask.is_shared()
    x = torch.randn(2, 6, 4, requires_grad=True)
    module(x).sum().backward()  # trains: the mask is no inference tensor


@pytest.mark.parametrize("cls", [CausalAttention, MultiHeadAttention, FusedMultiHeadAttention])
def test_causal_mask_is_a_bool_buffer_that_checkpoints_do_not_carry(cls):
    """A float context² buffer was saved in every checkpoint and failed to load at another
    context length."""
    module = BUILD[cls]()
    assert module.mask.dtype == torch.bool and "mask" not in module.state_dict()
    longer = type(module)(4, 4, *(() if cls is CausalAttention else (2,)), 12, 0.0)
    longer.load_state_dict(module.state_dict())  # another context length loads
    old = {**module.state_dict(), "mask": torch.triu(torch.ones(6, 6), diagonal=1)}
    module.load_state_dict(old)  # a checkpoint saved with the old float buffer still loads
    assert module.mask.dtype == torch.bool


@pytest.mark.parametrize("qkv_bias", [False, True])
def test_state_dicts_convert_to_and_from_torch_multihead_attention(qkv_bias):
    torch.manual_seed(0)
    ours = MultiHeadAttention(8, 8, context_length=5, dropout=0.0, num_heads=2, qkv_bias=qkv_bias).eval()
    theirs = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    theirs.load_state_dict(to_torch_state_dict(ours.state_dict()))
    x = torch.randn(3, 5, 8)
    future = torch.ones(5, 5, dtype=torch.bool).triu(1)  # torch: True = may not attend
    want, _ = theirs(x, x, x, attn_mask=future, need_weights=False)
    torch.testing.assert_close(ours(x), want, rtol=1e-5, atol=1e-6)
    back = MultiHeadAttention(8, 8, context_length=5, dropout=0.0, num_heads=2, qkv_bias=qkv_bias)
    back.load_state_dict(from_torch_state_dict(theirs.state_dict(), qkv_bias=qkv_bias))
    torch.testing.assert_close(back.eval()(x), ours(x), rtol=0, atol=0)


def test_rotary_frequencies_follow_to_and_stay_out_of_checkpoints():
    want = RotaryEmbedding(8).frequencies
    rotary = RotaryEmbedding(8).to(dtype=torch.float16, device="meta")
    assert rotary.frequencies.device.type == "meta"
    assert rotary.frequencies.dtype == torch.float64  # a cast to float16 would round θ_i
    assert torch.equal(rotary.to_empty(device="cpu").frequencies, want)  # recomputed, not garbage
    assert "frequencies" not in RotaryEmbedding(8).state_dict()


@pytest.mark.parametrize("make", [lambda: KVCache(1, 2, 8, 4),
                                  lambda: RollingKVCache(1, 2, 3, 4, sinks=1)])
def test_caches_move_in_place_with_to(make):
    cache = make()
    cache.append(torch.ones(1, 2, 2, 4), torch.ones(1, 2, 2, 4))
    moved = cache.to(device="meta", dtype=torch.float64)
    assert moved is cache and cache.length == 2
    assert cache.keys.device.type == cache.values.device.type == "meta"
    assert cache.keys.dtype == cache.values.dtype == torch.float64


def test_latent_and_paged_caches_move():
    latent = LatentKVCache(1, 8, 4, 2).to(device="meta", dtype=torch.float64)
    assert {x.device.type for x in (latent.latents, latent.rope_keys)} == {"meta"}
    pool = PagedKVCache(4, 2, 1, 4).to(device="meta", dtype=torch.float64)
    assert pool.keys.device.type == pool.values.device.type == "meta"
    assert pool.keys.dtype == pool.values.dtype == torch.float64


# One argument order over the attention modules: the widths, the head counts and other sizes of
# the weights, then context_length and dropout; every other option keyword-only.
ORDER = ["d_in", "d_q", "d_kv", "d_out", "d_model", "num_heads", "num_kv_heads", "kv_rank", "rope_dim",
         "d_ff", "context_length", "dropout"]
ATTENTION_MODULES = [SelfAttentionV1, SelfAttentionV2, CausalAttention, MultiHeadAttentionWrapper,
                     MultiHeadAttention, FusedMultiHeadAttention, CrossAttention,
                     BidirectionalSelfAttention, GroupedQueryAttention, MultiHeadLatentAttention,
                     BlockAttention, TransformerBlock]


@pytest.mark.parametrize("cls", ATTENTION_MODULES, ids=lambda cls: cls.__name__)
def test_attention_modules_share_one_argument_order(cls):
    parameters = list(inspect.signature(cls).parameters.values())
    positional = [p.name for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert positional == [n for n in ORDER if n in positional], f"{cls.__name__}{positional}"
    assert all(p.kind is p.KEYWORD_ONLY for p in parameters if p.name not in ORDER)


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    def test_state_dict_conversion_refuses_what_the_other_side_cannot_hold(self):
        with pytest.raises(ValueError, match="needs d_in = d_out, got 4 and 8"):
            to_torch_state_dict(MultiHeadAttention(4, 8, context_length=5, dropout=0.0, num_heads=2).state_dict())
        theirs = nn.MultiheadAttention(8, 2, batch_first=True)
        nn.init.ones_(theirs.in_proj_bias)
        with pytest.raises(ValueError, match=r"in_proj_bias must be zero.*got a non-zero bias"):
            from_torch_state_dict(theirs.state_dict(), qkv_bias=False)

    @pytest.mark.parametrize("cls", [MultiHeadAttentionWrapper, MultiHeadAttention, FusedMultiHeadAttention])
    def test_a_call_in_the_old_order_is_refused_not_swapped(self, cls):
        # (d_in, d_out, context_length, dropout, num_heads) before: the old dropout lands on
        # context_length and num_heads (>= 1) on dropout, and both are refused.
        with pytest.raises(ValueError, match="context_length must be an integer"):
            cls(4, 4, 6, 0.0, 2)
