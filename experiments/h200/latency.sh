#!/usr/bin/env bash
# latency (2026-12-06 #15, issue 18; ~190 s: `multi.sh latency:200`): three decode kernels whose
# critical path was a chain of dependent global loads, their loads batched — the same arithmetic
# in the same order, so the same bits, and no switch (the old kernels are `harness-base`,
# prepare.sh's BASE_HARNESS: main before the merge):
#   - gdn_decode step 1 (the conv): a lane's conv windows loaded before any sum or roll (48 a
#     token on the 27B; the 8B has none);
#   - attn_decode_rope's head norms: strided_squares.wgsl (its tail now one guarded batch too),
#     4 values a lane on a 256-wide head, 2 on a 128-wide one (16 a token on the 27B, 36 on the 8B);
#   - argmax's chunks: a lane's 16 logits loaded before any comparison (1 a token).
# 1. Tests on NVIDIA → tests.log: gpu_gated_delta's fused-decode tests, gpu_attn_decode's rope
#    forms (rope_kv's and the default's bits) and walks, gpu_argmax, gpu_rms_norm (the shared
#    strided_squares), the int-dot model tests of both shapes and the 27B's decode probe.
# 2. `harness bench --sequences 8` (one sequence timed too) at depth 128, 32 out, arms base and
#    new interleaved two rounds on the 27B, then on the 8B as far as its budget goes → bench.log,
#    bench-json-{27b,8b}.tgz, clocks.csv.
# Prepare: BASE_HARNESS=<main's harness before latency> MATVEC_BENCH=0
#   RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh gpu_gated_delta \
#   gpu_attn_decode gpu_argmax gpu_rms_norm model_qwen35 model_qwen3
# Knobs: BUDGET_S (27B benches, 120), BUDGET_S8 (8B, 60), ROUNDS (2), SEQS (8; empty: one
# sequence only), EST_S (35) and EST_S8 (20): a bench's expected seconds for the budget check.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
[ -x "$BIN/harness-base" ] || { echo "harness-base not carried" >&2; exit 2; }
{
    timeout 60 "$BIN/gpu" gpu_gated_delta::fused_decode gpu_gated_delta::the_wide \
        gpu_attn_decode::the_rope_form gpu_attn_decode::the_oneshot_rope \
        gpu_attn_decode::one_sequence gpu_argmax:: gpu_rms_norm:: 2>&1
    timeout 60 "$BIN/model" model_qwen35::int_dot model_qwen35::a_decode_probe \
        model_qwen3::int_dot 2>&1
} | grep -E "^test |test result|panicked at" | cut -c1-300 > "$OUT/tests.log"
cat "$OUT/tests.log"
arms=(base=HARNESS=harness-base new)
SEQS=${SEQS-8} EST_S=${EST_S:-35} BUDGET_S=${BUDGET_S:-120} bash experiments/h200/abbench.sh 27b 128 32 "${arms[@]}"
mv "$OUT/bench-json.tgz" "$OUT/bench-json-27b.tgz"
SEQS=${SEQS-8} EST_S=${EST_S8:-20} BUDGET_S=${BUDGET_S8:-60} bash experiments/h200/abbench.sh 8b 128 32 "${arms[@]}"
mv "$OUT/bench-json.tgz" "$OUT/bench-json-8b.tgz"
