"""The decode part of the benchmark (attention.bench.decode): tokens/s with and without the KV
cache, checked equal first, and the cache's allocated bytes against the formula."""

import copy
import json

import pytest
import torch

from attention import TinyTransformer
from attention.bench import validate_results
from attention.bench.decode import TINY, measure_decode
from book.chapters import chapters
from book.constants import REPO

FIXTURE = REPO / "tests/fixtures/bench/cpu-tiny.json"
SMALL = {"vocab_size": 16, "d_model": 8, "num_heads": 2, "num_layers": 3, "context_length": 24}


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return measure_decode("small", SMALL, prompt_tokens=2, new_tokens=5, repeats=3, seed=0)


def test_one_row_without_and_one_with_the_cache(rows):
    assert [r["use_cache"] for r in rows] == [False, True]
    for r in rows:
        assert r["config"] == SMALL and (r["prompt_tokens"], r["new_tokens"]) == (2, 5)
        assert r["tokens_per_s"] == pytest.approx(5 / r["median_s"]) and r["repeats"] == 3
        assert r["iqr_s"] >= 0 and r["same_tokens"] is True


def test_cache_bytes_are_the_allocated_tensors(rows):
    # generate keeps prompt + new - 1 = 6 tokens: keys and values (b, h, 6, d_h) in float32, per layer
    model = TinyTransformer(**SMALL)
    cache = model.new_cache(1, 6)
    tensors = [x for layer in cache.layers for x in vars(layer).values() if isinstance(x, torch.Tensor)]
    allocated = sum(x.nbytes for x in tensors if x.is_floating_point())
    want = 2 * 6 * SMALL["num_layers"] * SMALL["num_heads"] * (SMALL["d_model"] // 2) * 4
    assert allocated == want
    for r in rows:
        assert r["cache_bytes_measured"] == r["cache_bytes_formula"] == want


def test_rows_follow_the_schema(rows):
    doc = json.loads(FIXTURE.read_text()) | {"decode": rows}
    validate_results(doc)


def test_different_tokens_are_an_error_not_a_speed(monkeypatch):
    generate = TinyTransformer.generate

    def wrong_when_cached(self, idx, max_new_tokens, use_cache=True):
        out = generate(self, idx, max_new_tokens, use_cache=use_cache)
        return (out + 1) % self.vocab_size if use_cache else out

    monkeypatch.setattr(TinyTransformer, "generate", wrong_when_cached)
    with pytest.raises(RuntimeError, match="different tokens"):
        measure_decode("small", SMALL, prompt_tokens=2, new_tokens=3, repeats=1)


def test_tiny_is_the_chapter_9_model():
    text = "".join((REPO / "docs" / uri).read_text() for uri in chapters()["09-transformer"])
    assert ("TinyTransformer(vocab_size={vocab_size}, d_model={d_model}, num_heads={num_heads}, "
            "num_layers={num_layers},").format(**TINY) in text
    assert f'context_length={TINY["context_length"]}, positions="{TINY["positions"]}", mlp={TINY["mlp"]})' in text


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    def test_bad_counts_are_refused(self):
        with pytest.raises(ValueError, match="new_tokens must be a positive integer, got 0"):
            measure_decode("small", SMALL, new_tokens=0)

    def test_the_schema_names_the_field_out_of_place(self, rows):
        doc = json.loads(FIXTURE.read_text()) | {"decode": rows}
        broken = copy.deepcopy(doc)
        broken["decode"][1]["tokens_per_s"] = 0
        with pytest.raises(ValueError, match=r"decode\[1\]\.tokens_per_s.*got 0"):
            validate_results(broken)
        broken = copy.deepcopy(doc)
        del broken["decode"][0]["config"]["num_layers"]
        with pytest.raises(ValueError, match=r"decode\[0\]\.config: expected key 'num_layers'.*got keys \["):
            validate_results(broken)
