"""One input check and one convention for every kernel: floating point, one dtype, one device,
one mask rule, keyword-only options, ``is_causal`` a bool, and flash-attn's names explained."""

import inspect

import pytest
import torch
from _inputs import qkv

import attention
from attention import (
    BlockAttention,
    TransformerBlock,
    attention_weights,
    decayed_linear_attention,
    delta_rule,
    dense_attention,
    favor_attention,
    flash_attention,
    gated_delta_rule,
    linear_attention,
    ring_attention,
    scaled_dot_product_attention,
    split_kv_attention,
    weights_from_lse,
)

# Each kernel called on (q, k, v) with the options it needs; (b, h, t, d) inputs of t = 4.
KERNELS = {
    "scaled_dot_product_attention": lambda q, k, v, **kw: scaled_dot_product_attention(
        q, k, v, **kw),
    "attention_weights": lambda q, k, v, **kw: attention_weights(q, k, **kw),
    "flash_attention": lambda q, k, v, **kw: flash_attention(q, k, v, **kw),
    "ring_attention": lambda q, k, v, **kw: ring_attention(q, k, v, world_size=2, **kw),
    "split_kv_attention": lambda q, k, v, **kw: split_kv_attention(q, k, v, num_splits=2, **kw),
    "dense_attention": lambda q, k, v, **kw: dense_attention(q, k, v, **kw),
    "linear_attention": lambda q, k, v, **kw: linear_attention(q, k, v, **kw),
    "favor_attention": lambda q, k, v, **kw: favor_attention(q, k, v, num_features=4, **kw),
    "weights_from_lse": lambda q, k, v, **kw: weights_from_lse(q, k, q[..., 0], **kw),
}

# FAVOR+ seeded (a generator on the query's device), and the recurrences, with a decay g or
# strength beta (b, h, t) of zeros on the query's device
GATED = {
    "favor_attention-seeded": lambda q, k, v: favor_attention(q, k, v, num_features=4, seed=0),
    "decayed_linear_attention": lambda q, k, v: decayed_linear_attention(q, k, v, _gate(q)),
    "delta_rule": lambda q, k, v: delta_rule(q, k, v, _gate(q)),
    "gated_delta_rule": lambda q, k, v: gated_delta_rule(q, k, v, _gate(q), _gate(q)),
}

SHAPE = (1, 2, 4, 8)  # (b, h, t, d) of every kernel's query, key and value


def _gate(q: torch.Tensor) -> torch.Tensor:
    return torch.zeros(q.shape[:-1], device=q.device)  # (b, h, t)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", [*KERNELS, *GATED])
def test_under_autocast_every_kernel_runs_on_its_inputs_cast_down(name, dtype):
    """As torch's SDPA: autocast casts query, key and value to its dtype, and the kernel keeps
    its statistics in float32. Autocast ran the kernels' float32 score products in float16
    again: scores of 80000 gave nan rows (the SDPA, its weights, dense and linear attention)."""
    query = torch.full(SHAPE, 100.0)  # scores q.k of 8e4, past float16's 65504
    key = query.clone()
    key[..., 0, :] = -100.0  # and of -8e4
    # small values: decayed linear attention sums q.k v unnormalized, past 65504 otherwise
    value = 0.01 * torch.randn(SHAPE, generator=torch.Generator().manual_seed(0))
    # (b, h, t): weights_from_lse takes the float32 lse of the scaled scores
    lse = torch.logsumexp(query @ key.transpose(-2, -1) * SHAPE[-1] ** -0.5, dim=-1)
    kernel = {**KERNELS, **GATED, "weights_from_lse": lambda q, k, v: weights_from_lse(q, k, lse)}[name]
    torch.manual_seed(0)  # FAVOR+'s projection, unseeded, from the global generator
    with torch.autocast("cpu", dtype=dtype):
        got = kernel(query, key, value)
    torch.manual_seed(0)
    want = kernel(query.to(dtype), key.to(dtype), value.to(dtype))
    assert got.dtype == dtype and bool(want.isfinite().all()) and torch.equal(got, want)


@pytest.mark.parametrize("name", [*KERNELS, *GATED])
def test_every_kernel_gives_its_shape_on_the_meta_device(name):
    """As torch's SDPA: shapes without values, for tracing and sizing. The linear and delta
    kernels read values in their checks (Tensor.item() cannot be called on meta tensors), and
    FAVOR+ made a generator on the meta device."""
    q = torch.zeros(SHAPE, device="meta")
    out = {**KERNELS, **GATED}[name](q, q, q)
    cpu = {**KERNELS, **GATED}[name](*(torch.zeros(SHAPE) for _ in range(3)))
    assert out.device.type == "meta" and out.shape == cpu.shape


# Every public function of the package that takes query and key first: a kernel.
KEYWORD_ONLY = [
    getattr(attention, name) for name in attention.__all__
    if inspect.isfunction(getattr(attention, name))
    and list(inspect.signature(getattr(attention, name)).parameters)[:2] == ["query", "key"]
]


def test_the_kernels_are_found():
    assert len(KEYWORD_ONLY) >= 11 and attention.flash_attention in KEYWORD_ONLY


@pytest.mark.parametrize("fn", KEYWORD_ONLY, ids=lambda fn: fn.__name__)
def test_every_function_of_query_and_key_takes_autocast_as_sdpa(fn):
    """Each is decorated with _checks.autocast_as_sdpa (the kernels through attention_kernel),
    whose behaviour the autocast test below checks: MoBA's and NSA's selections scored their
    blocks in float16 under autocast, where moba_attention scored them in float32."""
    assert getattr(fn, "autocast_as_sdpa", False), fn.__name__


@pytest.mark.parametrize("fn", KEYWORD_ONLY, ids=lambda fn: fn.__name__)
def test_options_after_the_tensors_are_keyword_only(fn):
    """flash_attention's 4th positional was is_causal, SDPA's attn_mask: a mask passed there
    crashed with 'Boolean value of Tensor ... is ambiguous'. Now both are keywords."""
    params = list(inspect.signature(fn).parameters.values())
    tensors = {"query", "key", "value", "lse", "cu_seqlens_q", "cu_seqlens_k", "index_scores", "gates", "g", "beta"}
    for p in params:
        if p.name not in tensors:
            assert p.kind is inspect.Parameter.KEYWORD_ONLY, f"{fn.__name__}({p.name})"
    causal = [p for p in params if "causal" in p.name]
    assert all(p.name == "is_causal" and p.default is False for p in causal), fn.__name__


@pytest.mark.parametrize("foreign, ours", [
    ("causal", "is_causal"), ("softmax_scale", "scale"), ("causal_alignment", "alignment"),
    ("window_size", r"window=w \(flash-attn's window_size=\(w - 1, 0\)"),
])
@pytest.mark.parametrize("name", ["flash_attention", "scaled_dot_product_attention",
                                  "linear_attention", "ring_attention"])
def test_flash_attn_names_say_which_keyword_to_use(name, foreign, ours):
    q, k, v = qkv(SHAPE, dtype=torch.float32)
    with pytest.raises(TypeError, match=rf"unexpected keyword argument '{foreign}': did you "
                                        rf"mean {ours}"):
        KERNELS[name](q, k, v, **{foreign: True})


def test_modules_say_is_causal_for_causal():
    for make in (lambda: BlockAttention(8, 2, causal=True),
                 lambda: TransformerBlock(8, 2, 16, causal=True)):
        with pytest.raises(TypeError, match="did you mean is_causal"):
            make()


def test_sliding_window_forms_agree():
    """sliding_window_mask, masks.sliding_window and flash_attention(window=) for the same
    arguments, in either alignment."""
    from attention import masks, sink_window_mask, sliding_window_mask

    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 1, 3, 4, generator=g, dtype=torch.float64)
    k, v = (torch.randn(1, 1, 7, 4, generator=g, dtype=torch.float64) for _ in range(2))
    for alignment in ("top_left", "bottom_right"):
        dense = sliding_window_mask(3, 7, 2, alignment=alignment)
        rule = masks.to_dense(masks.sliding_window(2, alignment, 3, 7), 3, 7)
        assert torch.equal(dense, rule), alignment
        assert torch.equal(sink_window_mask(3, 7, 2, alignment=alignment), dense), alignment
        want = scaled_dot_product_attention(q, k, v, attn_mask=dense)
        got = flash_attention(q, k, v, is_causal=True, alignment=alignment, window=2)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_an_empty_row_has_lse_minus_inf_everywhere():
    """FlexAttention's and torch's sentinel; flash_attention returned +inf."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 1, 3, 4, generator=g)
    k = v = torch.randn(1, 1, 2, 4, generator=g)
    _, lse = flash_attention(q, k, v, is_causal=True, alignment="bottom_right", return_lse=True)
    from attention import masks

    rule = masks.causal("bottom_right", 3, 2)
    _, dense_lse = dense_attention(q, k, v, mask_mod=rule, return_lse=True)
    assert lse[0, 0, 0] == dense_lse[0, 0, 0] == float("-inf")


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    @pytest.mark.parametrize("name", KERNELS)
    def test_integer_inputs_are_refused(self, name):
        """torch's SDPA raises on int tensors; the book's returned a truncated int result."""
        q, k, v = qkv(SHAPE, dtype=torch.float32, to=torch.long)
        with pytest.raises(ValueError, match=r"must be floating point, got query torch.int64 on cpu"):
            KERNELS[name](q, k, v)

    @pytest.mark.parametrize("name", KERNELS)
    def test_mixed_dtypes_are_refused_naming_each_tensor(self, name):
        dtypes = (torch.float64, torch.float32, torch.float64)
        q, k, v = (x.to(dt) for x, dt in zip(qkv(SHAPE, dtype=torch.float32), dtypes))
        with pytest.raises(ValueError, match=r"must share one dtype, got query torch.float64 on cpu, "
                                             r"key torch.float32 on cpu"):
            KERNELS[name](q, k, v)

    @pytest.mark.parametrize("name", KERNELS)
    def test_tensors_on_two_devices_are_refused(self, name):
        """A meta query with CPU keys returned a CPU tensor."""
        q, k, v = (x.to(dev) for x, dev in zip(qkv(SHAPE, dtype=torch.float32), ("meta", "cpu", "cpu")))
        with pytest.raises(ValueError, match=r"must be on one device, got query torch.float32 on "
                                             r"meta, key torch.float32 on cpu"):
            KERNELS[name](q, k, v)

    @pytest.mark.parametrize("name", ["scaled_dot_product_attention", "flash_attention",
                                      "ring_attention", "linear_attention"])
    def test_is_causal_must_be_a_bool(self, name):
        q, k, v = qkv(SHAPE, dtype=torch.float32)
        with pytest.raises(ValueError, match=r"is_causal must be a bool, got tensor"):
            KERNELS[name](q, k, v, is_causal=torch.tensor(True))
