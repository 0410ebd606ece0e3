"""The book's figures: every function in tools/book/figures/chNN.py draws a figure with Axes, which
the build hook (tools/book/hooks/figures.py) puts into the built site as reproducible SVG; and the
figures show what their captions say: the right numbers, queries as rows and keys as columns."""

from __future__ import annotations

import functools
import importlib
import io
import json
import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from mkdocs.exceptions import PluginError  # noqa: E402

from attention import JOURNEY_TOKENS, journey_inputs  # noqa: E402
from book.constants import REPO
from book.figures._phone import covering_legends  # noqa: E402
from book.hooks import figures as hook  # noqa: E402

FIGURES_DIR = REPO / "tools" / "book" / "figures"


FIGURES = hook.load_figures()


def test_every_figure_module_is_found() -> None:
    modules = set(hook.figure_modules())
    expected = {f"book.figures.{p.stem}" for p in FIGURES_DIR.glob("ch*.py")} | {"book.figures.appendix"}
    assert modules == expected


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
    plt.close(fig)
    make = FIGURES[name]
    assert hook.render_svg(name, make) == site
    monkeypatch.setitem(make.__globals__, "journey_inputs", lambda: journey_inputs().flip(0))
    assert hook.render_svg(name, make) != site


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


def figure_package(tmp_path: Path, monkeypatch, modules: dict[str, str]):
    """A package of figure modules in ``tmp_path``, each one ``good()`` plus its ``body``."""
    package = tmp_path / f"figures_{tmp_path.name.replace('-', '_')}"  # a new name per test
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, body in modules.items():
        (package / f"{name}.py").write_text(
            "import matplotlib.pyplot as plt\n\n"
            "def good():\n    fig, ax = plt.subplots()\n    return fig\n\n" + body,
            encoding="utf-8",
        )
    monkeypatch.syspath_prepend(str(tmp_path))
    return importlib.import_module(package.name)


def test_hook_rejects_a_module_without_figures(tmp_path: Path, monkeypatch) -> None:
    package = figure_package(tmp_path, monkeypatch, {"ch01": ""})
    with pytest.raises(PluginError, match=r"ch01: expected a dict FIGURES"):
        hook.load_figures(package)


def test_hook_rejects_a_name_used_twice(tmp_path: Path, monkeypatch) -> None:
    package = figure_package(
        tmp_path, monkeypatch,
        {"ch01": 'FIGURES = {"ch01-a": good}\n', "ch02": 'FIGURES = {"ch01-a": good}\n'},
    )
    with pytest.raises(PluginError, match="ch02: figure name 'ch01-a' is already used"):
        hook.load_figures(package)


def test_each_module_is_drawn_by_the_one_process_that_claims_it(tmp_path: Path, monkeypatch) -> None:
    package = figure_package(tmp_path, monkeypatch, {
        "ch01": 'FIGURES = {"ch01-a": good}\n', "ch02": 'FIGURES = {"ch02-a": good}\n'})
    first, second = tmp_path / "first", tmp_path / "second"
    jobs = [(f"{package.__name__}.ch01", first), (f"{package.__name__}.ch02", second)]
    for folder in (first, second):
        folder.mkdir()
    (second / hook.CLAIMED).touch()  # another process is drawing ch02
    hook.render_all(jobs)
    assert (first / "ch01-a.svg").is_file() and (first / hook.CLAIMED).is_file()
    assert not (second / "ch02-a.svg").exists()
    (first / "ch01-a.svg").unlink()
    hook.render_all(jobs)  # a second process finds both claimed and draws nothing
    assert not (first / "ch01-a.svg").exists()


def test_a_page_written_while_its_figures_are_drawn_gets_them_after_the_build(
    tmp_path: Path, monkeypatch,
) -> None:
    """A fresh build writes its pages while the figures are drawn, and puts the figures into
    them after: the same page as a build that found them cached, and the SVG files copied."""
    package = figure_package(tmp_path, monkeypatch, {"ch01": (
        "def wide():\n    fig, axes = plt.subplots(1, 3, figsize=(12, 3))\n    return fig\n\n"
        'FIGURES = {"ch01-a": good, "ch01-b": wide}\n')})
    module, entry, site = f"{package.__name__}.ch01", tmp_path / "entry", tmp_path / "site"
    entry.mkdir()
    config = SimpleNamespace(site_dir=str(site), use_directory_urls=True,
                             plugins=SimpleNamespace(_current_plugin=None))
    files = [hook.FigureFile.generated(config, f"figures/{name}.svg",  # type: ignore[arg-type]
                                       abs_src_path=str(entry / f"{name}.svg"))
             for name in ("ch01-a", "ch01-b")]
    for name, value in [("_entries", {module: entry}), ("_missing", {module: ["ch01-a", "ch01-b"]}),
                        ("_children", []), ("_waiting", []), ("_figure_files", files),
                        ("_svgs", {}), ("_phone_svgs", {}), ("CACHE", tmp_path / "no-cache")]:
        monkeypatch.setattr(hook, name, value)
    html = ('<html><head><title>t</title></head><body><p><img alt="A" src="../figures/ch01-a.svg" />'
            '</p><p><img alt="B" src="../figures/ch01-b.svg" /></p></body></html>')
    page = SimpleNamespace(file=SimpleNamespace(abs_dest_path=str(site / "ch01" / "index.html")))
    written = hook.on_post_page(html, page, config)  # type: ignore[arg-type]
    assert written == html.replace("</head>", hook.PHONE_RULES + "</head>")
    for file in files:
        file.copy_file()  # mkdocs copies the site's files before the figures are drawn
    assert not (site / "figures").exists()
    Path(page.file.abs_dest_path).parent.mkdir(parents=True)
    Path(page.file.abs_dest_path).write_text(written, encoding="utf-8")
    hook.on_post_build(config)  # type: ignore[arg-type]
    after = Path(page.file.abs_dest_path).read_text(encoding="utf-8")
    assert hook._missing == {} and (entry / hook.NAMES).read_text() == "ch01-a\nch01-b\n"
    assert hook.on_post_page(html, page, config) == after  # type: ignore[arg-type]
    assert "ch01-b" in hook._phone_svgs and '<style id="attn-phone-figures">' in after
    assert after.count("<svg ") == 2 + len(hook._phone_svgs)
    assert (site / "figures" / "ch01-b.svg").read_bytes() == (entry / "ch01-b.svg").read_bytes()


def test_a_drawing_child_ends_at_once_only_after_drawing_succeeded(tmp_path: Path, monkeypatch) -> None:
    """The child skips the interpreter's teardown (os._exit(0)) once its files are written; a
    figure that fails raises instead, so the child ends with status 1 and a traceback."""
    package = figure_package(tmp_path, monkeypatch, {
        "ch01": 'FIGURES = {"ch01-a": good}\n', "ch02": 'FIGURES = {"ch02-a": lambda: 1 / 0}\n'})
    exits: list[int] = []
    monkeypatch.setattr(hook.os, "_exit", exits.append)
    for module in ("ch01", "ch02"):
        (tmp_path / module).mkdir()
    hook.child([f"{package.__name__}.ch01={tmp_path / 'ch01'}"])
    assert exits == [0] and (tmp_path / "ch01" / "ch01-a.svg").is_file()
    with pytest.raises(ZeroDivisionError):
        hook.child([f"{package.__name__}.ch02={tmp_path / 'ch02'}"])
    assert exits == [0]


def test_figures_are_drawn_on_one_thread_and_the_thread_count_is_restored(
    tmp_path: Path, monkeypatch,
) -> None:
    package = figure_package(tmp_path, monkeypatch, {"ch01": (
        "import torch\n\nTHREADS = []\n\n"
        "def counted():\n    THREADS.append(torch.get_num_threads())\n    return good()\n\n"
        'FIGURES = {"ch01-a": counted}\n')})
    (tmp_path / "out").mkdir()
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        hook.render_all([(f"{package.__name__}.ch01", tmp_path / "out")])
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert importlib.import_module(f"{package.__name__}.ch01").THREADS == [1]


def test_hook_rejects_a_function_that_returns_no_figure(tmp_path: Path, monkeypatch) -> None:
    package = figure_package(
        tmp_path, monkeypatch, {"ch01": 'FIGURES = {"ch01-a": good, "ch01-b": lambda: None}\n'}
    )
    figures = hook.load_figures(package)
    assert hook.render_svg("ch01-a", figures["ch01-a"]).lstrip().startswith(b"<?xml")
    with pytest.raises(PluginError, match="'ch01-b': expected a matplotlib Figure, got NoneType"):
        hook.render_svg("ch01-b", figures["ch01-b"])


@pytest.mark.parametrize("label, font, text", [
    ("$\\Omega / \\sqrt{d_k}$", "STIXSizeOneSym", "√"),  # a radical in STIX's size variant
    ("distance $p - p'$", "cmsy10", "0"),  # a prime: cmsy10's glyph of "0", "p0" in a browser
])
def test_hook_rejects_text_in_a_font_the_site_does_not_ship(label: str, font: str, text: str) -> None:
    def titled() -> Figure:
        fig, ax = plt.subplots(figsize=(3, 2))
        ax.set_title(label)
        return fig

    with pytest.raises(PluginError, match=rf"'ch01-a': .* got {text!r} in {font!r}"):
        hook.render_svg("ch01-a", titled)
    assert {"DejaVu Sans", "DejaVu Sans Mono"} <= hook.shipped_fonts()


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


def test_the_trained_model_is_kept_for_the_same_sources_only(tmp_path, monkeypatch) -> None:
    # Chapter 9's figures read the model trained by an earlier build or run while the package,
    # the figure module and the versions are the same; any edit trains it again.
    from book.figures import ch09

    (tmp_path / "src" / "attention").mkdir(parents=True)
    package, module = tmp_path / "src" / "attention" / "a.py", tmp_path / "ch09.py"
    package.write_text("x = 1\n")
    module.write_text("# the figures\n")
    monkeypatch.setattr(ch09, "REPO", tmp_path)
    monkeypatch.setattr(ch09, "__file__", str(module))
    monkeypatch.setattr(ch09, "TRAINED", tmp_path / "trained")
    keys = [ch09.training_key()]
    for path, text in ((package, "x = 2\n"), (module, "# the figures, edited\n")):
        path.write_text(text)
        keys.append(ch09.training_key())
    assert len(set(keys)) == 3, keys
    torch.manual_seed(0)
    model = ch09.new_model()
    stored = ([0.5, 0.25], [0], [(torch.ones(2, 2), torch.zeros(2, 2))])
    (tmp_path / "trained").mkdir()
    torch.save((model.state_dict(), False, *stored), tmp_path / "trained" / f"ch09-{keys[-1]}.pt")
    read, *rest = ch09.trained.__wrapped__()
    assert not read.training and tuple(rest[:2]) == stored[:2]
    assert all(torch.equal(a, b) for a, b in zip(read.state_dict().values(), model.state_dict().values()))


def test_circuit_panels_show_a_positional_head_k_composition_and_copying(draw) -> None:
    # Section 9.11 from the weights of the same trained model: layer 0 head 0 scores the key one
    # place back highest among the near offsets; the virtual QK matrix of layer 1 head 0 through
    # it, and that head's full OV circuit, are largest on their diagonals (a = b, own logit).
    fig = draw("ch09-circuits")
    head0 = fig.axes[0].get_lines()[0]
    assert head0.get_label() == "head 0" and fig.axes[0].get_title().startswith("Layer 0")
    assert int(np.argmax(head0.get_ydata()[:6])) == 1
    heatmaps = [np.ma.getdata(ax.get_images()[0].get_array()) for ax in fig.axes
                if ax.get_images() and ax.get_title()]
    assert len(heatmaps) == 2
    for matrix in heatmaps:
        assert matrix.shape == (16, 16)
        assert np.array_equal(matrix.argmax(axis=1), np.arange(16))
    (eigen_axes,) = [ax for ax in fig.axes if ax.get_title().startswith("OV eigenvalues")]
    labels = [text.get_text() for text in eigen_axes.get_legend().get_texts()]
    assert [label.split(": ")[0] for label in labels] == ["L1H0", "L1H1", "L0H0", "L0H1"]
    assert [float(label.split(": ")[1]) > 0.99 for label in labels] == [True, True, False, False]


def test_cache_memory_curves_are_equation_10_6(draw) -> None:
    # MHA (h_kv = 32) at 4,096 tokens of a 32-layer model with d_h = 128 in 16-bit: 2 GiB; GQA
    # with h_kv = 8 a quarter of it, MQA a 32nd; the windowed curve stops growing at w = 4096.
    ax = draw("ch10-cache-memory").axes[0]
    lines = {line.get_label().split(",")[0] + ("+w" if "window" in line.get_label() else ""):
             line for line in ax.get_lines()}
    assert set(lines) == {"MHA", "GQA", "GQA+w", "MQA"}
    t = lines["MHA"].get_xdata()
    gib = {name: np.asarray(line.get_ydata()) for name, line in lines.items()}
    np.testing.assert_allclose(gib["MHA"], 2 * t * 32 * 32 * 128 * 2 / 2**30)
    np.testing.assert_allclose(gib["MHA"][list(t).index(4096)], 2.0)
    np.testing.assert_allclose(gib["GQA"] * 4, gib["MHA"])
    np.testing.assert_allclose(gib["MQA"] * 32, gib["MHA"])
    np.testing.assert_allclose(gib["GQA+w"], np.minimum(t, 4096) * gib["GQA"] / t)


def test_decode_speed_draws_the_results_or_says_there_are_none(monkeypatch, tmp_path) -> None:
    make = FIGURES["ch10-decode-speed"]
    results = tmp_path / "cpu.json"
    results.write_text(json.dumps({"provenance": {"cpu_model": "test CPU"}}), encoding="utf-8")
    monkeypatch.setitem(make.__globals__, "RESULTS", results)
    empty = make()
    assert any("not measured yet" in text.get_text() for text in empty.axes[0].texts)
    cited = make.__globals__["RASCHKA"]
    drawn = sorted(patch.get_height() for patch in empty.axes[0].patches)
    assert drawn == sorted(cited.values())  # Raschka's cited bars only: none from nothing
    plt.close(empty)
    rows = [{"model": model, "use_cache": use_cache, "tokens_per_s": speed}
            for model, use_cache, speed in (("tiny", False, 50.0), ("tiny", True, 400.0),
                                            ("gpt2-small-untrained", False, 3.0),
                                            ("gpt2-small-untrained", True, 20.0))]
    results.write_text(json.dumps({"provenance": {}, "decode": rows}), encoding="utf-8")
    fig = make()
    bars = {c.get_label(): [p.get_height() for p in c.patches] for c in fig.axes[0].containers}
    plt.close(fig)
    assert bars == {"without cache": [50.0, 3.0, cited["without cache"]],
                    "with cache": [400.0, 20.0, cited["with cache"]]}


def test_decode_bound_bars_are_the_measured_rows_and_equation_10_11(
    monkeypatch, tmp_path
) -> None:
    make = FIGURES["ch10-decode-bound"]
    config = {"vocab_size": 10, "d_model": 4, "num_heads": 2, "num_layers": 1,
              "context_length": 8, "positions": "learned", "mlp": False}
    row = {"model": "gpt2-small-untrained", "config": config, "use_cache": True,
           "prompt_tokens": 2, "new_tokens": 4, "tokens_per_s": 7.0}
    run = {"peaks": {"bandwidth": {"bytes_per_s": 1e6, "measured": True}}, "decode": [row],
           "provenance": {"cpu_model": "Some CPU", "cpu_count": 3}}
    (tmp_path / "cpu.json").write_text(json.dumps(run), encoding="utf-8")
    monkeypatch.setitem(make.__globals__, "RESULTS_DIR", tmp_path)
    fig = make()
    bars = {c.get_label(): [p.get_height() for p in c.patches] for c in fig.axes[0].containers}
    devices = [label.get_text() for label in fig.axes[0].get_xticklabels()]
    plt.close(fig)
    assert devices == ["Some CPU\n3 CPUs\nβ from STREAM"]  # the CPU as its run records it
    # weights read: W_qkv 4·12 + 12, out 4·4 + 4, two LayerNorms 2·8, lm_head 4·10, one row of
    # each embedding 2·4; the cache holds 2 + 4 // 2 = 4 tokens: 2 · 4 · 1 · 2 · 2 values
    weights = 4 * 12 + 12 + 4 * 4 + 4 + 2 * 8 + 4 * 10 + 2 * 4
    bound = 1e6 / (4 * weights + 4 * 2 * 4 * 1 * 2 * 2)
    assert bars["measured (greedy decoding, b = 1)"] == [7.0]
    np.testing.assert_allclose(bars["bound: β / bytes read per token"], [bound])


def test_mla_cache_bars_are_deepseek_v2s_shape(draw) -> None:
    ax = draw("ch10-mla-cache").axes[0]
    kib = [patch.get_height() for patch in ax.patches]
    per_layer = [2 * 128 * 128, 2 * 8 * 128, 512 + 64, 2 * 128]  # MHA, GQA, MLA, MQA numbers
    np.testing.assert_allclose(kib, [60 * n * 2 / 2**10 for n in per_layer])


# Desktop text column of the site at 1280 px (Material's grid minus both sidebars), in CSS px.
DESKTOP_TEXT_PX = 688


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_figure_text_is_text_in_the_page_colours_and_legible(name: str, built_site: Path) -> None:
    svg = (built_site / "figures" / f"{name}.svg").read_text(encoding="utf-8")
    assert "<text" in svg and 'id="DejaVuSans-' not in svg, f"{name}: text drawn as glyph paths"
    placeholders = (hook.INK, hook.PAPER, hook.ON_LIGHT_CELL, hook.ON_DARK_CELL)
    assert not any(p in svg for p in placeholders) and "currentColor" in svg, (
        f"{name}: the placeholder colours must become the page's colours"
    )
    figure_background = re.search(r'<g id="patch_1">\s*<path d="[^"]*"\s*style="([^"]*)"', svg)
    assert figure_background and "fill: none" in figure_background[1], f"{name}: opaque background"
    # Shown at its natural size or the text width, whichever is smaller, its smallest text
    # must still be 9 px: a figure that needs a wider column scrolls sideways on a desktop too.
    width, smallest = hook.text_sizes(svg)
    shown = min(width * 4 / 3, DESKTOP_TEXT_PX)
    assert smallest * shown / width >= hook.MIN_TEXT_PX - 0.05, (
        f"{name}: {smallest} pt text in a {width} pt wide figure is "
        f"{smallest * shown / width:.1f} px in the {DESKTOP_TEXT_PX} px text column"
    )


def test_pages_show_figures_as_inline_svg(built_site: Path) -> None:
    page = (built_site / "chapters" / "04-causal-attention" / "index.html").read_text("utf-8")
    shown = re.findall(r'<span class="attn-figure" data-figure="([a-z0-9-]+)"><svg ([^>]*)>', page)
    assert [name for name, _ in shown] == ["ch04-causal-mask", "ch04-dropout"]
    assert 'src="../../figures/ch04-' not in page, "a figure is still an <img>"
    for name, attributes in shown:
        svg = (built_site / "figures" / f"{name}.svg").read_text(encoding="utf-8")
        width, smallest = hook.text_sizes(svg)
        assert f"min-width: {math.ceil(width * 9 / smallest)}px" in attributes
        assert re.search(r'role="img" aria-label="[^"]{20,}"', attributes), "no alt text"
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids)), "two elements of the page share an id"
    assert "*{stroke-linejoin" not in page, "a figure's style would apply to the whole page"


def test_block_sparsity_panels_colour_each_tile_as_block_sparsity_says(draw) -> None:
    # Chapter 11: in every panel a visible pair is dark, a hidden pair of a kept tile orange and
    # a skipped tile white, as masks.block_sparsity classifies the tiles of B = 8.
    from attention import masks

    fig = draw("ch11-block-sparsity")
    script = FIGURES["ch11-block-sparsity"].__globals__
    t, block = script["T"], script["BLOCK"]
    for panel, (name, rule) in enumerate(script["mask_panels"]().items()):
        image = heatmap(fig, panel)  # (t, t, 3)
        dense = masks.to_dense(rule, t, t).numpy()
        kept = np.kron(masks.block_sparsity(rule, t, t, block).numpy() > 0, np.ones((block, block)))
        np.testing.assert_array_equal(np.all(image == script["VISIBLE"], axis=-1), dense, name)
        np.testing.assert_array_equal(np.all(image == script["WASTED"], axis=-1),
                                      (kept > 0) & ~dense, name)
        np.testing.assert_array_equal(np.all(image == script["SKIPPED"], axis=-1), kept == 0, name)
        assert fig.axes[panel].get_title().startswith(name)


def test_ring_work_heatmaps_are_ring_work(draw) -> None:
    from attention.ring import ring_work

    fig = draw("ch11-ring-work")
    for panel, sharding in enumerate(("contiguous", "zigzag")):
        want = ring_work(1024, 8, is_causal=True, sharding=sharding).numpy() / 1000
        np.testing.assert_allclose(heatmap(fig, panel), want)
        assert fig.axes[panel].get_title().startswith(sharding)


def test_weights_from_lse_heatmaps_are_causal_weights_looking_two_back(draw) -> None:
    fig = draw("ch11-weights-from-lse")
    for panel in range(4):
        weights = heatmap(fig, panel)  # (t, t), rebuilt from flash_attention's L
        assert np.all(np.triu(weights, k=1) == 0)
        np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-5)
        assert np.diagonal(weights, offset=-2).mean() > 0.8  # the look-back task: two places


def test_selected_keys_are_causal_and_keep_their_counts(draw) -> None:
    fig = draw("ch14-selected-keys")
    masks = [heatmap(fig, panel) > 0 for panel in range(4)]  # window, top-k, MoBA, NSA
    t, block = 64, 8
    for mask in masks:
        assert mask.shape == (t, t) and not np.triu(mask, k=1).any()
    assert masks[1].sum(axis=1).tolist() == [min(i + 1, 16) for i in range(t)]
    for i in range(t):  # MoBA and NSA keep the query's own block, up to the query
        own = slice(i - i % block, i + 1)
        assert masks[2][i, own].all() and masks[3][i, own].all() and masks[3][i, :block].any()


def test_the_figure_cache_is_keyed_by_what_the_figures_are_drawn_from(tmp_path: Path) -> None:
    (tmp_path / "src/attention").mkdir(parents=True)
    (tmp_path / hook.RESULTS[0]).mkdir(parents=True)
    (tmp_path / "src/attention/core.py").write_text("x = 1\n")
    (tmp_path / "docs/appendix/results/cpu.json").write_text("{}\n")
    (tmp_path / "docs/chapters").mkdir(parents=True)
    sources = [tmp_path / "src/attention/core.py"]
    key = lambda: hook.inputs_key(tmp_path, sources).hexdigest()  # noqa: E731
    before = key()
    (tmp_path / "docs/chapters/01.md").write_text("prose, edited\n")  # a page is no input
    assert key() == before
    for changed in ("src/attention/core.py", "docs/appendix/results/cpu.json"):
        (tmp_path / changed).write_text("changed\n")
        assert key() != before, changed
        before = key()
    # What the figure modules import is an input; the test tooling and the runner are not.
    drawn = {path.relative_to(hook.REPO).as_posix() for path in hook.drawn_from()}
    assert {"src/attention/functional.py", "tools/book/figures/__init__.py",
            "tools/book/hooks/figures.py", "tools/book/appendix/load.py"} <= drawn
    assert not any(name.startswith(("tools/book/runner/", "tools/book/browser/"))
                   or name == "tools/book/scheduling.py" for name in drawn)
    assert "tools/book/figures/ch09.py" not in drawn  # keys its own entry
    common = hook.inputs_key()  # each module's entry also hashes its own source
    entries = {hook.cache_entry(module, common) for module in hook.figure_modules()}
    assert len(entries) == len(hook.figure_modules())


def test_the_site_style_marks_heatmaps_for_the_dark_theme_and_swaps_their_cell_text() -> None:
    """After ``theme_heatmaps`` the image and the colour bar carry the ids that the dark theme
    inverts (one per artist in a figure), and each number is a placeholder the site swaps."""
    from attention import plot_attention
    from book.figures import ON_DARK_CELL, ON_LIGHT_CELL, theme_heatmaps

    weights = torch.tensor([[0.05, 0.95], [0.7, 0.3]])
    fig, (left, right) = plt.subplots(1, 2)
    try:
        plot_attention(weights, ax=left)
        plot_attention(weights, ax=right, annotate=False)
        theme_heatmaps(fig)
        (first,), (second,) = left.get_images(), right.get_images()
        ids = [first.get_gid(), second.get_gid(), second.colorbar.solids.get_gid()]
        assert ids == ["dark-invert-0", "dark-invert-1", "dark-invert-2"]
        assert not second.colorbar.solids.get_rasterized()  # paths, so that the id reaches the SVG
        colours = {text.get_text(): text.get_color() for text in left.texts}
        assert colours == {"0.05": ON_LIGHT_CELL, "0.95": ON_DARK_CELL, "0.70": ON_DARK_CELL, "0.30": ON_LIGHT_CELL}
    finally:
        plt.close(fig)


@pytest.mark.parametrize("mathtext, plain", [
    (r"$\mathdefault{10^{3}}$", "10³"),
    (r"$\mathdefault{10^{-12}}$", "10⁻¹²"),
    (r"$\mathdefault{2\times10^{-1}}$", "2×10⁻¹"),
    (r"$\mathdefault{-2^{10}}$", "\u22122¹⁰"),
    (r"$\mathdefault{0.5}$", "0.5"),
    ("", ""),
    (r"$\alpha^{2}$", r"$\alpha^{2}$"),  # not a log formatter's label: kept as it is
])
def test_a_log_tick_label_is_written_as_plain_text(mathtext: str, plain: str) -> None:
    from book.figures import plain_label

    assert plain_label(mathtext) == plain


def test_log_axes_label_their_ticks_in_plain_text_with_superscripts() -> None:
    """Decades, the labels between them on an axis spanning less than one, and base 2: each
    label one text in the SVG, none left to mathtext (which writes one tspan per character)."""
    def logs() -> Figure:
        fig, (decades, narrow, base2) = plt.subplots(1, 3, figsize=(9, 3))
        decades.loglog([1, 1e4], [1e-3, 1])
        narrow.set_yscale("log")
        narrow.plot([0, 1], [0.2, 0.9])
        narrow.set_ylim(0.2, 0.9)
        base2.set_xscale("log", base=2)
        base2.plot([16, 1024], [0, 1])
        base2.set_xlim(16, 1024)
        return fig

    svg = hook.render_svg("ch01-a", logs).decode("utf-8")
    texts = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
    assert texts[:14] == ["10⁰", "10²", "10⁴", "10⁻³", "10⁻²", "10⁻¹", "10⁰",  # decades
                          "0.0", "0.5", "1.0", "2×10⁻¹", "3×10⁻¹", "4×10⁻¹", "6×10⁻¹"]
    assert texts[14:18] == ["2⁴", "2⁶", "2⁸", "2¹⁰"]
    assert "<tspan" not in svg


def test_the_lighter_svg_draws_the_same_figure() -> None:
    """The hook's SVG is the figure matplotlib wrote, lighter: the same elements at the same
    places (to 0.005 pt), the dark theme's ids and the tests' kept, matplotlib's own ids gone."""
    import xml.etree.ElementTree as ET

    from book.figures import invert_in_dark

    fig, (left, right) = plt.subplots(1, 2)
    left.plot(np.linspace(0, 1, 50) ** 2, label="$x^{2}$")
    left.set_title(r"$\alpha_{ij} = 10^{-3}$")
    image = right.imshow(np.arange(16.0).reshape(4, 4), cmap="Blues")
    invert_in_dark(image, fig.colorbar(image, ax=right))
    try:
        with matplotlib.rc_context(hook.SVG_STYLE):
            buffer = io.BytesIO()
            fig.savefig(buffer, format="svg", metadata={"Date": None})
    finally:
        plt.close(fig)
    raw = buffer.getvalue().decode("utf-8")
    light = hook.lighten(raw)
    assert len(light) < 0.7 * len(raw)
    trees = [ET.fromstring(svg.encode()) for svg in (raw, light)]  # both well formed
    drawn = [[e.tag for e in tree.iter() if e.tag.rpartition("}")[2] in
              ("path", "use", "image", "text", "tspan")] for tree in trees]
    assert drawn[0] == drawn[1]
    positions = [np.array([float(v) for v in re.findall(r'<(?:use|tspan) [^>]*?\bx="([-\d.]+)"', svg)])
                 for svg in (raw, light)]
    assert len(positions[0]) > 20 and np.abs(positions[0] - positions[1]).max() <= 0.005 + 1e-9
    paths = [re.findall(r' d="([^"]*)"', svg) for svg in (raw, light)]
    assert len(" ".join(paths[1])) < 0.7 * len(" ".join(paths[0]))
    assert not re.search(r"\d\.\d{3}", " ".join(paths[1]))
    ids = re.findall(r'\bid="([^"]+)"', light)
    assert {"figure_1", "patch_1", "axes_1", "dark-invert-0", "dark-invert-1"} <= set(ids)
    assert not any(re.fullmatch(r"(text|line2d|xtick|ytick)_\d+", i) for i in ids)
    assert light.count("'DejaVu Sans'") == 1, "the font is named once, on the <svg>"


def test_math_is_parsed_once_for_every_draw_and_draws_the_same(monkeypatch) -> None:
    """Every renderer shares one parse of a label's math (matplotlib's own cache is a renderer's),
    and the SVG is the same bytes as with matplotlib's cache."""
    from matplotlib.mathtext import MathTextParser

    def draw() -> bytes:
        fig, ax = plt.subplots(layout="constrained")
        ax.plot([1, 2, 3], label=r"$\alpha_{2j}$")
        ax.set(xlabel=r"offset $j - i$", title=r"$M_{\mathrm{SRAM}} = d_h^2$")
        ax.legend()
        return hook.figure_svg(fig)

    parses: list[str] = []
    parse = hook._PARSE_MATH
    monkeypatch.setattr(hook, "_PARSE_MATH", lambda *key: parses.append(key[1]) or parse(*key))
    monkeypatch.setattr(hook, "_MATH_PARSES", {})
    shared = [draw()]
    assert set(parses) == {r"$M_{\mathrm{SRAM}} = d_h^2$", r"$\alpha_{2j}$", r"offset $j - i$"}
    first = len(parses)
    shared.append(draw())  # new renderers: no parse again
    assert len(parses) == first and shared[0] == shared[1]
    monkeypatch.setattr(MathTextParser, "_parse_cached", functools.lru_cache(50)(parse))
    assert draw() == shared[0]


def test_text_is_measured_once_for_every_draw_and_draws_the_same(monkeypatch) -> None:
    """Every renderer of a kind shares one measure of each piece of text (matplotlib's own cache
    is a renderer's), and the SVG is the same bytes as with matplotlib's cache."""
    import matplotlib.text

    def draw() -> bytes:
        fig, ax = plt.subplots(layout="constrained")
        ax.plot([1, 2, 3], label="a line")
        ax.set(xlabel="offset $j - i$", title="a title")
        ax.legend()
        return hook.figure_svg(fig)

    assert matplotlib.text._get_text_metrics_function is hook._shared_text_metrics
    monkeypatch.setattr(hook, "_TEXT_METRICS", {})
    shared = [draw()]
    measured = len(hook._TEXT_METRICS)
    assert measured > 10
    shared.append(draw())  # new renderers: nothing measured again
    assert len(hook._TEXT_METRICS) == measured and shared[0] == shared[1]
    monkeypatch.setattr(matplotlib.text, "_get_text_metrics_function", hook._PER_RENDERER_METRICS)
    assert draw() == shared[0]


def test_a_texts_font_is_found_and_read_once_and_draws_the_same(monkeypatch) -> None:
    """matplotlib.text finds a text's font and reads its height from the font's tables at every
    layout; the hook's lookup finds each font once, and the SVG is the same bytes as without it."""
    import matplotlib.font_manager
    import matplotlib.text

    def draw() -> bytes:
        fig, ax = plt.subplots(layout="constrained")
        ax.plot([1, 2, 3], label="a line")
        ax.set_title("a larger title", fontsize=14)
        ax.set(xlabel="offset $j - i$")
        ax.legend()
        return hook.figure_svg(fig)

    lookup = matplotlib.text.fontManager
    assert isinstance(lookup, hook._FontLookup)
    monkeypatch.setattr(lookup, "_paths", {})
    found: list[object] = []  # what the lookup asked matplotlib's font manager

    class Asking:
        def _find_fonts_by_props(self, prop: object) -> list[object]:
            found.append(prop)
            return matplotlib.font_manager.fontManager._find_fonts_by_props(prop)

    monkeypatch.setattr(lookup, "_manager", Asking())
    shared = [draw()]
    assert len(found) == 2  # the two sizes of text, not one lookup a layout
    first = len(found)
    shared.append(draw())  # new texts, the same fonts: none looked up again
    assert len(found) == first and shared[0] == shared[1]
    paths = next(iter(lookup._paths.values()))
    assert matplotlib.text.get_font(paths) is matplotlib.text.get_font(paths)
    monkeypatch.setattr(matplotlib.text, "fontManager", matplotlib.font_manager.fontManager)
    monkeypatch.setattr(matplotlib.text, "get_font", matplotlib.font_manager.get_font)
    assert draw() == shared[0]


def test_a_failed_build_stops_the_children_drawing_figures(monkeypatch, tmp_path: Path) -> None:
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    monkeypatch.setattr(hook, "_children", [(child, tmp_path / "stderr.txt")])
    hook.on_build_error(RuntimeError("a page failed"))
    assert child.poll() is not None


def test_every_chapter_figure_has_a_caption() -> None:
    # The image's title is the caption under "Figure N.k" (the hook stops the build without it).
    images = [(page.name, m) for page in sorted((REPO / "docs" / "chapters").rglob("*.md"))
              for m in re.finditer(r'!\[[^\]]*\]\((?:\.\./)+figures/([a-z0-9-]+)\.svg( "[^"]{15,}")?\)',
                                   page.read_text(encoding="utf-8"))]
    assert len(images) >= 30
    assert [(page, m[1]) for page, m in images if not m[2]] == []


def test_a_figure_too_wide_for_a_phone_gets_a_stacked_phone_layout() -> None:
    name = "ch04-causal-mask"  # three heatmaps side by side
    wide, phone = hook.render_svgs(name, FIGURES[name])
    assert hook.legible_px(wide) > hook.PHONE_COLUMN_PX, "the desktop drawing fits a phone already"
    assert phone is not None and hook.legible_px(phone) <= hook.PHONE_COLUMN_PX
    fig = hook.phone_layout(FIGURES[name](), 5.4)
    fig.canvas.draw()
    boxes = [ax.get_position() for ax in fig.axes if ax.get_subplotspec() is not None]
    plt.close(fig)
    assert len(boxes) == 3 and len({round(b.x0, 2) for b in boxes}) == 1, "not one column"
    assert boxes[0].y0 > boxes[1].y0 > boxes[2].y0, "panels out of order"
    # A figure that fits a phone as drawn has no second layout.
    assert hook.render_svgs("ch07-measured-roofline", FIGURES["ch07-measured-roofline"])[1] is None


def test_a_phone_legend_keeps_its_title_and_takes_one_column_when_two_do_not_fit() -> None:
    """Chapter 7's roofline names its kernels in a titled legend of two columns, too wide for a
    phone: the phone layout keeps the title, stacks the entries in one column within the
    figure's width, and grows the figure by the legend's extra height."""
    fig = FIGURES["ch07-roofline"]()
    (desktop,) = fig.legends
    labels = [t.get_text() for t in desktop.get_texts()]
    title = desktop.get_title().get_text()
    fig.canvas.draw()
    panel_height = fig.axes[0].get_window_extent().height
    hook.phone_layout(fig, 5.0)
    fig.canvas.draw()
    (phone,) = fig.legends
    try:
        assert phone.get_title().get_text() == title == "intensity $I$ of each kernel, FLOP/byte"
        assert [t.get_text() for t in phone.get_texts()] == labels
        assert len({round(t.get_window_extent().x0) for t in phone.get_texts()}) == 1  # one column
        assert phone.get_window_extent().width <= fig.bbox.width
        assert fig.axes[0].get_window_extent().height >= 0.95 * panel_height  # not squeezed
    finally:
        plt.close(fig)


def test_a_phone_layout_breaks_an_x_label_wider_than_the_figure_at_spaces() -> None:
    fig, axes = plt.subplots(1, 2, figsize=(9, 3), layout="constrained")
    label = "tokens t (b = 4096 / t sequences, h = 12 heads of $d_h = 64$), on one CPU thread"
    axes[0].set_xlabel(label)
    try:
        hook.phone_layout(fig, 4.0)
        text = axes[0].xaxis.label
        assert "\n" in text.get_text() and text.get_text().replace("\n", " ") == label
        assert "$d_h = 64$" in text.get_text()  # never broken inside its math
        assert text.get_window_extent(fig.canvas.get_renderer()).width <= fig.bbox.width
    finally:
        plt.close(fig)


def test_a_phone_layout_keeps_an_axes_title_off_the_figure_edge() -> None:
    """Chapter 10's bound figure centres a long title on an axes that its y-axis labels push
    right: the title breaks early enough to end inside the figure."""
    with matplotlib.rc_context(hook.SVG_STYLE):  # the book's sizes of text
        fig = FIGURES["ch10-decode-bound"]()
        try:
            hook.phone_layout(fig, 4.6)  # the width its phone layout gets
            fig.canvas.draw()
            title = fig.axes[0].title
            assert "\n" in title.get_text()
            box = title.get_window_extent(fig.canvas.get_renderer())
            assert 0 <= box.x0 and box.x1 <= fig.bbox.width
        finally:
            plt.close(fig)


def test_a_phone_layout_keeps_room_for_a_taller_colour_bars_tick_labels() -> None:
    """Stacked, chapter 8's sinusoidal table gets taller colour bars with more and wider tick
    labels (-0.75 where the desktop has -1); they stay inside the figure."""
    with matplotlib.rc_context(hook.SVG_STYLE):
        fig = FIGURES["ch08-sinusoidal-table"]()
        try:
            hook.phone_layout(fig, 5.2)
            fig.canvas.draw()
            renderer = fig.canvas.get_renderer()
            bars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
            assert len(bars) == 2
            assert all(bar.get_tightbbox(renderer).x1 <= fig.bbox.width for bar in bars)
        finally:
            plt.close(fig)


def _legend_figure(loc: str, frameon: bool = False) -> tuple[Figure, plt.Axes]:
    """A line along the bottom, a reference line across the middle and a legend at ``loc``."""
    fig, ax = plt.subplots(figsize=(4, 3), layout="constrained")
    ax.plot([0, 1], [0, 0], label="a line along the bottom")
    ax.axhline(0.5, color="grey", label="a reference")
    ax.set_ylim(-0.1, 1.0)
    ax.legend(loc=loc, frameon=frameon)
    return fig, ax


@pytest.mark.parametrize(("loc", "frameon", "moves"), [
    ("lower right", False, True),  # over the line
    ("upper left", False, False),  # clear of both lines
    ("center left", False, True),  # its text crossed by the reference line
    ("center left", True, False),  # its background hides the reference line, no data
])
def test_a_legend_that_covers_its_axes_data_goes_under_the_axes(loc, frameon, moves) -> None:
    fig, ax = _legend_figure(loc, frameon)
    try:
        with matplotlib.rc_context(hook.SVG_STYLE):
            hook.figure_svg(fig, close=False)
            panel_height = ax.get_window_extent().height
            assert hook.uncover_data(fig) is moves
            hook.figure_svg(fig, close=False)
        if moves:
            renderer = fig.canvas.get_renderer()
            legend, x_axis = ax.get_legend(), ax.xaxis.get_tightbbox(renderer)
            assert legend.get_window_extent(renderer).y1 <= x_axis.y0 + 1  # under the x label
            assert ax.get_window_extent().height >= 0.95 * panel_height  # the figure grew
            assert covering_legends(fig) == []
    finally:
        plt.close(fig)


def test_no_figure_legend_covers_its_data_in_either_layout() -> None:
    """Chapter 1's gradient figure had its legend over the RNN's curve, chapter 10's cache
    figure over a line on a phone: each is now under its axes."""
    for name in ("ch01-gradient-paths", "ch10-cache-memory"):
        with matplotlib.rc_context(hook.SVG_STYLE):
            fig = FIGURES[name]()
            try:
                hook._uncovered_svg(fig)
                assert covering_legends(fig) == [], f"{name}, desktop"
                hook.phone_layout(fig, 5.4)
                hook._uncovered_svg(fig)
                assert covering_legends(fig) == [], f"{name}, phone"
            finally:
                plt.close(fig)


def test_figures_are_numbered_captioned_and_referenced(monkeypatch) -> None:
    from types import SimpleNamespace

    here = SimpleNamespace(url="chapters/07/", src_uri="chapters/07-x.md")
    there = SimpleNamespace(url="chapters/10/", src_uri="chapters/10-y.md")
    monkeypatch.setattr(hook, "_numbers", {"ch07-a": ("7.1", here), "ch07-b": ("7.2", here),
                                           "ch10-c": ("10.1", there)})
    page = SimpleNamespace(file=here)
    html = ('<p><img alt="A grid" src="../figures/ch07-b.svg" title="Tiles &amp; blocks" /></p>'
            "<p>Figure 7.2 and Figures 7.1 and 10.1 show it; <code>Figure 7.1</code> does not.</p>")
    out = hook.link_figure_references(hook.caption_figures(html, page), page, missing := [])
    assert '<figure class="attn-figure-box" id="fig-7-2"><img alt="A grid"' in out
    assert "<figcaption><strong>Figure 7.2</strong> — Tiles &amp; blocks</figcaption>" in out
    links = re.findall(r'<a class="figref" href="([^"]*)">([^<]*)</a>', out)
    assert links == [("#fig-7-2", "7.2"), ("#fig-7-1", "7.1"), ("../10/#fig-10-1", "10.1")]
    assert "<code>Figure 7.1</code>" in out and missing == []
    hook.link_figure_references("Figure 9.9", page, missing)
    assert missing == ["9.9"]
    with pytest.raises(PluginError, match="no caption"):
        hook.caption_figures('<p><img alt="A" src="../figures/ch07-a.svg" /></p>', page)
    # a caption's $d_k$, which arithmatex leaves in the title as \(d_k\), is math for the math hook
    math = hook.caption_figures(
        r'<p><img alt="A" src="../figures/ch07-a.svg" title="Scaled by \(1/\sqrt{d_k}\)" /></p>', page)
    assert r'— Scaled by <span class="arithmatex">\(1/\sqrt{d_k}\)</span></figcaption>' in math


def test_the_dark_theme_changes_only_the_figures_colours() -> None:
    """figures.css's rules for the dark theme set colours and filters, never a size, a display or
    a position: a figure is laid out the same in both themes, so the browser tests measure its
    fit in the light theme only (tests/browser/test_any_screen.py)."""
    css = re.sub(r"/\*.*?\*/", "", (REPO / "docs/stylesheets/figures.css").read_text(encoding="utf-8"),
                 flags=re.DOTALL)
    dark = [body for selector, body in re.findall(r"([^{}]+)\{([^{}]*)\}", css)
            if '[data-md-color-scheme="slate"]' in selector]
    properties = {line.split(":")[0].strip() for body in dark for line in body.split(";") if ":" in line}
    assert dark and properties, "figures.css has no rule for the dark theme: nothing was checked"
    layout = {p for p in properties if p != "filter" and not p.startswith("--attn-")}
    assert layout == set(), f"the dark theme's figure rules set {sorted(layout)}"


# WCAG 2.1's success criterion 1.4.11 (non-text contrast): the lines, markers and edges a reader
# needs must reach 3:1 against the colours next to them, here the page in either theme: white,
# and Material's slate background (--md-default-bg-color, hsl(225, 15%, 14%) at the theme's hue),
# #1e2129 as the browser computes it.
PAGES = {"light": "#ffffff", "dark": "#1e2129"}
MIN_GRAPHICS_CONTRAST = 3.0
# Strokes and fills the tests leave alone, each for its reason:
# - the theme's colours (currentColor, var(--...)) follow the page: the text's colour, and the
#   page's own behind a legend or a label (PAPER);
# - heatmaps and colour bars that the dark theme inverts (id dark-invert-N): their colours are a
#   scale read against the colour bar, and the dark page shows them inverted, not as written;
# - the outline of a shape filled in another colour (a tile's seam, a box's grey edge) and
#   hatching on a filled bar: they lie on that fill, and the fill is what meets the page;
# - a translucent area edged in its own colour (the band of a standard deviation around a mean
#   line, which is checked itself): the faintness is the point, the band only shades the spread;
# - matplotlib's grid colour (grid.color, drawn faint): grid lines are decorative;
# - text (its contrast is 1.4.3's, at 4.5:1, and it is drawn in the page's colours);
# - strokes and fills drawn on a figure's own panels, which stay light in the dark theme: named
#   below.
# A filled shape (a bar, a tile, a box, a marker) may show its bounds by its fill or its edge:
# on each page one of the two must reach 3:1, as WCAG lets either carry the contrast. Raster
# images are not read: a category drawn in one (chapter 11's tiles) is checked by its legend key.
GRID_COLOR = matplotlib.colors.to_hex(matplotlib.rcParams["grid.color"])
# the arrows and the white halves of the diagonal tiles lie on the light tiles
ON_THEIR_OWN_PANELS = {"ch07-tiling": {"#000000", "#ffffff"}}


def relative_luminance(colour: str) -> float:
    """WCAG 2.1's relative luminance of a colour."""
    channels = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
                for c in matplotlib.colors.to_rgb(colour)]
    return 0.2126 * channels[0] + 0.7152 * channels[1] + 0.0722 * channels[2]


def contrast(colour: str, alpha: float, page: str) -> float:
    """WCAG's contrast ratio of ``colour`` drawn at opacity ``alpha`` on ``page``."""
    over = matplotlib.colors.to_rgb(page)
    seen = [alpha * c + (1 - alpha) * p for c, p in zip(matplotlib.colors.to_rgb(colour), over)]
    lighter, darker = sorted((relative_luminance(seen), relative_luminance(page)), reverse=True)
    return (lighter + 0.05) / (darker + 0.05)


def style(element: ET.Element) -> dict[str, str]:
    """The properties of an SVG element's ``style`` attribute."""
    pairs = (part.split(":", 1) for part in element.get("style", "").split(";") if ":" in part)
    return {key.strip(): value.strip() for key, value in pairs}


def page_strokes(svg: str) -> set[tuple[str, float]]:
    """The (colour, opacity) of every stroke of ``svg`` that meets the page, the exemptions
    above aside: lines, markers, outlines of unfilled shapes, hatching on nothing but the page."""
    root = ET.fromstring(svg.encode("utf-8"))
    # a hatch pattern is drawn at the opacity of the shapes that it fills
    pattern_alpha = {m[1]: float(style(e).get("opacity", 1)) for e in root.iter()
                     if (m := re.fullmatch(r"url\(#(.+)\)", style(e).get("fill", "")))}
    # a hatch pattern with a background colour: the hatching of a filled bar or tile
    on_fill = {e.get("id") for e in root.iter() if e.tag.endswith("}pattern")
               and any(r.get("fill", "none") != "none" for r in e if r.tag.endswith("}rect"))}
    found: set[tuple[str, float]] = set()

    def walk(element: ET.Element, pattern: ET.Element | None) -> None:
        tag, css = element.tag.rpartition("}")[2], style(element)
        if element.get("id", "").startswith("dark-invert-"):
            return  # a heatmap or a colour bar that the dark theme inverts
        if tag == "defs" and not any(child.tag.endswith("}pattern") for child in element):
            return  # a marker's shape: judged where a <use> draws it, in the use's colours
        stroke, fill = css.get("stroke", "none"), css.get("fill", "none")
        alpha = float(css.get("stroke-opacity", 1)) * float(css.get("opacity", 1))
        if pattern is not None:  # hatching: on the pattern's background, if it has one
            if stroke.startswith("#") and pattern.get("id") not in on_fill:
                found.add((stroke, alpha * pattern_alpha.get(pattern.get("id", ""), 1)))
        elif stroke.startswith("#") and stroke != GRID_COLOR:
            hatched = re.fullmatch(r"url\(#(.+)\)", fill)
            filled = (fill.startswith("#") and float(css.get("fill-opacity", 1)) > 0
                      or hatched is not None and hatched[1] in on_fill)
            if not filled or (fill == stroke and float(css.get("fill-opacity", 1)) == 1):
                found.add((stroke, alpha))
        for child in element:
            walk(child, element if tag == "pattern" else pattern)

    walk(root, None)
    return found


def test_figure_lines_contrast_with_the_light_and_the_dark_page(built_site: Path) -> None:
    """Every figure's lines, markers, hatching and outlines in a colour of their own reach 3:1 on
    the light page and on the dark one: read from the site build's SVGs, none drawn again."""
    failing = []
    for name in sorted(FIGURES):
        svg = (built_site / "figures" / f"{name}.svg").read_text(encoding="utf-8")
        for colour, alpha in sorted(page_strokes(svg)):
            if colour in ON_THEIR_OWN_PANELS.get(name, ()):
                continue
            ratios = {theme: contrast(colour, alpha, page) for theme, page in PAGES.items()}
            if min(ratios.values()) < MIN_GRAPHICS_CONTRAST:
                shown = colour if alpha == 1 else f"{colour} at opacity {alpha:g}"
                failing.append(f"{name}: {shown}: " + ", ".join(
                    f"{ratio:.2f}:1 on {theme}" for theme, ratio in ratios.items()))
    assert not failing, (f"figure colours under {MIN_GRAPHICS_CONTRAST}:1 against a page "
                         f"({len(failing)}):\n" + "\n".join(failing))


SHAPES = {"path", "use", "rect", "circle", "ellipse", "polygon"}


def page_fills(svg: str) -> set[tuple[str, float, str, float]]:
    """(colour, opacity, edge colour, edge opacity) of every shape of ``svg`` filled in a colour of
    its own, the exemptions above aside: bars, tiles, boxes, markers; a hatched shape's fill is
    its pattern's background."""
    root = ET.fromstring(svg.encode("utf-8"))
    backgrounds = {e.get("id"): r.get("fill") for e in root.iter() if e.tag.endswith("}pattern")
                   for r in e if r.tag.endswith("}rect") and r.get("fill", "none") != "none"}

    def drawn(element: ET.Element) -> Iterator[tuple[str, dict[str, str]]]:
        for child in element:
            tag = child.tag.rpartition("}")[2]
            # <defs>: markers' shapes (judged where a <use> draws them) and hatch patterns
            if tag not in ("defs", "text") and not child.get("id", "").startswith("dark-invert-"):
                yield tag, style(child)
                yield from drawn(child)

    found: set[tuple[str, float, str, float]] = set()
    for tag, css in drawn(root):
        fill = css.get("fill", "none")
        if hatched := re.fullmatch(r"url\(#(.+)\)", fill):
            fill = backgrounds.get(hatched[1], "none")  # no background: only hatching, a stroke
        opacity = float(css.get("opacity", 1))
        alpha = float(css.get("fill-opacity", 1)) * opacity
        edge = (css.get("stroke", "none"), float(css.get("stroke-opacity", 1)) * opacity)
        if tag in SHAPES and fill.startswith("#") and alpha > 0 and (
                alpha == 1 or edge != (fill, alpha)):  # not a translucent band
            found.add((fill, alpha, *edge))
    return found


def edge_contrast(colour: str, alpha: float, page: str) -> float:
    """``contrast`` for an edge, which may be the text's colour (enough on either page) or none."""
    if colour == "currentColor":
        return math.inf
    return contrast(colour, alpha, page) if colour.startswith("#") else 0.0


def test_figure_fills_contrast_with_the_light_and_the_dark_page(built_site: Path) -> None:
    """Every figure's bars, tiles, boxes and markers filled in a colour of their own show their
    bounds on the light page and on the dark one: on each, their fill or their edge reaches 3:1."""
    failing = []
    for name in sorted(FIGURES):
        svg = (built_site / "figures" / f"{name}.svg").read_text(encoding="utf-8")
        for colour, alpha, edge, edge_alpha in sorted(page_fills(svg)):
            if colour in ON_THEIR_OWN_PANELS.get(name, ()):
                continue
            ratios = {theme: contrast(colour, alpha, page) for theme, page in PAGES.items()}
            edges = {theme: edge_contrast(edge, edge_alpha, page) for theme, page in PAGES.items()}
            if any(max(ratios[t], edges[t]) < MIN_GRAPHICS_CONTRAST for t in PAGES):
                shown = colour if alpha == 1 else f"{colour} at opacity {alpha:g}"
                edged = "" if edge == "none" else f"; edge {edge}: {on_pages(edges)}"
                failing.append(f"{name}: {shown}: {on_pages(ratios)}{edged}")
    assert not failing, (f"figure fills under {MIN_GRAPHICS_CONTRAST}:1 against a page, and their "
                         f"edges too ({len(failing)}):\n" + "\n".join(failing))


def on_pages(ratios: dict[str, float]) -> str:
    """Contrast ratios by theme, as a failure message shows them."""
    return ", ".join(f"{ratio:.2f}:1 on {theme}" for theme, ratio in ratios.items())
