"""Linear attention (attention.linear): the three forms equal in float64, each against a written-out
reference; FLOPs as PyTorch counts them; bad input."""


import pytest
import torch
import torch.nn.functional as F
from _inputs import NON_BOOLS, qkv, refuses_non_bool
from torch.utils.flop_counter import FlopCounterMode

from attention.favor import favor_attention
from attention.linear import (
    FORMS,
    elu_plus_one,
    linear_attention,
    linear_attention_flops,
    linear_attention_weights,
)

F64 = torch.float64


def written_out(query, key, value, causal: bool) -> torch.Tensor:
    """z_i = sum_j phi(q_i).phi(k_j) v_j / sum_j phi(q_i).phi(k_j), one query and key at a time."""
    out = torch.zeros(*query.shape[:-1], value.shape[-1], dtype=F64)
    for i in range(query.shape[-2]):
        visible = range(i + 1) if causal else range(key.shape[-2])
        weights = [(elu_plus_one(query[..., i, :]) * elu_plus_one(key[..., j, :])).sum(-1) for j in visible]
        total = sum(weights)
        out[..., i, :] = sum(w[..., None] * value[..., j, :] for w, j in zip(weights, visible)) / total[..., None]
    return out


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shape, chunk_size", [((2, 2, 9, 4), 4), ((7, 3), 64), ((1, 2, 5, 6), 1)])
def test_the_three_forms_are_the_written_out_sum(shape, chunk_size, causal):
    query, key, value = qkv(shape)
    want = written_out(query, key, value, causal)
    for form in FORMS:
        got = linear_attention(query, key, value, is_causal=causal, form=form, chunk_size=chunk_size)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12, msg=form)
    weights = linear_attention_weights(query, key, is_causal=causal)
    torch.testing.assert_close(weights.sum(-1), torch.ones(shape[:-1], dtype=F64))
    torch.testing.assert_close(weights @ value, want, rtol=1e-12, atol=1e-12)


def test_values_of_another_width_and_a_feature_map_of_another_width():
    query, key, _ = qkv((2, 10, 4))
    value = torch.randn(2, 10, 7, dtype=F64)
    squares = lambda x: torch.cat([x, x * x], dim=-1).exp()  # noqa: E731  r = 2 d_k, positive
    outs = [linear_attention(query, key, value, feature_map=squares, is_causal=True, form=f,
                             chunk_size=3) for f in FORMS]
    assert outs[0].shape == (2, 10, 7)
    for out in outs[1:]:
        torch.testing.assert_close(out, outs[0], rtol=1e-12, atol=1e-12)


def test_gradients_of_the_three_forms_agree():
    grads = []
    for form in FORMS:
        tensors = [x.requires_grad_() for x in qkv((2, 11, 4), seed=3)]
        linear_attention(*tensors, is_causal=True, form=form, chunk_size=4).pow(2).sum().backward()
        grads.append([x.grad for x in tensors])
    for other in grads[1:]:
        for got, want in zip(other, grads[0]):
            torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_is_accumulated_in_float32(dtype):
    query, key, value = (x.to(dtype) for x in qkv((2, 64, 16)))
    want = linear_attention(*(x.double() for x in (query, key, value)), is_causal=True)
    got = linear_attention(query, key, value, is_causal=True, form="chunked", chunk_size=16)
    assert got.dtype == dtype
    phi_q, phi_k = elu_plus_one(query), elu_plus_one(key)  # all in half precision, plainly
    kernel = (phi_q @ phi_k.transpose(-2, -1)).tril()
    plain = (kernel @ value) / kernel.sum(-1, keepdim=True)
    assert (got.double() - want).abs().max() <= 2 * (plain.double() - want).abs().max()


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("form", FORMS)
def test_flops_are_what_pytorch_counts(form, causal):
    t, r, d_v, chunk = 21, 4, 3, 8
    query, key, value = qkv((1, 1, t, r))
    value = value[..., :d_v]
    with FlopCounterMode(display=False) as counter:
        linear_attention(query, key, value, is_causal=causal, form=form, chunk_size=chunk)
    assert counter.get_total_flops() == linear_attention_flops(
        t, r, d_v, form, is_causal=causal, chunk_size=chunk
    )


@pytest.mark.parametrize("form", FORMS)
def test_no_keys_give_zero_rows_as_in_sdpa(form: str) -> None:
    """With t_k = 0 every normalizer is 0: such a row is 0, as torch's SDPA gives it."""
    query, key, value = qkv((2, 3, 4), (2, 0, 4), (2, 0, 5))
    want = F.scaled_dot_product_attention(query, key, value)  # (2, 3, 5) of zeros
    torch.testing.assert_close(linear_attention(query, key, value, form=form), want, atol=0, rtol=0)


@pytest.mark.parametrize("form", FORMS)
def test_no_tokens_give_an_empty_output_in_every_form(form: str) -> None:
    # causal self-attention of t = 0 tokens: torch's SDPA gives (b, 0, d_v)
    query, key, value = qkv((2, 0, 4), (2, 0, 4), (2, 0, 5))
    want = F.scaled_dot_product_attention(query, key, value, is_causal=True)
    assert linear_attention(query, key, value, is_causal=True, form=form).shape == want.shape
    out = favor_attention(query, key, value, num_features=8, seed=0, is_causal=True, form=form)
    assert out.shape == want.shape


@pytest.mark.parametrize("form", FORMS)
def test_no_tokens_return_a_copy_of_the_initial_state(form: str) -> None:
    """t = 0 adds nothing to [S, u], and the state returned is a new tensor, as for t > 0: the
    recurrent and chunked forms returned initial_state itself (writing into it changed it)."""
    query, key, value = qkv((2, 0, 4), (2, 0, 4), (2, 0, 5))
    initial = torch.rand(2, 4, 6, dtype=torch.float64)  # (b, r, d_v + 1): elu+1 keeps r = d_k
    _, state = linear_attention(query, key, value, is_causal=True, form=form,
                                initial_state=initial, output_final_state=True)
    torch.testing.assert_close(state, initial, rtol=0, atol=0)
    assert state.untyped_storage().data_ptr() != initial.untyped_storage().data_ptr()


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("form", FORMS)
def test_a_query_whose_normalizer_is_zero_gives_a_zero_row(form: str, causal: bool) -> None:
    """relu features of a query <= 0 are all 0: it weighs no key, and its row is 0 (softmax
    attention's row that sees no key); the other rows do not change."""
    query, key, value = qkv((2, 6, 4))
    query, key = query.abs(), key.abs()
    hidden = query.clone()
    hidden[:, 2] = -hidden[:, 2]  # phi(q_2) = 0
    got = linear_attention(hidden, key, value, feature_map=torch.relu, is_causal=causal, form=form,
                           chunk_size=4)
    want = linear_attention(query, key, value, feature_map=torch.relu, is_causal=causal)
    want[:, 2] = 0
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    weights = linear_attention_weights(hidden, key, feature_map=torch.relu, is_causal=causal)
    torch.testing.assert_close(weights @ value, want, rtol=1e-12, atol=1e-12)


# FAVOR+ --------------------------------------------------------------------------------------


@pytest.mark.parametrize("is_causal", [False, True])
def test_every_form_carries_the_initial_state_into_the_final_one(is_causal: bool) -> None:
    """S_final = S_0 + phi(K)^T [V, 1] in each form, the parallel one included."""
    query, key, value = qkv((2, 6, 4))
    state = torch.rand(2, 4, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    phi_k = torch.nn.functional.elu(key) + 1
    expected = state + phi_k.transpose(-2, -1) @ torch.cat([value, torch.ones(2, 6, 1, dtype=torch.float64)], -1)
    for form in ("parallel", "recurrent", "chunked"):
        _, final = linear_attention(query, key, value, is_causal=is_causal, form=form, chunk_size=4,
                                    initial_state=state, output_final_state=True)
        torch.testing.assert_close(final, expected, rtol=1e-12, atol=1e-12, msg=form)


@pytest.mark.parametrize("form", ["parallel", "recurrent", "chunked"])
def test_half_precision_is_the_float64_answer_rounded_once(form: str) -> None:
    """Features, sums and the normalizer in float32, rounded once to bfloat16 at the end."""
    query, key, value = qkv((2, 64, 16), dtype=torch.float32, to=torch.bfloat16)
    ours = linear_attention(query, key, value, is_causal=True, form=form, chunk_size=16)
    exact = linear_attention(query.double(), key.double(), value.double(), is_causal=True, form=form)
    assert ours.dtype == torch.bfloat16
    error, rounding = ((x.double() - exact).abs().max().item() for x in (ours, exact.to(torch.bfloat16)))
    assert error <= 1.2 * rounding, f"error {error:.3g} > 1.2 x rounding once {rounding:.3g}"


def test_a_half_precision_query_is_scaled_in_float32() -> None:
    """query * scale in float16 overflowed to inf (300 * 300 > 65,504) and every output was NaN."""
    query, key, value = qkv((1, 4, 8), dtype=torch.float32, seed=1)
    query = query * 300
    ours = linear_attention(*(x.half() for x in (query, key, value)), scale=300.0, is_causal=True)
    want = linear_attention(*(x.half().float() for x in (query, key, value)), scale=300.0, is_causal=True)
    torch.testing.assert_close(ours, want.half())


def test_scale_multiplies_the_queries_before_the_feature_map() -> None:
    """scale=s is the written-out sum over phi(s q_i): not phi(q_i / s), nor s phi(q_i)."""
    query, key, value = qkv((2, 6, 4), seed=2)
    want = written_out(query * 0.5, key, value, causal=True)
    for form in FORMS:
        got = linear_attention(query, key, value, is_causal=True, form=form, chunk_size=4, scale=0.5)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12, msg=form)


@pytest.mark.parametrize("form", FORMS)
def test_a_state_of_another_float_dtype_is_cast_to_the_features(form: str) -> None:
    """A float32 state (a half-precision prefill's) continues a float64 decode: cast, as the
    float64 state rounded to float32 would give, not refused by the product of two dtypes."""
    query, key, value = qkv((2, 9, 4), seed=4)
    _, state = linear_attention(query[:, :5], key[:, :5], value[:, :5], is_causal=True,
                                output_final_state=True)
    rounded = state.float().double()
    got = linear_attention(query[:, 5:], key[:, 5:], value[:, 5:], is_causal=True, form=form,
                           chunk_size=2, initial_state=state.float())
    want = linear_attention(query[:, 5:], key[:, 5:], value[:, 5:], is_causal=True,
                            initial_state=rounded)
    assert got.dtype == F64
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


class TestBadInput:
    def test_forms_feature_maps_and_shapes_must_be_valid(self):
        q, k, v = qkv((2, 5, 4))
        with pytest.raises(ValueError, match=r"form must be one of \('parallel', 'recurrent', 'chunked'\), got 'scan'"):
            linear_attention(q, k, v, form="scan")
        with pytest.raises(ValueError, match="chunk_size must be at least 1, got 0"):
            linear_attention(q, k, v, form="chunked", chunk_size=0)
        with pytest.raises(ValueError, match=r"feature_map must be one of.*got 'relu'"):
            linear_attention(q, k, v, feature_map="relu")
        with pytest.raises(ValueError, match=r"features >= 0.*got a negative feature of query"):
            linear_attention(q, k, v, feature_map=lambda x: x)
        with pytest.raises(ValueError, match=r"features >= 0.*got a negative feature of query"):
            linear_attention(q, k, v, feature_map=lambda x: torch.relu(x) - 1e-12)  # barely
        with pytest.raises(ValueError, match=r"features >= 0.*got a negative feature of query"):
            linear_attention_weights(q, k, feature_map=lambda x: torch.relu(x) - 1e-12)
        with pytest.raises(ValueError, match=r"feature_map must map query \(..., t, d\) to \(..., t, r\)"):
            linear_attention(q, k, v, feature_map=lambda x: x[..., :1, :].exp())  # drops tokens
        with pytest.raises(ValueError, match=r"one width r.*got 3 and 2"):
            linear_attention(q, k[:, :4], v[:, :4],
                             feature_map=lambda x: x.exp()[..., : x.shape[-2] - 2])
        with pytest.raises(ValueError, match=r"one width r.*got 3 and 2"):
            linear_attention_weights(q, k[:, :4], feature_map=lambda x: x.exp()[..., : x.shape[-2] - 2])
        with pytest.raises(ValueError, match=r"as many queries as keys.*got t_q=3 and t_k=5"):
            linear_attention(q[:, :3], k, v, is_causal=True)
        with pytest.raises(ValueError, match=r"same last dimension d_k.*got 4 and 3"):
            linear_attention(q, k[..., :3], v)
        with pytest.raises(ValueError, match=r"same leading dimensions.*got \(2,\), \(1,\) and \(1,\)"):
            linear_attention(q, k[:1], v[:1])
        with pytest.raises(ValueError, match=r"floating point.*got query torch\.int64 on cpu"):
            linear_attention(*(x.long() for x in (q, k, v)))
        with pytest.raises(ValueError, match=r"form must be one of \('parallel', 'recurrent', 'chunked'\), got 'scan'"):
            linear_attention_flops(8, 4, 4, "scan")

    def test_initial_state_must_have_the_normaliser_column(self):
        query, key, value = qkv((2, 10, 4))
        state = torch.zeros(2, 4, 4, dtype=query.dtype)  # (..., r, d_v): the normaliser column missing
        with pytest.raises(ValueError, match=r"initial_state must have shape \(..., r, d_v \+ 1\).*got \(2, 4, 4\)"):
            linear_attention(query, key, value, initial_state=state)

    @pytest.mark.parametrize(
        ("state", "message"),
        [
            (torch.zeros(2, 4, 5, dtype=torch.int64), r"floating.*got torch\.int64 on cpu"),
            (torch.zeros(2, 4, 5, dtype=F64, device="meta"), r"device cpu, got torch\.float64 on meta"),
        ],
    )
    def test_initial_state_must_be_floating_on_the_values_device(self, state, message):
        query, key, value = qkv((2, 10, 4))
        with pytest.raises(ValueError, match=message):
            linear_attention(query, key, value, initial_state=state)

    def test_no_leading_dimension_broadcasts_for_the_value_or_the_state(self) -> None:
        """query, key, value and initial_state share every leading dimension: a value or a state
        of batch 1 against a batch of 2 is refused, not broadcast."""
        query, key, value = qkv((2, 5, 4))
        with pytest.raises(ValueError, match=r"same leading dimensions.*got \(2,\), \(2,\) and \(1,\)"):
            linear_attention(query, key, value[:1])
        state = torch.zeros(1, 4, 5, dtype=F64)  # (1, r, d_v + 1): batch 1
        with pytest.raises(ValueError, match=r"initial_state must have shape .* = \(2, 4, 5\), got \(1, 4, 5\)"):
            linear_attention(query, key, value, initial_state=state)

    @pytest.mark.parametrize("value", NON_BOOLS)
    @pytest.mark.parametrize(
        ("flag", "call"),
        [
            ("is_causal", lambda value: linear_attention_flops(16, 4, 4, "chunked", is_causal=value)),
        ],
    )
    def test_flags_must_be_bools(self, flag: str, call, value: object) -> None:
        with refuses_non_bool(flag, value):
            call(value)


def test_chunked_prefill_then_recurrent_decode_equals_one_call():
    """As flash-linear-attention's (o, final_state): the state carries on from a prefill."""
    query, key, value = qkv((2, 10, 4))
    want = linear_attention(query, key, value, is_causal=True, scale=0.5)
    out, state = linear_attention(query[:, :7], key[:, :7], value[:, :7], is_causal=True,
                                  form="chunked", chunk_size=3, scale=0.5,
                                  output_final_state=True)
    rows = [out]
    for i in range(7, 10):  # one token at a time
        row, state = linear_attention(
            query[:, i:i + 1], key[:, i:i + 1], value[:, i:i + 1], is_causal=True,
            form="recurrent", scale=0.5, initial_state=state, output_final_state=True,
        )
        rows.append(row)
    torch.testing.assert_close(torch.cat(rows, dim=-2), want, rtol=1e-12, atol=1e-12)
    for form in FORMS:  # every form returns the same state, causal or not
        for causal in (False, True):
            _, final = linear_attention(query, key, value, is_causal=causal, form=form,
                                        output_final_state=True)
            torch.testing.assert_close(final, state, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(want, linear_attention(query, key, value, is_causal=True))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("form", FORMS)
def test_the_initial_state_reads_as_earlier_keys_in_every_form(form: str, causal: bool) -> None:
    """initial_state = the state after keys k_1..k_p: the queries see those keys too, so the
    output is the written-out sum over the p earlier keys and these (their rows of it, causal)."""
    query, key, value = qkv((2, 9, 4), seed=5)
    p = 4
    _, state = linear_attention(query[:, :p], key[:, :p], value[:, :p], is_causal=causal,
                                output_final_state=True)
    got = linear_attention(query[:, p:], key[:, p:], value[:, p:], is_causal=causal, form=form,
                           chunk_size=2, initial_state=state)
    if causal:  # the rows p.. of the whole sequence
        want = written_out(query, key, value, causal=True)[:, p:]
    else:  # every query against all 9 keys
        want = written_out(query[:, p:], key, value, causal=False)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("form", FORMS)
def test_half_precision_returns_a_float32_state_and_half_weights(form: str) -> None:
    """The state stays float32 (the docstring's promise, for decoding on from it); the weights
    come back in the query's dtype, the float64 weights rounded once."""
    query, key, value = qkv((2, 12, 8), dtype=torch.float32, to=torch.bfloat16)
    out, state = linear_attention(query, key, value, is_causal=True, form=form, chunk_size=4,
                                  output_final_state=True)
    assert out.dtype == torch.bfloat16 and state.dtype == torch.float32
    _, exact_state = linear_attention(query.double(), key.double(), value.double(),
                                      is_causal=True, output_final_state=True)
    torch.testing.assert_close(state.double(), exact_state, rtol=1e-6, atol=1e-5)
    weights = linear_attention_weights(query, key, is_causal=True)
    exact = linear_attention_weights(query.double(), key.double(), is_causal=True)
    assert weights.dtype == torch.bfloat16
    torch.testing.assert_close(weights, exact.to(torch.bfloat16), rtol=2**-8, atol=0)  # 1 ulp
