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
    results = REPO / "docs" / "appendix" / "results"
    doc = json.loads((results / "cpu.json").read_text())
    for path, key in ((results / "cpu-masks.json", "masks"), (results / "cpu-linear.json", "linear"),
                      (results / "cpu-delta.json", "delta"), (results / "cpu-distributed.json", "distributed"),
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


def test_two_different_memory_goals_are_refused_not_one_dropped(run):
    # a results file holds one memory goal: a merge that kept the first would lose a measurement
    a = split(run, "2026-11-26T05:00:00+00:00", goals=True, t=64)
    b = split(run, "2026-11-26T06:00:00+00:00", goals=True, t=128)
    b["goals"]["memory"]["t"] *= 2
    with pytest.raises(MergeError, match="memory goals of different problems in a.json and b.json"):
        merge_results([("a.json", a), ("b.json", b)], prefer_newest=True)
