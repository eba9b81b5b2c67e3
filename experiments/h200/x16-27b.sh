#!/usr/bin/env bash
# One device call (nvidia-h200): the x16 cooperative-matrix mat-mul, the 16×16 default since
# 2026-12-05, on the hybrid and dense model suites (parity on the default path), then
# `harness bench` prefill on the Qwen3.5-27B shape (Q4_K_M --fast-random) with the default (x16)
# and with FAK_MATMUL_TILING=k32-prefetch-1buf-2x4 (the staged kernel, the default before),
# 2 interleaved rounds: the 27B's before/after of the x16 GEMM. Last, `harness selftest`
# (issue 17: the H200 selftest after the one-way engine move).
# Prepare: prepare.sh model_qwen35 model_qwen3 model_qwen2 (carry ≤ ~22 MiB: README.md).
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
STAGED=k32-prefetch-1buf-2x4
"$BIN/harness" synth --arch qwen35 --preset qwen35-27b --quant q4_k_m --fast-random --out /dev/shm/q27.gguf > $OUT/synth.log 2>&1 &
for t in model_qwen35 model_qwen3 model_qwen2; do echo "== $t"; timeout 150 $BIN/$t --skip llama_cpp --skip mlx_lm 2>&1 | grep -E '^test |test result|panicked at|cosine [0-9.]+ <'; done > $OUT/parity.log 2>&1
wait
for round in 1 2; do for tiling in "" $STAGED; do echo "== round $round tiling=${tiling:-default}"; FAK_MATMUL_TILING=$tiling timeout 90 $BIN/harness bench --model /dev/shm/q27.gguf --depths 128,2048 --n-out 8 --json-out $OUT/bench-27b-${tiling:-default}-$round.json > $OUT/bench-27b-${tiling:-default}-$round.txt 2>&1; grep -E "^depth" $OUT/bench-27b-${tiling:-default}-$round.txt; done; done > $OUT/bench.log 2>&1
cat $OUT/parity.log $OUT/bench.log
timeout 120 "$BIN/harness" selftest --out "$OUT/selftest.json" > "$OUT/selftest.log" 2>&1
echo "selftest exit $?"; tail -25 "$OUT/selftest.log"
# At most 8 files come back from a call: the per-run JSONs and texts in one archive.
(cd "$OUT" && tar czf bench-27b.tgz bench-27b-* selftest.json && rm -f bench-27b-*.json bench-27b-*.txt selftest.json)
