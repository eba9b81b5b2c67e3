#!/usr/bin/env bash
# Session 2026-12-07 #23, one call (≤ DEADLINE, default 540 s): what #22's call left unmeasured.
#   0 s   the 8B synth (Q4_K_M --fast-random, seed 0) into /dev/shm in the background; the
#         dense decode-in-flight test as b4fc54f rewrote it (against the same steps one at a
#         time; #22's first version failed on NVIDIA for comparing with a cold prefill) and its
#         hybrid twin → tests.log;
#   then  the 8B at 8 sequences, the engine's default (Q6_K split by 2 under 4096 rows) against
#         q6all4 (FAK_MATVEC_SPLIT_Q6=4: #21's rule), interleaved twice (abbench.sh); each
#         batched line gives the aggregate waited-for and with two steps in flight (issue 21's
#         aggregate decode; #22 predicted 689 → 760–790 tok/s) → bench.log, bench-json.tgz,
#         clocks.csv;
#   then  matvec-bench on the 8B's decode products alone and warm (a discarded warm-up pass,
#         then --reps 9): the q8 path, batches 1 and 8, the engine's layouts against the
#         16-team ones with every split (#22's pass was disturbed: the same pipeline gave 25.7
#         and 72.7 µs) → matvec-bench.tsv;
#   then  with the time left, the 27B at 8 sequences, default only, one round → bench.log.
# Prepare: MATVEC_BENCH=1 RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh
# batch_invariance scheduler gpu_matvec; carry target/h200/{bin.txz, gl, built-at, commit}.
# Returns: steps.log, tests.log, bench.log, bench-json.tgz, clocks.csv, matvec-bench.tsv,
# misc.tgz (matvec-bench.err, the synth logs, gpu.csv).
set -uo pipefail
T0=$SECONDS
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
DEADLINE=${DEADLINE:-540}
synth_8b

tests "decode steps in flight" 90 serving batch_invariance::dense_decode_steps \
    batch_invariance::hybrid_decode_steps
log "tests done"
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"

wait $SYNTH
log "synth: exit $? ($(ls -la $MODEL 2>&1 | cut -c1-120))"
if [ "$(left)" -gt 200 ]; then
    SEQS=8 ROUNDS=2 BUDGET_S=$(($(left) - 150)) bash experiments/h200/abbench.sh 8b 128 32 default \
        q6all4=FAK_MATVEC_SPLIT_Q6=4
    log "abbench 8b q6 rows: exit $?"
    grep -E "^(==|depth 128)" "$OUT/bench.log" | cut -c1-240
else
    log "abbench 8b: SKIPPED ($(left) s left)"
fi

LAYOUTS=256/4/1/split2,256/4/1/split4,256/4/1/batched,64/4/1/split2,64/4/1/split4
LAYOUTS=$LAYOUTS,64/4/1/batched,128/8/1/split2,128/8/1/split4,128/8/1/batched
LAYOUTS=$LAYOUTS,256/16/1/split2,256/16/1/split4
cap=$(($(left) - 60))
if [ "$cap" -gt 60 ]; then
    matvec_bench_8b 1 40 "$LAYOUTS" > /dev/null 2> "$OUT/matvec-bench-warmup.err"
    log "matvec-bench warm-up: exit $?"
    matvec_bench_8b 9 $(($(left) - 60)) "$LAYOUTS" > "$OUT/matvec-bench.tsv" \
        2> "$OUT/matvec-bench.err"
    log "matvec-bench: exit $?"
    grep "^#" "$OUT/matvec-bench.tsv" | cut -c1-220 | tail -30
else
    log "matvec-bench: SKIPPED ($(left) s left)"
fi

if [ "$(left)" -gt 150 ]; then
    SEQS=8 ROUNDS=1 BUDGET_S=$(($(left) - 10)) bash experiments/h200/abbench.sh 27b 128 32 default
    log "abbench 27b: exit $?"
    grep -E "^(==|depth 128)" "$OUT/bench.log" | tail -4 | cut -c1-240
else
    log "abbench 27b: SKIPPED ($(left) s left)"
fi
(cd "$OUT" && tar czf misc.tgz matvec-bench*.err gpu.csv synth-*.log 2>/dev/null
    rm -f matvec-bench*.err gpu.csv synth-*.log)
log "done"
