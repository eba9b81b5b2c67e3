#!/usr/bin/env bash
# One device call (an H100 or H200, ~190 s wall at ROUNDS=2, ~110 s at ROUNDS=1; no llama.cpp):
# issue 18's "fewer, fatter dispatches", the rope form of 2026-12-06 #9 (ropekv;
# experiments/NOTES.md, "ropekv"), opt-in through FAK_DECODE_FUSE (the default computes what it
# did):
#   rope — a decode step's rope_kv inside attn_decode: every split norms and rotates its own q
#          heads, the split holding the new position norms, rotates and writes k_p, v_p, then
#          walks; rope_kv's bits (its sums in its lanes' order), no read of weights or cache
#          added: 27B 518 → 502 dispatches per token, 8B 348 → 312; with merge 486 → 470 and
#          330 → 294 (counted from the code; lavapipe's bench files: mid 68 → 66, qwen3-0.6b
#          244 → 216).
# In order of what the call must not lose:
#   1. the form's tests on NVIDIA's 32-wide paths → tests.log: gpu_attn_decode's rope-form test
#      (o, o's q8 blocks and both caches bit for bit rope_kv + the default decode, every variant,
#      every key walk, batched sequences on shuffled pages; and against the CPU), the attention
#      step test, the int-dot model tests of qwen35 and qwen3 with FAK_DECODE_FUSE=merge,rope
#      (model_qwen35's merge test also asserts no rope_kv op in a decode step; its pins are
#      compared on lavapipe only) and serving's batch_invariance (the batched decode tests:
#      a sequence's bits alone and in a batch) with the form on;
#   2. `harness bench` decode at depths 128 and 2048 (`--n-out 32`) on the Qwen3.5-27B and
#      Qwen3-8B shapes, default vs FAK_DECODE_FUSE=merge,rope, interleaved ROUNDS (2) times →
#      fuse.log (tok/s, dispatches, ops, encode per token; the profiled steps in bench-json.tgz:
#      the attention op with the form against rope_kv + attention without).
# SM clocks every 200 ms → clocks.csv. Prepare (in the worktree or on main, release binaries):
#   RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh gpu_attn_decode \
#       gpu_attention_step model_qwen35 model_qwen3 batch_invariance
# (any build carrying the gpu, model and serving groups serves), staged as target/<dir>, run
# `cd target/<dir> && bash experiments/h200/ropekv.sh` or through multi.sh (`ropekv:200`),
# carry ["target/<dir>"]. Files back: tests.log, fuse.log, bench-json.tgz, clocks.csv, gpu.csv.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw --format=csv -lms 200 \
    > "$OUT/clocks.csv" 2>&1 &
CLOCKS=$!
M27=/dev/shm/qwen35-27b-q4_k_m.gguf
M8=/dev/shm/qwen3-8b-q4_k_m.gguf
( "$BIN/harness" synth --arch qwen35 --preset qwen35-27b --quant q4_k_m --seed 0 --fast-random \
    --out "$M27" && "$BIN/harness" synth --arch qwen3 --preset qwen3-8b --quant q4_k_m \
    --seed 0 --fast-random --out "$M8" ) > /tmp/synth.log 2>&1 &
SYNTH=$!

# The group binaries (prepare.sh carries bin/gpu, bin/model and bin/serving), so that a filter
# picks tests.
for t in "gpu gpu_attn_decode::the_rope_form gpu_attention_step::" \
    "model model_qwen35::int_dot model_qwen3::int_dot --test-threads=1" \
    "serving batch_invariance::q4_k_m batch_invariance::dense_logits_do_not_depend_on_the_batch batch_invariance::hybrid_logits_do_not_depend_on_the_batch"; do
    set -- $t
    [ -x "$BIN/$1" ] || { echo "== $1: not carried" >> "$OUT/tests.log"; continue; }
    echo "== FAK_DECODE_FUSE=merge,rope $*" >> "$OUT/tests.log"
    FAK_DECODE_FUSE=merge,rope timeout 45 "$BIN/$1" --skip llama_cpp --skip mlx_lm "${@:2}" 2>&1 \
        | grep -E "^test |test result|panicked at|differ|cosine [0-9.]+ <|merge (true|false)" \
        | head -40 >> "$OUT/tests.log"
done
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"
wait $SYNTH || { tail -3 /tmp/synth.log; exit 1; }
mkdir -p /tmp/bench-json

bench() { # bench MODEL LABEL [env...]: one one-sequence `harness bench` at depths 128 and 2048
    local model=$1 label=$2
    shift 2
    echo "== $label: $*" >> "$OUT/fuse.log"
    env "$@" timeout 40 "$BIN/harness" bench --model "$model" --depths 128,2048 --n-out 32 \
        --profile-steps 1 --suffix 0 --probe-mib 256 \
        --json-out "/tmp/bench-json/$label.json" > /tmp/bench.log 2>&1
    echo "rc=$?" >> "$OUT/fuse.log"
    grep -E "^depth (128|2048):|rror|panicked" /tmp/bench.log | cut -c1-220 >> "$OUT/fuse.log"
    (cd /tmp/bench-json && tar czf "$OUT/bench-json.tgz" ./*.json)
}
for round in $(seq "${ROUNDS:-2}"); do
    bench "$M27" "27b-default-$round"
    bench "$M27" "27b-merge-rope-$round" FAK_DECODE_FUSE=merge,rope
    bench "$M8" "8b-default-$round"
    bench "$M8" "8b-merge-rope-$round" FAK_DECODE_FUSE=merge,rope
done
cat "$OUT/fuse.log"
kill $CLOCKS
