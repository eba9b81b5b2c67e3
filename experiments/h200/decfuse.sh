#!/usr/bin/env bash
# One device call (an H100 or H200, ~170 s wall at ROUNDS=2, ~200 s with EXTRA=1; no llama.cpp):
# issue 18's "fewer, fatter dispatches" forms of 2026-12-06 #8 (decfuse; experiments/NOTES.md,
# "decfuse"), every one opt-in through FAK_DECODE_FUSE (the default computes what it did):
#   merge — on the int-dot path, a layer's two projection runs of one normed input whose types
#           differ (the Q6_K run beside the Q4_K one: 24 GDN + 8 attention layers of the 27B, 18
#           attention layers of the 8B) as one mixed mat-vec over the quantize dispatch's q8
#           vectors: 27B 518 → 486 dispatches per token, 8B 348 → 330 (counted on lavapipe with
#           the synth files' recipe), the same bits, no read added.
# In order of what the call must not lose:
#   1. the form's tests on NVIDIA's 32-wide paths, all with FAK_DECODE_FUSE=merge → tests.log:
#      gpu_matvec's mixed binding (each weight bit for bit its own binding's, over q8 vectors and
#      over the fold; the SECOND_TYPE pipelines), portability (every variant translates), and
#      the int-dot model tests of qwen35 and qwen3 — among them model_qwen35's merge test (its
#      pins, recorded with the form off, are compared on lavapipe only: here it checks the
#      q8-reference cosine and that the attention layer's projections are one dispatch);
#   2. `harness bench` decode at depth 128 (`--n-out 64`) on the Qwen3.5-27B and Qwen3-8B shapes,
#      default vs FAK_DECODE_FUSE=merge, interleaved ROUNDS (2) times → fuse.log (tok/s,
#      dispatches, ops, encode per token; the profiled step's ops in bench-json.tgz);
#   3. EXTRA=1 (if the time allows): the merge with the combine pass gone at this depth
#      (FAK_ATTN_DECODE_SPLIT=256: one split per kv head up to 256 keys, attn8k's opt-in knob;
#      −16 / −36 more dispatches, the attention's sums in another order, so not the default's
#      bits) once per shape.
# SM clocks every 200 ms → clocks.csv. Prepare (in the worktree or on main, release binaries):
#   RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh gpu_matvec model_qwen35 \
#       model_qwen3   (any suites of the gpu and model groups: the script runs those binaries)
# staged as target/<dir>/{experiments/h200/*.sh, target/h200/{bin.txz,gl,built-at,commit}}, run
# `cd target/<dir> && bash experiments/h200/decfuse.sh` (or through multi.sh: `decfuse:200`),
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

# The group binaries (prepare.sh carries bin/gpu and bin/model), so that a filter picks tests.
for t in "gpu gpu_matvec::a_mixed_binding portability::" \
    "model model_qwen35::int_dot model_qwen3::int_dot --test-threads=1"; do
    set -- $t
    echo "== FAK_DECODE_FUSE=merge $*" >> "$OUT/tests.log"
    FAK_DECODE_FUSE=merge timeout 60 "$BIN/$1" --skip llama_cpp --skip mlx_lm "${@:2}" 2>&1 \
        | grep -E "^test |test result|panicked at|cosine [0-9.]+ <|merge (true|false)|dispatches per step" \
        | head -40 >> "$OUT/tests.log"
done
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"
wait $SYNTH || { tail -3 /tmp/synth.log; exit 1; }
mkdir -p /tmp/bench-json

bench() { # bench MODEL LABEL [env...]: one one-sequence `harness bench` at depth 128
    local model=$1 label=$2
    shift 2
    echo "== $label: $*" >> "$OUT/fuse.log"
    env "$@" timeout 40 "$BIN/harness" bench --model "$model" --depths 128 --n-out 64 \
        --profile-steps 1 --suffix 0 --probe-mib 256 \
        --json-out "/tmp/bench-json/$label.json" > /tmp/bench.log 2>&1
    echo "rc=$?" >> "$OUT/fuse.log"
    grep -E "^depth 128:|rror|panicked" /tmp/bench.log | cut -c1-220 >> "$OUT/fuse.log"
    (cd /tmp/bench-json && tar czf "$OUT/bench-json.tgz" ./*.json)
}
for round in $(seq "${ROUNDS:-2}"); do
    bench "$M27" "27b-default-$round"
    bench "$M27" "27b-merge-$round" FAK_DECODE_FUSE=merge
    bench "$M8" "8b-default-$round"
    bench "$M8" "8b-merge-$round" FAK_DECODE_FUSE=merge
done
if [ "${EXTRA:-0}" = 1 ]; then
    bench "$M27" "27b-merge-onesplit" FAK_DECODE_FUSE=merge FAK_ATTN_DECODE_SPLIT=256
    bench "$M8" "8b-merge-onesplit" FAK_DECODE_FUSE=merge FAK_ATTN_DECODE_SPLIT=256
fi
cat "$OUT/fuse.log"
kill $CLOCKS
