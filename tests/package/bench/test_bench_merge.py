"""``python -m attention.bench merge``: one results file from several runs of one device.

Each rule of the merge is tested on two runs cut from the committed fixture (a real run of the
harness): disjoint rows merge, a row measured twice is refused unless the newer run is preferred,
a measured row beats a skipped one, runs of another device or meaning are refused, and every
source run's provenance survives in order.
"""

import copy
import json

import pytest

from attention.bench import validate_results
from attention.bench.cli import main
from attention.bench.merge import MergeError, merge_results
from attention.bench.parts import ROW_KINDS
from book.appendix.load import RESULTS
from book.constants import REPO

FIXTURE = REPO / "tests" / "fixtures" / "bench" / "cpu-tiny.json"
SPARSE_FIXTURE = REPO / "tests" / "fixtures" / "bench" / "cpu-sparse-tiny.json"


@pytest.fixture()
def run() -> dict:
    return json.loads(FIXTURE.read_text())


def split(doc: dict, date: str, goals: bool = False, **where) -> dict:
    """A copy of ``doc`` whose rows are those matching ``where``, dated ``date``; the memory goal
    (measured once in the fixture) only with ``goals``."""
    part = copy.deepcopy(doc)
    part["results"] = [r for r in part["results"] if all(r[k] == v for k, v in where.items())]
    part["goals"]["memory"] = part["goals"]["memory"] if goals else None
    part["provenance"]["date_utc"] = date
    part["provenance"]["command"] = f"run of {where}"
    return part


def keys(doc: dict) -> list[tuple]:
    return [(r["level"], r["variant"], r["pass"], r["t"]) for r in doc["results"]]


def test_disjoint_runs_merge_into_one_valid_file_that_keeps_every_provenance(run):
    a = split(run, "2026-11-26T05:00:00+00:00", t=64)
    b = split(run, "2026-11-26T05:10:00+00:00", t=128)
    merged = merge_results([("a.json", a), ("b.json", b)], command="python -m attention.bench merge a b")
    validate_results(merged)
    assert sorted(keys(merged)) == sorted(keys(run))
    assert {r["run"] for r in merged["results"] if r["t"] == 64} == {0}
    assert {r["run"] for r in merged["results"] if r["t"] == 128} == {1}
    sources = merged["provenance"]["sources"]
    assert [s["file"] for s in sources] == ["a.json", "b.json"]
    assert [s["command"] for s in sources] == ["run of {'t': 64}", "run of {'t': 128}"]
    assert all(s["git"] == run["provenance"]["git"] for s in sources)
    assert merged["provenance"]["date_utc"] == "2026-11-26T05:00:00+00:00"  # when measuring began
    assert merged["settings"]["seq_lens"] == [64, 128]
    assert merged["complete"] is True


def test_a_row_measured_twice_is_refused_unless_the_newest_is_preferred(run):
    old = split(run, "2026-11-26T05:00:00+00:00", t=64)
    new = split(run, "2026-11-26T06:00:00+00:00", t=64)
    for row in new["results"]:
        if row["status"] == "ok":
            row["median_s"] *= 2
    with pytest.raises(MergeError, match=r"row \(level=layer, variant=wrapper.*measured in both old.json and new.json"):
        merge_results([("old.json", old), ("new.json", new)])
    for order in ([("old.json", old), ("new.json", new)], [("new.json", new), ("old.json", old)]):
        merged = merge_results(order, prefer_newest=True)
        by_key = {k: r for k, r in zip(keys(merged), merged["results"])}
        for row in new["results"]:
            if row["status"] == "ok":  # the newer run's time, whichever file came first
                assert by_key[row["level"], row["variant"], row["pass"], row["t"]]["median_s"] == row["median_s"]


def test_a_measured_row_replaces_one_that_was_not_measured(run):
    skipped = split(run, "2026-11-26T07:00:00+00:00", t=64)  # the newer run, but without a time
    for row in skipped["results"]:
        row |= {"status": "skipped", "reason": "torch.compile turned off (--no-compile)", "median_s": None}
    measured = split(run, "2026-11-26T05:00:00+00:00", t=64)
    for order in ([("s.json", skipped), ("m.json", measured)], [("m.json", measured), ("s.json", skipped)]):
        merged = merge_results(order)  # no --prefer needed: only one run measured each row
        for got, want in zip(merged["results"], measured["results"]):
            if want["status"] == "ok":
                assert got["status"] == "ok" and got["median_s"] == want["median_s"]
            else:  # neither run measured it (unsupported here): the newer run's row
                assert got["status"] == "skipped"
        assert any(r["status"] == "ok" for r in merged["results"])


@pytest.mark.parametrize(
    "section, field, value",
    [
        ("provenance", "device_name", "NVIDIA H200"),
        ("provenance", "torch", "2.11.0+cu130"),
        ("settings", "d_model", 128),
        ("settings", "tokens", 512),
    ],
)
def test_runs_of_another_device_version_or_meaning_are_refused(run, section, field, value):
    other = split(run, "2026-11-26T06:00:00+00:00", t=128)
    other[section][field] = value
    with pytest.raises(MergeError, match=rf"cannot merge a.json and b.json: {section}.{field} differs"):
        merge_results([("a.json", split(run, "2026-11-26T05:00:00+00:00", t=64)), ("b.json", other)])


def test_goals_and_decode_rows_follow_the_same_rule(run):
    a = split(run, "2026-11-26T05:00:00+00:00", goals=True, t=64)
    b = split(run, "2026-11-26T06:00:00+00:00", goals=True, t=128)
    assert a["goals"]["memory"] and b["goals"]["memory"]  # both runs measured the memory goal
    with pytest.raises(MergeError, match="memory goal .* measured in both a.json and b.json"):
        merge_results([("a.json", a), ("b.json", b)])
    b["goals"]["memory"]["fraction"] = 0.5
    merged = merge_results([("a.json", a), ("b.json", b)], prefer_newest=True)
    assert merged["goals"]["memory"]["fraction"] == 0.5 and merged["goals"]["memory"]["run"] == 1
    a["goals"]["memory"], b["goals"]["memory"] = None, None
    decode = {"model": "tiny", "use_cache": True, "prompt_tokens": 4, "new_tokens": 3}
    a["decode"], b["decode"] = [decode | {"tokens_per_s": 1.0}], [decode | {"tokens_per_s": 2.0}]
    with pytest.raises(MergeError, match="decode row .* measured in both"):
        merge_results([("a.json", a), ("b.json", b)])


def test_an_incomplete_run_makes_an_incomplete_merge(run):
    a = split(run, "2026-11-26T05:00:00+00:00", t=64) | {"complete": False}
    b = split(run, "2026-11-26T06:00:00+00:00", t=128)
    merged = merge_results([("a.json", a), ("b.json", b)])
    assert merged["complete"] is False and [s["complete"] for s in merged["provenance"]["sources"]] == [False, True]


def test_a_merged_file_is_refused_as_a_source(run):
    # its sources were dropped and its rows' run indices pointed at the wrong files
    a, b = split(run, "2026-11-26T05:00:00+00:00", t=64), split(run, "2026-11-26T06:00:00+00:00", t=128)
    merged = merge_results([("a.json", a), ("b.json", b)])
    with pytest.raises(MergeError, match=r"m\.json is a merged file \(provenance\.sources lists 2 runs\)"):
        merge_results([("m.json", merged), ("b.json", b)])


def test_a_stopped_runs_reason_is_kept_in_its_sources_entry(run):
    # merge kept "complete": false and dropped why the run stopped
    a = split(run, "2026-11-26T05:00:00+00:00", t=64) | {"complete": False, "stopped": "time budget spent"}
    b = split(run, "2026-11-26T06:00:00+00:00", t=128)
    sources = merge_results([("a.json", a), ("b.json", b)])["provenance"]["sources"]
    assert sources[0]["stopped"] == "time budget spent" and "stopped" not in sources[1]


def test_command_line_writes_the_merged_file_and_names_what_is_wrong(run, tmp_path, capsys):
    a, b = split(run, "2026-11-26T05:00:00+00:00", t=64), split(run, "2026-11-26T06:00:00+00:00", t=128)
    for name, doc in (("a.json", a), ("b.json", b)):
        (tmp_path / name).write_text(json.dumps(doc))
    out = tmp_path / "merged.json"
    main(["merge", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--output", str(out)])
    written = json.loads(out.read_text())
    validate_results(written)
    assert written["provenance"]["command"].startswith("python -m attention.bench merge ")
    b["provenance"]["device_name"] = "another machine"
    (tmp_path / "b.json").write_text(json.dumps(b))
    with pytest.raises(SystemExit):
        main(["merge", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--output", str(out)])
    assert "provenance.device_name differs" in capsys.readouterr().err
    (tmp_path / "b.json").write_text("{}")
    with pytest.raises(SystemExit):
        main(["merge", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--output", str(out)])
    assert "b.json: results: expected key 'schema'" in capsys.readouterr().err


def every_part() -> dict:
    """A document with rows of every kind of every part: the committed CPU run (sweep, goals,
    decode, peaks) with the masks, linear, delta and distributed rows of the other CPU results
    files, and the sparse rows of a tiny real run (tests/fixtures/bench/cpu-sparse-tiny.json)."""
    doc = json.loads((RESULTS / "cpu.json").read_text())
    for path, key in ((RESULTS / "cpu-masks.json", "masks"), (RESULTS / "cpu-linear.json", "linear"),
                      (RESULTS / "cpu-delta.json", "delta"), (RESULTS / "cpu-distributed.json", "distributed"),
                      (SPARSE_FIXTURE, "sparse")):
        other = json.loads(path.read_text())
        doc[key], doc["methods"][key] = other[key], other["methods"][key]
    return doc


def test_the_sample_holds_rows_of_every_part():
    doc = every_part()
    validate_results(doc)
    empty = [kind.key for kind in ROW_KINDS if not kind.read(doc)]
    assert not empty, f"every_part() has no rows of {empty}: add a sample of each new part's rows"


def test_merging_two_files_that_hold_every_part_loses_no_row():
    whole = every_part()
    a, b = copy.deepcopy(whole), copy.deepcopy(whole)
    for kind in ROW_KINDS:  # alternate rows to a and b; a lone object to a
        rows = kind.read(whole)
        kind.write(a, rows[::2])
        kind.write(b, rows[1::2])
    b["provenance"]["date_utc"] = "2099-01-01T00:00:00+00:00"
    merged = merge_results([("a.json", a), ("b.json", b)])
    validate_results(merged)
    for kind in ROW_KINDS:  # a merge numbers each row's source run, in ``run``
        got, want = ([json.dumps({k: v for k, v in r.items() if k != "run"}, sort_keys=True) for r in kind.read(d)]
                     for d in (merged, whole))
        assert sorted(got) == sorted(want), f"merge changed or lost {kind.key} rows"
    assert merged["methods"]["masks"] == whole["methods"]["masks"]


@pytest.mark.parametrize("where", ["top", "goals"])
def test_a_kind_of_row_no_part_knows_is_refused_not_dropped(where):
    doc = every_part()
    (doc if where == "top" else doc["goals"])["novel"] = [{"t": 1}]
    with pytest.raises(MergeError, match=r"a.json holds \['(goals\.)?novel'\], which no benchmark part knows"):
        merge_results([("a.json", doc)])


@pytest.mark.parametrize(
    "section, field, value",
    [
        ("provenance", "device_type", "cuda"),
        ("provenance", "float32_matmul_precision", "high"),
        ("provenance", "tf32_matmul", True),
        ("settings", "heads", 4),
        ("settings", "batch", 8),
        # a time replayed from a CUDA graph leaves the host's launch overhead out: the merged file's one
        # methods.timing would describe the rows of one run only
        ("settings", "cuda_graphs", True),
        # a CPU time on 1 thread and on 2 are different measurements, and the merged provenance
        # kept the first run's torch_threads only
        ("provenance", "torch_threads", 64),
    ],
)
def test_every_setting_that_changes_a_rows_meaning_is_compared(run, section, field, value):
    a = split(run, "2026-11-26T05:00:00+00:00", t=64)
    b = split(run, "2026-11-26T06:00:00+00:00", t=128)
    b[section][field] = value
    with pytest.raises(MergeError, match=rf"{section}\.{field} differs"):
        merge_results([("a.json", a), ("b.json", b)])


def test_a_file_from_before_cuda_graphs_merges_with_one_timed_without_them(run):
    a = split(run, "2026-11-26T05:00:00+00:00", t=64)
    b = split(run, "2026-11-26T06:00:00+00:00", t=128)
    a["settings"].pop("cuda_graphs", None)  # written before the option existed: no graphs
    b["settings"]["cuda_graphs"] = False
    assert len(merge_results([("a.json", a), ("b.json", b)])["results"]) == len(a["results"] + b["results"])


def _changed(value: object) -> object:
    """Another value of the same type: what a second run of a neighbouring problem would hold."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    return f"{value}-other"


def _without_rows(doc: dict) -> dict:
    """``doc`` with no rows of any kind."""
    for kind in ROW_KINDS:
        *parents, last = kind.key.split(".")
        holder = doc
        for parent in parents:
            holder = holder[parent]
        holder[last] = {"one": None, "named": {}, "list": []}[kind.shape]
    return doc


def _one_row_each(kind, rows: tuple[dict, dict]) -> tuple[dict, dict]:
    """Two documents of every_part() that hold no rows but ``rows``: one in a, one in b (newer)."""
    a, b = _without_rows(every_part()), _without_rows(every_part())
    for doc, row in zip((a, b), rows):
        kind.write(doc, [row])
    b["provenance"]["date_utc"] = "2099-01-01T00:00:00+00:00"
    return a, b


# What tells two problems apart, by kind of row: written out here, not read from the parts, so that a
# merge key that forgot a field fails the test below.
PROBLEM = {
    "peaks": ("name",),
    "goals.ratios": ("name", "pass", "dtype"),
    "goals.memory": ("t", "b", "h", "d_h", "dtype"),
    "decode": ("model", "use_cache", "prompt_tokens", "new_tokens"),
    "results": ("level", "variant", "pass", "dtype", "b", "t", "h", "d_h"),
    "masks": ("variant", "t", "pass", "dtype", "h", "d_h"),
    "linear": ("variant", "pass", "dtype", "b", "t", "h", "d_h", "chunk_size"),
    "delta": ("variant", "pass", "dtype", "b", "t", "h", "d_h", "chunk_size"),
    "sparse": ("variant", "pass", "dtype", "b", "t", "h", "d_h", "top_k", "block_size", "window"),
    "distributed": ("scheme", "sharding", "world_size", "pass", "dtype", "b", "t", "h", "h_kv", "d_h"),
}


def test_every_kind_of_row_says_what_tells_its_problems_apart():
    assert sorted(PROBLEM) == sorted(kind.key for kind in ROW_KINDS), "add the new kind of row to PROBLEM"


@pytest.mark.parametrize("kind", ROW_KINDS, ids=lambda kind: kind.key)
def test_rows_that_differ_in_any_field_of_their_problem_are_both_kept(kind):
    # a merge key that ignored a field would take two problems for one and drop (or refuse) one
    row = next(r for r in kind.read(every_part()) if kind.measured(r))
    for field in PROBLEM[kind.key]:
        other = row | {field: _changed(row.get(field))}
        a, b = _one_row_each(kind, (row, other))
        if kind.shape == "one":  # a file holds one memory goal: two different ones are refused
            with pytest.raises(MergeError, match=rf"{kind.what}s of different problems"):
                merge_results([("a.json", a), ("b.json", b)])
            continue
        merged = merge_results([("a.json", a), ("b.json", b)])
        got = [(r.get(field), r["run"]) for r in kind.read(merged)] if kind.shape != "named" else None
        if kind.shape == "named":  # peaks: by name; a named entry drops its run number
            assert sorted(r["name"] for r in kind.read(merged)) == sorted([row["name"], other["name"]])
        else:
            assert got == [(row.get(field), 0), (other[field], 1)], field


@pytest.mark.parametrize("kind", ROW_KINDS, ids=lambda kind: kind.key)
def test_a_row_measured_in_both_files_is_kept_once_and_only_with_prefer_newest(kind):
    row = next(r for r in kind.read(every_part()) if kind.measured(r))
    newer = row | {k: v * 2 for k, v in row.items() if isinstance(v, float) and k not in kind.merge_key}
    a, b = _one_row_each(kind, (row, newer))
    with pytest.raises(MergeError, match=rf"{kind.what} \(.*\) is measured in both a.json and b.json"):
        merge_results([("a.json", a), ("b.json", b)])
    for order in ([("a.json", a), ("b.json", b)], [("b.json", b), ("a.json", a)]):
        got = kind.read(merge_results(order, prefer_newest=True))
        assert [{k: v for k, v in r.items() if k != "run"} for r in got] == [
            {k: v for k, v in newer.items() if k != "run"}]


# What says that a row holds a measurement, by kind: a status, or a peak's own flag.
MEASURED = {"ok": True, "failed": True, "skipped": False, "unsupported": False,
            "met": True, "missed": True, "not measured": False}


@pytest.mark.parametrize("kind", [k for k in ROW_KINDS if k.key != "decode"], ids=lambda kind: kind.key)
def test_a_measured_row_beats_an_unmeasured_one_of_every_kind_whatever_its_date(kind):
    # (a decode row has no status: every one is a measurement)
    row = kind.read(every_part())[0]
    if kind.key == "peaks":
        pairs = [(row | {"measured": True}, row | {"measured": False})]
    else:
        states = [s for s in MEASURED if (s in ("met", "missed", "not measured")) == kind.key.startswith("goals")]
        pairs = [(row | {"status": yes}, row | {"status": no}) for yes in states if MEASURED[yes]
                 for no in states if not MEASURED[no]]
    for measured, unmeasured in pairs:
        for rows in ((measured, unmeasured), (unmeasured, measured)):  # the newer run is b
            a, b = _one_row_each(kind, rows)
            got = kind.read(merge_results([("a.json", a), ("b.json", b)]))
            assert len(got) == 1 and got[0].get("status") == measured.get("status"), (kind.key, rows)
            assert got[0].get("measured", True) or kind.key != "peaks"


def test_files_without_sweep_rows_merge_into_a_valid_file():
    whole = every_part()
    a, b = copy.deepcopy(whole), _without_rows(copy.deepcopy(whole))
    a["results"], a["goals"]["speed"], b["goals"]["speed"] = [], [], []
    a["decode"], b["decode"] = whole["decode"][:2], whole["decode"][2:]
    merged = merge_results([("a.json", a), ("b.json", b)])
    validate_results(merged)
    assert merged["results"] == [] and len(merged["decode"]) == len(whole["decode"])


def test_each_source_keeps_its_own_provenance_and_settings(run):
    a = split(run, "2026-11-26T06:00:00+00:00", t=128)  # given first, measured later
    b = split(run, "2026-11-26T05:00:00+00:00", t=64)
    a["provenance"] |= {"git": {"commit": "a" * 40, "dirty": False}, "load_average_start": [1.0, 1.0, 1.0],
                        "load_average_end": [2.0, 2.0, 2.0]}
    b["provenance"] |= {"git": {"commit": "b" * 40, "dirty": True}, "load_average_start": [3.0, 3.0, 3.0],
                        "load_average_end": [4.0, 4.0, 4.0]}
    a["settings"] |= {"repeats": 5, "compile": False, "variants": None, "seq_lens": [128]}
    b["settings"] |= {"repeats": 7, "compile": True, "variants": ["mha"], "seq_lens": [64]}
    a["complete"] = True
    b.pop("complete", None)  # a file of a run before "complete" was recorded: complete
    merged = merge_results([("a.json", a), ("b.json", b)])
    sources = merged["provenance"]["sources"]
    for source, doc in zip(sources, (a, b)):
        p = doc["provenance"]
        assert {k: source[k] for k in ("date_utc", "command", "git", "load_average_start", "load_average_end")} == {
            k: p[k] for k in ("date_utc", "command", "git", "load_average_start", "load_average_end")}
        assert source["settings"] == doc["settings"] and source["complete"] is True
    assert merged["provenance"]["date_utc"] == "2026-11-26T05:00:00+00:00"  # the earliest, not the first
    # the settings cover every run: t sorted, compiled if any run compiled, all variants if any ran all
    assert merged["settings"]["seq_lens"] == [64, 128]
    assert merged["settings"]["compile"] is True and merged["settings"]["variants"] is None
    assert merged["settings"]["repeats"] == 5  # the first run's, as in its own settings


def test_a_parts_method_comes_from_the_first_run_that_has_it(run):
    a = split(run, "2026-11-26T05:00:00+00:00", t=64)
    b = split(run, "2026-11-26T06:00:00+00:00", t=128)
    a["methods"]["timing"], b["methods"]["timing"] = "a's timer", "b's timer"
    b["methods"]["decode"] = "b's decode"
    methods = merge_results([("a.json", a), ("b.json", b)])["methods"]
    assert (methods["timing"], methods["decode"]) == ("a's timer", "b's decode")


def test_speed_goals_are_recomputed_from_the_merged_rows(run):
    a = split(run, "2026-11-26T05:00:00+00:00", t=64)
    b = split(run, "2026-11-26T06:00:00+00:00", t=128)
    a["goals"]["speed"] = []  # only b's run held the goal's point
    merged = merge_results([("a.json", a), ("b.json", b)])
    assert merged["goals"]["speed"] == run["goals"]["speed"]
    assert {g["status"] for g in merged["goals"]["speed"]} == {"met"}


def test_two_different_memory_goals_are_refused_not_one_dropped(run):
    # a results file holds one memory goal: a merge that kept the first would lose a measurement
    a = split(run, "2026-11-26T05:00:00+00:00", goals=True, t=64)
    b = split(run, "2026-11-26T06:00:00+00:00", goals=True, t=128)
    b["goals"]["memory"]["t"] *= 2
    with pytest.raises(MergeError, match="memory goals of different problems in a.json and b.json"):
        merge_results([("a.json", a), ("b.json", b)], prefer_newest=True)
