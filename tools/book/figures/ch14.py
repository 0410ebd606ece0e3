"""Figures of chapter 14: the keys that content-chosen sparse attention selects.

Notation: t tokens, B keys per block, k keys (or blocks) kept per query. One head of random
queries and keys (seed 123, t = 64, B = 8, d_k = 16); the masks are those of
:mod:`attention.sparse`, drawn with :func:`attention.masks.to_dense`.
"""

import matplotlib.pyplot as plt
import torch
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure

from attention.masks import sliding_window, to_dense
from attention.sparse import block_topk_mask, moba_mask, topk_mask

T, BLOCK, D_K = 64, 8, 16
ALLOWED = ListedColormap([(0, 0, 0, 0), (0.23, 0.47, 0.75, 1)])  # hidden: empty; attended: blue


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
    fig, axes = plt.subplots(1, 4, figsize=(7.4, 2.6), layout="constrained")
    for ax, (name, rule) in zip(axes, rules.items()):
        mask = to_dense(rule, T, T)  # (t, t)
        # attended pairs in one blue, the rest empty: the same in both themes (not a scale)
        ax.imshow(mask.float().numpy(), cmap=ALLOWED, vmin=0, vmax=1, interpolation="none")
        ax.set_title(f"{name}\n{int(mask.sum())} of {T * (T + 1) // 2} pairs", fontsize=9)
        ax.set_xticks([0, T - 1], labels=["key 0", str(T - 1)], fontsize=9)
        ax.set_yticks([0, T - 1], labels=["query 0", str(T - 1)] if ax is axes[0] else ["", ""],
                      fontsize=9)
    return fig


FIGURES = {"ch14-selected-keys": selected_keys}
