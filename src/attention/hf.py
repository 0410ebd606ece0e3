"""Today's models from the book's parts: a ``transformers`` causal LM rebuilt and run here.

Notation (see CONTRIBUTING.md):
    b, t     batch size and number of tokens; n tokens cached before them
    d        model width (``hidden_size``), n_vocab vocabulary size
    h, h_kv  query heads and key/value heads; d_h the width of one head
    w        sliding window: the token at position p sees positions p - w < j <= p

:func:`from_transformers` reads a Hugging Face ``transformers`` model (real or randomly
initialised weights), copies its weights into a :class:`CausalLM` made of the book's pieces and
returns it: attention is :func:`~attention.scaled_dot_product_attention` with the masks of
chapters 4 and 10, positions are :class:`~attention.LearnedPositions` or
:class:`~attention.RotaryEmbedding` with the rules of :mod:`attention.rope_scaling`, norms are
``nn.LayerNorm`` or :class:`~attention.RMSNorm`, and the cache is chapter 10's
:class:`~attention.KVCache`, or :class:`~attention.RollingKVCache` in a sliding-window layer.
The feed-forward sublayers are two or three ``nn.Linear`` and an activation, as in chapter 9.

Supported: GPT-2, GPT-NeoX, Llama (RoPE scaling none, linear, llama3, dynamic or YaRN), Mistral,
Qwen3, Gemma 3 (text only, also out of the multimodal model), gpt-oss, DeepSeek-V3, Qwen3-Next
and DeepSeek-V3.2; the mixture-of-experts feed-forward sublayers of the last four are
``transformers``' own modules (the book does not teach routing). DeepSeek-V3's attention is
multi-head latent attention over :class:`~attention.latent.LatentKVCache`; DeepSeek-V3.2's is
the same over the top-k tokens a :class:`~attention.sparse.LightningIndexer` selects
(:func:`~attention.sparse.dsa_attention`), with the index keys cached beside the latents
(:class:`~attention.sparse.IndexedLatentKVCache`); Qwen3-Next's linear layers are
:class:`~attention.delta_layer.GatedDeltaNet`, whose cache is a
:class:`~attention.delta_layer.DeltaState`, and its attention layers have an output gate.
Anything else, a configuration option the book does not implement, or a model whose RoPE
frequencies differ from the book's rule, is a ValueError that says so: never a silently
different model. Dropout is the one exception, as it changes nothing at inference: the copy is
for inference, returned in eval mode, and its dropout probabilities (``attention_dropout``,
GPT-2's ``attn_pdrop``, ``resid_pdrop`` and ``embd_pdrop``) are not copied, so that in training
mode the book's parts drop nothing.

``transformers`` computes RoPE's angles, and RMSNorm, in float32 whatever the model's dtype;
:func:`upcast_transformers` makes those float64 (the same formulas), so that a float64 copy of
the reference can be compared with this module's float64 logits to 1e-10. ``transformers`` is
imported only by the functions that need it.
"""

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import rope_scaling
from ._checks import Factory, accumulation_dtype, check_number, check_sizes, check_token_ids
from .delta_layer import DeltaState, GatedDeltaNet
from .functional import causal_mask, scaled_dot_product_attention
from .inference import cached_visible
from .kv_cache import KVCache, RollingKVCache, storage_dtype
from .latent import LatentKVCache
from .norms import RMSNorm
from .positions import LearnedPositions, RotaryEmbedding
from .sparse import IndexedLatentKVCache, LightningIndexer, dsa_attention

__all__ = ["SUPPORTED", "CausalLM", "from_transformers", "upcast_transformers"]

SUPPORTED = (
    "gpt2", "gpt_neox", "llama", "mistral", "qwen3", "gemma3_text", "gemma3", "gpt_oss",
    "deepseek_v3", "qwen3_next", "deepseek_v32",
)
"""The ``config.model_type`` values :func:`from_transformers` accepts. ``gemma3_text`` is
``Gemma3ForCausalLM`` (Gemma 3 1B); ``gemma3`` is the multimodal
``Gemma3ForConditionalGeneration`` (Gemma 3 4B to 27B), of which only the text model and the
output projection are read: the copy takes token ids, never images."""

_REFUSED: dict[str, str] = {}  # model type -> why it is refused for now (none at present)

_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "gelu": F.gelu,
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
}


def _activation(name: str) -> Callable[[Tensor], Tensor]:
    """The activation called ``name`` in a ``transformers`` configuration."""
    if name not in _ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, got {name!r}")
    return _ACTIVATIONS[name]


class _Attention(nn.Module):
    """Causal grouped-query attention with optional RoPE, QK-norm and sliding window.

    :class:`~attention.GroupedQueryAttention`'s forward, with the pieces today's models add:
    queries and keys normalized per head (QK-norm: Qwen3, Gemma 3 and Qwen3-Next) and then
    rotated, and a score scale other than 1/sqrt(d_h) where the model has one.
    """

    def __init__(
        self, d: int, num_heads: int, num_kv_heads: int, d_h: int, *, qkv_bias: bool,
        out_bias: bool, rotary: RotaryEmbedding | None, window: int | None, scale: float,
        qk_norm: tuple[nn.Module, nn.Module] | None = None, sinks: Tensor | None = None,
        output_gate: bool = False,
    ) -> None:
        """The four projections; ``window`` None for a global layer; learned ``sinks`` (h,)."""
        super().__init__()
        self.num_heads, self.num_kv_heads, self.d_h = num_heads, num_kv_heads, d_h
        self.window, self.scale, self.rotary = window, scale, rotary
        self.W_query = nn.Linear(d, num_heads * d_h, bias=qkv_bias)
        self.W_key = nn.Linear(d, num_kv_heads * d_h, bias=qkv_bias)
        self.W_value = nn.Linear(d, num_kv_heads * d_h, bias=qkv_bias)
        self.out_proj = nn.Linear(num_heads * d_h, d, bias=out_bias)
        self.q_norm: nn.Module | None
        self.k_norm: nn.Module | None
        self.q_norm, self.k_norm = qk_norm if qk_norm is not None else (None, None)
        self.sinks = None if sinks is None else nn.Parameter(sinks.detach().clone())
        # gated attention (Qiu et al. 2025, Qwen3-Next): z ⊙ sigmoid(x W_gate) per feature
        self.W_gate = nn.Linear(d, num_heads * d_h, bias=qkv_bias) if output_gate else None

    def new_cache(self, batch_size: int, max_tokens: int) -> KVCache | RollingKVCache:
        """A KVCache, or a RollingKVCache of w slots in a sliding-window layer."""
        weight = self.W_key.weight
        like = Factory(device=weight.device, dtype=storage_dtype(weight))  # or autocast's
        if self.window is None:
            return KVCache(batch_size, self.num_kv_heads, max_tokens, self.d_h, **like)
        return RollingKVCache(
            batch_size, self.num_kv_heads, self.window, self.d_h, max_tokens, **like
        )

    def forward(self, x: Tensor, cache: KVCache | RollingKVCache | None = None) -> Tensor:
        """Context vectors (b, t, d) of x (b, t, d), after the n cached tokens if any."""
        b, t, _ = x.shape
        h, h_kv, d_h = self.num_heads, self.num_kv_heads, self.d_h
        queries = self.W_query(x).view(b, t, h, d_h)  # (b, t, h, d_h)
        keys = self.W_key(x).view(b, t, h_kv, d_h)  # (b, t, h_kv, d_h)
        values = self.W_value(x).view(b, t, h_kv, d_h).transpose(1, 2)  # (b, h_kv, t, d_h)
        if self.q_norm is not None and self.k_norm is not None:  # QK-norm: each head's query and key, before RoPE
            queries, keys = self.q_norm(queries), self.k_norm(keys)
        queries, keys = queries.transpose(1, 2), keys.transpose(1, 2)  # (b, ·, t, d_h)
        n = 0 if cache is None else cache.length  # position of x's first token
        if self.rotary is not None:
            queries, keys = self.rotary(queries, start=n), self.rotary(keys, start=n)
        if cache is not None:
            keys, values = cache.append(keys, values)  # (b, h_kv, t_k, d_h) each
        mask = cached_visible(n, t, keys, cache, self.window, 0)  # (t, t_k)
        context = scaled_dot_product_attention(
            queries, keys, values, attn_mask=mask, scale=self.scale, enable_gqa=True,
            sinks=self.sinks,
        )  # (b, h, t, d_h)
        context = context.transpose(1, 2).reshape(b, t, h * d_h)  # (b, t, h d_h)
        if self.W_gate is not None:
            context = context * torch.sigmoid(self.W_gate(x))
        return self.out_proj(context)  # (b, t, d)


class _LatentAttention(nn.Module):
    """DeepSeek-V3's multi-head latent attention, expanded form, over chapter 10's latent cache.

    :class:`~attention.latent.MultiHeadLatentAttention` with what DeepSeek-V2 and V3 add to the
    paper's equations: RMSNorm on the query latent and on the key-value latent c (which is what
    the cache holds), content keys and values each of its own width (``qk_nope_head_dim`` and
    ``v_head_dim``, both 128 in DeepSeek-V3), interleaved RoPE pairs (unless ``rope_interleave``
    is False; always in V3.2), and YaRN's mscale² on the scores.
    """

    def __init__(self, source: Any, config: Any, rotary: RotaryEmbedding, scale: float) -> None:
        """Copies of ``source``'s projections and norms."""
        super().__init__()
        self.num_heads, self.rotary, self.scale = config.num_attention_heads, rotary, scale
        self.d_c, self.d_r = config.kv_lora_rank, config.qk_rope_head_dim
        self.d_nope, self.d_v = config.qk_nope_head_dim, config.v_head_dim
        self.window = None
        if source.q_lora_rank is None:
            self.W_down_query, self.q_norm = None, None
            self.W_up_query = _linear_from(source.q_proj)
        else:
            self.W_down_query = _linear_from(source.q_a_proj)  # W_DQ
            self.q_norm = _rms_norm(source.q_a_layernorm, source.q_a_layernorm.variance_epsilon)
            self.W_up_query = _linear_from(source.q_b_proj)  # [W_UQ | W_QR], head by head
        self.W_down_kv = _linear_from(source.kv_a_proj_with_mqa)  # [W_DKV | W_KR]
        self.kv_norm = _rms_norm(source.kv_a_layernorm, source.kv_a_layernorm.variance_epsilon)
        self.W_up_kv = _linear_from(source.kv_b_proj)  # [W_UK | W_UV], head by head
        self.out_proj = _linear_from(source.o_proj)

    def new_cache(self, batch_size: int, max_tokens: int) -> LatentKVCache:
        """d_c + d_h^R numbers per token: the normalized latent and the rotated shared key."""
        weight = self.W_down_kv.weight
        return LatentKVCache(batch_size, max_tokens, self.d_c, self.d_r,
                             dtype=storage_dtype(weight), device=weight.device)

    def forward(self, x: Tensor, cache: LatentKVCache | None = None) -> Tensor:
        """Context vectors (b, t, d) of x (b, t, d), after the n cached tokens if any."""
        b, t, _ = x.shape
        h, d_nope, d_r, d_v = self.num_heads, self.d_nope, self.d_r, self.d_v
        n = 0 if cache is None else cache.length
        c_q = x
        if self.W_down_query is not None and self.q_norm is not None:
            c_q = self.q_norm(self.W_down_query(x))
        queries = self.W_up_query(c_q).view(b, t, h, d_nope + d_r).transpose(1, 2)
        q_content, q_rope = queries.split([d_nope, d_r], dim=-1)  # (b, h, t, ·)
        latents, rope_keys = self.W_down_kv(x).split([self.d_c, d_r], dim=-1)  # (b, t, ·)
        latents, rope_keys = self.kv_norm(latents), self.rotary(rope_keys, start=n)
        q_rope = self.rotary(q_rope, start=n)
        if cache is not None:
            latents, rope_keys = cache.append(latents, rope_keys)  # (b, t_k, d_c), (b, t_k, d_R)
        t_k = latents.shape[1]
        kv = self.W_up_kv(latents).view(b, t_k, h, d_nope + d_v).transpose(1, 2)
        k_content, values = kv.split([d_nope, d_v], dim=-1)  # (b, h, t_k, d_nope), (.., d_v)
        keys = torch.cat([k_content, rope_keys[:, None].expand(b, h, t_k, d_r)], dim=-1)
        queries = torch.cat([q_content, q_rope], dim=-1)  # (b, h, t, d_nope + d_R)
        context = self._attend(queries, keys, values, x, c_q, cache)  # (b, h, t, d_v)
        return self.out_proj(context.transpose(1, 2).reshape(b, t, h * d_v))  # (b, t, d)

    def _attend(self, queries: Tensor, keys: Tensor, values: Tensor, x: Tensor, c_q: Tensor,
                cache: LatentKVCache | None) -> Tensor:
        """Causal attention (b, h, t, d_v) of the t queries over the t_k keys."""
        t, t_k = queries.shape[2], keys.shape[2]
        mask = causal_mask(t, t_k, device=x.device, alignment="bottom_right")  # (t, t_k)
        return scaled_dot_product_attention(queries, keys, values, attn_mask=mask,
                                            scale=self.scale)


class _SparseLatentAttention(_LatentAttention):
    """DeepSeek-V3.2: DeepSeek-V3's latent attention over the top-k tokens an indexer selects.

    The lightning indexer (chapter 14) reads the block's input x and MLA's query latent c_Q;
    one selection serves every head (:func:`~attention.sparse.dsa_attention`). Its RoPE is the
    model's, in two halves where MLA's pairs are interleaved, as transformers' indexer has it.
    """

    def __init__(self, source: Any, config: Any, rotary: RotaryEmbedding, scale: float) -> None:
        """Copies of ``source``'s projections, norms and indexer."""
        super().__init__(source, config, rotary, scale)
        theirs = source.indexer
        self.top_k = config.index_topk
        self.indexer = LightningIndexer(
            config.hidden_size, config.q_lora_rank, config.index_n_heads, config.index_head_dim,
            config.qk_rope_head_dim, base=config.rope_parameters["rope_theta"],
            scaling=rotary.scaling,
        )
        ours = self.indexer
        for linear, their in ((ours.W_query, theirs.wq_b), (ours.W_key, theirs.wk),
                              (ours.W_weights, theirs.weights_proj)):
            _copy(linear, their.weight, their.bias)
        ours.key_norm = _layer_norm(theirs.k_norm)

    def new_cache(self, batch_size: int, max_tokens: int) -> IndexedLatentKVCache:
        """d_c + d_h^R + d_I numbers per token: the latent, the rotated key, the index key."""
        weight = self.W_down_kv.weight
        return IndexedLatentKVCache(batch_size, max_tokens, self.d_c, self.d_r,
                                    self.indexer.index_dim, dtype=storage_dtype(weight),
                                    device=weight.device)

    def _attend(self, queries: Tensor, keys: Tensor, values: Tensor, x: Tensor, c_q: Tensor,
                cache: LatentKVCache | None) -> Tensor:
        """Attention (b, h, t, d_v) over each query's top-k visible keys by the index scores."""
        index_cache = cache if isinstance(cache, IndexedLatentKVCache) else None
        start = keys.shape[2] - queries.shape[2]  # the n cached tokens before these
        scores = self.indexer(x, c_q, start=start, cache=index_cache)  # (b, t, t_k)
        return dsa_attention(queries, keys, values, scores, top_k=self.top_k, scale=self.scale)


class _FeedForward(nn.Module):
    """act(x W_1) W_2, or with ``gated`` (SwiGLU, GeGLU): (act(x W_gate) ⊙ x W_up) W_down."""

    def __init__(self, d: int, d_ff: int, act: str, *, gated: bool, bias: bool) -> None:
        """The two or three projections and the activation."""
        super().__init__()
        self.act = _activation(act)
        self.up = nn.Linear(d, d_ff, bias=bias)
        self.gate = nn.Linear(d, d_ff, bias=bias) if gated else None
        self.down = nn.Linear(d_ff, d, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        """x (b, t, d) -> (b, t, d)."""
        if self.gate is None:
            return self.down(self.act(self.up(x)))
        return self.down(self.act(self.gate(x)) * self.up(x))


class _Borrowed(nn.Module):
    """A transformers feed-forward module used as it is: a mixture of experts' routing and experts.

    The book does not teach routing; only the first output (the hidden states) is kept.
    """

    def __init__(self, module: nn.Module) -> None:
        """Wrap ``module`` (its weights are shared, not copied)."""
        super().__init__()
        self.module = module

    def forward(self, x: Tensor) -> Tensor:
        """x (b, t, d) -> (b, t, d)."""
        out = self.module(x)
        return out[0] if isinstance(out, tuple) else out


class _Block(nn.Module):
    """A pre-norm block: x + attn(norm(x)), then x + ffn(norm(x)); or both from x (parallel).

    Gemma 3 also normalizes each sublayer's output before adding it (``post_norms``).
    """

    def __init__(
        self, attention: nn.Module, ffn: nn.Module, norms: tuple[nn.Module, nn.Module], *,
        parallel: bool = False, post_norms: tuple[nn.Module, nn.Module] | None = None,
    ) -> None:
        """The sublayers, their input norms and, for Gemma 3, their output norms."""
        super().__init__()
        self.attention, self.ffn, self.parallel = attention, ffn, parallel
        self.attn_norm, self.ffn_norm = norms
        self.post_attn_norm: nn.Module | None
        self.post_ffn_norm: nn.Module | None
        self.post_attn_norm, self.post_ffn_norm = post_norms if post_norms else (None, None)

    def forward(self, x: Tensor, cache: Any = None) -> Tensor:
        """x (b, t, d) -> (b, t, d); ``cache`` the layer's cache (see :meth:`CausalLM.new_caches`)."""
        attended = self.attention(self.attn_norm(x), cache)  # (b, t, d)
        if self.parallel:  # GPT-NeoX: both sublayers read x
            return self.ffn(self.ffn_norm(x)) + attended + x
        if self.post_attn_norm is not None:
            attended = self.post_attn_norm(attended)
        x = x + attended
        fed = self.ffn(self.ffn_norm(x))  # (b, t, d)
        if self.post_ffn_norm is not None:
            fed = self.post_ffn_norm(fed)
        return x + fed


class CausalLM(nn.Module):
    """A decoder-only language model of pre-norm blocks: ``forward(ids) -> logits``.

    ``layer_kinds`` lists each layer as "global", "local" (sliding window) or "linear" (a gated
    delta layer): the hybrid stacks that Gemma 3 (5 local : 1 global), gpt-oss (1 : 1) and
    Qwen3-Next (3 linear : 1 global) declare. :func:`from_transformers` builds one.

    Args:
        embed: the token embedding (n_vocab, d).
        blocks: the layers, each with an ``attention`` sublayer.
        norm: the final norm.
        lm_head: the output projection (d, n_vocab).
        positions: learned positions (GPT-2), or None.
        embed_scale: multiplies the embeddings (Gemma's sqrt(d)).
        final_softcap: soft-capping of the logits, or None.
        name: the model type it was built from.

    Raises:
        ValueError: if embed is not an ``nn.Embedding``, a block not an ``nn.Module`` with an
            ``attention`` sublayer, norm or lm_head not an ``nn.Module``,
            positions not None or a ``LearnedPositions``, embed_scale not a finite number > 0,
            or final_softcap not None or a finite number > 0.

    Examples:
        >>> from transformers import AutoConfig, AutoModelForCausalLM  # doctest: +SKIP
        >>> config = AutoConfig.for_model("qwen3", num_hidden_layers=2, hidden_size=32,
        ...     num_attention_heads=2, num_key_value_heads=1, intermediate_size=64)  # doctest: +SKIP
        >>> model = from_transformers(AutoModelForCausalLM.from_config(config))  # doctest: +SKIP
        >>> model.layer_kinds  # doctest: +SKIP
        ['global', 'global']
    """

    def __init__(
        self, embed: nn.Embedding, blocks: Sequence[nn.Module], norm: nn.Module, lm_head: nn.Linear, *,
        positions: LearnedPositions | None = None, embed_scale: float = 1.0,
        final_softcap: float | None = None, name: str = "",
    ) -> None:
        """Embedding, blocks, final norm and output projection."""
        if not isinstance(embed, nn.Embedding):
            raise ValueError(f"embed must be an nn.Embedding, got {type(embed).__name__}")
        for module_name, module in (("norm", norm), ("lm_head", lm_head)):
            if not isinstance(module, nn.Module):
                raise ValueError(
                    f"{module_name} must be a torch.nn.Module, got {type(module).__name__}"
                )
        for i, block in enumerate(blocks):  # read by layer_kinds and new_caches
            if not isinstance(block, nn.Module) or not isinstance(getattr(block, "attention", None), nn.Module):
                raise ValueError(f"blocks[{i}] must be a torch.nn.Module with an attention sublayer "
                                 f"(a torch.nn.Module), got {type(block).__name__}")
        if positions is not None and not isinstance(positions, LearnedPositions):
            raise ValueError(
                f"positions must be None or a LearnedPositions, got {type(positions).__name__}"
            )
        embed_scale = check_number("embed_scale", embed_scale, 0.0, inclusive=False)
        if final_softcap is not None:  # c tanh(z / c): a negative c would act as -c
            final_softcap = check_number("final_softcap", final_softcap, 0.0, inclusive=False)
        super().__init__()
        self.embed, self.positions, self.embed_scale = embed, positions, embed_scale
        self.blocks, self.norm, self.lm_head = nn.ModuleList(blocks), norm, lm_head
        self.final_softcap, self.name = final_softcap, name

    @property
    def layer_kinds(self) -> list[str]:
        """"local" (sliding window), "global" (every token) or "linear" (a gated delta layer)."""
        return ["linear" if isinstance(a, GatedDeltaNet)
                else "global" if a.window is None else "local" for a in self._attentions()]

    def new_caches(self, batch_size: int, max_tokens: int) -> list[Any]:
        """One empty cache per layer, for up to ``max_tokens`` positions, in the weights' dtype
        or, while ``torch.autocast`` is on and they are not float64, in its dtype (the keys
        come out in it).

        A gated delta layer's cache is its :class:`~attention.delta_layer.DeltaState`, whose
        size does not depend on ``max_tokens``.
        """
        return [DeltaState() if isinstance(a, GatedDeltaNet)
                else a.new_cache(batch_size, max_tokens) for a in self._attentions()]

    def _attentions(self) -> list[Any]:
        """Each block's attention sublayer, read by name (nn.Module types it Tensor | Module)."""
        return [block.attention for block in self.blocks]

    def forward(
        self, input_ids: Tensor, caches: list[Any] | None = None
    ) -> Tensor:
        """Logits (b, t, n_vocab) of the token ids (b, t), after the cached tokens if any.

        Raises:
            ValueError: if input_ids is not a (b, t) tensor of int64 or int32 ids in
                [0, n_vocab), caches does not hold one cache per layer, or is empty in a model
                with learned positions (it has no layer to count the tokens before).
        """
        check_token_ids(input_ids, "input_ids", self.embed.num_embeddings)
        if caches is not None and (not isinstance(caches, list) or None in caches):
            # a None among them would run that layer without its cache, as if it had none
            raise ValueError(f"caches must be the list new_caches() returns, got {caches!r}")
        if caches is not None and len(caches) != len(self.blocks):
            raise ValueError(f"caches must hold {len(self.blocks)} caches, got {len(caches)}")
        x = self.embed(input_ids)  # (b, t, d)
        if self.embed_scale != 1.0:  # Gemma: the scale rounded to the weights' dtype first
            x = x * torch.tensor(self.embed_scale, dtype=x.dtype)
        if self.positions is not None:
            if caches == []:  # no layer, no cache that counts the tokens before these
                raise ValueError("caches must be None for a model without layers and with learned "
                                 "positions (no cache counts the tokens before), got []")
            x = self.positions(x, start=0 if caches is None else caches[0].length)
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i])
        logits = self.lm_head(self.norm(x))  # (b, t, n_vocab)
        if self.final_softcap is not None:  # Gemma 2's soft cap: c tanh(z / c)
            logits = torch.tanh(logits / self.final_softcap) * self.final_softcap
        return logits

    @torch.no_grad()
    def generate(self, input_ids: Tensor, max_new_tokens: int) -> Tensor:
        """Greedy decoding with the book's caches: ids (b, t + max_new_tokens), of
        input_ids' dtype.

        Raises:
            ValueError: if max_new_tokens is not an integer >= 1 (transformers' ``generate``
                refuses 0 too), input_ids holds no token, or input_ids as in :meth:`forward`.
        """
        check_sizes(max_new_tokens=max_new_tokens)  # as transformers: 0 is refused
        check_token_ids(input_ids, "input_ids", self.embed.num_embeddings)
        if input_ids.shape[1] == 0:  # the first new token is read off the last given one
            raise ValueError(f"input_ids must hold at least one token per sequence, got shape "
                             f"{tuple(input_ids.shape)}")
        # no layer: nothing to cache, and every step reads the whole sequence
        caches = (self.new_caches(input_ids.shape[0], input_ids.shape[1] + max_new_tokens)
                  if len(self.blocks) else None)
        ids, new = input_ids, input_ids
        for _ in range(max_new_tokens):
            logits = self(new if caches is not None else ids, caches)  # (b, t or 1, n_vocab)
            new = logits[:, -1].argmax(dim=-1, keepdim=True).to(ids.dtype)  # (b, 1), as given
            ids = torch.cat([ids, new], dim=1)
        return ids


# ---------------------------------------------------------------------------------------------
# Reading a transformers model
#
# Its modules and configurations are typed Any here: they are read by attribute name, which
# names exist depends on the model type, and nn.Module's annotations type every such name
# Tensor | Module.


def _copy(linear: nn.Linear, weight: Tensor, bias: Tensor | None = None) -> None:
    """Copy an (out, in) weight, and a bias, into ``linear``."""
    if tuple(weight.shape) != tuple(linear.weight.shape):
        raise ValueError(
            f"weight must have shape {tuple(linear.weight.shape)}, got {tuple(weight.shape)}"
        )
    if (linear.bias is None) != (bias is None):  # a bias option the model's module ignores
        raise ValueError(
            f"bias must be {'None' if linear.bias is None else 'a tensor'} (the configuration "
            f"asks for {'no ' if linear.bias is None else ''}bias), got "
            f"{'None' if bias is None else tuple(bias.shape)}"
        )
    with torch.no_grad():
        linear.weight.copy_(weight)
        if bias is not None:  # linear has one too, as checked above
            linear.bias.copy_(bias)


def _linear_from(source: nn.Linear) -> nn.Linear:
    """An nn.Linear with ``source``'s weight and bias."""
    out, inp = source.weight.shape
    linear = nn.Linear(inp, out, bias=source.bias is not None)
    _copy(linear, source.weight, source.bias)
    return linear


def _layer_norm(source: nn.LayerNorm) -> nn.LayerNorm:
    """A copy of a LayerNorm."""
    norm = nn.LayerNorm(source.normalized_shape, eps=source.eps)
    norm.load_state_dict(source.state_dict())
    return norm


def _rms_norm(source: Any, eps: float, offset: float = 0.0) -> RMSNorm:
    """The book's RMSNorm with gain ``offset`` + ``source.weight`` (Gemma stores γ - 1)."""
    norm = RMSNorm(source.weight.shape[0], eps, offset=offset)
    with torch.no_grad():
        norm.weight.copy_(source.weight.detach())
    return norm


def _option(config: Any, name: str, allowed: tuple[object, ...], default: Any = None) -> None:
    """Refuse a configuration option whose value the book does not implement."""
    value = getattr(config, name, default)
    if value not in allowed:
        raise ValueError(
            f"{config.model_type}: {name}={value!r} is not implemented here, "
            f"supported: {allowed}"
        )


def _whole_head_rope(params: dict[str, Any], model_type: str) -> None:
    """Refuse a partial rotary factor in a family whose attention rotates whole heads:
    transformers fails on it, ignores it, or (DeepSeek's interleaved RoPE) turns every pair by
    the fewer angles of the partial rule."""
    factor = params.get("partial_rotary_factor", 1.0)
    if factor != 1.0:
        raise ValueError(f"{model_type}: partial_rotary_factor={factor!r} is not implemented here, "
                         f"supported: (1.0,)")


def _rope_rule(
    params: dict[str, Any], model_type: str, max_positions: int
) -> rope_scaling.RopeScaling | None:
    """The attention.rope_scaling rule of a ``rope_parameters`` dict, or None for plain RoPE."""
    kind = params.get("rope_type", "default")
    if kind == "default":
        return None
    if kind == "linear":
        return rope_scaling.PositionInterpolation(params["factor"])
    if kind == "llama3":
        return rope_scaling.Llama3Scaling(
            params["factor"], params["original_max_position_embeddings"],
            params["low_freq_factor"], params["high_freq_factor"],
        )
    if kind == "dynamic":  # transformers' t_train is max_position_embeddings
        return rope_scaling.DynamicNTKScaling(params["factor"], max_positions)
    if kind == "yarn":
        return _yarn(params, max_positions)
    raise ValueError(
        f"{model_type}: rope_type={kind!r} is not supported; "
        f"supported: 'default', 'linear', 'llama3', 'dynamic', 'yarn'"
    )


def _yarn(params: dict[str, Any], max_positions: int) -> rope_scaling.YaRNScaling:
    """YaRN as transformers reads it: the index ramp, and DeepSeek's ratio of two mscales."""
    factor = params.get("factor") or max_positions / params["original_max_position_embeddings"]

    def mscale(scale: float, weight: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * weight * math.log(scale) + 1.0

    attention_factor = params.get("attention_factor")
    if attention_factor is None:
        weight, weight_all = params.get("mscale"), params.get("mscale_all_dim")
        attention_factor = (mscale(factor, weight) / mscale(factor, weight_all)
                            if weight and weight_all else mscale(factor))
    return rope_scaling.YaRNScaling(
        factor, params["original_max_position_embeddings"],
        beta_fast=params.get("beta_fast") or 32.0, beta_slow=params.get("beta_slow") or 1.0,
        attention_factor=attention_factor, ramp="index",
        truncate=bool(params.get("truncate", True)),  # None: no truncation, as transformers reads it
    )


def _rotary(
    params: dict[str, Any], d_h: int, config: Any, reference: Tensor | None,
    interleaved: bool = False,
) -> RotaryEmbedding:
    """The book's RoPE for ``params``, checked against the reference's float32 frequencies."""
    rotary_dim = int(d_h * params.get("partial_rotary_factor", 1.0))
    rotary = RotaryEmbedding(
        d_h, params["rope_theta"], interleaved, rotary_dim=rotary_dim,
        scaling=_rope_rule(params, config.model_type, config.max_position_embeddings),
    )
    if reference is not None:  # transformers computes them in float32: compare to that
        if reference.dtype in (torch.float16, torch.bfloat16):  # model.to(dtype), model.half()
            raise ValueError(
                f"{config.model_type}: the model's inv_freq is {reference.dtype} (the model was "
                f"cast after loading): load it with from_pretrained(..., dtype=...) instead"
            )
        if reference.is_meta:  # no numbers to compare; the book's, made on meta too, hold none
            return rotary
        ours = rotary.frequencies
        theirs = reference.detach().double().cpu()
        if theirs.shape != ours.shape or not torch.allclose(ours, theirs, rtol=1e-6, atol=0):
            raise ValueError(
                f"{config.model_type}: the book's RoPE frequencies for {params} differ from the "
                f"model's inv_freq: refusing a silently different model"
            )
    return rotary


def _inv_freq(rotary_emb: Any, params: dict[str, Any], prefix: str = "") -> Tensor:
    """The reference's frequencies up to t_train, which :func:`_rotary` compares with the book's.

    Dynamic RoPE rescales ``inv_freq`` in place once a forward runs past t_train (and keeps the
    longest length's until a sequence is shorter than t_train); ``original_inv_freq`` keeps the
    rule's own, so a model that has run is the same model as before.
    """
    name = "original_inv_freq" if params.get("rope_type") == "dynamic" else "inv_freq"
    return cast(Tensor, getattr(rotary_emb, prefix + name))


def _gpt2(model: Any) -> CausalLM:
    """GPT-2: learned positions, LayerNorm, fused QKV stored as Conv1D (in, out) weights."""
    config, body = model.config, model.transformer
    _option(config, "scale_attn_weights", (True,))
    _option(config, "scale_attn_by_inverse_layer_idx", (False,))
    _option(config, "reorder_and_upcast_attn", (False,))
    _option(config, "activation_function", tuple(_ACTIVATIONS))
    d, h = config.n_embd, config.n_head
    d_h = d // h
    blocks = []
    for layer in body.h:
        attention = _Attention(
            d, h, h, d_h, qkv_bias=True, out_bias=True, rotary=None, window=None, scale=d_h**-0.5
        )
        w_qkv, b_qkv = layer.attn.c_attn.weight.t(), layer.attn.c_attn.bias  # (3d, d), (3d,)
        for i, linear in enumerate((attention.W_query, attention.W_key, attention.W_value)):
            _copy(linear, w_qkv[i * d : (i + 1) * d], b_qkv[i * d : (i + 1) * d])
        _copy(attention.out_proj, layer.attn.c_proj.weight.t(), layer.attn.c_proj.bias)
        d_ff = layer.mlp.c_fc.weight.shape[1]
        ffn = _FeedForward(d, d_ff, config.activation_function, gated=False, bias=True)
        _copy(ffn.up, layer.mlp.c_fc.weight.t(), layer.mlp.c_fc.bias)
        _copy(ffn.down, layer.mlp.c_proj.weight.t(), layer.mlp.c_proj.bias)
        norms = (_layer_norm(layer.ln_1), _layer_norm(layer.ln_2))
        blocks.append(_Block(attention, ffn, norms))
    positions = LearnedPositions(config.n_positions, d)
    with torch.no_grad():
        positions.embedding.weight.copy_(body.wpe.weight)
    return CausalLM(
        nn.Embedding.from_pretrained(body.wte.weight.detach().clone(), freeze=False), blocks,
        _layer_norm(body.ln_f), _linear_from(model.lm_head), positions=positions, name="gpt2",
    )


def _gpt_neox(model: Any) -> CausalLM:
    """GPT-NeoX: partial rotary, parallel residual, fused QKV laid out head by head."""
    config, body = model.config, model.gpt_neox
    _option(config, "hidden_act", tuple(_ACTIVATIONS))
    d, h = config.hidden_size, config.num_attention_heads
    d_h = d // h
    rotary = _rotary(config.rope_parameters, d_h, config,
                     _inv_freq(body.rotary_emb, config.rope_parameters))
    blocks = []
    for layer in body.layers:
        bias = config.attention_bias
        attention = _Attention(
            d, h, h, d_h, qkv_bias=bias, out_bias=bias, rotary=rotary, window=None,
            scale=d_h**-0.5,
        )
        # rows of query_key_value: head by head, [q | k | v] of d_h each
        qkv = layer.attention.query_key_value
        w = qkv.weight.view(h, 3, d_h, d)  # (h, 3, d_h, d)
        b = qkv.bias.view(h, 3, d_h) if qkv.bias is not None else None  # (h, 3, d_h)
        for i, linear in enumerate((attention.W_query, attention.W_key, attention.W_value)):
            _copy(linear, w[:, i].reshape(d, d), None if b is None else b[:, i].reshape(d))
        _copy(attention.out_proj, layer.attention.dense.weight, layer.attention.dense.bias)
        ffn = _FeedForward(d, config.intermediate_size, config.hidden_act, gated=False, bias=True)
        _copy(ffn.up, layer.mlp.dense_h_to_4h.weight, layer.mlp.dense_h_to_4h.bias)
        _copy(ffn.down, layer.mlp.dense_4h_to_h.weight, layer.mlp.dense_4h_to_h.bias)
        norms = (_layer_norm(layer.input_layernorm), _layer_norm(layer.post_attention_layernorm))
        blocks.append(_Block(attention, ffn, norms, parallel=config.use_parallel_residual))
    return CausalLM(
        nn.Embedding.from_pretrained(body.embed_in.weight.detach().clone(), freeze=False),
        blocks, _layer_norm(body.final_layer_norm), _linear_from(model.lm_head),
        name="gpt_neox",
    )


def _feed_forward(config: Any, mlp: Any, gemma: bool) -> _FeedForward:
    """SwiGLU (GeGLU in Gemma) with the weights of ``mlp``'s gate, up and down projections."""
    ffn = _FeedForward(
        config.hidden_size, config.intermediate_size,
        config.hidden_activation if gemma else config.hidden_act, gated=True,
        bias=mlp.gate_proj.bias is not None,  # Qwen3's and DeepSeek's ignore mlp_bias
    )
    for ours, theirs in ((cast(nn.Linear, ffn.gate), mlp.gate_proj), (ffn.up, mlp.up_proj),
                         (ffn.down, mlp.down_proj)):
        _copy(ours, theirs.weight, theirs.bias)
    return ffn


def _attention(
    source: Any, config: Any, rotary: RotaryEmbedding, layer_type: str, scale: float,
    norm: tuple[float, float], output_gate: bool,
) -> _Attention:
    """The book's attention with the weights of a Llama-like ``self_attn`` module."""
    d, h, h_kv = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
    d_h = getattr(config, "head_dim", None) or d // h
    eps, offset = norm
    # the modules' own biases, as transformers computes with them: Mistral's have none whatever
    # attention_bias says
    qkv_bias, out_bias = source.q_proj.bias is not None, source.o_proj.bias is not None
    qk_norm = None
    if hasattr(source, "q_norm"):
        qk_norm = (_rms_norm(source.q_norm, eps, offset), _rms_norm(source.k_norm, eps, offset))
    attention = _Attention(
        d, h, h_kv, d_h, qkv_bias=qkv_bias, out_bias=out_bias, rotary=rotary,
        window=config.sliding_window if layer_type == "sliding_attention" else None,
        scale=scale, qk_norm=qk_norm, sinks=getattr(source, "sinks", None),
        output_gate=output_gate,
    )
    q_weight, q_bias = source.q_proj.weight, source.q_proj.bias
    if attention.W_gate is not None:  # Qwen3-Next's q_proj: per head, d_h query rows then d_h gate rows
        q_weight = q_weight.view(h, 2, d_h, d)
        q_bias = None if q_bias is None else q_bias.view(h, 2, d_h)
        _copy(attention.W_gate, q_weight[:, 1].reshape(h * d_h, d),
              None if q_bias is None else q_bias[:, 1].reshape(h * d_h))
        q_weight = q_weight[:, 0].reshape(h * d_h, d)
        q_bias = None if q_bias is None else q_bias[:, 0].reshape(h * d_h)
    _copy(attention.W_query, q_weight, q_bias)
    for ours, theirs in ((attention.W_key, source.k_proj), (attention.W_value, source.v_proj),
                         (attention.out_proj, source.o_proj)):
        _copy(ours, theirs.weight, theirs.bias)
    return attention


def _llama_like(model: Any) -> CausalLM:
    """Llama, Mistral, Qwen3, Gemma 3, gpt-oss, Qwen3-Next: RMSNorm, RoPE, grouped-query."""
    config, body = model.config, model.model
    if config.model_type == "gemma3":  # multimodal Gemma 3: its text model and lm_head only
        config, body = config.text_config, body.language_model
        # Gemma3ForConditionalGeneration never applies it, Gemma3ForCausalLM does: no one meaning
        _option(config, "final_logit_softcapping", (None,))
    kind = config.model_type
    gemma = kind == "gemma3_text"
    next_ = kind == "qwen3_next"  # Qwen3-Next's norms store γ - 1 as Gemma's do
    d, h = config.hidden_size, config.num_attention_heads
    d_h = getattr(config, "head_dim", None) or d // h
    eps, offset = config.rms_norm_eps, 1.0 if gemma or next_ else 0.0
    # transformers runs layers[:num_hidden_layers], gpt-oss all of them: a config set to fewer
    # layers after loading (early exit, layer pruning) runs fewer
    layers = body.layers if kind == "gpt_oss" else body.layers[: config.num_hidden_layers]
    declared = (getattr(config, "layer_types", None) or [])[: len(layers)]  # those layers' types
    layer_types = declared or ["full_attention"] * len(layers)
    # transformers' cache follows layer_types: a window layer needs a window (its cache fails
    # without one), and Mistral's attention windows every layer whatever layer_types says
    if "sliding_attention" in layer_types and getattr(config, "sliding_window", None) is None:
        raise ValueError(f"{kind}: layer_types has 'sliding_attention' layers, so sliding_window "
                         f"must be an int, got None")
    if kind == "mistral" and config.sliding_window is not None:
        if declared and set(declared) != {"sliding_attention"}:
            raise ValueError(f"mistral: with sliding_window={config.sliding_window} every layer "
                             f"is windowed, so layer_types must be all 'sliding_attention', got "
                             f"{sorted(set(declared))}")
        layer_types = ["sliding_attention"] * len(layers)
    if kind == "qwen3" and not config.use_sliding_window:
        layer_types = ["full_attention"] * len(layers)
    # Llama's attention has no window whatever layer_types says (transformers' cache would
    # follow layer_types and window it): such a model has no one meaning, refuse it
    kinds = {"full_attention"} if kind == "llama" else {"full_attention", "sliding_attention"}
    if next_:  # Qwen3-Next builds no attention in a window layer, nor a mask for it
        kinds = {"full_attention", "linear_attention"}
    if not set(layer_types) <= kinds:
        raise ValueError(
            f"{kind}: layer_types must be in {sorted(kinds)}, got {sorted(set(layer_types))}"
        )
    # the book's feed-forward sublayers, or transformers' experts (gpt-oss's are all experts)
    dense = [kind != "gpt_oss" and "Moe" not in type(layer.mlp).__name__ for layer in layers]
    if any(dense):
        _option(config, "hidden_activation" if gemma else "hidden_act", tuple(_ACTIVATIONS))
    if gemma:
        _option(config, "attn_logit_softcapping", (None,))
        _option(config, "use_bidirectional_attention", (False, None))  # an encoder's mask
        scale = config.query_pre_attn_scalar**-0.5
    else:
        scale = d_h**-0.5
    params = config.rope_parameters
    rotaries = {}
    for layer_type in set(layer_types) - {"linear_attention"}:  # none in a model of no layers
        own = params[layer_type] if gemma else params  # a rule per layer type in Gemma 3
        if not next_:  # Qwen3-Next rotates a part of each head, the others whole heads
            _whole_head_rope(own, kind)
        reference = _inv_freq(body.rotary_emb, own, f"{layer_type}_" if gemma else "")
        rotaries[layer_type] = _rotary(own, d_h, config, reference)
    blocks = []
    for layer, layer_type, own_ffn in zip(layers, layer_types, dense, strict=True):
        if layer_type == "linear_attention":  # chapter 13's gated delta layer
            attention: nn.Module = GatedDeltaNet.from_qwen3_next(layer.linear_attn)
        else:
            attention = _attention(layer.self_attn, config, rotaries[layer_type], layer_type,
                                   scale, (eps, offset), next_)
        ffn = _feed_forward(config, layer.mlp, gemma) if own_ffn else _Borrowed(layer.mlp)
        norms = (_rms_norm(layer.input_layernorm, eps, offset),
                 _rms_norm(layer.pre_feedforward_layernorm if gemma
                           else layer.post_attention_layernorm, eps, offset))
        post = ((_rms_norm(layer.post_attention_layernorm, eps, offset),
                 _rms_norm(layer.post_feedforward_layernorm, eps, offset)) if gemma else None)
        blocks.append(_Block(attention, ffn, norms, post_norms=post))
    return CausalLM(
        nn.Embedding.from_pretrained(body.embed_tokens.weight.detach().clone(), freeze=False),
        blocks, _rms_norm(body.norm, eps, offset), _linear_from(model.lm_head),
        embed_scale=d**0.5 if gemma else 1.0,
        final_softcap=getattr(config, "final_logit_softcapping", None) if gemma else None,
        name=model.config.model_type,
    )


def _deepseek_v3(model: Any) -> CausalLM:
    """DeepSeek-V3 (and V3.2): multi-head latent attention, YaRN on the shared rotary key, MoE
    borrowed; V3.2 adds the lightning indexer's selection."""
    config, body = model.config, model.model
    sparse = config.model_type == "deepseek_v32"
    layers = body.layers[: config.num_hidden_layers]  # those transformers runs
    dense = [config.mlp_layer_types[i] == "dense" if sparse else i < config.first_k_dense_replace
             for i in range(len(layers))]  # the book's feed-forward, or transformers' MoE
    if any(dense):
        _option(config, "hidden_act", tuple(_ACTIVATIONS))
    # MLA gives every head its own key and value from the latent: transformers' attention fails
    # on fewer key-value heads than query heads
    _option(config, "num_key_value_heads", (config.num_attention_heads,))
    params = config.rope_parameters
    _whole_head_rope(params, config.model_type)  # MLA rotates the whole d_h^R
    rotary = _rotary(params, config.qk_rope_head_dim, config, _inv_freq(body.rotary_emb, params),
                     interleaved=sparse or bool(config.rope_interleave))  # V3.2: always
    scale = (config.qk_nope_head_dim + config.qk_rope_head_dim) ** -0.5
    weight_all = params.get("mscale_all_dim") or 0.0
    if params.get("rope_type", "default") != "default" and weight_all and params["factor"] > 1:
        scale *= (0.1 * weight_all * math.log(params["factor"]) + 1.0) ** 2  # YaRN's mscale²
    eps, blocks = config.rms_norm_eps, []
    for layer, own_ffn in zip(layers, dense, strict=True):
        kind = _SparseLatentAttention if sparse else _LatentAttention
        attention = kind(layer.self_attn, config, rotary, scale)
        ffn = _feed_forward(config, layer.mlp, False) if own_ffn else _Borrowed(layer.mlp)
        norms = (_rms_norm(layer.input_layernorm, eps),
                 _rms_norm(layer.post_attention_layernorm, eps))
        blocks.append(_Block(attention, ffn, norms))
    return CausalLM(
        nn.Embedding.from_pretrained(body.embed_tokens.weight.detach().clone(), freeze=False),
        blocks, _rms_norm(body.norm, eps), _linear_from(model.lm_head),
        name=config.model_type,
    )


def _check_cache_windows(config: Any, ours: CausalLM) -> None:
    """Refuse a layer that transformers' generate caches in a window its attention lacks.

    Its cache follows ``layer_types`` or, without them, ``sliding_window`` (else
    ``attention_chunk_size``) in every layer, whatever the attention does: a Llama, GPT-2 or
    DeepSeek-V3 config with one attends to every token in a forward but to the last w in
    generate, a model without one meaning.
    """
    declared = getattr(config, "layer_types", None)
    window, chunk = getattr(config, "sliding_window", None), getattr(config, "attention_chunk_size", None)
    inferred = ("sliding_attention" if window is not None
                else "chunked_attention" if chunk is not None else "full_attention")
    for i, attention in enumerate(ours._attentions()):
        kind = inferred if declared is None else declared[i] if i < len(declared) else "full_attention"
        cached = {"sliding_attention": window, "chunked_attention": chunk}.get(kind)
        ours_window = getattr(attention, "window", None)  # a gated delta layer has none
        if cached is None or cached == ours_window:
            continue
        name = "sliding_window" if kind == "sliding_attention" else "attention_chunk_size"
        field = f"{name}={cached!r}" if declared is None else f"layer_types[{i}]={kind!r} with {name}={cached!r}"
        sees = "every token" if ours_window is None else f"a window of {ours_window}"
        raise ValueError(
            f"{config.model_type}: {field} makes transformers' generate cache layer {i} in a window "
            f"of {cached} tokens, where its attention sees {sees}: no one model, refused; "
            f"supported: a cache window only where the attention has the same"
        )


_READERS = {
    "gpt2": _gpt2, "gpt_neox": _gpt_neox, "llama": _llama_like, "mistral": _llama_like,
    "qwen3": _llama_like, "gemma3_text": _llama_like, "gemma3": _llama_like,
    "gpt_oss": _llama_like, "deepseek_v3": _deepseek_v3, "qwen3_next": _llama_like,
    "deepseek_v32": _deepseek_v3,
}


def from_transformers(model: nn.Module) -> CausalLM:
    """The book's :class:`CausalLM` with the weights of a ``transformers`` causal-LM ``model``.

    The copy has ``model``'s dtype and device and is in eval mode. Tied embeddings stay tied:
    its ``lm_head`` then uses its token embedding's matrix.

    Args:
        model: a ``transformers`` causal LM whose ``config.model_type`` is in :data:`SUPPORTED`.

    Returns:
        The :class:`CausalLM`, built from the book's modules.

    Raises:
        ValueError: an unsupported model type or configuration option, naming what is supported,
            or a model without an lm_head (a base model such as ``LlamaModel``, a classifier).

    Examples:
        >>> from transformers import AutoConfig, AutoModelForCausalLM  # doctest: +SKIP
        >>> config = AutoConfig.for_model("gpt2", n_layer=2, n_embd=32, n_head=2)  # doctest: +SKIP
        >>> theirs = AutoModelForCausalLM.from_config(config).double().eval()  # doctest: +SKIP
        >>> ours = from_transformers(theirs)  # doctest: +SKIP
        >>> ids = torch.tensor([[1, 2, 3]])  # doctest: +SKIP
        >>> torch.allclose(ours(ids), theirs(ids).logits)  # doctest: +SKIP
        True
    """
    config = getattr(model, "config", None)
    kind = getattr(config, "model_type", None)
    if kind in _REFUSED:
        raise ValueError(f"{kind} is not supported yet: {_REFUSED[kind]}; supported: {SUPPORTED}")
    if kind not in _READERS:
        raise ValueError(
            f"model must be a transformers causal LM of model_type in {SUPPORTED}, got "
            f"{type(model).__name__} with model_type {kind!r}"
        )
    if not isinstance(getattr(model, "lm_head", None), nn.Linear):  # LlamaModel, a classifier
        raise ValueError(f"model must be a transformers causal LM with an lm_head, got "
                         f"{type(model).__name__}, which has none")
    weight = next(model.parameters())
    saved = torch.get_default_dtype()
    torch.set_default_dtype(weight.dtype)  # modules made in the model's dtype: copies exact
    try:
        with torch.device(weight.device):
            ours = _READERS[kind](model)
    except ValueError as error:  # what a module of the book refuses: say in which model
        if str(error).split(":", 1)[0] in SUPPORTED:
            raise
        raise ValueError(f"{kind}: {error}") from error
    finally:
        torch.set_default_dtype(saved)
    source: Any = model  # a transformers PreTrainedModel, which nn.Module's type does not know
    _check_cache_windows(source.config.get_text_config(decoder=True), ours)
    head, embed = source.get_output_embeddings(), source.get_input_embeddings()
    if head is not None and embed is not None and head.weight is embed.weight:
        ours.lm_head.weight = ours.embed.weight  # tied weights: one matrix, as in the source
    return ours.eval()


# ---------------------------------------------------------------------------------------------
# A float64 reference


@contextmanager
def _float_is_float64() -> Iterator[None]:
    """Within the block, ``torch.float`` and ``torch.float32`` name float64.

    transformers' RoPE rules then compute in float64 (they name float32 explicitly).
    """
    saved = torch.float
    torch.float = torch.float32 = torch.float64
    try:
        yield
    finally:
        torch.float = torch.float32 = saved


def _in_float64(forward: Callable[..., Any]) -> Callable[..., Any]:
    """``forward`` run with ``torch.float32`` naming float64 (``.float()`` is left as it is)."""

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        with _float_is_float64():
            return forward(*args, **kwargs)

    return wrapped


def _rms_forward(module: Any) -> Callable[[Tensor], Tensor]:
    """RMSNorm without transformers' float32 round trip: γ ⊙ x / sqrt(mean(x²) + ε).

    A float64 x stays float64; half precision (a model cast after the patch) is normalized in
    float32, as transformers does, since x² overflows float16 once |x| > 256.
    """
    eps = getattr(module, "variance_epsilon", None) or module.eps
    gemma = type(module).__name__.startswith(("Gemma", "Qwen3Next"))  # gain 1 + γ

    def forward(x: Tensor) -> Tensor:
        gain = 1.0 + module.weight if gemma else module.weight
        x_acc = x.to(accumulation_dtype(x.dtype))
        y = x_acc * torch.rsqrt(x_acc.pow(2).mean(-1, keepdim=True) + eps)  # (..., d)
        return gain * y.to(x.dtype)  # (..., d)

    return forward


def _rotary_forward(module: Any) -> Callable[..., tuple[Tensor, Tensor]]:
    """The rotary module's cos and sin, from its own rule evaluated in float64.

    Dynamic scaling takes the frequencies of the current length, without transformers' memory
    of the longest length seen (which it keeps until a sequence is shorter than t_train); in a
    module with a rule per layer type (Gemma 3), only the layer types whose rule is dynamic.
    """
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = module.config
    layer_types = getattr(module, "layer_types", None)
    if layer_types == []:  # Gemma 3 without layers: no rule to evaluate, nothing calls it
        return module.forward
    tables = {}
    for layer_type in layer_types or [None]:
        kind = module.rope_type[layer_type] if layer_types else module.rope_type
        init = (module.compute_default_rope_parameters if kind == "default"
                else ROPE_INIT_FUNCTIONS[kind])
        extra = {"layer_type": layer_type} if layer_types else {}
        with _float_is_float64():
            inv_freq, factor = init(config, **extra)
        tables[layer_type] = (inv_freq.double(), factor)
    # cos and sin of width d_rot (angles repeated, as rotate_half needs) or d_rot/2 (gpt-oss)
    probe = module.forward(torch.zeros(1), torch.zeros(1, 1, dtype=torch.long),
                           *([layer_types[0]] if layer_types else []))[0]  # (1, 1, width)
    repeat = probe.shape[-1] // tables[layer_types[0] if layer_types else None][0].shape[0]

    def forward(
        x: Tensor, position_ids: Tensor, layer_type: str | None = None
    ) -> tuple[Tensor, Tensor]:
        inv_freq, factor = tables[layer_type]
        # Gemma 3 keeps a rule per layer type (rope_type a dict), the others one rule
        kind = module.rope_type[layer_type] if layer_types else module.rope_type
        if kind == "dynamic":  # the frequencies of this length
            length = int(position_ids.max()) + 1
            extra = {"layer_type": layer_type} if layer_types else {}
            with _float_is_float64():
                inv_freq = ROPE_INIT_FUNCTIONS["dynamic"](config, seq_len=length, **extra)[0]
            inv_freq = inv_freq.double()
        freqs = position_ids[..., None].double() * inv_freq.to(x.device)  # (b, t, d_rot/2)
        angles = torch.cat([freqs] * repeat, dim=-1)  # (b, t, d_rot), or d_rot/2 (gpt-oss)
        return (angles.cos() * factor).to(x.dtype), (angles.sin() * factor).to(x.dtype)

    return forward


def upcast_transformers(model: nn.Module) -> nn.Module:
    """``model`` (in place) with its RoPE angles and RMSNorms computed in float64.

    ``transformers`` computes both in float32 whatever the model's dtype (its RoPE rules build
    the frequencies with ``dtype=torch.float``; its RMSNorm casts to float32), and stores
    Gemma's embedding scale sqrt(d) as a float32 number: each moves a float64 model's logits by
    about 1e-9 to 1e-7. The same formulas in float64 make it a float64 reference. Only the
    rotary, RMSNorm and scaled-embedding modules of the families in :data:`SUPPORTED` change,
    and Qwen3-Next's gated delta layers, whose ``torch.float32`` casts become float64; their
    decay g is computed from A_log and x W_a rounded to float32 (``.float()``), as in
    :class:`~attention.delta_layer.GatedDeltaNet`.

    Args:
        model: a float64 ``transformers`` model of a family in :data:`SUPPORTED`.

    Returns:
        ``model`` itself, changed in place.

    Raises:
        ValueError: if ``model`` is not a ``torch.nn.Module`` with float64 parameters, or not
            of a family in :data:`SUPPORTED` (whose modules could be patched by the wrong rule:
            VaultGemma's RMSNorm, gain 1 + γ, would compute γ).

    Examples:
        >>> from transformers import AutoConfig, AutoModelForCausalLM  # doctest: +SKIP
        >>> config = AutoConfig.for_model("llama", num_hidden_layers=1, hidden_size=32,
        ...                               num_attention_heads=2, intermediate_size=64)  # doctest: +SKIP
        >>> model = upcast_transformers(AutoModelForCausalLM.from_config(config).double())  # doctest: +SKIP
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    first = next(model.parameters(), None)  # a model without parameters has no dtype
    if first is None or first.dtype != torch.float64:
        got = "no parameters" if first is None else first.dtype
        raise ValueError(f"model must be float64 (call model.double() first), got {got}")
    kind = getattr(getattr(model, "config", None), "model_type", None)
    if kind not in SUPPORTED:  # modules are patched by name: another family's may differ
        raise ValueError(f"model must be a transformers model of model_type in {SUPPORTED}, got "
                         f"{type(model).__name__} with model_type {kind!r}")
    for module in model.modules():
        name = type(module).__name__
        if name.endswith("RotaryEmbedding"):
            module.forward = _rotary_forward(module)
        elif name.endswith("RMSNorm"):
            module.forward = _rms_forward(module)
        elif name.endswith("GatedDeltaNet"):  # its rule and gated norm cast to torch.float32
            module.forward = _in_float64(module.forward)
        elif name.endswith("ScaledWordEmbedding"):  # Gemma's sqrt(d), stored in float32
            module.embed_scale = torch.tensor(module.scalar_embed_scale, dtype=torch.float64)
    return model

