"""The delta part of the benchmark (attention.bench.delta): chapter 13's chunked rules beside
chapter 12's chunked form and softmax attention, each checked against its float64 recurrence
before it is timed, with the FLOPs of attention.delta.delta_rule_flops."""

import pytest
import torch
from _small import SMALL, run_small

from attention.bench import validate_results
from attention.bench.delta import VARIANTS, delta_form
from attention.bench.linear import measure_variant
from attention.delta import delta_rule_flops


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    return run_small(tmp_path_factory.mktemp("bench"), "delta", "--passes", "forward", "forward+backward")


def test_every_rule_is_checked_then_timed_with_its_flops(run):
    validate_results(run)
    assert "delta" in run["methods"]
    rows = {(r["variant"], r["pass"]): r for r in run["delta"]}
    assert set(rows) == {(v, p) for v in VARIANTS for p in ("forward", "forward+backward")}
    for (variant, pass_name), row in rows.items():
        assert row["status"] == "ok", row["reason"]
        assert 0 <= row["max_rel_err"] < 2e-3 and row["median_s"] > 0
        if variant in ("decay-chunked", "gated-delta-chunked"):
            forward = 2 * 2 * delta_rule_flops(24, 8, 8, delta=variant.startswith("gated"))
            assert row["flops"] == forward * (1 if pass_name == "forward" else 3)


def test_a_rule_is_checked_against_its_own_recurrence(monkeypatch):
    # A chunked rule that dropped the decay would be fast and wrong: the check must fail it.
    import attention.bench.delta as bench_delta

    real = bench_delta.gated_delta_rule

    def no_decay(q, k, v, g, beta, *, form, chunk_size):
        return real(q, k, v, g if form == "recurrent" else torch.zeros_like(g), beta, form=form,
                    chunk_size=chunk_size)

    monkeypatch.setattr(bench_delta, "gated_delta_rule", no_decay)
    row = measure_variant("gated-delta-chunked", delta_form("gated-delta-chunked", 64), 2, 2, 24, 8,
                          torch.float32, False, SMALL)
    assert row.status == "failed" and row.median_s is None and "relative error" in row.reason
