#!/usr/bin/env bash
# lastnorm (2026-12-07 #18, issue 18; ≤ 150 s: `multi.sh lastnorm:150`): the next norm's q8
# input written by the last-arriving workgroup of the residual producer (FAK_DECODE_FUSE=
# lastnorm: wgsl/matvec_last_norm.wgsl — attn_output, ffn_down, gdn_out count their workgroups
# on an atomic; the last one runs the one-pass norm over the new x), so a decode step of one
# sequence records no quantize dispatch after them: 312 → 241 dispatches a token on the 8B,
# 502 → 375 on the 27B. The bits of FAK_NORM_Q8=onepass (which it implies), not the default's.
# 1. Tests on NVIDIA → tests.log: gpu_matvec's last-arriving test (y and the blocks bit for bit
#    the plain product's and the one-pass dispatch's, two steps, the counter back at zero) and
#    the norm forms' CPU test; the int-dot model tests of both shapes under lastnorm (cosines
#    against the q8-rounding reference; pins printed — on lavapipe they equal the one-pass
#    dispatch's pins); serving's batch invariance under it where the serving binary is carried
#    (steps of one sequence take the last-arriving norm, batched steps the dispatch).
# 2. `harness bench` at depth 128, 32 out, one sequence: the 8B's default / onepass / lastnorm
#    interleaved ROUNDS (2) times (BUDGET_S8, 70 s), then the 27B's default / lastnorm once if
#    BUDGET_S27 (0: skipped) leaves room → bench.log, bench-json-{8b,27b}.tgz, clocks.csv.
# Prepare: MATVEC_BENCH=0 RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh \
#   gpu_matvec model_qwen3 model_qwen35 [batch_invariance]
# Knobs: ROUNDS (2), BUDGET_S8 (70), BUDGET_S27 (0).
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
lastnorm=(FAK_DECODE_FUSE=lastnorm)
{
    timeout 30 "$BIN/gpu" gpu_matvec::the_last_arriving gpu_matvec::each_norm_form 2>&1
    env "${lastnorm[@]}" timeout 30 "$BIN/model" model_qwen3::int_dot model_qwen35::int_dot 2>&1
    [ ! -x "$BIN/serving" ] || env "${lastnorm[@]}" FAK_INT_DOT=1 timeout 25 \
        "$BIN/serving" batch_invariance:: 2>&1
} | grep -E "^test |test result|panicked at|^    \(\"" | cut -c1-300 > "$OUT/tests.log"
cat "$OUT/tests.log"
arms8=(default onepass=FAK_NORM_Q8=onepass "lastnorm=${lastnorm[*]}")
ROWS='attn_q|attn_output|ffn_gate_up|ffn_down' EST_S=9 BUDGET_S=${BUDGET_S8:-70} \
    bash experiments/h200/abbench.sh 8b 128 32 "${arms8[@]}"
mv "$OUT/bench-json.tgz" "$OUT/bench-json-8b.tgz"
if [ "${BUDGET_S27:-0}" -gt 0 ]; then
    ROWS='attn_q|gdn_qkv|gdn_out|ffn_gate_up|ffn_down' EST_S=22 BUDGET_S=$BUDGET_S27 ROUNDS=1 \
        bash experiments/h200/abbench.sh 27b 128 32 default "lastnorm=${lastnorm[*]}"
    mv "$OUT/bench-json.tgz" "$OUT/bench-json-27b.tgz"
fi
