"""The appendix of measured timings (book.appendix), on the committed results files and on the
fixture tests/fixtures/bench/cpu-tiny.json, a real tiny run of ``python -m attention.bench``.

What a reader relies on: every number on the pages is the results file's, each table answers one
question with its units in its header, every figure a page links is drawn, a broken or stale
results file stops the build by name, and what the pages say about where and how a run was
measured is what its file records.
"""

from __future__ import annotations

import copy
import json
import re

import pytest
import torch
from mkdocs.exceptions import PluginError

from attention.bench.masks import scores_formed
from attention.bench.parts import PARTS
from book.appendix import facts, tables
from book.appendix.format import cudnn_version, readable_bytes, table
from book.appendix.load import (
    NOT_RECORDED,
    PROVENANCE_FIELDS,
    RESULTS,
    Run,
    commit_words,
    file_provenance,
    load_runs,
    load_source_run,
    pinned_version,
    results_files,
)
from book.appendix.page import (
    PAGES,
    fill_markers,
    groups_markdown,
    part_markdown,
    provenance_markdown,
    renderer,
    run_markdown,
    runs_table,
)
from book.constants import REPO
from book.hooks import appendix as appendix_hook
from book.hooks import figures as figures_hook

APPENDIX = REPO / "docs" / "appendix"
FIXTURE = REPO / "tests" / "fixtures" / "bench" / "cpu-tiny.json"


@pytest.fixture(scope="module")
def runs() -> dict[str, Run]:
    return load_runs()


@pytest.fixture(scope="module")
def pages(runs) -> dict[str, str]:
    """Every appendix page as the build fills it: markers replaced, queries answered."""
    filled = {}
    for path in sorted(APPENDIX.glob("*.md")):
        markdown, stem = fill_markers(path.read_text(encoding="utf-8"), runs)
        filled[path.name] = facts.fill(markdown, runs, stem)
    return filled


def test_every_run_has_a_page_in_the_nav_and_every_page_fills(runs, pages):
    nav = (REPO / "mkdocs.yml").read_text()
    for stem in runs:
        assert stem in PAGES, f"results/{stem}.json has no appendix page"
        assert f"appendix/{PAGES[stem]}" in nav
        markers = [f"<!-- timings:{name} {stem} -->" for name in ("run", *(part.name for part in PARTS))]
        assert any(m in (APPENDIX / PAGES[stem]).read_text() for m in markers), stem
    for name, text in pages.items():
        assert "<!-- timings:" not in text and "{{" not in text, name


def test_a_broken_results_file_stops_the_build_naming_file_and_field(tmp_path, monkeypatch):
    doc = json.loads(FIXTURE.read_text())
    del doc["results"][3]["status"]
    (tmp_path / "broken.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"broken\.json: results\[3\]: expected key 'status'"):
        load_runs(tmp_path)
    monkeypatch.setattr(appendix_hook, "load_runs", lambda: load_runs(tmp_path))
    with pytest.raises(PluginError, match=r"broken\.json: results\[3\]"):
        appendix_hook.on_files(None, None)


@pytest.mark.parametrize("break_it, field", [
    (lambda doc: doc["goals"]["speed"][0].pop("fused_sdpa_backend"), r"goals\.speed: expected key 'fused_sdpa_backend'"),
    (lambda doc: next(r for r in doc["results"] if r["status"] == "ok").pop("backend"), r"results\[\d+\]: expected key 'backend'"),
    (lambda doc: doc["settings"].pop("tokens"), r"settings: expected key 'tokens'"),
    (lambda doc: doc["results"][0].update(t="1024"), r"results\[0\]\.t: expected <class 'int'>"),
])
def test_a_stale_file_missing_what_the_page_reads_is_refused_by_name(tmp_path, break_it, field):
    doc = json.loads(FIXTURE.read_text())
    break_it(doc)
    (tmp_path / "stale.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"stale\.json: " + field):
        load_runs(tmp_path)


def test_typed_rows_read_back_what_the_harness_wrote(runs):
    for run in runs.values():
        assert [r.to_json() for r in run.rows] == [
            {k: v for k, v in r.items()}
            | {"gpu_kernels": r.get("gpu_kernels"), "run": r.get("run"), "kernel_config": r.get("kernel_config")}
            for r in run.doc["results"]]


def test_queries_answer_with_the_files_numbers(runs):
    h200, h100 = runs["cuda-h200"], runs["cuda-h100-quick"]
    cudnn = h200.row("sdpa[cudnn]", t=16384, d_h=64)
    ask = lambda text, default="cuda-h200": facts.fill(text, runs, default)  # noqa: E731
    assert ask("{{ tflops(sdpa[cudnn], forward, t=16384, d_h=64) }}") == f"{cudnn.tflops:.3g}"
    assert ask("{{ pct_of_peak(sdpa[cudnn], forward, t=16384, d_h=64) }}") == f"{cudnn.pct_of_peak:.0f}"
    speeds = []
    for row in h200.rows:
        if row.variant == "triton" and row.pass_name == "forward" and row.status == "ok" and row.dtype == "bfloat16":
            flash = h200.row("sdpa[flash]", t=row.t, d_h=row.d_h, dtype="bfloat16")
            speeds.append(flash.median_s / row.median_s)
    assert len(speeds) == 10  # t = 1024 ... 16384, d_h = 64 and 128
    assert ask("{{ speedup(triton, sdpa[flash], forward, dtype=bfloat16) }}") == f"{min(speeds):.2f}–{max(speeds):.2f}×"
    launched = h100.row("flash_attention", t=16384, d_h=64, dtype="bfloat16")
    assert ask("{{ cuda-h100-quick: launches(flash_attention, forward, t=16384, d_h=64, dtype=bfloat16) }}") == (
        f"{launched.gpu_kernels:,}")
    per = launched.median_s / launched.gpu_kernels * 1e6
    assert ask("{{ cuda-h100-quick: per_launch_us(flash_attention, forward, t=16384, d_h=64, "
               "dtype=bfloat16) }}") == f"{per:.2g}"
    tile = launched.b * launched.h * 128 * 512 * 4  # one 128 x 512 tile of float32 scores
    assert ask("{{ cuda-h100-quick: tile_mib(flash_attention, forward, t=16384, d_h=64, "
               "dtype=bfloat16) }}") == f"{tile / 2**20:.2g}"
    # a row that records its tiles is read as it says
    tiled = Run(h100.stem, h100.doc | {"results": [r | {"kernel_config": {"tiles": [64, 256]}}
                                                   if r["variant"] == "flash_attention" else r
                                                   for r in h100.doc["results"]]})
    assert facts.fill("{{ tile_mib(flash_attention, forward, t=16384, d_h=64, dtype=bfloat16) }}",
                      {tiled.stem: tiled}, tiled.stem) == f"{tile / 4 / 2**20:.2g}"
    bandwidth = h100.doc["peaks"]["bandwidth"]["bytes_per_s"]
    assert ask("{{ cuda-h100-quick: tile_transfer_us(flash_attention, forward, t=16384, d_h=64, "
               "dtype=bfloat16) }}") == f"{2 * tile / bandwidth * 1e6:.2g}"
    decode = {r.use_cache: r.tokens_per_s for r in h200.decode if r.model == "tiny"}
    assert ask("{{ decode_speedup(tiny) }}") == f"{decode[True] / decode[False]:.2f}×"
    assert ask("{{ peak(bfloat16) }}") == "989.5 TFLOP/s"  # the datasheet's figure, as printed there
    l2 = h200.doc["peaks"]["bandwidth_measured"]["stream"]["last_level_cache_bytes"]
    assert ask("{{ last_level_cache() }}") == f"{l2 / 2**20:.0f} MiB"  # as the driver reported it


def test_the_tiles_query_lists_each_choice_of_the_autotuner_once(runs):
    rows = [r for r in runs["cuda-h200"].rows if r.variant == "triton" and r.pass_name == "forward+backward"
            and r.status == "ok" and r.dtype == "bfloat16"]
    chosen = sorted({tuple(r.kernel_config["dq"]) for r in rows})
    found = facts.fill("{{ tiles(triton, forward+backward, dq, dtype=bfloat16) }}", runs, "cuda-h200")
    assert found == " or ".join(f"{m} × {n}, {w} warps, {s} stages" for m, n, w, s in chosen)
    assert len(chosen) >= 2 and found.count(" or ") == len(chosen) - 1
    with pytest.raises(facts.FactError, match="records 'dkdv' tiles"):
        facts.fill("{{ tiles(triton, forward, dkdv) }}", runs, "cuda-h200")  # a forward row has no dkdv


def test_a_query_can_read_a_run_kept_under_runs(runs):
    kept = load_source_run("runs/h200-2026-11-30/triton-options")
    ours, tiles = kept.row("triton[descriptors]", t=16384, d_h=128), kept.row("triton", t=16384, d_h=128)
    found = facts.fill("{{ runs/h200-2026-11-30/triton-options: speedup(triton[descriptors], triton, forward, "
                       "t=16384, d_h=128) }}", runs, "cuda-h200")
    assert found == f"{tiles.median_s / ours.median_s:.2f}×"
    with pytest.raises(ValueError, match="no results file runs/h200/none.json under results/runs/"):
        facts.fill("{{ runs/h200/none: tflops(triton, forward) }}", runs, "cuda-h200")


@pytest.mark.parametrize("query, message", [
    ("{{ nonsense(triton) }}", "unknown query 'nonsense'"),
    ("{{ tflops(triton, forward+backward, t=1024, d_h=64, dtype=float32) }}", "no ok row of triton, forward\\+backward"),
    ("{{ tflops(sdpa[cudnn], forward) }}", "rows of sdpa\\[cudnn\\].*say which"),
    ("{{ cuda-a100: tflops(triton, forward) }}", "no results file cuda-a100.json"),
    ("{{ launches(flex, forward, t=4096, d_h=64) }}", "did not count GPU kernel launches"),  # the 11-26 run
])
def test_a_query_that_cannot_be_answered_stops_the_build(runs, query, message):
    with pytest.raises(facts.FactError, match=message):
        facts.fill(query, runs, "cuda-h200")


def body_rows(markdown: str) -> list[list[str]]:
    lines = [ln for ln in markdown.splitlines() if ln.startswith("|")][2:]
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]


def test_time_table_marks_the_fastest_at_each_t_and_keeps_units_in_its_header(runs):
    group = runs["cuda-h200"].groups("kernel", "bfloat16")[0]
    (_, rows), *_ = group.passes()
    text = tables.time_table(rows, "forward")
    assert "Median time per call in ms" in text
    cells = body_rows(text)
    for column in range(1, len(cells[0])):
        values = [(float(c[column].strip("*†")), c[column].startswith("**")) for c in cells if c[column] != "—"]
        fastest = min(v for v, _ in values)
        assert [bold for v, bold in values] == [v == fastest for v, _ in values]
    assert not any("ms" in cell for row in cells for cell in row)  # the unit is in the caption only


def test_a_noisy_time_is_marked_where_its_spread_is_not_shown(runs):
    # The grids show medians alone; a time whose IQR is over 10 % of it carries a dagger, and the
    # caption says what the dagger means, so that no reader ranks two times inside their noise.
    run = runs["cuda-h100-quick"]
    _, (_, rows) = run.groups("kernel", "bfloat16")[0].passes()  # forward+backward, d_h = 64
    text = tables.time_table(rows, "forward+backward")
    ts = sorted({r.t for r in rows})
    marked = {(cells[0].strip("`"), t) for cells in body_rows(text) for t, c in zip(ts, cells[1:]) if c.endswith("†")}
    expected = {(r.variant, r.t) for r in rows if r.status == "ok" and r.iqr_s > 0.1 * r.median_s}
    assert expected and marked == expected
    assert "† a noisy time, its IQR more than 10% of the median." in text
    delta = tables.delta_table(runs["cpu-delta"])  # every time within 10 %: no dagger, no note
    assert "†" not in delta


def test_detail_table_is_fastest_first_with_the_ratio_in_its_own_column(runs):
    run = runs["cuda-h100-quick"]
    group = run.groups("kernel", "bfloat16")[0]
    (_, rows), *_ = group.passes()
    text = tables.detail_table(rows, 16384, run.doc["peaks"]["bfloat16"])
    header = [ln for ln in text.splitlines() if ln.startswith("|")][0]
    assert "× fastest" in header and "GPU kernels" in header and "989.5 TFLOP/s" in text
    times = [float(r[1]) for r in body_rows(text)]
    assert times == sorted(times) and body_rows(text)[0][3] == "1.00×"


def test_a_gpu_runs_detail_tables_are_at_its_longest_t(runs):
    # at t = 1024 a GPU call takes a tenth of a millisecond and the quick runs' times are noisiest
    from book.appendix.page import _detail_t

    for stem in ("cuda-h200", "cuda-h100-quick"):
        assert _detail_t(runs[stem], [1024, 4096, 16384]) == 16384, stem
        assert _detail_t(runs[stem], [1024]) == 1024, stem  # a group timed at one t only
    text = groups_markdown(runs["cuda-h100-quick"], "kernel")
    assert set(re.findall(r"Every variant at \$t = (\d+)\$", text)) == {"16384"}
    assert _detail_t(runs["cpu"], [1024, 2048, 4096]) == 1024  # a CPU run: its speed goal's t


def test_the_masks_table_recounts_scores_and_names_a_file_count_it_disagrees_with(runs):
    # The table counts every form's scores by one convention (attention.bench.masks.scores_formed);
    # a file that recorded another count for a form says so under the table, naming the form.
    run = runs["cpu-masks"]
    stale = "written under an earlier convention"
    assert stale in tables.masks_table(run) and "`flex-block-mask`" in tables.masks_table(run)
    doc = copy.deepcopy(run.doc)
    for row in doc["masks"]:
        row["scores_formed"] = scores_formed(row["variant"], torch.tensor(row["lengths"]))
    agreeing = tables.masks_table(Run(run.stem, doc))
    assert stale not in agreeing
    assert [r[1] for r in body_rows(agreeing)] == [r[1] for r in body_rows(tables.masks_table(run))]


def test_table_refuses_a_row_of_the_wrong_length():
    with pytest.raises(ValueError, match="every row needs 2 cells"):
        table(["a", "b"], [["1", "2"], ["3"]])


def test_provenance_says_where_when_with_what_and_in_how_many_runs(runs):
    run = runs["cuda-h200"]
    text = provenance_markdown(run)
    p = run.provenance
    for fact in (p["device_name"], p["driver"], p["torch"], f"CUDA {p['cuda']}", p["git"]["commit"][:7],
                 f"the book pins torch {pinned_version('torch')}", "up to 20 timed calls per point",
                 "cuDNN 9.19.0",  # torch.backends.cudnn.version() recorded 91900
                 "256 MiB buffer", "**8 runs**", "the compiled variants off"):
        assert fact in text, fact
    times = re.findall(r"^- (\d{4}-\d\d-\d\d \d\d:\d\d) UTC", text, flags=re.MULTILINE)
    assert len(times) == 8 and times == sorted(times)  # listed in the order they were measured
    assert "**Measured** from 2026-11-26 to 2026-11-30 on one NVIDIA H200" in text
    assert all(s["command"] in text for s in run.sources)


@pytest.mark.parametrize(("number", "version"), [(91900, "9.19.0"), (90100, "9.1.0"), (8902, "8.9.2")])
def test_a_cudnn_version_number_reads_as_major_minor_patch(number, version):
    # cuDNN_VERSION is major * 10000 + minor * 100 + patch from cuDNN 9 on, major * 1000 + ... before
    assert cudnn_version(number) == version


def test_every_run_shows_the_load_average_its_file_records(runs, pages):
    # The CPU page tells readers to weigh each time by how busy the machine was; they can only if
    # the load is shown: a run's own, each source run's of a merged file, each part's on its page.
    said = lambda p: f"load average {p['load_average_start'][0]:g} at the start and {p['load_average_end'][0]:g} at the end"  # noqa: E731
    for stem, run in runs.items():
        if len(run.sources) > 1:
            text = provenance_markdown(run)
            assert all(said(s) in text for s in run.sources), stem
        else:
            assert said(run.provenance) in pages[PAGES[stem]], stem
    assert said(runs["cpu"].provenance) + " (over one minute), on 2 CPUs" in provenance_markdown(runs["cpu"])


def test_every_cpu_run_states_its_threads_cpus_and_affinity(runs, pages):
    for stem, run in runs.items():
        p = run.provenance
        if run.gpu:
            continue
        threads = f"{p['torch_threads']} thread{'' if p['torch_threads'] == 1 else 's'}"
        if p["cpu_affinity"] < p["cpu_count"]:
            said = f"{threads}, the process pinned to {p['cpu_affinity']} of {p['cpu_count']} CPUs"
        else:
            said = f"{threads} of {p['cpu_count']} CPUs"
        assert f"on {run.device}, {said}" in pages["cpu.md"], stem
    assert runs["cpu-sparse"].provenance["cpu_affinity"] == 1  # the run pinned to one core


def test_the_cpu_page_says_which_processor_ran_which_part(runs, pages):
    # Its note names the processors from the files; this holds its grouping of the parts to them.
    device = lambda stem: runs[stem].provenance["device_name"]  # noqa: E731
    assert device("cpu") == device("cpu-masks") == device("cpu-linear") != device("cpu-sparse")
    assert device("cpu-sparse") == device("cpu-delta") == device("cpu-distributed")
    assert f"the masks and linear attention on an {device('cpu')}, the decay" in pages["cpu.md"]


def _file_rows(text: str) -> dict[str, list[str]]:
    """The files table's rows by file name: its six provenance cells."""
    rows = {}
    for line in text.splitlines():
        match = re.match(r"^\| \[`([^`]+)`\]\(results/[^)]+\) \| (.*) \|$", line)
        if match:
            rows[match[1]] = match[2].split(" | ")
    return rows


def test_every_results_file_shows_its_provenance_or_says_not_recorded(pages):
    rows = _file_rows(pages["kernel-timings.md"])
    files = results_files()
    assert len(files) >= 14 and sorted(rows) == sorted(f.relative_to(RESULTS).as_posix() for f in files)
    for path in files:
        cells = rows[path.relative_to(RESULTS).as_posix()]
        assert len(cells) == len(PROVENANCE_FIELDS) and all(cells), path
        doc = json.loads(path.read_text()) if path.suffix == ".json" else {}
        p = doc.get("provenance")
        if p:  # what the file records is shown; nothing is "not recorded" that it records
            assert p["torch"] in cells[2] and p["device_name"] in cells[4] and p["command"] in cells[5]
            assert NOT_RECORDED not in cells[:3] + cells[4:]
        elif path.suffix == ".json":  # a file with no provenance block says so in every column
            assert cells == [NOT_RECORDED] * 6, path
    backward = rows["runs/h200-2026-11-26/triton-check-backward.json"]
    assert backward == [NOT_RECORDED] * 6  # the backward check's file records nothing
    log = rows["runs/h200-2026-11-26/triton-check-forward.log"]
    assert log[2:5] == ["2.11.0+cu130", "3.6.0", "NVIDIA H200"] and log[1] == NOT_RECORDED
    # an older measure.sh wrote the three as plain words on the log's first line
    log = rows["runs/h200-2026-11-30/measure.log"]
    assert log[2:5] == ["2.11.0+cu130", "3.6.0", "NVIDIA H200"] and log[1] == NOT_RECORDED


def test_an_unverified_tree_is_labelled_wherever_its_commit_is_printed(runs, pages):
    assert commit_words({"commit": "f9d0804", "dirty": None, "source": "ATTENTION_COMMIT"}).startswith(
        "`f9d0804`, unverified tree")
    assert commit_words({"commit": "409322dd04", "dirty": None}).endswith("git status could not be read")
    checked = commit_words({"commit": "409322dd04", "dirty": False, "source": "a copy, every file checked"})
    assert checked == "`409322d` (a copy, every file checked)"  # a checked copy is no unverified tree
    assert commit_words({"commit": "409322dd04", "dirty": False}) == "`409322d`"
    assert commit_words({"commit": "409322dd04", "dirty": True}) == "`409322d` with local changes"
    assert commit_words(None) == NOT_RECORDED
    unverified = 0
    for path in results_files():
        p = json.loads(path.read_text()).get("provenance", {}) if path.suffix == ".json" else {}
        for record in [p] + p.get("sources", []):
            git = record.get("git") or {}
            if git.get("commit") and git.get("dirty") is None:  # a commit nothing compared the tree with
                unverified += 1
                label = f"`{git['commit'][:7]}`, unverified tree"
                assert label in file_provenance(path)["commit"], path
                assert label in pages["kernel-timings.md"]
                if path.parent == RESULTS:  # a run with a page prints it there too
                    assert label in pages[PAGES[path.stem]]
    assert unverified >= 2  # the autotuned Triton run, alone and as a source of cuda-h200.json
    assert "unverified tree" in provenance_markdown(runs["cuda-h200"])
    assert "unverified tree" not in provenance_markdown(runs["cpu-masks"])


def test_a_part_section_states_its_commit(runs):
    # a part shown on its own (the CPU page's sparse and delta sections) names the commit measured
    for stem, part in (("cpu-sparse", "sparse"), ("cpu-delta", "delta")):
        head = part_markdown(runs[stem], part).split("Command:")[0]
        assert commit_words(runs[stem].provenance["git"]) in head


def test_the_runs_table_gives_a_merged_files_dates_as_a_range(runs):
    rows = {ln.split("|")[1].strip(): ln.split("|")[2].strip() for ln in runs_table(runs).splitlines()
            if ln.startswith("| [")}
    assert rows["[NVIDIA H200](gpu-h200.md)"] == "2026-11-26 to 2026-11-30"
    assert rows[f"[{runs['cpu'].device}](cpu.md)"] == runs["cpu"].date


def test_the_measured_line_names_only_commits_whose_runs_gave_rows(runs):
    # the autotuned Triton run of 2026-11-26 (f9d0804) kept no row: every one was measured again
    measured, _, rest = provenance_markdown(runs["cuda-h200"]).partition("\n")
    assert "`409322d`" in measured and "`90e3841`" in measured
    assert "`f9d0804`" not in measured
    assert "`f9d0804`" in rest  # the list of source runs still names it


def test_each_source_run_states_its_own_timing_settings(runs):
    text = provenance_markdown(runs["cuda-h200"])
    listed = re.findall(r"^- (\S+ \d\d:\d\d) UTC: .*; timing: (.*?); commit", text, flags=re.MULTILINE)
    assert len(listed) == 8
    timed = dict(listed)
    assert timed["2026-11-26 07:51"].startswith("the `quick` preset: up to 10 timed calls")
    assert timed["2026-11-30 17:03"].startswith("the `quick` preset: up to 10 timed calls")
    assert timed["2026-11-26 05:06"].startswith("up to 20 timed calls")
    quick = facts.fill("{{ timing() }}", runs, "cuda-h100-quick")
    for variant in ("triton", "sdpa[flash]", "sdpa[cudnn]"):  # the H100 page says these match
        assert quick == facts.fill(f"{{{{ cuda-h200: timing({variant}) }}}}", runs, "cuda-h100-quick")


def test_the_kernel_that_ran_says_whether_the_profiler_named_it(runs):
    run = runs["cuda-h200"]
    cells = {row[0]: row[-1] for row in body_rows(tables.detail_table(
        [r for r in run.rows if r.level == "kernel" and r.d_h == 64 and r.pass_name == "forward"], 16384,
        run.doc["peaks"]["bfloat16"]))}
    assert cells["`sdpa[cudnn]`"] == "sdpa: cuDNN"  # read from the profiler
    assert cells["`triton`"] == "Triton kernel (declared)" and cells["`flex`"].endswith("(declared)")
    assert cells["`flash_attention`"] == "tiled loop in PyTorch (declared)"


def test_a_run_that_did_not_finish_says_so(runs):
    doc = copy.deepcopy(runs["cuda-h100-quick"].doc) | {"complete": False, "stopped": "time budget spent"}
    assert '!!! warning "This run did not finish"' in provenance_markdown(Run("cut", doc))


def test_gpu_goals_are_read_off_the_rows(runs):
    run = runs["cuda-h200"]
    forward, training_cudnn, training_flash = body_rows(tables.gpu_goals_table(run))
    for (baseline, pass_name, target, t_min), found in zip(tables.GPU_GOALS, (forward, training_cudnn, training_flash)):
        speeds = [run.row(baseline, pass_name, t=t, d_h=d, dtype=dtype).median_s
                  / run.row("triton", pass_name, t=t, d_h=d, dtype=dtype).median_s
                  for t in (4096, 8192, 16384) for d in (64, 128) for dtype in ("bfloat16", "float16")
                  if run.row("triton", pass_name, t=t, d_h=d, dtype=dtype)]
        assert t_min == 4096 and found[0] == f"`triton` ÷ `{baseline}`, speed, {pass_name}, $t \\geq 4096$"
        assert found[1] == f"**{min(speeds):.3f}** … {max(speeds):.3f} (6 points)"
        assert found[2:] == [f"≥ {target:g}", "met" if min(speeds) >= target else "missed"]
    assert [goal[2] for goal in tables.GPU_GOALS] == [0.9, 0.8, 1.2]
    (_, _, untimed) = body_rows(tables.gpu_goals_table(runs["cuda-h100-quick"]))
    assert untimed[1:] == ["—", "≥ 1.2", "not measured in this run"]  # that run's kernel had no backward


def test_a_layer_goal_measured_in_several_dtypes_names_each_rows_dtype(runs):
    speed = runs["cuda-h100-quick"].doc["goals"]["speed"]
    assert {g["dtype"] for g in speed} == {"bfloat16", "float16", "float32"}
    rows = [r for r in body_rows(tables.goals_table(runs["cuda-h100-quick"])) if "`torch-mha`" in r[0]]
    assert [(r[0].split(", ")[-1], r[1], r[2]) for r in rows] == [
        (g["dtype"], g["pass"], f"{g['ratio_fused_sdpa_to_torch_mha']:.3f}") for g in speed]
    assert "$b = 16$, bfloat16, float16, float32;" in tables.goals_table(runs["cuda-h100-quick"])
    one = [r[0] for r in body_rows(tables.goals_table(runs["cpu"])) if "`torch-mha`" in r[0]]
    assert one and all(r == "`fused-sdpa` ÷ `torch-mha`" for r in one)  # one dtype: nothing to tell apart


def test_every_figure_a_page_links_is_drawn_by_the_figure_module(pages):
    drawn = set(figures_hook.load_figures())
    linked = {name for text in pages.values() for name in re.findall(r"\]\(\.\./figures/(appendix-[a-z0-9-]+)\.svg[ )]", text)}
    assert linked and linked <= drawn
    assert {n for n in drawn if n.startswith("appendix-")} == linked  # and none is drawn for nothing


def test_a_group_measured_at_one_t_gets_tables_and_no_figure(runs):
    from book.appendix.plots import figure_names

    run = runs["cuda-h200"]
    (one,) = [g for g in run.groups("kernel", "float16")]  # the quick run was cut off after t = 1024
    assert {r.t for r in one.rows} == {1024}
    names = figure_names(run)
    assert not [n for n in names if one.slug in n] and "appendix-cuda-h200-layer-dh64-float16-time" in names
    assert "### The kernels in float16" in groups_markdown(run, "kernel")


def test_an_appendix_figure_keeps_its_text_legible_on_a_phone(runs):
    from book.appendix.plots import figure_names

    hook = figures_hook

    (alt, make), *_ = figure_names(runs["cuda-h200"]).values()
    svg = hook.render_svg("appendix-test", make).decode()
    width, smallest = hook.text_sizes(svg)
    assert "<text" in svg and alt
    # the width at which the smallest text is 9 px fits a 390 px phone's column: no scrolling
    assert width * hook.MIN_TEXT_PX / smallest <= 358


def test_the_fixture_without_peaks_or_goals_still_renders():
    doc = json.loads(FIXTURE.read_text())  # written before peaks and decoding were measured
    text = run_markdown(Run("cpu-tiny", doc))
    assert "## Attention kernels" in text and "## Decoding" not in text and "#### Roofline" not in text


@pytest.mark.parametrize("nbytes, text", [
    (512, "512 B"), (1000, "1000 B"), (1536, "1.5 KiB"), (17723392, "17 MiB"), (6510305280, "6.1 GiB"), (None, "—"),
])
def test_sizes_are_in_binary_units(nbytes, text):
    assert readable_bytes(nbytes) == text


def test_headings_write_their_math_as_math(pages):
    headings = [h for text in pages.values() for h in re.findall(r"^#+ .*$", text, flags=re.MULTILINE)]
    assert any("$d_h = " in h for h in headings)
    for heading in headings:  # outside $...$, no TeX
        outside = re.sub(r"\$[^$]+\$", "", heading)
        assert "d_h" not in outside and "\\" not in outside, heading


def test_a_number_inside_math_keeps_its_thousands_comma_tight(pages):
    # TeX sets a space after a bare comma (16, 384); the generator writes 16{,}384 inside $...$.
    for name, text in pages.items():
        for line in text.splitlines():
            if "$$" in line:
                continue
            for formula in line.split("$")[1::2]:
                assert not re.search(r"\d,\d", formula), f"{name}: ${formula}$"
    assert "$b \\cdot t = 16{,}384$ tokens" in pages["gpu-h100.md"]


def test_no_large_number_on_the_pages_is_written_with_an_exponent(runs, pages):
    # 1.4e+03 tokens/s reads as a formula: from 1,000 up a value is a whole number with separators
    # (small errors keep their exponent, 1.9e-03).
    for name, text in pages.items():
        assert not re.search(r"\de\+\d", text), name
    tiny = next(row for row in body_rows(tables.decode_table(runs["cpu"])) if row[0] == "`tiny`")
    fast = next(r for r in runs["cpu"].decode if r.model == "tiny" and r.use_cache).tokens_per_s
    assert fast >= 1000 and tiny[2] == f"{fast:,.0f}"
    long = tables.roofline_table(runs["cuda-h100-quick"], "bfloat16", 16384, "forward")
    assert "| 4,096 |" in long  # t / (2s) FLOP per byte: a fused kernel at t = 16384 in bfloat16


def test_the_product_names_goals_not_issue_numbers():
    # What the package, its --help and the tooling say is about the product, not the tracker.
    places = [REPO / "src", REPO / "tools"]  # the package; the tooling, its hooks and figures
    found = [f"{path.relative_to(REPO)}: {m.group(0)}" for place in places for path in place.rglob("*.py")
             for m in re.finditer(r"\bissues? #?\d+", path.read_text(), flags=re.IGNORECASE)]
    assert found == []
    from attention.bench.cli import build_parser

    assert not re.search(r"\bissues? #?\d+", build_parser().format_help(), flags=re.IGNORECASE)


def test_every_benchmark_part_names_a_renderer_that_renders_its_rows(runs):
    sample = {part.name: next((r for r in runs.values() if any(k.read(r.doc) for k in part.kinds)), None)
              for part in PARTS}
    for part in PARTS:
        render = renderer(part)
        assert callable(render), f"{part.name}: {part.renderer} is not a function"
        if sample[part.name] is not None:
            assert render(sample[part.name]).strip(), f"{part.name}: {part.renderer} rendered nothing"


def test_the_overview_lists_the_parts_that_run_by_default_and_the_others(pages):
    said = re.search(r"`--parts` picks what runs: (.*?) by default, and\s+(.*?) only when named",
                     pages["kernel-timings.md"], flags=re.DOTALL)
    assert said, "the overview no longer says which parts run by default"
    names = lambda text: re.findall(r"`([a-z]+)`", text)  # noqa: E731
    assert names(said[1]) == [p.name for p in PARTS if p.default]
    assert names(said[2]) == [p.name for p in PARTS if not p.default]


def test_a_marker_of_an_unknown_part_stops_the_build(runs):
    with pytest.raises(ValueError, match="no benchmark part 'novel'"):
        fill_markers("<!-- timings:novel cpu -->", runs)


def test_a_part_not_measured_yet_says_so_until_its_file_exists():
    # cpu-sparse.json is listed in PAGES: without the file its marker becomes a note, with it the tables.
    marker = "<!-- timings:sparse cpu-sparse -->"
    note, _ = fill_markers(marker, {})
    assert "Not measured yet" in note and "`results/cpu-sparse.json`" in note and "--parts sparse" in note
    doc = json.loads((REPO / "tests" / "fixtures" / "bench" / "cpu-sparse-tiny.json").read_text())
    filled, _ = fill_markers(marker, {"cpu-sparse": Run("cpu-sparse", doc)})
    assert "Not measured yet" not in filled and "| `dsa-gathered` |" in filled
    assert "`dsa-indexer` at $t = 32$: skipped" in filled  # no backward pass through the indexer
    with pytest.raises(ValueError, match="no sparse rows in cpu-novel.json"):  # a stem no page expects
        fill_markers("<!-- timings:sparse cpu-novel -->", {})
