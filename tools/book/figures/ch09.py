"""Figures of chapter 9: the tiny decoder-only model trained on the page, and what its heads do.

Notation: b batch size, t tokens (24), n_vocab vocabulary size (16), d model width (32), h heads
per layer (2), L layers (2), d_h head width (16). The model, the data and the training are the
chapter's (section 9.9): ``TinyTransformer`` with rotary positions and no feed-forward network,
trained for 300 AdamW steps on repeated random segments (``induction_data``), seed 123, on one
thread. The model is trained once: every figure shares ``trained()``, which keeps what it
trained in ``.cache/trained/`` (git-ignored) for the next build or test run, while the package,
this module and the versions are as they were. The circuits
(section 9.11) are read from its weights in float64, in the row-vector convention: W_QK and
W_OV as ``qk_circuit`` and ``ov_circuit`` return them, W_E the token embeddings (n_vocab, d),
W_U the LM head (d, n_vocab) and Gamma_f the final LayerNorm's linear part.
"""

import contextlib
import functools
import hashlib
import itertools
import math
import sys
from collections.abc import Iterator
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure
from torch import Tensor

from attention import (
    TinyTransformer,
    copying_score,
    head_scores,
    induction_data,
    ov_circuit,
    plot_attention,
    qk_circuit,
    rotation_matrix,
    train_lm,
)
from attention.norms import norm_matrix
from book.cache import keep
from book.constants import REPO
from book.figures import GUIDE, invert_in_dark

Trained = tuple[TinyTransformer, list[float], list[int], list[tuple[Tensor, Tensor]]]
# what trained() trained, named by what it was trained from
TRAINED = REPO / ".cache" / "trained"

STEPS, EVERY = 300, 10  # training steps; the heads are measured every EVERY steps
SEQUENCE = 2  # the held-out sequence drawn in the heatmaps (period 6)
OFFSET = 5  # i - j of the virtual QK matrix drawn: P - 1 for the period P = 6 of SEQUENCE


def held_out() -> tuple[Tensor, Tensor]:
    """The chapter's 512 held-out sequences (b, t) and their targets (b, t), seed 789."""
    generator = torch.Generator().manual_seed(789)
    return induction_data(512, 24, 16, generator, min_period=4, max_period=12)


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run torch on one thread, as the page does, and restore the count afterwards.

    It is also the fast setting: on a shared CPU, more threads make matrices this small many
    times slower.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def training_key() -> str:
    """A digest of what ``trained()`` depends on: the package's sources, this module, and the
    versions of Python and PyTorch."""
    digest = hashlib.sha256(f"{sys.version}\n{torch.__version__}\n".encode())
    for path in [*sorted((REPO / "src" / "attention").rglob("*.py")), Path(__file__)]:
        digest.update(path.relative_to(REPO).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def trained() -> Trained:
    """The chapter's model, trained once (:func:`train`), or as an earlier run trained it from
    the same sources and versions (read from ``TRAINED``)."""
    stored = TRAINED / f"ch09-{training_key()}.pt"
    if stored.is_file():
        state, training, losses, measured, scores = torch.load(stored)
        model = new_model()
        model.load_state_dict(state)
        return model.train(training), losses, measured, scores
    model, losses, measured, scores = train()
    keep(stored, lambda partial: torch.save(
        (model.state_dict(), model.training, losses, measured, scores), partial))
    return model, losses, measured, scores


def new_model() -> TinyTransformer:
    """The chapter's model, untrained (the seed set first, as on the page)."""
    return TinyTransformer(
        vocab_size=16, d_model=32, num_heads=2, num_layers=2, context_length=24,
        positions="rope", mlp=False,
    )


def train() -> Trained:
    """Train the chapter's model: (model, loss per step, measured steps, head scores).

    Before every EVERY-th step the two head scores of every head, (L, h) each, are measured on
    the first 64 held-out sequences. ``head_scores`` runs without gradients and draws no random
    numbers, so the losses are those of the chapter's run.
    """
    with one_thread():  # the page's setting, so the figures show the page's run
        torch.manual_seed(123)
        model = new_model()
        probe = held_out()[0][:64]  # (64, t)
        counter = itertools.count()
        measured: list[int] = []
        scores: list[tuple[Tensor, Tensor]] = []

        def batches(generator: torch.Generator) -> tuple[Tensor, Tensor]:
            """A training batch (b, t) twice; first, every EVERY steps, measure the heads."""
            step = next(counter)
            if step % EVERY == 0:
                measured.append(step)
                scores.append(head_scores(model, probe))  # leaves the model in eval mode
                model.train()
            return induction_data(64, 24, 16, generator, min_period=4, max_period=12)

        losses = train_lm(model, batches, steps=STEPS, lr=3e-3, seed=123)
    return model, losses, measured, scores


def guessing_loss(inputs: Tensor, targets: Tensor) -> float:
    """Mean of ln(P - 1) over the scored targets: guessing among the segment's other tokens."""
    first = inputs[:, :1]  # (b, 1)
    periods = (inputs[:, 1:] == first).int().argmax(dim=1) + 1  # (b,): where token 0 recurs
    per_token = torch.log(periods.double() - 1)[:, None].expand_as(targets)  # (b, t)
    return per_token[targets != -100].mean().item()


def training_curves() -> Figure:
    """The loss of every step, and the heads' scores measured during the same run."""
    _, losses, measured, scores = trained()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.5, 4.4), layout="constrained")
    left.plot(range(len(losses)), losses, color="#3182bd", linewidth=1.2, label="training loss")
    left.axhline(math.log(16), color=GUIDE, linestyle=":", linewidth=1,
                 label=f"uniform over 16 tokens: ln 16 = {math.log(16):.2f}")
    guess = guessing_loss(*held_out())
    left.axhline(guess, color="#e6550d", linestyle="--", linewidth=1,
                 label=f"uniform over the other P - 1 tokens: {guess:.2f}")
    left.set(xlabel="training step", ylabel="cross-entropy (nats)", ylim=(0, 3.0),
             title="Training loss (one batch of 64 sequences per step)")
    left.legend(loc="upper right")
    previous = torch.stack([s[0] for s in scores])  # (measurements, L, h)
    induction = torch.stack([s[1] for s in scores])  # (measurements, L, h)
    styles = {0: "-", 1: "--"}
    for head in range(2):
        right.plot(measured, previous[:, 0, head], color="#31a354", linestyle=styles[head],
                   label=f"previous-token score, layer 0 head {head}")
        right.plot(measured, induction[:, 1, head], color="#756bb1", linestyle=styles[head],
                   label=f"induction score, layer 1 head {head}")
    right.set(xlabel="training step", ylabel="score (attention weight)", ylim=(0, 1.0),
              title="Head scores on 64 held-out sequences")
    right.legend(loc="center right")
    fig.suptitle("Training the two-layer attention-only model (seed 123): trained weights")
    return fig


def induction_heads() -> Figure:
    """Trained attention weights on one held-out sequence: layer 0 head 0 and layer 1 head 0."""
    model, *_ = trained()
    inputs, _ = held_out()
    sequence = inputs[SEQUENCE : SEQUENCE + 1]  # (1, t)
    with one_thread(), torch.no_grad():
        previous, induction = head_scores(model, inputs)  # (L, h) each, on all 512 sequences
        _, weights = model(sequence, return_weights=True)  # L x (1, h, t, t)
    labels = [str(token) for token in sequence[0].tolist()]
    fig, axes = plt.subplots(1, 2, figsize=(9.4, 5.4), layout="constrained")
    for ax, layer, kind in ((axes[0], 0, "previous-token head"),
                            (axes[1], 1, "induction head")):
        plot_attention(
            weights[layer][0, 0], labels, labels, ax=ax, annotate=False,
            title=(f"layer {layer}, head 0: {kind}\nprevious-token score "
                   f"{previous[layer, 0]:.2f}, induction score {induction[layer, 0]:.2f}"),
        )
        ax.tick_params(labelsize=9)
    fig.suptitle("Trained attention weights on a held-out sequence of period 6 "
                 "(tick labels: token ids)")
    return fig


def layer0_scores(model: TinyTransformer, head: int, offsets: range) -> Tensor:
    """Exact layer-0 scores (offsets, n_vocab, n_vocab): query token a at i against key token b
    at j.

    Layer 0 reads only the token embedding, so LN_1, the biases and the rotation R_(i-j) give
    every score q(a) R_(i-j) k(b)^T / sqrt(d_h) without running a sequence.
    """
    block = model.blocks[0]
    d, d_h = block.d_model, block.d_h
    # (3d, d), (3d,)
    weight, bias = block.attn.qkv.weight.double(), block.attn.qkv.bias.double()
    with torch.no_grad():
        normed = block.norm1(model.tok_emb.weight).double()  # (n_vocab, d)
        queries, keys, _ = (normed @ weight.T + bias).split(d, dim=1)  # (n_vocab, d) each
    cols = slice(head * d_h, (head + 1) * d_h)
    return torch.stack([
        queries[:, cols] @ rotation_matrix(block.attn.rotary, offset) @ keys[:, cols].T
        for offset in offsets
    ]) / math.sqrt(d_h)  # (offsets, n_vocab, n_vocab)


def full_ov(model: TinyTransformer, layer: int, head: int) -> Tensor:
    """W_E W_OV Gamma_f W_U (n_vocab, n_vocab): how attending to token b (row) moves the
    logit of c."""
    embedding = model.tok_emb.weight.detach().double()  # (n_vocab, d)
    unembedding = model.lm_head.weight.detach().double().T  # (d, n_vocab)
    final = norm_matrix(model.final_norm).double()  # (d, d)
    # (n_vocab, n_vocab)
    return embedding @ ov_circuit(model.blocks[layer], head) @ final @ unembedding


def virtual_qk(model: TinyTransformer, head: int, offset: int) -> Tensor:
    """W_E W_QK(offset) W_OV^T W_E^T (n_vocab, n_vocab): layer 1 ``head`` through layer 0
    head 0's output.

    Entry (a, a') scores a query holding token a against a key whose previous token is a'.
    """
    embedding = model.tok_emb.weight.detach().double()  # (n_vocab, d)
    qk = qk_circuit(model.blocks[1], head, offset)  # (d, d)
    return embedding @ qk @ ov_circuit(model.blocks[0], 0).T @ embedding.T  # (n_vocab, n_vocab)


def signed_heatmap(
    fig: Figure, ax, matrix: Tensor, title: str, xlabel: str, ylabel: str
) -> None:
    """A (n_vocab, n_vocab) matrix in a diverging map centred on 0, token ids on both axes."""
    limit = matrix.abs().max().item()
    image = ax.imshow(matrix.numpy(), cmap="RdBu_r", vmin=-limit, vmax=limit)
    invert_in_dark(image, fig.colorbar(image, ax=ax, shrink=0.8))
    ticks = list(range(0, matrix.shape[0], 3))
    ax.set_xticks(ticks)
    ax.set_yticks(ticks)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)


def circuits() -> Figure:
    """The heads read from the weights: positional QK, K-composition, copying OV,
    eigenvalues."""
    model, *_ = trained()
    with one_thread():
        profiles = [layer0_scores(model, head, range(24)).flatten(1) for head in range(2)]
        virtual, copying = virtual_qk(model, 0, OFFSET), full_ov(model, 1, 0)
        circuits_ov = {(layer, head): full_ov(model, layer, head)
                       for layer, head in ((1, 0), (1, 1), (0, 0), (0, 1))}
    fig, axes = plt.subplots(2, 2, figsize=(7.2, 6.6), layout="constrained")
    offsets = range(24)
    for head, style in ((0, "-"), (1, "--")):
        scores = profiles[head]  # (offsets, V V)
        mean, std = scores.mean(dim=1).numpy(), scores.std(dim=1).numpy()
        axes[0, 0].plot(offsets, mean, style, color="#31a354", label=f"head {head}")
        axes[0, 0].fill_between(offsets, mean - std, mean + std, color="#31a354", alpha=0.25)
    axes[0, 0].axhline(0.0, color=GUIDE, linewidth=0.8)
    axes[0, 0].set_xlabel("offset $i - j$")
    axes[0, 0].set_ylabel("score (mean ± sd)")
    axes[0, 0].set_title("Layer 0: scores set by position")
    axes[0, 0].set_ylim(top=axes[0, 0].get_ylim()[1] + 4.0)  # room above the curves
    axes[0, 0].legend(loc="upper center", ncols=2)
    signed_heatmap(fig, axes[0, 1], virtual, f"K-composition, offset {OFFSET}",
                   "token before the key", "query token")
    signed_heatmap(fig, axes[1, 0], copying, "Full OV circuit, layer 1 head 0",
                   "logit of token", "attended token")
    markers = {(1, 0): ("o", "#756bb1"), (1, 1): ("x", "#756bb1"), (0, 0): ("o", "#31a354"),
               (0, 1): ("x", "#31a354")}
    for (layer, head), (marker, color) in markers.items():
        matrix = circuits_ov[layer, head]  # (n_vocab, n_vocab)
        eigenvalues = torch.linalg.eigvals(matrix)  # (V,)
        eigenvalues = eigenvalues / eigenvalues.abs().max()  # largest magnitude 1
        axes[1, 1].scatter(eigenvalues.real.numpy(), eigenvalues.imag.numpy(), marker=marker,
                           color=color, s=22,
                           label=f"L{layer}H{head}: {copying_score(matrix):+.2f}")
    axes[1, 1].axvline(0.0, color=GUIDE, linewidth=0.8)
    axes[1, 1].axhline(0.0, color=GUIDE, linewidth=0.8)
    axes[1, 1].set_xlim(-1.1, 1.1)
    axes[1, 1].set_ylim(-1.1, 2.2)  # room above the points for the legend
    axes[1, 1].set_yticks([-1.0, -0.5, 0.0, 0.5, 1.0])
    axes[1, 1].set_xlabel("real part")
    axes[1, 1].set_ylabel("imaginary part")
    axes[1, 1].set_title("OV eigenvalues (largest |λ| = 1)")
    axes[1, 1].legend(title="head: copying score", loc="upper center", ncol=2,
                      columnspacing=0.8, handletextpad=0.2)
    fig.suptitle("The trained heads read from their weights (seed 123)")
    return fig


FIGURES = {
    "ch09-training": training_curves,
    "ch09-induction-heads": induction_heads,
    "ch09-circuits": circuits,
}
