"""Our Triton FlashAttention kernels, forward and backward: FlashAttention's accuracy rule, the
causal split, and a clear error for what they do not take.

Without a GPU the kernels run in Triton's interpreter, which ``triton.jit`` chooses when it
defines a kernel, from ``TRITON_INTERPRET=1``. The variable must not leak into the other tests,
so the checks run in a fresh Python process that has it from the start: this file, run as a
script (``python tests/package/test_triton_flash.py interpreter``), prints its results as JSON, and the
tests below read them. ``cuda`` runs the compiled kernels on a GPU, every case in bfloat16 (three
of them autotuned); each case's ``within_rule`` is the verdict of the rule below.

Accuracy, FlashAttention's rule (Dao-AILab/flash-attention, tests/test_flash_attn.py,
``test_flash_attn_output``): against float64, the kernels' error in the output and in dQ, dK, dV
is at most twice the error of the same attention written out plainly in the input dtype.
Triton 3.9's interpreter computes ``tl.dot`` on bfloat16 tiles wrongly (a 16 × 16 product is off
by ~1e10), so on CPU only float16 is checked; the kernels have no dtype-specific code, and the
bfloat16 cases run on a GPU only (``TestCudaOnly``).
"""

import contextlib
import importlib.util
import json
import math
import os
import platform
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch
from _inputs import NON_BOOLS, qkv, refuses_non_bool

HAS_CUDA = torch.cuda.is_available()


def blackwell() -> bool:
    """A GPU that Triton warp-specializes for (compute capability 10.0 or later)."""
    return HAS_CUDA and torch.cuda.get_device_capability() >= (10, 0)


def why_no_triton() -> str:
    """Why Triton is not installed here (requirements.txt installs it only where it has wheels)."""
    here = f"{platform.system()} {platform.machine()}"
    if here in ("Linux x86_64", "Linux aarch64"):
        return f"Triton is not installed: pip install -r requirements.txt installs it on {here}"
    return f"Triton has no wheels for {here}, only for Linux x86_64 and aarch64: not installed"


HAS_TRITON = importlib.util.find_spec("triton") is not None
# Skipped where Triton is not installed; an installed but broken Triton fails the tests instead.
needs_triton = pytest.mark.skipif(not HAS_TRITON, reason=why_no_triton())

# (b, h, h_kv, t_q, t_k, d_h, causal, alignment, window, (block_m, block_n) or None, scale)
CASES = {
    "t 40, not causal, d_h 16, tiles 16x16": (1, 2, 2, 40, 40, 16, False, "top_left", None, (16, 16), None),
    "t 40, causal, d_h 32, autotuned": (1, 2, 2, 40, 40, 32, True, "top_left", None, None, None),
    "t_q 24 < t_k 56, bottom-right, d_h 64, tiles 16x32, strided": (
        2, 2, 2, 24, 56, 64, True, "bottom_right", None, (16, 32), None),
    "t_q 56 > t_k 24, top-left, tiles 32x16": (1, 2, 2, 56, 24, 16, True, "top_left", None, (32, 16), None),
    "t_q 40 > t_k 24, bottom-right: rows that see no key": (
        1, 2, 2, 40, 24, 32, True, "bottom_right", None, None, None),
    "GQA h 4, h_kv 2, causal, t 33": (1, 4, 2, 33, 33, 16, True, "top_left", None, None, None),
    "window 10, t 50, tiles 16x16": (1, 2, 2, 50, 50, 32, True, "top_left", 10, (16, 16), None),
    "MQA h 4, h_kv 1, window 7, bottom-right, d_h 128": (
        1, 4, 1, 20, 45, 128, True, "bottom_right", 7, None, None),
    "window 3, t_q 30 > t_k 20, top-left: late rows see nothing": (
        1, 1, 1, 30, 20, 16, True, "top_left", 3, None, None),
    "not causal, t_q 17, t_k 33, d_h 128, scale 0.3": (
        1, 1, 1, 17, 33, 128, False, "top_left", None, None, 0.3),
    "t_q 1, t_k 17, bottom-right: one new token": (
        1, 2, 2, 1, 17, 16, True, "bottom_right", None, None, None),
    "batch 2, GQA h 4, h_kv 2, causal, t 20": (2, 4, 2, 20, 20, 16, True, "top_left", None, None, None),
}
# The kernels' other paths, each on a shape above: (shape's name, options). "atomic dQ" is
# deterministic=False; "sinks" a logit per head (one of them -inf, a head without a sink);
# "options" every TritonOptions choice on.
VARIANT_CASES = {
    "atomic dQ: GQA h 4, h_kv 2, causal, t 33": ("GQA h 4, h_kv 2, causal, t 33", {"deterministic": False}),
    "atomic dQ, sinks: window 10, t 50, tiles 16x16": (
        "window 10, t 50, tiles 16x16", {"deterministic": False, "sinks": True}),
    "sinks: rows that see no key, one sink -inf": (
        "t_q 40 > t_k 24, bottom-right: rows that see no key", {"sinks": True}),
    "options, sinks, atomic dQ: MQA, window 7, d_h 128": (
        "MQA h 4, h_kv 1, window 7, bottom-right, d_h 128", {"options": True, "sinks": True, "deterministic": False}),
    "options: strided, bottom-right, tiles 16x32": (
        "t_q 24 < t_k 56, bottom-right, d_h 64, tiles 16x32, strided", {"options": True}),
    "atomic dQ, sinks: batch 2, GQA h 4, h_kv 2": (
        "batch 2, GQA h 4, h_kv 2, causal, t 20", {"deterministic": False, "sinks": True}),
}
# Larger shapes for a GPU, where tiles are 32 to 128 rows. On a GPU a case runs with 64 x 64 tiles
# unless it names its own or is autotuned: autotuning compiles every configuration, the slow part.
CUDA_CASES = {
    "t 1000, causal, d_h 64, autotuned": (2, 4, 4, 1000, 1000, 64, True, "top_left", None, None, None),
    "t 777, not causal, d_h 128": (1, 4, 4, 777, 777, 128, False, "top_left", None, None, None),
    "t_q 300, t_k 1100, bottom-right, GQA 8/2, d_h 128, autotuned": (
        1, 8, 2, 300, 1100, 128, True, "bottom_right", None, None, None),
    "window 200, t 900, d_h 64, tiles 128x64": (
        1, 4, 4, 900, 900, 64, True, "top_left", 200, (128, 64), None),
    "t_q 513 > t_k 257, bottom-right, d_h 32": (
        1, 2, 2, 513, 257, 32, True, "bottom_right", None, None, None),
}


def visible(t_q: int, t_k: int, causal: bool, offset: int, window: int | None) -> torch.Tensor:
    """(t_q, t_k), True where query i (at position i + offset) may see key j; written out here."""
    position = torch.arange(t_q)[:, None] + offset  # (t_q, 1)
    keys = torch.arange(t_k)[None, :]  # (1, t_k)
    seen = torch.ones(t_q, t_k, dtype=torch.bool)
    if causal:
        seen &= keys <= position
        if window is not None:
            seen &= keys > position - window
    return seen


def plain_attention(q, k, v, seen: torch.Tensor, scale: float, sinks=None) -> torch.Tensor:
    """softmax(Q Kᵀ · scale + M) V written out, every step in q's dtype (FlashAttention's
    ``attention_ref(upcast=False)``). K and V are repeated for grouped-query attention. A row
    that sees no key is zero with zero gradients: it attends everything, then is multiplied by 0.
    ``sinks`` (h,): one more key per head, its logit as the score and a value of zero."""
    b, h, t_q, d_h = q.shape
    k = k.repeat_interleave(h // k.shape[1], dim=1)  # (b, h, t_k, d_h)
    v = v.repeat_interleave(h // v.shape[1], dim=1)  # (b, h, t_k, d_h)
    some = seen.any(dim=-1, keepdim=True)  # (t_q, 1)
    scores = (q @ k.transpose(-2, -1) * scale).masked_fill(~(seen | ~some), -math.inf)  # (b, h, t_q, t_k)
    if sinks is not None:
        column = sinks.to(q.dtype)[None, :, None, None].expand(b, h, t_q, 1)  # (b, h, t_q, 1)
        scores = torch.cat([scores, column], dim=-1)  # (b, h, t_q, t_k + 1)
        v = torch.cat([v, v.new_zeros(b, h, 1, d_h)], dim=-2)  # (b, h, t_k + 1, d_h)
    return (torch.softmax(scores, dim=-1) @ v) * some  # (b, h, t_q, d_h)


def sink_error_from_rounded_output(out, exact_out, grad_out, exact, seen, scale) -> float:
    """Largest |Σ_i p_sink,i · rowsum(dZ ⊙ (Z - Z_exact))_i| over heads: the error of the sinks'
    gradient that FlashAttention's D, computed from the output rounded to the input type, brings
    on its own (D's error in every row, weighted by the sink's share of the row)."""
    q, k, _, sinks = exact
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)  # (b, h, t_k, d_h)
    scores = (q @ k.transpose(-2, -1) * scale).masked_fill(~seen, -math.inf)  # (b, h, t_q, t_k)
    column = sinks.detach()[None, :, None, None].expand(*scores.shape[:3], 1)  # (b, h, t_q, 1)
    p_sink = torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., -1].nan_to_num()  # (b, h, t_q)
    d_error = (grad_out.double() * (out.detach().double() - exact_out.detach())).sum(-1)  # (b, h, t_q)
    return (p_sink.detach() * d_error).sum(dim=(0, 2)).abs().max().item()


def check_case(name: str, case: tuple, device: str, dtype: torch.dtype, extra: dict | None = None) -> dict:
    """The kernels' and the plain computation's errors against float64, output and gradients;
    ``extra`` (see VARIANT_CASES) turns on the atomic dQ, sinks and the speed options."""
    from attention.triton_flash import TritonOptions, triton_flash_attention

    extra = extra or {}

    b, h, h_kv, t_q, t_k, d_h, causal, alignment, window, blocks, scale = case
    g = torch.Generator().manual_seed(0)
    if "strided" in name:  # laid out (b, t, h, d_h) as a model's projections are, then transposed
        q, k, v = (torch.randn(b, t, n, d_h, generator=g).transpose(1, 2)
                   for t, n in ((t_q, h), (t_k, h_kv), (t_k, h_kv)))
    else:
        q, k, v = (torch.randn(b, n, t, d_h, generator=g) for t, n in ((t_q, h), (t_k, h_kv), (t_k, h_kv)))
    grad_out = torch.randn(b, h, t_q, d_h, generator=g).to(device, dtype)  # (b, h, t_q, d_h)
    q, k, v = (x.to(device, dtype).requires_grad_() for x in (q, k, v))
    inputs = [q, k, v]
    sinks = None
    if extra.get("sinks"):
        sinks = torch.randn(h, generator=g)
        sinks[0] = -math.inf  # a head without a sink
        sinks = sinks.to(device).requires_grad_()
        inputs.append(sinks)
    offset = t_k - t_q if alignment == "bottom_right" else 0
    seen = visible(t_q, t_k, causal, offset, window).to(device)
    scale_or_default = d_h**-0.5 if scale is None else scale
    options = {"enable_gqa": h != h_kv, "alignment": alignment, "window": window, "scale": scale,
               "sinks": sinks, "deterministic": extra.get("deterministic", True)}
    if extra.get("options"):
        # warp_specialize is refused below compute capability 10.0 (a test of its own says so)
        options["options"] = TritonOptions(longest_first=True, descriptors=True,
                                           warp_specialize=device != "cuda" or blackwell())
    if blocks is None and device == "cuda" and "autotuned" not in name:
        blocks = (64, 64)
    if blocks is not None:
        options |= {"block_m": blocks[0], "block_n": blocks[1]}
    out = triton_flash_attention(q, k, v, is_causal=causal, **options)  # (b, h, t_q, d_h)
    ours = [out, *torch.autograd.grad(out, inputs, grad_out)]
    plain = [plain_attention(q, k, v, seen, scale_or_default, sinks)]
    plain += torch.autograd.grad(plain[0], inputs, grad_out)
    exact = [x.detach().double().requires_grad_() for x in inputs]
    reference = [plain_attention(*exact[:3], seen, scale_or_default, *exact[3:])]
    reference += torch.autograd.grad(reference[0], exact, grad_out.double())
    names = ("out", "dq", "dk", "dv", "dsinks")
    errors = {what: [(x.double() - r).abs().max().item() for x in (o, p)]
              for what, o, p, r in zip(names, ours, plain, reference)}
    if sinks is not None:  # the error that rounding Z alone brings into D = rowsum(dZ ⊙ Z), then into dsinks
        errors["dsinks"].append(sink_error_from_rounded_output(out, reference[0], grad_out, exact, seen, scale_or_default))
    no_key = ~seen.any(dim=-1)  # (t_q,)
    return {
        "errors": errors,
        "within_rule": all(ours <= 2 * max([plain, *rounding]) for ours, plain, *rounding in errors.values()),
        "dtypes": sorted({str(x.dtype) for x in ours[:4]}),
        "shapes_match": all(x.shape == y.shape for x, y in zip(ours, (q, q, k, v))),
        "rows_without_keys": int(no_key.sum()),
        "their_largest_out_and_dq": max(ours[i][..., no_key, :].abs().max().item() if no_key.any() else 0.0
                                        for i in (0, 1)),
    }


def bad_input_messages() -> list[str]:
    """The ValueError message for each input the kernels refuse, in order."""
    from attention.triton_flash import TritonOptions, _check_slice_offsets, triton_flash_attention

    x = torch.randn(1, 1, 16, 64, dtype=torch.float16)
    four = torch.randn(1, 4, 16, 64, dtype=torch.float16)  # (b, h, t, d_h) with h = 4
    odd = torch.randn(1, 1, 16, 65, dtype=torch.float16)[..., :64]  # rows 65 numbers apart
    many = x.expand(256, 257, 16, 64)  # b · h = 65,792 (sequence, head) pairs, no memory
    strided_d = torch.randn(1, 1, 16, 64, 2, dtype=torch.float16)[..., 0]  # last axis of stride 2
    shifted = torch.randn(1032, dtype=torch.float16)[4:1028].view(1, 1, 16, 64)  # starts 8 bytes late
    calls = [
        ((x.float(), x.float(), x.float()), {}),
        ((x[..., :48], x[..., :48], x[..., :48]), {}),
        ((x, x, x), {"block_m": 24}),
        ((x, x[:, :, :8], x), {}),
        ((four, four[:, :2], four[:, :2]), {}),
        ((four, four[:, :3], four[:, :3]), {"enable_gqa": True}),
        ((x, x, x), {"is_causal": True, "alignment": "bottom-right"}),
        ((x, x, x), {"is_causal": True, "window": 0}),
        ((x, x, x), {"window": 4}),
        ((x[0], x[0], x[0]), {}),
        ((x, x.bfloat16(), x), {}),
        ((four, four, four), {"sinks": torch.zeros(2)}),
        ((odd, odd, odd), {"options": TritonOptions(descriptors=True)}),
        ((x, x, x), {"options": {"descriptors": True}}),
        ((many, many, many), {}),
        ((strided_d, strided_d, strided_d), {"options": TritonOptions(descriptors=True)}),
        ((shifted, shifted, shifted), {"options": TritonOptions(descriptors=True)}),
        ((x, x, x), {"block_m": 8}),
        ((x, x, x), {"block_n": 16.0}),
        ((x, x.tolist(), x), {}),
        ((x, x, x), {"enable_gqa": "no"}),
        ((x, x, x), {"deterministic": 0}),
    ]
    messages = []
    for args, kwargs in calls:
        try:
            triton_flash_attention(*args, **kwargs)
        except ValueError as error:
            messages.append(str(error))
        else:
            messages.append("no error")
    try:  # a slice of 2**20 + 1 rows, 2**11 numbers apart: offsets past 2**31 (no such tensor is made)
        _check_slice_offsets("key", (1, 1, 2**20 + 1, 64), (2**31, 2**31, 2**11, 1))
    except ValueError as error:
        messages.append(str(error))
    return messages


def block_ranges(device: str = "cpu") -> dict:
    """The kernels' own split of each loop: (lo, mid_lo, mid_hi, hi) of every program."""
    found = {}
    for t_q, t_k, causal, offset, window, block_m, block_n in RANGE_CASES:
        for by_keys in (False, True):
            n = math.ceil((t_k if by_keys else t_q) / (block_n if by_keys else block_m))
            out = torch.zeros(n, 4, dtype=torch.int32, device=device)
            ranges[(n,)](out, t_q, t_k, offset, window or 0, BY_KEYS=by_keys, IS_CAUSAL=causal,
                         HAS_WINDOW=window is not None, BLOCK_M=block_m, BLOCK_N=block_n)
            found[f"{t_q} {t_k} {causal} {offset} {window} {block_m} {block_n} {by_keys}"] = out.tolist()
    return found


# (t_q, t_k, causal, offset, window, block_m, block_n)
RANGE_CASES = [
    (100, 100, False, 0, None, 16, 32),
    (100, 100, True, 0, None, 16, 16),
    (100, 100, True, 0, None, 32, 16),
    (37, 90, True, 53, None, 16, 32),
    (90, 37, True, -53, None, 32, 16),
    (90, 37, True, 0, None, 16, 16),
    (100, 100, True, 0, 40, 16, 16),
    (64, 100, True, 36, 23, 32, 16),
    (70, 50, True, 0, 5, 16, 32),
    (16, 40, True, 0, None, 32, 16),
    (64, 64, True, 0, 17, 16, 16),
]


def interpreter_checks() -> dict:
    """Everything the tests read, computed in Triton's interpreter on the CPU."""
    from attention import triton_backward, triton_forward
    from attention.triton_flash import triton_available, triton_flash_attention

    q, k, v = (torch.randn(1, 1, 20, 16, dtype=torch.float16, requires_grad=True) for _ in range(3))
    dq = torch.autograd.grad(triton_flash_attention(q, k, v), q, torch.ones_like(q), create_graph=True)[0]
    try:
        torch.autograd.grad(dq.sum(), q)
        second = "no error"
    except RuntimeError as error:
        second = str(error)
    out = triton_flash_attention(q, k, v, is_causal=True)  # (b, h, t, d_h); a gradient of stride 0 next
    expanded = torch.autograd.grad(out.sum(), (q, k, v), retain_graph=True)
    dense = torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
    kernels = (triton_forward._forward_tuned, triton_backward._backward_dkdv_tuned,
               triton_backward._backward_dq_tuned)
    return {
        "available": triton_available(),
        "cases": {name: check_case(name, case, "cpu", torch.float16) for name, case in CASES.items()},
        "variant_cases": {name: check_case(base, CASES[base], "cpu", torch.float16, extra)
                          for name, (base, extra) in VARIANT_CASES.items()},
        "last_configs": last_configs(),
        "messages": bad_input_messages(),
        "second_derivative": second,
        "limits_allowed": limits_allowed(),
        "meta_shapes": meta_shapes(),
        "huge_windows_against_none": huge_windows_against_none(),
        "numpy_sizes_against_ints": numpy_sizes_against_ints(),
        "launch_devices": launch_devices(),
        "empty_inputs": empty_inputs(),
        "strided_sinks_against_contiguous": strided_sinks_against_contiguous(),
        "blind_block_beside_an_inf": blind_block_beside_an_inf(),
        "unseen_keys_beside_an_inf": {deterministic: unseen_keys_beside_an_inf(deterministic)
                                      for deterministic in (True, False)},
        "expanded_gradient_equals_dense": all(torch.equal(a, b) for a, b in zip(expanded, dense)),
        "ranges": block_ranges(),
        "interpreter_configs": [
            [(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"]) for c in kernel.configs] for kernel in kernels
        ],
        "shared_memory_at_128": {
            kind: [triton_forward.shared_memory_bytes(kind, m, n, s, 128) for m, n, w, s in configs]
            for kind, configs in (("forward", triton_forward.FORWARD_CONFIGS),
                                  ("dkdv", triton_forward.DKDV_CONFIGS), ("dq", triton_forward.DQ_CONFIGS))
        },
    }


def blind_block_beside_an_inf(device: str = "cpu") -> float:
    """Window 3, t_q 40 > t_k 20, tiles 16 x 16: rows 32..39 (one query block) see no key, and
    the value of key 19 (seen by rows 19..21) is inf. The largest |Z| and |dQ| of rows 32..39:
    the key block 16..31 is no block of theirs, so never read, and inf · 0 never made."""
    from attention.triton_flash import triton_flash_attention

    q, k, v = (x.to(device) for x in qkv((1, 1, 40, 16), (1, 1, 20, 16), dtype=torch.float32, to=torch.float16))
    v[0, 0, 19] = math.inf
    q.requires_grad_()
    out = triton_flash_attention(q, k, v, is_causal=True, window=3, block_m=16, block_n=16)
    dq = torch.autograd.grad(out, q, torch.ones_like(out))[0]
    return max(out[..., 32:, :].abs().max().item(), dq[..., 32:, :].abs().max().item())


def unseen_keys_beside_an_inf(deterministic: bool, device: str = "cpu") -> dict[str, float]:
    """Causal, t_q 16 < t_k 40, top-left, tiles 32 x 16: no query sees keys 16..39, and the value
    of key 20 is inf. The largest |Z| and |dQ| (every row: the atomic dQ adds each key block's
    share to all of them) and |dK|, |dV| of keys 16..39: their key blocks run no query block,
    not even the one of 32 rows that the first unseen key's position rounds down to."""
    from attention.triton_flash import triton_flash_attention

    q, k, v = (x.to(device) for x in qkv((1, 1, 16, 16), (1, 1, 40, 16), dtype=torch.float32, to=torch.float16))
    v[0, 0, 20] = math.inf
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    out = triton_flash_attention(q, k, v, is_causal=True, block_m=32, block_n=16,
                                 deterministic=deterministic)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
    return {"out, dQ": max(out.abs().max().item(), dq.abs().max().item()),
            "unseen dK, dV": max(dk[..., 16:, :].abs().max().item(), dv[..., 16:, :].abs().max().item())}


def strided_sinks_against_contiguous() -> dict[str, float]:
    """The largest difference of the output and dsinks between sinks given as a slice (stride 2)
    or an expanded scalar (stride 0) and the same sinks laid out contiguously."""
    from attention.triton_flash import triton_flash_attention

    q = qkv((1, 4, 20, 16), dtype=torch.float32, to=torch.float16)[0]
    found = {}
    for name, sinks in (("slice", torch.randn(8)[::2]), ("expanded", torch.tensor([3.0]).expand(4))):
        results = []
        for s in (sinks, sinks.contiguous()):
            s = s.detach().requires_grad_()
            out = triton_flash_attention(q, q, q, is_causal=True, sinks=s)
            results.append((out, torch.autograd.grad(out.float().sum(), s)[0]))
        (out, dsinks), (dense_out, dense_dsinks) = results
        found[name] = max((out - dense_out).abs().max().item(), (dsinks - dense_dsinks).abs().max().item())
    return found


EMPTY_CASES = {"no batch": ((0, 2, 16, 16), (0, 2, 16, 16)), "no heads": ((1, 0, 16, 16), (1, 0, 16, 16)),
               "no queries": ((1, 2, 0, 16), (1, 2, 16, 16)), "no keys": ((1, 2, 16, 16), (1, 2, 0, 16))}


def empty_inputs() -> dict[str, object]:
    """For each of EMPTY_CASES (query shape, key shape), with sinks: the shapes of the output and
    of dQ, dK, dV, dsinks, and the largest |x| of each (0.0 for an empty one), or the error."""
    from attention.triton_flash import triton_flash_attention

    found: dict[str, object] = {}
    for name, (q_shape, k_shape) in EMPTY_CASES.items():
        q, k, v = qkv(q_shape, k_shape, dtype=torch.float32, to=torch.float16, requires_grad=True)
        sinks = torch.zeros(q_shape[1], requires_grad=True)
        try:
            out = triton_flash_attention(q, k, v, is_causal=True, sinks=sinks)
            results = [out, *torch.autograd.grad(out, (q, k, v, sinks), torch.ones_like(out))]
        except Exception as error:  # noqa: BLE001 - the test shows what was raised
            found[name] = f"{type(error).__name__}: {error}"
            continue
        found[name] = [[list(x.shape), x.abs().max().item() if x.numel() else 0.0] for x in results]
    return found


def launch_devices() -> list[str]:
    """Each kernel launch, forward then backward, and the device whose guard was open around it:
    the package's guard and launchers replaced by ones that record."""
    from attention import triton_flash

    forward_kernels, backward_kernels = triton_flash._kernels()
    found: list[str] = []
    open_guards: list[str] = []
    guard = triton_flash._on_device

    @contextlib.contextmanager
    def recording(tensor: torch.Tensor):
        open_guards.append(str(tensor.device))
        with guard(tensor):
            yield
        open_guards.pop()

    def recorded(name: str, launch):
        def run(*args, **kwargs):
            found.append(f"{name} in the guard of {open_guards[-1] if open_guards else None}")
            return launch(*args, **kwargs)
        return run

    patches = [(triton_flash, "_on_device", recording),
               (forward_kernels, "forward", recorded("forward", forward_kernels.forward)),
               (backward_kernels, "backward", recorded("backward", backward_kernels.backward))]
    saved = [(module, name, getattr(module, name)) for module, name, _ in patches]
    for module, name, replacement in patches:
        setattr(module, name, replacement)
    try:
        q, k, v = qkv((1, 1, 20, 16), (1, 1, 20, 16), dtype=torch.float32, to=torch.float16)
        q.requires_grad_(True)
        triton_flash.triton_flash_attention(q, k, v).sum().backward()
    finally:
        for module, name, original in saved:
            setattr(module, name, original)
    return found


def numpy_sizes_against_ints() -> object:
    """The largest difference of the output with block_m, block_n and window as NumPy integers
    from the output with Python ints, or the error raised."""
    import numpy as np

    from attention.triton_flash import triton_flash_attention

    q, k, v = qkv((1, 1, 20, 16), (1, 1, 20, 16), dtype=torch.float32, to=torch.float16)
    sizes = {"block_m": 16, "block_n": 16, "window": 5}
    want = triton_flash_attention(q, k, v, is_causal=True, **sizes)
    try:
        got = triton_flash_attention(q, k, v, is_causal=True,
                                     **{name: np.int64(n) for name, n in sizes.items()})
    except Exception as error:  # noqa: BLE001 - the test shows what was raised
        return f"{type(error).__name__}: {error}"
    return (got - want).abs().max().item()


def huge_windows_against_none() -> dict[str, object]:
    """For windows of 2**31 .. 2**70 keys, the largest difference of the output and dQ from
    those without a window (causal, both alignments), or the error raised."""
    from attention.triton_flash import triton_flash_attention

    q, k, v = qkv((1, 1, 20, 16), (1, 1, 36, 16), dtype=torch.float32, to=torch.float16, requires_grad=True)
    found: dict[str, object] = {}
    for alignment in ("top_left", "bottom_right"):
        results = []
        for window in (None, 2**31, 2**63 - 1, 2**63, 2**70):
            try:
                out = triton_flash_attention(q, k, v, is_causal=True, alignment=alignment, window=window)
            except Exception as error:  # noqa: BLE001 - the test shows what was raised
                found[f"{alignment} {window}"] = f"{type(error).__name__}: {error}"
                continue
            out_and_dq = (out, torch.autograd.grad(out.sum(), q)[0])
            if window is None:
                results = out_and_dq
            else:
                found[f"{alignment} {window}"] = max((x - r).abs().max().item() for x, r in zip(out_and_dq, results))
    return found


def meta_shapes() -> object:
    """The output's and the gradients' shapes and devices for meta tensors (GQA, causal, sinks),
    or the error raised."""
    from attention.triton_flash import triton_flash_attention

    q = torch.empty(2, 4, 20, 16, dtype=torch.float16, device="meta", requires_grad=True)
    k, v = (torch.empty(2, 2, 36, 16, dtype=torch.float16, device="meta", requires_grad=True) for _ in range(2))
    sinks = torch.empty(4, device="meta", requires_grad=True)
    try:
        out = triton_flash_attention(q, k, v, is_causal=True, enable_gqa=True, sinks=sinks)
        grads = torch.autograd.grad(out, (q, k, v, sinks), torch.ones_like(out))
    except Exception as error:  # noqa: BLE001 - the test shows what was raised
        return f"{type(error).__name__}: {error}"
    return [[list(x.shape), str(x.device)] for x in (out, *grads)]


def limits_allowed() -> list[str]:
    """What the checks say at the limits themselves: b · h = 65,535, and a slice whose last offset
    is 2**31 - 1."""
    from attention.triton_flash import _check_slice_offsets, _check_tensors

    found = []
    most = torch.randn(1, 1, 16, 64, dtype=torch.float16).expand(255, 257, 16, 64)  # b · h = 65,535
    for check, args in ((_check_tensors, (most, most, most, False)),
                        (_check_slice_offsets, ("key", (1, 1, 2, 64), (2**31, 2**31, 2**31 - 64, 1)))):
        try:
            check(*args)
            found.append("no error")
        except ValueError as error:
            found.append(str(error))
    return found


def last_configs() -> dict:
    """What ``triton_last_configs`` reports after a forward pass, then after each backward pass."""
    from attention.triton_flash import triton_flash_attention, triton_last_configs

    q = torch.randn(1, 1, 20, 16, dtype=torch.float16, requires_grad=True)
    found = {}
    for deterministic in (True, False):
        out = triton_flash_attention(q, q, q, deterministic=deterministic)
        found[f"forward, deterministic={deterministic}"] = triton_last_configs()
        out.backward(torch.ones_like(out))
        found[f"backward, deterministic={deterministic}"] = triton_last_configs()
    for blocks in ({"block_m": 16, "block_n": 32}, {"block_m": 32}, {"block_n": 32}):
        triton_flash_attention(q, q, q, **blocks)
        found[f"forward, {blocks}"] = triton_last_configs()
    return found


def cuda_checks() -> dict:
    """On a GPU, every case in bfloat16, which the interpreter cannot check (float16 it checks),
    with the provenance of the run (commit, torch, Triton, device, driver, date, command)."""
    from attention.bench.provenance import command_line, provenance

    cases = {**CASES, **CUDA_CASES}
    found = {f"{name}, bfloat16": check_case(name, case, "cuda", torch.bfloat16) for name, case in cases.items()}
    found |= {f"{name}, bfloat16": check_case(base, CASES[base], "cuda", torch.bfloat16, extra)
              for name, (base, extra) in VARIANT_CASES.items()}
    from attention.triton_flash import TritonOptions, triton_flash_attention

    x = torch.randn(1, 1, 16, 64, dtype=torch.bfloat16, device="cuda")
    try:
        triton_flash_attention(x, x, x, options=TritonOptions(warp_specialize=True))
        warp_specialize = "allowed"
    except ValueError as error:
        warp_specialize = str(error)
    return {"provenance": provenance(torch.device("cuda"), command_line(None)), "cases": found,
            "warp_specialize": warp_specialize,
            "ranges": block_ranges("cuda"), "blind_block_beside_an_inf": blind_block_beside_an_inf("cuda"),
            "unseen_keys_beside_an_inf": {deterministic: unseen_keys_beside_an_inf(deterministic, "cuda")
                                          for deterministic in (True, False)}}


def run_this_file(mode: str, **env: str) -> dict:
    """This file as a script in a fresh interpreter with ``env`` changed; its JSON output."""
    environment = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, __file__, mode], env=environment | env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def assert_flashattention_rule(case: str, result: dict) -> None:
    """FlashAttention's rule; for the sinks' gradient, a sum over every row of one number each,
    the bound is twice the larger of the plain error and the error that D's rounded output adds."""
    for name, (ours, plain, *rounding) in result["errors"].items():
        bound = max([plain, *rounding])
        assert ours <= 2 * bound, f"{case} {name}: error {ours:.3g} > 2 x {bound:.3g}, the plain one"


@pytest.fixture(scope="module")
def interpreted() -> dict:
    """The kernels' results and error messages, from one process running Triton's interpreter."""
    return run_this_file("interpreter", TRITON_INTERPRET="1")


@needs_triton
@pytest.mark.parametrize("case", CASES)
def test_forward_and_backward_meet_flashattention_rule_in_the_interpreter(interpreted, case):
    assert interpreted["available"][0] and "interpreter" in interpreted["available"][1]
    result = interpreted["cases"][case]
    assert result["dtypes"] == ["torch.float16"] and result["shapes_match"]
    assert_flashattention_rule(case, result)


@needs_triton
@pytest.mark.parametrize("case", VARIANT_CASES)
def test_atomic_dq_sinks_and_options_meet_flashattention_rule_in_the_interpreter(interpreted, case):
    result = interpreted["variant_cases"][case]
    assert result["dtypes"] == ["torch.float16"] and result["shapes_match"]
    assert ("dsinks" in result["errors"]) == ("sinks" in case)
    assert_flashattention_rule(case, result)
    if "rows that see no key" in case:
        assert result["rows_without_keys"] and result["their_largest_out_and_dq"] == 0.0


@needs_triton
def test_the_configs_that_ran_are_reported_per_kernel(interpreted):
    one = [16, 16, 4, 1]  # the interpreter's one configuration
    assert {key: value for key, value in interpreted["last_configs"].items() if "block" not in key} == {
        "forward, deterministic=True": {"forward": one},
        "backward, deterministic=True": {"forward": one, "dkdv": one, "dq": one},
        "forward, deterministic=False": {"forward": one},
        "backward, deterministic=False": {"forward": one, "dkdv": one},
    }


@needs_triton
def test_blocks_given_are_the_tiles_that_run_and_the_other_one_defaults_to_64(interpreted):
    """block_m and block_n fix the tiles (4 warps, Triton's default 3 stages); one given alone
    leaves the other at 64."""
    assert {key: value for key, value in interpreted["last_configs"].items() if "block" in key} == {
        "forward, {'block_m': 16, 'block_n': 32}": {"forward": [16, 32, 4, 3]},
        "forward, {'block_m': 32}": {"forward": [32, 64, 4, 3]},
        "forward, {'block_n': 32}": {"forward": [64, 32, 4, 3]},
    }


@needs_triton
def test_rows_that_see_no_key_are_zero_with_zero_gradient(interpreted):
    cases = {name: r for name, r in interpreted["cases"].items() if r["rows_without_keys"]}
    assert sorted(cases) == [
        "t_q 40 > t_k 24, bottom-right: rows that see no key",
        "window 3, t_q 30 > t_k 20, top-left: late rows see nothing",
    ]
    assert all(r["their_largest_out_and_dq"] == 0.0 for r in cases.values())


def assert_block_ranges(found: dict) -> None:
    """Every loop of every program: the blocks it skips hold no visible score, the blocks it runs
    unmasked are seen whole by every row, no block seen whole is left to the masked loops, and
    it runs no block without a visible score (its keys are never read)."""
    for t_q, t_k, causal, offset, window, block_m, block_n in RANGE_CASES:
        seen = visible(t_q, t_k, causal, offset, window)  # (t_q, t_k)
        for by_keys in (False, True):
            key = f"{t_q} {t_k} {causal} {offset} {window} {block_m} {block_n} {by_keys}"
            ranges = found[key]
            # The program's rows are a block of queries (or keys); its loop runs over the other.
            own, other = (block_n, block_m) if by_keys else (block_m, block_n)
            matrix = seen.T if by_keys else seen  # (own rows, loop rows)
            for i, (lo, mid_lo, mid_hi, hi) in enumerate(ranges):
                block = matrix[i * own : (i + 1) * own]  # (rows of this program, every loop row)
                where = f"{'key' if by_keys else 'query'} block {i} of {(t_q, t_k, causal, offset, window)}"
                assert lo % other == 0 and lo <= mid_lo <= mid_hi <= hi, where
                assert not block[:, :lo].any() and not block[:, hi:].any(), where
                inside = range(0, matrix.shape[1] - other + 1, other)  # loop blocks inside the sequence
                whole = [s for s in inside if block[:, s : s + other].all()]
                assert [s for s in range(mid_lo, mid_hi, other)] == whole, where
                # and every block the loops run holds a visible score: none is read for nothing
                some = [s for s in range(0, matrix.shape[1], other) if block[:, s : s + other].any()]
                assert list(range(lo, hi, other)) == some, where


@needs_triton
def test_causal_split_masks_only_the_blocks_that_need_it(interpreted):
    assert_block_ranges(interpreted["ranges"])


@needs_triton
def test_a_query_block_that_sees_no_key_reads_none(interpreted):
    """Rows past the keys' end under a window: zero output and gradient, even beside an inf in a
    value other rows see (the block range once ran the key block its window start rounds down to)."""
    assert interpreted["blind_block_beside_an_inf"] == 0.0


@needs_triton
def test_a_key_block_that_no_query_sees_is_read_by_none(interpreted):
    """Keys past every causal row (t_q < t_k, top-left): their dK and dV are 0 and every output
    and dQ finite, even with an inf in their values (the block range once ran them), for the
    deterministic dQ and the atomic one."""
    for deterministic, found in interpreted["unseen_keys_beside_an_inf"].items():
        assert math.isfinite(found["out, dQ"]) and found["unseen dK, dV"] == 0.0, (deterministic, found)


@needs_triton
def test_sinks_are_read_through_their_strides(interpreted):
    """A slice or an expanded scalar as sinks gives what the same logits laid out contiguously
    give: the kernel once read sink i at i elements from the start, whatever the stride."""
    assert interpreted["strided_sinks_against_contiguous"] == {"slice": 0.0, "expanded": 0.0}


@needs_triton
def test_no_batch_or_no_heads_give_an_empty_output_as_sdpa(interpreted):
    """b = 0 or h = 0: the output (b, h, t_q, d_h) and every gradient empty, as torch's
    scaled_dot_product_attention gives them; h = 0 raised a ZeroDivisionError (h // h_kv)."""
    found = interpreted["empty_inputs"]
    assert {name: found[name] for name in ("no batch", "no heads")} == {
        "no batch": [[[0, 2, 16, 16], 0.0], [[0, 2, 16, 16], 0.0], [[0, 2, 16, 16], 0.0],
                     [[0, 2, 16, 16], 0.0], [[2], 0.0]],
        "no heads": [[[1, 0, 16, 16], 0.0], [[1, 0, 16, 16], 0.0], [[1, 0, 16, 16], 0.0],
                     [[1, 0, 16, 16], 0.0], [[0], 0.0]],
    }


@needs_triton
def test_no_queries_or_no_keys_give_what_sdpa_gives(interpreted):
    """t_q = 0: an empty output; t_k = 0: every row sees no key, so it is 0 with gradient 0 (the
    sinks' too: their value is 0), as torch's scaled_dot_product_attention and flash_attention
    give them. Both were refused ("t_q and t_k must be positive")."""
    found = interpreted["empty_inputs"]
    assert {name: found[name] for name in ("no queries", "no keys")} == {
        "no queries": [[[1, 2, 0, 16], 0.0], [[1, 2, 0, 16], 0.0], [[1, 2, 16, 16], 0.0],
                       [[1, 2, 16, 16], 0.0], [[2], 0.0]],
        "no keys": [[[1, 2, 16, 16], 0.0], [[1, 2, 16, 16], 0.0], [[1, 2, 0, 16], 0.0],
                    [[1, 2, 0, 16], 0.0], [[2], 0.0]],
    }


@needs_triton
def test_a_window_wider_than_the_sequences_is_no_window_at_any_size(interpreted):
    """A window of at least max(t_q, t_k) keys hides nothing: it gives the causal answer, up to
    2**70 keys. Past 2**63 - 1 Triton typed it as an unsigned int64 and the mask wrapped
    (output off by 3.4), past 2**64 it raised an OverflowError."""
    assert interpreted["huge_windows_against_none"] == {
        f"{alignment} {window}": 0.0
        for alignment in ("top_left", "bottom_right") for window in (2**31, 2**63 - 1, 2**63, 2**70)
    }


@needs_triton
def test_numpy_integers_are_taken_for_the_tiles_and_the_window(interpreted):
    """block_m, block_n and window as NumPy integers give the Python ints' answer, as sizes are
    taken everywhere in the package; they were refused ("must be a power of two >= 16")."""
    assert interpreted["numpy_sizes_against_ints"] == 0.0


@needs_triton
def test_each_launch_is_guarded_to_the_inputs_device(interpreted):
    """Forward and backward launch inside the guard that makes the inputs' GPU current (the CPU
    here, where the guard does nothing): Triton launches on the current device."""
    assert interpreted["launch_devices"] == ["forward in the guard of cpu", "backward in the guard of cpu"]


@needs_triton
def test_the_guard_makes_the_inputs_gpu_current():
    """A tensor on cuda:1 makes cuda:1 current (torch.cuda.device(1)), whatever is current now;
    a CPU or meta tensor changes nothing. A stand-in tensor: this runs without a GPU."""
    from attention import triton_flash

    on_gpu_1 = types.SimpleNamespace(is_cuda=True, device=torch.device("cuda", 1))
    guard = triton_flash._on_device(on_gpu_1)
    assert isinstance(guard, torch.cuda.device) and guard.idx == 1
    for tensor in (torch.zeros(1), torch.zeros(1, device="meta")):
        assert isinstance(triton_flash._on_device(tensor), contextlib.nullcontext)


@needs_triton
def test_meta_tensors_give_the_shapes_as_sdpa(interpreted):
    """On the meta device the output and gradients have their shapes, as torch's
    scaled_dot_product_attention and flash_attention give them, so that a model built on meta
    can be traced; meta tensors were refused ("must be on cpu")."""
    assert interpreted["meta_shapes"] == [[[2, 4, 20, 16], "meta"], [[2, 4, 20, 16], "meta"],
                                          [[2, 2, 36, 16], "meta"], [[2, 2, 36, 16], "meta"],
                                          [[4], "meta"]]


@needs_triton
def test_b_h_of_65535_and_slice_offsets_of_int32_max_are_allowed(interpreted):
    assert interpreted["limits_allowed"] == ["no error", "no error"]


@needs_triton
def test_a_second_derivative_raises(interpreted):
    assert interpreted["second_derivative"].startswith("triton_flash_attention has first derivatives only")


@needs_triton
def test_the_gradient_of_a_sum_is_read_through_its_zero_strides(interpreted):
    assert interpreted["expanded_gradient_equals_dense"]


@needs_triton
def test_one_fixed_config_in_the_interpreter_and_gpu_configs_fit_an_a100(interpreted):
    assert interpreted["interpreter_configs"] == [[[16, 16]]] * 3
    a100 = 163 * 1024  # shared memory a thread block may use on compute capability 8.0
    for kind, sizes in interpreted["shared_memory_at_128"].items():
        assert sizes and max(sizes) <= a100, (kind, sizes)


@needs_triton
class TestBadInput:
    def test_same_errors_as_before_and_each_option_named(self, interpreted):
        assert interpreted["messages"] == [
            "query must be float16 or bfloat16, got torch.float32",
            "d_h must be one of (16, 32, 64, 128), got 48",
            "block_m must be a power of two >= 16, got 24",
            "key and value must have the same number of tokens t_k, got 8 and 16",
            "key and value must have shape (1, 4, t_k, 64), got (1, 2, 16, 64) and (1, 2, 16, 64)",
            "with enable_gqa, key and value must have the same number of heads h_kv, and h must be a "
            "multiple of it, got h = 4, key heads 3 and value heads 3",
            "alignment must be one of ('top_left', 'bottom_right'), got 'bottom-right'",
            "window must be None or an integer >= 1, got 0",
            "window and alignment apply to causal attention only: pass is_causal=True, "
            "got is_causal=False, window=4, alignment='top_left'",
            "query must have shape (b, h, t, d_h), got shape (1, 16, 64)",
            "query, key, value must share one dtype, got query torch.float16 on cpu, key "
            "torch.bfloat16 on cpu, value torch.float16 on cpu",
            "sinks must be a float tensor of shape (h,) = (4,), one logit per query head of a query (..., h, t_q, "
            "d_k), on cpu, got shape (2,) and dtype torch.float32 on cpu",
            "descriptors need query's last axis contiguous, its other strides multiples of 8 and its start "
            "16-byte aligned, got strides (1040, 1040, 65, 1), start at byte 0 of 16",
            "options must be a TritonOptions, got dict",
            "b · h must be at most 65535 (CUDA's grid limit), got b · h = 256 · 257 = 65792",
            "descriptors need query's last axis contiguous, its other strides multiples of 8 and its start "
            "16-byte aligned, got strides (2048, 2048, 128, 2), start at byte 0 of 16",
            "descriptors need query's last axis contiguous, its other strides multiples of 8 and its start "
            "16-byte aligned, got strides (1024, 1024, 64, 1), start at byte 8 of 16",
            "block_m must be a power of two >= 16, got 8",
            "block_n must be a power of two >= 16, got 16.0",
            "key must be a torch.Tensor, got list",
            "enable_gqa must be a bool, got 'no' of type str",
            "deterministic must be a bool, got 0 of type int",
            "key: the offset of the last element of a (batch, head) slice must be at most 2147483647 (int32), "
            "got (t - 1) · stride_t + (d_h - 1) · stride_d = 2147483711",
        ]

    def test_warp_specialize_is_refused_below_blackwell(self):
        from attention.triton_flash import TritonOptions, _check_tuning

        x = torch.randn(1, 1, 16, 64, dtype=torch.float16)
        options = TritonOptions(warp_specialize=True)
        with pytest.raises(ValueError, match=r"compute capability 10\.0 or later \(Blackwell\), got 9\.0$"):
            _check_tuning(options, (x, x, x), (9, 0))
        for capability in (None, (10, 0), (12, 1)):  # the interpreter, Blackwell
            _check_tuning(options, (x, x, x), capability)

    @pytest.mark.skipif(HAS_CUDA, reason="checks the message given without CUDA")
    def test_without_cuda_the_error_says_why(self):
        from attention.triton_flash import triton_available, triton_flash_attention

        if os.environ.get("TRITON_INTERPRET"):
            pytest.skip("TRITON_INTERPRET is set in this process: the interpreter is available")
        ok, reason = triton_available()
        assert not ok and "no CUDA device" in reason
        x = torch.randn(1, 1, 16, 64, dtype=torch.float16)
        with pytest.raises(RuntimeError, match="cannot run here: no CUDA device"):
            triton_flash_attention(x, x, x)

    @pytest.mark.parametrize("value", NON_BOOLS)
    @pytest.mark.parametrize("flag", ["longest_first", "descriptors", "warp_specialize"])
    def test_flags_must_be_bools(self, flag: str, value: object) -> None:
        """The options' flags; those of triton_flash_attention itself are refused in the
        interpreter's messages above."""
        from attention.triton_flash import TritonOptions

        with refuses_non_bool(flag, value):
            TritonOptions(**{flag: value})


@pytest.mark.skipif(not (HAS_TRITON and HAS_CUDA), reason=why_no_triton() if not HAS_TRITON else (
    "needs a CUDA GPU: Triton's interpreter computes tl.dot on bfloat16 tiles wrongly, so bfloat16 "
    "and the compiled, autotuned kernels are checked on a GPU only"))
class TestCudaOnly:
    def test_float16_and_bfloat16_meet_flashattention_rule(self):
        checks = run_this_file("cuda")
        assert {"commit", "dirty"} <= set(checks["provenance"]["git"]) and checks["provenance"]["triton"]
        for case, result in checks["cases"].items():
            assert result["shapes_match"], case
            assert_flashattention_rule(case, result)
        assert (checks["warp_specialize"] == "allowed") == blackwell(), checks["warp_specialize"]
        # compiled, the checks that the tests below run interpreted
        assert_block_ranges(checks["ranges"])
        assert checks["blind_block_beside_an_inf"] == 0.0
        assert all(math.isfinite(found["out, dQ"]) and found["unseen dK, dV"] == 0.0
                   for found in checks["unseen_keys_beside_an_inf"].values())


@needs_triton
@pytest.mark.skipif(HAS_CUDA, reason="checks the switch between no CUDA and the interpreter")
def test_triton_interpreter_switches_the_interpreter_on_and_off_in_one_process():
    """Triton imported first, without TRITON_INTERPRET (as after torch.compile): inside the block
    the kernels run interpreted, the variable is restored after it, and the kernels run again."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import json, os
        import triton, torch
        from attention.triton_flash import triton_available, triton_flash_attention, triton_interpreter

        q = torch.randn(1, 1, 20, 16, dtype=torch.float16)
        with triton_interpreter():
            inside = triton_available()[0]
            first = triton_flash_attention(q, q, q, is_causal=True)
        after = (triton_available()[0], "TRITON_INTERPRET" in os.environ)
        with triton_interpreter():
            again = triton_flash_attention(q, q, q, is_causal=True)
        print(json.dumps({"inside": inside, "after": after, "same": torch.equal(first, again),
                          "finite": bool(first.isfinite().all())}))
        """)], env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"},
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"inside": True, "after": [False, False], "same": True, "finite": True}


def test_without_triton_the_error_says_why():
    done = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import json, sys
        sys.modules["triton"] = None  # what a machine without Triton sees: ImportError
        import torch
        from attention.triton_flash import triton_available, triton_flash_attention

        x = torch.randn(1, 1, 16, 64, dtype=torch.float16)
        try:
            triton_flash_attention(x, x, x)
        except RuntimeError as error:
            message = str(error)
        print(json.dumps({"available": triton_available(), "message": message}))
        """)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["available"][0] is False and "Triton is not installed" in result["available"][1]
    assert result["message"].startswith("triton_flash_attention cannot run here: Triton is not installed")


def test_without_triton_the_kernel_tests_are_skipped_with_the_reason(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """This module, collected where Triton is not installed (macOS, Windows): its kernel tests are
    skipped, each saying why. (Deselected here: the test of the package's message without
    Triton, which starts a Python process, and the tests of the skip itself.)"""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name.split(".")[0] == "triton" else find_spec(name, *args),
    )
    pytester.makefile(".py", test_kernel=Path(__file__).read_text(encoding="utf-8"))
    options = ("-p", "no:cacheprovider", "-p", "no:xdist", "-k", "not without_triton and not skip_reason")
    listed = pytester.runpytest(*options, "--collect-only", "-q").outlines
    kernel_tests = sum("::" in line for line in listed)  # every test left, the GPU class's included
    assert kernel_tests > len(CASES) + len(VARIANT_CASES)  # the parametrized rules and more
    result = pytester.runpytest(*options, "-rs")
    result.assert_outcomes(skipped=kernel_tests)
    skips = [line for line in result.stdout.lines if line.startswith("SKIPPED")]  # SKIPPED [n] file: why
    assert sum(int(line.split("[")[1].split("]")[0]) for line in skips) == kernel_tests, skips
    assert all(line.endswith(f": {why_no_triton()}") for line in skips), skips


@pytest.mark.parametrize(
    ("system", "machine", "reason"),
    [
        ("Linux", "x86_64", "Triton is not installed: pip install -r requirements.txt installs it"),
        ("Darwin", "arm64", "Triton has no wheels for Darwin arm64, only for Linux x86_64 and"),
        ("Windows", "AMD64", "Triton has no wheels for Windows AMD64, only for Linux x86_64 and"),
    ],
)
def test_the_skip_reason_names_the_platform(monkeypatch, system, machine, reason):
    monkeypatch.setattr(platform, "system", lambda: system)
    monkeypatch.setattr(platform, "machine", lambda: machine)
    assert why_no_triton().startswith(reason)


if __name__ == "__main__":  # the checks themselves, in a process of their own
    import triton
    import triton.language as tl

    from attention.triton_forward import key_range, query_range

    @triton.jit
    def ranges(OUT, T_Q, T_K, OFFSET, WINDOW, BY_KEYS: tl.constexpr, IS_CAUSAL: tl.constexpr,
               HAS_WINDOW: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        """Stores the (lo, mid_lo, mid_hi, hi) of program i's loop, as the kernels compute it."""
        i = tl.program_id(0)
        if BY_KEYS:
            lo, mid_lo, mid_hi, hi = query_range(i * BLOCK_N, T_Q, T_K, OFFSET, WINDOW, IS_CAUSAL,
                                                  HAS_WINDOW, BLOCK_M, BLOCK_N)
        else:
            lo, mid_lo, mid_hi, hi = key_range(i * BLOCK_M, T_Q, T_K, OFFSET, WINDOW, IS_CAUSAL,
                                                HAS_WINDOW, BLOCK_M, BLOCK_N)
        tl.store(OUT + 4 * i, lo)
        tl.store(OUT + 4 * i + 1, mid_lo)
        tl.store(OUT + 4 * i + 2, mid_hi)
        tl.store(OUT + 4 * i + 3, hi)

    print(json.dumps(interpreter_checks() if sys.argv[1] == "interpreter" else cuda_checks()))
