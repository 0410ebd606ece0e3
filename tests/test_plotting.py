"""plot_attention: one annotated cell per weight, queries as rows and keys as columns."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from attention import (  # noqa: E402
    JOURNEY_TOKENS,
    attention_weights,
    journey_inputs,
    plot_attention,
)


def test_heatmap_of_causal_weights() -> None:
    inputs = journey_inputs()
    weights = attention_weights(inputs, inputs, is_causal=True)
    ax = plot_attention(weights, JOURNEY_TOKENS, JOURNEY_TOKENS, title="causal")
    try:
        assert ax.get_title() == "causal"
        assert ax.get_ylabel() == "query" and ax.get_xlabel() == "key"
        assert [t.get_text() for t in ax.get_yticklabels()] == list(JOURNEY_TOKENS)
        # cell (row, column) -> its annotation; a text sits at (x, y) = (column, row)
        cells = {(round(t.get_position()[1]), round(t.get_position()[0])): t.get_text()
                 for t in ax.texts}
        assert len(cells) == 36
        assert cells[(0, 0)] == "1.00" and cells[(0, 5)] == "0.00"  # "Your" sees only itself
        assert cells[(5, 1)] == f"{weights[5, 1]:.2f}"
        image = ax.get_images()[0]
        assert image.get_array().shape == (6, 6)
        assert image.get_clim() == (0.0, 1.0)
    finally:
        plt.close(ax.figure)


def test_draws_on_a_given_axes_without_annotations() -> None:
    fig, (left, right) = plt.subplots(1, 2)
    try:
        ax = plot_attention(torch.rand(3, 4), ax=right, annotate=False)
        assert ax is right and not ax.texts and not left.get_images()
        assert len(fig.axes) == 3  # the two panels and a colour bar for the unannotated one
    finally:
        plt.close(fig)
