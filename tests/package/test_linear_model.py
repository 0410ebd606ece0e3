"""The tiny model with kernel attention (attention.linear_model): a swapped block computes linear
attention on its own projections; FAVOR+ with many features approaches the softmax model, rotary
embeddings and scale included; the weights it reports; bad input."""

import copy

import pytest
import torch
from _inputs import check_half_precision_copy

from attention import BlockAttention, RotaryEmbedding, TinyTransformer, head_scores, induction_data
from attention.linear import linear_attention
from attention.linear_model import KernelBlockAttention, use_kernel_attention
from attention.rope_scaling import YaRNScaling

F64 = torch.float64


def tiny(positions: str = "rope") -> TinyTransformer:
    torch.manual_seed(123)
    return TinyTransformer(vocab_size=16, d_model=16, num_heads=2, num_layers=2, context_length=24,
                           positions=positions, mlp=False).double()


def test_a_swapped_block_is_linear_attention_on_its_projections():
    model = use_kernel_attention(tiny(positions="learned"))
    block = model.blocks[0]
    x = torch.randn(3, 10, 16, dtype=F64)
    projected = block.attn.qkv(block.norm1(x)).split(16, dim=2)  # Q, K, V: (b, t, d) each
    q, k, v = (p.view(3, 10, 2, 8).transpose(1, 2) for p in projected)  # (b, h, t, d_h) each
    context = linear_attention(q, k, v, is_causal=True, form="recurrent").transpose(1, 2).reshape(3, 10, 16)
    want = x + block.attn.out_proj(context)
    torch.testing.assert_close(block(x), want, rtol=1e-12, atol=1e-12)


def test_a_gated_sublayer_keeps_its_gate():
    # BlockAttention's output gate scales the context vectors by sigmoid(x W_g) before W_o; the
    # kernel sublayer takes it over, parameters and all, and applies it the same way
    torch.manual_seed(0)
    gated = BlockAttention(8, 2, is_causal=True, output_gate=True).double()
    attn = KernelBlockAttention(gated, "elu+1")
    assert {name for name, _ in attn.named_parameters()} == {name for name, _ in gated.named_parameters()}
    x = torch.randn(2, 5, 8, dtype=F64)
    q, k, v = (p.view(2, 5, 2, 4).transpose(1, 2) for p in gated.qkv(x).split(8, dim=2))  # (b, h, t, d_h)
    context = linear_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(2, 5, 8)  # (b, t, d)
    want = gated.out_proj(context * torch.sigmoid(gated.gate(x)))
    with torch.no_grad():
        torch.testing.assert_close(attn(x)[0], want.detach(), rtol=1e-12, atol=1e-12)


def test_favor_swap_approaches_the_softmax_model_and_reports_its_weights():
    idx, _ = induction_data(4, 24, 16, torch.Generator().manual_seed(0))
    softmax_model = tiny()
    with torch.no_grad():
        want, want_weights = softmax_model(idx, return_weights=True)
        favor_model = use_kernel_attention(tiny(), "favor", num_features=8192)
        favor, favor_weights = favor_model(idx, return_weights=True)
        linear = use_kernel_attention(tiny())(idx)
    assert (favor - want).abs().max() < 0.01 * want.abs().max()  # rotary and scale as in softmax
    assert (linear - want).abs().max() > 10 * (favor - want).abs().max()  # the swap took effect
    for got, ref in zip(favor_weights, want_weights):
        assert (got - ref).abs().max() < 0.02
    previous, induction = head_scores(use_kernel_attention(tiny()), idx)
    assert previous.shape == induction.shape == (2, 2)


def test_rotary_linear_attention_depends_on_positions_only_through_their_distance():
    # one token at every position: q and k repeat, so a relative kernel is constant along diagonals
    attn = use_kernel_attention(tiny()).blocks[0].attn
    x = torch.randn(1, 1, 16, dtype=F64).expand(1, 12, 16)  # (b, t, d)
    with torch.no_grad():
        _, weights = attn(x)  # (b, h, t, t)
    kernel = weights * torch.arange(1, 13, dtype=F64)[:, None]  # the normalizer of row i is (i + 1) c
    for offset in range(12):
        diagonal = kernel.diagonal(offset=-offset, dim1=-2, dim2=-1)  # (b, h, t - offset)
        torch.testing.assert_close(diagonal, diagonal[..., :1].expand_as(diagonal), rtol=1e-12, atol=1e-12)
    assert (kernel.diagonal(offset=-1, dim1=-2, dim2=-1) - kernel.diagonal(dim1=-2, dim2=-1)[..., 1:]).abs().max() > 1e-3


@pytest.mark.parametrize("scaled_features", ["rotated", "head"])
def test_rotary_linear_attention_leaves_out_yarns_attention_factor(scaled_features):
    # YaRN's factor multiplied the numerator's features only: a single token weighed itself
    # 1.138^2 = 1.296 times and its output was 1.296 v instead of v, as with plain RoPE
    torch.manual_seed(0)
    yarn = YaRNScaling(4.0, 64, scaled_features=scaled_features)
    rotary = RotaryEmbedding(4, rotary_dim=2, scaling=yarn)
    attn = KernelBlockAttention(BlockAttention(8, 2, is_causal=True, rotary=rotary).double(), "elu+1")
    x = torch.randn(1, 1, 8, dtype=F64)  # one token: its weight on itself is 1
    with torch.no_grad():
        out, weights = attn(x)
        value = attn.qkv(x).split(8, dim=2)[2]  # (b, t, d): the context of a lone token
        want = attn.out_proj(value)
    torch.testing.assert_close(weights, torch.ones(1, 2, 1, 1, dtype=F64), rtol=1e-14, atol=0)
    torch.testing.assert_close(out, want, rtol=1e-13, atol=1e-13)
    # the relative kernel of plain RoPE with YaRN's frequencies, on more tokens
    plain = RotaryEmbedding(4, rotary_dim=2, scaling=YaRNScaling(4.0, 64, attention_factor=1.0))
    same = KernelBlockAttention(BlockAttention(8, 2, is_causal=True, rotary=plain).double(), "elu+1")
    same.load_state_dict(attn.state_dict())
    x = torch.randn(2, 7, 8, dtype=F64)
    with torch.no_grad():
        torch.testing.assert_close(attn(x)[1], same(x)[1], rtol=1e-13, atol=1e-13)


def test_a_favor_row_whose_features_all_underflow_is_zero_not_nan():
    # Section 12.3's float32 example: with q = 0 and k = v = x, the keys' shared maximum comes
    # from the later key, so query 0's one term underflows; favor_attention gives a row of 0,
    # and so must the module, or one such row makes every gradient of a training step NaN
    attn = BlockAttention(1, 1, is_causal=True)
    with torch.no_grad():
        attn.qkv.weight.copy_(torch.tensor([[0.0], [1.0], [1.0]]))
        attn.qkv.bias.zero_()
        attn.out_proj.weight.fill_(1.0)
        attn.out_proj.bias.zero_()
    favor = KernelBlockAttention(attn, "favor", projection=torch.ones(1, 1))
    x = torch.tensor([[[-15.0], [1.0]]], requires_grad=True)  # (b, t, d), float32
    out, weights = favor(x)
    assert out.detach().flatten().tolist() == [0.0, 1.0]
    assert weights.detach().flatten().tolist() == [0.0, 0.0, 0.0, 1.0]
    out.sum().backward()
    assert torch.isfinite(x.grad).all()


def test_under_autocast_the_features_multiply_in_float32_as_the_kernels_do():
    """Autocast ran the float32 products of FAVOR+'s features in float16 again: the smallest
    flushed to 0, and the context was off from float64 by 28.6, all of its largest value, with
    inf gradients, where the module converted to float16 is off by 0.23."""
    torch.manual_seed(0)
    attn = BlockAttention(32, 4)
    projection = torch.randn(16, 8, generator=torch.Generator().manual_seed(0))  # (m, d_h)
    favor = KernelBlockAttention(attn, "favor", projection=projection)
    x = 30 * torch.randn(2, 8, 32, generator=torch.Generator().manual_seed(0))  # (b, t, d)
    want = copy.deepcopy(favor).double()(x.double())[0]
    with torch.autocast("cpu", dtype=torch.float16):
        out = favor(x)[0]
    out.float().sum().backward()
    assert out.dtype == torch.float16
    assert (out.double() - want).abs().max() <= 0.01 * want.abs().max()
    assert all(p.grad.isfinite().all() for p in favor.parameters())


@pytest.mark.parametrize("kind", ["elu+1", "favor"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_half_precision_model_swaps_its_attention_and_stays_in_its_dtype(kind, dtype):
    # the features and weights are computed in float32: the weighted sum too, rounded once
    torch.manual_seed(0)
    model = use_kernel_attention(tiny(), kind, num_features=32 if kind == "favor" else None)
    ids = torch.randint(16, (2, 10), generator=torch.Generator().manual_seed(1))
    check_half_precision_copy(model, ids, dtype)


class TestBadInput:
    def test_a_favor_projection_must_be_m_by_d_h(self):
        with pytest.raises(ValueError, match=r"\(m, d_h\) tensor with d_h=4, got shape \(16, 5\)"):
            KernelBlockAttention(BlockAttention(8, 2), "favor", torch.randn(16, 5))
        with pytest.raises(ValueError, match=r"\(m, d_h\) tensor with d_h=4, got shape \(4,\)"):
            KernelBlockAttention(BlockAttention(8, 2), "favor", torch.ones(4))

    def test_a_favor_projection_must_be_on_the_sublayers_device(self):
        # it was taken, and the first call failed inside torch: "Tensor on device cpu is not on
        # the expected device meta!"
        with pytest.raises(ValueError, match=r"projection must be on the sublayer's device cpu, got meta"):
            KernelBlockAttention(BlockAttention(8, 2), "favor", torch.randn(16, 4, device="meta"))

    def test_the_sublayer_must_be_a_block_attention(self):
        # an AttributeError ('Linear' object has no attribute 'dropout') was raised
        with pytest.raises(ValueError, match=r"attn must be a BlockAttention, got Linear"):
            KernelBlockAttention(torch.nn.Linear(2, 2), "elu+1")

    def test_a_block_that_is_not_softmax_attention_is_named(self):
        # "model must have blocks whose attn is a BlockAttention, got TinyTransformer": it named
        # the model, which has blocks, and not the block that is not a BlockAttention
        model = use_kernel_attention(tiny())
        with pytest.raises(ValueError, match=r"block 0's attn must be a BlockAttention to replace, "
                                             r"got KernelBlockAttention"):
            use_kernel_attention(model, "favor", num_features=4)

    def test_only_a_block_without_masks_or_dropout_is_swapped(self):
        with pytest.raises(ValueError, match=r"attn is a BlockAttention.*got Linear"):
            use_kernel_attention(torch.nn.Linear(2, 2))
        with pytest.raises(ValueError, match=r"kind must be.*got 'softmax'"):
            use_kernel_attention(tiny(), "softmax")
        with pytest.raises(ValueError, match=r"num_features must be an integer.*got None of type NoneType"):
            use_kernel_attention(tiny(), "favor")
        with pytest.raises(ValueError, match=r"num_features is for kind='favor' only.*got 8"):
            use_kernel_attention(tiny(), num_features=8)
        model = tiny()
        with pytest.raises(ValueError, match=r"seed must be an integer in .*got 1\.5"):
            use_kernel_attention(model, "favor", num_features=4, seed=1.5)
        assert all(type(block.attn) is BlockAttention for block in model.blocks)  # none replaced
        idx = torch.zeros(1, 4, dtype=torch.long)
        with pytest.raises(ValueError, match=r"no attn_mask or bias .*got attn_mask=a tensor, cache=None"):
            use_kernel_attention(tiny(positions="alibi"))(idx)
        with pytest.raises(
            ValueError, match=r"no attn_mask or bias .*got attn_mask=None, cache=<attention\.kv_cache\.KVCache"
        ):
            use_kernel_attention(tiny()).generate(idx, 2)
        torch.manual_seed(0)
        dropping = TinyTransformer(16, 16, 2, 1, 24, dropout=0.1)
        with pytest.raises(ValueError, match=r"no dropout.*got dropout=0\.1"):
            use_kernel_attention(dropping)
        with pytest.raises(
            ValueError, match=r"projection is needed for kind='favor'.*got kind='favor' and projection=None"
        ):
            KernelBlockAttention(tiny().blocks[0].attn, "favor")
        kernel = KernelBlockAttention(tiny().blocks[0].attn, "elu+1")
        with pytest.raises(ValueError, match=r"x must have last dimension d_model=16, got 8"):
            kernel(torch.randn(1, 4, 8))
