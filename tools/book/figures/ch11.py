"""Figures of chapter 11: masks as programs, weights from the log-sum-exp, and the ring's work.

Notation: t tokens, B the block size of a block mask (T = t / B tiles along each side), h heads,
N devices in a ring, t_shard = t / N tokens per device. Every figure is computed by the package:
``attention.masks.block_sparsity`` for the tiles, ``flash_attention(..., return_lse=True)`` and
``weights_from_lse`` for the heatmaps (of the chapter's tiny model, trained here for 80 steps,
about half a second), ``attention.ring.ring_work`` for the ring.
"""

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from attention import (
    TinyTransformer,
    flash_attention,
    lookback_data,
    train_lm,
    weights_from_lse,
)
from attention import masks as M
from attention.packing import cu_seqlens_from_lengths, document_ids
from attention.ring import ring_work
from book.figures import INK, cell_text_colour, invert_in_dark

T, BLOCK = 64, 8  # the panels: t = 64 tokens in tiles of B = 8
# Categories, not a scale: never inverted in the dark theme, so that the legend and the prose's
# colour names hold in both; a skipped tile is left empty (the page's own colour). Blue and
# orange reach 3:1 on the light page and on the dark one, which dims images to 0.88.
VISIBLE, WASTED, SKIPPED = (0.25, 0.5, 0.79, 1.0), (0.86, 0.47, 0.13, 1.0), (0.0, 0.0, 0.0, 0.0)


def mask_panels() -> dict[str, M.MaskMod]:
    """The chapter's rules at t = 64, in the order of section 11.1's table."""
    docs = document_ids(cu_seqlens_from_lengths(torch.tensor([20, 9, 27, 8])))
    return {
        "causal": M.causal(),
        "sliding window, w = 16": M.sliding_window(16),
        "padding, 40 real keys": M.padding(torch.tensor([40])),
        "documents (bidirectional)": M.document(docs),
        "causal documents": M.and_masks(M.causal(), M.document(docs)),
        "prefix LM, prefix 24": M.prefix_lm(24),
        "window 12 + 4 sinks": M.and_masks(M.causal(), M.or_masks(M.sliding_window(12), M.sinks(4))),
        "global tokens 0 and 32": M.global_tokens(torch.arange(T) % 32 == 0),
    }


def block_sparsity_grid() -> Figure:
    """Each rule's dense mask over its tiles: skipped, computed and masked inside, or full."""
    fig, axes = plt.subplots(2, 4, figsize=(7.4, 4.6), layout="constrained")
    for ax, (name, rule) in zip(axes.flat, mask_panels().items()):
        dense = M.to_dense(rule, T, T).numpy()  # (t, t)
        kinds = M.block_sparsity(rule, T, T, BLOCK).numpy()  # (T, T): 0, 1, 2
        computed = np.kron(kinds > 0, np.ones((BLOCK, BLOCK), dtype=bool))  # (t, t)
        image = np.empty((T, T, 4))  # RGBA
        image[:] = SKIPPED
        image[computed & ~dense] = WASTED
        image[dense] = VISIBLE
        ax.imshow(image, interpolation="nearest")
        for edge in np.arange(BLOCK, T, BLOCK) - 0.5:
            ax.axhline(edge, color=INK, linewidth=0.3, alpha=0.35)
            ax.axvline(edge, color=INK, linewidth=0.3, alpha=0.35)
        ax.set_xticks([])
        ax.set_yticks([])
        kept, full = int((kinds > 0).sum()), int((kinds == 2).sum())
        ax.set_title(f"{name}\n{kept} of {kinds.size} tiles, {full} full", fontsize=9)
    axes[1, 0].set_xlabel("key j", fontsize=9)
    axes[1, 0].set_ylabel("query i", fontsize=9)
    handles = [Patch(facecolor=VISIBLE, label="visible: computed and used"),
               Patch(facecolor=WASTED, label="hidden, in a computed tile"),
               Patch(facecolor="none", edgecolor=INK, linewidth=0.5, label="skipped tile (empty)")]
    fig.legend(handles=handles, loc="outside lower center", ncol=3, frameon=False, fontsize=9)
    fig.suptitle(f"Block sparsity of each mask, t = {T}, tiles of B = {BLOCK} (block_sparsity)",
                 fontsize=10)
    return fig


def trained_tiny_model() -> TinyTransformer:
    """Chapter 9's tiny model, trained for 80 steps to copy the token two places back (seed 123)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the page's setting; small matrices are faster on one thread
    try:
        torch.manual_seed(123)
        model = TinyTransformer(vocab_size=16, d_model=32, num_heads=2, num_layers=2,
                                context_length=24, positions="rope", mlp=False)
        train_lm(model, lambda g: lookback_data(32, 24, 16, g, offset=2), steps=80, lr=3e-3,
                 seed=123)
    finally:
        torch.set_num_threads(threads)
    return model


def attention_queries_keys(attn, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Queries, keys and values (b, h, t, d_h) that a BlockAttention computes from its input x."""
    b, t, _ = x.shape
    projected = attn.qkv(x).split(attn.d_model, dim=2)  # 3 x (b, t, d)
    q, k, v = (y.view(b, t, attn.num_heads, attn.d_h).transpose(1, 2) for y in projected)
    return attn.rotary(q), attn.rotary(k), v


def weights_through_the_fast_path() -> Figure:
    """Every head of the tiny model, its weights rebuilt from flash_attention's log-sum-exp."""
    model = trained_tiny_model()
    inputs, _ = lookback_data(1, 24, 16, torch.Generator().manual_seed(789), offset=2)
    captured = []  # each layer's input to its attention sublayer, (b, t, d)
    hooks = [block.attn.register_forward_pre_hook(lambda module, args: captured.append(args[0]))
             for block in model.blocks]
    with torch.no_grad():
        _, explicit = model(inputs, return_weights=True)  # one (b, h, t, t) per layer
    for hook in hooks:
        hook.remove()
    fig, axes = plt.subplots(1, 4, figsize=(7.4, 2.8), layout="constrained")
    for layer, (block, x) in enumerate(zip(model.blocks, captured)):
        with torch.no_grad():
            q, k, v = attention_queries_keys(block.attn, x)  # (b, h, t, d_h) each
            _, lse = flash_attention(q, k, v, is_causal=True, block_size=8, return_lse=True)
            rebuilt = weights_from_lse(q, k, lse, is_causal=True)  # (b, h, t, t)
        for head in range(2):
            ax = axes[2 * layer + head]
            error = (rebuilt[0, head] - explicit[layer][0, head]).abs().max().item()
            image = ax.imshow(rebuilt[0, head].numpy(), cmap="Blues", vmin=0.0, vmax=1.0)
            invert_in_dark(image)
            ax.set_xticks([0, 8, 16, 23])
            ax.set_yticks([0, 8, 16, 23])
            ax.tick_params(labelsize=9)
            ax.set_xlabel("key", fontsize=9)
            ax.set_ylabel("query" if layer + head == 0 else "", fontsize=9)
            ax.set_title(f"layer {layer}, head {head}\nmax |diff| {error:.0e}", fontsize=9)
    invert_in_dark(fig.colorbar(image, ax=axes, label="weight", shrink=0.6))
    fig.suptitle("Weights from the log-sum-exp of flash_attention, tiny model copying the token "
                 "2 places back", fontsize=10)
    return fig


def ring_balance() -> Figure:
    """Score pairs per device and step of causal ring attention: contiguous and zig-zag shards."""
    t, devices = 1024, 8
    works = {sharding: ring_work(t, devices, is_causal=True, sharding=sharding) / 1000
             for sharding in ("contiguous", "zigzag")}  # (N steps, N devices), thousands
    top = max(work.max().item() for work in works.values())
    fig, axes = plt.subplots(1, 2, figsize=(7.4, 4.0), layout="constrained")
    for ax, (sharding, work) in zip(axes, works.items()):
        image = ax.imshow(work.numpy(), cmap="Blues", vmin=0, vmax=top)
        invert_in_dark(image)
        for (step, device), value in np.ndenumerate(work.numpy()):
            ax.text(device, step, f"{value:.1f}" if value else "0", ha="center", va="center",
                    fontsize=8.5, color=cell_text_colour(value / top))
        ax.set_xlabel("device r", fontsize=9)
        ax.set_ylabel("step l", fontsize=9)
        ax.set_xticks(range(devices))
        ax.set_yticks(range(devices))
        ax.tick_params(labelsize=9)
        pace = work.max(dim=1).values.sum().item()
        ax.set_title(f"{sharding}: the busiest device of each step\nsums to {pace:,.1f} "
                     f"(ideal {work.sum().item() / devices:,.1f})", fontsize=9)
    invert_in_dark(fig.colorbar(image, ax=axes, label="thousands of score pairs", shrink=0.7))
    fig.suptitle(f"Causal ring attention, t = {t} over N = {devices} devices: work per step",
                 fontsize=10)
    return fig


FIGURES = {
    "ch11-block-sparsity": block_sparsity_grid,
    "ch11-weights-from-lse": weights_through_the_fast_path,
    "ch11-ring-work": ring_balance,
}
