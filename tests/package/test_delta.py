"""attention.delta: the forms agree in float64, a chunked prefill continued recurrently equals
one call, gradients agree, and the rules match transformers' Qwen3-Next reference functions
(which compute in float32)."""

import logging

import pytest
import torch
import torch.nn.functional as F
from _inputs import NON_BOOLS, qkv, refuses_non_bool

from attention.delta import (
    decayed_linear_attention,
    delta_attention_matrix,
    delta_rule,
    delta_rule_flops,
    gated_delta_rule,
)

F64 = torch.float64


def _inputs(b=2, h_k=2, h_v=4, t=23, d_k=8, d_v=6, dtype=F64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = qkv((b, h_k, t, d_k), (b, h_k, t, d_k), (b, h_v, t, d_v), dtype=dtype, generator=gen)
    k = F.normalize(k, dim=-1)
    g = -torch.rand(b, h_v, t, generator=gen, dtype=dtype)
    beta = torch.rand(b, h_v, t, generator=gen, dtype=dtype)
    s0 = torch.randn(b, h_v, d_k, d_v, generator=gen, dtype=dtype)
    return q, k, v, g, beta, s0


@pytest.mark.parametrize("form,chunk", [("parallel", 64), ("chunked", 1), ("chunked", 5),
                                        ("chunked", 64)])
def test_decay_forms_equal_the_recurrence_in_float64(form, chunk):
    q, k, v, g, _, s0 = _inputs()
    ref, ref_s = decayed_linear_attention(q, k, v, g, initial_state=s0, output_final_state=True)
    out, s = decayed_linear_attention(
        q, k, v, g, form=form, chunk_size=chunk, initial_state=s0, output_final_state=True
    )
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(s, ref_s, rtol=0, atol=1e-12)


def test_decay_mask_is_the_product_of_decays_between_s_and_t():
    """(Lambda o QK^T) V with Lambda_ts = prod_{r=s+1..t} exp(g_r), written out entry by entry."""
    q, k, v, g, _, _ = _inputs(b=1, h_k=1, h_v=1, t=6)
    a = g[0, 0].exp()
    scores = (q[0, 0] @ k[0, 0].T) * 8**-0.5
    mask = torch.zeros(6, 6, dtype=F64)
    for t in range(6):
        for s in range(t + 1):
            mask[t, s] = a[s + 1 : t + 1].prod()
    expected = (scores * mask) @ v[0, 0]
    torch.testing.assert_close(decayed_linear_attention(q, k, v, g)[0, 0], expected,
                               rtol=0, atol=1e-12)


def _decays_small_after_large(dtype):
    """g: 512 resets (-inf, floored to about -111 in float32) then 512 small decays, the
    running sum gbar near -57000, whose float32 spacing (0.004) exceeds each later g."""
    q, k, v, _, beta, _ = _inputs(b=1, h_k=1, h_v=1, t=1024, dtype=dtype)
    g = torch.full((1, 1, 1024), -0.002, dtype=dtype)
    g[..., :512] = float("-inf")
    return q, k, v, g, beta


@pytest.mark.parametrize("fn,form,chunk", [
    ("decay", "parallel", 64), ("decay", "chunked", 64), ("gated", "chunked", 64),
    ("decay", "matrix", 0), ("gated", "matrix", 0),
])
def test_small_decays_after_large_ones_keep_float32s_accuracy(fn, form, chunk):
    """Lambda_ij sums g over its own segment (Mamba-2's stable segsum): gbar_i - gbar_j, the
    difference of two running sums of about -57000, lost the small g after the resets and the
    parallel form and the matrix erred by 2e-3 of the output, where the recurrence (float32
    too) errs by 1e-6."""
    inputs64 = _decays_small_after_large(F64)
    inputs = [x.float() for x in inputs64]
    if fn == "decay":
        exact = decayed_linear_attention(*inputs64[:4])
        plain = decayed_linear_attention(*inputs[:4])  # the recurrence, in float32
        out = (delta_attention_matrix(*inputs[:2], inputs[3]) @ inputs[2] if form == "matrix"
               else decayed_linear_attention(*inputs[:4], form=form, chunk_size=chunk))
    else:
        exact = gated_delta_rule(*inputs64)
        plain = gated_delta_rule(*inputs)
        out = (delta_attention_matrix(*inputs[:2], inputs[3], inputs[4]) @ inputs[2]
               if form == "matrix" else gated_delta_rule(*inputs, form=form, chunk_size=chunk))
    error = (out.double() - exact).abs().max() / exact.abs().max()
    bound = max(4 * (plain.double() - exact).abs().max() / exact.abs().max(), 1e-6)
    assert error <= bound, f"{fn} {form}: relative error {error:.3g}, bound {bound:.3g}"


@pytest.mark.parametrize("chunk", [1, 4, 7, 64])
def test_gated_delta_chunked_equals_recurrent_in_float64(chunk):
    q, k, v, g, beta, s0 = _inputs()
    ref, ref_s = gated_delta_rule(q, k, v, g, beta, initial_state=s0, output_final_state=True)
    out, s = gated_delta_rule(q, k, v, g, beta, form="chunked", chunk_size=chunk,
                              initial_state=s0, output_final_state=True)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(s, ref_s, rtol=0, atol=1e-12)


def test_delta_rule_is_the_gated_rule_without_decay_and_writes_over():
    """With beta = 1 and unit keys, storing v under k then v' under k recalls v', not v + v'."""
    q, k, v, _, beta, _ = _inputs(b=1, h_k=1, h_v=1, t=2)
    k = k[:, :, :1].expand(1, 1, 2, 8)  # the same key twice
    one = torch.ones(1, 1, 2, dtype=F64)
    _, state = delta_rule(q, k, v, one, output_final_state=True)
    torch.testing.assert_close(state[0, 0].T @ k[0, 0, 0], v[0, 0, 1], rtol=0, atol=1e-12)
    torch.testing.assert_close(
        delta_rule(q, k, v, beta, form="chunked", chunk_size=2),
        gated_delta_rule(q, k, v, torch.zeros_like(beta), beta), rtol=0, atol=1e-12,
    )


@pytest.mark.parametrize("fn", ["decay", "delta"])
def test_chunked_prefill_then_recurrent_decode_equals_one_call(fn):
    q, k, v, g, beta, _ = _inputs(t=19)

    def run(sl, form, state):
        args = (q[:, :, sl], k[:, :, sl], v[:, :, sl], g[..., sl])
        kwargs = dict(form=form, chunk_size=4, initial_state=state, output_final_state=True)
        if fn == "decay":
            return decayed_linear_attention(*args, **kwargs)
        return gated_delta_rule(*args, beta[..., sl], **kwargs)

    whole, whole_s = run(slice(None), "recurrent", None)
    first, state = run(slice(0, 13), "chunked", None)
    rest = []
    for i in range(13, 19):
        o, state = run(slice(i, i + 1), "recurrent", state)
        rest.append(o)
    torch.testing.assert_close(torch.cat([first, *rest], dim=2), whole, rtol=0, atol=1e-12)
    torch.testing.assert_close(state, whole_s, rtol=0, atol=1e-12)


def test_chunked_gradients_match_the_recurrence():
    inputs = [x.requires_grad_() for x in _inputs(b=1, h_k=1, h_v=2, t=9, d_k=4, d_v=3)]
    q, k, v, g, beta, s0 = inputs
    weights = torch.randn(1, 2, 9, 3, dtype=F64, generator=torch.Generator().manual_seed(1))
    grads = []
    for form in ("recurrent", "chunked"):
        out = gated_delta_rule(q, k, v, g, beta, form=form, chunk_size=4, initial_state=s0)
        grads.append(torch.autograd.grad((out * weights).sum(), inputs))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    assert torch.autograd.gradcheck(
        lambda *x: gated_delta_rule(*x[:5], form="chunked", chunk_size=4, initial_state=x[5]),
        inputs,
    )


@pytest.mark.parametrize("kind", ["sum", "decay", "delta", "gated_delta"])
def test_attention_matrix_times_values_is_the_rule(kind):
    """Z = W V (the book's equation (13.11)) for every rule, from a zero state."""
    q, k, v, g, beta, _ = _inputs(h_k=2, h_v=2)
    g_or_none = g if kind in ("decay", "gated_delta") else None
    beta_or_none = beta if kind in ("delta", "gated_delta") else None
    if beta_or_none is None:
        rule = decayed_linear_attention(q, k, v, torch.zeros_like(g) if g_or_none is None else g)
    else:
        rule = gated_delta_rule(q, k, v, torch.zeros_like(g) if g_or_none is None else g, beta)
    weights = delta_attention_matrix(q, k, g_or_none, beta_or_none)  # (b, h, t, t)
    assert weights.triu(1).abs().max() == 0  # causal
    torch.testing.assert_close(weights @ v, rule, rtol=0, atol=1e-12)


def _forgetting_g():
    """The inputs of :func:`_inputs` (t = 23) with g = -inf, "forget everything" (a_i = 0), at
    tokens 0, 6 and 7 (two in a row), 11 and 22: at a chunk's start, inside and at its end."""
    q, k, v, g, beta, s0 = _inputs()
    g[..., [0, 6, 7, 11, 22]] = -torch.inf
    g[0, 1, 15] = -torch.inf  # one head alone
    return q, k, v, g, beta, s0


def test_minus_inf_log_decay_forgets_everything_before_it():
    """The recurrence with g_i = -inf: S_i = k_i^T v_i, so from token i on the output is that of
    a call on tokens i, ... alone."""
    q, k, v, g, beta, s0 = _forgetting_g()
    for out, rest in (
        (decayed_linear_attention(q, k, v, g, initial_state=s0),
         decayed_linear_attention(q[:, :, 11:], k[:, :, 11:], v[:, :, 11:], g[..., 11:])),
        (gated_delta_rule(q, k, v, g, beta, initial_state=s0),
         gated_delta_rule(q[:, :, 11:], k[:, :, 11:], v[:, :, 11:], g[..., 11:], beta[..., 11:])),
    ):
        assert out.isfinite().all()
        torch.testing.assert_close(out[:, :, 11:], rest, rtol=0, atol=1e-12)


@pytest.mark.parametrize("fn,form,chunk", [("decay", "parallel", 64), ("decay", "chunked", 1),
                                           ("decay", "chunked", 4), ("decay", "chunked", 64),
                                           ("delta", "chunked", 1), ("delta", "chunked", 4),
                                           ("delta", "chunked", 64)])
def test_every_form_equals_the_recurrence_where_g_is_minus_inf(fn, form, chunk):
    """g = -inf is a decay (a_i = 0) that the recurrence takes; the other forms, whose running
    sums gbar_i - gbar_j would be -inf - (-inf) = NaN, give the recurrence's result too."""
    q, k, v, g, beta, s0 = _forgetting_g()
    if fn == "decay":
        run = lambda **kw: decayed_linear_attention(q, k, v, g, initial_state=s0,  # noqa: E731
                                                    output_final_state=True, **kw)
    else:
        run = lambda **kw: gated_delta_rule(q, k, v, g, beta, initial_state=s0,  # noqa: E731
                                            output_final_state=True, **kw)
    ref, ref_s = run()
    out, s = run(form=form, chunk_size=chunk)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(s, ref_s, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", ["decay", "gated_delta"])
def test_attention_matrix_times_values_is_the_rule_where_g_is_minus_inf(kind):
    q, k, v, g, beta, _ = _forgetting_g()
    q, k = (x.repeat_interleave(2, dim=1) for x in (q, k))  # one head per value head
    if kind == "decay":
        rule, weights = decayed_linear_attention(q, k, v, g), delta_attention_matrix(q, k, g)
    else:
        rule, weights = gated_delta_rule(q, k, v, g, beta), delta_attention_matrix(q, k, g, beta)
    torch.testing.assert_close(weights @ v, rule, rtol=0, atol=1e-12)


def plain_gated_delta_rule(q, k, v, g, beta):
    """The gated delta rule token by token, every step in the inputs' dtype: the "same math done
    plainly in the input dtype" of flash-attention's accuracy rule (its tests/test_flash_attn.py)."""
    q, k = (x.repeat_interleave(v.shape[1] // k.shape[1], dim=1) for x in (q * q.shape[-1] ** -0.5, k))
    state = v.new_zeros(*v.shape[:2], k.shape[-1], v.shape[-1])  # (b, h_v, d_k, d_v)
    rows = []
    for i in range(v.shape[2]):
        state = g[..., i, None, None].exp() * state
        error = v[..., i, :] - (k[..., i, None, :] @ state).squeeze(-2)  # (b, h_v, d_v)
        state = state + k[..., i, :, None] * (beta[..., i, None] * error)[..., None, :]
        rows.append((q[..., i, None, :] @ state).squeeze(-2))  # (b, h_v, d_v)
    return torch.stack(rows, dim=-2)  # (b, h_v, t, d_v)


@pytest.mark.parametrize("form", ["recurrent", "chunked"])
def test_half_precision_meets_flash_attentions_rule(form):
    """bfloat16 in: the output comes back in bfloat16 and the final state in float32, and the
    output's error against float64 (from the same rounded inputs) is at most twice the error of
    the plain bfloat16 computation, flash-attention's rule for its outputs."""
    inputs = [x.bfloat16() for x in _inputs(t=40)[:5]]
    exact = gated_delta_rule(*(x.double() for x in inputs))
    torch.testing.assert_close(plain_gated_delta_rule(*(x.double() for x in inputs)), exact,
                               rtol=0, atol=1e-12)  # the plain computation computes the rule
    out, state = gated_delta_rule(*inputs, form=form, chunk_size=8, output_final_state=True)
    assert out.dtype == torch.bfloat16 and state.dtype == torch.float32
    error = (out.double() - exact).abs().max()
    plain = (plain_gated_delta_rule(*inputs).double() - exact).abs().max()
    assert error <= 2 * plain, f"{form}: error {error:.3g}, plain bfloat16 {plain:.3g}"


@pytest.mark.parametrize("form", ["recurrent", "chunked"])
def test_a_given_scale_replaces_the_default_not_multiplies_it(form):
    """scale=s multiplies the queries by s alone, not by s d_k^(-1/2): against the plain loops,
    run on queries that the loops' own d_k^(-1/2) turns into s q."""
    q, k, v, g, beta, _ = _inputs(t=9)
    s, root = 0.3, q.shape[-1] ** 0.5
    want = plain_gated_delta_rule(q * s * root, k, v, g, beta)
    got = gated_delta_rule(q, k, v, g, beta, form=form, chunk_size=4, scale=s)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    want = plain_gated_delta_rule(q * s * root, k, v, torch.zeros_like(g), beta)
    got = delta_rule(q, k, v, beta, form=form, chunk_size=4, scale=s)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    qs, ks = (x.repeat_interleave(2, dim=1) for x in (q * s, k))  # h_k = 2 -> h_v = 4
    state, rows = torch.zeros(2, 4, 8, 6, dtype=F64), []
    for i in range(9):  # S_i = a_i S_{i-1} + k_i^T v_i, read as (s q_i) S_i
        state = g[..., i, None, None].exp() * state + ks[..., i, :, None] * v[..., i, None, :]
        rows.append((qs[..., i, None, :] @ state).squeeze(-2))
    for decay_form in ("recurrent", "parallel", "chunked"):
        got = decayed_linear_attention(q, k, v, g, form=decay_form, chunk_size=4, scale=s)
        torch.testing.assert_close(got, torch.stack(rows, dim=-2), rtol=1e-12, atol=1e-12)


@pytest.fixture(scope="module")
def qwen3_next():
    logging.getLogger("transformers").setLevel(logging.ERROR)  # "fla is not installed" notices
    return pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")


@pytest.mark.parametrize("h_k,h_v,t,chunk", [(2, 2, 16, 8), (2, 4, 37, 16), (1, 3, 5, 64)])
def test_gated_delta_rule_matches_transformers_reference(qwen3_next, h_k, h_v, t, chunk):
    """transformers' torch_{chunk,recurrent}_gated_delta_rule take (b, t, h, d) and compute in
    float32; ours, in float32, agrees with both to float32's rounding."""
    q, k, v, g, beta, s0 = (x.float() for x in _inputs(h_k=h_k, h_v=h_v, t=t))
    bt = lambda x: x.transpose(1, 2)  # noqa: E731  (b, h, t, ...) <-> (b, t, h, ...)
    ours, ours_s = gated_delta_rule(q, k, v, g, beta, form="chunked", chunk_size=chunk,
                                    initial_state=s0, output_final_state=True)
    for ref_fn, extra in ((qwen3_next.torch_chunk_gated_delta_rule, {"chunk_size": chunk}),
                          (qwen3_next.torch_recurrent_gated_delta_rule, {})):
        ref, ref_s = ref_fn(bt(q), bt(k), bt(v), bt(g), bt(beta), initial_state=s0,
                            output_final_state=True, **extra)
        torch.testing.assert_close(bt(ref), ours, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(ref_s, ours_s, rtol=1e-5, atol=1e-5)


class TestBadInput:
    def test_delta_rule_names_beta_in_its_errors(self):  # it has no g of its own
        q, k, v, _, beta, _ = _inputs()
        with pytest.raises(ValueError, match=r"beta must be floating point, got torch.int64"):
            delta_rule(q, k, v, beta.long())
        with pytest.raises(ValueError, match=r"beta must have shape \(b, h_v, t\)"):
            delta_rule(q, k, v, beta[..., :1])
        with pytest.raises(ValueError, match=r"beta must be a tensor \(b, h_v, t\), got list"):
            delta_rule(q, k, v, beta.tolist())
        with pytest.raises(ValueError, match=r"beta must be on the query's device cpu, got meta"):
            delta_rule(q, k, v, beta.to("meta"))

    def test_a_missing_g_or_beta_is_refused_by_name(self):  # None means "not used" only inside
        q, k, v, g, beta, _ = _inputs()
        for call, name in ((lambda: delta_rule(q, k, v, None), "beta"),
                           (lambda: gated_delta_rule(q, k, v, None, beta), "g"),
                           (lambda: gated_delta_rule(q, k, v, g, None), "beta"),
                           (lambda: decayed_linear_attention(q, k, v, None), "g")):
            with pytest.raises(ValueError, match=rf"{name} must be a tensor \(b, h_v, t\), got NoneType"):
                call()

    def test_a_query_key_or_value_that_is_not_a_tensor_is_refused_by_name(self):
        # x.dim() ran first: "'list' object has no attribute 'dim'"
        q, k, v, g, beta, _ = _inputs()
        with pytest.raises(ValueError, match=r"value must be 4-d \(b, h, t, d\), got list"):
            gated_delta_rule(q, k, v.tolist(), g, beta)
        with pytest.raises(ValueError, match=r"query must be 4-d \(b, h, t, d\), got list"):
            decayed_linear_attention(q.tolist(), k, v, g)
        with pytest.raises(ValueError, match=r"query and key must be 4-d \(b, h, t, d_k\) of one "
                                             r"shape, got list and \(2, 2, 23, 8\)"):
            delta_attention_matrix(q.tolist(), k)

    def test_positive_log_decay_is_refused(self):
        q, k, v, g, beta, _ = _inputs()
        with pytest.raises(ValueError, match=r"g is a log decay and must be.*got a maximum of 0\.5"):
            gated_delta_rule(q, k, v, g + 0.5 - g.max(), beta)
        with pytest.raises(ValueError, match=r"must be <= 0.*got a maximum of 0\.9886"):
            decayed_linear_attention(q, k, v, -g)

    def test_beta_outside_unit_interval_is_refused(self):
        q, k, v, g, beta, _ = _inputs()
        with pytest.raises(ValueError, match=r"beta must lie in \[0.*got values from 1\.5 to 1\.5"):
            gated_delta_rule(q, k, v, g, beta * 0 + 1.5)

    def test_heads_and_shapes_of_every_input_must_agree(self):
        q, k, v, g, beta, s0 = _inputs()
        with pytest.raises(ValueError, match=r"value heads h_v must be a multiple of h_k=2, got h_v=3"):
            gated_delta_rule(q, k, v[:, :3], g[:, :3], beta[:, :3])
        with pytest.raises(ValueError, match=r"value heads h_v must be a multiple of h_k=0, got h_v=4"):
            gated_delta_rule(q[:, :0], k[:, :0], v, g, beta)  # h_v % h_k: a ZeroDivisionError
        with pytest.raises(ValueError, match=r"beta must have shape \(b, h_v, t\) = \(2, 4, 23\).*got \(2, 4, 22\)"):
            gated_delta_rule(q, k, v, g, beta[..., :-1])
        with pytest.raises(ValueError, match=r"initial_state must have shape.*got \(2, 4, 8, 5\)"):
            gated_delta_rule(q, k, v, g, beta, initial_state=s0[..., :-1])
        with pytest.raises(
            ValueError, match=r"query and key must have one shape.*got \(2, 2, 23, 8\) and \(2, 2, 23, 7\)"
        ):
            delta_rule(q, k[..., :-1], v, beta)

    def test_form_must_be_known_and_chunk_size_at_least_one(self):
        q, k, v, g, beta, _ = _inputs()
        with pytest.raises(ValueError, match=r"form must be one of \('recurrent', 'chunked'\), got 'parallel'"):
            gated_delta_rule(q, k, v, g, beta, form="parallel")
        with pytest.raises(ValueError, match="chunk_size must be at least 1, got 0"):
            decayed_linear_attention(q, k, v, g, form="chunked", chunk_size=0)

    def test_nan_log_decay_or_write_strength_is_refused(self):
        """NaN passes the range checks (NaN > 0 and NaN < 0 are both False): refused by name."""
        q, k, v, g, beta, _ = _inputs()
        g_nan, beta_nan = g.clone(), beta.clone()
        g_nan[1, 2, 3] = beta_nan[0, 1, 5] = torch.nan
        with pytest.raises(ValueError, match=r"g must not be NaN, got NaN in 1 of its 184 values"):
            decayed_linear_attention(q, k, v, g_nan, form="parallel")
        with pytest.raises(ValueError, match=r"g must not be NaN, got NaN in 1 of its 184 values"):
            gated_delta_rule(q, k, v, g_nan, beta, form="chunked")
        with pytest.raises(ValueError, match=r"beta must not be NaN, got NaN in 1 of its 184 values"):
            gated_delta_rule(q, k, v, g, beta_nan)
        with pytest.raises(ValueError, match=r"beta must not be NaN, got NaN in 1 of its 184 values"):
            delta_rule(q, k, v, beta_nan, form="chunked")
        with pytest.raises(ValueError, match=r"g must not be NaN, got NaN in 1 of its 92 values"):
            delta_attention_matrix(q, k, g_nan[:, 2:], beta[:, 2:])  # h = h_k = 2 heads

    def test_initial_state_must_be_floating_on_the_values_device(self):
        """An integer state was cast silently, one on another device failed in a matmul."""
        q, k, v, g, beta, s0 = _inputs()
        with pytest.raises(
            ValueError, match=r"initial_state must be floating point on value's device cpu, "
            r"got torch.int64 on cpu"
        ):
            gated_delta_rule(q, k, v, g, beta, initial_state=s0.long())
        with pytest.raises(
            ValueError, match=r"initial_state must be floating point on value's device cpu, "
            r"got torch.float64 on meta"
        ):
            decayed_linear_attention(q, k, v, g, initial_state=s0.to("meta"))
        with pytest.raises(ValueError, match=r"initial_state must be a torch.Tensor or None, got list"):
            delta_rule(q, k, v, beta, initial_state=s0.tolist())

    def test_negative_write_strength_is_refused(self):
        q, k, v, g, beta, _ = _inputs()
        with pytest.raises(ValueError, match=r"beta must lie in \[0, 1\], got values from -0\.5 to"):
            gated_delta_rule(q, k, v, g, beta - 0.5 - beta.min())

    def test_value_of_another_batch_is_refused_not_broadcast(self):
        q, k, v, g, beta, _ = _inputs()
        with pytest.raises(ValueError, match=r"value must be \(b=2, h_v, t=23, d_v\), got shape \(1, 4, 23, 6\)"):
            gated_delta_rule(q, k, v[:1], g, beta)

    def test_integer_log_decay_is_refused(self):
        q, k, v, g, _, _ = _inputs()
        with pytest.raises(ValueError, match=r"g must be floating point, got torch\.int64"):
            decayed_linear_attention(q, k, v, g.long())

    @pytest.mark.parametrize("value", NON_BOOLS)
    @pytest.mark.parametrize(
        ("flag", "call"),
        [
            ("output_final_state", lambda value: decayed_linear_attention(
                *_inputs()[:4], output_final_state=value)),
            ("output_final_state", lambda value: gated_delta_rule(*_inputs()[:5], output_final_state=value)),
            ("output_final_state", lambda value: delta_rule(
                *_inputs()[:3], _inputs()[4], output_final_state=value)),
            ("delta", lambda value: delta_rule_flops(16, 4, 4, delta=value)),
        ],
        ids=["decayed_linear_attention", "gated_delta_rule", "delta_rule", "delta_rule_flops"],
    )
    def test_flags_must_be_bools(self, flag: str, call, value: object) -> None:
        with refuses_non_bool(flag, value):
            call(value)


@pytest.mark.parametrize("delta", [False, True])
def test_flops_count_what_the_chunked_forms_multiply(delta):
    """delta_rule_flops equals PyTorch's own count of the products, plus C^2 d_v per triangular
    solve (which FlopCounterMode does not count) for the delta rule."""
    from torch.utils.flop_counter import FlopCounterMode

    from attention.delta import delta_rule_flops

    q, k, v, g, beta, _ = _inputs(b=1, h_k=1, h_v=1, t=70, d_k=8, d_v=6)
    with FlopCounterMode(display=False) as counter:
        if delta:
            gated_delta_rule(q, k, v, g, beta, form="chunked", chunk_size=16)
        else:
            decayed_linear_attention(q, k, v, g, form="chunked", chunk_size=16)
    solves = sum(c * c * 6 for c in (16, 16, 16, 16, 6)) if delta else 0
    assert delta_rule_flops(70, 8, 6, chunk_size=16, delta=delta) == counter.get_total_flops() + solves


@pytest.mark.parametrize("form", ["recurrent", "chunked"])
def test_delta_rule_passes_its_scale_on(form):
    """delta_rule's own scale reaches the queries: Z = W V with W the weights of that scale."""
    q, k, v, _, beta, _ = _inputs(h_k=2, h_v=2)
    want = delta_attention_matrix(q, k, None, beta, scale=0.3) @ v
    got = delta_rule(q, k, v, beta, form=form, chunk_size=5, scale=0.3)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("form", ["recurrent", "parallel", "chunked"])
def test_no_tokens_give_an_empty_output_and_keep_the_state(form):
    """t = 0: every function returns (b, h_v, 0, d_v) and S_t = S_0, a copy as for t > 0 (the
    parallel form raised range()'s "arg 3 must not be zero": its one chunk was t tokens long;
    the others returned S_0 itself, and writing into S_t changed the caller's S_0)."""
    q, k, v, g, beta, s0 = _inputs()
    q, k, v, g, beta = q[:, :, :0], k[:, :, :0], v[:, :, :0], g[..., :0], beta[..., :0]
    decay = decayed_linear_attention(q, k, v, g, form=form, initial_state=s0, output_final_state=True)
    runs = [decay]
    if form != "parallel":
        runs.append(gated_delta_rule(q, k, v, g, beta, form=form, initial_state=s0,
                                     output_final_state=True))
        runs.append(delta_rule(q, k, v, beta, form=form, initial_state=s0, output_final_state=True))
    for out, state in runs:
        assert out.shape == (2, 4, 0, 6)
        torch.testing.assert_close(state, s0, rtol=0, atol=0)
        assert state.untyped_storage().data_ptr() != s0.untyped_storage().data_ptr()


@pytest.mark.parametrize("form", ["recurrent", "parallel", "chunked"])
def test_no_heads_give_an_empty_output(form):
    """h_k = h_v = 0: (b, 0, t, d_v), as torch's SDPA gives for no heads (h_v % h_k raised a
    ZeroDivisionError)."""
    q, k, v, g, beta, _ = _inputs()
    q, k, v, g, beta = q[:, :0], k[:, :0], v[:, :0], g[:, :0], beta[:, :0]
    outs = [decayed_linear_attention(q, k, v, g, form=form)]
    if form != "parallel":
        outs += [gated_delta_rule(q, k, v, g, beta, form=form), delta_rule(q, k, v, beta, form=form)]
    for out in outs:
        assert out.shape == (2, 0, 23, 6)
    assert delta_attention_matrix(q, k, g, beta).shape == (2, 0, 23, 23)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_the_final_state_is_in_the_accumulation_dtype_whatever_the_initial_one(dtype):
    """A float64 S_0 with float32 or bfloat16 inputs: the state comes back float32 (the
    accumulation dtype), the output in the value's dtype."""
    q, k, v, g, beta, s0 = _inputs(t=7)
    q, k, v = (x.to(dtype) for x in (q, k, v))
    for form in ("recurrent", "chunked"):
        for out, state in (
            gated_delta_rule(q, k, v, g, beta, form=form, chunk_size=3, initial_state=s0,
                             output_final_state=True),
            decayed_linear_attention(q, k, v, g, form=form, chunk_size=3, initial_state=s0,
                                     output_final_state=True),
        ):
            assert (out.dtype, state.dtype) == (dtype, torch.float32), form
