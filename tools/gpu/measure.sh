#!/usr/bin/env bash
# One bounded GPU measurement of the book's Triton kernel (at most 9.7 minutes), at a checked commit.
#
# First, in a clean checkout of the commit to measure (no GPU needed):
#     python -m book.tree record          # writes tools/gpu/tree.txt, which travels with the tree
# Then, on the GPU machine, from the repository root:
#     bash tools/gpu/measure.sh [OUTPUT_DIR]      # default: $OUT if set, else gpu-results
#
# It refuses a tree that differs from the recorded commit, then runs, each step bounded (a step
# cut off keeps the rows it finished; the bench files say where they stopped):
#   1. the kernels' correctness checks in bfloat16 (what Triton's interpreter cannot check), with
#      their provenance: triton-check.json
#   2. our kernel with both backward passes (dQ in its own pass, and atomic) beside SDPA's
#      FlashAttention-2 and cuDNN backends, bfloat16, forward and forward+backward: triton.json
#   3. the same rows at small t, each call replayed from a CUDA graph (no host time in the
#      window): triton-cuda-graphs.json
#   4. the TritonOptions choices, forward and forward+backward: triton-options.json
#   5. where a call spends its time at t = 1024 (tools/gpu/profile_floor.py):
#      floor.json, floor.txt
#   6. the quick preset with the time left of MEASURE_SECONDS (0: none): quick.json
# Every results file carries the commit (checked), torch, Triton, driver, date and command.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-${OUT:-gpu-results}}
py=${PYTHON:-python3}
total=${MEASURE_SECONDS:-560}
mkdir -p "$out"
export PYTHONPATH="$PWD/src:$PWD/tools${PYTHONPATH:+:$PYTHONPATH}"
commit=$($py -m book.tree check tools/gpu/tree.txt) || { echo "tree check failed: nothing measured" >&2; exit 1; }
export ATTENTION_COMMIT=$commit ATTENTION_TREE_CHECKED=tools/gpu/tree.txt
start=$SECONDS
nvidia-smi > "$out/nvidia-smi.txt" 2>&1

step() {  # step SECONDS COMMAND...: run it for at most SECONDS, and say how it ended
    local seconds=$1
    shift
    echo "== $(date -u +%T) at most ${seconds} s: $*" >&2
    timeout --kill-after=10 "$seconds" "$@"
    echo "== exit $? after $((SECONDS - start)) s" >&2
}
bench() { step "$1" $py -m attention.bench --device cuda --parts sweep --levels kernel --dtypes bf16 \
    --repeats 10 --max-time 0.5 --warmup 0.05 --time-budget $(($1 - 30)) --no-progress "${@:2}"; }

step 130 $py tests/package/test_triton_flash.py cuda > "$out/triton-check.json"
bench 150 --variants triton 'triton[atomic-dq]' 'sdpa[flash]' 'sdpa[cudnn]' --seq-lens 1024 4096 16384 \
    --output "$out/triton.json"
bench 90 --variants triton 'triton[atomic-dq]' 'sdpa[flash]' 'sdpa[cudnn]' --seq-lens 1024 2048 \
    --cuda-graphs --output "$out/triton-cuda-graphs.json"
bench 140 --variants triton 'triton[longest-first]' 'triton[descriptors]' \
    'triton[warp-specialize]' --seq-lens 4096 16384 --output "$out/triton-options.json"
step 75 $py tools/gpu/profile_floor.py "$out"
left=$((total - (SECONDS - start)))
if ((left > 60)); then
    step "$left" $py -m attention.bench --device cuda --preset quick --time-budget $((left - 40)) --no-progress \
        --output "$out/quick.json"
fi
echo "== done after $((SECONDS - start)) s; results in $out" >&2
