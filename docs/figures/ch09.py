"""Figures of chapter 9: the tiny decoder-only model trained on the page, and what its heads do.

Notation: b batch size, t tokens (24), n_vocab vocabulary size (16), d model width (32), h heads per
layer (2), L layers (2). The model, the data and the training are the chapter's (section 9.9):
``TinyTransformer`` with rotary positions and no feed-forward network, trained for 300 AdamW
steps on repeated random segments (``induction_data``), seed 123, on one thread. The model is
trained once per build: both figures share ``trained()``.
"""

import functools
import itertools
import math

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure
from torch import Tensor

from attention import TinyTransformer, head_scores, induction_data, plot_attention, train_lm

STEPS, EVERY = 300, 10  # training steps; the heads are measured every EVERY steps
SEQUENCE = 2  # the held-out sequence drawn in the heatmaps (period 6)


def held_out() -> tuple[Tensor, Tensor]:
    """The chapter's 512 held-out sequences (b, t) and their targets (b, t), seed 789."""
    generator = torch.Generator().manual_seed(789)
    return induction_data(512, 24, 16, generator, min_period=4, max_period=12)


@functools.lru_cache(maxsize=1)
def trained() -> tuple[TinyTransformer, list[float], list[int], list[tuple[Tensor, Tensor]]]:
    """Train the chapter's model once: (model, loss per step, measured steps, head scores).

    Before every EVERY-th step the two head scores of every head, (L, h) each, are measured on
    the first 64 held-out sequences. ``head_scores`` runs without gradients and draws no random
    numbers, so the losses are those of the chapter's run.
    """
    threads = torch.get_num_threads()
    # The page's setting, so the figures show the page's run. It is also the fast one: on a
    # shared CPU, more threads make matrices this small many times slower.
    torch.set_num_threads(1)
    try:
        torch.manual_seed(123)
        model = TinyTransformer(
            vocab_size=16, d_model=32, num_heads=2, num_layers=2, context_length=24,
            positions="rope", mlp=False,
        )
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
    finally:
        torch.set_num_threads(threads)
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
    left.axhline(math.log(16), color="#636363", linestyle=":", linewidth=1,
                 label=f"uniform over 16 tokens: ln 16 = {math.log(16):.2f}")
    guess = guessing_loss(*held_out())
    left.axhline(guess, color="#e6550d", linestyle="--", linewidth=1,
                 label=f"uniform over the other P - 1 tokens: {guess:.2f}")
    left.set_xlabel("training step")
    left.set_ylabel("cross-entropy (nats)")
    left.set_ylim(0, 3.0)
    left.set_title("Training loss (one batch of 64 sequences per step)")
    left.legend(loc="upper right")
    previous = torch.stack([s[0] for s in scores])  # (measurements, L, h)
    induction = torch.stack([s[1] for s in scores])  # (measurements, L, h)
    styles = {0: "-", 1: "--"}
    for head in range(2):
        right.plot(measured, previous[:, 0, head], color="#31a354", linestyle=styles[head],
                   label=f"previous-token score, layer 0 head {head}")
        right.plot(measured, induction[:, 1, head], color="#756bb1", linestyle=styles[head],
                   label=f"induction score, layer 1 head {head}")
    right.set_xlabel("training step")
    right.set_ylabel("score (attention weight)")
    right.set_ylim(0, 1.0)
    right.set_title("Head scores on 64 held-out sequences")
    right.legend(loc="center right")
    fig.suptitle("Training the two-layer attention-only model (seed 123): trained weights")
    return fig


def induction_heads() -> Figure:
    """Trained attention weights on one held-out sequence: layer 0 head 0 and layer 1 head 0."""
    model, *_ = trained()
    inputs, _ = held_out()
    previous, induction = head_scores(model, inputs)  # (L, h) each, on all 512 sequences
    sequence = inputs[SEQUENCE : SEQUENCE + 1]  # (1, t)
    with torch.no_grad():
        _, weights = model(sequence, return_weights=True)  # L x (1, h, t, t)
    labels = [str(token) for token in sequence[0].tolist()]
    fig, axes = plt.subplots(1, 2, figsize=(9.4, 5.4), layout="constrained")
    for ax, layer, kind in ((axes[0], 0, "previous-token head"), (axes[1], 1, "induction head")):
        plot_attention(
            weights[layer][0, 0], labels, labels, ax=ax, annotate=False,
            title=(f"layer {layer}, head 0: {kind}\nprevious-token score "
                   f"{previous[layer, 0]:.2f}, induction score {induction[layer, 0]:.2f}"),
        )
        ax.tick_params(labelsize=9)
    fig.suptitle("Trained attention weights on a held-out sequence of period 6 "
                 "(tick labels: token ids)")
    return fig


FIGURES = {
    "ch09-training": training_curves,
    "ch09-induction-heads": induction_heads,
}
