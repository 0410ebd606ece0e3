"""Chapter 13's comparison: the tiny model trained with each recurrent rule, on three tasks.

    python -m book.experiments.delta_training            # every run: a few minutes on 2 cores
    python -m book.experiments.delta_training --check    # reruns a row of each kind (CI)

Every run trains chapter 12's two-layer, attention-only TinyTransformer (d = 32, h = 2,
RoPE, no MLP) with AdamW at 5e-3 on one thread, and scores held-out data. Kinds: softmax,
chapter 12's elu + 1, and the rules of attention.delta through attention.delta_model (with
and without the short convolution), plus a hybrid whose layer 0 is Gated DeltaNet and layer 1
softmax. The results file keeps each run's accuracy, final loss and head scores, and the
provenance of the whole run.
"""

import argparse
import json
import sys
from pathlib import Path

import torch

from attention import TinyTransformer, head_scores, induction_data, train_lm
from attention.bench.provenance import command_line, provenance
from attention.delta_model import use_recurrent_attention
from attention.linear_model import use_kernel_attention
from attention.training import recall_data

RESULTS = Path(__file__).parent / "results" / "delta-training.json"
KINDS = ("softmax", "elu+1", "sum", "decay", "delta", "gated_delta", "hybrid")
SEEDS = (123, 1, 2)
TASKS = {
    # chapter 12's induction task: periods 4-12 in 24 tokens of a 16-token vocabulary
    "induction": dict(steps=250, vocab=16, data=lambda n, g: induction_data(
        n, 24, 16, g, min_period=4, max_period=12)),
    # 16 pairs (keys from 32 ids, values from 32 others), all 16 asked again: t = 48
    "recall": dict(steps=600, vocab=64, data=lambda n, g: recall_data(n, 16, 32, 32, g)),
    # 16 writes over 6 distinct keys, so keys come back with new values; the 6 keys asked for
    # their latest value: t = 38
    "overwrite": dict(steps=600, vocab=64, data=lambda n, g: recall_data(
        n, 16, 32, 32, g, distinct_keys=6)),
}


def build(task: str, kind: str, conv: bool, seed: int) -> TinyTransformer:
    """The model of one run, its parameters drawn from ``seed``."""
    torch.manual_seed(seed)
    held_t = TASKS[task]["data"](1, torch.Generator().manual_seed(0))[0].shape[1]
    model = TinyTransformer(vocab_size=TASKS[task]["vocab"], d_model=32, num_heads=2,
                            num_layers=2, context_length=held_t, positions="rope", mlp=False)
    conv_size = 4 if conv else None
    if kind == "elu+1":
        use_kernel_attention(model, "elu+1")
    elif kind == "hybrid":
        use_recurrent_attention(model, "gated_delta", layers=[0], conv_size=conv_size)
    elif kind != "softmax":
        use_recurrent_attention(model, kind, conv_size=conv_size)
    return model


def run(task: str, kind: str, conv: bool, seed: int) -> dict[str, object]:
    """Train one model and score it on 512 held-out sequences (seed 789)."""
    spec = TASKS[task]
    model = build(task, kind, conv, seed)
    losses = train_lm(model, lambda g: spec["data"](32, g), steps=spec["steps"], lr=5e-3,
                      seed=seed)
    inputs, targets = spec["data"](512, torch.Generator().manual_seed(789))
    with torch.no_grad():
        correct = model(inputs).argmax(dim=-1) == targets  # (b, t)
    previous, induction = head_scores(model, inputs[:64])  # (L, h) each
    return {
        "task": task, "kind": kind, "conv": conv, "seed": seed, "steps": spec["steps"],
        "loss": round(losses[-1], 4),
        "accuracy": round(correct[targets != -100].double().mean().item(), 4),
        "previous_token": [[round(x, 3) for x in row] for row in previous.tolist()],
        "induction": [[round(x, 3) for x in row] for row in induction.tolist()],
    }


def grid() -> list[tuple[str, str, bool, int]]:
    """Every run: each kind on each task with the convolution where the kind has one, and the
    recurrent rules without it on the induction task (what the convolution alone does)."""
    runs = []
    for task in TASKS:
        for kind in KINDS:
            runs += [(task, kind, kind not in ("softmax", "elu+1"), s) for s in SEEDS]
    for kind in ("sum", "decay", "delta", "gated_delta"):
        runs += [("induction", kind, False, s) for s in SEEDS]
    return runs


def check_rows() -> list[tuple[dict[str, object], dict[str, object]]]:
    """Rerun the first stored row of each kind on the induction task (seconds each); return the
    (stored, again) pairs, so that every rule's stored numbers are checked against today's code."""
    stored = json.loads(RESULTS.read_text())["runs"]
    rows = [next(r for r in stored if (r["task"], r["kind"]) == ("induction", kind)) for kind in KINDS]
    return [(r, run(r["task"], r["kind"], r["conv"], r["seed"])) for r in rows]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="rerun the first stored induction row of each kind and compare")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.check:
        stale, pairs = 0, check_rows()
        for stored, again in pairs:
            changed = [f"{k} {stored[k]} -> {again.get(k)}" for k in stored if stored[k] != again.get(k)]
            stale += bool(changed)
            print(f"{stored['kind']} (conv {stored['conv']}, seed {stored['seed']}): "
                  + (f"changed {', '.join(changed)}" if changed else "as stored"))
        if stale:
            print(f"stored rows that today's code no longer gives: {stale} of {len(pairs)}; rerun the "
                  "grid (python -m book.experiments.delta_training) at a clean commit", file=sys.stderr)
        return 1 if stale else 0
    record = {"provenance": provenance(torch.device("cpu"), command_line(None)), "runs": []}
    rows = record["runs"]  # the provenance is taken first: the tree the runs come from
    for task, kind, conv, seed in grid():
        rows.append(run(task, kind, conv, seed))
        print(rows[-1]["task"], kind, conv, seed, rows[-1]["accuracy"], file=sys.stderr)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
