"""The masks part of the benchmark (attention.bench.masks): the causal document mask as dense
SDPA, FlexAttention, packed and padded, each checked against float64 before it is timed."""

import copy
import json

import pytest
import torch

from attention.bench import masks, validate_results
from attention.bench.cli import build_parser, settings_from_args
from book.constants import REPO

FIXTURE = REPO / "tests/fixtures/bench/cpu-tiny.json"
SMALL = ["--device", "cpu", "--d-model", "32", "--heads", "2", "--head-dims", "16", "--repeats", "3",
         "--min-time", "0.01", "--no-compile"]


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return masks.run_masks(settings_from_args(build_parser().parse_args(SMALL)), seq_lens=(48,))


def test_four_variants_checked_and_timed_without_compiling_flex(rows):
    assert [r["variant"] for r in rows] == list(masks.VARIANTS)
    for r in rows:
        assert (r["t"], r["h"], r["d_h"], sum(r["lengths"])) == (48, 2, 16, 48)
        if r["variant"] == "flex-block-mask":
            assert r["status"] == "skipped" and "--no-compile" in r["reason"]
        else:
            assert r["status"] == "ok" and r["max_rel_err"] < masks.TOLERANCE
            assert r["tflops"] == pytest.approx(r["flops"] / r["median_s"] / 1e12)


def test_flops_are_the_useful_work_and_scores_the_matrices_formed(rows):
    lengths = rows[0]["lengths"]
    assert len(lengths) == masks.DOCUMENTS and min(lengths) >= 1
    useful = 4 * 2 * 16 * sum(t * (t + 1) // 2 for t in lengths)
    formed = {r["variant"]: r["scores_formed"] for r in rows}
    assert all(r["flops"] == useful for r in rows)
    assert formed["sdpa-dense-mask"] == 48 * 48
    assert formed["varlen"] == sum(t * t for t in lengths)
    assert formed["sdpa-padded"] == len(lengths) * max(lengths) ** 2
    assert formed["flex-block-mask"] == 128 * 128  # one tile of B = 128 holds the whole row


def test_every_form_counts_its_scores_by_one_convention():
    # whole matrices before causal skipping; FlexAttention's tiles are those the documents touch
    lengths = torch.tensor([100, 200, 12, 300])  # t = 612: tiles of 128 cross document ends
    t = int(lengths.sum())
    starts = [0, 100, 300, 312]
    touched = set()
    for a, n in zip(starts, lengths.tolist()):
        blocks = range(a // 128, (a + n - 1) // 128 + 1)
        touched |= {(i, j) for i in blocks for j in blocks}
    formed = {v: masks.scores_formed(v, lengths) for v in masks.VARIANTS}
    assert formed == {"sdpa-dense-mask": t * t, "flex-block-mask": len(touched) * 128 * 128,
                      "varlen": 100**2 + 200**2 + 12**2 + 300**2, "sdpa-padded": 4 * 300**2}
    assert formed["varlen"] <= formed["flex-block-mask"] <= formed["sdpa-dense-mask"]


def test_a_wrong_result_is_a_failed_row_not_a_time(monkeypatch):
    monkeypatch.setattr(masks, "TOLERANCE", 0.0)
    settings = settings_from_args(build_parser().parse_args(SMALL))
    failed = [r for r in masks.run_masks(settings, seq_lens=(16,)) if r["status"] == "failed"]
    assert len(failed) == 3 and all(r["median_s"] is None and "relative error" in r["reason"]
                                    for r in failed)


def test_rows_follow_the_schema(rows):
    doc = json.loads(FIXTURE.read_text()) | {"masks": rows}
    validate_results(doc)


def test_document_lengths_cut_the_row():
    lengths = masks.document_lengths(100, 8, seed=123)
    assert int(lengths.sum()) == 100 and len(lengths) == 8 and int(lengths.min()) >= 1
    assert lengths.tolist() == masks.document_lengths(100, 8, seed=123).tolist()


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    def test_the_schema_names_the_field_out_of_place(self, rows):
        doc = json.loads(FIXTURE.read_text()) | {"masks": rows}
        broken = copy.deepcopy(doc)
        broken["masks"][0]["lengths"][0] += 1
        with pytest.raises(ValueError, match=r"masks\[0\]\.lengths: expected document lengths summing to t=48.*got \[2, 3, 11, 10, 5, 13, 1, 4\]"):
            validate_results(broken)
        broken = copy.deepcopy(doc)
        broken["masks"][2]["median_s"] = None
        with pytest.raises(ValueError, match=r"masks\[2\]\.median_s: expected a positive number.*got None"):
            validate_results(broken)
        broken = copy.deepcopy(doc)
        broken["masks"][1]["reason"] = ""
        with pytest.raises(ValueError, match=r"masks\[1\]\.reason: expected why a skipped row.*got ''"):
            validate_results(broken)

    def test_scores_formed_knows_only_the_variants(self):
        with pytest.raises(ValueError, match=r"variant must be one of.*got 'flex'"):
            masks.scores_formed("flex", torch.tensor([100, 200]))
