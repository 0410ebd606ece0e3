"""The sparse part of the benchmark (attention.bench.sparse): chapter 14's selections beside causal
softmax attention, each checked in float64 over the selection its timed call made before it is
timed; its rows survive a merge and render as the appendix's tables."""

import copy
import json

import pytest
import torch

from attention.bench import validate_results
from attention.bench.cli import main
from attention.bench.merge import merge_results
from attention.bench.sparse import VARIANTS, check_sizes, measure_sparse
from attention.bench.sweep import Settings
from attention.flops import attention_flops
from book.appendix.load import Run
from book.appendix.tables import sparse_table

TINY = ["--device", "cpu", "--parts", "sparse", "--seq-lens", "32", "--d-model", "16", "--heads", "2",
        "--head-dims", "8", "--tokens", "64", "--repeats", "3", "--min-time", "0.001", "--max-time", "0.01",
        "--sparse-top-k", "8", "--sparse-block-size", "4", "--no-progress"]
SMALL = Settings(device=torch.device("cpu"), levels=("kernel",), seq_lens=(32,), d_model=16, heads=2,
                 head_dims=(8,), tokens=64, batch=None, dtypes=("fp32",), passes=("forward",),
                 variants=None, compile=False, memory=False, repeats=3, min_time=0.001, max_time=0.01,
                 seed=0, progress=False)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("bench") / "sparse.json"
    main([*TINY, "--passes", "forward", "--output", str(out)])
    return json.loads(out.read_text())


def test_every_form_is_checked_then_timed(run):
    validate_results(run)
    assert "sparse" in run["methods"]
    rows = {r["variant"]: r for r in run["sparse"]}
    assert list(rows) == list(VARIANTS) and len(run["sparse"]) == len(VARIANTS)
    for row in rows.values():
        assert (row["top_k"], row["block_size"], row["window"], row["b"], row["h"]) == (8, 4, 8, 2, 2)
        assert row["status"] == "ok", row["reason"]
        assert 0 <= row["max_rel_err"] < 1e-5 and row["median_s"] > 0
    assert rows["softmax-sdpa"]["flops"] == attention_flops(2, 2, 32, 8, causal=True)
    assert rows["dsa-dense"]["flops"] == rows["dsa-gathered"]["flops"]  # the same selection
    # 8 of at most 32 keys per query: the selection's attention does less than causal attention's
    assert rows["moba"]["flops"] < rows["softmax-sdpa"]["flops"]


def test_with_the_backward_pass_the_gradients_are_checked_and_the_indexer_skipped():
    row = measure_sparse("dsa-gathered", 2, 2, 32, 8, torch.float32, True, SMALL, top_k=8, block_size=4)
    assert row.status == "ok" and row.pass_name == "forward+backward" and row.max_rel_err < 1e-5
    row = measure_sparse("dsa-indexer", 2, 2, 32, 8, torch.float32, True, SMALL, top_k=8, block_size=4)
    assert row.status == "skipped" and "without gradients" in row.reason


def test_the_rows_survive_a_merge_and_render_as_tables(run):
    a, b = copy.deepcopy(run), copy.deepcopy(run)
    a["sparse"], b["sparse"] = run["sparse"][::2], run["sparse"][1::2]
    b["provenance"]["date_utc"] = "2099-01-01T00:00:00+00:00"
    merged = merge_results([("a.json", a), ("b.json", b)])
    validate_results(merged)
    strip = lambda rows: sorted(json.dumps({k: v for k, v in r.items() if k != "run"}, sort_keys=True)  # noqa: E731
                                for r in rows)
    assert strip(merged["sparse"]) == strip(run["sparse"])
    text = sparse_table(Run("cpu-sparse", merged))
    assert text.count("Median time per call in ms") == 1  # one pass
    assert "| `dsa-gathered` |" in text and "1.00×" in text  # softmax-sdpa against itself


def test_a_form_that_ignores_its_selection_fails_its_check(monkeypatch):
    # MoBA that attended to every earlier key would be plain causal attention, and wrong.
    import attention.bench.sparse as bench_sparse

    monkeypatch.setattr(bench_sparse, "moba_attention", lambda q, k, v, **_: torch.nn.functional.
                        scaled_dot_product_attention(q, k, v, is_causal=True))
    row = measure_sparse("moba", 2, 2, 32, 8, torch.float32, False, SMALL, top_k=8, block_size=4)
    assert row.status == "failed" and row.median_s is None and "relative error" in row.reason


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    def test_sizes_the_forms_cannot_take_are_refused_naming_them(self, tmp_path):
        with pytest.raises(ValueError, match="k_top=8 and B=3"):
            check_sizes((32,), (8,), 8, 3)
        with pytest.raises(ValueError, match="k_top=8 and B=8"):  # NSA needs its first and own block
            check_sizes((32,), (8,), 8, 8)
        with pytest.raises(ValueError, match=r"B=4 to divide every t, got t = \[30\]"):
            check_sizes((30,), (8,), 8, 4)
        with pytest.raises(ValueError, match=r"divisible by 4, got \[6\]"):
            check_sizes((32,), (6,), 8, 4)
        with pytest.raises(SystemExit):
            main([*TINY, "--sparse-block-size", "3", "--output", str(tmp_path / "x.json")])
