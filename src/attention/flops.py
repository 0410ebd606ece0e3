"""Floating-point operation counts of attention, and the documented peaks we compare them with.

Notation (see CONTRIBUTING.md): b batch size, t tokens, h heads, d_h width of one head,
d_in input width, d_out = h * d_h output width.

The attention core of one head is two matrix products, Ω = Q Kᵀ of shape (t, t) and Z = A V of
shape (t, d_h); each costs 2 · t · t · d_h operations (a multiply and an add per term), so

    forward FLOPs  = 4 · b · h · t² · d_h          (× 0.5 with a causal mask)
    backward FLOPs = 2.5 × forward                  (five products instead of two)

as the FlashAttention papers count them. The softmax, the mask and the scaling are left out:
they are O(t²) and not O(t² · d_h). A whole attention *layer* also projects the tokens: three
(t, d_in) × (d_in, d_out) products for Q, K and V and one (t, d_out) × (d_out, d_out) for the
output projection, each 2 · b · t · d_in · d_out FLOPs forward (and twice that backward).
"""

from dataclasses import dataclass
from numbers import Integral

from ._checks import check_flags

BACKWARD_FACTOR = 2.5


def _check_positive(**values: int) -> None:
    """Require integers >= 1, NumPy's among them (the counts are computed in float)."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


def attention_flops(
    b: int, h: int, t: int, d_h: int, causal: bool = True, backward: bool = False
) -> float:
    """FLOPs of the attention core: 4·b·h·t²·d_h forward, halved if causal, ×3.5 with backward.

    ``backward=True`` counts the forward *and* the backward pass (1 + 2.5 times the forward).

    Args:
        b: batch size.
        h: heads.
        t: tokens (queries = keys).
        d_h: width of one head.
        causal: count half the score matrix, as a causal kernel computes.
        backward: add the backward pass, 2.5 times the forward.

    Returns:
        The FLOP count, a float.

    Raises:
        ValueError: if b, h, t or d_h is not a positive integer, or causal or backward is not
            a bool.

    Examples:
        >>> attention_flops(1, 1, 4, 2, causal=False), attention_flops(1, 1, 4, 2)
        (128.0, 64.0)
    """
    _check_positive(b=b, h=h, t=t, d_h=d_h)
    check_flags(causal=causal, backward=backward)
    forward = 4.0 * b * h * t * t * d_h * (0.5 if causal else 1.0)
    return forward * (1.0 + BACKWARD_FACTOR) if backward else forward


def projection_flops(
    b: int, t: int, d_in: int, d_out: int, out_proj: bool = True, backward: bool = False
) -> float:
    """FLOPs of the Q, K, V projections (and the output projection): 2·b·t·d_in·d_out each.

    The backward pass of a linear layer costs twice its forward (gradients of the input and of
    the weight), so ``backward=True`` counts 3 times the forward.

    Args:
        b: batch size.
        t: tokens.
        d_in: input width.
        d_out: output width, h · d_h.
        out_proj: add the (d_out, d_out) output projection.
        backward: add the backward pass, twice the forward.

    Returns:
        The FLOP count, a float.

    Raises:
        ValueError: if b, t, d_in or d_out is not a positive integer, or out_proj or backward
            is not a bool.

    Examples:
        >>> projection_flops(1, 2, 3, 4, out_proj=False)  # three products of 2 · 2 · 3 · 4
        144.0
    """
    _check_positive(b=b, t=t, d_in=d_in, d_out=d_out)
    check_flags(out_proj=out_proj, backward=backward)
    forward = 2.0 * b * t * d_in * d_out * 3 + (2.0 * b * t * d_out * d_out if out_proj else 0.0)
    return forward * 3.0 if backward else forward


@dataclass(frozen=True)
class Peak:
    """A device's documented dense peak throughput in TFLOP/s, and where the figure comes from.

    Args:
        tflops: the peak, in 10¹² FLOP/s.
        source: the datasheet it is read from.

    Examples:
        >>> Peak(1.0, "a datasheet").tflops
        1.0
    """

    tflops: float
    source: str


def _peaks(fp32: float, tf32: float, half: float, source: str, sparse_halved: bool) -> dict[str, Peak]:
    """Peaks per precision from a datasheet (tensor-core figures already dense)."""
    note = "; the datasheet's tensor-core figures assume sparsity, halved here" if sparse_halved else ""
    return {
        "fp32": Peak(fp32, source),
        "tf32": Peak(tf32, source + note),
        "bf16": Peak(half, source + note),
        "fp16": Peak(half, source + note),
    }


_NVIDIA = "https://www.nvidia.com/en-us/data-center/"
_H100_SXM = _peaks(67.0, 494.5, 989.5, _NVIDIA + "h100/ (H100 SXM)", sparse_halved=True)
_H100_PCIE = _peaks(51.0, 378.0, 756.5, _NVIDIA + "h100/ (H100 PCIe)", sparse_halved=True)
_H200 = _peaks(67.0, 494.5, 989.5, _NVIDIA + "h200/ (H200 SXM)", sparse_halved=True)
_A100 = _peaks(19.5, 156.0, 312.0, _NVIDIA + "a100/ (A100)", sparse_halved=False)

# Keys are exact torch.cuda.get_device_name() strings; values per precision: "fp32" (CUDA
# cores), "tf32", "bf16", "fp16" (tensor cores, dense). A device not listed has no stated peak.
GPU_PEAKS: dict[str, dict[str, Peak]] = {
    "NVIDIA H100 80GB HBM3": _H100_SXM,
    "NVIDIA H100 PCIe": _H100_PCIE,
    "NVIDIA H200": _H200,
    "NVIDIA A100-SXM4-80GB": _A100,
    "NVIDIA A100-SXM4-40GB": _A100,
    "NVIDIA A100 80GB PCIe": _A100,
    "NVIDIA A100-PCIE-40GB": _A100,
}


@dataclass(frozen=True)
class Bandwidth:
    """A device's documented memory bandwidth in bytes per second, and where the figure comes from.

    Other arguments as in :class:`Peak`.

    Args:
        bytes_per_s: the bandwidth β, in bytes/s.

    Examples:
        >>> Bandwidth(2e12, "a datasheet").bytes_per_s
        2000000000000.0
    """

    bytes_per_s: float
    source: str


# HBM bandwidth from the same datasheets, by exact torch.cuda.get_device_name() string.
GPU_BANDWIDTH: dict[str, Bandwidth] = {
    "NVIDIA H100 80GB HBM3": Bandwidth(3.35e12, _NVIDIA + "h100/ (H100 SXM)"),
    "NVIDIA H100 PCIe": Bandwidth(2.0e12, _NVIDIA + "h100/ (H100 PCIe)"),
    "NVIDIA H200": Bandwidth(4.8e12, _NVIDIA + "h200/ (H200 SXM)"),
    "NVIDIA A100-SXM4-80GB": Bandwidth(2.039e12, _NVIDIA + "a100/ (A100 80GB SXM)"),
    "NVIDIA A100-SXM4-40GB": Bandwidth(1.555e12, _NVIDIA + "a100/ (A100 40GB SXM)"),
    "NVIDIA A100 80GB PCIe": Bandwidth(1.935e12, _NVIDIA + "a100/ (A100 80GB PCIe)"),
    "NVIDIA A100-PCIE-40GB": Bandwidth(1.555e12, _NVIDIA + "a100/ (A100 40GB PCIe)"),
}


def device_bandwidth(device_name: str) -> Bandwidth | None:
    """The documented memory bandwidth of a GPU, or None for a device not in ``GPU_BANDWIDTH``.

    Args:
        device_name: the exact ``torch.cuda.get_device_name()`` string.

    Returns:
        Its ``Bandwidth``, or None.

    Raises:
        ValueError: if device_name is not a str.

    Examples:
        >>> device_bandwidth("NVIDIA H200").bytes_per_s, device_bandwidth("cpu")
        (4800000000000.0, None)
    """
    _check_device_name(device_name)
    return GPU_BANDWIDTH.get(device_name)


def _check_device_name(device_name: object) -> None:
    """Require a device name, the str the tables are keyed by (a list is unhashable)."""
    if not isinstance(device_name, str):
        raise ValueError(
            f"device_name must be a str such as torch.cuda.get_device_name() returns, got "
            f"{device_name!r}"
        )


def device_peak(device_name: str, precision: str) -> Peak | None:
    """The documented dense peak of a GPU for a precision ("fp32", "tf32", "bf16", "fp16").

    Returns None when the device is not in ``GPU_PEAKS`` (every CPU, for instance): then the
    benchmark reports TFLOP/s and says that the peak is unknown, rather than guess one.

    Args:
        device_name: the exact ``torch.cuda.get_device_name()`` string.
        precision: ``"fp32"``, ``"tf32"``, ``"bf16"`` or ``"fp16"``.

    Returns:
        Its ``Peak`` for that precision, or None.

    Raises:
        ValueError: if device_name is not a str, or precision is not one of the four.

    Examples:
        >>> device_peak("NVIDIA H200", "bf16").tflops, device_peak("cpu", "fp32")
        (989.5, None)
    """
    _check_device_name(device_name)
    if precision not in ("fp32", "tf32", "bf16", "fp16"):
        raise ValueError(f"precision must be one of fp32, tf32, bf16, fp16, got {precision!r}")
    peaks = GPU_PEAKS.get(device_name)
    return None if peaks is None else peaks[precision]
