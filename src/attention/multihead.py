"""Multi-head causal self-attention, three ways: a wrapper, split heads, and a fused projection.

Notation (see CONTRIBUTING.md):
    b      batch size
    t      number of tokens, at most ``context_length``
    d_in   width of an input token vector
    d_out  width of the output (for the wrapper: of each head)
    h      number of heads (``num_heads``)
    d_h    width of one head, d_h = d_out / h; it is the d_k of each head's scale 1 / sqrt(d_h)

``MultiHeadAttentionWrapper`` runs h independent ``CausalAttention`` heads and concatenates
their outputs: width h * d_out. ``MultiHeadAttention`` projects once to d_out, splits the
columns into h heads of width d_h, attends within all heads at once (two batched matmuls),
merges the heads back and mixes them with an output projection. ``FusedMultiHeadAttention``
computes the same thing with one (d_in, 3 * d_out) projection for queries, keys and values, as
GPT-2 does, and can hand the attention itself to
``torch.nn.functional.scaled_dot_product_attention``.

Two dropouts, both active only in training mode, as in Hugging Face's GPT-2 (``attn_dropout``
and ``resid_dropout``; OpenAI's released GPT-2 code has no dropout):

    dropout       drops attention weights A (b, h, t, t): a query ignores some keys
    proj_dropout  drops entries of the projected output out_proj(Z) (b, t, d_out)

``proj_dropout`` defaults to 0 (off), so that the book's printed outputs stay those of the
modules without it.
"""

from collections.abc import Mapping
from typing import Literal, overload

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.types import Device

from ._checks import (
    Factory,
    accumulation_dtype,
    autocast_off,
    check_context_length,
    check_dropout,
    check_flags,
    check_heads,
    check_input,
    check_sizes,
    shape_or_type,
)
from .causal import CausalAttention, CausallyMasked, register_causal_mask


class MultiHeadAttentionWrapper(nn.Module):
    """``num_heads`` causal heads side by side; output (..., t, num_heads * d_out).

    Each head is a :class:`~attention.CausalAttention` of its own; their context vectors are
    concatenated.

    Other arguments as in :class:`~attention.CausalAttention`: those of each head.

    Args:
        d_out: width of one head's context vectors.
        num_heads: h, the number of heads.

    Raises:
        ValueError: if a size is not an integer >= 1, dropout is outside [0, 1), or qkv_bias
            is not a bool.

    Examples:
        >>> _ = torch.manual_seed(123)
        >>> mha = MultiHeadAttentionWrapper(3, 2, context_length=6, dropout=0.0, num_heads=2)
        >>> mha(journey_batch()).shape  # (b, t, h d_out)
        torch.Size([2, 6, 4])
    """

    def __init__(
        self,
        d_in: int,
        d_out: int,
        num_heads: int,
        context_length: int,
        dropout: float,
        *,
        qkv_bias: bool = False,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        check_sizes(num_heads=num_heads)
        check_flags(qkv_bias=qkv_bias)
        self.heads = nn.ModuleList(
            CausalAttention(d_in, d_out, context_length, dropout, qkv_bias=qkv_bias,
                            device=device, dtype=dtype)
            for _ in range(num_heads)
        )

    def forward(self, x: Tensor) -> Tensor:
        """Concatenated context vectors (..., t, h * d_out) of the tokens x (t, d_in) or
        (b, t, d_in).

        Raises:
            ValueError: if x is not (t, d_in) or (b, t, d_in), or t exceeds context_length.
        """
        return torch.cat([head(x) for head in self.heads], dim=-1)  # (..., t, h * d_out)


class MultiHeadAttention(CausallyMasked):
    """Causal multi-head self-attention with split heads and an output projection.

    The projections d_in → d_out are split into num_heads heads of width d_h = d_out / h.
    Both dropouts are used only in training mode.

    Args:
        d_in: width of an input token.
        d_out: width of the output, h heads of width d_h.
        num_heads: h, the number of heads.
        context_length: the most tokens a call may hold.
        dropout: probability of dropping an attention weight, in [0, 1).
        qkv_bias: give the query, key and value projections a bias.
        proj_dropout: probability of dropping an entry of the output projection's result.
        device: where the parameters are created (torch's default when None).
        dtype: their dtype (torch's default when None).

    Raises:
        ValueError: if a size is not an integer >= 1, d_out is not a multiple of num_heads, a
            dropout is outside [0, 1), or qkv_bias is not a bool.

    Examples:
        >>> _ = torch.manual_seed(123)
        >>> mha = MultiHeadAttention(3, 4, context_length=6, dropout=0.0, num_heads=2)
        >>> out, weights = mha(journey_batch(), return_weights=True)
        >>> out.shape, weights.shape
        (torch.Size([2, 6, 4]), torch.Size([2, 2, 6, 6]))
    """

    def __init__(
        self,
        d_in: int,
        d_out: int,
        num_heads: int,
        context_length: int,
        dropout: float,
        *,
        qkv_bias: bool = False,
        proj_dropout: float = 0.0,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        factory = Factory(device=device, dtype=dtype)
        check_sizes(d_in=d_in, d_out=d_out, context_length=context_length)
        check_heads(d_out, num_heads)
        check_dropout(dropout)
        check_dropout(proj_dropout, "proj_dropout")
        check_flags(qkv_bias=qkv_bias)
        self.d_in = d_in
        self.d_out = d_out
        self.context_length = context_length
        self.num_heads = num_heads
        self.d_h = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias, **factory)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias, **factory)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias, **factory)
        self.out_proj = nn.Linear(d_out, d_out, **factory)
        self.dropout = nn.Dropout(dropout)  # on the attention weights
        self.proj_dropout = nn.Dropout(proj_dropout)  # on out_proj's output
        register_causal_mask(self, context_length, device)  # bool, not in the state dict

    @overload
    def forward(self, x: Tensor, return_weights: Literal[False] = False) -> Tensor: ...

    @overload
    def forward(self, x: Tensor, *, return_weights: Literal[True]) -> tuple[Tensor, Tensor]: ...

    @overload
    def forward(
        self, x: Tensor, return_weights: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]: ...

    def forward(
        self, x: Tensor, return_weights: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Context vectors (b, t, d_out) of the tokens x (b, t, d_in).

        Half-precision projections (x's, or those ``torch.autocast`` gives) are attended in
        float32, scores, softmax and A V, and the context is rounded once, as torch's SDPA.

        With ``return_weights=True`` also returns the attention weights (b, h, t, t) that were
        applied to the values (after dropout, so in training mode some are zeroed or rescaled;
        in the projections' dtype, half-precision ones applied in float32), one matrix per head:
        ``torch.nn.MultiheadAttention`` returns their mean over the heads, (b, t, t), unless
        called with ``average_attn_weights=False``.

        Raises:
            ValueError: if x is not (b, t, d_in), t exceeds context_length, or return_weights
                is not a bool.
        """
        check_input(x, self.d_in, ranks=(3,))
        b, t, _ = x.shape
        check_context_length(t, self.context_length)
        check_flags(return_weights=return_weights)
        h, d_h = self.num_heads, self.d_h
        queries = self.W_query(x).view(b, t, h, d_h).transpose(1, 2)  # (b, h, t, d_h)
        keys = self.W_key(x).view(b, t, h, d_h).transpose(1, 2)  # (b, h, t, d_h)
        values = self.W_value(x).view(b, t, h, d_h).transpose(1, 2)  # (b, h, t, d_h)
        # half precision: scores, softmax and A V in float32, as torch's kernels keep them (a
        # float16 score past 65504 was inf, its row nan); the context is rounded once
        acc = accumulation_dtype(queries.dtype)
        with autocast_off(x):  # which would round the float32 scores to its dtype again
            attn_scores = queries.to(acc) @ keys.to(acc).transpose(2, 3)  # (b, h, t, t)
            future = self.mask[:t, :t]  # (t, t), True above the diagonal
            attn_scores = attn_scores.masked_fill(future, float("-inf"))
            attn_weights = self.dropout(torch.softmax(attn_scores / d_h**0.5, dim=-1))
            context = (attn_weights @ values.to(acc)).to(values.dtype)  # (b, h, t, d_h)
        context = context.transpose(1, 2).contiguous().view(b, t, self.d_out)  # (b, t, d_out)
        out = self.proj_dropout(self.out_proj(context))  # (b, t, d_out)
        return (out, attn_weights.to(queries.dtype)) if return_weights else out


class FusedMultiHeadAttention(CausallyMasked):
    """Causal multi-head self-attention with one fused QKV projection, as in GPT-2.

    ``use_sdpa`` chooses between the explicit computation and PyTorch's fused
    ``F.scaled_dot_product_attention`` (which picks a FlashAttention-style kernel when it can);
    both give the same result. :meth:`from_multihead` builds one from a
    :class:`MultiHeadAttention`.

    Other arguments as in :class:`MultiHeadAttention`.

    Args:
        qkv_bias: give the fused projection a bias.
        use_sdpa: compute the attention with ``F.scaled_dot_product_attention``.

    Raises:
        ValueError: as :class:`MultiHeadAttention`, or if qkv_bias or use_sdpa is not a bool.

    Examples:
        >>> _ = torch.manual_seed(123)
        >>> mha = MultiHeadAttention(3, 4, context_length=6, dropout=0.0, num_heads=2)
        >>> fused = FusedMultiHeadAttention.from_multihead(mha)
        >>> torch.allclose(fused(journey_batch()), mha(journey_batch()), atol=1e-6)
        True
    """

    def __init__(
        self,
        d_in: int,
        d_out: int,
        num_heads: int,
        context_length: int,
        dropout: float,
        *,
        qkv_bias: bool = False,
        proj_dropout: float = 0.0,
        use_sdpa: bool = True,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        factory = Factory(device=device, dtype=dtype)
        check_sizes(d_in=d_in, d_out=d_out, context_length=context_length)
        check_heads(d_out, num_heads)
        check_dropout(dropout)
        check_dropout(proj_dropout, "proj_dropout")
        check_flags(qkv_bias=qkv_bias, use_sdpa=use_sdpa)
        self.d_in = d_in
        self.d_out = d_out
        self.context_length = context_length
        self.num_heads = num_heads
        self.d_h = d_out // num_heads
        self.use_sdpa = use_sdpa
        self.qkv = nn.Linear(d_in, 3 * d_out, bias=qkv_bias, **factory)
        self.out_proj = nn.Linear(d_out, d_out, **factory)
        self.dropout = nn.Dropout(dropout)  # on the attention weights
        self.proj_dropout = nn.Dropout(proj_dropout)  # on out_proj's output
        register_causal_mask(self, context_length, device)  # bool, not in the state dict

    def forward(self, x: Tensor) -> Tensor:
        """Context vectors (b, t, d_out) of the tokens x (b, t, d_in).

        Both paths attend half-precision projections (under ``torch.autocast`` too) in float32
        and round the context once, as :class:`MultiHeadAttention`.

        Raises:
            ValueError: if x is not (b, t, d_in), or t exceeds context_length.
        """
        check_input(x, self.d_in, ranks=(3,))
        b, t, _ = x.shape
        check_context_length(t, self.context_length)
        h, d_h = self.num_heads, self.d_h
        queries, keys, values = self.qkv(x).split(self.d_out, dim=2)  # 3 x (b, t, d_out)
        queries = queries.view(b, t, h, d_h).transpose(1, 2)  # (b, h, t, d_h)
        keys = keys.view(b, t, h, d_h).transpose(1, 2)  # (b, h, t, d_h)
        values = values.view(b, t, h, d_h).transpose(1, 2)  # (b, h, t, d_h)
        if self.use_sdpa:
            dropout_p = self.dropout.p if self.training else 0.0
            context = F.scaled_dot_product_attention(
                queries, keys, values, dropout_p=dropout_p, is_causal=True
            )  # (b, h, t, d_h)
        else:
            # As in MultiHeadAttention, with fewer passes over the (b h, t, t) scores: the
            # product applies the scale (alpha), and the mask is written into it in place.
            # Half precision: scores, softmax and A V in float32, as there (a float16 score
            # past 65504 was inf, its row nan). (b h, t, d_h)
            q, k, v = (y.reshape(b * h, t, d_h) for y in (queries, keys, values))
            acc = accumulation_dtype(q.dtype)
            with autocast_off(x):  # which would round the float32 scores to its dtype again
                attn_scores = torch.baddbmm(
                    q.new_zeros((), dtype=acc), q.to(acc), k.to(acc).transpose(1, 2), beta=0,
                    alpha=d_h**-0.5,
                )  # (b h, t, t), Q Kᵀ / sqrt(d_h)
                future = self.mask[:t, :t]  # (t, t), True above the diagonal
                attn_scores.masked_fill_(future, float("-inf"))  # (b h, t, t)
                attn_weights = self.dropout(torch.softmax(attn_scores, dim=-1))  # (b h, t, t)
                context = torch.bmm(attn_weights, v.to(acc)).to(v.dtype)  # (b h, t, d_h)
            context = context.view(b, h, t, d_h)  # (b, h, t, d_h)
        context = context.transpose(1, 2).contiguous().view(b, t, self.d_out)  # (b, t, d_out)
        return self.proj_dropout(self.out_proj(context))  # (b, t, d_out)

    @classmethod
    def from_multihead(cls, mha: MultiHeadAttention) -> "FusedMultiHeadAttention":
        """A fused module computing exactly what ``mha`` computes (its weights, stacked).

        The fused weight is W_query, W_key and W_value stacked along the output dimension, so
        that ``qkv(x)`` splits into the three projections; both dropout probabilities and the
        training mode are carried over. Draws (and discards) a fresh random initialization
        first, so it advances the global random number generator.

        Raises:
            ValueError: if mha is not the book's MultiHeadAttention.
        """
        if not isinstance(mha, MultiHeadAttention):  # torch's has its own layout of weights
            raise ValueError(f"mha must be a MultiHeadAttention, got {type(mha).__name__}")
        fused = cls(
            mha.d_in,
            mha.d_out,
            mha.num_heads,
            mha.context_length,
            mha.dropout.p,
            qkv_bias=mha.W_query.bias is not None,
            proj_dropout=mha.proj_dropout.p,
        ).to(device=mha.W_query.weight.device, dtype=mha.W_query.weight.dtype)
        projections = (mha.W_query, mha.W_key, mha.W_value)
        with torch.no_grad():
            # (3 d_out, d_in)
            fused.qkv.weight.copy_(torch.cat([p.weight for p in projections]))
            if fused.qkv.bias is not None:
                fused.qkv.bias.copy_(torch.cat([p.bias for p in projections]))  # (3 d_out,)
            fused.out_proj.load_state_dict(mha.out_proj.state_dict())
        return fused.train(mha.training)


def _entry(state: Mapping[str, Tensor], key: str, axes: str, shape: tuple[int, ...]) -> Tensor:
    """state[key], required to be a tensor of ``shape``, whose axes ``axes`` names."""
    value = state[key]
    if not isinstance(value, Tensor) or tuple(value.shape) != shape:
        raise ValueError(f"{key} must have shape {axes} = {shape}, got {shape_or_type(value)}")
    return value


def to_torch_state_dict(state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """A :class:`MultiHeadAttention` state dict as ``torch.nn.MultiheadAttention``'s.

    Args:
        state: ``mha.state_dict()`` of a module with d_in = d_out (torch's module projects the
            query from and to one width, ``embed_dim``).

    Returns:
        ``in_proj_weight`` (W_query, W_key, W_value stacked, (3 d_out, d_in)), ``in_proj_bias``
        (zeros without ``qkv_bias``) and ``out_proj.weight``, ``out_proj.bias``: load it into
        ``nn.MultiheadAttention(d_out, num_heads, bias=True, batch_first=True)``, which then
        computes what the module computes when called with the causal ``attn_mask``
        (True above the diagonal).

    Raises:
        ValueError: if state is not a state dict with the module's projections, weights
            (d_out, d_in) and biases (d_out,) of one d_out (a GroupedQueryAttention's keys and
            values have fewer rows), or d_in != d_out.

    Examples:
        >>> mha = MultiHeadAttention(8, 8, context_length=4, dropout=0.0, num_heads=2)
        >>> sorted(to_torch_state_dict(mha.state_dict()))
        ['in_proj_bias', 'in_proj_weight', 'out_proj.bias', 'out_proj.weight']
    """
    if not isinstance(state, Mapping):
        raise ValueError(
            f"state must be a MultiHeadAttention state dict, got {type(state).__name__}"
        )
    names = ("W_query", "W_key", "W_value")
    needed = [*(f"{n}.weight" for n in (*names, "out_proj")), "out_proj.bias"]
    missing = [key for key in needed if key not in state]
    if missing:
        raise ValueError(f"state must be a MultiHeadAttention state dict, got no {missing}")
    query = state["W_query.weight"]
    if not isinstance(query, Tensor) or query.dim() != 2:
        raise ValueError(
            f"W_query.weight must be a (d_out, d_in) tensor, got {shape_or_type(query)}"
        )
    d_out, d_in = query.shape
    if d_in != d_out:
        raise ValueError(
            f"torch.nn.MultiheadAttention needs d_in = d_out, got {d_in} and {d_out}"
        )
    for name in names[1:]:
        _entry(state, f"{name}.weight", "(d_out, d_in)", (d_out, d_in))
    for name in (*names, "out_proj"):
        if f"{name}.bias" in state:
            _entry(state, f"{name}.bias", "(d_out,)", (d_out,))
    _entry(state, "out_proj.weight", "(d_out, d_out)", (d_out, d_out))
    weight = torch.cat([state[f"{n}.weight"] for n in names])  # (3 d_out, d_in)
    biases = [state.get(f"{n}.bias") for n in names]
    bias = torch.cat([b if b is not None else weight.new_zeros(d_out) for b in biases])
    return {"in_proj_weight": weight, "in_proj_bias": bias,
            "out_proj.weight": state["out_proj.weight"],
            "out_proj.bias": state["out_proj.bias"]}


def from_torch_state_dict(
    state: Mapping[str, Tensor], *, qkv_bias: bool = True
) -> dict[str, Tensor]:
    """A ``torch.nn.MultiheadAttention`` state dict as :class:`MultiHeadAttention`'s.

    Args:
        state: the state dict of ``nn.MultiheadAttention(embed_dim, num_heads)`` with one
            ``in_proj_weight`` (kdim = vdim = embed_dim).
        qkv_bias: whether the target module has biases on W_query, W_key and W_value; with
            False, torch's ``in_proj_bias`` must be zero (or absent) and is dropped.

    Returns:
        The state dict to load into ``MultiHeadAttention(embed_dim, embed_dim, num_heads,
        context_length, dropout, qkv_bias=qkv_bias)``; a torch module without biases gives a
        zero ``out_proj.bias``.

    Raises:
        ValueError: if state is not a state dict, has separate query, key and value weights
            (kdim or vdim different from embed_dim), no ``out_proj.weight``, parameters this
            module lacks (``bias_k``, ``bias_v`` of ``add_bias_kv=True``), an ``in_proj_weight``
            that is not (3 embed_dim, embed_dim) or other parameters not of that embed_dim, a
            non-zero ``in_proj_bias`` with ``qkv_bias=False``, or a qkv_bias that is not a bool.

    Examples:
        >>> torch_mha = nn.MultiheadAttention(8, 2)
        >>> sorted(from_torch_state_dict(torch_mha.state_dict()))[:2]
        ['W_key.bias', 'W_key.weight']
    """
    check_flags(qkv_bias=qkv_bias)
    if not isinstance(state, Mapping):
        raise ValueError(
            "state must be a torch.nn.MultiheadAttention state dict, got "
            f"{type(state).__name__}"
        )
    if "in_proj_weight" not in state:
        raise ValueError("state must hold in_proj_weight (kdim = vdim = embed_dim), got keys "
                         f"{sorted(state)}")
    if "out_proj.weight" not in state:
        raise ValueError(f"state must hold out_proj.weight, got keys {sorted(state)}")
    extra = sorted(set(state) - {"in_proj_weight", "in_proj_bias", "out_proj.weight",
                                 "out_proj.bias"})
    if extra:  # bias_k and bias_v (add_bias_kv=True): this module has no such parameters
        raise ValueError(f"state must hold only what MultiHeadAttention has, got also {extra}")
    in_proj = state["in_proj_weight"]
    if not isinstance(in_proj, Tensor) or in_proj.dim() != 2:
        raise ValueError(f"in_proj_weight must be a (3 embed_dim, embed_dim) tensor, got "
                         f"{shape_or_type(in_proj)}")
    d = in_proj.shape[1]  # embed_dim
    _entry(state, "in_proj_weight", "(3 embed_dim, embed_dim)", (3 * d, d))
    _entry(state, "out_proj.weight", "(embed_dim, embed_dim)", (d, d))
    biases = (("in_proj_bias", "(3 embed_dim,)", (3 * d,)),
              ("out_proj.bias", "(embed_dim,)", (d,)))
    for key, axes, shape in biases:
        if key in state:
            _entry(state, key, axes, shape)
    weights = in_proj.chunk(3)  # W_query, W_key, W_value: (d, d) each
    bias = state.get("in_proj_bias")
    out: dict[str, Tensor] = {}
    for i, name in enumerate(("W_query", "W_key", "W_value")):
        out[f"{name}.weight"] = weights[i]
        if qkv_bias:
            out[f"{name}.bias"] = (bias.chunk(3)[i] if bias is not None
                                   else weights[i].new_zeros(weights[i].shape[0]))
    # a meta bias holds no values to check, as a meta module's state holds none to load
    if not qkv_bias and bias is not None and not bias.is_meta and bool(bias.any()):
        raise ValueError(
            "in_proj_bias must be zero to load without qkv_bias, got a non-zero bias"
        )
    out["out_proj.weight"] = state["out_proj.weight"]
    out_bias = state.get("out_proj.bias")
    out["out_proj.bias"] = out_bias if out_bias is not None else weights[0].new_zeros(
        weights[0].shape[0])
    return out
