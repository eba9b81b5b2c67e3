#!/usr/bin/env bash
# Session 2026-12-07 #23, call 2 (≤ DEADLINE, default 500 s): the short-row rule on the 8B's
# 4096-column products (issue 21's 8-sequence aggregate; issue 18's one sequence beside it).
# s23a's warm matvec-bench (H100, --reps 9) put the 8B's products of a step of 8 vectors at
# 8204 µs in the engine's layouts against 5779 with the 4096-column products (attn_qkv, attn_qk,
# attn_output, gate/up, the head) in 64/4/1/split4 — and one vector at 2606 against 2672 µs.
#   1. the 8B at 8 sequences (abbench.sh, 2 rounds interleaved): default;
#      c4096s4 (FAK_MATVEC_SHORT_MIN_COLS=4096: those products in 64/4/1/split4); head (the head alone in 64/4/1/split4: the rule
#      from 100000 rows);
#   2. (WITH_27B=0: skipped) the 27B at 8 sequences (2 rounds): default (its short rows in 64/4/1, split 2) against
#      s4 (FAK_MATVEC_SHORT_LAYOUT=64/4/1/split4).
#   3. with the time left: matmul-bench --sweep --tokens 160,320,640 (every x16 tiling checked
#      against the CPU, then timed on the 8B layer's products: a later turn's prefill steps,
#      issue 21's 8-agent later turn; #22's profile put them at 52–92 TFLOP/s at 160 tokens)
#      → matmul-sweep.tsv.
# RESERVE (150): seconds the 8B A/B leaves for the rest. Each bench line gives the one-sequence decode and both 8-sequence aggregates.
# Prepare: HARNESS_ONLY=1 MATMUL_BENCH=1 RELEASE_TARGET_DIR=/work/targets/rel
# experiments/h200/prepare.sh;
# carry target/h200/{bin.txz, gl, built-at, commit}.
# Returns: steps.log, bench.log, bench-json.tgz, clocks.csv, matmul-sweep.tsv, misc.tgz (synth
# logs, gpu.csv, matmul-sweep.err).
set -uo pipefail
T0=$SECONDS
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
DEADLINE=${DEADLINE:-500}
ROWS='ffn_gate_up|ffn_down|attn_qkv|attn_output|^ *output' SEQS=8 ROUNDS=2 \
    BUDGET_S=$(($(left) - ${RESERVE:-150})) bash experiments/h200/abbench.sh 8b 128 32 default \
    "c4096s4=FAK_MATVEC_SHORT_MIN_COLS=4096;FAK_MATVEC_SHORT_LAYOUT=64/4/1/split4" \
    "head=FAK_MATVEC_SHORT_MIN_COLS=4096;FAK_MATVEC_SHORT_MIN_ROWS=100000;FAK_MATVEC_SHORT_LAYOUT=64/4/1/split4"
log "abbench 8b: exit $?"
grep -E "^(==|depth 128)" "$OUT/bench.log" | cut -c1-200
if [ "${WITH_27B:-1}" = 1 ]; then
    SEQS=8 ROUNDS=2 BUDGET_S=$(($(left) - 100)) bash experiments/h200/abbench.sh 27b 128 32 \
        default s4=FAK_MATVEC_SHORT_LAYOUT=64/4/1/split4
    log "abbench 27b: exit $?"
    grep -E "^(==|depth 128)" "$OUT/bench.log" | tail -12 | cut -c1-200
fi
cap=$(($(left) - 5))
if [ "$cap" -gt 45 ]; then
    timeout "$cap" "$BIN/matmul-bench" --sweep --tokens 160,320,640 > "$OUT/matmul-sweep.tsv" \
        2> "$OUT/matmul-sweep.err"
    log "matmul-bench sweep: exit $?"
    grep -E "^check|layer" "$OUT/matmul-sweep.tsv" | cut -c1-160 | tail -40
else
    log "matmul-bench sweep: SKIPPED ($(left) s left)"
fi
(cd "$OUT" && tar czf misc.tgz gpu.csv synth-*.log matmul-sweep.err 2>/dev/null
    rm -f gpu.csv synth-*.log matmul-sweep.err)
log "done"
