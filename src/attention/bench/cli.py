"""Command line of the benchmark: ``python -m attention.bench --help`` lists every option."""

import argparse
import math
import sys
import textwrap
import time
from collections.abc import Callable
from typing import Any

import torch

from .decode import MODELS
from .goals import FLASH_GOAL_SHAPE, FUSED_GOAL_SHAPE, speed_goals
from .parts import BY_NAME, PARTS, Context
from .peaks import STREAM_DTYPE
from .presets import PRESETS
from .provenance import command_line, load_average
from .rows import LEVELS
from .sparse import BLOCK_SIZE as SPARSE_BLOCK_SIZE
from .sparse import TOP_K as SPARSE_TOP_K
from .sparse import check_sizes as check_sparse_sizes
from .store import output_file, write_results
from .sweep import DTYPES, PASSES, Settings, start_document
from .variants import VARIANTS

DEFAULT_PARTS = tuple(part.name for part in PARTS if part.default)

CPU_SEQ_LENS = (128, 256, 512, 1024, 2048, 4096)
GPU_SEQ_LENS = (512, 1024, 2048, 4096, 8192, 16384)

EPILOG = """
defaults depend on the device: on CPU t = 128 ... 4096, float32, 4096 tokens per batch, 7
repeats; on CUDA t = 512 ... 16384, float32/bfloat16/float16, 16384 tokens per batch, 50 repeats.

parts (--parts; by default all but """ + ", ".join(p.name for p in PARTS if not p.default) + """):
""" + "\n".join(textwrap.fill(f"{p.name}: {p.summary}.", 100, initial_indent="  ", subsequent_indent="    ")
              for p in PARTS) + """

--preset quick measures everything the appendix's GPU section shows in about 7.5 minutes on one
H100 or H200: t = 1024 ... 16384 (CPU: 128 ... 1024), bfloat16 first, then the compiled variants
at the shortest and longest t, then float16 and float32; 10 timed calls per point, 0.5 s at most;
the parts in the order above, masks left out; no row is started after --time-budget (450 s). The
file is rewritten after every row, marked "complete": false until the run ends.

examples:
  python -m attention.bench --output docs/appendix/results/cpu.json
  python -m attention.bench --device cuda --preset quick --output cuda-quick.json
  python -m attention.bench --parts goals --no-memory-goal --output /tmp/goals.json
  python -m attention.bench --parts decode --output /tmp/decode.json
  python -m attention.bench --parts linear --head-dims 64 --passes forward --output linear.json
  python -m attention.bench --device cpu --parts distributed --output distributed.json
  python -m attention.bench --device cpu --parts sparse --seq-lens 1024 2048 --tokens 16384 \
      --d-model 128 --head-dims 64 --passes forward --output sparse.json
  python -m attention.bench --levels kernel --seq-lens 128 256 --no-compile --no-memory-goal
  python -m attention.bench merge run1.json run2.json --output merged.json

variants: """ + ", ".join(v.name for v in VARIANTS if not v.on_request) + """
run only when named in --variants: """ + ", ".join(v.name for v in VARIANTS if v.on_request) + "\n"


def at_least(minimum: float, kind: type = int) -> Callable[[str], float]:
    """An argparse ``type``: a finite ``kind`` (int or float) >= ``minimum``; anything else is
    argparse's usage error, naming the option."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind.__name__} >= {minimum}, got {text!r}") from None
        if not math.isfinite(value) or value < minimum:
            raise argparse.ArgumentTypeError(f"expected {kind.__name__} >= {minimum}, got {text!r}")
        return value

    return parse


def above_zero(text: str) -> float:
    """An argparse ``type``: a finite float > 0 (seconds, TFLOP/s)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a finite float > 0, got {text!r}")
    return value


POSITIVE = at_least(1)  # sizes, counts


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (its --help is the benchmark's documentation)."""
    ap = argparse.ArgumentParser(
        prog="python -m attention.bench",
        description="Time and measure attention implementations, check each against a float64 "
        "reference first, and write the results as JSON for the appendix page.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add, on_off = ap.add_argument, argparse.BooleanOptionalAction
    add("--parts", nargs="+", choices=tuple(BY_NAME),
        help="what to measure (default: all but "
             + ", ".join(p.name for p in PARTS if not p.default) + "; see below)")
    add("--preset", choices=tuple(PRESETS), help="a whole measurement sized for a short GPU slot (see below)")
    add("--time-budget", type=at_least(0.0, float), metavar="SECONDS",
        help="start no sweep row, nor a part after the sweep, after this many seconds (the file says "
             "the run stopped; quick: 450)")
    add("--device", choices=("auto", "cpu", "cuda"), default="auto",
        help="where to run (auto: cuda if available, else cpu)")
    add("--output", "-o", type=output_file,
        help="results JSON to write (default: bench-<device>.json in the current directory)")
    add("--levels", nargs="+", choices=LEVELS, default=list(LEVELS),
        help="layer: whole layers on x (b, t, d); kernel: attention on Q, K, V (b, h, t, d_h)")
    add("--seq-lens", nargs="+", type=POSITIVE, help="sequence lengths t to sweep")
    add("--d-model", type=POSITIVE, default=768,
        help="model width d = d_in = d_out (default: 768, GPT-2 small)")
    add("--heads", type=POSITIVE, default=12, help="heads h of the layers (default: 12)")
    add("--head-dims", nargs="+", type=POSITIVE, default=[64, 128],
        help="head widths d_h of the kernels, each with h = d_model / d_h heads (default: 64 128)")
    add("--tokens", type=POSITIVE, help="tokens per batch: b = tokens // t, at least 1")
    add("--batch", type=POSITIVE, help="a fixed batch size b instead of --tokens")
    add("--dtypes", nargs="+", choices=tuple(DTYPES), help="data types")
    add("--passes", nargs="+", choices=tuple(PASSES), default=list(PASSES),
        help="forward (no autograd) and/or forward+backward")
    add("--variants", nargs="+", metavar="NAME", help="only these variants (listed below)")
    add("--compile", action=on_off, default=True,
        help="include the torch.compile variants and FlexAttention (seconds of compiling per shape)")
    add("--memory", action=on_off, default=True,
        help="measure peak memory (CPU: the allocator's count; GPU: one more call)")
    add("--memory-goal", action=on_off, default=True,
        help="measure the memory goal: flash_attention against the explicit path, forward, float32 "
        "(CPU: peak RSS, each in a fresh process)")
    add("--memory-goal-shape", nargs=4, type=POSITIVE, default=[8192, 1, 8, 64],
        metavar=("T", "B", "H", "D_H"),
        help="shape of the memory goal (default: 8192 1 8 64, about 6.5 GB for the explicit path)")
    add("--speed-goal-t", type=POSITIVE, default=1024,
        help="t at which the speed goal is read off the sweep (default: 1024)")
    add("--flash-goal-shape", nargs=4, type=POSITIVE, default=list(FLASH_GOAL_SHAPE),
        metavar=("B", "H", "T", "D_H"), help="shape of the flash_attention ÷ SDPA goal (default: 1 12 2048 64)")
    add("--fused-goal-shape", nargs=4, type=POSITIVE, default=list(FUSED_GOAL_SHAPE),
        metavar=("B", "H", "T", "D_H"),
        help="shape of the fused ÷ unfused layer goal, d = H * D_H (default: 4 12 1024 64)")
    add("--matmul-sizes", nargs="+", type=POSITIVE, metavar="N",
        help="peaks: sides n of the square torch.mm timed (default: CPU 1024 2048 4096, float32; "
        "GPU 4096 8192 16384, bfloat16)")
    add("--stream-bytes", type=at_least(STREAM_DTYPE.itemsize),  # one number per array at least
        help="peaks: bytes of each STREAM array (default: CPU 4 x the last-level cache, at least 64 MiB; "
        "GPU 1 GiB)")
    add("--decode-models", nargs="+", choices=tuple(MODELS), default=list(MODELS),
        help="decode: the models (default: both)")
    add("--decode-prompt", type=POSITIVE, default=4, help="decode: prompt tokens (default: 4)")
    add("--decode-new-tokens", type=POSITIVE, default=200, help="decode: new tokens (default: 200)")
    add("--decode-repeats", type=POSITIVE, help="decode: timed generate calls, at most (default: 3)")
    add("--decode-max-time", type=above_zero,
        help="decode: no further call once this many seconds are spent on one measurement (default: 60)")
    add("--sparse-top-k", type=POSITIVE, default=SPARSE_TOP_K,
        help=f"sparse: keys k_top each selection keeps per query (default: {SPARSE_TOP_K})")
    add("--sparse-block-size", type=POSITIVE, default=SPARSE_BLOCK_SIZE,
        help=f"sparse: keys B per block of MoBA and NSA, dividing k_top and every t (default: {SPARSE_BLOCK_SIZE})")
    add("--repeats", type=at_least(3),  # the IQR needs three
        help="CPU: time about this many calls per measurement; GPU: timed calls (the IQR is over them)")
    add("--min-time", type=above_zero, default=0.3, help="CPU: seconds each measurement runs at least")
    add("--max-time", type=above_zero,
        help="seconds of timed calls per measurement, at most (but at least 3 calls on CPU, 5 on GPU; "
        "default: 4)")
    add("--warmup", type=at_least(0.0, float), help="GPU: seconds of untimed calls before timing (2 to 10 calls; default: 0.2)")
    add("--cuda-graphs", action="store_true",
        help="GPU: time each call replayed from a CUDA graph, so that host overhead (Python, autograd, "
        "launchers) is outside the timed window")
    add("--threads", type=POSITIVE, help="torch.set_num_threads before running (default: torch's choice)")
    add("--tf32", action=on_off, default=False,
        help="CUDA: allow TF32 for float32 matmuls (recorded; the peak used follows it)")
    add("--peak-tflops", type=above_zero, help="peak TFLOP/s to compare with (overrides the GPU table)")
    add("--peak-source", help="where --peak-tflops comes from (printed next to it)")
    add("--seed", type=int, default=123, help="seed of the random inputs and weights")
    add("--no-progress", action="store_true", help="no progress bar")
    return ap


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Settings with the device-dependent and preset defaults filled in; bad values raise ValueError."""
    if args.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda needs a CUDA device, got torch.cuda.is_available() == False")
    gpu = device.type == "cuda"
    if args.d_model % args.heads:
        raise ValueError(f"--d-model must be divisible by --heads, got {args.d_model} and {args.heads}")
    if any(args.d_model % d_h for d_h in args.head_dims):
        raise ValueError(
            f"--d-model must be divisible by every --head-dims, got {args.d_model} and {args.head_dims}"
        )
    unknown = sorted(set(args.variants or []) - {v.name for v in VARIANTS})
    if unknown:
        raise ValueError(f"--variants must be among the names listed in --help, got {unknown}")
    level = {v.name: v.level for v in VARIANTS}
    swept = [name for name in args.variants or [] if level[name] in args.levels]
    if args.variants and not swept and "sweep" in (args.parts or DEFAULT_PARTS):  # else a sweep of no rows
        raise ValueError(f"--variants must name a variant of the --levels swept ({' '.join(args.levels)}), got "
                         + ", ".join(f"{name} ({level[name]})" for name in args.variants))
    for name in ("seq_lens", "head_dims", "dtypes", "passes", "levels"):  # a value twice would measure its rows twice
        values = getattr(args, name) or []
        if len(set(values)) < len(values):
            raise ValueError(f"--{name.replace('_', '-')} must not repeat a value, got {values}")
    if args.batch is not None and args.tokens is not None:  # b would be --batch, --tokens dropped unsaid
        raise ValueError(f"--batch fixes b instead of --tokens: give one of them, got --batch {args.batch} and "
                         f"--tokens {args.tokens}")
    if args.peak_source is not None and args.peak_tflops is None:  # a source of no peak, kept unsaid
        raise ValueError(f"--peak-source says where --peak-tflops comes from: give both, got --peak-source "
                         f"{args.peak_source!r} alone")
    preset = PRESETS[args.preset] if args.preset else None
    if args.parts is None:  # not given: the default parts (under a preset, those it runs)
        args.parts = [name for name in DEFAULT_PARTS if preset is None or BY_NAME[name].preset]
    elif preset and (left_out := [name for name in args.parts if not BY_NAME[name].preset]):
        # main skips them: the run would measure nothing of theirs and say nothing
        raise ValueError(f"--preset {preset.name} does not run --parts {' '.join(left_out)}: expected parts among "
                         f"{[p.name for p in PARTS if p.preset]}, got {args.parts}")
    if preset:
        seq_lens = tuple(args.seq_lens or (preset.gpu_seq_lens if gpu else preset.cpu_seq_lens))
        dtypes = tuple(args.dtypes or preset.dtypes)
        stages, repeats, max_time = preset.stages(seq_lens, dtypes), preset.repeats, preset.max_time
        warmup = preset.warmup_s
    else:
        seq_lens = tuple(args.seq_lens or (GPU_SEQ_LENS if gpu else CPU_SEQ_LENS))
        dtypes = tuple(args.dtypes or (("fp32", "bf16", "fp16") if gpu else ("fp32",)))
        stages, repeats, max_time, warmup = None, (50 if gpu else 7), 4.0, 0.2
    max_time = max_time if args.max_time is None else args.max_time
    if not gpu and args.min_time > max_time:  # time_cpu keeps the max: the min would be dropped unsaid
        raise ValueError(f"--min-time must not exceed --max-time, got {args.min_time} and {max_time}")
    if args.cuda_graphs and not gpu:  # else the file says graphs replayed calls timed without one
        raise ValueError(f"--cuda-graphs replays each timed call from a CUDA graph: expected --device cuda, got "
                         f"{device.type}")
    if "distributed" in args.parts and device.type != "cpu":  # else refused after the other parts ran
        raise ValueError(f"--parts distributed runs gloo processes on this CPU: expected --device cpu, "
                         f"got {device.type}")
    if "sparse" in args.parts:
        check_sparse_sizes(seq_lens, tuple(args.head_dims), args.sparse_top_k, args.sparse_block_size)
    return Settings(
        device=device,
        levels=tuple(args.levels),
        seq_lens=seq_lens,
        d_model=args.d_model,
        heads=args.heads,
        head_dims=tuple(args.head_dims),
        tokens=(16384 if gpu else 4096) if args.tokens is None else args.tokens,
        batch=args.batch,
        dtypes=dtypes,
        passes=tuple(args.passes),
        variants=tuple(args.variants) if args.variants else None,
        compile=args.compile,
        memory=args.memory,
        repeats=repeats if args.repeats is None else args.repeats,
        min_time=args.min_time,
        max_time=max_time,
        seed=args.seed,
        peak_tflops=args.peak_tflops,
        peak_source=args.peak_source,
        progress=not args.no_progress,
        stages=stages,
        warmup_s=warmup if args.warmup is None else args.warmup,
        cuda_graphs=args.cuda_graphs,
    )


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def methods(device: torch.device, cuda_graphs: bool = False) -> dict[str, str]:
    """How the numbers were obtained, in words, for the page."""
    if device.type == "cuda":
        timing = ("CUDA events around each call, after the checked and profiled first call and a warm-up, "
                  "with a 256 MiB buffer zeroed before each call (L2 flush)")
        timing += (", each call replayed from a CUDA graph captured after the warm-up (no host time)"
                   if cuda_graphs else "; host time between launches is inside the window when the GPU waits for it")
        memory = "torch.cuda.max_memory_allocated during one call minus memory_allocated before it"
    else:
        timing = ("torch.utils.benchmark.Timer.blocked_autorange (blocks of calls, torch's thread count), "
                  "after the checked and profiled first call (for a compiled variant, after compiling)")
        memory = ("PyTorch's CPU allocator, as reported to the profiler (profile_memory=True) during one "
                  "warm call: the most tensor bytes alive at once above those alive before the call; memory "
                  "that libraries such as oneDNN allocate on their own is not counted")
    flops = ("attention 4*b*h*t^2*d_h forward, halved for causal, backward 2.5 times the forward; a layer "
             "adds 2*b*t*d_in*d_out per projection (Q, K, V and output; the wrapper has no output "
             "projection), whose backward costs twice its forward")
    decode = ("wall-clock time of one model.generate call (prefill included), median and IQR over "
              "up to --decode-repeats calls (fewer once --decode-max-time seconds are spent) after a "
              "warm-up call; tokens/s = new tokens / median; cached and uncached "
              "tokens checked equal first")
    return {"timing": f"{timing}; median and IQR over repeats", "memory": memory, "flops": flops,
            "decode": decode}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark described by ``argv``, write the JSON file and return its contents.

    ``merge`` as the first argument combines results files instead (:mod:`attention.bench.merge`).
    """
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["merge"]:
        from .merge import main as merge_main

        return merge_main(argv[1:])
    started = time.monotonic()
    args = build_parser().parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        settings = settings_from_args(args)
    except ValueError as error:
        build_parser().error(str(error))
    if settings.device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
    preset = PRESETS[args.preset] if args.preset else None
    budget = args.time_budget if args.time_budget is not None else (preset.time_budget_s if preset else None)
    deadline = None if budget is None else started + budget
    try:  # the default is checked as --output is, before anything is measured
        output = args.output or output_file(f"bench-{settings.device.type}.json")
    except argparse.ArgumentTypeError as error:
        build_parser().error(str(error))
    doc = start_document(settings, command_line(argv))
    doc |= {"methods": methods(settings.device, settings.cuda_graphs), "goals": {"speed": [], "memory": None},
            "complete": False}
    if args.preset:
        doc["settings"]["preset"] = args.preset

    def save() -> None:
        doc["goals"]["speed"] = speed_goals(doc["results"], args.speed_goal_t, settings.d_model, settings.heads)
        doc["provenance"]["load_average_end"] = load_average()
        write_results(doc, output)

    context = Context(args, settings, doc["provenance"]["command"], doc, save, deadline, preset)
    todo = [part for part in PARTS if part.name in args.parts]  # a preset's only (settings_from_args)
    for i, part in enumerate(todo):
        if "stopped" in doc:  # the sweep spent the time budget: no row of a later part starts either
            doc["stopped"] += f"; the parts after it were not run: {', '.join(p.name for p in todo[i:])}"
            break
        part.run(context)
        save()
    doc["complete"] = "stopped" not in doc
    save()
    _say(f"wrote {output}: {rows_summary(doc)}")
    return doc


def rows_summary(doc: dict[str, Any]) -> str:
    """How many timed rows of each part came out ok, and why the run stopped early, if it did."""
    counts = [
        f"{sum(row['status'] == 'ok' for row in rows)} of {len(rows)} {part.name} rows ok"
        for part in PARTS for kind in part.kinds if kind.label and (rows := kind.read(doc))
    ]
    done = "" if doc.get("complete", True) else f" ({doc['stopped']})"
    return (", ".join(counts) or "no timed rows") + done
