#!/usr/bin/env bash
# One device call (nvidia-h200): the x16 cooperative-matrix mat-mul, the 16×16 default since
# 2026-12-05, on the hybrid and dense model suites (each with the default and with
# FAK_MATMUL_TILING=x16-128x128-k64-1st, the kernel the default names) and `harness bench`
# prefill on the Qwen3.5-27B shape (Q4_K_M --fast-random) with both, 2 interleaved rounds. Run it
# on a build before the flip to compare the staged kernel (the default there) with x16; after it
# both arms are x16 and the suites' parity is what it checks.
# Prepare: prepare.sh model_qwen35 model_qwen3 model_qwen2 (carry ≤ ~22 MiB: README.md).
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
X16=x16-128x128-k64-1st
"$BIN/harness" synth --arch qwen35 --preset qwen35-27b --quant q4_k_m --fast-random --out /dev/shm/q27.gguf > $OUT/synth.log 2>&1 &
for t in model_qwen35 model_qwen3 model_qwen2; do for tiling in "" $X16; do echo "== $t tiling=${tiling:-default}"; FAK_MATMUL_TILING=$tiling timeout 100 $BIN/$t --skip llama_cpp --skip mlx_lm 2>&1 | grep -E '^test |test result|panicked at|cosine [0-9.]+ <'; done; done > $OUT/parity.log 2>&1
wait
for round in 1 2; do for tiling in "" $X16; do echo "== round $round tiling=${tiling:-default}"; FAK_MATMUL_TILING=$tiling timeout 90 $BIN/harness bench --model /dev/shm/q27.gguf --depths 128,2048 --n-out 8 --json-out $OUT/bench-27b-${tiling:-default}-$round.json 2>&1 | grep -E "^depth"; done; done > $OUT/bench.log 2>&1
cat $OUT/parity.log $OUT/bench.log
