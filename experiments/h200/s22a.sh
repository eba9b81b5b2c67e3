#!/usr/bin/env bash
# Session 2026-12-07 #22, call 1 (≤ DEADLINE, default 420 s): what #21 left for the device.
#   0 s   the 8B synth (Q4_K_M --fast-random, seed 0) into /dev/shm/ttft, in the background;
#         the second prune's cooperative-matrix WGSL on NVIDIA (lean-k's pairs gone from
#         attn_prefill_flash.wgsl, ahead/deep from gated_delta_chunk_coop.wgsl; lavapipe cannot
#         run those kernels): gpu_attn_prefill, gpu_gated_delta → tests.log;
#   then  matvec-bench on the 8B's decode products, q8 path alone, batches 1 and 8, the engine's
#         layouts against the 16-team ones with every split (issue 21: the 8B's 8-sequence step is
#         0.76× llama-batched-bench; its rows are 4096 columns, outside the short-row rule) →
#         matvec-bench.tsv;
#   then  the 8B's later-turn prefill, profiled (issue 21's 8-agent later turns: 4 × 160 new
#         tokens over ~2176 cached took 92 ms): harness bench at depth 2176 with a 160- and a
#         640-token suffix (one sequence: the products at the step's 640 rows) → bench-suffix.tgz.
# Prepare: MATVEC_BENCH=1 RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh
# gpu_attn_prefill gpu_gated_delta gpu_matvec; carry target/h200/{bin.txz, gl, built-at, commit}.
# Returns ≤ 8 files: steps.log, tests.log, matvec-bench.tsv, matvec-bench.err, bench-suffix.tgz,
# gpu.csv.
set -uo pipefail
T0=$SECONDS
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
DEADLINE=${DEADLINE:-420}
log() { echo "[$((SECONDS - T0)) s] $*" | tee -a "$OUT/steps.log"; }
left() { echo $((DEADLINE - (SECONDS - T0))); }
MODELS=/dev/shm/ttft
MODEL=$MODELS/qwen3-8b.gguf
mkdir -p "$MODELS"
if [ ! -f "$MODEL" ]; then
    "$BIN/harness" synth --arch qwen3 --preset qwen3-8b --quant q4_k_m --seed 0 --fast-random \
        --out "$MODEL" > /tmp/synth.log 2>&1 &
fi
SYNTH=$!

tests() { # tests LABEL TIMEOUT BINARY FILTERS...: libtest ORs whole test paths
    local label=$1 limit=$2 binary=$3
    shift 3
    echo "== $label (at $((SECONDS - T0)) s)" >> "$OUT/tests.log"
    timeout "$limit" "$BIN/$binary" "$@" 2>&1 \
        | grep -E "^test |test result|panicked at|differ|pinned|SKIPPED" | cut -c1-300 \
        | head -40 >> "$OUT/tests.log"
}
tests "gpu_attn_prefill" 100 gpu gpu_attn_prefill::
tests "gpu_gated_delta" 50 gpu gpu_gated_delta::
log "tests done"
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"

LAYOUTS=256/4/1/split2,256/4/1/split4,256/4/1/batched,64/4/1/split2,64/4/1/split4,64/4/1/batched
LAYOUTS=$LAYOUTS,128/8/1/split2,128/8/1/split4,128/8/1/batched,256/16/1/split2,256/16/1/split4
timeout 170 "$BIN/matvec-bench" --products attn_qkv,attn_qk,attn_v,attn_output,ffn_gate_up,ffn_down,output \
    --paths q8 --plain --batches 1,8 --reps 5 --layouts "$LAYOUTS" \
    > "$OUT/matvec-bench.tsv" 2> "$OUT/matvec-bench.err"
log "matvec-bench: exit $?"
grep "^#" "$OUT/matvec-bench.tsv" | cut -c1-220 | tail -40

wait $SYNTH
log "synth: exit $? ($(ls -la $MODEL 2>&1 | cut -c1-120))"
mkdir -p /tmp/suffix
for suffix in 160 640; do
    cap=$(($(left) - 5))
    [ "$cap" -gt 30 ] || { log "bench suffix $suffix: SKIPPED ($(left) s left)"; continue; }
    [ "$cap" -le 90 ] || cap=90
    timeout "$cap" "$BIN/harness" bench --model "$MODEL" --depths 2176 --n-out 8 --profile-steps 1 \
        --suffix "$suffix" --probe-mib 256 --json-out /tmp/suffix/bench-$suffix.json \
        > /tmp/suffix/bench-$suffix.log 2>&1
    log "bench depth 2176 suffix $suffix: exit $?"
    grep -iE "suffix|prefill|tok/s" /tmp/suffix/bench-$suffix.log | head -12 | cut -c1-200
done
tar czf "$OUT/bench-suffix.tgz" -C /tmp suffix
log "done"
