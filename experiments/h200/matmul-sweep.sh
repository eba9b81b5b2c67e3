#!/usr/bin/env bash
# One device call (nvidia-h200), about 3 minutes: which change to the cooperative-matrix mat-mul's
# K loop moves its rate (experiments/NOTES.md, "coop-mm (session 2026-12-04 #2)").
#  1. gpu_matmul, every test: among them every_coop_tiling_matches_the_cpu, each K loop of
#     CoopTiling::SWEEP (K step 32 / 64 × register prefetch on / off × one / two pairs of tiles)
#     against the CPU on the 16×16 path, which runs nowhere else;
#  2. matmul-bench --sweep: each K loop checked against the CPU once more (one `check` line per
#     kernel, PASS / FAIL; a FAIL is not timed), then each, and the f32 kernel as the control,
#     timed back to back on the Qwen3.5-27B ffn_gate_up (34816 × 5120) and ffn_down
#     (5120 × 17408) with F16 and Q4_K weights at 128 and 2048 tokens; SM clocks logged meanwhile.
# Carried: target/h200 from `MATMUL_BENCH=1 RELEASE_TARGET_DIR=… experiments/h200/prepare.sh
# gpu_matmul`. Writes 5 files: gpu.csv, matmul-parity.log, matmul-sweep.tsv, matmul-sweep.err,
# clocks.csv.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
{
    echo "== gpu_matmul (cooperative matrices on by default; every K loop of the sweep)"
    timeout 150 "$BIN/gpu_matmul" 2>&1 | grep -E "^test |test result|panicked|FAIL" | head -40
} > "$OUT/matmul-parity.log" 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu \
    --format=csv -lms 500 > "$OUT/clocks.csv" 2>&1 &
CLOCKS=$!
timeout 240 "$BIN/matmul-bench" --sweep > "$OUT/matmul-sweep.tsv" 2> "$OUT/matmul-sweep.err"
echo "matmul-bench rc=$?" >> "$OUT/matmul-sweep.err"
kill $CLOCKS
cat "$OUT/matmul-parity.log"
cat "$OUT/matmul-sweep.tsv"
tail -5 "$OUT/matmul-sweep.err"
