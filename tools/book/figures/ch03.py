"""Figures of chapter 3: why scaled dot-product attention divides the scores by sqrt(d_k).

Notation: t tokens, d_k width of queries and keys; omega a row of scores, alpha = softmax(omega)
its attention weights, J = diag(alpha) - alpha alpha^T the Jacobian of the softmax.
"""

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from attention import JOURNEY_TOKENS, journey_inputs, softmax
from book.figures import GUIDE, INK

RAW_COLOR = "#d95f02"
SCALED_COLOR = "#1b9e77"
# The six tokens' lines: tab10's hues, but each at least 3:1 (WCAG's minimum for graphics)
# against the light page (#ffffff) and the dark one (#1e2129): tab10's orange (2.5:1 on white)
# becomes RAW_COLOR's darker orange, its brown (2.7:1 on the dark page) a lighter brown.
TOKEN_COLORS = ("#1f77b4", "#d95f02", "#2ca02c", "#d62728", "#9467bd", "#ad6f61")


def variance_vs_dk() -> Figure:
    """Sample variance of q . k before and after dividing by sqrt(d_k), and two histograms."""
    torch.manual_seed(123)
    widths = [2**n for n in range(1, 11)]
    raw_var, scaled_var = [], []
    for d_k in widths:
        q = torch.randn(2000, d_k)  # (pairs, d_k)
        k = torch.randn(2000, d_k)  # (pairs, d_k)
        scores = (q * k).sum(dim=-1)  # (pairs,)
        raw_var.append(scores.var().item())
        scaled_var.append((scores / d_k**0.5).var().item())

    fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 3.8), layout="constrained")
    left.plot(widths, widths, color=GUIDE, linestyle=":", linewidth=1.2, label="$d_k$")
    left.plot(widths, raw_var, "o-", color=RAW_COLOR, label="Var$(q \\cdot k)$")
    left.plot(widths, scaled_var, "s-", color=SCALED_COLOR,
              label="Var$(q \\cdot k / √d_k)$")
    left.set_xscale("log", base=2)
    left.set_yscale("log", base=2)
    left.set_xlabel("width of queries and keys $d_k$")
    left.set_ylabel("sample variance of the score")
    left.set_title("Variance grows like $d_k$ unless scaled")
    left.legend(frameon=False, loc="upper left")

    d_k = 64
    q = torch.randn(20_000, d_k)  # (pairs, d_k)
    k = torch.randn(20_000, d_k)  # (pairs, d_k)
    scores = (q * k).sum(dim=-1)  # (pairs,)
    bins = torch.linspace(-32, 32, 129).numpy()
    # translucent, so that the wide histogram shows behind the narrow one; an opaque edge in
    # the same colour reaches 3:1 on either page, where the translucent fill does not
    right.hist(scores.numpy(), bins=bins, density=True, histtype="stepfilled",
               facecolor=(RAW_COLOR, 0.75), edgecolor=RAW_COLOR, label="$q \\cdot k$ (std 8)")
    right.hist((scores / d_k**0.5).numpy(), bins=bins, density=True, histtype="stepfilled",
               facecolor=(SCALED_COLOR, 0.75), edgecolor=SCALED_COLOR,
               label="$q \\cdot k / √d_k$ (std 1)")
    right.set_xlabel("score")
    right.set_ylabel("density")
    right.set_title(f"Scores of 20,000 random pairs, $d_k = {d_k}$")
    right.legend(frameon=False, loc="upper left")
    for ax in (left, right):
        ax.spines[["top", "right"]].set_visible(False)
    return fig


def softmax_saturation() -> Figure:
    """Weights of the query "journey" and the norm of the softmax Jacobian as the scores
    grow."""
    inputs = journey_inputs()  # (t, d_in)
    torch.manual_seed(123)
    W_query, W_key = torch.rand(3, 2), torch.rand(3, 2)  # (d_in, d_out) each
    scores_2 = inputs[1] @ W_query @ (inputs @ W_key).T / 2**0.5  # (t,)
    factors = torch.logspace(-1, 2.5, 200)  # (c,)
    alpha = softmax(factors[:, None] * scores_2, dim=-1)  # (c, t)
    jacobian = torch.diag_embed(alpha) - alpha[:, :, None] * alpha[:, None, :]  # (c, t, t)
    norm = jacobian.norm(dim=(-2, -1))  # (c,)

    fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 3.8), layout="constrained")
    for j, token in enumerate(JOURNEY_TOKENS):
        left.plot(factors.numpy(), alpha[:, j].numpy(), color=TOKEN_COLORS[j], label=token,
                  linewidth=2.2 if token == "journey" else 1.4)
    left.axvline(1.0, color=GUIDE, linestyle=":", linewidth=1)
    left.annotate("$c = 1$: the scaled scores", (1.08, 0.9), color=INK, alpha=0.75)
    left.set_xscale("log")
    left.set_xlabel("factor $c$ on the scores")
    left.set_ylabel("attention weight $\\alpha_{2j}$")
    left.set_title('Query "journey": weights of $c\\,\\omega_{2j}/√d_k$')
    left.legend(frameon=False, loc="center left")

    right.plot(factors.numpy(), norm.numpy(), color="#7570b3", linewidth=2)
    right.axvline(1.0, color=GUIDE, linestyle=":", linewidth=1)
    right.set_xscale("log")
    right.set_ylim(bottom=0)
    right.set_xlabel("factor $c$ on the scores")
    right.set_ylabel("$\\|\\mathrm{diag}(\\alpha) - \\alpha\\alpha^\\top\\|_F$")
    right.set_title("Size of the softmax Jacobian")
    for ax in (left, right):
        ax.spines[["top", "right"]].set_visible(False)
    fig.suptitle(
        "Scores of the untrained $W_q$, $W_k$ of section 3.2 (seed 123), scaled by $c$"
    )
    return fig


FIGURES = {
    "ch03-variance-vs-dk": variance_vs_dk,
    "ch03-softmax-saturation": softmax_saturation,
}
