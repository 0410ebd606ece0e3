"""A row of mask panels: how chapters 12 and 14 draw which keys each query sees."""

from collections.abc import Mapping

import matplotlib.pyplot as plt
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure

from attention.masks import MaskMod, to_dense

# visible pairs in one blue, the rest empty: the same in both themes (not a scale)
VISIBLE = ListedColormap([(0, 0, 0, 0), (0.23, 0.47, 0.75, 1)])


def mask_panels(rules: Mapping[str, MaskMod], t: int) -> Figure:
    """One panel per rule, its (t, t) mask, titled with its name and how many of the
    t (t + 1) / 2 causal pairs it keeps."""
    fig, axes = plt.subplots(1, len(rules), figsize=(7.4, 2.6), layout="constrained")
    for ax, (name, rule) in zip(axes, rules.items()):
        mask = to_dense(rule, t, t)  # (t, t)
        ax.imshow(mask.float().numpy(), cmap=VISIBLE, vmin=0, vmax=1, interpolation="none")
        ax.set_title(f"{name}\n{int(mask.sum())} of {t * (t + 1) // 2} pairs", fontsize=9)
        ax.set_xticks([0, t - 1], labels=["key 0", str(t - 1)], fontsize=9)
        ax.set_yticks([0, t - 1], labels=["query 0", str(t - 1)] if ax is axes[0] else ["", ""],
                      fontsize=9)
    return fig
