"""Edge cases of the modules: empty sequences, empty batches, and the output-projection dropout.

Where PyTorch has an answer, ours is compared with it: ``torch.nn.MultiheadAttention`` and
``torch.nn.functional.scaled_dot_product_attention`` give a query with no keys a zero context
vector and give no queries an empty output. Notation: b batch, t tokens (t_q queries, t_k keys),
d_in / d_out widths, h heads.
"""

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attention import (
    AdditiveAttention,
    AttentionDecoder,
    BidirectionalSelfAttention,
    CausalAttention,
    CrossAttention,
    FusedMultiHeadAttention,
    MultiHeadAttention,
    MultiHeadAttentionWrapper,
    SelfAttentionV1,
    SelfAttentionV2,
    Seq2Seq,
    Seq2SeqEncoder,
)

D_IN, D_OUT, HEADS = 3, 4, 2

# Self-attention modules with d_in = 3, each with its output width; forward takes x alone.
SELF_ATTENTION_MODULES: dict[str, tuple[Callable[[], nn.Module], int]] = {
    "V1": (lambda: SelfAttentionV1(D_IN, D_OUT), D_OUT),
    "V2": (lambda: SelfAttentionV2(D_IN, D_OUT), D_OUT),
    "causal": (lambda: CausalAttention(D_IN, D_OUT, 6, 0.0), D_OUT),
    "wrapper": (lambda: MultiHeadAttentionWrapper(D_IN, D_OUT, 6, 0.0, HEADS), HEADS * D_OUT),
    "multihead": (lambda: MultiHeadAttention(D_IN, D_OUT, 6, 0.0, HEADS), D_OUT),
    "fused-sdpa": (lambda: FusedMultiHeadAttention(D_IN, D_OUT, 6, 0.0, HEADS), D_OUT),
    "fused-explicit": (
        lambda: FusedMultiHeadAttention(D_IN, D_OUT, 6, 0.0, HEADS, use_sdpa=False),
        D_OUT,
    ),
    "bidirectional": (lambda: BidirectionalSelfAttention(D_IN, D_OUT, 0.0, HEADS), D_OUT),
}


def torch_reference(module: CrossAttention) -> nn.MultiheadAttention:
    """``torch.nn.MultiheadAttention`` holding the weights of a CrossAttention (d_q = d_out)."""
    ref = nn.MultiheadAttention(
        module.d_out, module.num_heads, kdim=module.d_kv, vdim=module.d_kv, batch_first=True
    ).to(module.out_proj.weight.dtype)
    projections = (module.W_query, module.W_key, module.W_value)
    with torch.no_grad():
        if ref.in_proj_weight is not None:  # d_kv = d_out: torch packs W_q, W_k, W_v together
            ref.in_proj_weight.copy_(torch.cat([p.weight for p in projections]))
        else:
            for name, p in zip(("q_proj_weight", "k_proj_weight", "v_proj_weight"), projections):
                getattr(ref, name).copy_(p.weight)
        ref.in_proj_bias.zero_()  # the module's projections have no bias
        ref.out_proj.load_state_dict(module.out_proj.state_dict())
    return ref


# --- empty sequences and empty batches --------------------------------------------------------


@pytest.mark.parametrize("name", SELF_ATTENTION_MODULES)
@pytest.mark.parametrize("b", [2, 0])
def test_zero_tokens_give_an_empty_output_with_gradients(name: str, b: int) -> None:
    build, d_out = SELF_ATTENTION_MODULES[name]
    module = build()
    x = torch.randn(b, 0, D_IN, requires_grad=True)
    out = module(x)
    assert out.shape == (b, 0, d_out)
    out.sum().backward()  # the graph through an empty sequence is valid: every gradient is 0
    assert x.grad.shape == x.shape
    for p in module.parameters():
        assert p.grad is not None and torch.all(p.grad == 0)


@pytest.mark.parametrize("name", SELF_ATTENTION_MODULES)
def test_empty_batch_gives_an_empty_batch(name: str) -> None:
    build, d_out = SELF_ATTENTION_MODULES[name]
    assert build()(torch.randn(0, 5, D_IN)).shape == (0, 5, d_out)


@pytest.mark.parametrize("name", ["multihead", "bidirectional"])
def test_zero_tokens_weights_have_torch_shape(name: str) -> None:
    module = SELF_ATTENTION_MODULES[name][0]()
    x = torch.randn(2, 0, D_IN)
    _, weights = module(x, return_weights=True)
    ref = nn.MultiheadAttention(D_IN + 1, HEADS, batch_first=True)  # embed_dim must divide by h
    y = torch.randn(2, 0, D_IN + 1)
    _, ref_weights = ref(y, y, y, average_attn_weights=False)
    assert weights.shape == ref_weights.shape == (2, HEADS, 0, 0)


@pytest.mark.parametrize("padding", [False, True])
def test_cross_attention_with_an_empty_context_equals_torch(padding: bool) -> None:
    torch.manual_seed(0)
    module = CrossAttention(d_q=4, d_kv=5, d_out=4, dropout=0.0, num_heads=2).double()
    with torch.no_grad():
        module.out_proj.bias.normal_()  # a bias torch's zero-initialised one could not match
    x, context = torch.randn(2, 3, 4).double(), torch.randn(2, 0, 5).double()
    key_padding_mask = torch.zeros(2, 0, dtype=torch.bool) if padding else None
    out, weights = module(x, context, key_padding_mask, return_weights=True)
    ref_out, ref_weights = torch_reference(module)(
        x, context, context, key_padding_mask=key_padding_mask, average_attn_weights=False
    )
    torch.testing.assert_close(out, ref_out, rtol=0, atol=1e-12)
    assert weights.shape == ref_weights.shape == (2, 2, 3, 0)
    # no keys: a zero context vector, so the output is out_proj's bias for every query
    torch.testing.assert_close(out, module.out_proj.bias.expand(2, 3, 4), rtol=0, atol=0)


def test_cross_attention_without_queries_equals_torch() -> None:
    torch.manual_seed(0)
    module = CrossAttention(d_q=4, d_kv=5, d_out=4, dropout=0.0, num_heads=2)
    x, context = torch.randn(2, 0, 4), torch.randn(2, 6, 5)
    out, weights = module(x, context, return_weights=True)
    ref_out, ref_weights = torch_reference(module)(x, context, context, average_attn_weights=False)
    assert out.shape == ref_out.shape == (2, 0, 4)
    assert weights.shape == ref_weights.shape == (2, 2, 0, 6)


def test_additive_attention_without_keys_equals_sdpa() -> None:
    torch.manual_seed(0)
    attention = AdditiveAttention(d_query=3, d_key=5, d_attn=4)
    query, keys, values = torch.randn(2, 3), torch.randn(2, 0, 5), torch.randn(2, 0, 7)
    for mask in (None, torch.zeros(2, 0, dtype=torch.bool)):
        context, weights = attention(query, keys, values, mask)
        assert weights.shape == (2, 0)
        # what torch's SDPA gives one query (t_q = 1) with no keys: a zero context vector
        ref = F.scaled_dot_product_attention(torch.randn(2, 1, 5), keys, values)  # (2, 1, 7)
        torch.testing.assert_close(context, ref[:, 0], rtol=0, atol=0)
        assert context.shape == (2, 7) and torch.all(context == 0)


def test_additive_attention_on_an_empty_batch() -> None:
    context, weights = AdditiveAttention(3, 5, 4)(torch.randn(0, 3), torch.randn(0, 6, 5))
    assert context.shape == (0, 5) and weights.shape == (0, 6)


def _seq2seq(vocab_size: int = 11) -> Seq2Seq:
    torch.manual_seed(0)
    encoder = Seq2SeqEncoder(vocab_size, d_emb=4, d_hidden=6)
    return Seq2Seq(encoder, AttentionDecoder(vocab_size, d_emb=4, d_hidden=6, d_attn=5))


def test_seq2seq_with_no_target_tokens_gives_empty_logits() -> None:
    model = _seq2seq()
    src = torch.randint(0, 11, (2, 7))
    logits, weights = model(src, torch.zeros(2, 0, dtype=torch.long))
    assert logits.shape == (2, 0, 11) and weights.shape == (2, 0, 7)
    # one target token more gives one row more, and that row is the first one of a longer run
    tgt_in = torch.randint(0, 11, (2, 3))
    logits_1, weights_1 = model(src, tgt_in[:, :1])
    logits_3, weights_3 = model(src, tgt_in)
    assert logits_1.shape == (2, 1, 11) and weights_1.shape == (2, 1, 7)
    torch.testing.assert_close(logits_1, logits_3[:, :1])


def test_seq2seq_on_an_empty_batch() -> None:
    model = _seq2seq()
    src, tgt_in = torch.zeros(0, 7, dtype=torch.long), torch.zeros(0, 3, dtype=torch.long)
    logits, weights = model(src, tgt_in)
    assert logits.shape == (0, 3, 11) and weights.shape == (0, 3, 7)
    tokens, weights = model.greedy_decode(src, max_len=2, bos=0)
    assert tokens.shape == (0, 2) and weights.shape == (0, 2, 7)


# --- output-projection dropout ----------------------------------------------------------------

PROJ_DROPOUT_MODULES: dict[str, Callable[[float], nn.Module]] = {
    "multihead": lambda p: MultiHeadAttention(D_IN, 6, 8, 0.0, 3, proj_dropout=p),
    "fused-sdpa": lambda p: FusedMultiHeadAttention(D_IN, 6, 8, 0.0, 3, proj_dropout=p),
    "fused-explicit": lambda p: FusedMultiHeadAttention(
        D_IN, 6, 8, 0.0, 3, use_sdpa=False, proj_dropout=p
    ),
}


def _train_and_eval(module: nn.Module, x: Tensor, seed: int) -> tuple[Tensor, Tensor]:
    """The module's output on x in training mode (after ``manual_seed(seed)``) and in eval mode."""
    with torch.no_grad():
        torch.manual_seed(seed)
        trained = module.train()(x)
        evaluated = module.eval()(x)
    return trained, evaluated


@pytest.mark.parametrize("name", PROJ_DROPOUT_MODULES)
def test_proj_dropout_zeroes_and_rescales_the_projected_output(name: str) -> None:
    p = 0.4
    torch.manual_seed(0)
    module = PROJ_DROPOUT_MODULES[name](p)
    x = torch.randn(4, 8, D_IN)
    trained, evaluated = _train_and_eval(module, x, seed=1)
    assert torch.all(evaluated != 0)  # so that every 0 below was made by dropout
    dropped = trained == 0
    assert 0.25 < dropped.float().mean().item() < 0.55  # about p of the 4 * 8 * 6 entries
    torch.testing.assert_close(trained[~dropped], evaluated[~dropped] / (1 - p))
    # exactly nn.Dropout applied to out_proj's result: the same seed draws the same entries
    torch.manual_seed(1)
    torch.testing.assert_close(trained, F.dropout(evaluated, p, training=True))


@pytest.mark.parametrize("name", PROJ_DROPOUT_MODULES)
def test_no_dropout_at_all_makes_training_equal_eval(name: str) -> None:
    torch.manual_seed(0)
    trained, evaluated = _train_and_eval(PROJ_DROPOUT_MODULES[name](0.0), torch.randn(2, 8, 3), 1)
    torch.testing.assert_close(trained, evaluated, rtol=0, atol=0)


def test_proj_dropout_defaults_to_zero_and_leaves_attention_dropout_alone() -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(D_IN, 6, 8, dropout=0.5, num_heads=3)
    assert mha.proj_dropout.p == 0.0 and mha.dropout.p == 0.5
    assert FusedMultiHeadAttention(D_IN, 6, 8, 0.5, 3).proj_dropout.p == 0.0


def test_from_multihead_carries_proj_dropout_over() -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(D_IN, 6, 8, dropout=0.0, num_heads=3, proj_dropout=0.3)
    fused = FusedMultiHeadAttention.from_multihead(mha)
    assert fused.proj_dropout.p == 0.3 and fused.training
    x = torch.randn(2, 8, D_IN)
    with torch.no_grad():
        torch.manual_seed(5)
        expected = mha(x)
        torch.manual_seed(5)
        got = fused(x)
    assert torch.any(expected == 0)
    torch.testing.assert_close(got, expected)
