"""The Transformer block and a tiny decoder-only language model built from it.

Training and the experiments of the book are in :mod:`attention.training`.

Notation (see CONTRIBUTING.md):
    b        batch size
    t        number of tokens
    d        model width ``d_model`` (d_in = d_out = d in every block)
    h        number of heads, d_h = d / h the width of one head
    d_ff     width of the feed-forward network's hidden layer
    n_vocab  vocabulary size ``vocab_size``

One block, pre-LN (``norm_first=True``) or post-LN, as ``torch.nn.TransformerEncoderLayer``:

    pre-LN    x = x + SA(LN1(x));   x = x + FFN(LN2(x))
    post-LN   x = LN1(x + SA(x));   x = LN2(x + FFN(x))

    A      = drop(softmax(Q K^T / sqrt(d_h) + M))      (b, h, t, t), per head
    SA(x)  = drop(out_proj(A V, heads merged))         (b, t, d)
    FFN(x) = drop(linear2(drop(act(linear1(x)))))      (b, t, d), act = GELU or ReLU

Dropout sits where PyTorch puts it, all with probability ``dropout`` and only in training mode:
on the attention weights A, on the two residual branches SA(x) and FFN(x), and on the FFN's
hidden activations. M is the causal mask of a decoder block, plus any mask passed in.

Decoding with a KV cache (:mod:`attention.inference`): ``forward(idx, cache=cache)`` takes only
the t new tokens, which sit at positions n .. n + t - 1 after the n cached ones; each block
appends their keys and values to its layer's cache and the causal mask of t queries against
n + t keys is aligned bottom-right. Every position scheme is shifted by n.
"""

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._checks import check_dropout, check_heads, check_input, check_sizes, check_token_ids
from .functional import additive_causal_mask, attention_weights
from .inference import Cache, KVCache, ModelKVCache
from .positions import LearnedPositions, RotaryEmbedding, alibi_bias, sinusoidal_positions

__all__ = ["TinyTransformer", "TransformerBlock"]

ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"gelu": F.gelu, "relu": F.relu}
POSITIONS = (None, "learned", "sinusoidal", "rope", "alibi")


class TransformerBlock(nn.Module):
    """Multi-head self-attention and a feed-forward network, each with a residual and LayerNorm.

    ``causal=True`` lets token i attend to tokens j <= i only (a decoder block); ``mlp=False``
    drops the feed-forward sublayer (an attention-only block). ``rotary``, if given, rotates
    queries and keys by their positions (RoPE) before the scores.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        norm_first: bool = True,
        causal: bool = False,
        activation: str = "gelu",
        *,
        mlp: bool = True,
        rotary: RotaryEmbedding | None = None,
        layer_norm_eps: float = 1e-5,
    ) -> None:
        """Attention with h heads of width d_model / h, and an FFN d_model -> d_ff -> d_model."""
        super().__init__()
        check_sizes(d_model=d_model)
        check_heads(d_model, num_heads, width_name="d_model")
        check_sizes(d_ff=d_ff)
        check_dropout(dropout)
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be 'gelu' or 'relu', got {activation!r}")
        if rotary is not None and rotary.d_h != d_model // num_heads:
            raise ValueError(
                f"rotary must rotate heads of width d_h={d_model // num_heads}, "
                f"got d_h={rotary.d_h}"
            )
        self.d_model, self.num_heads, self.d_h = d_model, num_heads, d_model // num_heads
        self.dropout, self.norm_first, self.causal = dropout, norm_first, causal
        self.activation, self.rotary = activation, rotary
        self.qkv = nn.Linear(d_model, 3 * d_model)  # W_q, W_k, W_v stacked, as torch's in_proj
        self.out_proj = nn.Linear(d_model, d_model)
        self.proj_dropout = nn.Dropout(dropout)  # on out_proj's output (torch's dropout1)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.mlp = mlp
        if mlp:
            self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps)
            self.linear1 = nn.Linear(d_model, d_ff)
            self.act_dropout = nn.Dropout(dropout)  # on the hidden activations (torch's dropout)
            self.linear2 = nn.Linear(d_ff, d_model)
            self.ffn_dropout = nn.Dropout(dropout)  # on the FFN's output (torch's dropout2)

    def _mask(self, t: int, t_k: int, attn_mask: Tensor | None, x: Tensor) -> Tensor | None:
        """The additive mask M (..., t, t_k): the causal mask plus ``attn_mask``, if any.

        The causal mask is aligned bottom-right: the t queries are the last t of the t_k keys.
        """
        if not self.causal:
            return attn_mask
        causal = additive_causal_mask(
            t, t_k, dtype=x.dtype, device=x.device, alignment="bottom_right"
        )  # (t, t_k)
        if attn_mask is None:
            return causal
        if attn_mask.dtype == torch.bool:
            attn_mask = torch.zeros_like(causal).masked_fill(~attn_mask, float("-inf"))
        return causal + attn_mask  # (..., t, t_k)

    def attend(
        self, x: Tensor, attn_mask: Tensor | None = None, cache: Cache | None = None
    ) -> tuple[Tensor, Tensor]:
        """SA(x) (b, t, d) and the attention weights A (b, h, t, t_k) it applied to the values.

        Without a cache t_k = t; with one, x's keys and values are appended to it and the t
        queries attend to all t_k = n + t cached tokens.
        """
        b, t, _ = x.shape
        h, d_h = self.num_heads, self.d_h
        queries, keys, values = self.qkv(x).split(self.d_model, dim=2)  # 3 x (b, t, d)
        queries = queries.view(b, t, h, d_h).transpose(1, 2)  # (b, h, t, d_h)
        keys = keys.view(b, t, h, d_h).transpose(1, 2)  # (b, h, t, d_h)
        values = values.view(b, t, h, d_h).transpose(1, 2)  # (b, h, t, d_h)
        start = 0 if cache is None else cache.length  # position of x's first token
        if self.rotary is not None:
            queries, keys = self.rotary(queries, start), self.rotary(keys, start)  # (b,h,t,d_h)
        if cache is not None:
            keys, values = cache.append(keys, values)  # (b, h, t_k, d_h) each
        dropout_p = self.dropout if self.training else 0.0
        mask = self._mask(t, keys.shape[2], attn_mask, x)
        attn_weights = attention_weights(queries, keys, mask, dropout_p)  # (b, h, t, t_k)
        context = (attn_weights @ values).transpose(1, 2).reshape(b, t, self.d_model)  # (b,t,d)
        return self.proj_dropout(self.out_proj(context)), attn_weights

    def feed_forward(self, x: Tensor) -> Tensor:
        """FFN(x) (b, t, d): two position-wise linear maps with the activation between them."""
        hidden = self.act_dropout(ACTIVATIONS[self.activation](self.linear1(x)))  # (b, t, d_ff)
        return self.ffn_dropout(self.linear2(hidden))  # (b, t, d)

    def forward(
        self,
        x: Tensor,
        attn_mask: Tensor | None = None,
        return_weights: bool = False,
        cache: Cache | None = None,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """The block's output (b, t, d) for tokens x (b, t, d).

        ``attn_mask`` broadcasts to (b, h, t, t): ``bool`` with True where a query *may* attend
        (the package's convention, the opposite of ``nn.MultiheadAttention``'s), or a float
        added to the scaled scores (such as :func:`~attention.alibi_bias`); the causal mask, if
        the block is causal, is added to it. ``return_weights=True`` also returns A (b, h, t, t).
        ``cache`` (a causal block only, e.g. a :class:`~attention.inference.KVCache`): x holds
        the t newest tokens; A and ``attn_mask`` are then (b, h, t, n + t).
        """
        check_input(x, self.d_model, ranks=(3,), width_name="d_model")
        if cache is not None and not self.causal:
            raise ValueError("a cache needs a causal block (causal=True), got causal=False")
        if self.norm_first:
            attended, attn_weights = self.attend(self.norm1(x), attn_mask, cache)
            x = x + attended  # (b, t, d)
            if self.mlp:
                x = x + self.feed_forward(self.norm2(x))  # (b, t, d)
        else:
            attended, attn_weights = self.attend(x, attn_mask, cache)
            x = self.norm1(x + attended)  # (b, t, d)
            if self.mlp:
                x = self.norm2(x + self.feed_forward(x))  # (b, t, d)
        return (x, attn_weights) if return_weights else x

    @classmethod
    def from_torch(
        cls, layer: nn.TransformerEncoderLayer, causal: bool = False
    ) -> "TransformerBlock":
        """The block that computes what ``layer`` computes, with its weights copied.

        ``layer`` must be batch-first, with biases, and use the activation "gelu" or "relu";
        norm_first, dropout, LayerNorm's eps and the training mode are carried over. With
        ``causal=True`` the block equals the layer called with a causal ``src_mask``.
        """
        if not isinstance(layer, nn.TransformerEncoderLayer):
            raise ValueError(f"layer must be a torch.nn.TransformerEncoderLayer, got {layer!r}")
        if not layer.self_attn.batch_first:
            raise ValueError("layer must be batch_first=True (inputs (b, t, d)), got False")
        if layer.linear1.bias is None or layer.self_attn.in_proj_bias is None:
            raise ValueError("layer must have biases (bias=True), got bias=False")
        activation = {1: "relu", 2: "gelu"}.get(layer.activation_relu_or_gelu)
        if activation is None:
            raise ValueError(f"layer's activation must be gelu or relu, got {layer.activation}")
        attn = layer.self_attn
        block = cls(
            attn.embed_dim,
            attn.num_heads,
            layer.linear1.out_features,
            dropout=layer.dropout.p,
            norm_first=layer.norm_first,
            causal=causal,
            activation=activation,
            layer_norm_eps=layer.norm1.eps,
        ).to(device=attn.in_proj_weight.device, dtype=attn.in_proj_weight.dtype)
        with torch.no_grad():
            block.qkv.weight.copy_(attn.in_proj_weight)  # (3d, d): W_q, W_k, W_v stacked
            block.qkv.bias.copy_(attn.in_proj_bias)  # (3d,)
            for name in ("out_proj", "norm1", "norm2", "linear1", "linear2"):
                source = attn.out_proj if name == "out_proj" else getattr(layer, name)
                getattr(block, name).load_state_dict(source.state_dict())
        return block.train(layer.training)


class TinyTransformer(nn.Module):
    """A decoder-only language model: embedding, positions, N causal pre-LN blocks, LN, LM head.

    ``positions`` picks how the model knows where a token is: ``"learned"`` (GPT-2) or
    ``"sinusoidal"`` vectors added to the embeddings, ``"rope"`` rotations of queries and keys,
    ``"alibi"`` biases on the scores, or ``None`` (only the causal mask tells positions apart).
    ``context_length`` bounds the sequences of the learned table only: the other schemes take
    any length, which is what a length-extrapolation experiment needs. ``mlp=False`` builds an
    attention-only model. :meth:`generate` decodes greedily, with or without a KV cache.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        num_heads: int,
        num_layers: int,
        context_length: int,
        d_ff: int | None = None,
        positions: str | None = "learned",
        mlp: bool = True,
        dropout: float = 0.0,
    ) -> None:
        """Every weight drawn from N(0, 0.02²), biases zero, as in GPT-2; d_ff = 4 d by default."""
        super().__init__()
        check_sizes(
            vocab_size=vocab_size, num_layers=num_layers, context_length=context_length,
            d_model=d_model,
        )
        check_heads(d_model, num_heads, width_name="d_model")
        if positions not in POSITIONS:
            raise ValueError(f"positions must be one of {POSITIONS}, got {positions!r}")
        self.vocab_size, self.num_heads, self.positions = vocab_size, num_heads, positions
        self.context_length = context_length
        self.tok_emb = nn.Embedding(vocab_size, d_model)  # (n_vocab, d)
        self.pos_emb = LearnedPositions(context_length, d_model) if positions == "learned" else None
        rotary = RotaryEmbedding(d_model // num_heads) if positions == "rope" else None
        d_ff = 4 * d_model if d_ff is None else d_ff
        self.blocks = nn.ModuleList(
            TransformerBlock(d_model, num_heads, d_ff, dropout, causal=True, mlp=mlp, rotary=rotary)
            for _ in range(num_layers)
        )
        self.final_norm = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)  # (d, n_vocab)
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def new_cache(self, batch_size: int, max_tokens: int) -> ModelKVCache:
        """An empty KV cache for ``max_tokens`` tokens: one :class:`KVCache` per layer.

        On the model's device and dtype; 2 · b · max_tokens · n_layers · h · d_h values. With
        learned positions, max_tokens must be at most ``context_length``.
        """
        if self.positions == "learned":
            check_sizes(max_tokens=max_tokens)
            if max_tokens > self.context_length:
                raise ValueError(
                    f"max_tokens must be at most context_length={self.context_length} with "
                    f"learned positions, got {max_tokens}"
                )
        weight = self.lm_head.weight
        return ModelKVCache([
            KVCache(batch_size, block.num_heads, max_tokens, block.d_h, weight.dtype, weight.device)
            for block in self.blocks
        ])

    def forward(
        self, idx: Tensor, return_weights: bool = False, cache: ModelKVCache | None = None
    ) -> Tensor | tuple[Tensor, list[Tensor]]:
        """Next-token logits (b, t, n_vocab) for token ids idx (b, t).

        ``return_weights=True`` also returns each layer's attention weights, a list of
        ``num_layers`` tensors (b, h, t, t). With a ``cache`` from :meth:`new_cache`, idx holds
        only the t new tokens, at positions n .. n + t - 1 after the n cached ones: the logits
        are those of the full sequence's last t rows, and the weights are (b, h, t, n + t).
        """
        check_token_ids(idx, "idx")
        if idx.numel() and not 0 <= int(idx.min()) <= int(idx.max()) < self.vocab_size:
            raise ValueError(
                f"idx must hold token ids in [0, vocab_size={self.vocab_size}), got ids from "
                f"{int(idx.min())} to {int(idx.max())}"
            )
        if cache is not None and (
            not isinstance(cache, ModelKVCache) or len(cache.layers) != len(self.blocks)
        ):
            raise ValueError(
                f"cache must be a ModelKVCache of {len(self.blocks)} layers from new_cache(), "
                f"got {cache!r}"
            )
        t = idx.shape[1]
        n = 0 if cache is None else cache.length  # tokens cached: x's first position
        x = self.tok_emb(idx)  # (b, t, d)
        if self.positions == "learned":
            x = self.pos_emb(x, start=n)  # (b, t, d)
        elif self.positions == "sinusoidal":
            x = x + sinusoidal_positions(n + t, x.shape[-1])[n:].to(x)  # (b, t, d) + (t, d)
        bias = alibi_bias(self.num_heads, t, n + t).to(x) if self.positions == "alibi" else None
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
        """
        check_token_ids(idx, "idx")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or (
            max_new_tokens < 0
        ):
            raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
        b, t = idx.shape
        if t == 0:
            raise ValueError(f"idx must hold at least one token per sequence, got shape {(b, t)}")
        if self.positions == "learned" and t + max_new_tokens - 1 > self.context_length:
            raise ValueError(
                f"t + max_new_tokens - 1 must be at most context_length={self.context_length} "
                f"with learned positions, got {t} + {max_new_tokens} - 1 = {t + max_new_tokens - 1}"
            )
        cache = self.new_cache(b, t + max_new_tokens - 1) if use_cache and max_new_tokens else None
        new_tokens = idx
        for step in range(max_new_tokens):
            logits = self(new_tokens if use_cache else idx, cache=cache)  # (b, t', n_vocab)
            next_id = logits[:, -1].argmax(dim=-1, keepdim=True).to(idx.dtype)  # (b, 1)
            idx = torch.cat([idx, next_id], dim=1)  # (b, t + step + 1)
            new_tokens = next_id
        return idx
