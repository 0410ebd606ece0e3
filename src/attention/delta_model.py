"""The tiny model with recurrent attention: the sum rule, decay, the delta rule, Gated DeltaNet.

Notation (see CONTRIBUTING.md):
    b, t   batch size, tokens;  d   model width ``d_model``;  h heads of width d_h = d / h
    w_conv  width of the short causal convolution (4, as Qwen3-Next)

:func:`use_recurrent_attention` replaces the attention sublayer ``attn`` of chosen blocks of a
built :class:`~attention.TinyTransformer` by a :class:`RecurrentBlockAttention`. It keeps the
sublayer's ``qkv`` and ``out_proj`` and, as the gated delta layer of Qwen3-Next does
(:mod:`attention.delta_layer`), passes queries, keys and values through a short causal
convolution and SiLU, L2-normalises queries and keys, and learns per head and token

    beta = sigmoid(x W_beta + b_beta)        g = -exp(A_log) softplus(x W_g + b_g + dt_bias)

(W_beta and W_g with biases b_beta and b_g, unlike Qwen3-Next's projection, which has none; g's
b_g and dt_bias are two biases of one sum; A = -exp(A_log) < 0 as in Mamba-2), of which each kind
uses what its rule needs (``"sum"``: neither; ``"decay"``: g; ``"delta"``: beta;
``"gated_delta"``: both). The rotary embedding is dropped: order reaches these layers through the
convolution and the recurrence, as in the models that ship them. The output is W V with W from
:func:`~attention.delta.delta_attention_matrix`, so that the weights each head gives each earlier
token can be read as attention weights are.
"""

from collections.abc import Iterable
from typing import Literal, cast, get_args

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._checks import check_input, check_no_mask_or_cache, check_sizes, is_integer
from .block_attention import BlockAttention
from .delta import delta_attention_matrix

__all__ = ["RECURRENT_KINDS", "RecurrentKind", "RecurrentBlockAttention", "use_recurrent_attention"]

RecurrentKind = Literal["sum", "decay", "delta", "gated_delta"]
RECURRENT_KINDS: tuple[RecurrentKind, ...] = get_args(RecurrentKind)


class RecurrentBlockAttention(nn.Module):
    """A block's attention sublayer computed by a recurrent rule of :mod:`attention.delta`.

    Built from a causal :class:`~attention.BlockAttention` whose ``qkv`` and ``out_proj`` it
    takes over; adds the convolution (3 d channels, width ``conv_size``; None for none), W_beta
    and W_g with their biases, A_log and dt_bias. The call and the return value are BlockAttention's: SA(x) (b, t, d)
    and the weights W (b, h, t, t) it applied to the values. Masks and caches are refused.

    Args:
        attn: the causal sublayer to replace, without dropout.
        kind: ``"sum"``, ``"decay"``, ``"delta"`` or ``"gated_delta"``.
        conv_size: w_conv, the convolution's width, or None for no convolution.

    Raises:
        ValueError: an attn that is not a BlockAttention, an unknown kind, a conv_size that is
            not None or an integer >= 1, or a sublayer that is not causal, has dropout, an output
            gate or a QK-norm.

    Examples:
        >>> from attention import BlockAttention
        >>> layer = RecurrentBlockAttention(BlockAttention(16, 2, 0.0, is_causal=True), "delta")
        >>> out, weights = layer(torch.randn(1, 5, 16))
        >>> tuple(out.shape), tuple(weights.shape)
        ((1, 5, 16), (1, 2, 5, 5))
    """

    def __init__(self, attn: BlockAttention, kind: RecurrentKind, conv_size: int | None = 4) -> None:
        super().__init__()
        if not isinstance(attn, BlockAttention):  # whose modules it takes over
            raise ValueError(f"attn must be a BlockAttention, got {type(attn).__name__}")
        if kind not in RECURRENT_KINDS:
            raise ValueError(f"kind must be one of {RECURRENT_KINDS}, got {kind!r}")
        if conv_size is not None:  # 0 would build a convolution that fails at the first call
            check_sizes(conv_size=conv_size)
        if not attn.is_causal or attn.dropout > 0:
            raise ValueError(
                f"recurrent attention replaces a causal sublayer without dropout, got "
                f"is_causal={attn.is_causal}, dropout={attn.dropout}"
            )
        if attn.gate is not None or attn.qk_norm is not None:  # they would be dropped unseen
            raise ValueError(
                f"recurrent attention replaces a sublayer without an output gate or QK-norm (it "
                f"normalizes q and k itself), got output_gate={attn.gate is not None}, "
                f"qk_norm={attn.qk_norm!r}"
            )
        self.kind, self.d_model = kind, attn.d_model
        self.num_heads, self.d_h = attn.num_heads, attn.d_h
        self.qkv, self.out_proj = attn.qkv, attn.out_proj
        weight = attn.qkv.weight
        channels = 3 * self.d_model
        self.conv = None if conv_size is None else nn.Conv1d(
            channels, channels, conv_size, groups=channels, bias=False
        )  # depthwise: each of the 3 d channels mixes its own last w_conv values
        self.beta_proj = nn.Linear(self.d_model, self.num_heads)
        self.g_proj = nn.Linear(self.d_model, self.num_heads)
        self.A_log = nn.Parameter(torch.zeros(self.num_heads))  # A = -exp(A_log) = -1
        self.dt_bias = nn.Parameter(torch.zeros(self.num_heads))
        self.to(device=weight.device, dtype=weight.dtype)

    def forward(
        self, x: Tensor, attn_mask: Tensor | None = None, cache: object | None = None
    ) -> tuple[Tensor, Tensor]:
        """SA(x) (b, t, d) and the weights W (b, h, t, t) of the rule.

        Raises:
            ValueError: if x is not (b, t, d), a mask or a cache is given, or x gives a NaN
                write strength or decay that the kind uses (NaN or inf in x or a parameter).
        """
        check_no_mask_or_cache("recurrent attention", attn_mask, cache)
        check_input(x, self.d_model, (3,), "x", "d_model")  # as BlockAttention checks it
        b, t, _ = x.shape
        h, d_h = self.num_heads, self.d_h
        qkv = self.qkv(x)  # (b, t, 3d)
        if self.conv is not None and t > 0:  # no token: nothing to mix (torch's convolution
            # refuses the w_conv - 1 zeros of padding alone, shorter than its kernel)
            qkv = F.pad(qkv.transpose(1, 2), (self.conv.kernel_size[0] - 1, 0))  # (b, 3d, t + w_conv - 1)
            qkv = F.silu(self.conv(qkv)).transpose(1, 2)  # (b, t, 3d): each mixes its last w_conv
        queries, keys, values = qkv.split(self.d_model, dim=2)  # 3 x (b, t, d)
        queries = F.normalize(queries.view(b, t, h, d_h).transpose(1, 2), dim=-1)  # (b,h,t,d_h)
        keys = F.normalize(keys.view(b, t, h, d_h).transpose(1, 2), dim=-1)  # (b, h, t, d_h)
        values = values.view(b, t, h, d_h).transpose(1, 2)  # (b, h, t, d_h)
        beta: Tensor | None  # beta and g are None below for a kind without them
        g: Tensor | None
        beta = torch.sigmoid(self.beta_proj(x)).transpose(1, 2)  # (b, h, t)
        g = -self.A_log.exp() * F.softplus(self.g_proj(x) + self.dt_bias)  # (b, t, h)
        g = g.transpose(1, 2) if self.kind in ("decay", "gated_delta") else None  # (b, h, t)
        beta = beta if self.kind in ("delta", "gated_delta") else None
        # the rule names NaN its own way; meta tensors hold no values to check
        if not x.is_meta and any(y is not None and y.isnan().any() for y in (beta, g)):
            raise ValueError("x gives a NaN write strength beta or log decay g: x or a parameter "
                             "of the layer holds NaN or inf")
        weights = delta_attention_matrix(queries, keys, g, beta)  # (b, h, t, t)
        # half precision: the rule's weights are float32, and so is their sum, rounded once
        context = (weights @ values.to(weights.dtype)).to(values.dtype)  # (b, h, t, d_h)
        context = context.transpose(1, 2).reshape(b, t, self.d_model)  # (b, t, d)
        return self.out_proj(context), weights.to(values.dtype)


def use_recurrent_attention(
    model: nn.Module, kind: RecurrentKind, layers: list[int] | None = None, conv_size: int | None = 4
) -> nn.Module:
    """Replace the attention sublayer of the blocks ``layers`` (None: all) by ``kind``, in place.

    ``model`` is a :class:`~attention.TinyTransformer`; the other blocks keep softmax attention
    (a hybrid, as Qwen3-Next interleaves linear and full attention layers). ``conv_size=None``
    leaves out the convolution (an ablation: the models that ship these rules have it). New
    parameters are drawn from the global generator.

    Args:
        model: a :class:`~attention.TinyTransformer` (blocks whose ``attn`` is a BlockAttention).
        kind: the rule, one of ``RECURRENT_KINDS``: sum, decay, delta, gated_delta.
        layers: indices of the blocks to change; None changes all.
        conv_size: w_conv, or None for no convolution.

    Returns:
        ``model``, changed in place.

    Raises:
        ValueError: a model without blocks, a chosen block whose attn is not a BlockAttention
            (one replaced before included), an unknown kind, a ``layers`` that is not a list
            of integer indices in range, or is empty, a conv_size that is not None or an
            integer >= 1, or a chosen block whose attention has dropout, an output gate or a
            QK-norm.

    Examples:
        >>> from attention import TinyTransformer
        >>> model = TinyTransformer(16, 16, 2, 2, 8, positions="rope", mlp=False)
        >>> _ = use_recurrent_attention(model, "gated_delta", layers=[0])
        >>> [type(block.attn).__name__ for block in model.blocks]
        ['RecurrentBlockAttention', 'BlockAttention']
    """
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.ModuleList):
        raise ValueError(
            f"model must have blocks whose attn is a BlockAttention, got {type(model).__name__}"
        )
    chosen = list(range(len(blocks))) if layers is None else (
        list(layers) if isinstance(layers, Iterable) and not isinstance(layers, str) else []
    )  # a bool is no index: True would choose block 1
    if not chosen or any(
        not is_integer(i) or not 0 <= i < len(blocks)
        for i in chosen
    ):
        raise ValueError(
            f"layers must be indices of the model's {len(blocks)} blocks, got {layers!r}"
        )
    if kind not in RECURRENT_KINDS:
        raise ValueError(f"kind must be one of {RECURRENT_KINDS}, got {kind!r}")
    for i in chosen:  # only the chosen blocks: a hybrid may be built in steps, rule by rule
        attn = getattr(blocks[i], "attn", None)
        if not isinstance(attn, BlockAttention):
            raise ValueError(f"block {i}'s attn must be a BlockAttention to replace, got "
                             f"{type(attn).__name__}")
    # every sublayer built (and checked) before any is replaced: all or none
    new = [RecurrentBlockAttention(cast(BlockAttention, blocks[i].attn), kind, conv_size) for i in chosen]
    for i, attn in zip(chosen, new):
        blocks[i].attn = attn
    return model
