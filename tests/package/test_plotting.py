"""plot_attention: one annotated cell per weight, queries as rows and keys as columns.

The matrices below are not square and not symmetric, and their entries are all different, so a
transposed image, swapped tick labels or an annotation in the wrong cell cannot go unnoticed.
"""

import re

import matplotlib
from _inputs import NON_BOOLS, refuses_non_bool

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from attention import JOURNEY_TOKENS, attention_weights, journey_inputs, plot_attention  # noqa: E402
from attention.plotting import LABEL_GID, WEIGHTS_GID  # noqa: E402

# (t_q, t_k) = (3, 4): rows sum to 1, twelve different values
WEIGHTS = torch.tensor(
    [
        [0.05, 0.10, 0.25, 0.60],
        [0.70, 0.20, 0.06, 0.04],
        [0.15, 0.35, 0.42, 0.08],
    ]
)
QUERIES = ("I", "like", "tea")
KEYS = ("Ich", "trinke", "gern", "Tee")


def tick_labels(ticks: list) -> list[str]:
    return [t.get_text() for t in ticks]


def annotations(ax) -> dict[tuple[int, int], matplotlib.text.Text]:
    """Cell (row, column) -> its annotation; matplotlib places a text at (x, y) = (column, row)."""
    return {(round(t.get_position()[1]), round(t.get_position()[0])): t for t in ax.texts}


@pytest.mark.parametrize(
    "weights, queries, keys",
    [(WEIGHTS, QUERIES, KEYS), (WEIGHTS[:, 1:], QUERIES, KEYS[1:])],
    ids=["3x4", "3x3"],  # square too: swapped tick labels would raise no error there
)
def test_rows_are_queries_and_columns_are_keys(
    weights: torch.Tensor, queries: tuple[str, ...], keys: tuple[str, ...]
) -> None:
    t_q, t_k = weights.shape
    ax = plot_attention(weights, queries, keys, title="queries by keys")
    try:
        assert ax.get_title() == "queries by keys"
        (image,) = ax.get_images()
        # pixel (i, j) of the image is weight (i, j): row i = query i, column j = key j
        np.testing.assert_array_equal(np.ma.getdata(image.get_array()), weights.numpy())
        assert not np.ma.is_masked(image.get_array())  # zeros and all: every cell is drawn
        assert ax.yaxis_inverted()  # the first query is the top row, as in the matrix
        assert ax.get_xlabel() == "key" and ax.get_ylabel() == "query"
        assert list(ax.get_xticks()) == list(range(t_k))
        assert tick_labels(ax.get_xticklabels()) == list(keys)
        assert list(ax.get_yticks()) == list(range(t_q))
        assert tick_labels(ax.get_yticklabels()) == list(queries)
        cells = annotations(ax)
        assert sorted(cells) == [(i, j) for i in range(t_q) for j in range(t_k)]
        for (i, j), text in cells.items():
            value = weights[i, j].item()
            assert text.get_text() == f"{value:.2f}", (i, j)
            if value >= 0.7 or value <= 0.3:  # dark cells get white text, light ones black
                expected = "white" if value >= 0.7 else "black"
                assert text.get_color() == expected, (i, j)
        assert image.get_clim() == (0.0, 1.0)
    finally:
        plt.close(ax.figure)


def test_default_tick_labels_are_positions() -> None:
    ax = plot_attention(WEIGHTS)
    try:
        assert tick_labels(ax.get_xticklabels()) == ["0", "1", "2", "3"]
        assert tick_labels(ax.get_yticklabels()) == ["0", "1", "2"]
    finally:
        plt.close(ax.figure)


@pytest.mark.parametrize(
    "weights, vmax",
    [
        (0.5 * WEIGHTS, 1.0),  # small weights: the scale still ends at 1, not at their maximum
        (2 * WEIGHTS, 1.4),  # dropout's survivors doubled: the scale reaches the largest, 1.4
    ],
    ids=["max 0.35", "max 1.4"],
)
def test_colour_scale_is_0_to_1_or_to_the_largest_weight(
    weights: torch.Tensor, vmax: float
) -> None:
    ax = plot_attention(weights, annotate=False)
    try:
        (image,) = ax.get_images()
        low, high = image.get_clim()
        assert low == 0.0 and high == pytest.approx(vmax)
        assert image.colorbar.vmin == 0.0 and image.colorbar.vmax == pytest.approx(vmax)
    finally:
        plt.close(ax.figure)


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_a_non_finite_weight_is_left_blank_and_the_scale_kept(bad: float) -> None:
    """An inf (an overflowed softmax) must not stretch the scale to inf and blank every cell."""
    weights = torch.tensor([[1.0, 0.0], [0.4, bad]])
    ax = plot_attention(weights)
    try:
        (image,) = ax.get_images()
        assert image.get_clim() == (0.0, 1.0)
        shown = image.to_rgba(image.get_array())  # the colour of each cell, alpha 0 where blank
        assert shown[1, 1, 3] == 0.0 and (shown[[0, 0, 1], [0, 1, 0], 3] == 1.0).all()
        assert shown[0, 0, :3].sum() < shown[1, 0, :3].sum() < shown[0, 1, :3].sum()  # 1 darkest
        assert [t.get_text() for t in ax.texts][-1] == f"{bad:.2f}"
    finally:
        plt.close(ax.figure)


def test_a_float64_weight_past_float32_s_range_is_drawn_and_written_as_it_is() -> None:
    # rounded to float32 it became inf: left blank, written "inf", and left out of the scale
    ax = plot_attention(torch.tensor([[1e300, 0.5]], dtype=torch.float64))
    try:
        (image,) = ax.get_images()
        assert image.get_clim() == (0.0, 1e300)
        assert ax.texts[0].get_text() == f"{1e300:.2f}" and image.to_rgba(image.get_array())[0, 0, 3] == 1.0
    finally:
        plt.close(ax.figure)


def test_heatmap_of_causal_weights() -> None:
    inputs = journey_inputs()
    weights = attention_weights(inputs, inputs, is_causal=True)  # (t, t), zero above the diagonal
    ax = plot_attention(weights, JOURNEY_TOKENS, JOURNEY_TOKENS, title="causal")
    try:
        (image,) = ax.get_images()
        drawn = np.ma.getdata(image.get_array())
        np.testing.assert_array_equal(drawn, weights.numpy())
        assert np.all(np.triu(drawn, k=1) == 0)  # transposed, the zeros would be below
        assert tick_labels(ax.get_yticklabels()) == list(JOURNEY_TOKENS)
        assert tick_labels(ax.get_xticklabels()) == list(JOURNEY_TOKENS)
        cells = annotations(ax)
        assert len(cells) == 36
        # "Your" sees only itself
        assert cells[0, 0].get_text() == "1.00" and cells[0, 5].get_text() == "0.00"
        assert cells[5, 1].get_text() == f"{weights[5, 1]:.2f}" != f"{weights[1, 5]:.2f}"
        assert image.get_clim() == (0.0, 1.0)
    finally:
        plt.close(ax.figure)


def test_draws_on_a_given_axes_with_a_colour_bar_instead_of_annotations() -> None:
    fig, (left, right) = plt.subplots(1, 2)
    try:
        ax = plot_attention(WEIGHTS, QUERIES, KEYS, ax=right, annotate=False)
        assert ax is right and not ax.texts
        assert not left.get_images() and not left.texts  # nothing drawn on the other panel
        (image,) = right.get_images()
        np.testing.assert_array_equal(np.ma.getdata(image.get_array()), WEIGHTS.numpy())
        # the only axes added is the colour bar, and it shows this image's scale, 0 to 1
        assert image.colorbar is not None and fig.axes == [left, right, image.colorbar.ax]
        assert (image.colorbar.vmin, image.colorbar.vmax) == (0.0, 1.0)
    finally:
        plt.close(fig)
    fig, ax = plt.subplots()
    try:
        plot_attention(WEIGHTS, ax=ax)  # annotated: the numbers give the scale, no colour bar
        assert ax.get_images()[0].colorbar is None and fig.axes == [ax] and len(ax.texts) == 12
    finally:
        plt.close(fig)


def test_heatmap_artists_are_named_for_a_style_and_cell_text_contrasts() -> None:
    """The image and the colour bar carry one id, the numbers another, so that a figure's style
    can find them; each number is white on a dark cell and black on a light one."""
    fig, (left, right) = plt.subplots(1, 2)
    try:
        plot_attention(WEIGHTS, QUERIES, KEYS, ax=left)
        plot_attention(WEIGHTS, QUERIES, KEYS, ax=right, annotate=False)
        (first,), (second,) = left.get_images(), right.get_images()
        assert {first.get_gid(), second.get_gid(), second.colorbar.solids.get_gid()} == {WEIGHTS_GID}
        for (row, col), text in annotations(left).items():
            dark_cell = WEIGHTS[row, col].item() > 0.6
            assert text.get_gid() == LABEL_GID
            assert text.get_color() == ("white" if dark_cell else "black"), (row, col)
    finally:
        plt.close(fig)


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    def test_weights_must_be_a_matrix_and_labels_fit_it(self) -> None:
        with pytest.raises(ValueError, match=r"2-d \(t_q, t_k\) matrix, got shape \(2, 3, 3\)"):
            plot_attention(torch.rand(2, 3, 3))
        with pytest.raises(ValueError, match=r"col_labels must have 3 entries, got 2"):
            plot_attention(torch.rand(2, 3), col_labels=["a", "b"])

    @pytest.mark.parametrize(
        ("options", "message"),
        [
            # a TypeError, an AttributeError; complex weights lost their imaginary part
            ({"row_labels": 3}, r"row_labels must be None or a sequence of 2 labels, got int"),
            ({"col_labels": 3}, r"col_labels must be None or a sequence of 3 labels, got int"),
            # a dict drew its keys, 0 1 2, and a set its labels in no set order
            ({"col_labels": {0: "a", 1: "b", 2: "c"}}, r"col_labels must be None or a sequence .*got dict"),
            ({"row_labels": {"a", "b"}}, r"row_labels must be None or a sequence of 2 labels, got set"),
            ({"ax": "ax"}, r"ax must be None or a matplotlib Axes, got str"),
            ({"weights": torch.rand(2, 3, dtype=torch.complex64)}, r"real numbers, got torch\.complex64"),
            ({"weights": "w"}, r"weights must be a \(t_q, t_k\) matrix of real numbers, got str"),
            # "got Tensor": the meta tensor's copy to the CPU failed, and the message named its type
            ({"weights": torch.rand(2, 3, device="meta")}, r"real numbers, got a tensor on the meta device, which holds no values"),
        ],
    )
    def test_labels_axes_and_weights_of_the_wrong_kind_are_refused(self, options: dict, message: str) -> None:
        with pytest.raises(ValueError, match=message):
            plot_attention(**{"weights": torch.rand(2, 3), **options})

    @pytest.mark.parametrize("shape", [(0, 3), (3, 0), (0, 0)])
    def test_an_empty_matrix_is_refused(self, shape: tuple[int, int]) -> None:
        expected = re.escape(f"at least one row (query) and one column (key), got shape {shape}")
        with pytest.raises(ValueError, match=expected):
            plot_attention(torch.rand(shape))

    @pytest.mark.parametrize("value", NON_BOOLS)
    @pytest.mark.parametrize(
        ("flag", "call"),
        [
            ("annotate", lambda value: plot_attention(torch.rand(2, 2), annotate=value)),
        ],
    )
    def test_flags_must_be_bools(self, flag: str, call, value: object) -> None:
        with refuses_non_bool(flag, value):
            call(value)
