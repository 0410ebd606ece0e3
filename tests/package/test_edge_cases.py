"""Edge cases: empty sequences and batches, nan and inf, masks of every dtype, and the
output-projection dropout, of the modules and of the functional API (``scaled_dot_product_attention``,
``attention_weights``, ``flash_attention``).

Where PyTorch has an answer, ours is compared with it: ``torch.nn.MultiheadAttention`` and
``torch.nn.functional.scaled_dot_product_attention`` give a query with no keys a zero context
vector and give no queries an empty output. Notation: b batch, t tokens (t_q queries, t_k keys),
d_in / d_out widths, h heads.
"""

import ast
import importlib
import inspect
import pkgutil
from collections.abc import Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from _inputs import mask_dtypes, qkv
from _reach import reaches
from torch import Tensor, nn

import attention
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
    attention_weights,
    flash_attention,
    scaled_dot_product_attention,
)
from attention.linear import linear_attention
from attention.masks import dense_attention

D_IN, D_OUT, HEADS = 3, 4, 2

# Self-attention modules with d_in = 3, each with its output width; forward takes x alone.
SELF_ATTENTION_MODULES: dict[str, tuple[Callable[[], nn.Module], int]] = {
    "V1": (lambda: SelfAttentionV1(D_IN, D_OUT), D_OUT),
    "V2": (lambda: SelfAttentionV2(D_IN, D_OUT), D_OUT),
    "causal": (lambda: CausalAttention(D_IN, D_OUT, 6, 0.0), D_OUT),
    "wrapper": (lambda: MultiHeadAttentionWrapper(D_IN, D_OUT, HEADS, 6, 0.0), HEADS * D_OUT),
    "multihead": (lambda: MultiHeadAttention(D_IN, D_OUT, HEADS, 6, 0.0), D_OUT),
    "fused-sdpa": (lambda: FusedMultiHeadAttention(D_IN, D_OUT, HEADS, 6, 0.0), D_OUT),
    "fused-explicit": (
        lambda: FusedMultiHeadAttention(D_IN, D_OUT, HEADS, 6, 0.0, use_sdpa=False),
        D_OUT,
    ),
    "bidirectional": (lambda: BidirectionalSelfAttention(D_IN, D_OUT, HEADS, 0.0), D_OUT),
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
    "multihead": lambda p: MultiHeadAttention(D_IN, 6, 3, 8, 0.0, proj_dropout=p),
    "fused-sdpa": lambda p: FusedMultiHeadAttention(D_IN, 6, 3, 8, 0.0, proj_dropout=p),
    "fused-explicit": lambda p: FusedMultiHeadAttention(
        D_IN, 6, 3, 8, 0.0, use_sdpa=False, proj_dropout=p
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
    mha = MultiHeadAttention(D_IN, 6, context_length=8, dropout=0.5, num_heads=3)
    assert mha.proj_dropout.p == 0.0 and mha.dropout.p == 0.5
    assert FusedMultiHeadAttention(D_IN, 6, 3, 8, 0.5).proj_dropout.p == 0.0


def test_from_multihead_carries_proj_dropout_over() -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(D_IN, 6, context_length=8, dropout=0.0, num_heads=3, proj_dropout=0.3)
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


# --- the functional API ------------------------------------------------------------------

NAN, INF = float("nan"), float("inf")

OURS = {
    "sdpa": lambda q, k, v, causal: scaled_dot_product_attention(q, k, v, is_causal=causal),
    "flash": lambda q, k, v, causal: flash_attention(q, k, v, is_causal=causal, block_size=2),
}


# --- empty sequences and batches --------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("b, t_q, t_k", [(2, 3, 0), (2, 0, 5), (2, 0, 0), (0, 3, 5)])
def test_empty_inputs_give_torchs_outputs_and_gradients(b, t_q, t_k, causal) -> None:
    """No keys: zero rows. No queries, or no batch: empty outputs. Gradients: zeros, no crash."""
    q, k, v = qkv((b, t_q, 4), (b, t_k, 4), (b, t_k, 3), requires_grad=True)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    expected_grads = torch.autograd.grad(expected, (q, k, v), torch.ones_like(expected))
    for name, fn in OURS.items():
        out = fn(q, k, v, causal)
        assert out.shape == (b, t_q, 3) and torch.equal(out, expected), name
        grads = torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
        for grad, grad_expected in zip(grads, expected_grads):
            assert torch.equal(grad, grad_expected), name
    weights = attention_weights(q, k, is_causal=causal)
    assert weights.shape == (b, t_q, t_k)


def test_no_keys_gives_zero_rows_also_in_half_precision() -> None:
    q, k, v = (x.bfloat16() for x in qkv((2, 3, 4), (2, 0, 4), (2, 0, 3)))
    for name, fn in OURS.items():
        out = fn(q, k, v, False)
        assert out.dtype == torch.bfloat16 and torch.equal(out, torch.zeros(2, 3, 3)), name


@pytest.mark.parametrize("query_dtype, mask_dtype", mask_dtypes(accepted=True))
def test_masks_torch_accepts_give_torchs_answer(query_dtype, mask_dtype) -> None:
    q, k, v = (x.to(query_dtype) for x in qkv((2, 3, 4), (2, 5, 4), (2, 5, 3)))
    mask = torch.randn(3, 5, generator=torch.Generator().manual_seed(1)).to(mask_dtype)
    if mask_dtype == torch.bool:
        mask[:, 0] = True
    ours = scaled_dot_product_attention(q, k, v, attn_mask=mask)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    tol = 1e-12 if query_dtype == torch.float64 else 1e-2
    torch.testing.assert_close(ours, theirs, rtol=0, atol=tol)


# --- nan and inf ------------------------------------------------------------------------------


def nan_rows(out: torch.Tensor) -> list[bool]:
    return torch.isnan(out[0]).any(dim=-1).tolist()


@pytest.mark.parametrize(
    "tensor, index, value, expected_nan_rows",
    [
        ("q", (0, 1, 0), NAN, [False, True, False, False, False, False]),  # only its own row
        ("q", (0, 1, 0), INF, [False, True, False, False, False, False]),  # inf - inf in row 1
        ("k", (0, 2, 0), NAN, [True] * 6),  # every row sees key 2
        ("v", (0, 2, 1), NAN, [True] * 6),  # column 1 of every row
        ("k", (0, 2, 0), INF, None),  # nan exactly where q_i0 > 0: score +inf, inf - inf
    ],
)
def test_nan_and_inf_propagate_as_in_torch(tensor, index, value, expected_nan_rows) -> None:
    q, k, v = qkv((1, 6, 4), (1, 6, 4), (1, 6, 3))
    {"q": q, "k": k, "v": v}[tensor][index] = value
    expected = F.scaled_dot_product_attention(q, k, v)
    if expected_nan_rows is None:
        expected_nan_rows = (q[0, :, 0] > 0).tolist()
    assert nan_rows(expected) == expected_nan_rows
    for name, fn in OURS.items():
        out = fn(q, k, v, False)
        assert torch.equal(torch.isnan(out), torch.isnan(expected)), name
        torch.testing.assert_close(out, expected, rtol=0, atol=1e-12, equal_nan=True)


def test_inf_in_a_value_gives_inf_where_its_weight_is_positive() -> None:
    q, k, v = qkv((1, 6, 4), (1, 6, 4), (1, 6, 3))
    v[0, 2, 1] = INF
    expected = F.scaled_dot_product_attention(q, k, v)
    assert torch.isinf(expected[0, :, 1]).all() and torch.isfinite(expected[0, :, [0, 2]]).all()
    for name, fn in OURS.items():
        torch.testing.assert_close(fn(q, k, v, False), expected, rtol=0, atol=1e-12, msg=name)


def test_rows_whose_scores_are_all_minus_inf_give_zeros() -> None:
    """Not a mask but the data: every score -inf. torch answers 0; online softmax needs care,
    since exp(s - m) with s = m = -inf is nan (FlashAttention-2 shifts such rows by 0)."""
    q, k, v = qkv((1, 6, 4), (1, 6, 4), (1, 6, 3))
    q[..., 0] = q[..., 0].abs() + 0.1  # > 0
    k[..., 0] = -INF
    k[..., 1:] = 0.0  # so that q_i · k_j = -inf exactly
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    expected = F.scaled_dot_product_attention(q, k, v)
    assert torch.equal(expected, torch.zeros_like(expected))
    expected_grads = torch.autograd.grad(expected, (q, k, v), torch.ones_like(expected))
    for name, fn in OURS.items():
        out = fn(q, k, v, False)
        assert torch.equal(out, expected), name
        # dV = Pᵀ dO = 0 needs P = 0 in the backward too: flash stores L = +inf for these rows
        grads = torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
        for grad, grad_expected in zip(grads, expected_grads):  # dQ: 0 · (-inf) = nan, as torch
            torch.testing.assert_close(grad, grad_expected, rtol=0, atol=0, equal_nan=True)


def test_a_key_hidden_by_causality_does_not_reach_the_rows_that_cannot_see_it() -> None:
    """Ours replace a hidden score by -inf, nan included, so rows 0 and 1 stay finite with a
    nan in key 2; torch's math backend adds -inf to the nan and makes every row nan."""
    q, k, v = qkv((1, 6, 4), (1, 6, 4), (1, 6, 3))
    k[0, 2, 0] = NAN
    for name, fn in OURS.items():
        assert nan_rows(fn(q, k, v, True)) == [False, False, True, True, True, True], name
    mask = torch.ones(6, 6, dtype=torch.bool).tril()
    out = scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert nan_rows(out) == [False, False, True, True, True, True]


def test_plus_inf_in_an_additive_mask_makes_its_row_nan_like_torch() -> None:
    q, k, v = qkv((1, 6, 4), (1, 6, 4), (1, 6, 3))
    mask = torch.zeros(6, 6, dtype=torch.float64)
    mask[3, 1] = INF
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert nan_rows(expected) == [False, False, False, True, False, False]
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, attn_mask=mask), expected, equal_nan=True
    )


@pytest.mark.parametrize("bad", [NAN, INF])
@pytest.mark.parametrize("block_size", [1, 2, 4, 64])
def test_a_bad_value_hidden_by_causality_reaches_every_row_in_both(bad, block_size) -> None:
    """In A V a hidden value meets a weight of exactly 0, and 0 · nan = 0 · inf = nan; flash
    must not lose it by skipping the tiles above the diagonal, whatever the tiling."""
    q, k, v = qkv((1, 6, 4), (1, 6, 4), (1, 6, 3))
    v[0, 4, 1] = bad
    expected = scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.isnan(expected[0, :4, 1]).all()  # rows 0-3 cannot see key 4: weight 0
    out = flash_attention(q, k, v, is_causal=True, block_size=block_size)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12, equal_nan=True)


def _calls_check_scale(node: ast.AST) -> bool:
    """``scale = check_scale(scale)``: checked, and the float it returns used from then on."""
    return (
        isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["scale"]
        and ast.unparse(node.value) == "check_scale(scale)"
    )


# Modules whose functions take their arguments checked: the shared checks themselves, and the
# Triton kernels' host code, which triton_flash_attention calls after checking.
UNCHECKED = {"attention._checks", "attention.triton_forward", "attention.triton_backward"}


def _package_modules() -> list:
    """Every module of the package but the benchmark harness (Triton's where it is installed)."""
    found = []
    for info in pkgutil.walk_packages(attention.__path__, "attention."):
        if info.name.startswith("attention.bench") or info.name in UNCHECKED:
            continue
        try:
            found.append(importlib.import_module(info.name))
        except ModuleNotFoundError as error:
            if error.name != "triton":
                raise
    return found


SCALED = sorted(
    (f"{module.__name__}.{name}", obj)
    for module in _package_modules()
    for name, obj in vars(module).items()
    if inspect.isfunction(obj) and obj.__module__ == module.__name__ and not name.startswith("_")
    and "scale" in inspect.signature(obj).parameters
)


@pytest.mark.parametrize(("name", "kernel"), SCALED, ids=[name for name, _ in SCALED])
def test_every_kernel_with_a_scale_checks_it(name: str, kernel: Callable) -> None:
    assert reaches(kernel, _calls_check_scale), f"{name} takes a scale but never checks it"


@pytest.mark.parametrize("scale", [np.float32(0.5), np.int64(2), torch.tensor(0.5)],
                         ids=["numpy float32", "numpy int64", "0-d tensor"])
@pytest.mark.parametrize("kernel", [scaled_dot_product_attention, flash_attention,
                                    dense_attention, linear_attention])
def test_a_numpy_or_0d_tensor_scale_gives_the_floats_answer(kernel, scale) -> None:
    # torch's SDPA takes both kinds of scalar
    q, k, v = qkv((1, 2, 4, 3), (1, 2, 4, 3), (1, 2, 4, 3))
    torch.testing.assert_close(kernel(q, k, v, scale=scale), kernel(q, k, v, scale=float(scale)),
                               atol=0, rtol=0)


class TestBadInput:
    @pytest.mark.parametrize("scale", ["0.5", torch.tensor([0.5, 1.0]), INF, True, torch.tensor(True),
                                       10**400, np.float64("nan"), torch.tensor(0.5, requires_grad=True)],
                             ids=["text", "1-d tensor", "inf", "bool", "bool tensor", "10**400", "numpy nan",
                                  "requires grad"])  # torch refuses the last: a float drops its gradient
    @pytest.mark.parametrize("kernel", [scaled_dot_product_attention, flash_attention,
                                        dense_attention, linear_attention])
    def test_a_scale_that_is_not_a_finite_number_is_refused(self, kernel, scale) -> None:
        q, k, v = qkv((1, 2, 4, 3), (1, 2, 4, 3), (1, 2, 4, 3))
        words = "does not require grad" if isinstance(scale, Tensor) and scale.requires_grad else "None or a finite"
        with pytest.raises(ValueError, match=rf"scale must be (a number or a tensor that )?{words}"):
            kernel(q, k, v, scale=scale)


SIZE_FORMULAS = {  # a size function, and sizes at which np.int32 arithmetic wraps around
    "kv_cache_bytes": (attention.kv_cache_bytes, (1, 4096, 32, 32, 128, 2), {}),
    "latent_cache_bytes": (attention.latent_cache_bytes, (8, 131072, 61),
                           {"kv_rank": 512, "rope_dim": 64, "bytes_per_value": 2}),
    "swiglu_width": (attention.swiglu_width, (2**29,), {}),
    "linear_attention_flops": (attention.linear_attention_flops, (2**16, 128, 128, "parallel"), {}),
    "delta_rule_flops": (attention.delta.delta_rule_flops, (2**16, 128, 128), {"chunk_size": 64}),
    "dsa_flops": (attention.dsa_flops, (2**16, 2048, 128, 512, 64, 64, 128), {}),
}


@pytest.mark.parametrize("name", list(SIZE_FORMULAS))
def test_numpy_sizes_give_the_python_ints_answer(name: str) -> None:
    """Sizes are checked as integers, NumPy's among them; the arithmetic then ran in np.int32
    and wrapped around (kv_cache_bytes gave -2**31 for Llama 2's 2 GiB)."""
    formula, args, kwargs = SIZE_FORMULAS[name]
    want = formula(*args, **kwargs)
    got = formula(*(np.int32(a) if isinstance(a, int) else a for a in args),
                  **{k: np.int32(v) for k, v in kwargs.items()})
    numbers = got if isinstance(got, tuple) else (got,)  # dsa_flops gives three
    assert got == want and all(type(n) is int for n in numbers), (got, want)

