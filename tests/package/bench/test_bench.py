"""The benchmark harness: its FLOP formulas, its timer, its memory probe, its correctness gate,
and a tiny real sweep whose JSON must follow the schema the appendix page is generated from."""

import argparse
import copy
import dataclasses
import functools
import json
import math
from collections.abc import Callable

import pytest
import torch
from torch import Tensor
from torch.utils import benchmark

from attention import flash
from attention.bench import goals as goals_module
from attention.bench import timing, validate_results, variants
from attention.bench.cli import build_parser, main
from attention.bench.goals import SPEED_TOLERANCE, speed_goals
from attention.bench.memprobe import measure_in_subprocess
from attention.bench.parts import PARTS
from attention.bench.rows import DecodeRow, DistributedRow, LinearRow, MaskRow, Row
from attention.bench.store import read_results, write_results
from attention.bench.sweep import Settings, measure
from attention.bench.timing import profiled_call, time_cpu
from attention.bench.variants import Built, Problem, Variant, make_inputs
from attention.functional import scaled_dot_product_attention as explicit_attention
from book.appendix.load import RESULTS

CPU = torch.device("cpu")


@pytest.mark.parametrize(
    "seconds, estimate, blocks",
    [
        (1e-6, 1e-6, None),  # fast: blocks of many calls, as many blocks as 0.3 s holds
        (2.0, 2.0, 3),  # slower than max_time / 3: still 3 blocks, of one call each
        (3.0, 1.0, 3),  # slower than estimated: too few blocks at first, then measured again
    ],
)
def test_timer_reports_seconds_per_call_on_a_known_clock(monkeypatch, seconds, estimate, blocks):
    # Each call moves a fake clock on by exactly `seconds`, so the time per call is known and no
    # load on the machine can change it: a median per block instead of per call, or in
    # milliseconds, cannot pass.
    clock = [0.0]

    def call() -> None:
        clock[0] += seconds

    monkeypatch.setattr(
        timing.benchmark, "Timer", functools.partial(benchmark.Timer, timer=lambda: clock[0])
    )
    measured = time_cpu(call, estimate=estimate, repeats=7, min_time=0.3, max_time=4.0)
    assert measured.median_s == pytest.approx(seconds, rel=1e-9)
    assert measured.iqr_s == pytest.approx(0.0, abs=1e-9 * seconds)
    if blocks is None:  # blocks of many calls, for at least min_time = 0.3 s in all
        assert measured.number > 1 and measured.repeats * measured.number * seconds >= 0.3
    else:
        assert measured.repeats == blocks and measured.number == 1


def test_median_and_iqr_of_known_times():
    # Quartiles of 1 ... 9 (inclusive method): Q1 = 3, median 5, Q3 = 7; one outlier moves neither.
    assert timing._quartiles([9.0, 1.0, 5.0, 3.0, 7.0, 2.0, 8.0, 4.0, 6.0]) == (5.0, 4.0)
    assert timing._quartiles([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 900.0]) == (5.0, 4.0)


def _settings(**changes) -> Settings:
    base = Settings(CPU, ("kernel",), (32,), 32, 2, (16,), 64, None, ("fp32",), ("forward",), None,
                    compile=False, memory=False, repeats=3, min_time=0.01, max_time=1.0, seed=0,
                    progress=False)
    return Settings(**{**base.__dict__, **changes})


def test_reference_is_exact_attention_block_by_block(monkeypatch):
    monkeypatch.setattr(variants, "REFERENCE_ROWS", 16)  # 50 queries: blocks of 16, 16, 16, 2
    q, k, v = (torch.randn(2, 3, 50, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    got = variants.exact_causal_attention(q, k, v)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(got, want)
    grads = torch.autograd.grad(got.sum(), (q, k, v)), torch.autograd.grad(want.sum(), (q, k, v))
    for g, w in zip(*grads):
        torch.testing.assert_close(g, w)


def _row_of(build: Callable[[Tensor, Tensor, Tensor], Built]) -> Row:
    """The row that `measure` writes for a causal kernel variant built by ``build(q, k, v)``."""
    problem = Problem("kernel", 1, 32, 2, 16, torch.float32, CPU, backward=False)
    inputs = make_inputs(problem)
    variant = Variant("probe", "kernel", "a test's variant", lambda p, i: build(*inputs.tensors))
    return measure(variant, problem, inputs, {}, _settings(), {"tflops": None, "source": ""})


def test_a_wrong_variant_fails_the_check_and_is_not_timed():
    """A variant that forgets the causal mask."""
    row = _row_of(lambda q, k, v: Built(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v)))
    assert row.status == "failed" and row.reason.startswith("relative error")
    assert row.median_s is None


def test_a_variant_whose_output_is_nan_fails_its_check():
    """A NaN error passed `error > tolerance` (False for NaN): the row was marked ok and timed."""
    row = _row_of(lambda q, k, v: Built(lambda: torch.full_like(q, float("nan"))))
    assert row.status == "failed" and row.reason.startswith("relative error nan")
    assert row.median_s is None


def test_a_row_records_the_kernel_config_its_variant_reports():
    """What our Triton variants report (the autotuner's choice per kernel) lands in the timed row."""
    configs = {"forward": [64, 64, 4, 3]}
    row = _row_of(lambda q, k, v: Built(lambda: explicit_attention(q, k, v, is_causal=True),
                                        config=lambda: configs))
    assert row.status == "ok" and row.kernel_config == configs
    assert Row.from_json(row.to_json()).kernel_config == configs


def test_a_flash_attention_row_records_its_tiles():
    """The appendix reads the tiles of flash_attention's rows (their bytes per tile) from the row."""
    problem = Problem("kernel", 1, 2048, 2, 16, torch.float32, CPU, backward=False)
    variant = next(v for v in variants.VARIANTS if v.name == "flash_attention")
    row = measure(variant, problem, make_inputs(problem), {}, _settings(), {"tflops": None, "source": ""})
    assert row.status == "ok" and row.kernel_config == {"tiles": [128, 512]}


def test_a_copy_of_the_tree_is_clean_only_when_checked(monkeypatch):
    from attention.bench.provenance import git_commit

    monkeypatch.setenv("ATTENTION_COMMIT", "f9d0804")
    monkeypatch.delenv("ATTENTION_TREE_CHECKED", raising=False)
    assert git_commit()["dirty"] is None  # named, not checked: the page prints "unverified tree"
    monkeypatch.setenv("ATTENTION_TREE_CHECKED", "tools/gpu/tree.txt")
    record = git_commit()
    assert record["commit"] == "f9d0804" and record["dirty"] is False
    assert "python -m book.tree check tools/gpu/tree.txt" in record["source"]


def test_each_choice_of_our_triton_kernel_is_a_variant_of_its_own():
    names = {v.name for v in variants.VARIANTS if v.name.startswith("triton")}
    assert names == {"triton", "triton[atomic-dq]", "triton[longest-first]",
                     "triton[descriptors]", "triton[warp-specialize]"}
    # timed only when named: a preset's default sweep keeps its size
    assert [v.name for v in variants.variants_for("kernel") if v.name.startswith("triton")] == ["triton"]
    assert [v.name for v in variants.variants_for("kernel", ["triton[atomic-dq]"])] == ["triton[atomic-dq]"]


B, H, T, D_H = 1, 4, 512, 32
SCORES = B * H * T * T * 4  # bytes of one float32 (b, h, t, t) matrix: 4 MiB


def test_allocator_count_sees_the_score_matrix_only_where_it_exists():
    q, k, v = (torch.randn(B, H, T, D_H) for _ in range(3))
    explicit = profiled_call(lambda: explicit_attention(q, k, v, is_causal=True), memory=True)[3]
    tiled = profiled_call(lambda: flash.flash_attention(q, k, v, is_causal=True), memory=True)[3]
    assert explicit >= 2 * SCORES  # scores, masked scores, exponentials, ... coexist
    assert tiled < SCORES / 4  # (64, 64) tiles and the output only


def test_resident_memory_in_a_fresh_process_agrees():
    problem = Problem("kernel", B, T, H, D_H, torch.float32, CPU, backward=False)
    peaks = measure_in_subprocess(problem, "explicit", seed=0)
    assert peaks["rss_peak_bytes"] >= 2 * SCORES
    assert abs(peaks["rss_peak_bytes"] - peaks["allocator_peak_bytes"]) < SCORES / 4


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> dict:
    """A real sweep, as small as it gets: one t, both levels, both passes, no compile."""
    out = tmp_path_factory.mktemp("bench") / "tiny.json"
    main([
        "--device", "cpu", "--seq-lens", "32", "--speed-goal-t", "32", "--d-model", "32", "--heads", "2",
        "--head-dims", "16", "--tokens", "64", "--repeats", "3", "--min-time", "0.01",
        "--variants", "wrapper", "mha", "fused-sdpa", "torch-mha", "compiled-mha", "explicit",
        "sdpa[flash]", "sdpa[efficient]", "flash_attention", "triton",
        "--no-compile", "--no-memory-goal", "--no-progress", "--output", str(out),
        "--matmul-sizes", "16", "32", "--stream-bytes", "65536", "--flash-goal-shape", "1", "2", "32", "16",
        "--fused-goal-shape", "2", "2", "32", "16", "--decode-models", "tiny", "--decode-new-tokens", "3",
        "--decode-repeats", "1",
    ])
    return json.loads(out.read_text())


def expected_flops(row: dict) -> float:
    """FLOPs of one call, counted here from the shapes: each (m, k) @ (k, n) product is 2 m k n.

    Causal attention computes half of Q Kᵀ and half of A V: 2 * (2 t² d_h) / 2 per head. A layer
    adds its projections of x (b, t, d) to width d: Q, K, V and the output (the wrapper has no
    output projection). Backward, as the benchmark counts it: 2.5x the attention's forward (the
    FlashAttention count) and 2x each projection's (gradients of its input and of its weight).
    """
    b, t, h, d_h, d = row["b"], row["t"], row["h"], row["d_h"], row["d"]
    attention = 2 * b * h * t * t * d_h
    projections = 0
    if row["level"] == "layer":
        projections = (3 if row["variant"] == "wrapper" else 4) * 2 * b * t * d * d
    if row["pass"] == "forward":
        return attention + projections
    return 3.5 * attention + 3 * projections


# On a CPU, what the tiny sweep below can run: all but the GPU-only kernels and compiled code
KERNELS_ON_CPU = {"explicit", "sdpa[flash]", "flash_attention"}
RUNS_ON_CPU = {"wrapper", "mha", "fused-sdpa", "torch-mha"} | KERNELS_ON_CPU


def test_tiny_sweep_writes_valid_json_with_provenance(tiny_run):
    validate_results(tiny_run)
    prov = tiny_run["provenance"]
    assert "--seq-lens 32" in prov["command"] and prov["torch"] == torch.__version__
    assert prov["torch_threads"] == torch.get_num_threads() and len(prov["load_average_end"]) == 3
    rows = {(r["variant"], r["pass"]): r for r in tiny_run["results"]}
    assert len(rows) == 10 * 2  # every requested variant, forward and forward+backward
    ok = {key: row for key, row in rows.items() if row["status"] == "ok"}
    assert set(ok) == {(v, p) for v in RUNS_ON_CPU for p in ("forward", "forward+backward")}
    for (variant, pass_name), row in ok.items():
        assert (row["b"], row["t"], row["h"], row["d_h"], row["d"]) == (2, 32, 2, 16, 32)
        assert row["level"] == ("kernel" if variant in KERNELS_ON_CPU else "layer")
        assert 0 <= row["max_rel_err"] < 2e-3
        assert row["flops"] == expected_flops(row), (variant, pass_name)
        assert row["tflops"] == pytest.approx(row["flops"] / row["median_s"] / 1e12)
        assert 0 < row["median_s"] < 1 and row["iqr_s"] >= 0
        assert isinstance(row["peak_bytes"], int) and row["peak_bytes"] > 0


def test_tiny_sweep_records_what_ran_and_why_not(tiny_run):
    rows = {(r["variant"], r["pass"]): r for r in tiny_run["results"]}
    assert rows["fused-sdpa", "forward"]["backend"].startswith("sdpa: ")  # read from the profiler
    assert rows["mha", "forward"]["backend"] == "explicit: matmul, mask, softmax"
    assert rows["compiled-mha", "forward"]["status"] == "skipped"
    assert rows["triton", "forward"]["status"] == "unsupported"
    if not torch.cuda.is_available():
        assert "no CUDA" in rows["triton", "forward"]["reason"]
        assert rows["sdpa[efficient]", "forward"]["status"] == "unsupported"
    goal = tiny_run["goals"]["speed"][0]
    assert goal["ratio_fused_sdpa_to_torch_mha"] == pytest.approx(goal["fused_sdpa_s"] / goal["torch_mha_s"])


def test_bad_options_are_rejected(tmp_path):
    with pytest.raises(SystemExit):
        main(["--variants", "no-such-variant", "--output", str(tmp_path / "x.json")])
    with pytest.raises(SystemExit):
        main(["--d-model", "30", "--heads", "4", "--output", str(tmp_path / "x.json")])


@pytest.mark.parametrize("option, value", [
    ("--heads", "0"), ("--head-dims", "0"), ("--d-model", "0"), ("--batch", "-2"), ("--tokens", "-5"),
    ("--threads", "-1"), ("--repeats", "0"), ("--repeats", "2"), ("--max-time", "0"), ("--max-time", "nan"),
    ("--min-time", "-1"), ("--min-time", "inf"), ("--warmup", "-1"), ("--time-budget", "-5"),
    ("--decode-prompt", "0"), ("--decode-new-tokens", "-1"), ("--sparse-top-k", "0"), ("--peak-tflops", "-1"),
    ("--memory-goal-shape", "0"), ("--stream-bytes", "7"),  # a STREAM array holds one float64 at least
])
def test_numbers_out_of_range_are_usage_errors(option, value, tmp_path, capsys):
    # they crashed deep in the run (a ZeroDivisionError for --heads 0), were replaced by the
    # default (--repeats 0 recorded as 7), or were recorded as given (--tokens -5)
    values = [value] * 4 if option == "--memory-goal-shape" else [value]
    with pytest.raises(SystemExit):
        main([option, *values, "--output", str(tmp_path / "x.json")])
    assert f"argument {option}: expected" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "inf", "-1", "x"])
def test_a_time_that_must_be_positive_says_so(value, tmp_path, capsys):
    # inf and -1 were refused as "expected float >= 0.0", which 0 is not either
    with pytest.raises(SystemExit):
        main(["--max-time", value, "--output", str(tmp_path / "x.json")])
    assert f"argument --max-time: expected a finite float > 0, got '{value}'" in capsys.readouterr().err


def test_variants_of_no_level_swept_are_a_usage_error(tmp_path, capsys):
    # the sweep ran no row and wrote a file marked complete (a list for both levels is fine)
    with pytest.raises(SystemExit):
        main(["--device", "cpu", "--parts", "sweep", "--levels", "kernel", "--variants", "mha", "torch-mha",
              "--seq-lens", "8", "--d-model", "16", "--heads", "2", "--head-dims", "8", "--tokens", "8",
              "--repeats", "3", "--min-time", "0.001", "--max-time", "0.01", "--no-progress",
              "--output", str(tmp_path / "x.json")])
    assert ("--variants must name a variant of the --levels swept (kernel), got mha (layer), torch-mha (layer)"
            in capsys.readouterr().err)


# Options that contradict each other, and what the run did before they were refused.
CONTRADICTIONS = {
    # the timer ran each measurement for --max-time: the larger --min-time was dropped unsaid
    "min time above max time": (["--min-time", "0.2", "--max-time", "0.1"],
                                "--min-time must not exceed --max-time, got 0.2 and 0.1"),
    # b was --batch and --tokens was dropped unsaid, though the file recorded it
    "batch and tokens": (["--batch", "2", "--tokens", "48"],
                         "--batch fixes b instead of --tokens: give one of them, got --batch 2 and --tokens 48"),
    # the run went on with the device's peak (unknown on a CPU), the file recording the source
    "peak source without a peak": (["--peak-source", "a datasheet"],
                                   "--peak-source says where --peak-tflops comes from: give both, got "
                                   "--peak-source 'a datasheet' alone"),
    # the CPU timer ran without a graph, and the file recorded cuda_graphs: true (merge then
    # refused it beside a CPU run without the option, whose rows mean the same)
    "cuda graphs on a cpu": (["--cuda-graphs"],
                             "--cuda-graphs replays each timed call from a CUDA graph: expected --device cuda, got cpu"),
}


@pytest.mark.parametrize("options, message", CONTRADICTIONS.values(), ids=CONTRADICTIONS)
def test_options_that_contradict_each_other_are_a_usage_error(tmp_path, capsys, options, message):
    with pytest.raises(SystemExit):
        main(["--device", "cpu", "--parts", "peaks", "--matmul-sizes", "8", "--stream-bytes", "64",
              "--min-time", "0.001", "--max-time", "0.01", *options, "--output", str(tmp_path / "x.json")])
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("option, value", [("--seq-lens", 16), ("--head-dims", 16), ("--dtypes", "fp32"),
                                           ("--passes", "forward"), ("--levels", "kernel")])
def test_a_value_twice_is_a_usage_error(option, value, tmp_path, capsys):
    # its rows were measured twice, and the file could not be merged, even with itself
    quick = ["--device", "cpu", "--parts", "peaks", "--matmul-sizes", "8", "--stream-bytes", "64",
             "--min-time", "0.001", "--max-time", "0.01"]  # seconds, were the value accepted
    with pytest.raises(SystemExit):
        main([*quick, option, str(value), str(value), "--output", str(tmp_path / "x.json")])
    assert f"{option} must not repeat a value, got {[value, value]}" in capsys.readouterr().err


def test_tiny_run_measures_peaks_and_uses_them(tiny_run):
    peaks = tiny_run["peaks"]
    sizes = peaks["float32"]["matmul"]["sizes"]
    assert [r["n"] for r in sizes] == [16, 32]
    for r in sizes:
        assert r["gflops"] == pytest.approx(2 * r["n"] ** 3 / r["median_s"] / 1e9)
    assert peaks["float32"]["tflops"] == pytest.approx(max(r["gflops"] for r in sizes) / 1e3)
    stream = peaks["bandwidth"]["stream"]
    assert stream["array_bytes"] == 65536 and stream["triad"]["bytes"] == 3 * 65536
    assert peaks["bandwidth"]["bytes_per_s"] == max(stream["copy"]["bytes_per_s"], stream["triad"]["bytes_per_s"])
    assert "torch.mm" in peaks["float32"]["source"] and "STREAM" in peaks["bandwidth"]["source"]
    for row in tiny_run["results"]:  # every % of peak is of the measured peak
        if row["status"] == "ok":
            assert row["pct_of_peak"] == pytest.approx(100 * row["tflops"] / peaks["float32"]["tflops"])


def test_tiny_run_measures_the_issue_14_goals(tiny_run):
    goals = tiny_run["goals"]["ratios"]
    assert [(g["variant"], g["baseline"], g["pass"]) for g in goals] == [
        ("flash_attention", "sdpa", "forward"), ("fused-explicit", "mha", "forward"),
        ("flash_attention", "sdpa", "forward+backward"), ("fused-explicit", "mha", "forward+backward"),
    ]
    for g in goals:
        assert g["ratio"] == pytest.approx(g["variant_s"] / g["baseline_s"])
        assert g["status"] == ("met" if g["ratio"] <= g["target"] else "missed")
    assert (goals[0]["b"], goals[0]["h"], goals[0]["t"], goals[0]["d_h"]) == (1, 2, 32, 16)
    assert goals[0]["baseline_backend"].startswith("sdpa: ")  # what torch picked, from the profiler
    assert [r["model"] for r in tiny_run["decode"]] == ["tiny", "tiny"]


def test_parts_run_alone(tmp_path):
    out = tmp_path / "decode.json"
    doc = main(["--device", "cpu", "--parts", "decode", "--decode-models", "tiny", "--decode-new-tokens", "2",
                "--decode-repeats", "1", "--no-progress", "--output", str(out)])
    assert doc["results"] == [] and "ratios" not in doc["goals"] and "bandwidth" not in doc["peaks"]
    assert len(doc["decode"]) == 2
    validate_results(json.loads(out.read_text()))


QUICK = [
    "--preset", "quick", "--device", "cpu", "--seq-lens", "128", "--d-model", "32", "--heads", "2",
    "--head-dims", "16", "--tokens", "128", "--variants", "explicit", "mha", "flex", "--no-compile",
    "--no-memory-goal", "--speed-goal-t", "128", "--flash-goal-shape", "1", "2", "64", "16",
    "--fused-goal-shape", "1", "2", "64", "16", "--decode-models", "tiny", "--decode-new-tokens", "2",
    "--matmul-sizes", "32", "--stream-bytes", "65536", "--no-progress", "--min-time", "0.01",
    "--max-time", "0.05",
]


def test_quick_preset_runs_its_stages_in_order_on_a_cpu(tmp_path):
    out = tmp_path / "quick.json"
    doc = main([*QUICK, "--parts", "sweep", "--levels", "kernel", "--no-memory", "--output", str(out)])
    assert json.loads(out.read_text()) == doc and doc["complete"] is True and "stopped" not in doc
    s = doc["settings"]
    # the preset's values, except where the command line says otherwise (--max-time here)
    assert s["preset"] == "quick" and (s["repeats"], s["max_time"], s["warmup_s"]) == (10, 0.05, 0.05)
    assert [(st["dtypes"], st["compiled"]) for st in s["stages"]] == [
        (["bf16"], False), (["bf16"], True), (["fp16"], False), (["fp32"], False)]
    # bfloat16 first, then the compiled variant (skipped under --no-compile), then float16, float32
    order = [(r["dtype"], r["variant"] == "flex") for r in doc["results"]]
    assert order == sorted(order, key=lambda o: (["bfloat16", "float16", "float32"].index(o[0]), not o[1] and o[0] != "bfloat16"))
    assert [o for o in order if o[1]] == [("bfloat16", True)] * 2  # flex: forward, forward+backward
    assert {r["dtype"] for r in doc["results"]} == {"bfloat16", "float16", "float32"}


def test_the_quick_presets_compiled_stage_takes_the_shortest_and_longest_t_in_any_order():
    # it took the first and the last given: --seq-lens 1024 128 512 compiled at 512 and 1024
    from attention.bench.presets import PRESETS

    stages = PRESETS["quick"].stages((1024, 128, 512), ("bf16", "fp32"))
    assert [stage.seq_lens for stage in stages if stage.compiled] == [(128, 1024)]


def test_the_short_parts_are_measured_before_the_sweep(tmp_path, monkeypatch):
    from attention.bench import parts

    calls = []
    peaks = {"float32": {"tflops": 0.1, "source": "measured", "measured": True},
             "bandwidth": {"bytes_per_s": 1e10, "source": "measured", "measured": True}}
    monkeypatch.setattr(parts, "measure_peaks", lambda *a, **k: calls.append("peaks") or peaks)
    monkeypatch.setattr(parts, "ratio_goals", lambda *a, **k: calls.append("goals") or [])
    monkeypatch.setattr(parts, "run_decode", lambda *a, **k: calls.append("decode") or [])
    monkeypatch.setattr(parts, "run_sweep", lambda *a, doc, **k: calls.append("sweep") or doc)
    monkeypatch.setattr(parts, "run_masks", lambda *a, **k: calls.append("masks") or [])
    main([*QUICK, "--output", str(tmp_path / "q.json")])
    assert calls == ["peaks", "goals", "decode", "sweep"]  # the sweep's late stages are what a budget cuts
    calls.clear()
    main([*QUICK[2:], "--output", str(tmp_path / "d.json")])  # no preset: the same order, and masks
    assert calls == ["peaks", "goals", "decode", "sweep", "masks"]


def test_the_file_keeps_every_finished_row_when_a_run_is_cut_off(tmp_path, monkeypatch):
    from attention.bench import sweep

    calls = []

    def fake_measure(variant, problem, *args):
        if len(calls) == 3:
            raise KeyboardInterrupt  # what a time limit's signal does to the run
        calls.append(variant.name)
        return Row.from_json({
            "level": problem.level, "variant": variant.name, "summary": "",
            "pass": "forward+backward" if problem.backward else "forward",
            "b": problem.b, "t": problem.t, "h": problem.h, "d_h": problem.d_h, "d": problem.d,
            "dtype": str(problem.dtype).removeprefix("torch."), "status": "unsupported", "reason": "not timed in this test", "ops": [],
            **dict.fromkeys(("backend", "max_rel_err", "median_s", "iqr_s", "repeats", "number", "flops",
                             "tflops", "peak_tflops", "pct_of_peak", "peak_bytes")),
        })

    monkeypatch.setattr(sweep, "measure", fake_measure)
    out = tmp_path / "cut.json"
    with pytest.raises(KeyboardInterrupt):
        main([*QUICK, "--parts", "sweep", "--output", str(out)])
    written = json.loads(out.read_text())
    validate_results(written)
    assert [r["variant"] for r in written["results"]] == calls and written["complete"] is False
    assert [p.name for p in tmp_path.iterdir()] == ["cut.json"]  # no half-written file beside it


def test_a_spent_time_budget_starts_no_more_rows(tmp_path):
    doc = main([*QUICK, "--parts", "sweep", "--time-budget", "0", "--output", str(tmp_path / "b.json")])
    assert doc["results"] == [] and doc["complete"] is False
    assert doc["stopped"].startswith("time budget spent after 0 rows")


def test_a_spent_time_budget_starts_no_part_after_the_sweep(tmp_path):
    # the linear part ran all its rows after the budget was spent, where --preset's help says no
    # row is started after it
    doc = main([*QUICK, "--parts", "sweep", "linear", "--time-budget", "0", "--output", str(tmp_path / "b.json")])
    assert "linear" not in doc and doc["complete"] is False
    assert doc["stopped"].endswith("; the parts after it were not run: linear")


def test_gpu_peaks_measure_a_bf16_matmul_and_a_copy():
    from attention.bench.peaks import measure_gpu_peaks

    peaks = measure_gpu_peaks(CPU, sizes=(32, 64), array_bytes=65536, repeats=3, max_time=0.5)
    mm, bw = peaks["bfloat16_measured"], peaks["bandwidth_measured"]
    assert mm["matmul"]["dtype"] == "bfloat16" and [r["n"] for r in mm["matmul"]["sizes"]] == [32, 64]
    assert mm["tflops"] == pytest.approx(max(2 * r["n"] ** 3 / r["median_s"] for r in mm["matmul"]["sizes"]) / 1e12)
    assert bw["stream"]["copy"]["bytes"] == 2 * 65536 and bw["bytes_per_s"] > 0
    assert "bfloat16 torch.mm" in mm["source"] and "STREAM copy and triad" in bw["source"]


def test_the_last_line_counts_the_rows_of_every_part_that_ran():
    from attention.bench.cli import rows_summary

    ok, skipped = {"status": "ok"}, {"status": "skipped"}
    doc = {"results": [], "masks": [ok, ok, skipped], "linear": [ok], "complete": True}
    assert rows_summary(doc) == "2 of 3 masks rows ok, 1 of 1 linear rows ok"
    doc = {"results": [ok, skipped], "complete": False, "stopped": "time budget spent after 2 rows"}
    assert rows_summary(doc) == "1 of 2 sweep rows ok (time budget spent after 2 rows)"
    assert rows_summary({"results": [], "complete": True}) == "no timed rows"


# The committed results files (RESULTS): real rows of every kind, to change one field of.
FILE_OF = {"results": "cpu.json", "decode": "cpu.json", "masks": "cpu-masks.json", "linear": "cpu-linear.json",
           "distributed": "cpu-distributed.json"}
DROP = object()  # in a change to a row: leave the key out


@functools.cache
def _committed_text(name: str) -> str:
    return (RESULTS / name).read_text()


def _committed(name: str) -> dict:
    return json.loads(_committed_text(name))


def _ok_row(key: str) -> dict:
    """The first row of kind ``key`` with status "ok" (a decode row has none: the first) in a committed file."""
    return next(r for r in _committed(FILE_OF[key])[key] if r.get("status", "ok") == "ok")


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    def test_schema_names_the_field_out_of_place(self, tiny_run):
        broken = copy.deepcopy(tiny_run)
        ok_row = next(r for r in broken["results"] if r["status"] == "ok")
        ok_row["median_s"] = None
        with pytest.raises(ValueError, match=r"results\[\d+\]\.median_s.*got None"):
            validate_results(broken)
        for key, value, message in [("tflops", 0.0, "a positive number.*got 0.0"), ("iqr_s", -1.0, "a finite number >= 0.*got -1.0")]:
            broken = copy.deepcopy(tiny_run)
            next(r for r in broken["results"] if r["status"] == "ok")[key] = value
            with pytest.raises(ValueError, match=rf"results\[\d+\]\.{key}: expected {message}"):
                validate_results(broken)
        broken = copy.deepcopy(tiny_run)
        del broken["provenance"]["torch"]
        with pytest.raises(ValueError, match=r"provenance: expected key 'torch'.*got keys \["):
            validate_results(broken)
        broken = copy.deepcopy(tiny_run)
        next(r for r in broken["results"] if r["status"] != "ok")["reason"] = None
        with pytest.raises(ValueError, match=r"results\[\d+\]\.reason: expected why a skipped row has no time, got None"):
            validate_results(broken)

    @pytest.mark.parametrize("command", [["--device", "cpu", "--parts", "peaks", "--matmul-sizes", "8"],
                                         ["merge", "a.json", "b.json"]], ids=["run", "merge"])
    def test_an_output_that_cannot_be_written_is_a_usage_error_before_anything_runs(self, command, tmp_path,
                                                                                   capsys):
        # the run measured its parts, then failed with IsADirectoryError or FileNotFoundError
        # (a traceback, exit code 1) and left a stray .partial file beside the target
        (tmp_path / "a file").write_text("")
        for output, message in [(tmp_path, "expected a file to write, got the directory"),
                                (tmp_path / "missing" / "x.json", "expected a file in an existing folder"),
                                (tmp_path / "a file" / "x.json", "expected a file in an existing folder")]:
            with pytest.raises(SystemExit) as exit_info:
                main([*command, "--output", str(output)])
            assert exit_info.value.code == 2
            assert f"argument --output/-o: {message}" in capsys.readouterr().err
        assert sorted(p.name for p in tmp_path.iterdir()) == ["a file"]

    def test_a_default_output_that_cannot_be_written_is_a_usage_error_before_anything_runs(
            self, tmp_path, monkeypatch, capsys):
        # without --output, bench-cpu.json was not checked: the run measured its first part, then
        # failed with IsADirectoryError
        monkeypatch.chdir(tmp_path)
        (tmp_path / "bench-cpu.json").mkdir()
        with pytest.raises(SystemExit) as exit_info:
            main(["--device", "cpu", "--parts", "peaks", "--matmul-sizes", "8", "--stream-bytes", "64"])
        assert exit_info.value.code == 2
        assert "expected a file to write, got the directory 'bench-cpu.json'" in capsys.readouterr().err
        assert sorted(p.name for p in tmp_path.iterdir()) == ["bench-cpu.json"]

    @pytest.mark.parametrize("part", ["masks", "distributed"])
    def test_a_part_the_preset_does_not_run_is_a_usage_error(self, part, tmp_path, capsys):
        # the run measured nothing and wrote a file marked complete, with no rows
        with pytest.raises(SystemExit):
            main(["--device", "cpu", "--preset", "quick", "--parts", "peaks", part, "--matmul-sizes", "8",
                  "--stream-bytes", "64", "--output", str(tmp_path / "x.json")])
        assert f"--preset quick does not run --parts {part}: expected parts among" in capsys.readouterr().err
        assert not (tmp_path / "x.json").exists()

    def test_a_failed_write_leaves_no_partial_file(self, tmp_path):
        (tmp_path / "x.json").mkdir()
        with pytest.raises(IsADirectoryError):
            write_results(_committed("cpu.json"), tmp_path / "x.json")
        assert [p.name for p in tmp_path.iterdir()] == ["x.json"]

    def test_problem_rejects_bad_shapes(self):
        with pytest.raises(ValueError, match=r"level must be one of.*got 'block'"):
            Problem("block", 1, 8, 2, 4, torch.float32, CPU, False)
        with pytest.raises(ValueError, match="t must be at least 1, got 0"):
            Problem("kernel", 1, 0, 2, 4, torch.float32, CPU, False)

    def test_the_timer_needs_at_least_three_repeats(self):
        with pytest.raises(ValueError, match=r"repeats must be at least 3.*got 2"):
            time_cpu(lambda: None, estimate=1e-6, repeats=2)

    def test_a_kernel_config_must_be_a_dict_of_kernels(self):
        row = _row_of(lambda q, k, v: Built(lambda: explicit_attention(q, k, v, is_causal=True),
                                            config=lambda: {"forward": [64, 64, 4, 3]}))
        with pytest.raises(ValueError, match=r"row\.kernel_config: expected dict \| None, got \[64, 64\]"):
            Row.from_json(row.to_json() | {"kernel_config": [64, 64]})

    @pytest.mark.parametrize(
        "kind, key, change, message",
        [
            (Row, "results", {"b": True}, r"row\.b: expected <class 'int'>, got True"),
            (Row, "results", {"median_s": True}, r"row\.median_s: expected float \| None, got True"),
            (Row, "results", {"ops": [1]}, r"row\.ops: expected list\[str\], got \[1\]"),
            (Row, "results", {"status": "timed"}, r"row\.status: expected one of \('ok', .*got 'timed'"),
            (Row, "results", {"t": DROP}, r"row: expected key 't', got keys \["),
            (Row, "results", {"backend": ""}, r"row\.backend: expected the kernel that ran, got ''"),
            (LinearRow, "linear", {"max_rel_err": None}, r"row\.max_rel_err: expected the checked error.*got None"),
            # an ok row passed its float64 check: one without its error was never checked
            (Row, "results", {"max_rel_err": None}, r"row\.max_rel_err: expected the checked error.*got None"),
            (MaskRow, "masks", {"max_rel_err": None}, r"row\.max_rel_err: expected the checked error.*got None"),
            (DistributedRow, "distributed", {"max_rel_err": None},
             r"row\.max_rel_err: expected the checked error.*got None"),
            (LinearRow, "linear", {"flops": 0.0}, r"row\.flops: expected a positive number.*got 0\.0"),
            (DecodeRow, "decode", {"median_s": 0.0}, r"row\.median_s: expected a positive number, got 0\.0"),
            (DecodeRow, "decode", {"config": {"vocab_size": 16, "d_model": 32, "num_heads": 2, "num_layers": True,
                                              "context_length": 24}},
             r"row\.config\.num_layers: expected int, got True"),
            (MaskRow, "masks", {"lengths": [1]}, r"row\.lengths: expected document lengths summing to t="),
            (MaskRow, "masks", {"tflops": None}, r"row\.tflops: expected a positive number.*got None"),
            (DistributedRow, "distributed", {"bytes_sent": None}, r"row\.bytes_sent: expected a positive number"),
        ],
        ids=lambda x: x.__name__ if isinstance(x, type) else None,
    )
    def test_a_row_of_the_wrong_type_or_out_of_range_is_refused(self, kind, key, change, message):
        row = {k: v for k, v in (_ok_row(key) | change).items() if v is not DROP}
        with pytest.raises(ValueError, match=message):
            kind.from_json(row, "row")

    @pytest.mark.parametrize(
        "key, change, message",
        [
            ("results", {"iqr_s": float("nan")}, r"\.iqr_s: expected a finite number >= 0, got nan"),
            ("results", {"iqr_s": float("inf")}, r"\.iqr_s: expected a finite number >= 0, got inf"),
            ("results", {"median_s": float("inf")}, r"\.median_s: expected a finite number >= 0, got inf"),
            ("results", {"max_rel_err": float("nan")}, r"\.max_rel_err: expected a finite number >= 0, got nan"),
            ("results", {"max_rel_err": -1e-7}, r"\.max_rel_err: expected a finite number >= 0"),
            ("results", {"t": 0}, r"\.t: expected a size or count >= 1, got 0"),
            ("results", {"b": -1}, r"\.b: expected a size or count >= 1, got -1"),
            ("results", {"repeats": 0}, r"\.repeats: expected a size or count >= 1, got 0"),
            ("results", {"pass": "backward"}, r"\.pass: expected one of \('forward', 'forward\+backward'\)"),
            ("results", {"level": "block"}, r"\.level: expected one of \('layer', 'kernel'\), got 'block'"),
            ("results", {"dtype": "int3"}, r"\.dtype: expected the name of a floating-point torch dtype, got 'int3'"),
            ("linear", {"dtype": "int64"}, r"\.dtype: expected the name of a floating-point torch dtype, got 'int64'"),
            ("results", {"status": "skipped", "reason": "no time", "median_s": -5},
             r"\.median_s: expected a finite number >= 0, got -5"),
            ("linear", {"max_rel_err": float("inf")}, r"\.max_rel_err: expected a finite number >= 0, got inf"),
            ("linear", {"number": 0}, r"\.number: expected a size or count >= 1, got 0"),
            ("masks", {"flops": -1.0}, r"\.flops: expected a finite number >= 0, got -1\.0"),
            ("masks", {"flops": 0.0}, r"\.flops: expected a positive number for an ok row, got 0\.0"),
            ("masks", {"flops": float("nan")}, r"\.flops: expected a finite number >= 0, got nan"),
            ("distributed", {"step_s": -1.0}, r"\.step_s: expected a finite number >= 0, got -1\.0"),
            ("distributed", {"compute_step_s": float("nan")}, r"\.compute_step_s: expected a finite number"),
            ("distributed", {"world_size": 0}, r"\.world_size: expected a size or count >= 1, got 0"),
            ("decode", {"iqr_s": -1.0}, r"\.iqr_s: expected a finite number >= 0, got -1\.0"),
        ],
    )
    def test_a_results_file_with_a_number_out_of_range_names_file_row_and_field(self, key, change, message,
                                                                                tmp_path):
        # validate_results (and so merge and the appendix) accepted NaN, inf and negative times,
        # errors and spreads, sizes of 0, and passes and levels the harness does not know
        doc = _committed(FILE_OF[key])
        i = next(i for i, r in enumerate(doc[key]) if r.get("status", "ok") == "ok")
        doc[key][i] |= change
        (tmp_path / "bad.json").write_text(json.dumps(doc))
        with pytest.raises(ValueError, match=rf"bad\.json: {key}\[{i}\]{message}"):
            read_results(tmp_path / "bad.json")

    def test_a_failed_row_may_record_the_non_finite_error_that_failed_it(self):
        failed = {"status": "failed", "reason": "relative error inf > 2e-03", "median_s": None, "iqr_s": None}
        assert math.isinf(Row.from_json(_ok_row("results") | failed | {"max_rel_err": float("inf")}).max_rel_err)
        assert math.isnan(LinearRow.from_json(_ok_row("linear") | failed | {"max_rel_err": float("nan")}).max_rel_err)

    @pytest.mark.parametrize(
        "edit, message",
        [
            (lambda d: d.update(schema="attention-bench/2"), r"results\.schema: expected 'attention-bench/1'"),
            # a file of another version whose top-level keys differ too: its version named, not a missing key
            (lambda d: d.update(schema="attention-bench/2") or d.pop("peaks"),
             r"results\.schema: expected 'attention-bench/1', got 'attention-bench/2'"),
            (lambda d: d.pop("schema") and d.pop("peaks"), r"results: expected key 'schema'"),
            (lambda d: d.update(complete="yes"), r"results\.complete: expected a bool, got 'yes'"),
            (lambda d: d["provenance"].update(device_type="cuda"), r"provenance: expected GPU fields \['cuda',"),
            (lambda d: d["provenance"].update(cpu_count=True), r"provenance\.cpu_count: expected int, got bool"),
            (lambda d: d["provenance"].pop("cpu_count"), r"provenance: expected key 'cpu_count'"),
            (lambda d: d["settings"].pop("repeats"), r"settings: expected key 'repeats'"),
            (lambda d: d["peaks"].update(float32={"source": "a datasheet"}),
             r"peaks\.float32: expected tflops or bytes_per_s"),
            (lambda d: d["peaks"]["bandwidth"].update(bytes_per_s=0), r"peaks\.bandwidth\.bytes_per_s: expected a pos"),
            (lambda d: d["peaks"]["bandwidth"].update(bytes_per_s=True), r"peaks\.bandwidth\.bytes_per_s: expected a"),
            (lambda d: d["goals"]["ratios"][0].update(status="missed") or d["goals"]["ratios"][0].pop("baseline_s"),
             r"goals\.ratios\[0\]: expected key 'baseline_s'"),
            (lambda d: d["goals"]["ratios"][0].update(ratio=0.0), r"goals\.ratios\[0\]\.ratio: expected a positive"),
            (lambda d: d["goals"]["ratios"][0].update(status="done"), r"goals\.ratios: expected a status in"),
            (lambda d: d["goals"]["speed"][0].update(status="not measured"), r"goals\.speed: expected key 'reason'"),
            (lambda d: d["goals"]["speed"][0].pop("ratio_fused_sdpa_to_torch_mha"),
             r"goals\.speed: expected key 'ratio_fused_sdpa_to_torch_mha'"),
            # a value of the wrong kind where an object or a list belongs: named, never a
            # TypeError or AttributeError from inside the validator
            (lambda d: d["goals"].update(memory=[1]), r"goals\.memory: expected an object or null, got list"),
            (lambda d: d["goals"].update(speed=[1]), r"goals\.speed: expected an object, got int"),
            (lambda d: d["goals"].update(ratios=[1]), r"goals\.ratios\[0\]: expected an object, got int"),
            (lambda d: d["goals"].update(ratios=5), r"goals\.ratios: expected a list, got int"),
            (lambda d: d["peaks"].update(float32=5), r"peaks\.float32: expected an object, got int"),
            (lambda d: d.update(decode=5), r"decode: expected a list of decode rows, got int"),
            (lambda d: d.update(decode={"a": 1}), r"decode: expected a list of decode rows, got dict"),
            # a problem measured twice (a --dtypes given twice did it): which row the appendix shows is
            # an accident of order, and merge refuses the file
            (lambda d: d["results"].append(dict(d["results"][3])),
             r"results\[\d+\]: expected one row per problem, got that of results\[3\] again \(level=.*, variant="),
            (lambda d: d["goals"]["ratios"].append(dict(d["goals"]["ratios"][1])),
             r"goals\.ratios\[\d+\]: expected one goal per problem, got that of goals\.ratios\[1\] again"),
        ],
    )
    def test_the_schema_refuses_each_field_out_of_place(self, edit, message):
        doc = _committed("cpu.json")
        edit(doc)
        with pytest.raises(ValueError, match=message):
            validate_results(doc)


@pytest.mark.parametrize("part", ["masks", "linear", "delta", "sparse"])
def test_a_parts_method_says_its_calls_are_not_replayed_from_a_cuda_graph(part, monkeypatch):
    # they are timed without a graph, and their methods said "as the sweep times", which under
    # --cuda-graphs replays every call: host time was in their rows and out of the sweep's
    from _small import SMALL

    from attention.bench import parts

    monkeypatch.setattr(parts, f"run_{part}", lambda *args: [])
    for graphs, device in [(True, "cuda"), (False, "cuda"), (True, "cpu")]:
        settings = dataclasses.replace(SMALL, device=torch.device(device), cuda_graphs=graphs)
        ctx = parts.Context(argparse.Namespace(sparse_top_k=4, sparse_block_size=2), settings, "", {"methods": {}},
                            lambda: None)
        parts.BY_NAME[part].run(ctx)
        said = "not replayed from a CUDA graph" in ctx.doc["methods"][part]
        assert said == (graphs and device == "cuda"), (graphs, device)


def test_the_help_names_every_part_left_out_by_default():
    help_text = " ".join(build_parser().format_help().split())
    left_out = ", ".join(p.name for p in PARTS if not p.default)
    assert f"(default: all but {left_out}; see below)" in help_text


def test_rows_load_with_the_defaults_of_fields_added_later():
    row = Row.from_json({k: v for k, v in _ok_row("results").items()
                         if k not in ("gpu_kernels", "kernel_config", "run")} | {"iqr_s": 0.0})
    assert (row.gpu_kernels, row.kernel_config, row.run, row.iqr_s) == (None, None, None, 0.0)  # iqr 0: no spread
    old = {k: v for k, v in _ok_row("decode").items() if k not in ("batch_size", "dtype", "same_tokens", "run")}
    decode = DecodeRow.from_json(old)
    assert (decode.batch_size, decode.dtype, decode.same_tokens, decode.run) == (1, "float32", None, None)
    assert decode.to_json() == old | {"batch_size": 1, "dtype": "float32", "same_tokens": None, "run": None}
    assert LinearRow.from_json(_ok_row("linear") | {"median_s": 1}).median_s == 1  # an int is a float


def test_a_results_file_may_name_no_commit_and_give_whole_seconds():
    doc = _committed("cpu.json")
    doc["provenance"]["git"] = {"commit": None, "dirty": None}  # run outside a git checkout
    doc["settings"]["min_time"] = 1  # JSON writes 1.0 as 1 in some writers
    validate_results(doc)


def _layer_row(variant: str, median_s: float, dtype: str = "float32", status: str = "ok") -> dict:
    return {"level": "layer", "variant": variant, "t": 1024, "d": 768, "h": 12, "b": 4, "dtype": dtype,
            "pass": "forward", "status": status, "median_s": median_s, "iqr_s": median_s / 10,
            "backend": f"{variant}'s kernel"}


def test_the_speed_goal_reads_ok_rows_of_its_own_dtype_and_allows_exactly_5_percent():
    rows = [
        _layer_row("fused-sdpa", 9.0, status="failed"),  # not a time: never read
        _layer_row("fused-sdpa", 1.05), _layer_row("torch-mha", 1.0), _layer_row("mha", 2.1),
        _layer_row("fused-sdpa", 3.0, "bfloat16"), _layer_row("torch-mha", 1.0, "bfloat16"),
        _layer_row("fused-sdpa", 1.0, "float16", status="failed"),  # no float16 layer ran: a goal not measured
        _layer_row("torch-mha", 1.0, "float16", status="failed"),
    ]
    goals = {g["dtype"]: g for g in speed_goals(rows)}
    assert list(goals) == ["bfloat16", "float16", "float32"]
    fp32 = goals["float32"]
    assert fp32["status"] == "met" and fp32["ratio_fused_sdpa_to_torch_mha"] == 1.05 == SPEED_TOLERANCE
    assert (fp32["fused_sdpa_s"], fp32["torch_mha_s"], fp32["fused_sdpa_iqr_s"], fp32["torch_mha_iqr_s"]) == (
        1.05, 1.0, 1.05 / 10, 1.0 / 10)
    assert fp32["ratio_mha_to_fused_sdpa"] == pytest.approx(2.0) and fp32["ratio_mha_to_torch_mha"] == 2.1
    assert goals["bfloat16"]["status"] == "missed" and goals["bfloat16"]["ratio_fused_sdpa_to_torch_mha"] == 3.0
    assert goals["float16"]["status"] == "not measured" and "no ok fused-sdpa" in goals["float16"]["reason"]


@pytest.mark.parametrize(
    "rss, allocator, status, fraction",
    [
        ({"explicit": 1000, "flash_attention": 50}, {"explicit": 10, "flash_attention": 5}, "met", 0.05),
        ({"explicit": 1000, "flash_attention": 51}, {"explicit": 1000, "flash_attention": 1}, "missed", 0.051),
        ({"explicit": 1000, "flash_attention": 0}, {"explicit": 1000, "flash_attention": 1}, "not measured", None),
        ({"explicit": 1000, "flash_attention": None}, {"explicit": 1, "flash_attention": 1}, "not measured", None),
    ],
)
def test_the_memory_goal_is_flash_attentions_peak_rss_over_the_explicit_paths(monkeypatch, rss, allocator, status,
                                                                              fraction):
    def probe(problem, name, seed):
        peak = {"rss_peak_bytes": rss[name]} if rss[name] is not None else {"error": "the probe crashed"}
        return peak | {"allocator_peak_bytes": allocator[name]}

    monkeypatch.setattr(goals_module, "measure_in_subprocess", probe)
    goal = goals_module.memory_goal(CPU, t=64, b=1, h=2, d_h=8, seed=0)
    assert goal["status"] == status and goal.get("fraction") == fraction
    assert goal["explicit_peak_bytes"] == rss["explicit"]
    assert goal["flash_attention_allocator_peak_bytes"] == allocator["flash_attention"]


def test_a_ratio_goal_equal_to_its_target_is_met(monkeypatch):
    times = {"flash_attention": 1.5, "sdpa": 1.0, "fused-explicit": 0.25, "mha": 0.25}  # 1.5x and 1x: the targets

    def fake_measure(variant, problem, *args):
        return Row.from_json(_ok_row("results") | {"variant": variant.name, "median_s": times[variant.name]})

    monkeypatch.setattr(goals_module, "measure", fake_measure)
    got = goals_module.ratio_goals(_settings(passes=("forward",)), (1, 2, 8, 4), (1, 2, 8, 4))
    assert [(g["variant"], g["ratio"], g["target"], g["status"]) for g in got] == [
        ("flash_attention", 1.5, 1.5, "met"), ("fused-explicit", 1.0, 1.0, "met")]


def test_the_git_record_says_dirty_only_for_changed_tracked_files(monkeypatch):
    from attention.bench import provenance

    monkeypatch.delenv("ATTENTION_COMMIT", raising=False)
    for status, dirty in (("", False), (" M src/attention/flash.py", True), (None, None)):
        commands = []
        answers = {"rev-parse": "f9d0804", "status": status}
        monkeypatch.setattr(provenance, "_run", lambda *c: commands.append(c) or answers[c[3]])
        assert provenance.git_commit() == {"commit": "f9d0804", "dirty": dirty}
        assert "--untracked-files=no" in commands[1]  # an untracked scratch file does not make it dirty


def test_provenance_records_this_machine_and_the_command_as_typed(monkeypatch):
    from attention.bench import provenance

    monkeypatch.setattr(provenance.os, "getloadavg", lambda: (1.234, 4.567, 0.5))
    monkeypatch.setattr(provenance.sys, "orig_argv", ["python", "-m", "attention.bench", "--seq-lens", "64 128"])
    monkeypatch.setattr(provenance.sys, "argv", ["attention/bench/__main__.py", "--seq-lens", "64 128"])
    assert provenance.load_average() == [1.23, 4.57, 0.5]  # 1, 5, 15 minutes
    assert provenance.command_line(None) == "python -m attention.bench --seq-lens '64 128'"
    assert provenance.command_line(["merge", "a b.json"]) == "python -m attention.bench merge 'a b.json'"
    precision = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("medium")
        record = provenance.provenance(CPU, "python -m attention.bench")
    finally:
        torch.set_float32_matmul_precision(precision)
    assert record["float32_matmul_precision"] == "medium" and record["device_type"] == "cpu"
    assert record["device_name"] == record["cpu_model"] == provenance._cpu_model()
    assert record["date_utc"].endswith("+00:00") and record["torch_threads"] == torch.get_num_threads()


def test_a_gpu_runs_provenance_reads_each_field_from_its_own_setting(monkeypatch):
    from types import SimpleNamespace

    from attention.bench import provenance

    gpu = SimpleNamespace(name="NVIDIA H200", total_memory=150_000_000_000, major=9, minor=0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: gpu)
    monkeypatch.setattr(provenance, "_run", lambda *command: "570.86" if command[0] == "nvidia-smi" else None)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", True)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    record = provenance.provenance(torch.device("cuda"), "python -m attention.bench")
    assert record["device_type"] == "cuda" and record["device_name"] == "NVIDIA H200"
    assert (record["compute_capability"], record["device_memory_bytes"], record["driver"]) == (
        "9.0", 150_000_000_000, "570.86")
    assert (record["tf32_matmul"], record["tf32_cudnn"]) == (True, False)
