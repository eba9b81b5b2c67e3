#!/usr/bin/env bash
# One short device call (~90 s wall): the integer mat-vec's wide form (FAK_MATVEC_WIDE=1) on the
# device's own paths before it becomes the default — gpu_matvec's wide / quantizing / integer
# tests, then model_qwen35 and model_qwen3 with it on (one test at a time). Carried: the
# decode-check.sh build (target/c2: gpu and model group binaries, harness). Files back:
# parity.log, gpu.csv.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
{
    echo "== gpu_matvec: the wide form, the quantized gate/up output, the integer path"
    timeout 40 "$BIN/gpu" gpu_matvec::the_wide_form gpu_matvec::a_gate_up_pairing_quantizes \
        gpu_matvec::the_integer_path_matches 2>&1 | grep -E "^test |test result|panicked" | head -20
    for t in model_qwen35 model_qwen3; do
        echo "== $t FAK_MATVEC_WIDE=1"
        FAK_MATVEC_WIDE=1 timeout 60 "$BIN/model" "$t::" --skip llama_cpp --skip mlx_lm \
            --test-threads=1 2>&1 | grep -E "^test |test result|panicked at|cosine [0-9.]+ <" | head -40
    done
} > "$OUT/parity.log" 2>&1
cat "$OUT/parity.log"
