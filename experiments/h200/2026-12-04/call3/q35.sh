#!/usr/bin/env bash
# 2026-12-04 call 3: model_qwen35 with the reference that rounds as the coop mat-mul does.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
{ time timeout 120 "$BIN/model_qwen35" --skip llama_cpp --skip mlx_lm --nocapture 2>&1 | grep -E "^test |test result|panicked|cosine|Forced"; } > "$OUT/model_qwen35.log" 2>&1
cat "$OUT/model_qwen35.log"
