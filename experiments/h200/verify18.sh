#!/usr/bin/env bash
# One device call (≤ ~420 s wall; no llama.cpp): session 2026-12-07 #18's last call, on main
# with the prefill folds the default (experiments/NOTES.md "Session 2026-12-07 #18").
# In order of what the call must not lose:
#   1. tests on NVIDIA's coop paths under the new default → tests.log: gpu_gated_delta (with the
#      dispatch-count test that now takes the scan's entry from the form), the whole model group
#      (both shapes, every path and step shape; the folds now on), gpu_matmul (the folds' bits,
#      every tiling), and serving's batch_invariance with the defaults (the run test left out: it
#      fails by design without FAK_ATTN_RUNS=on) — including
#      hybrid_next_turn_resumes_off_the_chunk_grid_together_with_another_prompt, which failed in
#      call 1 under dec8b's opt-in fold;
#   2. `harness bench` on the Qwen3.5-27B synth with FAK_GDN_PROFILE=entries: the chunked delta
#      rule's prepare and scan timed as two ops at 128 and 2048 tokens (gdnflip's unmeasured
#      split, which chooses between issue 19's GDN levers) → bench-27b-entries.json;
#   3. the new defaults' record: `harness bench --depths 128,2048 --n-out 32` on both shapes
#      (prefill and decode, profiled step) → bench-{8b,27b}.json, summary in bench.log.
# SM clocks every 200 ms → clocks.csv. Each step is skipped when it would pass BUDGET_S (400 s).
# Prepare (here): RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh \
#     gpu_gated_delta model_qwen35 model_qwen3 gpu_matmul batch_invariance
# carry target/h200/{bin.txz,gl,built-at,commit} (carry-room.sh out first: the harness rides).
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
SECONDS=0
BUDGET_S=${BUDGET_S:-400}
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw --format=csv -lms 200 \
    > "$OUT/clocks.csv" 2>&1 &
CLOCKS=$!
M8=/dev/shm/qwen3-8b-q4_k_m.gguf
M27=/dev/shm/qwen35-27b-q4_k_m.gguf
"$BIN/harness" synth --arch qwen3 --preset qwen3-8b --quant q4_k_m --seed 0 --fast-random \
    --out "$M8" > /tmp/synth8.log 2>&1 &
SYNTH8=$!
"$BIN/harness" synth --arch qwen35 --preset qwen35-27b --quant q4_k_m --seed 0 --fast-random \
    --out "$M27" > /tmp/synth27.log 2>&1 &
SYNTH27=$!

fits() { # fits EST: whether EST more seconds stay within the budget (else logs SKIPPED)
    [ $((SECONDS + $1)) -le "$BUDGET_S" ] && return 0
    echo "== SKIPPED (at ${SECONDS}s, ${1}s more would pass ${BUDGET_S}s)" | tee -a "$OUT/tests.log"
    return 1
}
check() { # check LIMIT BINARY [FILTERS...]: one test run, its verdict lines into tests.log
    local limit=$1
    shift
    fits "$((limit / 2))" || return
    echo "== $* (at ${SECONDS}s)" >> "$OUT/tests.log"
    timeout "$limit" "$BIN/$@" --skip llama_cpp --skip mlx_lm 2>&1 \
        | grep -E "^test |test result|panicked at|Err|differ|mismatch|> tol|finite|cosine|left|right" \
        | grep -v " \.\.\. ok$" | cut -c1-300 | head -60 >> "$OUT/tests.log"
}
check 40 gpu gpu_gated_delta::
check 150 model
check 90 gpu gpu_matmul::
check 40 serving batch_invariance:: --skip dense_logits_past_a_key_run_do_not_depend_on_the_step
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"
echo "[${SECONDS} s] tests done"

bench() { # bench NAME MODEL EST [ENV...]: one `harness bench` (depths 128 and 2048, 32 out)
    local name=$1 model=$2 est=$3
    shift 3
    fits "$est" || return
    echo "== $name $* (at ${SECONDS}s)" >> "$OUT/bench.log"
    env "$@" timeout 120 "$BIN/harness" bench --model "$model" --depths 128,2048 --n-out 32 \
        --profile-steps 1 --suffix 0 --probe-mib 256 --json-out "$OUT/bench-$name.json" \
        > /tmp/bench.log 2>&1
    echo "rc=$?" >> "$OUT/bench.log"
    grep -E "^depth [0-9]+|^  (gated_delta|gated_delta_prepare|attention) |panicked|rror" \
        /tmp/bench.log | cut -c1-220 >> "$OUT/bench.log"
}
if wait $SYNTH27; then
    bench 27b-entries "$M27" 45 FAK_GDN_PROFILE=entries
    wait $SYNTH8 && bench 8b "$M8" 25
    bench 27b "$M27" 45
else
    tail -3 /tmp/synth27.log
fi
kill $CLOCKS 2> /dev/null
cat "$OUT/bench.log"
echo "[${SECONDS} s] done"
