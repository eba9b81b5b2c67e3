#!/usr/bin/env bash
# Session 2026-12-07 #22, one call (≤ DEADLINE, default 560 s): what #21 and #22 left for the
# device, most needed first (later steps run with the time left).
#   0 s   the 8B synth (Q4_K_M --fast-random, seed 0) into /dev/shm (abbench.sh's file), in the
#         background; the second prune's cooperative-matrix WGSL on NVIDIA (lean-k's pairs gone
#         from attn_prefill_flash.wgsl, ahead/deep from gated_delta_chunk_coop.wgsl; lavapipe
#         cannot run those kernels): gpu_attn_prefill, gpu_gated_delta; and #22's Q6_K split by
#         rows (G = 2 under 4096 rows; the engine's layouts at capacity 8 on NVIDIA's default
#         split, which lavapipe cannot take) and the third prune's mat-vec WGSL: gpu_matvec and
#         the int-dot model tests; and #22's decode
#         steps in flight (Engine::submit_decode, the scheduler leaving greedy steps in flight):
#         serving's in-flight tests and the scheduler's → tests.log;
#   then  `FAK_DECODE_FUSE=merge` refused (the third prune); the Q6_K split by rows against G = 4
#         for every Q6_K product (#21's default), the 8B at 8 sequences, interleaved twice (abbench.sh: default, q6all4=FAK_MATVEC_SPLIT_Q6=4); each
#         bench's batched line gives the aggregate both ways (each step waited for, as #21's
#         figures; two steps in flight, what fak serve now does for greedy requests) → bench.log,
#         bench-json.tgz, clocks.csv;
#   then  matvec-bench on the 8B's decode products, q8 path alone, batches 1 and 8, the engine's
#         layouts against the 16-team ones with every split (issue 21: the 8B's 8-sequence step is
#         0.76× llama-batched-bench; its rows are 4096 columns, outside the short-row rule) →
#         matvec-bench.tsv;
#   then  the 8B's later-turn prefill, profiled (issue 21's 8-agent later turns: 4 × 160 new
#         tokens over ~2176 cached took 92 ms): harness bench at depth 2176 with a 160- and a
#         640-token suffix (one sequence: the products at the step's 640 rows) → bench-suffix.tgz.
# Prepare: MATVEC_BENCH=1 RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh
# gpu_attn_prefill gpu_gated_delta gpu_matvec batch_invariance scheduler model_qwen3 model_qwen35; carry
# target/h200/{bin.txz, gl, built-at, commit}.
# Returns 8 files: steps.log, tests.log, matvec-bench.tsv, bench.log, bench-json.tgz, clocks.csv,
# bench-suffix.tgz, misc.tgz (matvec-bench.err, the synth logs, gpu.csv).
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

tests "gpu_attn_prefill" 100 gpu gpu_attn_prefill::
tests "gpu_gated_delta" 50 gpu gpu_gated_delta::
tests "gpu_matvec (the third prune's WGSL, the Q6_K rule by rows)" 100 gpu gpu_matvec::
tests "model int-dot" 90 model model_qwen35::int_dot model_qwen3::int_dot \
    model_qwen35::a_decode_step_records
tests "decode steps in flight" 120 serving batch_invariance::dense_decode_steps \
    batch_invariance::hybrid_decode_steps scheduler::
log "tests done"
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"

wait $SYNTH
log "synth: exit $? ($(ls -la $MODEL 2>&1 | cut -c1-120))"
FAK_DECODE_FUSE=merge timeout 60 "$BIN/harness" bench --model "$MODEL" --depths 128 --n-out 4 \
    > /tmp/merge-refused.log 2>&1
log "FAK_DECODE_FUSE=merge: exit $? ($(grep -m1 'is no decode fusion' /tmp/merge-refused.log \
    | cut -c1-200))"
if [ "$(left)" -gt 150 ]; then
    SEQS=8 ROUNDS=2 BUDGET_S=$(($(left) - 90)) bash experiments/h200/abbench.sh 8b 128 32 default \
        q6all4=FAK_MATVEC_SPLIT_Q6=4
    log "abbench q6 rows: exit $?"
    grep -E "^(==|depth 128)" "$OUT/bench.log" | cut -c1-240
else
    log "abbench q6 rows: SKIPPED ($(left) s left)"
fi

cap=$(($(left) - 90))
if [ "$cap" -gt 40 ]; then
    LAYOUTS=256/4/1/split2,256/4/1/split4,256/4/1/batched,64/4/1/split2,64/4/1/split4
    LAYOUTS=$LAYOUTS,64/4/1/batched,128/8/1/split2,128/8/1/split4,128/8/1/batched
    LAYOUTS=$LAYOUTS,256/16/1/split2,256/16/1/split4
    timeout "$cap" "$BIN/matvec-bench" --products \
        attn_qkv,attn_qk,attn_v,attn_output,ffn_gate_up,ffn_down,output --paths q8 --plain \
        --batches 1,8 --reps 5 --layouts "$LAYOUTS" > "$OUT/matvec-bench.tsv" \
        2> "$OUT/matvec-bench.err"
    log "matvec-bench: exit $?"
    grep "^#" "$OUT/matvec-bench.tsv" | cut -c1-220 | tail -30
else
    log "matvec-bench: SKIPPED ($(left) s left)"
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
cp /tmp/synth.log "$OUT/synth-s22a.log" 2>/dev/null
(cd "$OUT" && tar czf misc.tgz matvec-bench.err gpu.csv synth-*.log 2>/dev/null
    rm -f matvec-bench.err gpu.csv synth-*.log)
log "done"
