"""The linear part of the benchmark (attention.bench.linear): linear attention's three forms and
softmax attention, each checked against its own float64 definition before it is timed, with the
FLOPs of chapter 12; the rows validated by the results schema."""

import copy

import pytest
import torch
from _small import SMALL, run_small

from attention.bench import validate_results
from attention.bench.linear import FORM_VARIANTS, SOFTMAX_VARIANTS, measure_linear
from attention.linear import linear_attention_flops


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    return run_small(tmp_path_factory.mktemp("bench"), "linear")


def test_every_variant_is_checked_then_timed_with_its_flops(run):
    validate_results(run)
    assert run["results"] == [] and "linear" in run["methods"]
    rows = {(r["variant"], r["pass"]): r for r in run["linear"]}
    assert set(rows) == {(v, p) for v in (*FORM_VARIANTS, *SOFTMAX_VARIANTS)
                         for p in ("forward", "forward+backward")}
    for (variant, pass_name), row in rows.items():
        assert row["status"] == "ok", row["reason"]
        assert (row["b"], row["h"], row["t"], row["d_h"]) == (2, 2, 24, 8)
        assert 0 <= row["max_rel_err"] < 2e-3 and row["median_s"] > 0
        factor = 1 if pass_name == "forward" else 3
        if variant in FORM_VARIANTS:
            form = variant.removeprefix("linear-")
            assert row["flops"] == factor * 2 * 2 * linear_attention_flops(24, 8, 8, form, is_causal=True, chunk_size=64)
        else:
            assert row["flops"] == 4 * 2 * 2 * 24 * 24 * 8 / 2 * (1 if pass_name == "forward" else 3.5)
        assert row["tflops"] == pytest.approx(row["flops"] / row["median_s"] / 1e12)


def test_a_form_is_checked_against_linear_attention_not_softmax(monkeypatch):
    # A linear form that returned softmax attention would be "correct" against the wrong reference.
    import attention.bench.linear as bench_linear

    monkeypatch.setattr(bench_linear, "linear_attention",
                        lambda q, k, v, **_: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))
    row = measure_linear("linear-chunked", 2, 2, 24, 8, torch.float32, False, SMALL)
    assert row.status == "failed" and row.median_s is None and "relative error" in row.reason


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    def test_the_schema_names_a_linear_row_out_of_place(self, run):
        broken = copy.deepcopy(run)
        broken["linear"][0]["median_s"] = None
        with pytest.raises(ValueError, match=r"linear\[0\]\.median_s.*got None"):
            validate_results(broken)
        broken = copy.deepcopy(run)
        del broken["linear"][1]["chunk_size"]
        with pytest.raises(ValueError, match=r"linear\[1\]: expected key 'chunk_size'.*got keys \["):
            validate_results(broken)
        broken = copy.deepcopy(run)
        broken["linear"][2] |= {"status": "failed", "reason": ""}
        with pytest.raises(ValueError, match=r"linear\[2\]\.reason.*got ''"):
            validate_results(broken)
