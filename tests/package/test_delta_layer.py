"""attention.delta_layer: Qwen3-Next's gated delta layer, against transformers' and with a state
that continues a sequence."""

import copy
import logging

import pytest
import torch
from _inputs import randomize

from attention.delta_layer import DeltaState, GatedDeltaNet

F64 = torch.float64


def _qwen3_next_layer(randomized: bool = True, **config_options):
    """transformers' Qwen3NextGatedDeltaNet in float64, built after seed 0; ``randomized``: every
    parameter drawn anew (dt_bias, A_log and the norm's gain included: their initial values are
    ours too)."""
    logging.getLogger("transformers").setLevel(logging.ERROR)  # "fla is not installed" notices
    qwen3_next = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")
    from transformers import AutoConfig

    config = AutoConfig.for_model(
        "qwen3_next", hidden_size=32, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=8, linear_value_head_dim=6, **config_options,
    )
    torch.manual_seed(0)
    layer = qwen3_next.Qwen3NextGatedDeltaNet(config, layer_idx=0).double()
    return randomize(layer) if randomized else layer


def _assert_converted_layer_computes_theirs(theirs, t: int) -> GatedDeltaNet:
    """Convert ``theirs`` and check both layers on one batch of t tokens; return ours."""
    ours = GatedDeltaNet.from_qwen3_next(theirs)
    x = torch.randn(2, t, 32, dtype=F64)
    with torch.no_grad():
        expected, got = theirs(x), ours(x)
    # transformers' rule runs in float32 inside a float64 layer: agreement to float32 rounding.
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5 * expected.abs().max().item())
    return ours


def test_layer_matches_transformers_qwen3_next_layer():
    theirs = _qwen3_next_layer(randomized=False, linear_conv_kernel_dim=4)
    _assert_converted_layer_computes_theirs(theirs, t=70)


def test_the_conversion_takes_every_parameter_and_the_configs_sizes():
    """A convolution of width 3 and an RMSNorm epsilon of 0.5 (not the defaults 4 and 1e-6), and
    parameters none of which is at its initial value: the converted layer computes theirs."""
    theirs = _qwen3_next_layer(linear_conv_kernel_dim=3, rms_norm_eps=0.5)
    ours = _assert_converted_layer_computes_theirs(theirs, t=10)
    assert (ours.conv.kernel_size, ours.norm.eps) == ((3,), 0.5)


def test_the_conversion_keeps_the_layers_device_and_dtype():
    # it was built on torch's default device: a CUDA layer gave a CPU copy that failed at its
    # first call inside nn.Linear (a meta layer, standing in for one here, failed to copy)
    theirs = _qwen3_next_layer(randomized=False).to("meta", torch.float32)
    ours = GatedDeltaNet.from_qwen3_next(theirs)
    assert {(p.device.type, p.dtype) for p in ours.parameters()} == {("meta", torch.float32)}


def test_a_layer_on_the_meta_device_gives_the_output_shape():
    """Its NaN check read values (Tensor.item() cannot be called on meta tensors)."""
    layer = GatedDeltaNet(16, 2, 4, 8, 6, device="meta")
    assert layer(torch.zeros(2, 5, 16, device="meta")).shape == (2, 5, 16)


def test_short_queries_and_keys_are_normalised_with_qwen3_nexts_epsilon():
    """q / sqrt(|q|^2 + 1e-6), as FLA's l2norm: for |q| near 1e-3 the epsilon halves |q|^2's
    share, and a smaller one (or none) gives another output."""
    theirs = _qwen3_next_layer()
    with torch.no_grad():
        theirs.in_proj_qkvz.weight.mul_(1e-3)  # q, k (and v, z) of length near 1e-3
    _assert_converted_layer_computes_theirs(theirs, t=10)


def test_a_layer_without_convolution_history_continues_with_a_state():
    """conv_size = 1 keeps no earlier inputs (w_conv - 1 = 0): the cache's conv stays empty, and
    prefill then decoding equals one call (a slice [-0:] kept every input instead)."""
    torch.manual_seed(0)
    layer = GatedDeltaNet(16, 2, 4, 4, 3, conv_size=1).double()
    x = torch.randn(2, 6, 16, dtype=F64)
    state = DeltaState()
    parts = [layer(x[:, :4], state)] + [layer(x[:, i:i + 1], state) for i in range(4, 6)]
    assert state.conv.shape == (2, 28, 0)  # 2 h_k d_k + h_v d_v channels
    torch.testing.assert_close(torch.cat(parts, dim=1), layer(x), rtol=1e-12, atol=1e-13)


def test_layer_with_a_state_continues_where_it_stopped():
    """A DeltaState carries the convolution's last inputs and S: prefill then one token at a time
    gives the outputs of one call over the whole sequence."""
    torch.manual_seed(0)
    layer = GatedDeltaNet(16, 2, 4, 4, 3).double()
    x = torch.randn(2, 9, 16, dtype=F64)
    state = DeltaState()
    parts = [layer(x[:, :5], state)] + [layer(x[:, i:i + 1], state) for i in range(5, 9)]
    torch.testing.assert_close(torch.cat(parts, dim=1), layer(x), rtol=1e-12, atol=1e-13)
    assert state.length == 9 and state.state.shape == (2, 4, 4, 3)


def test_float16_layer_is_as_accurate_with_large_queries_and_keys_as_with_small_ones():
    """q and k are divided by their length, computed in float32: in float16, |q|² overflows once
    |q| > 256 and q would become 0. Errors are against the float64 layer with the same weights."""
    errors = []
    for scale in (1.0, 1000.0):  # of W_q and W_k: q and k up to about 2000
        torch.manual_seed(0)
        layer = GatedDeltaNet(16, 2, 4, 4, 3).half()
        with torch.no_grad():
            layer.q_proj.weight.mul_(scale)
            layer.k_proj.weight.mul_(scale)
        x = torch.randn(2, 9, 16).half()
        with torch.no_grad():
            reference = copy.deepcopy(layer).double()(x.double())  # (2, 9, 16)
            errors.append(((layer(x).double() - reference).abs().max() / reference.abs().max()).item())
    assert errors[1] <= 2 * errors[0], errors


def test_a_bfloat16_layer_hands_the_rule_its_log_decay_in_float32(monkeypatch):
    """g is summed over each chunk; the layer rounded it to bfloat16 (8 bits) first, a rounding
    that transformers' Qwen3-Next layer, which keeps g in float32, does not make."""
    import attention.delta_layer as delta_layer

    seen = []
    rule = delta_layer.gated_delta_rule
    monkeypatch.setattr(delta_layer, "gated_delta_rule", lambda q, k, v, g, *a, **kw: seen.append(g.dtype)
                        or rule(q, k, v, g, *a, **kw))
    GatedDeltaNet(16, 2, 4, 4, 3).bfloat16()(torch.randn(1, 5, 16).bfloat16())
    assert seen == [torch.float32]


def test_a_cache_of_another_floating_dtype_is_cast_as_transformers_casts_it():
    """conv to the layer's dtype, state to float32 (flash-linear-attention's kernels and
    transformers' Qwen3-Next take any); a float32 conv met bfloat16 weights: torch's
    RuntimeError."""
    torch.manual_seed(0)
    layer = GatedDeltaNet(16, 2, 4, 4, 3).bfloat16()
    x = torch.randn(1, 7, 16).bfloat16()
    outs, caches = [], []
    for conv_dtype, state_dtype in ((torch.bfloat16, torch.float32), (torch.float32, torch.bfloat16)):
        cache = DeltaState()
        layer(x[:, :5], cache)
        cache.conv, cache.state = cache.conv.to(conv_dtype), cache.state.bfloat16().to(state_dtype)
        outs.append(layer(x[:, 5:], cache))
        caches.append(cache)
    assert torch.equal(outs[0], outs[1])
    for cache in caches:
        assert (cache.conv.dtype, cache.state.dtype) == (torch.bfloat16, torch.float32)
        assert torch.equal(cache.state, caches[0].state)


def test_no_tokens_give_an_empty_output_and_leave_the_state_as_it_was():
    """t = 0, as the attention modules take it: an empty (b, 0, d) output that gradients pass
    through, and a DeltaState that an empty call leaves unchanged."""
    torch.manual_seed(0)
    layer = GatedDeltaNet(16, 2, 4, 4, 3).double()
    x = torch.randn(2, 0, 16, dtype=F64, requires_grad=True)
    out = layer(x)
    assert out.shape == (2, 0, 16)
    out.sum().backward()
    assert torch.equal(x.grad, torch.zeros_like(x))
    tokens = torch.randn(2, 6, 16, dtype=F64)
    state = DeltaState()
    assert layer(tokens[:, :0], state).shape == (2, 0, 16) and state.length == 0
    assert state.conv is None and state.state is None  # a new state is not tied to b = 2 yet
    parts = [layer(tokens[:, :4], state), layer(tokens[:, 4:4], state), layer(tokens[:, 4:], state)]
    assert state.length == 6
    torch.testing.assert_close(torch.cat(parts, dim=1), layer(tokens), rtol=1e-12, atol=1e-13)


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    def test_the_conversion_takes_a_qwen3_next_layer_only(self):
        with pytest.raises(ValueError, match=r"layer must be transformers' Qwen3NextGatedDeltaNet, got Linear"):
            GatedDeltaNet.from_qwen3_next(torch.nn.Linear(2, 2))

    @pytest.mark.parametrize("hidden_act", ["gelu", "relu"])
    def test_a_qwen3_next_layer_with_another_convolution_activation_is_refused(self, hidden_act):
        """The layer applies config.hidden_act after its convolution; this one applies SiLU."""
        qwen3_next = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")
        from transformers import AutoConfig

        config = AutoConfig.for_model("qwen3_next", hidden_size=32, hidden_act=hidden_act,
                                      linear_num_key_heads=2, linear_num_value_heads=4,
                                      linear_key_head_dim=8, linear_value_head_dim=6)
        theirs = qwen3_next.Qwen3NextGatedDeltaNet(config, layer_idx=0)
        with pytest.raises(ValueError, match=rf"activation after the convolution must be 'silu', got '{hidden_act}'"):
            GatedDeltaNet.from_qwen3_next(theirs)

    def test_the_cache_must_be_a_delta_state_of_the_same_batch(self):
        layer = GatedDeltaNet(16, 2, 2, 4, 4)
        with pytest.raises(ValueError, match=r"cache must be a DeltaState, got int"):
            layer(torch.randn(1, 5, 16), cache=5)
        cache = DeltaState()
        layer(torch.randn(1, 5, 16), cache=cache)
        with pytest.raises(ValueError, match=r"cache holds b=1 sequences, x has b=2"):
            layer(torch.randn(2, 1, 16), cache=cache)

    def test_the_cache_must_come_from_a_layer_of_this_shape(self):
        # A DeltaState of another layer failed inside torch.cat or view.
        layer = GatedDeltaNet(16, 2, 2, 4, 4)
        cache = DeltaState()
        GatedDeltaNet(16, 2, 2, 4, 4, conv_size=2)(torch.randn(1, 5, 16), cache=cache)
        with pytest.raises(ValueError, match=r"cache\.conv must have shape \(1, 24, 3\) .*got "
                                             r"\(1, 24, 1\)"):
            layer(torch.randn(1, 1, 16), cache=cache)

    # A state of the wrong shape or device was refused only after the cache had taken the new
    # tokens' conv inputs, as gated_delta_rule's initial_state; an integer conv was promoted by
    # torch.cat without a word.
    @pytest.mark.parametrize(("spoil", "message"), [
        (lambda c: setattr(c, "state", c.state[:, :1]),
         r"cache\.state must have shape \(1, 2, 4, 4\) .*got \(1, 1, 4, 4\)"),
        (lambda c: setattr(c, "conv", c.conv.long()),
         r"cache\.conv must be floating point on x's device cpu, got torch\.int64 on cpu"),
        (lambda c: setattr(c, "state", c.state.to("meta")),
         r"cache\.state must be floating point on x's device cpu, got torch\.float32 on meta"),
    ], ids=["state shape", "conv dtype", "state device"])
    def test_a_refused_cache_is_left_as_it_was(self, spoil, message):
        layer = GatedDeltaNet(16, 2, 2, 4, 4)
        cache = DeltaState()
        layer(torch.randn(1, 5, 16), cache=cache)
        spoil(cache)
        conv = cache.conv
        with pytest.raises(ValueError, match=message):
            layer(torch.randn(1, 1, 16), cache=cache)
        assert cache.conv is conv and cache.length == 5, "a refused call changed the cache"

    def test_a_nan_input_is_refused_by_name_and_leaves_the_cache_as_it_was(self):
        # NaN in x reached the rule as a NaN beta ("beta must not be NaN", an argument the
        # caller never gave), after the cache had taken the call's convolution inputs: its conv
        # was 2 tokens ahead of its state and length
        layer = GatedDeltaNet(16, 2, 2, 4, 4)
        cache = DeltaState()
        layer(torch.randn(1, 5, 16), cache=cache)
        conv, state = cache.conv, cache.state
        x = torch.randn(1, 2, 16)
        x[0, 1, 3] = float("nan")
        with pytest.raises(ValueError, match=r"x gives a NaN write strength beta or log decay g"):
            layer(x, cache=cache)
        assert cache.conv is conv and cache.state is state and cache.length == 5

    def test_x_must_be_b_t_d(self):
        layer = GatedDeltaNet(16, 2, 2, 4, 4)
        with pytest.raises(ValueError, match=r"x must have last dimension d_model=16, got 8"):
            layer(torch.randn(1, 5, 8))
        with pytest.raises(ValueError, match=r"x must be 3-d, got a 2-d tensor of shape \(5, 16\)"):
            layer(torch.randn(5, 16))

    def test_value_heads_must_be_a_multiple_of_key_heads(self):
        with pytest.raises(ValueError, match="num_value_heads must be a multiple of num_key_heads=2, got 3"):
            GatedDeltaNet(16, 2, 3, 4, 4)

    @pytest.mark.parametrize("eps", [0.0, -1e-6, float("nan")])
    def test_eps_must_be_a_positive_number(self, eps):
        """The RMSNorm's ε, named under Raises: 0 divides a zero head by 0."""
        with pytest.raises(ValueError, match=r"eps must be a finite number > 0, got"):
            GatedDeltaNet(16, 2, 2, 4, 4, eps=eps)
