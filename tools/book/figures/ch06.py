"""Figures of chapter 6: padding masks and cross-attention.

Notation: b batch size, t tokens, t_q queries (decoder tokens), t_k keys (source tokens),
d_q / d_kv widths of the decoder / encoder states, d_out output width, h heads.
The modules are the chapter's, each built right after torch.manual_seed(123).
"""

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from attention import (
    JOURNEY_TOKENS,
    BidirectionalSelfAttention,
    CrossAttention,
    journey_inputs,
    plot_attention,
)

SOURCE_TOKENS = ("Deine", "Reise", "beginnt", "mit", "einem", "Schritt")
# The pad columns' hatching, opaque: 3.9:1 on their cells, white (weight 0) on the light page,
# and 4.1:1 on the dark page, where the heatmap is inverted to near black (#cb181d at opacity
# 0.35, which matplotlib applies twice to a hatch, was 1.2:1).
HATCH_COLOR = "#ef3b2c"


def padding_mask() -> Figure:
    """Head 1's weights for a full sentence and for a short one padded to the same length."""
    inputs = journey_inputs()  # (t, d_in)
    x = torch.zeros(2, 6, 3)  # (b, t, d_in): padding tokens are zero vectors
    x[0] = inputs
    x[1, :3] = inputs[:3]
    key_padding_mask = torch.tensor([[False] * 6, [False] * 3 + [True] * 3])  # (b, t)
    torch.manual_seed(123)
    encoder = BidirectionalSelfAttention(3, 2, dropout=0.0, num_heads=2)
    with torch.no_grad():
        _, attn_weights = encoder(x, key_padding_mask=key_padding_mask, return_weights=True)
    padded_tokens = [*JOURNEY_TOKENS[:3], "<pad>", "<pad>", "<pad>"]
    fig, axes = plt.subplots(1, 2, figsize=(9.6, 4.6), layout="constrained")
    plot_attention(attn_weights[0, 0], JOURNEY_TOKENS, JOURNEY_TOKENS, ax=axes[0],
                   title="full sentence: every key visible")
    plot_attention(attn_weights[1, 0], padded_tokens, padded_tokens, ax=axes[1],
                   title="padded sentence: pad keys get weight 0")
    for column in range(3, 6):
        axes[1].axvspan(column - 0.5, column + 0.5, facecolor="none", edgecolor=HATCH_COLOR,
                        hatch="//", linewidth=0.0)
    fig.suptitle("Untrained bidirectional self-attention with a key padding mask"
                 " (head 1, seed 123)")
    return fig


def cross_attention() -> Figure:
    """The (t_q, t_k) = (4, 6) cross-attention weights of both heads: decoder rows, source
    columns."""
    torch.manual_seed(123)
    decoder_states = journey_inputs()[:4].unsqueeze(0)  # (b, t_q, d_q) = (1, 4, 3)
    encoder_states = torch.randn(1, 6, 5)  # (b, t_k, d_kv) = (1, 6, 5)
    cross = CrossAttention(d_q=3, d_kv=5, d_out=4, dropout=0.0, num_heads=2)
    with torch.no_grad():
        _, attn_weights = cross(decoder_states, encoder_states, return_weights=True)
    fig, axes = plt.subplots(1, 2, figsize=(9.4, 4.0), layout="constrained")
    for head, ax in enumerate(axes):
        plot_attention(attn_weights[0, head], JOURNEY_TOKENS[:4], SOURCE_TOKENS, ax=ax,
                       title=f"head {head + 1}")
        ax.set_xlabel("key: source token (encoder)")
        ax.set_ylabel("query: target token (decoder)")
    fig.suptitle("Untrained cross-attention weights,"
                 " $t_q = 4$ decoder tokens by $t_k = 6$ source tokens")
    return fig


FIGURES = {
    "ch06-padding-mask": padding_mask,
    "ch06-cross-attention": cross_attention,
}
