#!/usr/bin/env bash
# latency (2026-12-06 #15, issue 18; ~190 s: `multi.sh latency:200`): gdn_decode's conv step with
# its loads batched (wgsl/gdn_decode.wgsl step 1: a lane's conv windows, up to CONV_BATCH = 4
# channels, loaded before any sum or roll; the same fmas in the same order, so the same bits). No
# switch: the old kernel is `harness-base`, prepare.sh's BASE_HARNESS (main before the merge).
# 1. Tests on NVIDIA → tests.log: gpu_gated_delta's fused-decode tests (default and wide splits
#    against the CPU layer and each other, bit for bit where they say), the 27B's int-dot model
#    tests and its decode probe's bits; model_qwen3's int-dot tests as the no-GDN control.
# 2. `harness bench --sequences 8` (one sequence timed too) at depth 128, 32 out, arms base and
#    new interleaved two rounds on the 27B (the only shape with a Gated DeltaNet), then the 8B
#    (no gdn_decode: a control, must not move) as far as its budget goes → bench.log,
#    bench-json-{27b,8b}.tgz, clocks.csv.
# Prepare: BASE_HARNESS=<main's harness before latency> MATVEC_BENCH=0
#   RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh gpu_gated_delta model_qwen35 model_qwen3
# Knobs: BUDGET_S (27B benches, 120), BUDGET_S8 (8B, 55), ROUNDS (2).
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
[ -x "$BIN/harness-base" ] || { echo "harness-base not carried" >&2; exit 2; }
{
    timeout 60 "$BIN/gpu" gpu_gated_delta::fused_decode gpu_gated_delta::the_wide \
        gpu_gated_delta::prefill_then_decode gpu_gated_delta::whole_layer 2>&1
    timeout 60 "$BIN/model" model_qwen35::int_dot model_qwen35::a_decode_probe \
        model_qwen3::int_dot 2>&1
} | grep -E "^test |test result|panicked at" | cut -c1-300 > "$OUT/tests.log"
cat "$OUT/tests.log"
arms=(base=HARNESS=harness-base new)
SEQS=8 EST_S=35 BUDGET_S=${BUDGET_S:-120} bash experiments/h200/abbench.sh 27b 128 32 "${arms[@]}"
mv "$OUT/bench-json.tgz" "$OUT/bench-json-27b.tgz"
SEQS=8 EST_S=20 BUDGET_S=${BUDGET_S8:-55} bash experiments/h200/abbench.sh 8b 128 32 "${arms[@]}"
mv "$OUT/bench-json.tgz" "$OUT/bench-json-8b.tgz"
