"""book.experiments: the stored training runs a page shows are what the code in the repository
produces. Rerunning the whole grid takes minutes. Two of its rows, softmax and elu + 1 on the
induction task with seed 123, are chapter 12's own runs, which the chapter's doc-test trains and
prints on every test run: here the stored rows are compared with what the chapter prints, and
the script is shown to build and train those models exactly as the chapter does."""

import json
import re

import pytest
import torch

from attention import TinyTransformer, induction_data
from attention.linear_model import use_kernel_attention
from book.constants import REPO
from book.experiments import delta_training


@pytest.fixture(scope="module")
def record() -> dict:
    return json.loads(delta_training.RESULTS.read_text())


def test_the_stored_grid_is_the_grid_the_script_runs(record):
    stored = [(r["task"], r["kind"], r["conv"], r["seed"]) for r in record["runs"]]
    assert stored == delta_training.grid()
    git = record["provenance"]["git"]
    assert git["dirty"] is False, "the runs must come from a clean commit"


# Chapter 12 is a folder of section pages; its runs are printed in section 12.4.
CHAPTER_12 = REPO / "docs" / "chapters" / "12-linear-attention" / "what-is-lost.md"
# A row of chapter 12's printed table: loss, accuracy, the accuracy at three ranges of positions,
# the best previous-token score of layer 0 and the best induction score of layer 1.
PRINTED_ROW = re.compile(r"^(softmax|linear, elu\(x\) \+ 1) +([\d.]+) +([\d.]+) \|(?: +[\d.]+){3} \| "
                         r"+([\d.]+) +([\d.]+)$", re.MULTILINE)


def printed_digits(value: str) -> float:
    """Half a unit of the last digit printed, plus the stored row's own rounding (3 decimals)."""
    return 0.5 * 10.0 ** -len(value.split(".")[1]) + 5e-4


def test_the_stored_rows_are_the_runs_chapter_12_prints(record):
    printed = {m[1]: m.groups()[1:] for m in PRINTED_ROW.finditer(CHAPTER_12.read_text("utf-8"))}
    assert set(printed) == {"softmax", "linear, elu(x) + 1"}, printed
    for name, kind in (("softmax", "softmax"), ("linear, elu(x) + 1", "elu+1")):
        stored = next(r for r in record["runs"]
                      if (r["task"], r["kind"], r["conv"], r["seed"]) == ("induction", kind, False, 123))
        values = (stored["loss"], stored["accuracy"], max(stored["previous_token"][0]),
                  max(stored["induction"][1]))
        for value, shown in zip(values, printed[name], strict=True):
            assert abs(value - float(shown)) <= printed_digits(shown), (kind, values, printed[name])


def test_the_script_builds_and_trains_chapter_12s_models(monkeypatch):
    """The model, the batches, the steps, the learning rate and the seed of chapter 12's run."""
    for kind in ("softmax", "elu+1"):
        torch.manual_seed(123)
        model = TinyTransformer(vocab_size=16, d_model=32, num_heads=2, num_layers=2,
                                context_length=24, positions="rope", mlp=False)
        if kind == "elu+1":
            use_kernel_attention(model, kind, seed=0)
        built = delta_training.build("induction", kind, False, 123)
        assert repr(built) == repr(model)
        theirs, ours = built.state_dict(), model.state_dict()
        assert theirs.keys() == ours.keys()
        assert all(torch.equal(theirs[key], ours[key]) for key in ours), kind

    calls = []

    def train_lm(model, data, steps, lr, seed):  # records the run instead of training
        calls.append((data(torch.Generator().manual_seed(5)), steps, lr, seed))
        return [0.0]

    monkeypatch.setattr(delta_training, "train_lm", train_lm)
    row = delta_training.run("induction", "elu+1", False, 123)
    (batch, steps, lr, seed), = calls
    assert (steps, lr, seed) == (250, 5e-3, 123)
    expected = induction_data(32, 24, 16, torch.Generator().manual_seed(5), min_period=4,
                              max_period=12)  # (b, t) each
    assert all(torch.equal(a, b) for a, b in zip(batch, expected, strict=True))
    assert (row["steps"], row["loss"]) == (250, 0.0) and 0 <= row["accuracy"] <= 1
    assert [len(layer) for layer in row["previous_token"]] == [2, 2]  # (L, h)
    assert [len(layer) for layer in row["induction"]] == [2, 2]


def test_check_reruns_a_row_of_each_kind_and_fails_on_a_changed_one(monkeypatch, capsys, record):
    """``--check`` (run by .ci/run) trains again the first induction row of every kind; here
    ``run`` hands back the stored rows, then one with another accuracy."""
    rows = {(r["task"], r["kind"], r["conv"], r["seed"]): r for r in reversed(record["runs"])}
    asked = []

    def stored_run(task, kind, conv, seed):
        asked.append((task, kind, conv, seed))
        return dict(rows[task, kind, conv, seed])

    monkeypatch.setattr(delta_training, "run", stored_run)
    assert delta_training.main(["--check"]) == 0
    assert [kind for _, kind, _, _ in asked] == list(delta_training.KINDS)
    assert {(task, seed) for task, _, _, seed in asked} == {("induction", 123)}
    assert capsys.readouterr().out.count("as stored") == len(delta_training.KINDS)

    def drifted_run(task, kind, conv, seed):
        return stored_run(task, kind, conv, seed) | ({"accuracy": 0.5} if kind == "delta" else {})

    monkeypatch.setattr(delta_training, "run", drifted_run)
    assert delta_training.main(["--check"]) == 1
    out, err = capsys.readouterr()
    stored = rows["induction", "delta", True, 123]["accuracy"]
    assert f"delta (conv True, seed 123): changed accuracy {stored} -> 0.5" in out
    assert "no longer gives: 1 of 7;" in err
