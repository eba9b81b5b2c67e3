#!/usr/bin/env bash
# One device call (≤ ~420 s wall; no llama.cpp): spareslot (2026-12-07 #19, issue 21;
# experiments/NOTES.md "spareslot"). A step of several prompts now gives each prompt a spare
# recurrent-state slot of its own (wgsl/sequences.wgsl's per-entry save_rows/save_slot), so
# every portion takes its due prefix-cache snapshot in passing instead of being cut there;
# servetrace read Call 2's later turns as 5 of 8 cut at their snapshot (a second prefill step,
# ~300 ms, for 32 tokens). In order:
#   1. tests on NVIDIA's coop paths → tests.log (the coop GDN scan's snapshot store runs only
#      there): serving's batch_invariance with the defaults (the key-run test left out: it
#      needs FAK_ATTN_RUNS=on) — its new test prefills three conversations' next turns in one
#      step, each snapshot in passing, and checks their bits and their branches' against alone;
#      gpu_gated_delta's ragged test (three sequences, each snapshot in passing into its own
#      slot, on every form, against alone bit for bit), the mid-step snapshot, poisoned-scratch
#      and table tests; gpu_conv; model_qwen35 (its pins must not move);
#   2. the 27B synth (in the background from the start), then the multi-agent fak-serve arm as
#      Call 2's 8 agents (2048-token preamble + 128 own, 2 turns, 32 out), then `harness steps`
#      on the cache arm's trace: each later turn's prefill steps and cuts (prediction: no cut at
#      a snapshot; later-turn TTFT p50 ≈ 0.43 s against Call 2's 0.615 s);
#   3. only when `harness-base` (main's harness, before this change) is carried: the same arm
#      with it, for a same-machine before/after (≈ 120 s more; skipped when the budget is short).
# Budget: tests ≤ 170 s (synth beside them), multi-agent ≤ 240 s: ≤ ~420 s wall; the base arm
# (≤ 240 s more) runs only if carried and started before 300 s (≤ ~560 s).
# Prepare (here): RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh \
#     gpu_gated_delta gpu_conv model_qwen35 batch_invariance
#   (for step 3 add BASE_HARNESS=<main's release harness>, if the carry still fits 64 MiB)
# carry target/h200/{bin.txz,gl,built-at,commit} (carry-room.sh out first).
# Files back: tests.log, synth.log, multi-agent.log, steps-cache.md (+ -base), multi-agent.tgz,
# gpu.csv.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
SECONDS=0
M27=/dev/shm/ttft/qwen35-27b.gguf
mkdir -p "$(dirname "$M27")"
[ -f "$M27" ] || "$BIN/harness" synth --arch qwen35 --preset qwen35-27b --quant q4_k_m --seed 0 \
    --fast-random --out "$M27" > "$OUT/synth.log" 2>&1 &
SYNTH27=$!
check() { # check LIMIT BINARY [FILTERS...]: one test run, its verdict lines into tests.log
    local limit=$1
    shift
    echo "== $* (at ${SECONDS}s)" >> "$OUT/tests.log"
    timeout "$limit" "$BIN/$@" --skip llama_cpp --skip mlx_lm 2>&1 \
        | grep -E "^test |test result|panicked at|differs|left|right" \
        | grep -v " \.\.\. ok$" | cut -c1-300 | head -40 >> "$OUT/tests.log"
}
check 80 serving batch_invariance:: --skip dense_logits_past_a_key_run_do_not_depend_on_the_step
check 50 gpu gpu_gated_delta::sequences_of_any gpu_gated_delta::a_mid_step \
    gpu_gated_delta::every_chunked_form_on_a_poisoned gpu_gated_delta::a_table_refuses gpu_conv::
check 40 model model_qwen35::
grep -E "^==|test result|FAILED|panicked|differs" "$OUT/tests.log"
echo "[${SECONDS} s] tests done"
wait $SYNTH27
echo "[${SECONDS} s] 27B synth: exit $?"

# multi_agent HARNESS TAG: the 8-agent fak-serve arm with that harness, its trace read back.
multi_agent() {
    local harness=$1 tag=$2 run=/tmp/multi-agent-27b-8-$2
    timeout 240 "$BIN/$harness" threeway --scenario multi-agent --model "$M27" --arms fak-serve \
        --agents 8 --preamble 2048 --suffix 128 --turns 2 --n-out 32 --no-selftest \
        --model-origin "harness synth --fast-random, seed 0 (random)" \
        --out "$run" > "$run.log" 2>&1
    echo "[${SECONDS} s] multi-agent ($tag): exit $?"
    "$BIN/harness" validate "$run/packet.json" >> "$run.log" 2>&1
    "$BIN/harness" report "$run/packet.json" >> "$run.log" 2>&1
    { echo "== $tag"; cat "$run.log"; } >> "$OUT/multi-agent.log"
    grep -iE "ttft|turn|queue|error" "$run.log" | cut -c1-200 | head -30
    "$BIN/harness" steps "$run/multi-agent-fak-serve-cache-steps.jsonl" \
        --raw "$run/multi-agent-fak-serve-cache-raw.json" > "$OUT/steps-cache-$tag.md" 2>&1
    head -40 "$OUT/steps-cache-$tag.md" | cut -c1-200
}
multi_agent harness spareslot
if [ -x "$BIN/harness-base" ] && [ "$SECONDS" -lt 300 ]; then
    multi_agent harness-base base
fi
(cd /tmp && tar czf "$OUT/multi-agent.tgz" multi-agent-27b-8-*)
echo "[${SECONDS} s] done"
