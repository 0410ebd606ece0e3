"""The gated delta layer as Qwen3-Next ships it: Gated DeltaNet with its projections, short
convolution, normalised queries and keys, learned decay and gated output norm.

Notation (see CONTRIBUTING.md):
    b, t   batch size, tokens;  d   residual width (``d_model``)
    h_k    query/key heads of width d_k;  h_v value heads of width d_v (h_v a multiple of h_k)
    w_conv  width of the causal depthwise convolution (``conv_size``)

Per token, from the residual stream x (Qwen3-Next's ``Qwen3NextGatedDeltaNet``):
    q, k, v = SiLU(causal_conv(x W_q, x W_k, x W_v))    each channel mixes its last w_conv tokens
    q, k    = q / |q|, k / |k|                           L2 norm per head (a bounded write)
    beta    = sigmoid(x W_b)                             (b, t, h_v)
    g       = -exp(A_log) softplus(x W_a + dt_bias)      (b, t, h_v), always <= 0
    o       = gated_delta_rule(q, k, v, g, beta)         attention.delta
    y       = (RMSNorm(o) * SiLU(x W_z)) W_out           per head; z is an output gate
"""

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.types import Device

from ._checks import Factory, accumulation_dtype, check_input, check_sizes
from .delta import gated_delta_rule
from .norms import RMSNorm

__all__ = ["DeltaState", "GatedDeltaNet"]


def _l2_normalize(y: Tensor) -> Tensor:
    """y / sqrt(|y|² + 10⁻⁶) over the last dimension, as Qwen3-Next (FLA's l2norm) does.

    Half precision is computed in float32 and rounded once: in float16, |y|² overflows once
    |y| > 256 and the vector would become 0.
    """
    acc = y.to(accumulation_dtype(y.dtype))
    return (acc * torch.rsqrt((acc * acc).sum(-1, keepdim=True) + 1e-6)).to(y.dtype)


class DeltaState:
    """What a gated delta layer carries from one call to the next: its cache when decoding.

    ``conv`` (b, channels, w_conv - 1) holds the inputs of the convolution's last w_conv - 1
    tokens and ``state`` (b, h_v, d_k, d_v) the memory S; both are None before the first call.
    ``length`` counts the tokens read. Its size does not grow with the length.

    The layer keeps ``conv`` in its own dtype and ``state`` in float32 for a half-precision
    layer (the dtype it computes S in: the layer's, otherwise), as flash-linear-attention's
    kernels and transformers' Qwen3-Next keep them. A ``conv`` or ``state`` of another floating
    dtype is cast to that dtype, as they cast it: a bfloat16 state is taken, computed in
    float32 and returned in float32.

    Examples:
        >>> layer = GatedDeltaNet(16, num_key_heads=1, num_value_heads=2, d_k=4, d_v=4)
        >>> cache = DeltaState()
        >>> _ = layer(torch.randn(1, 5, 16), cache=cache)
        >>> cache.length, tuple(cache.state.shape)
        (5, (1, 2, 4, 4))
    """

    def __init__(self) -> None:
        """Empty: zeros are used for both on the first call."""
        self.conv: Tensor | None = None
        self.state: Tensor | None = None
        self.length = 0


class GatedDeltaNet(nn.Module):
    """Qwen3-Next's gated delta layer, (b, t, d) -> (b, t, d).

    Args:
        d_model: d, the residual width.
        num_key_heads: h_k.
        num_value_heads: h_v, a multiple of h_k.
        d_k: width of each query and key head.
        d_v: width of each value head.
        conv_size: w_conv, the causal convolution's width (Qwen3-Next uses 4).
        eps: the RMSNorm's epsilon.
        chunk_size: C of the chunked rule, which every call uses: on a whole sequence, or, with
            a :class:`DeltaState` cache, on the tokens that continue it (one at a time when
            decoding).
        device: where the parameters are created (torch's default when None).
        dtype: their dtype (torch's default when None). The log decay g is computed in
            float32 whatever the dtype, as Qwen3-Next computes it: a float64 layer equals
            transformers' float64 run, and is about 1e-8 (relative) from an exact float64 one.

    Raises:
        ValueError: if a size is not an integer >= 1, num_value_heads is not a multiple of
            num_key_heads, or eps is not a finite number > 0.

    Examples:
        >>> _ = torch.manual_seed(0)
        >>> layer = GatedDeltaNet(d_model=16, num_key_heads=2, num_value_heads=2, d_k=4, d_v=4)
        >>> layer(torch.randn(1, 5, 16)).shape
        torch.Size([1, 5, 16])
    """

    def __init__(
        self,
        d_model: int,
        num_key_heads: int,
        num_value_heads: int,
        d_k: int,
        d_v: int,
        *,
        conv_size: int = 4,
        eps: float = 1e-6,
        chunk_size: int = 64,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        check_sizes(d_model=d_model, num_key_heads=num_key_heads, num_value_heads=num_value_heads,
                    d_k=d_k, d_v=d_v, conv_size=conv_size, chunk_size=chunk_size)
        if num_value_heads % num_key_heads != 0:
            raise ValueError(
                f"num_value_heads must be a multiple of num_key_heads={num_key_heads}, got "
                f"{num_value_heads}"
            )
        self.h_k, self.h_v, self.d_k, self.d_v = num_key_heads, num_value_heads, d_k, d_v
        self.chunk_size = chunk_size
        factory = Factory(device=device, dtype=dtype)
        self.q_proj = nn.Linear(d_model, num_key_heads * d_k, bias=False, **factory)
        self.k_proj = nn.Linear(d_model, num_key_heads * d_k, bias=False, **factory)
        self.v_proj = nn.Linear(d_model, num_value_heads * d_v, bias=False, **factory)
        self.z_proj = nn.Linear(d_model, num_value_heads * d_v, bias=False, **factory)  # output gate
        self.b_proj = nn.Linear(d_model, num_value_heads, bias=False, **factory)  # write strength beta
        self.a_proj = nn.Linear(d_model, num_value_heads, bias=False, **factory)  # decay's step
        channels = 2 * num_key_heads * d_k + num_value_heads * d_v
        self.conv = nn.Conv1d(channels, channels, conv_size, groups=channels, bias=False, **factory)
        self.A_log = nn.Parameter(torch.empty(num_value_heads, **factory).uniform_(0.01, 16).log())
        self.dt_bias = nn.Parameter(torch.ones(num_value_heads, **factory))
        self.norm = RMSNorm(d_v, eps=eps, **factory)  # per head, before the output gate
        self.out_proj = nn.Linear(num_value_heads * d_v, d_model, bias=False, **factory)

    def forward(self, x: Tensor, cache: DeltaState | None = None) -> Tensor:
        """y (b, t, d) from x (b, t, d); with a cache, x continues the tokens it has read.

        t = 0 gives an empty output (b, 0, d), as the attention modules do, and leaves the cache
        as it was.

        Raises:
            ValueError: if x is not (b, t, d), or cache is not a :class:`DeltaState` of b
                sequences whose conv and state have this layer's shapes and are floating point
                on x's device (of any floating dtype: see :class:`DeltaState`), or x gives a
                NaN write strength or decay (NaN or inf in x or a parameter). A refused call
                leaves the cache as it was.
        """
        check_input(x, self.q_proj.in_features, (3,), "x", "d_model")
        if cache is not None and not isinstance(cache, DeltaState):
            raise ValueError(f"cache must be a DeltaState, got {type(cache).__name__}")
        if cache is not None and cache.conv is not None and cache.conv.shape[0] != x.shape[0]:
            raise ValueError(f"cache holds b={cache.conv.shape[0]} sequences, x has b={x.shape[0]}")
        b, t, _ = x.shape
        if cache is not None:  # before the cache takes anything: a refused call leaves it as it was
            conv_shape = (b, self.conv.in_channels, self.conv.kernel_size[0] - 1)
            for name, shape in (("conv", conv_shape), ("state", (b, self.h_v, self.d_k, self.d_v))):
                held = getattr(cache, name)
                if held is None:
                    continue
                if tuple(held.shape) != shape:
                    raise ValueError(f"cache.{name} must have shape {shape} (a DeltaState of this "
                                     f"layer), got {tuple(held.shape)}")
                if not held.is_floating_point() or held.device != x.device:  # cast, or moved
                    raise ValueError(f"cache.{name} must be floating point on x's device "
                                     f"{x.device}, got {held.dtype} on {held.device}")
        if t == 0:  # nothing read: the cache, even a new one, stays as it was
            return self.out_proj(self.z_proj(x))  # (b, 0, d), in x's graph as a full call is
        qkv = torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], dim=-1)  # (b, t, ch)
        k_size = self.conv.kernel_size[0]
        if cache is None or cache.conv is None:
            qkv = F.pad(qkv.transpose(1, 2), (k_size - 1, 0))  # (b, ch, w_conv - 1 + t): causal
        else:  # the last w_conv - 1 inputs of the previous call instead of zeros, in the
            # layer's dtype as transformers casts them (a float32 conv met bfloat16 weights)
            conv = cache.conv.to(qkv.dtype)
            qkv = torch.cat([conv, qkv.transpose(1, 2)], dim=-1)  # (b, ch, w_conv - 1 + t)
        held = qkv[..., qkv.shape[-1] - (k_size - 1):]  # (b, ch, w_conv - 1): the cache's next
        qkv = F.silu(self.conv(qkv)).transpose(1, 2)  # (b, t, ch)
        q, k, v = qkv.split([self.h_k * self.d_k, self.h_k * self.d_k, self.h_v * self.d_v], -1)
        q = q.view(b, t, self.h_k, self.d_k).transpose(1, 2)  # (b, h_k, t, d_k)
        k = k.view(b, t, self.h_k, self.d_k).transpose(1, 2)  # (b, h_k, t, d_k)
        v = v.view(b, t, self.h_v, self.d_v).transpose(1, 2)  # (b, h_v, t, d_v)
        q, k = (_l2_normalize(y) for y in (q, k))  # (b, h_k, t, d_k)
        beta = self.b_proj(x).sigmoid().transpose(1, 2)  # (b, h_v, t)
        # g in float32 whatever the layer's dtype, as Qwen3-Next: its cumulative sums need it
        # in half precision, and a float64 copy must equal transformers' float64 run
        g = -self.A_log.float().exp() * F.softplus(self.a_proj(x).float() + self.dt_bias)
        if not x.is_meta and (beta.isnan().any() or g.isnan().any()):  # the rule: other names
            raise ValueError("x gives a NaN write strength beta or log decay g: x or a parameter "
                             "of the layer holds NaN or inf")
        o, final = gated_delta_rule(
            q, k, v, g.transpose(1, 2), beta, form="chunked",
            chunk_size=self.chunk_size, initial_state=None if cache is None else cache.state,
            output_final_state=True,
        )  # (b, h_v, t, d_v), (b, h_v, d_k, d_v)
        if cache is not None:  # after every check: a refused call leaves the cache as it was
            cache.conv, cache.state, cache.length = held, final, cache.length + t
        o = o.transpose(1, 2)  # (b, t, h_v, d_v)
        o = self.norm(o)  # (b, t, h_v, d_v)
        z = self.z_proj(x).view(b, t, self.h_v, self.d_v)  # (b, t, h_v, d_v)
        return self.out_proj((o * F.silu(z)).reshape(b, t, self.h_v * self.d_v))  # (b, t, d)

    @classmethod
    def from_qwen3_next(cls, layer: Any) -> "GatedDeltaNet":
        """The same layer with the weights of a transformers ``Qwen3NextGatedDeltaNet``.

        Qwen3-Next fuses q, k, v, z into one projection laid out per key head as
        [q (d_k), k (d_k), v (G_v d_v), z (G_v d_v)], G_v = h_v / h_k, and b, a as
        [b (G_v), a (G_v)]. The copy has the layer's dtype and device.

        Raises:
            ValueError: if layer is not such a layer (it lacks the fused projections), or its
                convolution is followed by another activation than SiLU (its config's
                hidden_act), which this layer applies.
        """
        fused = ("in_proj_qkvz", "in_proj_ba", "A_log", "dt_bias")
        if not all(hasattr(layer, name) for name in fused):
            raise ValueError(
                f"layer must be transformers' Qwen3NextGatedDeltaNet, got {type(layer).__name__}"
            )
        if layer.activation not in ("silu", "swish"):  # transformers' names for one function
            raise ValueError(
                f"the layer's activation after the convolution must be 'silu', got "
                f"{layer.activation!r} (config.hidden_act)"
            )
        h_k, h_v, d_k, d_v = layer.num_k_heads, layer.num_v_heads, layer.head_k_dim, layer.head_v_dim
        g_v = h_v // h_k
        d_model = layer.hidden_size
        weight = layer.out_proj.weight  # the copy takes its dtype and device
        new = cls(d_model, h_k, h_v, d_k, d_v, conv_size=layer.conv_kernel_size,
                  eps=layer.norm.variance_epsilon, device=weight.device, dtype=weight.dtype)
        w = layer.in_proj_qkvz.weight.view(h_k, 2 * d_k + 2 * g_v * d_v, d_model)
        wq, wk, wv, wz = w.split([d_k, d_k, g_v * d_v, g_v * d_v], dim=1)  # per key head
        wb, wa = layer.in_proj_ba.weight.view(h_k, 2 * g_v, d_model).split([g_v, g_v], dim=1)
        with torch.no_grad():
            for mine, theirs in ((new.q_proj, wq), (new.k_proj, wk), (new.v_proj, wv),
                                 (new.z_proj, wz), (new.b_proj, wb), (new.a_proj, wa)):
                mine.weight.copy_(theirs.reshape(-1, d_model))
            new.conv.weight.copy_(layer.conv1d.weight)
            new.A_log.copy_(layer.A_log)
            new.dt_bias.copy_(layer.dt_bias)
            new.norm.weight.copy_(layer.norm.weight)
            new.out_proj.weight.copy_(layer.out_proj.weight)
        return new
