#!/usr/bin/env bash
# Session 2026-12-07 #22 (no machine was lent that session: run it in the next), one call
# (≤ DEADLINE, default 560 s): what #21 and #22 left for the device.
#   0 s   the 8B synth (Q4_K_M --fast-random, seed 0) into /dev/shm (abbench.sh's file), in the
#         background; the second prune's cooperative-matrix WGSL on NVIDIA (lean-k's pairs gone
#         from attn_prefill_flash.wgsl, ahead/deep from gated_delta_chunk_coop.wgsl; lavapipe
#         cannot run those kernels): gpu_attn_prefill, gpu_gated_delta; and #22's Q6_K split by
#         rows (G = 2 under 4096 rows; the engine's layouts at capacity 8 on NVIDIA's default
#         split, which lavapipe cannot take): gpu_matvec's rule and bits tests → tests.log;
#   then  matvec-bench on the 8B's decode products, q8 path alone, batches 1 and 8, the engine's
#         layouts against the 16-team ones with every split (issue 21: the 8B's 8-sequence step is
#         0.76× llama-batched-bench; its rows are 4096 columns, outside the short-row rule) →
#         matvec-bench.tsv;
#   then  the Q6_K split by rows against G = 4 for every Q6_K product (#21's default), the 8B at
#         8 sequences, interleaved twice (abbench.sh: default, q6all4=FAK_MATVEC_SPLIT_Q6=4) →
#         bench.log, bench-json.tgz, clocks.csv;
#   then  the 8B's later-turn prefill, profiled (issue 21's 8-agent later turns: 4 × 160 new
#         tokens over ~2176 cached took 92 ms): harness bench at depth 2176 with a 160- and a
#         640-token suffix (one sequence: the products at the step's 640 rows) → bench-suffix.tgz.
# Prepare: MATVEC_BENCH=1 RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh
# gpu_attn_prefill gpu_gated_delta gpu_matvec; carry target/h200/{bin.txz, gl, built-at, commit}.
# Returns ≤ 8 files: steps.log, tests.log, matvec-bench.tsv, bench.log, bench-json.tgz,
# clocks.csv, bench-suffix.tgz (with matvec-bench.err, the synth logs and gpu.csv).
set -uo pipefail
T0=$SECONDS
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
DEADLINE=${DEADLINE:-560}
log() { echo "[$((SECONDS - T0)) s] $*" | tee -a "$OUT/steps.log"; }
left() { echo $((DEADLINE - (SECONDS - T0))); }
MODEL=/dev/shm/qwen3-8b-q4_k_m.gguf
if [ ! -s "$MODEL" ]; then
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
tests "gpu_matvec rule and bits" 80 gpu gpu_matvec::tall_q6 gpu_matvec::a_rows_bits
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
if [ "$(left)" -gt 200 ]; then
    SEQS=8 ROUNDS=2 BUDGET_S=$(($(left) - 130)) bash experiments/h200/abbench.sh 8b 128 32 default \
        q6all4=FAK_MATVEC_SPLIT_Q6=4
    log "abbench q6 rows: exit $?"
    grep -E "^(==|depth 128)" "$OUT/bench.log" | cut -c1-160
else
    log "abbench q6 rows: SKIPPED ($(left) s left)"
fi
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
