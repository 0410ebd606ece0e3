"""The tiny model with kernel attention: linear attention or FAVOR+ in place of the softmax.

Notation (see CONTRIBUTING.md):
    b      batch size
    t      tokens
    d      model width ``d_model``; h heads of width d_h = d / h
    m      random features of FAVOR+ per head (``num_features``)

:func:`use_kernel_attention` swaps the attention of every block of a built
:class:`~attention.TinyTransformer` for the kernel phi(q) . phi(k) of :mod:`attention.linear`,
keeping every weight: chapter 12 trains the same model, seed and steps with each kind of
attention. The block's ``attend`` method is replaced on each instance, so
:mod:`attention.transformer` stays as it is.
"""

from collections.abc import Callable
from functools import partial

import torch
from torch import Tensor, nn

from ._checks import check_sizes
from .linear import _favor_features, _features, elu_plus_one, random_projection

__all__ = ["use_kernel_attention"]


def _kernel_attend(
    block: nn.Module, features: Callable[[Tensor, str], Tensor], x: Tensor,
    attn_mask: Tensor | None = None, cache: object | None = None,
) -> tuple[Tensor, Tensor]:
    """A TransformerBlock's ``attend`` with the kernel phi(q).phi(k) in place of the softmax."""
    if attn_mask is not None or cache is not None:
        raise ValueError(
            "kernel attention takes no attn_mask or bias (ALiBi) and no KV cache, got "
            f"attn_mask={None if attn_mask is None else 'a tensor'}, cache={cache!r}"
        )
    b, t, _ = x.shape
    h, d_h = block.num_heads, block.d_h
    queries, keys, values = block.qkv(x).split(block.d_model, dim=2)  # 3 x (b, t, d)
    queries = queries.view(b, t, h, d_h).transpose(1, 2)  # (b, h, t, d_h)
    keys = keys.view(b, t, h, d_h).transpose(1, 2)  # (b, h, t, d_h)
    values = values.view(b, t, h, d_h).transpose(1, 2)  # (b, h, t, d_h)
    if block.rotary is not None:  # rotate before the features, as the softmax block does
        queries, keys = block.rotary(queries), block.rotary(keys)  # (b, h, t, d_h)
    kernel = features(queries, "query") @ features(keys, "key").transpose(-2, -1)  # (b, h, t, t)
    kernel = kernel.tril() if block.causal else kernel
    attn_weights = kernel / kernel.sum(dim=-1, keepdim=True)  # (b, h, t, t): the parallel form
    context = (attn_weights @ values).transpose(1, 2).reshape(b, t, block.d_model)  # (b, t, d)
    return block.proj_dropout(block.out_proj(context)), attn_weights


def use_kernel_attention(
    model: nn.Module, kind: str = "elu+1", num_features: int | None = None, seed: int = 0
) -> nn.Module:
    """Replace the softmax attention of every block of ``model`` by kernel attention, in place.

    ``model`` is a :class:`~attention.TinyTransformer` (anything with ``blocks`` of
    :class:`~attention.TransformerBlock`). ``kind="elu+1"``: linear attention with
    :func:`elu_plus_one`; ``kind="favor"``: FAVOR+ with ``num_features`` orthogonal random
    features per head, drawn once from ``seed`` (a different draw per block) and kept fixed.
    Each block's ``attend`` is replaced on the instance: the weights (projections, norms) and
    everything else stay as they are. The blocks then return the kernel's attention weights
    (b, h, t, t), computed in the parallel form; masks, biases, caches and dropout are refused.
    """
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.ModuleList) or not all(hasattr(b, "attend") for b in blocks):
        raise ValueError(f"model must have blocks of TransformerBlock, got {type(model).__name__}")
    if kind not in ("elu+1", "favor"):
        raise ValueError(f"kind must be 'elu+1' or 'favor', got {kind!r}")
    if kind == "favor":
        check_sizes(num_features=num_features)
    elif num_features is not None:
        raise ValueError(f"num_features is for kind='favor' only, got {num_features!r}")
    generator = torch.Generator().manual_seed(seed)
    for block in blocks:
        if block.dropout > 0:
            raise ValueError(f"kernel attention takes no dropout, got a block with {block.dropout}")
        if kind == "elu+1":
            features = lambda x, name: _features(x, elu_plus_one, name)  # noqa: E731
        else:
            weight = block.qkv.weight
            projection = random_projection(num_features, block.d_h, True, generator, weight.dtype)
            block.register_buffer("favor_projection", projection.to(weight.device))  # (m, d_h)
            features = partial(_block_favor_features, block)
        block.attend = partial(_kernel_attend, block, features)
    return model


def _block_favor_features(block: nn.Module, x: Tensor, name: str) -> Tensor:
    """FAVOR+ features of a block's queries or keys (b, h, t, d_h), with its projection."""
    over = (-1,) if name == "query" else (-2, -1)  # one maximum per query; one for all keys
    return _favor_features(x, block.favor_projection, over)
