"""The distributed part of the benchmark (attention.bench.distributed): ring and Ulysses on gloo
processes, checked against float64, timed, and their bytes set beside the model's."""

import copy
import json
from pathlib import Path

import pytest
import torch

from attention.bench import distributed, validate_results
from attention.bench.cli import build_parser, settings_from_args
from book.constants import REPO

FIXTURE = REPO / "tests/fixtures/bench/cpu-tiny.json"
SMALL = ["--device", "cpu", "--repeats", "3"]
SHAPE = {"b": 1, "t": 16, "h": 2, "h_kv": 2, "d_h": 8}


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    settings = settings_from_args(build_parser().parse_args(SMALL))
    return distributed.run_distributed(settings, world_sizes=(2,), shape=SHAPE)


def test_every_scheme_and_pass_checked_timed_and_counted(rows):
    assert [(r["scheme"], r["sharding"], r["pass"]) for r in rows] == [
        (scheme, sharding, p) for scheme, sharding in distributed.SCHEMES for p in distributed.PASSES]
    for r in rows:
        assert r["status"] == "ok" and r["max_rel_err"] < distributed.TOLERANCE and r["median_s"] > 0
        assert r["bytes_sent"] == r["bytes_predicted"], r
        split = r["scheme"] == "ring" and r["pass"] == "forward"
        assert (r["compute_step_s"] is not None) == split and (r["transfer_step_s"] is not None) == split


def test_rows_follow_the_schema(rows):
    doc = json.loads(FIXTURE.read_text()) | {"distributed": rows}
    validate_results(doc)


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    def test_a_shape_the_shards_cannot_split_is_refused(self):
        settings = settings_from_args(build_parser().parse_args(SMALL))
        with pytest.raises(ValueError, match=r"t a multiple of 2N.*got t=12, h=2, N=4"):
            distributed.run_distributed(settings, world_sizes=(4,), shape=SHAPE | {"t": 12})

    def test_a_gpu_device_is_refused_when_the_options_are_read(self, monkeypatch):
        # run_distributed refused it only when its turn came, after every other part had run
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        args = build_parser().parse_args(["--device", "cuda", "--parts", "sweep", "distributed"])
        with pytest.raises(ValueError, match=r"--parts distributed runs gloo processes on this CPU: expected "
                                             r"--device cpu, got cuda"):
            settings_from_args(args)

    def test_the_schema_names_the_field_out_of_place(self, rows):
        doc = json.loads(FIXTURE.read_text()) | {"distributed": rows}
        broken = copy.deepcopy(doc)
        broken["distributed"][0]["bytes_sent"] = None
        with pytest.raises(ValueError, match=r"distributed\[0\]\.bytes_sent: expected a positive number.*got None"):
            validate_results(broken)


def _reduce_nan_on_the_last_rank(rank: int, world: int, port: int, out: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    got = distributed._slowest(float("nan") if rank == world - 1 else 1e-9)
    if rank == 0:
        (Path(out) / "got.txt").write_text(repr(got))
    dist.destroy_process_group()


def test_an_error_that_is_nan_on_one_rank_reaches_the_check(tmp_path):
    """gloo's MAX kept a NaN held by rank 0 and dropped one held by rank 1: a check whose error
    was NaN on rank 1 alone saw 1e-9 on rank 0, and the row was marked ok."""
    import torch.multiprocessing as mp

    mp.start_processes(_reduce_nan_on_the_last_rank, args=(2, distributed._port(), str(tmp_path)), nprocs=2,
                       start_method="fork")
    assert (tmp_path / "got.txt").read_text() == "inf"
