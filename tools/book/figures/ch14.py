"""Figures of chapter 14: the keys that content-chosen sparse attention selects.

Notation: t tokens, B keys per block, k keys (or blocks) kept per query. One head of random
queries and keys (seed 123, t = 64, B = 8, d_k = 16); the masks are those of
:mod:`attention.sparse`, drawn with :func:`attention.masks.to_dense`.
"""

import torch
from matplotlib.figure import Figure

from attention.masks import sliding_window
from attention.sparse import block_topk_mask, moba_mask, topk_mask

from ._masks import mask_panels

T, BLOCK, D_K = 64, 8, 16


def selected_keys() -> Figure:
    """Four masks of the same queries and keys: a window, top-k keys, MoBA, NSA's selection."""
    generator = torch.Generator().manual_seed(123)
    query, key = torch.randn(2, 1, 1, T, D_K, generator=generator, dtype=torch.float64).unbind(0)
    scores = query @ key.transpose(-2, -1)  # (1, 1, t, t)
    block_keys = key.view(1, 1, T // BLOCK, BLOCK, D_K).mean(dim=3)  # (1, 1, T/B, d_k)
    rules = {
        "window of 16 keys": sliding_window(16),
        "top 16 keys (DSA)": topk_mask(scores, 16),
        "top 2 blocks of 8 (MoBA)": moba_mask(query, key, block_size=BLOCK, top_k=2),
        "3 blocks, first kept (NSA)": block_topk_mask(query @ block_keys.transpose(-2, -1), 3, BLOCK,
                                                  keep_first=True),
    }
    return mask_panels(rules, T)


FIGURES = {"ch14-selected-keys": selected_keys}
