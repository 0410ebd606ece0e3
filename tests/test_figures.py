"""The book's figures: every function in docs/figures/chNN.py draws a figure with Axes, which the
build hook (docs/hooks/figures.py) puts into the built site as reproducible SVG; and the figures
show what their captions say: the right numbers, queries as rows and keys as columns."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from mkdocs.exceptions import PluginError  # noqa: E402

from attention import JOURNEY_TOKENS, journey_inputs  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FIGURES_DIR = REPO / "docs" / "figures"


def load_hook():
    """Import docs/hooks/figures.py as a module (it is not part of a package)."""
    spec = importlib.util.spec_from_file_location(
        "book_figures_hook", REPO / "docs/hooks/figures.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hook = load_hook()
FIGURES = hook.load_figures(FIGURES_DIR)


def test_every_chapter_script_is_found() -> None:
    scripts = hook.figure_scripts(FIGURES_DIR)
    assert scripts, "no figure script docs/figures/chNN.py"
    assert {s.name for s in scripts} == {p.name for p in FIGURES_DIR.glob("ch*.py")}


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_figure_is_in_the_site(name: str, built_site: Path) -> None:
    # The build drew it: the hook calls each function and fails the build unless it gets a
    # matplotlib Figure, which it writes as figures/<name>.svg.
    built = built_site / "figures" / f"{name}.svg"
    assert built.is_file(), f"the build did not produce figures/{name}.svg"
    svg = built.read_bytes()
    assert svg.lstrip().startswith(b"<?xml") and b"<svg" in svg
    assert b'<g id="axes_1">' in svg, f"figures/{name}.svg has no Axes: nothing is drawn"


def test_the_site_svg_is_the_figure_drawn_from_the_data(built_site: Path, monkeypatch) -> None:
    # The quickest figure to draw stands for all. The hook's SVG has no date and fixed element
    # ids, so the same code gives the same file; and the file follows the data: drawn from other
    # inputs (the running example's tokens in reverse order), the figure's SVG is different.
    name = "ch02-query2-weights"
    site = (built_site / "figures" / f"{name}.svg").read_bytes()
    fig = FIGURES[name]()
    assert isinstance(fig, Figure) and fig.axes, f"{name} returned {fig!r}"
    assert hook.figure_svg(fig) == site
    make = FIGURES[name]
    monkeypatch.setitem(make.__globals__, "journey_inputs", lambda: journey_inputs().flip(0))
    assert hook.figure_svg(make()) != site


@pytest.fixture
def draw():
    """Draw figures by name; every figure drawn is closed after the test."""
    drawn: list[Figure] = []

    def make(name: str) -> Figure:
        drawn.append(FIGURES[name]())
        return drawn[-1]

    yield make
    for fig in drawn:
        plt.close(fig)


def heatmap(fig: Figure, panel: int) -> np.ndarray:
    """The matrix drawn on panel ``panel`` of ``fig``, as the image holds it: row i, column j."""
    (image,) = fig.axes[panel].get_images()
    return np.ma.getdata(image.get_array())


def tick_labels(ax) -> tuple[list[str], list[str]]:
    """(x tick labels, y tick labels) of ``ax``."""
    x_labels = [t.get_text() for t in ax.get_xticklabels()]
    return x_labels, [t.get_text() for t in ax.get_yticklabels()]


def test_query2_bars_are_the_two_normalisations_of_its_scores(draw) -> None:
    # Computed here with torch's own softmax: the scores of "journey" against each token.
    inputs = journey_inputs()  # (t, d_in)
    scores = inputs @ inputs[1]  # (t,)
    expected = {
        "divide by the sum": (scores / scores.sum()).numpy(),
        "softmax": torch.softmax(scores, dim=0).numpy(),
    }
    ax = draw("ch02-query2-weights").axes[0]
    bars = {c.get_label(): c for c in ax.containers}
    assert set(bars) == set(expected)
    for label, values in expected.items():
        centres = [p.get_x() + p.get_width() / 2 for p in bars[label].patches]
        assert centres == sorted(centres)  # left to right in token order
        np.testing.assert_allclose([p.get_height() for p in bars[label].patches], values, rtol=1e-6)
    x_labels, _ = tick_labels(ax)
    assert x_labels == list(JOURNEY_TOKENS)
    bar_labels = [t.get_text() for t in ax.texts if re.fullmatch(r"\d\.\d{4}", t.get_text())]
    assert bar_labels == [f"{w:.4f}" for w in expected["softmax"]]  # on the softmax bars


def test_chapter_2_heatmaps_have_queries_as_rows(draw) -> None:
    fig = draw("ch02-weights-heatmap")
    inputs = journey_inputs()  # (t, d_in)
    scores = inputs @ inputs.T  # (t, t), symmetric
    weights = heatmap(fig, 1)
    np.testing.assert_allclose(heatmap(fig, 0), scores.numpy(), rtol=1e-6)
    np.testing.assert_allclose(weights, torch.softmax(scores, dim=-1).numpy(), rtol=1e-6)
    # each query's row sums to 1, its column does not: transposed, the test above fails
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-6)
    assert not np.allclose(weights.sum(axis=0), 1.0)
    for ax in fig.axes[:2]:
        assert tick_labels(ax) == (list(JOURNEY_TOKENS), list(JOURNEY_TOKENS))
        assert (ax.get_xlabel(), ax.get_ylabel()) == ("key", "query")


CAUSAL_PANELS = [
    ("ch04-causal-mask", 2),
    ("ch04-dropout", 0),
    ("ch05-per-head-weights", 0),
    ("ch05-per-head-weights", 1),
]


@pytest.mark.parametrize("name, panel", CAUSAL_PANELS)
def test_causal_heatmaps_are_zero_above_the_diagonal(draw, name: str, panel: int) -> None:
    weights = heatmap(draw(name), panel)  # (t, t): query i sees keys 0 ... i
    assert weights.shape == (6, 6)
    assert np.all(np.triu(weights, k=1) == 0) and np.all(np.diag(weights) > 0)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-6)
    assert weights[0, 0] == pytest.approx(1.0)  # the first token sees only itself


def test_masked_scores_and_dropout_panels(draw) -> None:
    scores = draw("ch04-causal-mask").axes[1].get_images()[0].get_array()  # masked array
    assert np.array_equal(np.ma.getmaskarray(scores), np.triu(np.ones((6, 6), dtype=bool), k=1))
    fig = draw("ch04-dropout")
    weights, dropped = heatmap(fig, 0), heatmap(fig, 1)
    assert np.all(np.triu(dropped, k=1) == 0)
    survivors = dropped != 0
    assert survivors.any() and (~survivors & (weights > 0)).any()  # some kept, some dropped
    np.testing.assert_allclose(dropped[survivors], 2 * weights[survivors], rtol=1e-6)


def test_padding_and_cross_attention_heatmaps_put_keys_in_columns(draw) -> None:
    padded = heatmap(draw("ch06-padding-mask"), 1)  # (t, t), the last 3 tokens are padding
    assert np.all(padded[:, 3:] == 0) and np.all(padded[:, :3] > 0)  # pad keys: zero columns
    np.testing.assert_allclose(padded.sum(axis=1), 1.0, rtol=1e-6)
    fig = draw("ch06-cross-attention")
    for panel in (0, 1):  # one per head
        weights = heatmap(fig, panel)
        assert weights.shape == (4, 6)  # (t_q, t_k): 4 decoder tokens by 6 source tokens
        np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-6)
        x_labels, y_labels = tick_labels(fig.axes[panel])
        assert y_labels == list(JOURNEY_TOKENS[:4]) and len(x_labels) == 6
        assert not set(x_labels) & set(JOURNEY_TOKENS)  # the source sentence's tokens


def write_script(folder: Path, name: str, body: str) -> None:
    (folder / name).write_text(
        "import matplotlib.pyplot as plt\n\n"
        "def good():\n    fig, ax = plt.subplots()\n    return fig\n\n" + body,
        encoding="utf-8",
    )


def test_hook_rejects_a_script_without_figures(tmp_path: Path) -> None:
    write_script(tmp_path, "ch01.py", "")
    with pytest.raises(PluginError, match="expected a dict FIGURES"):
        hook.load_figures(tmp_path)


def test_hook_rejects_a_name_used_twice(tmp_path: Path) -> None:
    write_script(tmp_path, "ch01.py", 'FIGURES = {"ch01-a": good}\n')
    write_script(tmp_path, "ch02.py", 'FIGURES = {"ch01-a": good}\n')
    with pytest.raises(PluginError, match="'ch01-a' is already used"):
        hook.load_figures(tmp_path)


def test_hook_rejects_a_function_that_returns_no_figure(tmp_path: Path) -> None:
    write_script(tmp_path, "ch01.py", 'FIGURES = {"ch01-a": good, "ch01-b": lambda: None}\n')
    figures = hook.load_figures(tmp_path)
    assert hook.render_svg("ch01-a", figures["ch01-a"]).lstrip().startswith(b"<?xml")
    with pytest.raises(PluginError, match="'ch01-b': expected a matplotlib Figure, got NoneType"):
        hook.render_svg("ch01-b", figures["ch01-b"])


def test_trained_heatmaps_show_a_previous_token_head_and_an_induction_head(draw) -> None:
    # The chapter 9 model, trained once by the figure script: on a sequence of period P = 6,
    # layer 0 head 0 looks one token back, layer 1 head 0 at the token after the earlier copy of
    # the current one, i - P + 1, which is 5 places left of the diagonal.
    fig = draw("ch09-induction-heads")
    previous, induction = heatmap(fig, 0), heatmap(fig, 1)
    t = previous.shape[0]
    for weights in (previous, induction):
        assert weights.shape == (t, t) and np.all(np.triu(weights, k=1) == 0)
        np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-5)
    assert np.diagonal(previous, offset=-1).mean() > 0.5
    # each query i >= 6 puts most of its weight on the keys after the earlier copies, i - 5,
    # i - 11, ... (the stripes 5, 11, ... places left of the diagonal)
    after_copies = [sum(induction[i, j] for j in range(i - 5, 0, -6)) for i in range(6, t)]
    assert np.mean(after_copies) > 0.8
    tokens, _ = tick_labels(fig.axes[0])
    assert [tokens[i] for i in range(6, t)] == [tokens[i - 6] for i in range(6, t)]  # period 6
