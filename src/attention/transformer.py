"""The Transformer block and a tiny decoder-only language model built from it.

Training and the experiments of the book are in :mod:`attention.training`; the attention
sublayer is :class:`~attention.BlockAttention`, the block's submodule ``attn``.

Notation (see CONTRIBUTING.md):
    b        batch size
    t        number of tokens
    d        model width ``d_model`` (d_in = d_out = d in every block)
    h        number of heads, d_h = d / h the width of one head
    d_ff     width of the feed-forward network's hidden layer
    n_vocab  vocabulary size ``vocab_size``

One block, pre-norm (``norm_first=True``), post-norm, or parallel (GPT-J, PaLM), with N the
block's normalization, LayerNorm or RMSNorm (``norm="layer"`` or ``"rms"``):

    pre-norm   x = x + SA(N1(x));   x = x + FFN(N2(x))
    post-norm  x = N1(x + SA(x));   x = N2(x + FFN(x))
    parallel   x = x + SA(N1(x)) + FFN(N1(x))

    SA(x)        = attn(x), multi-head self-attention                       (b, t, d)
    FFN(x)       = drop(linear2(drop(act(linear1(x)))))    act = GELU or ReLU
    FFN_SwiGLU(x) = drop(linear2(drop(SiLU(linear1(x)) ⊙ linear3(x))))     (Shazeer, 2020)

Dropout sits where PyTorch puts it, all with probability ``dropout`` and only in training mode:
on the attention weights A, on the two residual branches SA(x) and FFN(x), and on the FFN's
hidden activations. A causal block adds the causal mask to any mask passed in.

Decoding with a KV cache (:mod:`attention.kv_cache`): ``forward(idx, cache=cache)`` takes only
the t new tokens, which sit at positions n .. n + t - 1 after the n cached ones; each block
appends their keys and values to its layer's cache and the causal mask of t queries against
n + t keys is aligned bottom-right. Every position scheme is shifted by n.
"""

from collections.abc import Callable, Iterable
from typing import Literal, Self, cast, get_args, overload

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.types import Device

from ._checks import (
    Factory,
    accumulation_dtype,
    check_dropout,
    check_flags,
    check_heads,
    check_input,
    check_number,
    check_sizes,
    check_token_ids,
    renamed,
)
from .block_attention import BlockAttention
from .kv_cache import Cache, KVCache, ModelKVCache, RollingKVCache, storage_dtype
from .norms import NormKind, make_norm
from .positions import LearnedPositions, RotaryEmbedding, alibi_bias, sinusoidal_positions

__all__ = ["TinyTransformer", "TransformerBlock", "swiglu_width"]

Activation = Literal["gelu", "relu", "swiglu"]
ACTIVATIONS: tuple[Activation, ...] = get_args(Activation)
Positions = Literal["learned", "sinusoidal", "rope", "alibi"]
POSITIONS: tuple[Positions | None, ...] = (None, *get_args(Positions))


def swiglu_width(
    d_model: int, multiple_of: int = 256, ffn_dim_multiplier: float | None = None
) -> int:
    """Llama's SwiGLU hidden width: 2/3 of 4 d, times a multiplier, rounded up to a multiple.

    As ``FeedForward`` in Meta's Llama code computes it: int(2 · 4d / 3), then int(multiplier ·
    width) if a multiplier is given, then the next multiple of ``multiple_of``. Three matrices
    of d × d_ff then hold about as many weights as the two of a 4d-wide FFN.

    Args:
        d_model: d, the model width.
        multiple_of: the width is rounded up to a multiple of this.
        ffn_dim_multiplier: a factor > 0 on the width before rounding (None: 1).

    Returns:
        d_ff.

    Raises:
        ValueError: if d_model or multiple_of is not an integer >= 1, or the multiplier is not
            a finite number > 0.

    Examples:
        >>> swiglu_width(4096)  # Llama 2 7B's d_ff
        11008
    """
    # as Python ints: NumPy's np.int32 would wrap around
    d_model, multiple_of = check_sizes(d_model=d_model, multiple_of=multiple_of)
    width = int(2 * (4 * d_model) / 3)
    if ffn_dim_multiplier is not None:
        multiplier = check_number("ffn_dim_multiplier", ffn_dim_multiplier, 0.0, inclusive=False)
        width = int(multiplier * width)
    # at least one multiple: a multiplier so small that the width rounds to 0 leaves no FFN
    return multiple_of * max(1, (width + multiple_of - 1) // multiple_of)


class TransformerBlock(nn.Module):
    """Multi-head self-attention and a feed-forward network, each with a residual and a norm.

    ``is_causal=True`` lets token i attend to tokens j <= i only (a decoder block); ``mlp=False``
    drops the feed-forward sublayer (an attention-only block). ``rotary``, if given, rotates
    queries and keys by their positions (RoPE) before the scores. With ``dropout=0.1`` the
    defaults are the block of ``torch.nn.TransformerEncoderLayer(norm_first=True,
    activation="gelu", batch_first=True)`` (our default dropout is 0); the keyword arguments
    build today's variants: ``norm="rms"`` (RMSNorm), ``activation="swiglu"``,
    ``parallel=True`` (attention and FFN both read N1(x)), ``qk_norm=True`` (queries and keys
    normalized per head by the block's kind of norm), ``output_gate=True`` (a sigmoid gate on
    each head's output, :class:`~attention.BlockAttention`) and ``bias=False`` (no biases in the
    linear layers and the norms). The attention sublayer is the submodule ``attn``, with h heads
    of width d_model / h; the FFN maps d_model -> d_ff -> d_model.

    Args:
        d_model: d, the width of the residual stream.
        num_heads: h; must divide d_model.
        d_ff: width of the FFN's hidden layer.
        dropout: p_drop of every dropout of the block (attention weights, both residual
            branches, the FFN's hidden activations), in [0, 1).
        norm_first: pre-norm (True) or post-norm (False).
        is_causal: hide later tokens from each query.
        activation: the FFN's ``"gelu"``, ``"relu"`` or ``"swiglu"``.
        mlp: keep the FFN sublayer.
        rotary: the rotary embedding of queries and keys (None: no RoPE).
        norm: ``"layer"`` (LayerNorm) or ``"rms"`` (RMSNorm).
        parallel: attention and FFN both read N1(x) (needs norm_first and mlp).
        qk_norm: normalize queries and keys per head.
        bias: biases in the linear layers and the norms.
        norm_eps: ε of every norm.
        output_gate: gated attention, a sigmoid gate on each head's context vectors.
        device: where the parameters are created (torch's default when None).
        dtype: their dtype (torch's default when None).

    Raises:
        ValueError: if a size is not an integer >= 1, num_heads does not divide d_model,
            dropout is outside [0, 1), activation or norm is unknown, parallel is asked of a
            post-norm block or one without an FFN, rotary is not a RotaryEmbedding of width
            d_model / num_heads (or None), norm_eps is not a finite number > 0, norm_first,
            is_causal, mlp or parallel is not a bool, or qk_norm, bias or output_gate is not a
            bool.

    Examples:
        >>> _ = torch.manual_seed(123)
        >>> block = TransformerBlock(d_model=8, num_heads=2, d_ff=32, is_causal=True)
        >>> out, weights = block(torch.randn(2, 5, 8), return_weights=True)
        >>> out.shape, weights[0, 0, 0].detach()  # token 0 sees only itself
        (torch.Size([2, 5, 8]), tensor([1., 0., 0., 0., 0.]))
    """

    @renamed(causal="is_causal")
    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        *,
        norm_first: bool = True,
        is_causal: bool = False,
        activation: Activation = "gelu",
        mlp: bool = True,
        rotary: RotaryEmbedding | None = None,
        norm: NormKind = "layer",
        parallel: bool = False,
        qk_norm: bool = False,
        bias: bool = True,
        norm_eps: float = 1e-5,
        output_gate: bool = False,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        check_sizes(d_model=d_model)
        check_heads(d_model, num_heads, width_name="d_model")
        check_sizes(d_ff=d_ff)
        check_dropout(dropout)
        # qk_norm: a string would pick the block's norm, not name one
        check_flags(norm_first=norm_first, is_causal=is_causal, mlp=mlp, parallel=parallel,
                    qk_norm=qk_norm, bias=bias, output_gate=output_gate)
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
        if parallel and not (norm_first and mlp):
            raise ValueError(
                "parallel=True needs a pre-norm block with an FFN (norm_first=True, mlp=True), "
                f"got norm_first={norm_first}, mlp={mlp}"
            )
        self.d_model, self.num_heads, self.d_h = d_model, num_heads, d_model // num_heads
        self.norm_first, self.is_causal, self.activation = norm_first, is_causal, activation
        self.mlp, self.parallel = mlp, parallel
        self.attn = BlockAttention(
            d_model, num_heads, dropout, is_causal=is_causal, rotary=rotary,
            qk_norm=norm if qk_norm else None, bias=bias, norm_eps=norm_eps,
            output_gate=output_gate, device=device, dtype=dtype,
        )  # built first: the same random draws as before it was a submodule
        factory = Factory(device=device, dtype=dtype)
        self.norm1 = make_norm(norm, d_model, norm_eps, bias, **factory)
        if mlp:
            if not parallel:  # a parallel block feeds N1(x) to both sublayers
                self.norm2 = make_norm(norm, d_model, norm_eps, bias, **factory)
            self.linear1 = nn.Linear(d_model, d_ff, bias=bias, **factory)  # W_1 (Llama's w1)
            self.act_dropout = nn.Dropout(dropout)  # on the hidden activations (torch's dropout)
            self.linear2 = nn.Linear(d_ff, d_model, bias=bias, **factory)  # W_2 (Llama's w2)
            if activation == "swiglu":
                self.linear3 = nn.Linear(d_model, d_ff, bias=bias, **factory)  # V (Llama's w3)
            self.ffn_dropout = nn.Dropout(dropout)  # on the FFN's output (torch's dropout2)

    def feed_forward(self, x: Tensor) -> Tensor:
        """FFN(x) (b, t, d): two position-wise linear maps with the activation between them.

        With SwiGLU the activation is SiLU(x W_1) ⊙ x V, a gated product of two maps.
        """
        hidden = self.linear1(x)  # (b, t, d_ff)
        if self.activation == "swiglu":
            hidden = F.silu(hidden) * self.linear3(x)  # (b, t, d_ff)
        else:
            hidden = F.gelu(hidden) if self.activation == "gelu" else F.relu(hidden)
        return self.ffn_dropout(self.linear2(self.act_dropout(hidden)))  # (b, t, d)

    @overload
    def forward(
        self, x: Tensor, attn_mask: Tensor | None = None, return_weights: Literal[False] = False,
        cache: Cache | None = None,
    ) -> Tensor: ...

    @overload
    def forward(
        self, x: Tensor, attn_mask: Tensor | None = None, *, return_weights: Literal[True],
        cache: Cache | None = None,
    ) -> tuple[Tensor, Tensor]: ...

    @overload
    def forward(
        self, x: Tensor, attn_mask: Tensor | None = None, return_weights: bool = False,
        cache: Cache | None = None,
    ) -> Tensor | tuple[Tensor, Tensor]: ...

    def forward(
        self, x: Tensor, attn_mask: Tensor | None = None, return_weights: bool = False,
        cache: Cache | None = None,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """The block's output (b, t, d) for tokens x (b, t, d).

        ``attn_mask`` broadcasts to (b, h, t, t): ``bool`` with True where a query *may* attend
        (the package's convention, the opposite of ``nn.MultiheadAttention``'s), or a float
        added to the scaled scores (such as :func:`~attention.alibi_bias`); the causal mask, if
        the block is causal, is added to it. ``return_weights=True`` also returns A (b, h, t, t).
        ``cache`` (a causal block only, e.g. a :class:`~attention.kv_cache.KVCache`): x holds
        the t newest tokens; A and ``attn_mask`` are then (b, h, t, n + t).

        Raises:
            ValueError: if x is not (b, t, d), attn_mask is neither bool nor a float of x's dtype or
                float32 (or does not broadcast), a cache is given to a block that is not causal,
                or return_weights is not a bool.
        """
        check_input(x, self.d_model, ranks=(3,), width_name="d_model")
        check_flags(return_weights=return_weights)
        if cache is not None and not self.is_causal:
            raise ValueError("a cache needs a causal block (is_causal=True), got is_causal=False")
        if self.parallel:
            normed = self.norm1(x)  # (b, t, d): read by both sublayers
            attended, attn_weights = self.attn(normed, attn_mask, cache)
            x = x + attended + self.feed_forward(normed)  # (b, t, d)
        elif self.norm_first:
            attended, attn_weights = self.attn(self.norm1(x), attn_mask, cache)
            x = x + attended  # (b, t, d)
            if self.mlp:
                x = x + self.feed_forward(self.norm2(x))  # (b, t, d)
        else:
            attended, attn_weights = self.attn(x, attn_mask, cache)
            x = self.norm1(x + attended)  # (b, t, d)
            if self.mlp:
                x = self.norm2(x + self.feed_forward(x))  # (b, t, d)
        return (x, attn_weights) if return_weights else x

    @classmethod
    @renamed(causal="is_causal")
    def from_torch(
        cls, layer: nn.TransformerEncoderLayer, *, is_causal: bool = False
    ) -> "TransformerBlock":
        """The block that computes what ``layer`` computes, with its weights copied.

        ``layer`` must be batch-first, with biases, and use ReLU or the exact GELU (not
        ``nn.GELU(approximate="tanh")``); norm_first, dropout, LayerNorm's eps and the
        training mode are carried over. With ``is_causal=True`` the block equals the layer
        called with a causal ``src_mask``. Masks: torch's bool ``src_mask`` and
        ``src_key_padding_mask`` mark with True what is hidden, the block's ``attn_mask`` what
        may be attended, so pass ``~src_mask`` (a float mask as it is) and
        ``~src_key_padding_mask[:, None, None, :]``; the same bool tensor passed unchanged is
        taken, and hides the wrong keys.

        Raises:
            ValueError: if ``layer`` is not a ``TransformerEncoderLayer``, is not batch-first,
                has no biases, or its activation is neither ReLU nor the exact GELU, or if
                is_causal is not a bool.
        """
        check_flags(is_causal=is_causal)
        if not isinstance(layer, nn.TransformerEncoderLayer):
            raise ValueError(f"layer must be a torch.nn.TransformerEncoderLayer, got {layer!r}")
        if not layer.self_attn.batch_first:
            raise ValueError("layer must be batch_first=True (inputs (b, t, d)), got False")
        if layer.linear1.bias is None or layer.self_attn.in_proj_bias is None:
            raise ValueError("layer must have biases (bias=True), got bias=False")
        activations: dict[int, Activation] = {1: "relu", 2: "gelu"}  # by torch's activation_relu_or_gelu
        activation = activations.get(layer.activation_relu_or_gelu)
        if activation is None:
            raise ValueError(f"layer's activation must be gelu or relu, got {layer.activation}")
        if isinstance(layer.activation, nn.GELU) and layer.activation.approximate != "none":
            # PyTorch flags every nn.GELU as "gelu"; a tanh GELU would be built as the exact one
            raise ValueError(
                "layer's GELU must be exact (approximate='none'), "
                f"got approximate={layer.activation.approximate!r}"
            )
        attn = layer.self_attn
        block = cls(
            attn.embed_dim,
            attn.num_heads,
            layer.linear1.out_features,
            dropout=layer.dropout.p,
            norm_first=layer.norm_first,
            is_causal=is_causal,
            activation=activation,
            norm_eps=layer.norm1.eps,
        ).to(device=attn.in_proj_weight.device, dtype=attn.in_proj_weight.dtype)
        with torch.no_grad():
            block.attn.qkv.weight.copy_(attn.in_proj_weight)  # (3d, d): W_q, W_k, W_v stacked
            block.attn.qkv.bias.copy_(attn.in_proj_bias)  # (3d,)
            block.attn.out_proj.load_state_dict(attn.out_proj.state_dict())
            for name in ("norm1", "norm2", "linear1", "linear2"):
                getattr(block, name).load_state_dict(getattr(layer, name).state_dict())
        block.norm2.eps = layer.norm2.eps  # a state dict holds no eps; norm1's came in norm_eps
        return block.train(layer.training)


def _tie_lm_head(model: "TinyTransformer", *_: object) -> None:
    """Tie a ``tie_weights`` model's LM head to the token embedding again where a move or a load
    gave each its own Parameter: ``to_empty`` (from the meta device, as large models are loaded)
    and ``load_state_dict(..., assign=True)`` do, and the model would then train two matrices.
    (A module-level function, so that a model holding it as a load hook still pickles.)"""
    # a model pickled whole before the flag was kept has none: it is moved as it was
    if getattr(model, "tie_weights", False) and model.lm_head.weight is not model.tok_emb.weight:
        model.lm_head.weight = model.tok_emb.weight


class TinyTransformer(nn.Module):
    """A decoder-only language model: embedding, positions, N causal pre-norm blocks, norm, LM head.

    ``positions`` picks how the model knows where a token is: ``"learned"`` (GPT-2) or
    ``"sinusoidal"`` vectors added to the embeddings, ``"rope"`` rotations of queries and keys,
    ``"alibi"`` biases on the scores, or ``None`` (only the causal mask tells positions apart).
    ``context_length`` bounds the sequences of the learned table only: the other schemes take
    any length, which is what a length-extrapolation experiment needs. ``mlp=False`` builds an
    attention-only model. :meth:`generate` decodes greedily, with or without a KV cache. Every
    nn.Linear and nn.Embedding weight is drawn from N(0, 0.02²) and every bias is zero, as
    GPT-2's code does for its token embedding and linear layers (its position table uses 0.01);
    norms start at γ = 1.

    Args:
        vocab_size: n_vocab.
        d_model: d, the width of the residual stream.
        num_heads: h; must divide d_model.
        num_layers: L, the number of blocks.
        context_length: the most positions of the learned table.
        d_ff: the FFN's hidden width; defaults to 4 d, or with ``activation="swiglu"`` to
            int(2 · 4d / 3) (Llama's rule without its rounding, :func:`~attention.swiglu_width`
            with ``multiple_of=1``).
        positions: ``"learned"``, ``"sinusoidal"``, ``"rope"``, ``"alibi"`` or None.
        mlp: give every block an FFN.
        dropout: p_drop of every block.
        norm: ``"layer"`` or ``"rms"``, in every block and for the final normalization.
        activation: every FFN's ``"gelu"``, ``"relu"`` or ``"swiglu"``.
        parallel: parallel blocks (see :class:`~attention.TransformerBlock`).
        qk_norm: normalize queries and keys per head.
        bias: biases in the linear layers and the norms.
        output_gate: gated attention in every block (see :class:`~attention.BlockAttention`).
        tie_weights: the LM head uses the token embedding's matrix (Press and Wolf, 2017;
            Inan et al., 2017).
        device: where the parameters are created (torch's default when None).
        dtype: their dtype (torch's default when None).

    Raises:
        ValueError: if a size is not an integer >= 1, num_heads does not divide d_model,
            positions (or a block's option) is unknown, dropout is outside [0, 1), positions
            is ``"rope"`` and d_model / num_heads is odd or ``"sinusoidal"`` and d_model is
            odd, mlp, parallel or qk_norm is not a bool, or bias, output_gate or tie_weights is
            not a bool.

    Examples:
        >>> _ = torch.manual_seed(123)
        >>> model = TinyTransformer(vocab_size=10, d_model=8, num_heads=2, num_layers=2,
        ...                         context_length=8, positions="rope")
        >>> idx = torch.tensor([[1, 2, 3]])
        >>> model(idx).shape  # (b, t, n_vocab)
        torch.Size([1, 3, 10])
        >>> torch.equal(model.generate(idx, 4), model.generate(idx, 4, use_cache=False))
        True
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        num_heads: int,
        num_layers: int,
        context_length: int,
        d_ff: int | None = None,
        positions: Positions | None = "learned",
        mlp: bool = True,
        dropout: float = 0.0,
        *,
        norm: NormKind = "layer",
        activation: Activation = "gelu",
        parallel: bool = False,
        qk_norm: bool = False,
        bias: bool = True,
        output_gate: bool = False,
        tie_weights: bool = False,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        check_sizes(
            vocab_size=vocab_size, num_layers=num_layers, context_length=context_length,
            d_model=d_model,
        )
        check_heads(d_model, num_heads, width_name="d_model")
        check_flags(mlp=mlp, parallel=parallel, qk_norm=qk_norm, bias=bias,
                    output_gate=output_gate, tie_weights=tie_weights)
        if positions not in POSITIONS:
            raise ValueError(f"positions must be one of {POSITIONS}, got {positions!r}")
        if positions == "sinusoidal" and d_model % 2:  # else refused by the first forward only
            raise ValueError(
                f"positions='sinusoidal' needs an even d_model (sin and cos in pairs), got {d_model}"
            )
        self.vocab_size, self.num_heads, self.positions = vocab_size, num_heads, positions
        self.context_length = context_length
        factory = Factory(device=device, dtype=dtype)
        self.tok_emb = nn.Embedding(vocab_size, d_model, **factory)  # (n_vocab, d)
        self.pos_emb = (LearnedPositions(context_length, d_model, **factory)
                        if positions == "learned" else None)
        d_h = d_model // num_heads
        rotary = RotaryEmbedding(d_h, device=device) if positions == "rope" else None
        if d_ff is None:
            d_ff = swiglu_width(d_model, multiple_of=1) if activation == "swiglu" else 4 * d_model
        self.blocks = nn.ModuleList(
            TransformerBlock(
                d_model, num_heads, d_ff, dropout, is_causal=True, activation=activation, mlp=mlp,
                rotary=rotary, norm=norm, parallel=parallel, qk_norm=qk_norm, bias=bias,
                output_gate=output_gate, **factory,
            )
            for _ in range(num_layers)
        )
        self.final_norm = make_norm(norm, d_model, bias=bias, **factory)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False, **factory)  # (d, n_vocab)
        self.tie_weights = tie_weights
        if tie_weights:
            self.lm_head.weight = self.tok_emb.weight  # one (n_vocab, d) matrix: logits = x E^T
        # load_state_dict(..., assign=True) gives each module the checkpoint's tensor as its own
        self.register_load_state_dict_post_hook(_tie_lm_head)  # type: ignore[no-untyped-call]
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> Self:
        super()._apply(fn, recurse)  # type: ignore[no-untyped-call]  # torch leaves it untyped
        _tie_lm_head(self)  # to_empty made a new matrix for each of the two modules
        return self

    def new_cache(self, batch_size: int, max_tokens: int) -> ModelKVCache:
        """An empty KV cache for ``max_tokens`` tokens: one :class:`KVCache` per layer.

        On the model's device and dtype (autocast's, while autocast is on and the model is not
        float64: the keys come out in it); 2 · b · max_tokens · n_layers · h · d_h values. With
        learned positions, max_tokens must be at most ``context_length``.

        Raises:
            ValueError: if a size is not an integer >= 1, or, with learned positions, max_tokens
                exceeds context_length.
        """
        if self.positions == "learned":
            check_sizes(max_tokens=max_tokens)
            if max_tokens > self.context_length:
                raise ValueError(
                    f"max_tokens must be at most context_length={self.context_length} with "
                    f"learned positions, got {max_tokens}"
                )
        weight = self.lm_head.weight
        dtype = storage_dtype(weight)  # the weights', or autocast's
        return ModelKVCache([
            KVCache(batch_size, block.num_heads, max_tokens, block.d_h, dtype, weight.device)
            for block in cast(Iterable[TransformerBlock], self.blocks)  # torch types them Module
        ])

    @overload
    def forward(
        self, idx: Tensor, return_weights: Literal[False] = False, cache: ModelKVCache | None = None
    ) -> Tensor: ...

    @overload
    def forward(
        self, idx: Tensor, *, return_weights: Literal[True], cache: ModelKVCache | None = None
    ) -> tuple[Tensor, list[Tensor]]: ...

    @overload
    def forward(
        self, idx: Tensor, return_weights: bool = False, cache: ModelKVCache | None = None
    ) -> Tensor | tuple[Tensor, list[Tensor]]: ...

    def forward(
        self, idx: Tensor, return_weights: bool = False, cache: ModelKVCache | None = None
    ) -> Tensor | tuple[Tensor, list[Tensor]]:
        """Next-token logits (b, t, n_vocab) for token ids idx (b, t).

        ``return_weights=True`` also returns each layer's attention weights, a list of
        ``num_layers`` tensors (b, h, t, t). With a ``cache`` from :meth:`new_cache`, idx holds
        only the t new tokens, at positions n .. n + t - 1 after the n cached ones: the logits
        are those of the full sequence's last t rows, and the weights are (b, h, t, n + t), or
        (b, h, t, t_k) over the t_k keys a layer's :class:`~attention.RollingKVCache` hands back.

        Raises:
            ValueError: if idx is not (b, t) of integer ids in [0, n_vocab), cache is not a
                ModelKVCache with one cache per layer, with learned positions, the cached and new
                tokens exceed context_length, with ALiBi, a layer's cache is a
                :class:`~attention.RollingKVCache` (which hands back only its window's keys), or
                return_weights is not a bool.
        """
        check_token_ids(idx, "idx", self.vocab_size)
        check_flags(return_weights=return_weights)
        if cache is not None and (
            not isinstance(cache, ModelKVCache) or len(cache.layers) != len(self.blocks)
        ):
            # the repr of a ModelKVCache named no number of layers
            got = (f"one of {len(cache.layers)}" if isinstance(cache, ModelKVCache)
                   else type(cache).__name__)
            raise ValueError(
                f"cache must be a ModelKVCache of {len(self.blocks)} layers from new_cache(), "
                f"got {got}"
            )
        if self.positions == "alibi" and cache is not None and any(
            isinstance(layer, RollingKVCache) for layer in cache.layers
        ):  # its bias is of n + t keys, where a window hands back fewer
            raise ValueError(
                "positions='alibi' needs a cache that keeps every key (new_cache()), got "
                f"{[type(layer).__name__ for layer in cache.layers]}"
            )
        t = idx.shape[1]
        n = 0 if cache is None else cache.length  # tokens cached: x's first position
        x = self.tok_emb(idx)  # (b, t, d)
        if self.pos_emb is not None:  # learned positions
            x = self.pos_emb(x, start=n)  # (b, t, d)
        elif self.positions == "sinusoidal" and n + t:  # no table of 0 rows: x is empty then
            # rounded once from float64 to x's dtype: via torch's default dtype, a float64 model
            # had float32 positions
            table = sinusoidal_positions(n + t, x.shape[-1], dtype=x.dtype)[n:]  # (t, d)
            x = x + table.to(x.device)  # (b, t, d)
        bias = None
        if self.positions == "alibi":  # (h, t, n + t), added in the scores' dtype: float32 for
            # half-precision x, as fused kernels add ALiBi; float64 slopes for a float64 model
            bias = alibi_bias(self.num_heads, t, n + t, accumulation_dtype(x.dtype)).to(x.device)
        layer_caches = [None] * len(self.blocks) if cache is None else cache.layers
        all_weights = []
        for block, layer_cache in zip(self.blocks, layer_caches):
            x, attn_weights = block(x, bias, return_weights=True, cache=layer_cache)  # (b, t, d)
            all_weights.append(attn_weights)  # (b, h, t, n + t)
        logits = self.lm_head(self.final_norm(x))  # (b, t, n_vocab)
        return (logits, all_weights) if return_weights else logits

    @torch.no_grad()
    def generate(self, idx: Tensor, max_new_tokens: int, use_cache: bool = True) -> Tensor:
        """idx (b, t) followed by ``max_new_tokens`` greedily chosen tokens: (b, t + new).

        Each new token is the argmax of the last position's logits. ``use_cache=True`` runs the
        prompt once (prefill) and then one new token per step against a KV cache;
        ``use_cache=False`` reruns the whole sequence at every step. Both give the same tokens.
        The model's mode is left as it is (call ``eval()`` first when it has dropout). With
        learned positions, t + max_new_tokens - 1 tokens (all but the last) must fit in
        ``context_length``.

        Raises:
            ValueError: if idx is not (b, t) of integer ids in [0, n_vocab) with t >= 1,
                max_new_tokens is not an integer >= 1 (transformers' ``generate`` refuses 0
                too), with learned positions, the tokens do not fit in context_length, or
                use_cache is not a bool.
        """
        check_token_ids(idx, "idx", self.vocab_size)
        check_sizes(max_new_tokens=max_new_tokens)  # as transformers: 0 is refused
        check_flags(use_cache=use_cache)
        b, t = idx.shape
        if t == 0:
            raise ValueError(f"idx must hold at least one token per sequence, got shape {(b, t)}")
        if self.positions == "learned" and t + max_new_tokens - 1 > self.context_length:
            raise ValueError(
                f"t + max_new_tokens - 1 must be at most context_length={self.context_length} "
                f"with learned positions, got {t} + {max_new_tokens} - 1 = {t + max_new_tokens - 1}"
            )
        # no cache of 0 rows (KVCache refuses batch_size 0): an empty batch reruns nothing
        use_cache = use_cache and b > 0
        cache = self.new_cache(b, t + max_new_tokens - 1) if use_cache else None
        new_tokens = idx
        for step in range(max_new_tokens):
            logits = self(new_tokens if use_cache else idx, cache=cache)  # (b, t', n_vocab)
            next_id = logits[:, -1].argmax(dim=-1, keepdim=True).to(idx.dtype)  # (b, 1)
            idx = torch.cat([idx, next_id], dim=1)  # (b, t + step + 1)
            new_tokens = next_id
        return idx
