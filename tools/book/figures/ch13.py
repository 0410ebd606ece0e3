"""Figures of chapter 13: the weights W with Z = W V of a decay and of the gated delta rule.

Notation: t tokens, d_k key width, g the log decay, beta the write strength. The three panels
are :func:`attention.delta.delta_attention_matrix` on one seeded random input: a fixed decay
(RetNet), a decay chosen per token, and the gated delta rule with the same decays.
"""

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from matplotlib.figure import Figure

from attention.delta import delta_attention_matrix


def decay_and_delta_weights() -> Figure:
    """Three signed heatmaps, queries by keys, t = 16: the weights each rule gives each value."""
    generator = torch.Generator().manual_seed(123)
    t, d_k = 16, 8
    q = torch.randn(1, 1, t, d_k, generator=generator, dtype=torch.float64)
    k = F.normalize(torch.randn(1, 1, t, d_k, generator=generator, dtype=torch.float64), dim=-1)
    fixed = torch.full((1, 1, t), 0.8, dtype=torch.float64).log()
    selective = F.logsigmoid(2 * torch.randn(1, 1, t, generator=generator, dtype=torch.float64))
    beta = torch.rand(1, 1, t, generator=generator, dtype=torch.float64)
    panels = (
        ("fixed decay a = 0.8 (RetNet)", delta_attention_matrix(q, k, fixed)),
        ("decay chosen per token", delta_attention_matrix(q, k, selective)),
        ("gated delta rule, same decays", delta_attention_matrix(q, k, selective, beta)),
    )
    fig, axes = plt.subplots(1, 3, figsize=(7.4, 2.9), layout="constrained")
    top = max(w.abs().max().item() for _, w in panels)
    for ax, (title, weights) in zip(axes, panels):
        image = ax.imshow(weights[0, 0].numpy(), cmap="PuOr", vmin=-top, vmax=top)
        ax.set_xticks([0, 5, 10, 15])
        ax.set_yticks([0, 5, 10, 15])
        ax.tick_params(labelsize=9)
        ax.set_xlabel("key j", fontsize=9)
        ax.set_title(title, fontsize=9)
    axes[0].set_ylabel("query i", fontsize=9)
    fig.colorbar(image, ax=axes, label="weight W_ij", shrink=0.8)
    return fig


FIGURES = {"ch13-decay-delta-weights": decay_and_delta_weights}
