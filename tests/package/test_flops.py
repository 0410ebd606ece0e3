"""attention.flops: FLOP counts equal PyTorch's own count, device peaks and bandwidths are
documented figures or unknown."""

import numpy as np
import pytest
import torch
from _inputs import NON_BOOLS, refuses_non_bool
from torch.utils.flop_counter import FlopCounterMode

from attention import FusedMultiHeadAttention, flash
from attention.flops import (
    GPU_BANDWIDTH,
    GPU_PEAKS,
    attention_flops,
    device_bandwidth,
    device_peak,
    projection_flops,
)
from attention.functional import scaled_dot_product_attention as explicit_attention


def count_flops(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def test_forward_flops_are_the_two_matrix_products():
    b, h, t, d_h = 2, 3, 16, 8
    q, k, v = (torch.randn(b, h, t, d_h) for _ in range(3))
    counted = count_flops(lambda: explicit_attention(q, k, v))  # Ω = Q Kᵀ and Z = A V, no mask
    assert attention_flops(b, h, t, d_h, causal=False) == counted == 4 * b * h * t * t * d_h


def test_causal_halves_and_backward_is_flashattention_count():
    b, h, t, d_h = 1, 2, 32, 16
    full = attention_flops(b, h, t, d_h, causal=False)
    assert attention_flops(b, h, t, d_h, causal=True) == full / 2
    # FlashAttention's backward recomputes Ω and does four more products: five in all, 2.5x the
    # forward's two. Our flash_attention, on one tile (block_size >= t), does exactly that.
    q, k, v = (torch.randn(b, h, t, d_h, requires_grad=True) for _ in range(3))
    out = flash.flash_attention(q, k, v, block_size=t)
    backward = count_flops(lambda: out.backward(torch.ones_like(out)))
    assert backward == 2.5 * full
    assert attention_flops(b, h, t, d_h, causal=False, backward=True) == full + backward


def test_layer_flops_add_the_projections():
    b, t, d, h = 2, 12, 16, 4
    torch.manual_seed(0)
    layer = FusedMultiHeadAttention(d, d, num_heads=h, context_length=t, dropout=0.0, use_sdpa=False)
    x = torch.randn(b, t, d)
    counted = count_flops(lambda: layer(x))  # explicit path: full (t, t) products, then masked
    assert counted == projection_flops(b, t, d, d) + attention_flops(b, h, t, d // h, causal=False)
    assert projection_flops(b, t, d, d, out_proj=False) == 3 * 2 * b * t * d * d


def test_device_peaks_are_documented_or_unknown():
    peak = device_peak("NVIDIA H100 80GB HBM3", "bf16")
    assert peak.tflops > 0 and peak.source.startswith("https://www.nvidia.com/")
    assert device_peak("Intel(R) Xeon(R) Processor", "fp32") is None  # never a guessed peak


def test_gpu_bandwidth_is_documented_or_unknown():
    assert set(GPU_BANDWIDTH) == set(GPU_PEAKS)  # every GPU with a peak has a bandwidth
    assert device_bandwidth("NVIDIA H100 80GB HBM3").bytes_per_s == 3.35e12  # the chapter's figure
    assert device_bandwidth("Intel(R) Xeon(R) Processor") is None


def test_sizes_may_be_numpy_integers():
    # refused as "b must be a positive integer, got np.int64(1)", a message naming an integer
    n = np.int64
    assert attention_flops(n(2), n(3), n(4), n(5)) == attention_flops(2, 3, 4, 5)
    assert projection_flops(n(2), n(3), n(4), n(5)) == projection_flops(2, 3, 4, 5)


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    def test_sizes_must_be_positive_integers(self):
        with pytest.raises(ValueError, match="t must be a positive integer, got 0"):
            attention_flops(1, 1, 0, 8)

    def test_precision_must_be_one_with_documented_peaks(self):
        with pytest.raises(ValueError, match=r"precision must be one of.*got 'int8'"):
            device_peak("NVIDIA H200", "int8")

    @pytest.mark.parametrize("call", [lambda: device_peak(["H100"], "bf16"), lambda: device_bandwidth(["H100"])],
                             ids=["device_peak", "device_bandwidth"])
    def test_device_name_must_be_a_str(self, call) -> None:
        # a list raised a TypeError (unhashable type: 'list')
        with pytest.raises(ValueError, match=r"device_name must be a str .*got \['H100'\]"):
            call()

    @pytest.mark.parametrize("value", NON_BOOLS)
    @pytest.mark.parametrize(
        ("flag", "call"),
        [
            ("causal", lambda value: attention_flops(1, 1, 4, 4, causal=value)),
            ("backward", lambda value: attention_flops(1, 1, 4, 4, backward=value)),
            ("out_proj", lambda value: projection_flops(1, 4, 4, 4, out_proj=value)),
            ("backward", lambda value: projection_flops(1, 4, 4, 4, backward=value)),
        ],
    )
    def test_flags_must_be_bools(self, flag: str, call, value: object) -> None:
        with refuses_non_bool(flag, value):
            call(value)
