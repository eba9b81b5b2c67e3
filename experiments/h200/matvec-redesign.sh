#!/usr/bin/env bash
# One device call (nvidia-h200), ~4 minutes of wall time expected (≤ 9.5 by its timeouts: bench
# 150 s, parity 60 s, six harness runs 60 s each): issue 18's decode mat-vec redesign
# (branch matvec, experiments/NOTES.md "matvec (2026-12-05 #4)").
# 1. matvec-bench: every product of the Qwen3-8B Q4_K_M decode step and Qwen3.5-27B's MLP as the
#    engine binds them, in the narrow integer layouts (256/4/1, 256/16/1: today's defaults) and
#    the wide form's (…/wide: wgsl/matvec_q8_wide.wgsl) plus the f32 path's default for
#    reference; each binding checked against the CPU before it is timed (FAILED lines are not
#    timed). → matvec-bench.tsv (+ .err)
# 2. gpu_matvec's integer-path tests on the H200 (32-wide subgroups, native SDot): the wide form's
#    and the quantized gate/up output's. → matvec-parity.log
# 3. harness bench (synth --fast-random, depth 128, 32 tokens): the integer path in today's
#    layouts (256/4/1, the quantizing gate/up 256/16/1) and with FAK_MATVEC_WIDE=1 (the same
#    layouts in the wide form for every Q4_K/Q6_K q8 product), alternating: the 27B shape
#    twice each, the 8B once each. → matvec-decode.log
# Files back: gpu.csv, matvec-bench.tsv, matvec-bench.err, matvec-parity.log, matvec-decode.log,
#    synth.log (6).
# Carried: target/h200 from
#   MATVEC_BENCH=1 RELEASE_TARGET_DIR=/work/targets/matvec-rel experiments/h200/prepare.sh gpu_matvec
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
M8=/dev/shm/qwen3-8b-q4_k_m.gguf
M27=/dev/shm/qwen35-27b-q4_k_m.gguf
{
    [ -f "$M8" ] || "$BIN/harness" synth --arch qwen3 --preset qwen3-8b --quant q4_k_m \
        --fast-random --out "$M8"
    [ -f "$M27" ] || "$BIN/harness" synth --arch qwen35 --preset qwen35-27b --quant q4_k_m \
        --fast-random --out "$M27"
} > "$OUT/synth.log" 2>&1 &
SYNTH=$!
# The layouts: the f32 default (reference), the integer path's two kept narrow layouts, and the
# wide form's candidates and a few more team shapes.
LAYOUTS=64/1/1,256/4/1,256/16/1
LAYOUTS+=,256/4/1/wide,128/8/1/wide,128/4/2/wide,256/16/1/wide
LAYOUTS+=,64/1/1/wide,64/4/1/wide,128/2/1/wide,256/8/1/wide,128/8/2/wide
timeout 150 "$BIN/matvec-bench" --layouts "$LAYOUTS" > "$OUT/matvec-bench.tsv" \
    2> "$OUT/matvec-bench.err"
echo "matvec-bench exit $?" >> "$OUT/matvec-bench.err"
grep -E "^#|FAILED" "$OUT/matvec-bench.tsv"
{
    echo "== gpu_matvec: the wide form, the quantized gate/up output, the integer path"
    # The group binary itself: its gpu_matvec launcher adds the filter gpu_matvec::, which
    # libtest ORs with these (every test of the file would run).
    timeout 60 "$BIN/gpu" gpu_matvec::the_wide_form gpu_matvec::a_gate_up_pairing_quantizes \
        gpu_matvec::the_integer_path_matches 2>&1 |
        grep -E "^test |test result|panicked|FAIL|assert" | head -40
} > "$OUT/matvec-parity.log" 2>&1
cat "$OUT/matvec-parity.log"
wait $SYNTH
run() {
    local model=$1
    shift
    echo "== $model $*" >> "$OUT/matvec-decode.log"
    env FAK_INT_DOT=1 "$@" timeout 60 "$BIN/harness" bench --model "$model" --depths 128 \
        --n-out 32 >> "$OUT/matvec-decode.log" 2>&1
}
run "$M27" FAK_MATVEC_WIDE=0
run "$M27" FAK_MATVEC_WIDE=1
run "$M8" FAK_MATVEC_WIDE=0
run "$M8" FAK_MATVEC_WIDE=1
run "$M27" FAK_MATVEC_WIDE=0
run "$M27" FAK_MATVEC_WIDE=1
grep -E "^==|^depth [0-9]+: decode|read bandwidth" "$OUT/matvec-decode.log"
