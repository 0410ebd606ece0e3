"""Figures of chapter 8: where is each token? Absolute, rotary, linear-bias and bucketed positions.

Notation: t tokens, d width of a position vector, p a position counted from 0, i the position of a
query and j that of a key, so that j - i is the key's offset from its query (negative: the key
comes first); h heads, m_η the ALiBi slope of head η. For RoPE, i also numbers a rotated pair,
with frequency θ_i and wavelength λ_i = 2π / θ_i; t_train is the training context and κ the
stretch factor of a scaling rule. Nothing here is trained: every figure is a formula or a table of
the package, drawn.
"""

import math

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from attention import (
    Llama3Scaling,
    NTKAwareScaling,
    PositionInterpolation,
    RotaryEmbedding,
    YaRNScaling,
    alibi_slopes,
    sinusoidal_positions,
)
from book.figures import GUIDE, INK, invert_in_dark


def sinusoidal_table() -> Figure:
    """The sinusoidal table PE (t, d) for t = 64, d = 64, and the dot products PE PE^T (t, t)."""
    t, d = 64, 64
    table = sinusoidal_positions(t, d)  # (t, d)
    dots = table @ table.T  # (t, t): PE(p) . PE(p'), a function of p - p' only
    fig, axes = plt.subplots(1, 2, figsize=(10.5, 4.6), layout="constrained")
    image = axes[0].imshow(table.numpy(), cmap="RdBu_r", vmin=-1.0, vmax=1.0, aspect="auto")
    axes[0].set_xlabel("feature $f$ (even: sin, odd: cos; frequency falls to the right)")
    axes[0].set_ylabel("position $p$")
    axes[0].set_title(f"$\\mathrm{{PE}}[p, f]$, $t = {t}$, $d = {d}$")
    invert_in_dark(image, fig.colorbar(image, ax=axes[0], shrink=0.85))  # white at 0: dark
    image = axes[1].imshow(dots.numpy(), cmap="viridis", aspect="auto")
    axes[1].set_xlabel("position $p′$")
    axes[1].set_ylabel("position $p$")
    axes[1].set_title(r"$\mathrm{PE}(p) \cdot \mathrm{PE}(p′)$: constant along each diagonal")
    fig.colorbar(image, ax=axes[1], shrink=0.85)
    fig.suptitle("The sinusoidal position table of Vaswani et al. (2017)")
    return fig


def alibi_biases() -> Figure:
    """ALiBi's bias -m_η (i - j) against the distance i - j for the 12 slopes of 12 heads.

    The first 8 are the slopes of 8 heads; of the 4 added for 12 heads (dashed), 2^-0.5 is the
    steepest of all and the others lie between the first four.
    """
    num_heads = 12
    distance = torch.arange(0, 33)  # i - j = 0 .. 32: keys at or before their query
    slopes = alibi_slopes(num_heads).double()  # (h,)
    fig, ax = plt.subplots(figsize=(8.8, 4.4), layout="constrained")
    # cool from sky blue to magenta: each colour 3:1 or more on white and on the dark page,
    # which viridis keeps only between 0.38 and 0.6, too little to tell 8 lines apart
    colors = plt.get_cmap("cool")(torch.linspace(0.45, 1.0, 8).numpy())
    for head, slope in enumerate(slopes.tolist()):
        exponent = math.log2(slope)
        # the heads added past the power of two are dashed, colored like the next gentler solid line
        color = colors[head] if head < 8 else colors[round(-exponent - 0.5)]
        style = "-" if head < 8 else "--"
        label = f"head {head + 1}: $m = 2^{{{exponent:g}}}$"
        ax.plot(distance, -slope * distance, style, color=color, label=label)
    ax.set_xlabel("distance $i - j$ (key $j$ at or before query $i$)")
    ax.set_ylabel(r"bias added to the score, $-m_\eta (i - j)$")
    ax.set_ylim(-8.5, 0.5)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))
    ax.set_title("ALiBi's fixed slopes for 12 heads; heads 1-8 are those of 8 heads "
                 "(Press et al., 2022)")
    return fig


def t5_bucket(offset: int, bidirectional: bool, num_buckets: int = 32,
              max_distance: int = 128) -> int:
    """The bucket of T5's relative bias for a key at ``offset = j - i`` from its query.

    Offsets 0 .. E-1 (E = half the buckets of a direction) get a bucket each; larger distances
    share log-spaced buckets up to ``max_distance``, and every distance past it the last bucket.
    A bidirectional (encoder) model gives half of the buckets to keys after the query.
    """
    first = 0
    if bidirectional:
        num_buckets //= 2  # buckets per direction
        first = num_buckets if offset > 0 else 0  # keys after the query: the upper half
        distance = abs(offset)
    else:
        distance = max(-offset, 0)  # causal: keys after the query are masked anyway
    exact = num_buckets // 2
    if distance < exact:
        return first + distance
    log_ratio = math.log(distance / exact) / math.log(max_distance / exact)  # 0 .. 1 up to max
    return first + min(num_buckets - 1, exact + int(log_ratio * (num_buckets - exact)))


def relative_buckets() -> Figure:
    """Which learned relative embedding a key uses: Shaw et al.'s clipping and T5's buckets."""
    fig, axes = plt.subplots(1, 2, figsize=(10.5, 4.2), layout="constrained",
                             gridspec_kw={"width_ratios": [1, 2]})
    r_max = 4
    near = list(range(-10, 11))
    clipped = [max(-r_max, min(r_max, n)) for n in near]
    axes[0].step(near, clipped, where="mid", color="#1b9e77")
    axes[0].plot(near, clipped, "o", color="#1b9e77", markersize=3)
    axes[0].set_xlabel("offset $j - i$")
    axes[0].set_ylabel("index of the learned vector, clip$(j - i)$")
    axes[0].set_title(f"Shaw et al. (2018), $r_{{\\max}} = {r_max}$: {2 * r_max + 1} vectors")
    for bidirectional, color, name in ((True, "#7570b3", "encoder (both directions)"),
                                       (False, "#d95f02", "decoder (causal: keys up to $i$)")):
        offsets = list(range(-160, 161 if bidirectional else 1))
        buckets = [t5_bucket(n, bidirectional) for n in offsets]
        axes[1].step(offsets, buckets, where="mid", color=color, label=name)
    for x in (-128, 128):
        axes[1].axvline(x, color=GUIDE, linewidth=0.8, linestyle=":")
    axes[1].set_xlabel("offset $j - i$ (negative: the key comes before its query)")
    axes[1].set_ylabel("bucket")
    axes[1].set_title("T5 (Raffel et al., 2020): 32 buckets, log-spaced up to 128")
    axes[1].legend(frameon=False, loc="center right")
    for ax in axes:
        ax.spines[["top", "right"]].set_visible(False)
    return fig


RULE_COLORS = {"interpolation": "#d95f02", "NTK-aware": "#7570b3", "YaRN": "#1b9e77",
               "Llama 3.1 rule": "#e7298a"}


def rope_scaling() -> Figure:
    """What each scaling rule does to every wavelength of a head of d_h = 128 stretched κ = 8 times.

    Left: the stretch λ'_i / λ_i of each pair; interpolation, NTK-aware and YaRN on base 10,000
    and t_train = 4,096 (Llama 2's shape), Llama 3.1's rule on base 500,000 and t_train = 8,192.
    Right: the wavelengths λ'_i of the base-10,000 head, against t_train and κ t_train.
    """
    d_h, kappa = 128, 8
    rules = {  # name: (rule, base)
        "interpolation": (PositionInterpolation(kappa), 10000.0),
        "NTK-aware": (NTKAwareScaling(kappa), 10000.0),
        "YaRN": (YaRNScaling(kappa, original_context=4096), 10000.0),
        "Llama 3.1 rule": (Llama3Scaling(), 500000.0),
    }
    pairs = torch.arange(d_h // 2)  # i = 0 .. d_h/2 - 1
    fig, axes = plt.subplots(1, 2, figsize=(7.2, 3.9), layout="constrained")
    plain = RotaryEmbedding(d_h).frequencies  # (d_h/2,) base 10,000
    axes[1].plot(pairs, 2 * math.pi / plain, color=INK, linestyle="--", label="no scaling")
    for name, (rule, base) in rules.items():
        theta = RotaryEmbedding(d_h, base).frequencies  # (d_h/2,)
        scaled = RotaryEmbedding(d_h, base, scaling=rule).frequencies  # (d_h/2,)
        label = name + ("\n(base 500,000)" if base != 10000.0 else "")
        axes[0].plot(pairs, theta / scaled, color=RULE_COLORS[name], label=label)
        if base == 10000.0:
            axes[1].plot(pairs, 2 * math.pi / scaled, color=RULE_COLORS[name], label=name)
    axes[0].set_ylabel(r"stretch $\lambda′_i / \lambda_i$")
    axes[0].set_ylim(0.5, 8.7)
    axes[0].legend(frameon=False, loc="center left", bbox_to_anchor=(0.0, 0.58), handlelength=1.2)
    axes[0].set_title(rf"$d_h = {d_h}$, $\kappa = {kappa}$")
    for tokens, text in ((4096, r"$t_{train}$"), (kappa * 4096, r"$\kappa\, t_{train}$")):
        axes[1].axhline(tokens, color="0.55", linewidth=0.8, linestyle=":")
        axes[1].text(1, tokens * 1.25, text, color=INK)
    axes[1].legend(handles=axes[1].lines[:1], frameon=False, loc="lower right")
    axes[1].set_yscale("log")
    axes[1].set_ylabel(r"wavelength $\lambda′_i$ (tokens)")
    axes[1].set_title(r"base 10,000, $t_{train} = 4096$")
    for ax in axes:
        ax.set_xlabel("pair $i$")
        ax.spines[["top", "right"]].set_visible(False)
    return fig


def rope_decay() -> Figure:
    """RoFormer's relative upper bound (2/d_h) Σ_j |σ_j| against the distance p - p', d_h = 128."""
    d_h = 128
    offsets = torch.unique(torch.logspace(0, math.log10(4096), 1500).round())  # 1 .. 4096
    curves = {  # label: (frequencies, color, style)
        "base 10,000": (RotaryEmbedding(d_h).frequencies, INK, "-"),
        "base 500,000": (RotaryEmbedding(d_h, 500000.0).frequencies, RULE_COLORS["Llama 3.1 rule"],
                         "-"),
        r"base 10,000, interpolated by $\kappa = 8$": (
            RotaryEmbedding(d_h, scaling=PositionInterpolation(8)).frequencies,
            RULE_COLORS["interpolation"], "--"),
    }
    fig, ax = plt.subplots(figsize=(7.2, 3.6), layout="constrained")
    for label, (theta, color, style) in curves.items():
        phases = torch.polar(torch.ones(len(offsets), len(theta), dtype=torch.float64),
                             offsets.double()[:, None] * theta)  # (offsets, d_h/2)
        mean_partial_sums = phases.cumsum(dim=-1).abs().mean(dim=-1)  # (offsets,): mean |σ_j|
        ax.plot(offsets, mean_partial_sums, style, color=color, label=label)
    ax.set_xscale("log")
    ax.set_xlabel("distance $p - p′$ (tokens)")
    ax.set_ylabel(r"$\frac{2}{d_h} \sum_j |\sigma_j|$")
    ax.set_title(rf"RoPE's long-term decay bound (Su et al., section 3.4.3), $d_h = {d_h}$")
    ax.legend(frameon=False, loc="lower left")
    ax.spines[["top", "right"]].set_visible(False)
    return fig


FIGURES = {
    "ch08-sinusoidal-table": sinusoidal_table,
    "ch08-alibi-biases": alibi_biases,
    "ch08-relative-buckets": relative_buckets,
    "ch08-rope-decay": rope_decay,
    "ch08-rope-scaling": rope_scaling,
}
