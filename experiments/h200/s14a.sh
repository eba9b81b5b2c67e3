#!/usr/bin/env bash
# One device call (an H100 or H200, ~300 s; no llama.cpp), session 2026-12-06 #14's first:
#   1. `gpu_gated_delta::` on NVIDIA → tests.log: the poisoned-scratch test of every chunked
#      form (it failed on an H100 in #13 for the plain coop form, in gdnprep's build; main's
#      default form's verdict was never seen) and the rest of the delta-rule suite.
#   2. The prefill step's size (`--prefill-chunk`, the engine's default 512) at 2048 prompt
#      tokens: issue 19's two shares (the 8B's prefill attention 6.0 %, the 27B's delta rule
#      7.5 % of a 2048-token prefill) are measured in 512-token steps; one 2048-token step reads
#      each layer's K/V once and gives the attention 4× the query tiles a dispatch. abbench.sh
#      arms c512 / c1024 / c2048 interleaved, ROUNDS (2) rounds, the 8B then the 27B synth, the
#      profiled rows of the products, attention and delta rule kept → bench.log, bench-json.tgz.
# Prepare: RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh gpu_gated_delta
# Run: bash experiments/h200/multi.sh s14a:330
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
timeout 90 "$BIN/gpu" gpu_gated_delta:: > "$OUT/tests.log" 2>&1
echo "gpu_gated_delta rc=$?" | tee -a "$OUT/tests.log"
grep -E "^test |test result|panicked|FAILED|failed" "$OUT/tests.log" | tail -40
export ROWS='attn_prefill|attention|gated_delta|ffn_gate_up|ffn_down'
BUDGET_S=${BUDGET8_S:-130} bash experiments/h200/abbench.sh 8b 2048 16 \
    c512=--prefill-chunk=512 c1024=--prefill-chunk=1024 c2048=--prefill-chunk=2048
mv "$OUT/bench-json.tgz" "$OUT/bench-json-8b.tgz"
BUDGET_S=${BUDGET27_S:-150} bash experiments/h200/abbench.sh 27b 2048 16 \
    c512=--prefill-chunk=512 c2048=--prefill-chunk=2048 c1024=--prefill-chunk=1024
mv "$OUT/bench-json.tgz" "$OUT/bench-json-27b.tgz"
