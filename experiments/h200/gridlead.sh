#!/usr/bin/env bash
# One device call (≤ ~200 s wall; no llama.cpp): gridlead (2026-12-07 #18, issue 21;
# experiments/NOTES.md "gridlead"). Call 3 found that on an H100 a conversation's next turn
# prefilled together with another prompt gets other bits than alone, on every cooperative-matrix
# form of the chunked delta rule (up to 2e-3 in the logits on the default's split scan), while
# the f32 forms keep them: a ragged step placed the turn's rows at other places of their chunk's
# tiles than its own step did (relative chunks vs. a lead for the mid-step snapshot), and the
# matrix units sum a tile's products in an order that depends on where the zeros are. Now every
# prompt's chunks are those of the absolute grid of positions (a lead per sequence), and a step
# cut short of its prompt's end ends on that grid. In order:
#   1. tests on NVIDIA's coop paths → tests.log: serving's batch_invariance with the defaults
#      (the key-run test left out: it needs FAK_ATTN_RUNS=on) — the next-turn tests must pass
#      now, in parts too; gpu_conv (the table's entries grew by the lead), model_qwen35's tests
#      (gpu_gated_delta — the ragged and poisoned-scratch tests run sequences from positions off
#      the grid on every form, the mid-step snapshots from the position that puts them on it —
#      is gdnkh.sh's first step: run as `multi.sh gridlead:90 gdnkh:150`);
#   2. `harness bench --depths 128,2048 --n-out 8` on the Qwen3.5-27B synth: the prefill's
#      tok/s beside call 3's (2583 at 2048, 1661 at 128: prompts from position 0 have no lead,
#      so the same work).
# Prepare (here): RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh \
#     gpu_gated_delta gpu_conv model_qwen35 batch_invariance
# carry target/h200/{bin.txz,gl,built-at,commit} (carry-room.sh out first).
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
SECONDS=0
M27=/dev/shm/qwen35-27b-q4_k_m.gguf
"$BIN/harness" synth --arch qwen35 --preset qwen35-27b --quant q4_k_m --seed 0 --fast-random \
    --out "$M27" > /tmp/synth27.log 2>&1 &
SYNTH27=$!
check() { # check LIMIT BINARY [FILTERS...]: one test run, its verdict lines into tests.log
    local limit=$1
    shift
    echo "== $* (at ${SECONDS}s)" >> "$OUT/tests.log"
    timeout "$limit" "$BIN/$@" --skip llama_cpp --skip mlx_lm 2>&1 \
        | grep -E "^test |test result|panicked at|differs|left|right" \
        | grep -v " \.\.\. ok$" | cut -c1-300 | head -40 >> "$OUT/tests.log"
}
check 60 serving batch_invariance:: --skip dense_logits_past_a_key_run_do_not_depend_on_the_step
check 30 gpu gpu_conv::   # gpu_gated_delta: gdnkh.sh runs it right after (multi.sh gridlead:90 gdnkh:150)
check 40 model model_qwen35::
grep -E "^==|test result|FAILED|panicked|differs" "$OUT/tests.log"
echo "[${SECONDS} s] tests done"
if wait $SYNTH27; then
    timeout 60 "$BIN/harness" bench --model "$M27" --depths 128,2048 --n-out 8 --suffix 0 \
        --probe-mib 256 > "$OUT/bench.log" 2>&1
    echo "bench rc=$?"
    grep -E "^depth [0-9]+" "$OUT/bench.log" | cut -c1-200
fi
echo "[${SECONDS} s] done"
