"""The measured peaks (attention.bench.peaks) and the roofline (attention.roofline): byte
counts checked against the sizes of real tensors, the roof and the bound, and the plot's lines."""

import copy
import json

import numpy as np
import pytest
import torch

from attention.bench import peaks as peaks_module
from attention.bench.peaks import last_level_cache_bytes, measure_bandwidth, measure_matmul
from attention.bench.timing import Timing
from attention.roofline import kernel_bytes, machine_roof, plot_roofline, roof, roofline_points, stores_scores
from book.constants import REPO

FIXTURE = REPO / "tests/fixtures/bench/cpu-tiny.json"
CPU = torch.device("cpu")


def row(backend: str, pass_name: str = "forward", dtype: str = "float32", **shape) -> dict:
    shape = {"b": 2, "h": 3, "t": 40, "d_h": 8} | shape
    return {"level": "kernel", "variant": "v", "backend": backend, "pass": pass_name, "dtype": dtype,
            "status": "ok", **shape}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("pass_name", ["forward", "forward+backward"])
def test_bytes_are_the_tensors_each_path_must_touch(dtype, pass_name):
    b, h, t, d_h = 2, 3, 40, 8
    q, k, v, z = (torch.empty(b, h, t, d_h, dtype=dtype) for _ in range(4))
    scores = torch.empty(b, h, t, t, dtype=dtype)  # the (t, t) matrix of every head
    once = sum(x.nbytes for x in (q, k, v, z))  # Q, K, V read, Z written
    if pass_name == "forward+backward":
        once += sum(x.nbytes for x in (q, k, v, z, z)) + sum(x.nbytes for x in (q, k, v))  # + dZ; dQ, dK, dV
    passes = 2 if pass_name == "forward" else 5  # A written and read; backward A read, dΩ written, read
    name = str(dtype).removeprefix("torch.")
    assert kernel_bytes(row("sdpa: flash (CPU kernel)", pass_name, name)) == once
    assert kernel_bytes(row("tiled loop in PyTorch", pass_name, name)) == once
    for stored in ("explicit: matmul, mask, softmax", "sdpa: math"):
        assert kernel_bytes(row(stored, pass_name, name)) == once + passes * scores.nbytes


def doc_with_peaks(tflops: float, bytes_per_s: float) -> dict:
    """The fixture's real rows with peaks put in by hand: only the roofline arithmetic is under test."""
    doc = json.loads(FIXTURE.read_text())
    doc["peaks"]["float32"] = {"tflops": tflops, "source": "test", "measured": True}
    doc["peaks"]["bandwidth"] = {"bytes_per_s": bytes_per_s, "source": "test", "measured": True}
    return doc


def test_roof_is_bandwidth_times_intensity_then_the_peak():
    P, beta = 100e9, 10e9  # ridge point at 10 FLOP/byte
    assert roof(2.0, P, beta) == 20e9  # memory-bound: beta * I
    assert roof(50.0, P, beta) == P  # compute-bound: P
    doc = doc_with_peaks(P / 1e12, beta)
    points = roofline_points(doc)
    kernels = [r for r in doc["results"] if r["level"] == "kernel" and r["status"] == "ok"]
    assert len(points) == len(kernels) > 0
    for point, r in zip(points, kernels):
        assert point["intensity"] == r["flops"] / kernel_bytes(r)
        assert point["achieved"] == r["flops"] / r["median_s"]
        assert point["roof"] == min(P, beta * point["intensity"])
        assert point["bound"] == ("memory" if point["intensity"] < 10 else "compute")


def test_ridge_point_moves_the_verdict():
    # The same kernels, compute-bound under a low ridge point and memory-bound under a high one
    low, high = doc_with_peaks(1e-3, 1e12), doc_with_peaks(1e3, 1e9)  # ridge 0.001 and 1e6
    assert {p["bound"] for p in roofline_points(low)} == {"compute"}
    assert {p["bound"] for p in roofline_points(high)} == {"memory"}


def test_a_file_without_peaks_has_no_roofline():
    doc = json.loads(FIXTURE.read_text())  # written before peaks were measured
    assert machine_roof(doc, "float32") is None and roofline_points(doc) == []


def test_plot_draws_the_roof_and_every_point():
    doc = doc_with_peaks(0.05, 2e9)
    machine, points = machine_roof(doc, "float32"), roofline_points(doc)
    fig = plot_roofline(points, machine, "test")
    roof_line, *markers = fig.axes[0].lines
    x, y = roof_line.get_data()
    want = torch.minimum(torch.as_tensor(x) * 2e9, torch.tensor(0.05e12)) / 1e9
    torch.testing.assert_close(torch.as_tensor(y, dtype=want.dtype), want)
    drawn = sorted((float(a), float(b)) for line in markers[1:] for a, b in zip(*line.get_data()))  # [0]: ridge
    want_points = sorted((p["intensity"], p["achieved"] / 1e9) for p in points)
    assert drawn == pytest.approx(want_points)


def fake_timer(seconds: float):
    def timer(fn, estimate, repeats=7, min_time=0.3, max_time=4.0):
        fn()
        return Timing(seconds, 0.0, repeats, 1, "fake")
    return timer


def test_matmul_peak_counts_two_n_cubed_and_keeps_the_best(monkeypatch):
    times = {32: 1e-3, 64: 2e-3}  # n = 64 does 8x the FLOPs in 2x the time: the best

    order = [32, 64]

    def timer(fn, estimate, repeats=7, min_time=0.3, max_time=4.0):
        fn()
        return Timing(times[order.pop(0)], 0.0, repeats, 1, "fake")

    monkeypatch.setattr(peaks_module, "time_cpu", timer)
    result = measure_matmul(CPU, (32, 64), repeats=3)
    assert [r["gflops"] for r in result["sizes"]] == pytest.approx([2 * 32**3 / 1e-3 / 1e9, 2 * 64**3 / 2e-3 / 1e9])
    assert result["best_n"] == 64 and result["gflops"] == result["sizes"][1]["gflops"]


def test_stream_bytes_are_counted_as_stream_counts_them(monkeypatch):
    monkeypatch.setattr(peaks_module, "time_cpu", fake_timer(0.5))
    n = 1000
    result = measure_bandwidth(CPU, array_bytes=8 * n, repeats=3)
    assert result["copy"]["bytes"] == 16 * n and result["triad"]["bytes"] == 24 * n  # float64
    assert result["copy"]["bytes_per_s"] == 16 * n / 0.5
    assert result["bytes_per_s"] == max(result["copy"]["bytes_per_s"], result["triad"]["bytes_per_s"])
    llc = last_level_cache_bytes()
    if llc is not None:  # default arrays: at least 4x the last-level cache (STREAM's rule)
        monkeypatch.setattr(peaks_module, "MIN_STREAM_BYTES", 0)
        monkeypatch.setattr(peaks_module, "last_level_cache_bytes", lambda: 1024)
        assert measure_bandwidth(CPU, repeats=3)["array_bytes"] == 4 * 1024


def load_ch07():
    from book.figures import ch07  # the chapter's figure module, imported only by these tests

    return ch07


def test_chapter_figure_reads_the_results_file(tmp_path, monkeypatch):
    ch07 = load_ch07()
    monkeypatch.setattr(ch07, "CPU_RESULTS", FIXTURE)  # no peaks: the figure says so
    texts = [t.get_text() for t in ch07.measured_roofline().axes[0].texts]
    assert any("not measured yet" in t for t in texts)
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(doc_with_peaks(0.05, 2e9)))
    monkeypatch.setattr(ch07, "CPU_RESULTS", path)
    ax = ch07.measured_roofline().axes[0]
    n_points = sum(len(line.get_xdata()) for line in ax.lines[2:])  # after the roof and the ridge
    assert n_points == len(roofline_points(copy.deepcopy(doc_with_peaks(0.05, 2e9))))


def test_numpy_integers_in_a_row_are_taken():
    # np.int64 was refused ("row t must be a positive integer, got np.int64(40)"); the bytes are
    # counted in Python ints, where int64 would wrap: 2^20 · 64 · (2^22)^2 · 5 · 4 > 2^63
    numpy_row = row("sdpa: math", b=np.int64(2**20), h=np.int64(64), t=np.int64(2**22), d_h=np.int64(8))
    python_row = row("sdpa: math", b=2**20, h=64, t=2**22, d_h=8)
    assert kernel_bytes(numpy_row) == kernel_bytes(python_row) > 2**63
    peaks = {"float32": {"tflops": 1.0, "source": "a"}, "bandwidth": {"bytes_per_s": 1e11, "source": "b"}}
    timed = {"flops": 128.0, "median_s": 1e-6}
    [ours] = roofline_points({"peaks": peaks}, [row("sdpa: flash", t=np.int64(4)) | timed])
    [theirs] = roofline_points({"peaks": peaks}, [row("sdpa: flash", t=4) | timed])
    assert ours == theirs
    [ours] = roofline_points({"peaks": peaks}, [row("sdpa: flash", t=4) | timed | {"flops": np.int64(128)}])
    assert ours == theirs


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    def test_bad_rows_and_peaks_are_refused(self):
        with pytest.raises(ValueError, match=r"kernel row.*got level 'layer'"):
            kernel_bytes(row("sdpa: math") | {"level": "layer"})
        with pytest.raises(ValueError, match="t must be a positive integer, got 0"):
            kernel_bytes(row("sdpa: math", t=0))
        # a backward alone was counted as a forward; no pass at all was a KeyError
        for bad in ({"pass": "backward"}, {"pass": None}):
            with pytest.raises(ValueError, match=r"pass must be one of \('forward', 'forward\+backward'\)"):
                kernel_bytes(row("sdpa: math") | bad)
        # a time of 0 was a ZeroDivisionError, flops of None a TypeError
        peaks = {"float32": {"tflops": 1.0, "source": "a"}, "bandwidth": {"bytes_per_s": 1e11, "source": "b"}}
        ok = row("sdpa: flash") | {"status": "ok", "variant": "v", "flops": 128.0, "median_s": 1e-6}
        for key, value in (("median_s", 0), ("flops", None)):
            with pytest.raises(ValueError, match=rf"ok kernel row's {key} must be a positive finite number, got {value}"):
                roofline_points({"peaks": peaks, "results": [ok | {key: value}]})
        with pytest.raises(ValueError, match=r"bandwidth must be positive.*got 0\.0"):
            roof(1.0, 1e9, 0.0)

    def test_non_finite_values_are_refused(self):
        # flops of inf gave an intensity and a fraction of the roof of inf; roof took inf
        peaks = {"float32": {"tflops": 1.0, "source": "a"}, "bandwidth": {"bytes_per_s": 1e11, "source": "b"}}
        ok = row("sdpa: flash") | {"status": "ok", "variant": "v", "flops": 128.0, "median_s": 1e-6}
        for key, value in (("flops", float("inf")), ("median_s", float("nan")), ("flops", 10**400)):
            with pytest.raises(ValueError, match=rf"ok kernel row's {key} must be a positive finite number, got"):
                roofline_points({"peaks": peaks, "results": [ok | {key: value}]})
        for args in ((float("inf"), 1e9, 1e9), (1.0, float("nan"), 1e9), (1.0, 1e9, 10**400)):
            with pytest.raises(ValueError, match=r"must be positive and finite \(a real number > 0\), got"):
                roof(*args)
        # 1e300 TFLOP/s is finite, but inf FLOP/s, and the ridge point came out inf
        huge = {"float32": {"tflops": 1e300, "source": "a"}, "bandwidth": peaks["bandwidth"]}
        with pytest.raises(ValueError, match=r"peaks\['float32'\]\['tflops'\] must be at most 1\.79769e\+296, got 1e\+300"):
            machine_roof({"peaks": huge}, "float32")

    @pytest.mark.parametrize(
        ("call", "message"),
        [
            # an AttributeError ('list' object has no attribute 'get'), a KeyError, a TypeError
            (lambda: kernel_bytes([1]), r"row must be a dict, got list"),
            (lambda: stores_scores("sdpa: math"), r"row must be a dict, got str"),
            (lambda: machine_roof([1], "float32"), r"doc must be a dict, got list"),
            (lambda: machine_roof({"peaks": [1]}, "float32"), r"doc\['peaks'\] must be a dict, got list"),
            (lambda: machine_roof({"peaks": {}}, ["float32"]), r"dtype must be a str .*got \['float32'\]"),
            (lambda: machine_roof({"peaks": {"float32": {"tflops": "1", "source": "a"},
                                             "bandwidth": {"bytes_per_s": 1e11, "source": "b"}}}, "float32"),
             r"peaks\['float32'\]\['tflops'\] must be a finite number > 0, got '1'"),
            # a peak without its source was a KeyError ('source')
            (lambda: machine_roof({"peaks": {"float32": {"tflops": 1.0},
                                             "bandwidth": {"bytes_per_s": 1e11, "source": "b"}}}, "float32"),
             r"peaks\['float32'\] must have a 'source' \(a str\), got no 'source'"),
            (lambda: roofline_points({"peaks": {"float32": {"tflops": 1.0, "source": "a"},
                                                "bandwidth": {"bytes_per_s": 1e11, "source": None}}},
                                     [row("sdpa: flash") | {"status": "ok", "flops": 1.0, "median_s": 1.0}]),
             r"peaks\['bandwidth'\] must have a 'source' \(a str\), got None"),
            (lambda: roofline_points({}), r"doc must hold a list of rows as 'results' .*got no 'results'"),
            (lambda: roofline_points({"results": "rows"}), r"'results' .*got str"),
            (lambda: roofline_points({"peaks": {}}, ["row"]), r"each row must be a dict, got str"),
            (lambda: roof("1", 1e9, 1e9), r"intensity must be positive and finite \(a real number > 0\), got '1'"),
        ],
    )
    def test_rows_and_files_that_are_not_dicts_are_refused(self, call, message: str) -> None:
        with pytest.raises(ValueError, match=message):
            call()

    @pytest.mark.parametrize("entry, key", [("float32", "tflops"), ("bandwidth", "bytes_per_s")])
    @pytest.mark.parametrize("value", [0, 0.0, False, ""])
    def test_a_peak_of_zero_is_refused_not_taken_for_a_missing_one(self, entry, key, value):
        """A peak that is 0 (or False, or "") is given and not > 0: it returned None, as for a
        file without peaks, and roofline_points then left every row out without a word."""
        peaks = {"float32": {"tflops": 1.0, "source": "a"}, "bandwidth": {"bytes_per_s": 1e11, "source": "b"}}
        peaks[entry] = peaks[entry] | {key: value}
        with pytest.raises(ValueError, match=rf"\['{key}'\] must be a finite number > 0, got {value!r}"):
            machine_roof({"peaks": peaks}, "float32")

    def test_matmul_peak_needs_positive_matrix_sides(self):
        with pytest.raises(ValueError, match=r"positive matrix sides.*got \(0,\)"):
            measure_matmul(CPU, (0,))
