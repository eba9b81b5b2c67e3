#!/usr/bin/env bash
# One short device call (~2 min with the machine's start): checks one-wgpu-instance-per-process
# (engine/gpu/context.rs `instance_on`) where it failed before — model_qwen35, whose q4_k_m test
# lost the adapter at its 3rd engine (2026-12-04 #2, calls 3 and 7), and `harness selftest`,
# whose last 20 engine loads found no adapter (call 6) — both with the defaults (the integer
# mat-vec on). Carried: target/h200 from `prepare.sh model_qwen35`. Writes 4 files.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
timeout 75 "$BIN/model_qwen35" --skip llama_cpp --skip mlx_lm --test-threads=1 > "$OUT/q35.log" 2>&1
echo "model_qwen35 rc=$?"
grep -E "test result|panicked" -A2 "$OUT/q35.log" | head -12
timeout 120 "$BIN/harness" selftest --out "$OUT/selftest.json" > "$OUT/selftest.log" 2>&1
echo "selftest rc=$?"
grep -E "selftest on|fail|FAIL|force" "$OUT/selftest.log" | head -12
