#!/usr/bin/env bash
# Diagnosis after call 3's parity failures: model_qwen35 and prefix_cache with the integer
# mat-vec pinned off (FAK_INT_DOT=0), full failure messages.
set -uo pipefail
cd "$(dirname "$0")"
source experiments/h200/setup.sh
export FAK_INT_DOT=0
timeout 120 "$BIN/model_qwen35" --skip llama_cpp --skip mlx_lm --test-threads=1 > "$OUT/q35.log" 2>&1
echo "model_qwen35 rc=$?"
timeout 60 "$BIN/prefix_cache" > "$OUT/pc.log" 2>&1
echo "prefix_cache rc=$?"
grep -E "test result|panicked" -A3 "$OUT/q35.log" "$OUT/pc.log" | grep -v "^--$" | head -40
