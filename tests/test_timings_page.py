"""The appendix page generator (docs/hooks/timings.py), on a results file from a real tiny run.

The fixture tests/fixtures/bench/cpu-tiny.json was written by ``python -m attention.bench`` on the
project's 2-core CPU machine with tiny shapes (its "command" field says exactly how): its numbers
mean nothing, but it has every kind of row the page must render: ok, skipped, unsupported,
forward and forward+backward, layers and kernels, goals, and peak memory.
"""

import copy
import json
import re
import shlex
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import Files

from attention.bench.cli import build_parser
from tests._hooks import load_hook

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests/fixtures/bench"


hook = load_hook("timings")


@pytest.fixture(scope="module")
def runs() -> list[tuple[str, dict]]:
    return hook.load_results(FIXTURES)


@pytest.fixture(scope="module")
def markdown(runs) -> str:
    return hook.page_markdown(runs)


@pytest.fixture(scope="module")
def svgs(runs) -> dict[str, bytes]:
    """Every plot of the fixture, rendered once (matplotlib takes a while)."""
    return {name: svg for stem, doc in runs for name, svg in hook.figures(stem, doc).items()}


def test_gpu_notice_gives_a_command_that_writes_where_the_page_reads(markdown):
    # The notice comes first, and its command, as the reader copies it from the page, is a valid
    # benchmark command line that measures on CUDA and writes a file this hook then loads.
    assert markdown.startswith('!!! warning "No GPU results have been measured yet"')
    (command,) = re.findall(r"```bash\n\s*(.+?)\n\s*```", markdown)
    words = shlex.split(command)
    assert words[:3] == ["python", "-m", "attention.bench"]
    args = build_parser().parse_args(words[3:])
    assert args.device == "cuda"
    output = (REPO / args.output).resolve()  # run "from the repository root", the notice says
    assert output.parent == (REPO / "docs" / hook.RESULTS).resolve() and output.suffix == ".json"


# What the notice calls the GPU variants, and the names of those variants in a results file
GPU_VARIANTS = {
    "the Triton kernel": "triton",
    "SDPA's flash": "sdpa[flash]",
    "memory-efficient": "sdpa[efficient]",
    "cuDNN": "sdpa[cudnn]",
}


@pytest.mark.parametrize(
    "results", [FIXTURES, REPO / "docs" / hook.RESULTS], ids=["fixture", "book"]
)
def test_gpu_notice_says_only_true_things_about_the_cpu_results(results):
    # "The GPU-only variants (...) are listed as unsupported there": every variant the notice
    # names so must be unsupported in every row of every CPU results file, the book's own
    # included; and if it says what `sdpa[flash]` ran on the CPU, the profiler must have seen it.
    runs = [(stem, doc) for stem, doc in hook.load_results(results)
            if doc["provenance"]["device_type"] == "cpu"]
    assert runs
    notice = " ".join(hook.page_markdown(runs).split("```bash")[0].split())  # on one line
    named = [variant for phrase, variant in GPU_VARIANTS.items() if phrase in notice]
    assert named, "the notice names no GPU variant"
    for stem, doc in runs:
        for row in doc["results"]:
            if row["variant"] in named:
                assert row["status"] == "unsupported", (
                    f"{stem}: {row['variant']} ({row['pass']}, t={row['t']}) is {row['status']} "
                    "on CPU, but the GPU notice says it is listed as unsupported"
                )
            if "`sdpa[flash]` ran PyTorch's CPU flash kernel" in notice:
                if row["variant"] == "sdpa[flash]" and row["status"] == "ok":
                    assert row["backend"] == "sdpa: flash (CPU kernel)", (stem, row["backend"])


def test_every_table_names_hardware_and_versions(runs, markdown):
    doc = runs[0][1]
    machine = hook.hardware(doc)
    assert doc["provenance"]["torch"] in machine and doc["provenance"]["device_name"] in machine
    tables = re.findall(r"^ *\| variant \|", markdown, flags=re.MULTILINE)
    captions = re.findall(r"^ *\*.*" + re.escape(machine), markdown, flags=re.MULTILINE)
    assert tables and len(captions) >= len(tables)


def test_time_table_has_ratio_to_fastest(runs):
    rows = [r for r in runs[0][1]["results"] if r["level"] == "kernel" and r["pass"] == "forward"]
    table = hook.time_table(rows, "caption")
    t = rows[0]["t"]
    ok = [r for r in rows if r["t"] == t and r["status"] == "ok"]
    fastest = min(ok, key=lambda r: r["median_s"])
    slowest = max(ok, key=lambda r: r["median_s"])
    assert f"| `{fastest['variant']}` | **" in table and "(1.00×)**" in table
    ratio = slowest["median_s"] / fastest["median_s"]
    assert hook._ratio(ratio) in table.split(f"`{slowest['variant']}`")[1].splitlines()[0]


def test_goals_report_the_measured_ratios(runs, markdown):
    goal = runs[0][1]["goals"]["speed"][0]
    assert f"**{goal['ratio_fused_sdpa_to_torch_mha']:.3f}**" in markdown
    assert hook._ratio(goal["ratio_mha_to_fused_sdpa"]) in markdown


def test_a_missed_speed_goal_says_what_the_measurements_show(runs):
    goal = dict(runs[0][1]["goals"]["speed"][0])  # real backends; only the verdict logic is under test
    goal |= {"status": "missed", "fused_sdpa_s": 1.2, "torch_mha_s": 1.0}
    goal |= {"fused_sdpa_iqr_s": 0.01, "torch_mha_iqr_s": 0.01}
    assert "outside the attention kernel" in hook._speed_verdict(goal)  # same kernel ran in both
    goal |= {"fused_sdpa_iqr_s": 0.3}
    assert "run-to-run spread" in hook._speed_verdict(goal)


def test_every_plot_linked_from_the_page_is_generated(svgs, markdown):
    made = set(svgs)
    linked = set(re.findall(r"\]\(timings/([^)]+\.svg)\)", markdown))
    assert linked and linked == made
    images = [line for line in markdown.splitlines() if "](timings/" in line]
    assert all(re.search(r"!\[[^\]]{20,}\]\(timings/", line) for line in images)  # with alt text


def test_plots_are_reproducible_svg(runs, svgs):
    stem, doc = runs[0]
    key, rows = next(iter(hook.groups(doc).items()))
    title = f"{hook.group_title(key, rows)} — {doc['provenance']['device_name']}"
    again = hook.plot(rows, "time", title)
    assert again == svgs[f"{stem}-{hook.group_slug(key)}-time.svg"]  # same bytes: no date, fixed ids
    assert all(svg.startswith(b"<?xml") and b"<svg" in svg for svg in svgs.values())


def test_variants_that_did_not_run_are_listed_with_reasons(markdown):
    assert "`triton` (unsupported): no CUDA device" in markdown
    assert "(skipped): torch.compile turned off (--no-compile)" in markdown


def test_a_gpu_results_file_removes_the_notice(runs):
    stem, doc = runs[0]
    gpu = copy.deepcopy(doc)  # only the page logic is under test: no number here is shown as measured
    gpu["provenance"] |= {"device_type": "cuda", "device_name": "a GPU", "cuda": "12.8", "driver": "570",
                          "tf32_matmul": False, "tf32_cudnn": True, "compute_capability": "9.0"}
    assert "No GPU results" not in hook.page_markdown([(stem, doc), ("gpu", gpu)])


def test_malformed_results_stop_the_build(tmp_path):
    doc = json.loads((FIXTURES / "cpu-tiny.json").read_text())
    del doc["results"][0]["t"]
    (tmp_path / "broken.json").write_text(json.dumps(doc))
    with pytest.raises(PluginError, match=r"broken\.json: results\[0\]: expected key 't'"):
        hook.load_results(tmp_path)


def test_hook_fills_the_marker_on_the_appendix_page_only(tmp_path, runs, svgs, monkeypatch):
    # The plots were rendered (and checked) once already: hand the hook those instead of redrawing.
    monkeypatch.setattr(hook, "figures", lambda stem, doc: {n: s for n, s in svgs.items() if n.startswith(stem)})
    docs = tmp_path / "docs"
    shutil.copytree(FIXTURES, docs / hook.RESULTS)
    config = MkDocsConfig()
    config.load_dict({"site_name": "test", "docs_dir": str(docs), "site_dir": str(tmp_path / "site")})
    errors, _ = config.validate()
    assert not errors
    config.plugins._current_plugin = "timings"  # what MkDocs sets while it runs a hook's event
    files = hook.on_files(Files([]), config)
    assert {f.src_uri: f.content_bytes for f in files} == {f"{hook.FIGURES}/{n}": s for n, s in svgs.items()}
    page = (REPO / "docs" / hook.PAGE).read_text()
    assert hook.MARKER in page
    appendix = SimpleNamespace(file=SimpleNamespace(src_uri=hook.PAGE))
    filled = hook.on_page_markdown(page, appendix, config, files)
    assert hook.MARKER not in filled and "### Goals" in filled
    other = SimpleNamespace(file=SimpleNamespace(src_uri="index.md"))
    assert hook.on_page_markdown(hook.MARKER, other, config, files) == hook.MARKER
    with pytest.raises(PluginError, match="expected the marker"):
        hook.on_page_markdown("# no marker", appendix, config, files)


@pytest.mark.parametrize("nbytes, text", [
    (512, "512 B"), (1000, "1000 B"), (1536, "1.5 KiB"), (17723392, "17 MiB"), (6510305280, "6.1 GiB"), (None, "—"),
])
def test_sizes_are_in_binary_units(nbytes, text):
    assert hook.readable_bytes(nbytes) == text


def test_no_size_on_the_page_is_in_scientific_notation(markdown):
    assert not re.search(r"\d[eE][+-]\d+ ?[KMG]i?B", markdown)
    sizes = re.findall(r"\b[\d.]+ (?:B|KiB|MiB|GiB)\b", markdown)
    assert sizes and all(float(s.split()[0]) < 1024 for s in sizes)


def test_headings_write_their_math_as_math(markdown):
    headings = re.findall(r"^#+ .*$", markdown, flags=re.MULTILINE)
    assert any("$d_h = " in h for h in headings)
    for heading in headings:  # outside $...$, no TeX: no d_h, no backslash
        outside = re.sub(r"\$[^$]+\$", "", heading)
        assert "d_h" not in outside and "\\" not in outside, heading


def test_an_old_results_file_renders_without_the_new_parts(runs, markdown):
    doc = runs[0][1]  # written before peaks, the roofline, decode and the issue 14 goals existed
    assert "bandwidth" not in doc["peaks"] and "decode" not in doc and "ratios" not in doc["goals"]
    assert "holds no peaks of its machine" in markdown and "roofline-" not in markdown
    assert "### Decoding" not in markdown


def new_parts(doc: dict) -> dict:
    """The fixture with the parts a newer run adds. Only the page logic is under test: these
    numbers are made up here and are shown nowhere as measured."""
    doc = copy.deepcopy(doc)
    doc["peaks"]["float32"] = {"tflops": 0.1, "source": "measured: torch.mm", "measured": True,
                               "matmul": {"sizes": [{"n": 64, "gflops": 100.0, "repeats": 5, "iqr_s": 1e-4}]}}
    stream = {"array_bytes": 2**27, "copy": {"bytes": 2**28, "bytes_per_s": 8e9, "repeats": 5},
              "triad": {"bytes": 3 * 2**27, "bytes_per_s": 1e10, "repeats": 5}}
    doc["peaks"]["bandwidth"] = {"bytes_per_s": 1e10, "source": "measured: STREAM", "measured": True,
                                 "stream": stream}
    doc["goals"]["ratios"] = [{"name": "flash_attention ÷ SDPA", "variant": "flash_attention", "baseline": "sdpa",
                               "level": "kernel", "b": 1, "h": 12, "t": 2048, "d_h": 64, "dtype": "float32",
                               "pass": "forward", "target": 1.5, "variant_s": 0.3, "baseline_s": 0.2,
                               "variant_iqr_s": 0.0, "baseline_iqr_s": 0.0, "variant_backend": "tiled",
                               "baseline_backend": "sdpa: flash (CPU kernel)", "ratio": 1.5, "status": "met"}]
    config = {"vocab_size": 50257, "d_model": 768, "num_heads": 12, "num_layers": 12, "context_length": 1024}
    doc["decode"] = [{"model": "gpt2-small-untrained", "config": config, "use_cache": cache, "prompt_tokens": 4,
                      "new_tokens": 200, "median_s": 200 / rate, "iqr_s": 0.1, "repeats": 3, "tokens_per_s": rate,
                      "cache_bytes_measured": 7569408, "cache_bytes_formula": 7569408}
                     for cache, rate in ((False, 4.0), (True, 20.0))]
    doc["methods"]["decode"] = "wall-clock time of generate"
    return doc


def test_peaks_roofline_decode_and_goals_render(runs):
    stem, doc = runs[0]
    doc = new_parts(doc)
    hook.validate_results(doc)
    page = hook.run_markdown(stem, doc)
    assert "100 GFLOP/s" in page and "10 GB/s" in page and "ridge point $P / \\beta$ = 10 FLOP/byte" in page
    assert "| 4 + 200 | 4 (3 calls, IQR" in page and "| 5.00× |" in page and "| 7.2 MiB | 7.2 MiB |" in page
    assert "**1.50** (300 ms vs 200 ms" in page
    linked = set(re.findall(r"\]\(timings/([^)]+roofline[^)]+\.svg)\)", page))
    made = {name for name in hook.roofline_figures(stem, doc)}
    assert linked == made == {f"{stem}-roofline-float32.svg"}
    svg = hook.roofline_figures(stem, doc)[f"{stem}-roofline-float32.svg"]
    assert b"<text" in svg  # text kept as text (svg.fonttype "none"), not paths
    background = svg.split(b'<g id="patch_1">')[1].split(b"</g>")[0]
    assert b'style="fill: none"' in background  # transparent: no white panel on a dark page
    table = page.split("| variant | pass | $d_h$ | intensity")[1].split("\n\n")[0]
    ridge = 0.1e12 / 1e10
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[-1] == ("memory" if float(cells[3]) < ridge else "compute"), line
