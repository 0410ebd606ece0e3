"""book.experiments: the stored training runs a page shows are what the code in the repository
produces. Rerunning the whole grid takes minutes, so one row is rerun here and compared."""

import json

import pytest
import torch

from book.experiments import delta_training


@pytest.fixture(scope="module")
def record() -> dict:
    return json.loads(delta_training.RESULTS.read_text())


def test_the_stored_grid_is_the_grid_the_script_runs(record):
    stored = [(r["task"], r["kind"], r["conv"], r["seed"]) for r in record["runs"]]
    assert stored == delta_training.grid()
    git = record["provenance"]["git"]
    assert git["dirty"] is False, "the runs must come from a clean commit"


def test_one_stored_row_is_reproduced(record):
    """elu + 1 on the induction task, seed 123: the cheapest row (linear attention, 250 steps)."""
    stored = next(r for r in record["runs"]
                  if (r["task"], r["kind"], r["seed"]) == ("induction", "elu+1", 123))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the script runs: one thread, the same order of sums
    try:
        again = delta_training.run("induction", "elu+1", False, 123)
    finally:
        torch.set_num_threads(threads)
    assert again["accuracy"] == pytest.approx(stored["accuracy"], abs=0.005)
    assert again["loss"] == pytest.approx(stored["loss"], rel=0.05)
    for key in ("previous_token", "induction"):  # (L, h) each
        flat = [x for layer in again[key] for x in layer]
        assert flat == pytest.approx([x for layer in stored[key] for x in layer], abs=0.02)
