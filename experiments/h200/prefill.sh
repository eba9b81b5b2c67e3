#!/usr/bin/env bash
# One device call (nvidia-h200): the prefill mat-mul on cooperative matrices, from the kernel to
# the whole prompt. matmul.sh first (the mat-mul's GPU test with FAK_COOP_MATRIX=1: every tiling
# against the CPU; then matmul-bench: every variant × tiling at the 8B layer's shapes), then
# `harness bench` on the Qwen3-8B-shaped Q4_K_M model (made here, --fast-random) at prompt depths
# 128 / 2048: register-tiled f32 mat-mul vs cooperative matrices, each at prefill chunks of 256
# (the engine's default) and 2048 — prefill tok/s and the per-op prefill profile side by side in
# one process state per arm. llama.cpp is not built here (bench-decode.sh does it; its pp128 /
# pp2048 on this file: 5710 / 9879 tok/s, 2026-12-03 call 1 of session #4).
# Carried: target/h200 from `MATMUL_BENCH=1 prepare.sh gpu_matmul …`.
set -uo pipefail
cd "$(dirname "$0")/../.."
bash experiments/h200/matmul.sh
source experiments/h200/setup.sh
MODEL=/dev/shm/qwen3-8b-q4_k_m.gguf
"$BIN/harness" synth --arch qwen3 --preset qwen3-8b --quant q4_k_m --fast-random --out "$MODEL" > "$OUT/synth.log" 2>&1
for arm in "0 256" "1 256" "1 2048" "0 2048"; do
    set -- $arm
    echo "== FAK_COOP_MATRIX=$1 harness bench --prefill-chunk $2" >> "$OUT/bench.log"
    FAK_COOP_MATRIX=$1 timeout 150 "$BIN/harness" bench --model "$MODEL" --depths 128,2048 --n-out 16 \
        --profile-steps 2 --prefill-chunk "$2" --json-out "$OUT/bench-coop$1-chunk$2.json" >> "$OUT/bench.log" 2>&1
done
grep -E "^==|^depth|prefill|matmul|attn_prefill" "$OUT/bench.log" | head -120
