#!/usr/bin/env bash
# Diagnosis of the model-suite failures of landing.sh (2026-12-04 call 1).
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
Q35=(f32_logits_match_the_cpu_reference_on_every_path_and_step_shape prefill_then_decode_continues_the_state_of_a_longer_prefill)
for env in "" "FAK_COOP_MATRIX=0"; do
  for rep in 1 2; do
    echo "== model_qwen35 env=[$env] rep $rep"
    env $env timeout 60 "$BIN/model_qwen35" "${Q35[@]}" --test-threads=1 2>&1 | grep -E "^test |test result|panicked|cosine|Forced" | head -40
  done
  echo "== model_qwen3 env=[$env] one thread"
  env $env timeout 90 "$BIN/model_qwen3" --skip llama_cpp --skip mlx_lm --test-threads=1 2>&1 | grep -E "^test |test result|panicked|cosine|Forced|error|Segm" | head -40
  echo "rc ${PIPESTATUS[0]}"
done > "$OUT/diag.log" 2>&1
cat "$OUT/diag.log"
