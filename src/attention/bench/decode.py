"""Greedy decoding, timed with and without the KV cache, and the cache's bytes against the formula.

Notation (see CONTRIBUTING.md): b batch size (1 here), t tokens, V vocabulary size, d model
width, h heads, d_h = d / h head width, n_layers blocks.

Two models, both ``TinyTransformer``: the book's tiny model (chapter 9's configuration) and a
GPT-2-small-sized one with random weights (V = 50257, d = 768, h = 12, 12 layers, context 1024;
untrained, since speed does not depend on what the weights say). Each generates ``new_tokens``
tokens after a random prompt of ``prompt_tokens``, greedily, once with ``use_cache=True`` (a
preallocated cache, one token per step) and once with ``use_cache=False`` (the whole sequence
again at every step); the two must produce the same tokens before either is reported. The time
is the wall-clock time of one ``generate`` call, prefill included, median and IQR over repeats
(at most ``repeats``, fewer once ``max_time`` seconds are spent) after a short warm-up call; tokens/s is ``new_tokens`` over that median. The cache's measured
bytes are ``model.new_cache(b, t + new_tokens - 1).nbytes``, the cache that ``generate`` allocates,
against ``kv_cache_bytes(b, t + new_tokens - 1, n_layers, h, d_h, 4)`` (float32); both rows of a
model carry them, though only the cached run allocates that cache.
"""

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from ..kv_cache import kv_cache_bytes
from ..transformer import TinyTransformer

TINY = {"vocab_size": 16, "d_model": 32, "num_heads": 2, "num_layers": 2, "context_length": 24,
        "positions": "rope", "mlp": False}
GPT2_SMALL = {"vocab_size": 50257, "d_model": 768, "num_heads": 12, "num_layers": 12,
              "context_length": 1024, "positions": "learned", "mlp": True}
MODELS = {"tiny": TINY, "gpt2-small-untrained": GPT2_SMALL}



def _quartiles(times: list[float]) -> tuple[float, float]:
    if len(times) < 2:
        return times[0], 0.0
    q1, _, q3 = statistics.quantiles(times, n=4, method="inclusive")
    return statistics.median(times), q3 - q1


def measure_decode(
    name: str, config: dict[str, Any], prompt_tokens: int = 4, new_tokens: int = 200,
    repeats: int = 3, seed: int = 123, device: torch.device = torch.device("cpu"),
    max_time: float = 60.0,
) -> list[dict[str, Any]]:
    """Two rows for one model: tokens/s without and with the KV cache (see the module docstring).

    Each is timed ``repeats`` times, but no more once ``max_time`` seconds have passed (at least
    once): the uncached GPT-2-sized run takes about a minute per call on a small CPU. ``repeats``
    in a row is the number of calls actually timed.
    """
    for key, value in (("prompt_tokens", prompt_tokens), ("new_tokens", new_tokens), ("repeats", repeats)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{key} must be a positive integer, got {value!r}")
    torch.manual_seed(seed)
    model = TinyTransformer(**config).to(device).eval()
    prompt = torch.randint(config["vocab_size"], (1, prompt_tokens), device=device)  # (b, t)
    sync: Callable[[], None] = torch.cuda.synchronize if device.type == "cuda" else lambda: None
    tokens = {}
    rows = []
    for use_cache in (False, True):
        model.generate(prompt, min(2, new_tokens), use_cache=use_cache)  # warm-up
        times: list[float] = []
        while len(times) < repeats and sum(times) < max_time:
            sync()
            start = time.perf_counter()
            tokens[use_cache] = model.generate(prompt, new_tokens, use_cache=use_cache)  # (b, t + new)
            sync()
            times.append(time.perf_counter() - start)
        median, iqr = _quartiles(times)
        rows.append({"model": name, "config": {k: config[k] for k in config}, "use_cache": use_cache,
                     "prompt_tokens": prompt_tokens, "new_tokens": new_tokens, "batch_size": 1,
                     "dtype": "float32", "median_s": median, "iqr_s": iqr, "repeats": len(times),
                     "tokens_per_s": new_tokens / median, "cache_bytes_measured": None,
                     "cache_bytes_formula": None})
    if not torch.equal(tokens[False], tokens[True]):
        raise RuntimeError(f"{name}: cached and uncached greedy decoding gave different tokens")
    cached_tokens = prompt_tokens + new_tokens - 1
    d_h = config["d_model"] // config["num_heads"]
    measured = model.new_cache(1, cached_tokens).nbytes
    formula = kv_cache_bytes(1, cached_tokens, config["num_layers"], config["num_heads"], d_h, 4)
    for row in rows:  # both rows: the cache of this model and length (the uncached run allocates none)
        row |= {"cache_bytes_measured": measured, "cache_bytes_formula": formula, "same_tokens": True}
    return rows


def run_decode(
    models: dict[str, dict[str, Any]] | None = None, prompt_tokens: int = 4,
    new_tokens: int = 200, repeats: int = 3, seed: int = 123,
    device: torch.device = torch.device("cpu"), max_time: float = 60.0,
) -> list[dict[str, Any]]:
    """The ``decode`` rows of a results file: every model, without and with the cache."""
    rows = []
    for name, config in (MODELS if models is None else models).items():
        rows += measure_decode(name, config, prompt_tokens, new_tokens, repeats, seed, device, max_time)
    return rows
