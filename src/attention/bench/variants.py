"""The implementations the benchmark times, each checked against a float64 reference first.

Notation (see CONTRIBUTING.md): b batch size, t tokens, d_in = d_out = d model width, h heads,
d_h = d / h head width.

Two levels, never mixed in one table:

- ``layer``: a whole causal self-attention layer, tokens x (b, t, d) in, context (b, t, d) out:
  the Q, K, V projections, attention, and (except for the book's wrapper) the output projection.
- ``kernel``: the attention core alone, Q, K, V (b, h, t, d_h) in, Z (b, h, t, d_h) out.

Every variant is causal. A variant's ``build`` returns a :class:`Built` whose ``forward`` runs
it once, or raises :class:`Unsupported` with the reason it cannot run here (no CUDA, no Triton,
a backend this device lacks, ...); that reason is written into the results instead of a time.
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.checkpoint import checkpoint

from .._checks import Factory
from ..causal import CausalAttention
from ..flash import default_block_sizes, flash_attention
from ..functional import scaled_dot_product_attention as explicit_attention
from ..multihead import FusedMultiHeadAttention, MultiHeadAttention, MultiHeadAttentionWrapper
from .rows import LEVELS

SDPA_BACKENDS = {
    "math": SDPBackend.MATH,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
}


class Unsupported(Exception):
    """A variant that cannot run on this device or with these options; the message says why."""


@dataclass(frozen=True)
class Problem:
    """One measurement point: level, shape, dtype, device, and forward or forward+backward."""

    level: str
    b: int
    t: int
    h: int
    d_h: int
    dtype: torch.dtype
    device: torch.device
    backward: bool

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"level must be one of {LEVELS}, got {self.level!r}")
        for name in ("b", "t", "h", "d_h"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")

    @property
    def d(self) -> int:
        """Model width d = h * d_h (d_in = d_out)."""
        return self.h * self.d_h


@dataclass
class Inputs:
    """Shared random inputs of a problem: tokens (layer) or Q, K, V (kernel), the book's layer
    whose weights every layer variant copies, and the upstream gradient for the backward pass."""

    tensors: tuple[Tensor, ...]
    grad_out: Tensor
    mha: MultiHeadAttention | None  # None at the kernel level

    @property
    def layer(self) -> MultiHeadAttention:
        """``mha``, for a layer variant: a layer-level problem always has one."""
        if self.mha is None:
            raise RuntimeError("a kernel-level problem has no layer")
        return self.mha


@dataclass
class Built:
    """A ready-to-run variant: ``forward()`` returns its output; ``out_proj`` says whether it
    applies the output projection (the book's wrapper does not); ``params`` are its weights."""

    forward: Callable[[], Tensor]
    out_proj: bool = True
    params: tuple[Tensor, ...] = ()
    config: Callable[[], dict[str, Any]] | None = None  # what the kernels last ran with


@dataclass(frozen=True)
class Variant:
    """A named implementation at one level.

    ``path`` names how it computes attention when no fused SDPA kernel is seen running (the
    benchmark records the kernel actually seen); ``compiled`` marks those needing torch.compile.
    """

    name: str
    level: str
    summary: str
    build: Callable[[Problem, Inputs], Built]
    path: str = "explicit: matmul, mask, softmax"
    compiled: bool = False
    on_request: bool = False  # run only when named in --variants (a choice of a kernel, not a kernel)


def make_inputs(problem: Problem, seed: int = 123) -> Inputs:
    """Random inputs (standard normal) and, for a layer, the book's layer with seeded weights."""
    torch.manual_seed(seed)
    p, kw = problem, Factory(device=problem.device, dtype=problem.dtype)
    if p.level == "layer":
        mha = MultiHeadAttention(p.d, p.d, p.h, p.t, 0.0).to(**kw)
        tensors: tuple[Tensor, ...] = (torch.randn(p.b, p.t, p.d, **kw),)  # x: (b, t, d)
        grad_out = torch.randn(p.b, p.t, p.d, **kw)  # (b, t, d)
    else:
        mha = None
        tensors = tuple(torch.randn(p.b, p.h, p.t, p.d_h, **kw) for _ in range(3))  # (b, h, t, d_h)
        grad_out = torch.randn(p.b, p.h, p.t, p.d_h, **kw)  # (b, h, t, d_h)
    for tensor in tensors:
        tensor.requires_grad_(p.backward)
    return Inputs(tensors, grad_out, mha)


def make_call(built: Built, problem: Problem, inputs: Inputs) -> Callable[[], Tensor]:
    """The timed call: the forward pass without autograd, or forward and backward together.

    Gradients accumulate into the inputs' (and weights') ``.grad`` from call to call, as in
    gradient accumulation; the call returns the (detached) output.
    """
    if not problem.backward:

        def forward() -> Tensor:
            with torch.no_grad():
                return built.forward()

        return forward

    def forward_backward() -> Tensor:
        out = built.forward()
        out.backward(inputs.grad_out)
        return out.detach()

    return forward_backward


REFERENCE_ROWS = 1024


def _causal_rows(q_rows: Tensor, key: Tensor, value: Tensor, start: int) -> Tensor:
    """Exact causal attention of the queries ``start, start + 1, ...`` against every key."""
    n, t = q_rows.shape[-2], key.shape[-2]
    scores = q_rows @ key.transpose(-2, -1) / q_rows.shape[-1] ** 0.5  # (b, h, n, t)
    rows = torch.arange(start, start + n, device=key.device)  # (n,) query indices
    future = torch.arange(t, device=key.device) > rows[:, None]  # (n, t)
    return torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1) @ value  # (b, h, n, d_h)


def exact_causal_attention(query: Tensor, key: Tensor, value: Tensor) -> Tensor:
    """softmax(Q Kᵀ / sqrt(d_h) + M) V, written out, REFERENCE_ROWS queries at a time.

    Each block of rows is exact (its softmax sees the whole row); only the rows are split, so
    that float64 (b, h, t, t) scores never exist at once, and checkpointing recomputes a block
    in the backward pass instead of keeping it.
    """
    blocks = [
        checkpoint(_causal_rows, query[..., s : s + REFERENCE_ROWS, :], key, value, s, use_reentrant=False)
        for s in range(0, query.shape[-2], REFERENCE_ROWS)
    ]
    return torch.cat(blocks, dim=-2)  # (b, h, t, d_h)


Reference = dict[bool, tuple[Tensor, tuple[Tensor, ...]]]


def reference(problem: Problem, inputs: Inputs) -> Reference:
    """The output, and the gradients of the input tensors, computed in float64.

    Independent of every variant: plain matmuls and softmax (:func:`exact_causal_attention`).
    Keyed by ``out_proj``: a layer's reference with its output projection (True) and without it
    (False, for the book's wrapper); a kernel has only True. Gradients are those of
    ``(output * grad_out).sum()``; empty for a forward-only problem.
    """
    p = problem
    leaves = tuple(x.detach().double().requires_grad_(p.backward) for x in inputs.tensors)
    with torch.set_grad_enabled(p.backward):
        if p.level == "kernel":
            outs = {True: exact_causal_attention(*leaves)}  # (b, h, t, d_h)
        else:
            x, mha = leaves[0], inputs.layer
            heads = []
            for proj in (mha.W_query, mha.W_key, mha.W_value):
                y = x @ proj.weight.detach().double().T  # (b, t, d)
                heads.append(y.view(p.b, p.t, p.h, p.d_h).transpose(1, 2))  # (b, h, t, d_h)
            z = exact_causal_attention(*heads)  # (b, h, t, d_h)
            z = z.transpose(1, 2).reshape(p.b, p.t, p.d)  # (b, t, d)
            W_o, b_o = (w.detach().double() for w in (mha.out_proj.weight, mha.out_proj.bias))
            outs = {True: z @ W_o.T + b_o, False: z}  # (b, t, d) each
    grad_out = inputs.grad_out.double()
    if not p.backward:
        return {key: (out.detach(), ()) for key, out in outs.items()}
    grads = {key: torch.autograd.grad(out, leaves, grad_out, retain_graph=True) for key, out in outs.items()}
    return {key: (out.detach(), grads[key]) for key, out in outs.items()}


# --------------------------------------------------------------------------- layer variants


def _train_or_eval(module: nn.Module, problem: Problem) -> nn.Module:
    return module.train(problem.backward)


def _wrapper(p: Problem, inp: Inputs) -> Built:
    wrapper = MultiHeadAttentionWrapper(p.d, p.d_h, p.h, p.t, 0.0).to(p.device, p.dtype)
    with torch.no_grad():
        # the wrapper's heads are CausalAttention (torch types a ModuleList's items Module)
        for i, head in enumerate(cast(Iterable[CausalAttention], wrapper.heads)):
            rows = slice(i * p.d_h, (i + 1) * p.d_h)
            head.W_query.weight.copy_(inp.layer.W_query.weight[rows])  # (d_h, d)
            head.W_key.weight.copy_(inp.layer.W_key.weight[rows])  # (d_h, d)
            head.W_value.weight.copy_(inp.layer.W_value.weight[rows])  # (d_h, d)
    module = _train_or_eval(wrapper, p)
    return Built(lambda: module(inp.tensors[0]), out_proj=False, params=tuple(module.parameters()))


def _book_mha(p: Problem, inp: Inputs) -> Built:
    module = _train_or_eval(inp.layer, p)
    return Built(lambda: module(inp.tensors[0]), params=tuple(module.parameters()))


def _fused(use_sdpa: bool, backend: str | None = None) -> Callable[[Problem, Inputs], Built]:
    def build(p: Problem, inp: Inputs) -> Built:
        fused = FusedMultiHeadAttention.from_multihead(inp.layer)
        fused.use_sdpa = use_sdpa
        module, x = _train_or_eval(fused, p), inp.tensors[0]
        if backend is None:
            return Built(lambda: module(x), params=tuple(module.parameters()))

        def forward() -> Tensor:
            with sdpa_kernel(SDPA_BACKENDS[backend]):
                return module(x)

        return Built(forward, params=tuple(module.parameters()))

    return build


def _torch_mha(p: Problem, inp: Inputs) -> Built:
    torch_mha = nn.MultiheadAttention(p.d, p.h, batch_first=True, device=p.device, dtype=p.dtype)
    mha = inp.layer
    with torch.no_grad():
        stacked = torch.cat([mha.W_query.weight, mha.W_key.weight, mha.W_value.weight])  # (3d, d)
        torch_mha.in_proj_weight.copy_(stacked)
        torch_mha.in_proj_bias.zero_()
        torch_mha.out_proj.load_state_dict(mha.out_proj.state_dict())
    module, x = _train_or_eval(torch_mha, p), inp.tensors[0]
    mask = nn.Transformer.generate_square_subsequent_mask(p.t, device=p.device, dtype=p.dtype)  # (t, t)

    def forward() -> Tensor:
        return module(x, x, x, attn_mask=mask, need_weights=False, is_causal=True)[0]

    return Built(forward, params=tuple(module.parameters()))


def _compiled(build: Callable[[Problem, Inputs], Built]) -> Callable[[Problem, Inputs], Built]:
    """The same variant with its module compiled by torch.compile for this exact shape."""

    def build_compiled(p: Problem, inp: Inputs) -> Built:
        torch._dynamo.reset()  # a fresh compile per shape, never a silent fallback to eager
        built = build(p, inp)
        compiled = torch.compile(built.forward, dynamic=False, fullgraph=True)
        return Built(compiled, built.out_proj, built.params)

    return build_compiled


# -------------------------------------------------------------------------- kernel variants


def _explicit(p: Problem, inp: Inputs) -> Built:
    q, k, v = inp.tensors
    return Built(lambda: explicit_attention(q, k, v, is_causal=True))


def _sdpa(backend: str) -> Callable[[Problem, Inputs], Built]:
    def build(p: Problem, inp: Inputs) -> Built:
        q, k, v = inp.tensors

        def forward() -> Tensor:
            with sdpa_kernel(SDPA_BACKENDS[backend]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        return Built(forward)

    return build


def _flex(p: Problem, inp: Inputs) -> Built:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def causal(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return q_idx >= kv_idx

    if p.backward and p.device.type == "cpu":
        raise Unsupported("FlexAttention has no backward pass on CPU (torch raises NotImplementedError)")
    torch._dynamo.reset()
    q, k, v = inp.tensors
    block_mask = create_block_mask(causal, None, None, p.t, p.t, device=p.device)
    flex = torch.compile(flex_attention, dynamic=False, fullgraph=True)
    return Built(lambda: flex(q, k, v, block_mask=block_mask))


def _flash_attention(p: Problem, inp: Inputs) -> Built:
    q, k, v = inp.tensors
    tiles = list(default_block_sizes(q.shape[-2], k.shape[-2]))  # [B_q, B_k]: its default's
    return Built(lambda: flash_attention(q, k, v, is_causal=True), config=lambda: {"tiles": tiles})


def _triton(deterministic: bool = True, **options: bool) -> Callable[[Problem, Inputs], Built]:
    """Our Triton kernels with dQ in its own pass (``deterministic``) or atomic, and the
    :class:`~attention.triton_flash.TritonOptions` named in ``options`` on."""

    def build(p: Problem, inp: Inputs) -> Built:
        from ..triton_flash import TritonOptions, triton_available, triton_flash_attention, triton_last_configs

        ok, reason = triton_available()
        if not ok:
            raise Unsupported(reason)
        if p.dtype not in (torch.float16, torch.bfloat16):
            raise Unsupported(f"kernel runs in float16/bfloat16, not {p.dtype}")
        q, k, v = inp.tensors
        tuning = TritonOptions(**options)
        built = Built(lambda: triton_flash_attention(q, k, v, is_causal=True, deterministic=deterministic,
                                                     options=tuning),
                      config=lambda: {kernel: list(c) for kernel, c in triton_last_configs().items()})
        make_call(built, p, inp)()  # the first call of a shape autotunes (compiles, times each config): untimed
        return built

    return build


# Our kernel's choices a GPU run compares with its default (chapter 7 prints the H200's timings).
_TRITON_CHOICES = (
    ("atomic-dq", "deterministic=False: dQ by float32 atomics, 5 products a tile", _triton(deterministic=False)),
    ("longest-first", "TritonOptions(longest_first=True)", _triton(longest_first=True)),
    ("descriptors", "TritonOptions(descriptors=True): tensor descriptors (TMA)", _triton(descriptors=True)),
    ("warp-specialize", "TritonOptions(warp_specialize=True)", _triton(warp_specialize=True)),
)
_INDUCTOR = "inductor-generated code"
_FORCED = "FusedMultiHeadAttention, SDPA forced to"
VARIANTS: tuple[Variant, ...] = (
    Variant("wrapper", "layer", "book: MultiHeadAttentionWrapper, no output projection", _wrapper),
    Variant("mha", "layer", "book: MultiHeadAttention, split heads, explicit softmax", _book_mha),
    Variant("fused-explicit", "layer", "FusedMultiHeadAttention(use_sdpa=False)", _fused(False)),
    Variant("fused-sdpa", "layer", "FusedMultiHeadAttention(use_sdpa=True), torch picks", _fused(True)),
    *(Variant(f"fused-sdpa[{n}]", "layer", f"{_FORCED} {n}", _fused(True, n)) for n in SDPA_BACKENDS),
    Variant("torch-mha", "layer", "torch.nn.MultiheadAttention(need_weights=False)", _torch_mha),
    Variant("compiled-mha", "layer", "torch.compile(book MultiHeadAttention)", _compiled(_book_mha),
            _INDUCTOR, compiled=True),
    Variant("compiled-fused-sdpa", "layer", "torch.compile(FusedMultiHeadAttention, SDPA)",
            _compiled(_fused(True)), _INDUCTOR, compiled=True),
    Variant("explicit", "kernel", "attention.scaled_dot_product_attention (explicit)", _explicit),
    *(Variant(f"sdpa[{n}]", "kernel", f"F.scaled_dot_product_attention forced to {n}", _sdpa(n))
      for n in SDPA_BACKENDS),
    Variant("flex", "kernel", "torch.compile(flex_attention), causal block mask", _flex,
            "inductor flex template", compiled=True),
    Variant("flash_attention", "kernel", "attention.flash_attention (tiles in PyTorch)", _flash_attention,
            "tiled loop in PyTorch"),
    Variant("triton", "kernel", "attention.triton_flash_attention (our Triton kernel)", _triton(),
            "Triton kernel"),
    *(Variant(f"triton[{name}]", "kernel", f"attention.triton_flash_attention, {summary}", build, "Triton kernel",
              on_request=True) for name, summary, build in _TRITON_CHOICES),
)


def variants_for(level: str, names: list[str] | None = None) -> list[Variant]:
    """The variants of a level, in the order of :data:`VARIANTS`: those named, if given, else all
    but those run only on request."""
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    known = {v.name for v in VARIANTS}
    unknown = sorted(set(names or []) - known)
    if unknown:
        raise ValueError(f"variant names must be among {sorted(known)}, got unknown {unknown}")
    return [v for v in VARIANTS
            if v.level == level and (v.name in names if names is not None else not v.on_request)]


def get_variant(name: str) -> Variant:
    """The variant called ``name``."""
    for variant in VARIANTS:
        if variant.name == name:
            return variant
    raise ValueError(f"variant name must be among {[v.name for v in VARIANTS]}, got {name!r}")
