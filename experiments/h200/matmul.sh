#!/usr/bin/env bash
# One device call (nvidia-h200), or the tail of one: the prefill mat-mul on the H200's paths.
# First its GPU test with cooperative matrices on (every variant and workgroup tiling against the
# CPU; the 16×16 tiles run nowhere else), then experiments/matmul-bench (GPU time per dispatch
# of every variant × tiling at the Qwen3-8B layer's shapes, Q4_K and Q6_K, 128/512/2048 tokens).
# Carried: target/h200 from prepare.sh with gpu_matmul among its suites and matmul-bench in
# bin.txz (prepare.sh packs it when built: MATMUL_BENCH=1).
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
{
    echo "== gpu_matmul (cooperative matrices on by default)"
    timeout 200 "$BIN/gpu_matmul" 2>&1 | grep -E "^test |test result|panicked|FAIL" | head -40
} > "$OUT/matmul-parity.log" 2>&1
timeout 300 "$BIN/matmul-bench" > "$OUT/matmul-bench.tsv" 2> "$OUT/matmul-bench.err"
cat "$OUT/matmul-parity.log"
grep -E "^#|layer" "$OUT/matmul-bench.tsv"
tail -5 "$OUT/matmul-bench.err"
