#!/usr/bin/env bash
# Session 2026-12-07 #21, call 2: the prune on NVIDIA, then s21b.sh with the time left.
#   1. the suites the prune touched, on the device (lavapipe cannot run the cooperative-matrix
#      kernels whose WGSL lost the removed forms' paths: the flash prefill attention and the
#      chunked delta rule's coop form): gpu_attn_prefill (every tile, coop included, against
#      the f64 reference), gpu_gated_delta (every coop form against the f64 recurrence and bit
#      for bit), gpu_matvec (the wide mat-vec's Q6_K units now in the lean form only), model
#      int-dot and prefill tests of qwen35 and qwen3 (their pins) → tests.log (≤ ~200 s);
#   2. s21b.sh (the 8B pass of peers.sh and the Q6_K split arms) until DEADLINE.
# Prepare: RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh gpu_attn_prefill
# gpu_gated_delta gpu_matvec model_qwen35 model_qwen3; carry target/h200/{bin.txz, gl,
# built-at, commit} (llama.cpp's source too unless the machine is the warm one of call 1).
set -uo pipefail
T0=$SECONDS
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
tests() { # tests LABEL TIMEOUT BINARY FILTERS...: libtest ORs whole test paths
    local label=$1 limit=$2 binary=$3
    shift 3
    echo "== $label (at $((SECONDS - T0)) s)" >> "$OUT/tests.log"
    timeout "$limit" "$BIN/$binary" "$@" 2>&1 \
        | grep -E "^test |test result|panicked at|differ|pinned|SKIPPED" | cut -c1-300 \
        | head -40 >> "$OUT/tests.log"
}
tests "gpu_attn_prefill" 120 gpu gpu_attn_prefill::
tests "gpu_gated_delta" 60 gpu gpu_gated_delta::
tests "gpu_matvec" 150 gpu gpu_matvec::
tests "model int-dot and prefill" 120 model model_qwen35::int_dot model_qwen35::a_prefill_split \
    model_qwen35::prefill_then_decode model_qwen3::int_dot model_qwen3::q4_k_m_greedy
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"
DEADLINE=$((${DEADLINE:-585} - (SECONDS - T0))) bash experiments/h200/s21b.sh
