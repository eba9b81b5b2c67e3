#!/usr/bin/env bash
# dec8b (2026-12-07 #16, issue 18; ~180 s: `multi.sh dec8b:200`): the decode norms' q8 input in
# one pass (FAK_NORM_Q8=onepass: wgsl/norm_q8.wgsl — each block of x·nw rounded while the row's
# sum of squares is taken, the scale times 1/rms after it), in the quantize dispatch alone and
# in the mat-vec's folded quantize (FAK_DECODE_NORM_FOLD=1: no norm dispatch), and the two-pass
# fold re-timed now that its sum is batched (strided_squares, e4ad55e). Not the default's bits.
# 1. Tests on NVIDIA → tests.log: gpu_matvec's norm-form tests (both forms against the CPU; the
#    one-pass fold bit for bit against the one-pass dispatch; the two-pass fold's own test), and
#    the int-dot model tests of both shapes under FAK_NORM_Q8=onepass, with and without the fold
#    (the cosines against the q8-rounding reference; pins printed, not compared), and serving's
#    batch invariance under onepass + fold where the serving binary is carried.
# 2. `harness bench` at depth 128, 32 out, one sequence: the 8B's arms default / onepass /
#    fold2 (the two-pass fold) / fold1 (the one-pass fold) interleaved ROUNDS (2) times, then the
#    27B's default / onepass / fold1 as far as BUDGET_S goes → bench.log, bench-json-{8b,27b}.tgz,
#    clocks.csv. `FAK_DECODE_MERGE=0` in every fold arm (the merge alone lost 3 %, #9).
# Prepare: MATVEC_BENCH=0 RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh \
#   gpu_matvec model_qwen3 model_qwen35 [batch_invariance]
# Knobs: ROUNDS (2), BUDGET_S8 (8B benches, 65), BUDGET_S (27B benches, 75: one round of 3).
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
onepass=(FAK_NORM_Q8=onepass)
fold=(FAK_DECODE_NORM_FOLD=1 FAK_DECODE_MERGE=0)
{
    timeout 45 "$BIN/gpu" gpu_matvec::each_norm_form gpu_matvec::the_one_pass_norm \
        gpu_matvec::the_norm_quantized_in_the_workgroup 2>&1
    env "${onepass[@]}" timeout 30 "$BIN/model" model_qwen3::int_dot model_qwen35::int_dot 2>&1
    env "${onepass[@]}" "${fold[@]}" timeout 30 "$BIN/model" model_qwen3::int_dot \
        model_qwen35::int_dot 2>&1
    [ ! -x "$BIN/serving" ] || env "${onepass[@]}" "${fold[@]}" FAK_INT_DOT=1 timeout 25 \
        "$BIN/serving" batch_invariance:: 2>&1
} | grep -E "^test |test result|panicked at|codes differ by one" | cut -c1-300 > "$OUT/tests.log"
cat "$OUT/tests.log"
arms8=(default "onepass=${onepass[*]}" "fold2=${fold[*]// /;}"
    "fold1=${onepass[*]};${fold[*]// /;}")
arms27=(default "onepass=${onepass[*]}" "fold1=${onepass[*]};${fold[*]// /;}")
ROWS='attn_q|ffn_gate_up|gdn_qkv' EST_S=9 BUDGET_S=${BUDGET_S8:-65} \
    bash experiments/h200/abbench.sh 8b 128 32 "${arms8[@]}"
mv "$OUT/bench-json.tgz" "$OUT/bench-json-8b.tgz"
ROWS='attn_q|ffn_gate_up|gdn_qkv' EST_S=22 BUDGET_S=${BUDGET_S:-75} \
    bash experiments/h200/abbench.sh 27b 128 32 "${arms27[@]}"
mv "$OUT/bench-json.tgz" "$OUT/bench-json-27b.tgz"
