#!/usr/bin/env bash
# The third prune (2026-12-07 #22, branch prune3): FAK_DECODE_FUSE=merge removed (MIXED,
# SECOND_TYPE, params2, binding 12 of the mat-vec). One device call, ≤ DEADLINE (300 s):
#   0 s   the mat-vec suite and the int-dot model tests on NVIDIA (lavapipe ran them; the WGSL
#         every mat-vec pipeline compiles changed, so NVIDIA's driver compiles it fresh) → tests.log;
#         `FAK_DECODE_FUSE=merge` refused at load (its message) → steps.log;
#   then  the default decode of the 27B (Q4_K_M --fast-random, seed 0) at depth 128, this build
#         against the base build (main before the prune), interleaved, 2 rounds (abbench.sh) →
#         bench.log. Prediction (experiments/NOTES.md "Third prune"): the same tok/s within
#         noise (±1 %): the default's pipelines do the same arithmetic; the bind group lost one
#         unused uniform binding.
# Prepare: BASE_HARNESS=<main's release harness> RELEASE_TARGET_DIR=/work/targets/rel
#   experiments/h200/prepare.sh gpu_matvec model_qwen35 model_qwen3; carry target/h200.
set -uo pipefail
T0=$SECONDS
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
DEADLINE=${DEADLINE:-300}
log() { echo "[$((SECONDS - T0)) s] $*" | tee -a "$OUT/steps.log"; }

tests "gpu_matvec" 100 gpu gpu_matvec::
tests "model int-dot" 90 model model_qwen35::int_dot model_qwen3::int_dot \
    model_qwen35::a_decode_step_records
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"

model=/dev/shm/qwen35-27b-q4_k_m.gguf
"$BIN/harness" synth --arch qwen35 --preset qwen35-27b --quant q4_k_m --seed 0 --fast-random \
    --out "$model" > "$OUT/synth-27b.log" 2>&1
log "27B synth: exit $?"
FAK_DECODE_FUSE=merge timeout 60 "$BIN/harness" bench --model "$model" --depths 128 --n-out 4 \
    > "$OUT/merge-refused.log" 2>&1
log "FAK_DECODE_FUSE=merge: exit $? ($(grep -m1 'is no decode fusion' "$OUT/merge-refused.log" \
    | cut -c1-240))"

left=$((DEADLINE - (SECONDS - T0) - 10))
log "bench with ${left} s left"
BUDGET_S=$left EST_S=30 bash experiments/h200/abbench.sh 27b 128 32 default \
    base=HARNESS=harness-base
log "done"
