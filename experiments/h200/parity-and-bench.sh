#!/usr/bin/env bash
# One device call (nvidia-h200) after a kernel change: the carried GPU suites and model_qwen3 on
# the H200's own paths (subgroup 32, f16, 16x16 cooperative matrices off and on), then
# `harness bench` on the Qwen3-8B-shaped Q4_K_M model at depths 128 and 2048.
# Carried: target/h200 (experiments/h200/prepare.sh). Extra arguments go to `harness bench`.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh

MODEL=/dev/shm/qwen3-8b-q4_k_m.gguf
"$BIN/harness" synth --arch qwen3 --preset qwen3-8b --quant q4_k_m --fast-random --out "$MODEL" \
    > "$OUT/synth.log" 2>&1 &
SYNTH=$!

{
    for t in "$BIN"/gpu_*; do
        for coop in 0 1; do
            echo "== $(basename "$t") FAK_COOP_MATRIX=$coop"
            FAK_COOP_MATRIX=$coop timeout 120 "$t" 2>&1 | grep -E "test result|FAILED|panicked|failed" | head -20
        done
    done
    for coop in 0 1; do
        echo "== model_qwen3 FAK_COOP_MATRIX=$coop (peers llama.cpp and mlx are not on this machine)"
        FAK_COOP_MATRIX=$coop timeout 240 "$BIN/model_qwen3" --skip llama_cpp --skip mlx_lm 2>&1 \
            | grep -E "^test |test result|panicked" | head -30
    done
} > "$OUT/parity.log" 2>&1

wait $SYNTH
echo "== harness bench" > "$OUT/bench.log"
timeout 200 "$BIN/harness" bench --model "$MODEL" --depths "${DEPTHS:-128,2048}" --n-out 64 \
    --json-out "$OUT/bench-fak.json" "$@" >> "$OUT/bench.log" 2>&1
cat "$OUT/parity.log" "$OUT/bench.log"
