"""The tiny model with kernel attention: linear attention or FAVOR+ in place of the softmax.

Notation (see CONTRIBUTING.md):
    b      batch size
    t      tokens
    d      model width ``d_model``; h heads of width d_h = d / h
    m      random features of FAVOR+ per head (``num_features``)

:func:`use_kernel_attention` replaces the attention sublayer ``attn`` of every block of a built
:class:`~attention.TinyTransformer` by a :class:`KernelBlockAttention`, which keeps the
sublayer's projections, norms, rotation and output gate and replaces only the softmax by the
kernel phi(q) . phi(k) of :mod:`attention.linear` (with the rotation where it keeps positions
relative): chapter 12 trains the same model, seed and steps with each kind of attention.
"""

from typing import Literal, cast, get_args

import torch
from torch import Tensor, nn

from ._checks import autocast_off, check_no_mask_or_cache, check_seed, check_sizes
from .block_attention import BlockAttention, FusedHeads
from .favor import favor_features, random_projection
from .linear import apply_feature_map, divide_rows, elu_plus_one

__all__ = ["KernelBlockAttention", "use_kernel_attention"]

Kind = Literal["elu+1", "favor"]
KINDS: tuple[Kind, ...] = get_args(Kind)


class KernelBlockAttention(FusedHeads):
    """A block's attention sublayer with a kernel in place of the softmax.

    Built from a :class:`~attention.BlockAttention`, whose modules it takes over (``qkv``,
    ``out_proj``, the QK-norms, the rotation and the output gate ``gate``: the same parameters,
    under the same names). A gate multiplies the context vectors by sigmoid(x W_g) before W_o,
    as in BlockAttention.
    ``kind="elu+1"``: linear attention with :func:`~attention.linear.elu_plus_one`;
    ``kind="favor"``: FAVOR+ with ``projection`` (m, d_h), a buffer. The call and the return
    value are BlockAttention's; the weights (b, h, t, t) are the kernel's, normalized per row,
    and the output is computed from them (the parallel form). A row whose normalizer is 0
    (FAVOR+ in float32 when a later key's exponents lie far above those a query sees; the book's
    section 12.3) gets weights 0, as in :func:`~attention.favor.favor_attention`. Masks, biases
    and caches are refused.

    With rotary embeddings, FAVOR+ rotates q and k before the features, as the softmax sublayer
    does: the kernel it estimates, exp((q R_i) . (k R_j) / sqrt(d_h)), depends on i - j alone.
    elu+1 rotates the features instead, in the numerator only, as RoFormer does for linear
    attention; its weights then need not be positive nor sum to 1. The rotation is a pure one:
    YaRN's attention factor, a softmax temperature, is left out (it multiplied the numerator
    alone, and a token alone weighed itself factor^2 times).

    Args:
        attn: the softmax sublayer whose projections, norms, rotation and gate are taken over.
        kind: ``"elu+1"`` or ``"favor"``.
        projection: FAVOR+'s random projection (m, d_h), for ``kind="favor"`` only.

    Raises:
        ValueError: if attn is not a BlockAttention, kind is unknown, projection is given for
            ``"elu+1"`` or missing for ``"favor"`` or not a floating-point (m, d_h) tensor on
            attn's device, or attn has dropout.

    Examples:
        >>> _ = torch.manual_seed(0)
        >>> attn = KernelBlockAttention(BlockAttention(8, 2), "elu+1")
        >>> out, weights = attn(torch.randn(1, 4, 8))
        >>> out.shape, weights.sum(dim=-1).allclose(torch.ones(1, 2, 4))
        (torch.Size([1, 4, 8]), True)
    """

    projection: Tensor  # (m, d_h), the buffer of kind="favor"

    def __init__(self, attn: BlockAttention, kind: Kind, projection: Tensor | None = None) -> None:
        super().__init__()
        if not isinstance(attn, BlockAttention):  # whose modules it takes over
            raise ValueError(f"attn must be a BlockAttention, got {type(attn).__name__}")
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        if (projection is None) != (kind == "elu+1"):
            raise ValueError(
                f"projection is needed for kind='favor' and for it only, got kind={kind!r} and "
                f"projection={None if projection is None else tuple(projection.shape)}"
            )
        if attn.dropout > 0:
            raise ValueError(f"kernel attention takes no dropout, got dropout={attn.dropout}")
        if projection is not None and (
            not isinstance(projection, Tensor) or projection.dim() != 2
            or projection.shape[1] != attn.d_h or not projection.is_floating_point()
        ):
            got = (f"shape {tuple(projection.shape)} and dtype {projection.dtype}"
                   if isinstance(projection, Tensor) else type(projection).__name__)
            raise ValueError(f"projection must be a floating-point (m, d_h) tensor with "
                             f"d_h={attn.d_h}, got {got}")
        device = attn.qkv.weight.device  # the buffer moves with the model, but not apart from it
        if projection is not None and projection.device != device:
            raise ValueError(f"projection must be on the sublayer's device {device}, got "
                             f"{projection.device}")
        self.kind, self.d_model = kind, attn.d_model
        self.num_heads, self.d_h = attn.num_heads, attn.d_h
        self.is_causal, self.rotary, self.qk_norm = attn.is_causal, attn.rotary, attn.qk_norm
        self.qkv, self.out_proj, self.proj_dropout = attn.qkv, attn.out_proj, attn.proj_dropout
        self.gate = attn.gate  # W_g (d, d), or None
        if attn.qk_norm is not None:
            self.q_norm, self.k_norm = attn.q_norm, attn.k_norm
        if projection is not None:
            self.register_buffer("projection", projection)  # (m, d_h): moves with the model

    def features(self, x: Tensor, name: str) -> Tensor:
        """phi of the queries (``name="query"``) or keys (b, h, t, d_h): (b, h, t, r)."""
        if self.kind == "elu+1":
            return apply_feature_map(x, elu_plus_one, name)
        over = (-1,) if name == "query" else (-2, -1)  # one maximum per query; one for all keys
        return favor_features(x, self.projection, over)

    def forward(
        self, x: Tensor, attn_mask: Tensor | None = None, cache: object | None = None
    ) -> tuple[Tensor, Tensor]:
        """SA(x) (b, t, d) with the kernel, and the kernel's attention weights (b, h, t, t).

        Raises:
            ValueError: if x is not (b, t, d), or a mask or a cache is given.
        """
        check_no_mask_or_cache("kernel attention", attn_mask, cache)
        queries, keys, values = self.heads(x)  # (b, h, t, d_h) each
        b, t, _ = x.shape
        if self.rotary is not None and self.kind == "favor":
            # FAVOR+ estimates exp((q R_i) . (k R_j) / sqrt(d_h)), which depends on i - j alone:
            # rotate first, as the softmax sublayer does
            queries, keys = self.rotary(queries), self.rotary(keys)  # (b, h, t, d_h)
        # autocast off: it would run the float32 products of the features in float16 again
        # (FAVOR+'s small features flushed to 0), where the kernels keep them in float32
        with autocast_off(x):
            # (b, h, t, r) each
            phi_q, phi_k = self.features(queries, "query"), self.features(keys, "key")
            normalizer = phi_q @ phi_k.transpose(-2, -1)  # (b, h, t, t)
            normalizer = normalizer.tril() if self.is_causal else normalizer
            if self.rotary is not None and self.kind == "elu+1":
                # phi(q R_i) . phi(k R_j) is no function of i - j; (phi(q) R_i) . (phi(k) R_j)
                # is. As RoFormer does for linear attention (Su et al.), only the numerator's
                # features are rotated: the normalizer keeps the unrotated ones, so it stays
                # positive
                # rotated only: YaRN's attention factor is a softmax temperature
                turned = [self.rotary(phi, attention_factor=False) for phi in (phi_q, phi_k)]
                kernel = turned[0] @ turned[1].transpose(-2, -1)  # (b, h, t, t)
                kernel = kernel.tril() if self.is_causal else kernel
            else:
                kernel = normalizer
            attn_weights = divide_rows(kernel, normalizer.sum(dim=-1, keepdim=True))  # (b, h, t, t)
            # half precision: features and weights are float32, and so is their sum, rounded once
            # (b, h, t, d_h)
            context = (attn_weights @ values.to(attn_weights.dtype)).to(values.dtype)
        context = context.transpose(1, 2).reshape(b, t, self.d_model)  # (b, t, d)
        attn_weights = attn_weights.to(values.dtype)
        if self.gate is not None:  # gated attention, as in BlockAttention
            context = context * torch.sigmoid(self.gate(x))  # (b, t, d)
        return self.proj_dropout(self.out_proj(context)), attn_weights


def use_kernel_attention(
    model: nn.Module, kind: Kind = "elu+1", num_features: int | None = None, seed: int = 0
) -> nn.Module:
    """Replace the attention sublayer of every block of ``model`` by kernel attention, in place.

    ``model`` is a :class:`~attention.TinyTransformer` (anything whose ``blocks`` hold a
    :class:`~attention.BlockAttention` as ``attn``). ``kind="elu+1"``: linear attention;
    ``kind="favor"``: FAVOR+ with ``num_features`` orthogonal random features per head, drawn
    once from ``seed`` (a different draw per block) and kept fixed, where Choromanski et al.
    redraw them periodically during training. Every parameter stays as it is
    (:class:`KernelBlockAttention`).

    Args:
        model: the model whose blocks change.
        kind: ``"elu+1"`` or ``"favor"``.
        num_features: m, FAVOR+'s random features per head (for ``kind="favor"`` only).
        seed: seed of FAVOR+'s random projections.

    Returns:
        ``model`` itself.

    Raises:
        ValueError: if model has no blocks, a block's attn is not a BlockAttention (one
            replaced before included), kind is unknown, num_features does not match kind,
            seed is not an integer torch.Generator takes, or a block has dropout.

    Examples:
        >>> model = TinyTransformer(8, 8, 2, 1, context_length=4)
        >>> model = use_kernel_attention(model, "favor", num_features=4)
        >>> type(model.blocks[0].attn).__name__, model(torch.tensor([[1, 2, 3]])).shape
        ('KernelBlockAttention', torch.Size([1, 3, 8]))
    """
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.ModuleList):
        raise ValueError(
            f"model must have blocks whose attn is a BlockAttention, got {type(model).__name__}"
        )
    for i, block in enumerate(blocks):  # every block changes: each must be softmax attention
        attn = getattr(block, "attn", None)
        if not isinstance(attn, BlockAttention):
            raise ValueError(f"block {i}'s attn must be a BlockAttention to replace, got "
                             f"{type(attn).__name__}")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if kind == "favor":
        check_sizes(num_features=num_features)
    elif num_features is not None:
        raise ValueError(f"num_features is for kind='favor' only, got {num_features!r}")
    seed = check_seed(seed)
    attns = [cast(BlockAttention, block.attn) for block in blocks]  # as checked above
    for attn in attns:  # before any block is replaced: all or none
        if attn.dropout > 0:
            raise ValueError(f"kernel attention takes no dropout, got dropout={attn.dropout}")
    generator = torch.Generator().manual_seed(seed)
    for block, attn in zip(blocks, attns):
        projection = None
        if num_features is not None:  # kind="favor", as checked above
            weight = attn.qkv.weight
            projection = random_projection(
                num_features, attn.d_h, True, generator, weight.dtype
            ).to(weight.device)  # (m, d_h)
        block.attn = KernelBlockAttention(attn, kind, projection)
    return model
