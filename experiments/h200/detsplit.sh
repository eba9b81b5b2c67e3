#!/usr/bin/env bash
# One device call (nvidia-h100-x1 or nvidia-h200, ≤ 120 s wall; tests only, no bench): issue
# 21's key runs (experiments/NOTES.md "detsplit"). The f32-tile kernel (wgsl/attn_prefill.wgsl,
# FAK_ATTN_PREFILL=tiles) now sums each row's keys in runs of 512 from key 0, folded in key
# order, split or not; the staged coop and flash kernels do not yet. So on NVIDIA:
#   1. batch_invariance::dense_logits_past_a_key_run_do_not_depend_on_the_step under
#      FAK_ATTN_PREFILL=tiles: must PASS (the runs' bits on NVIDIA's compiler: exp2 and fma of
#      the fold in two pipelines, main and combine);
#   2. the same test on the default kernel (the flash form's lean step): expected to FAIL (its
#      splits still cut each tile's keys evenly: the finding of NOTES "attn2k" on NVIDIA, data for
#      the flash form's runs); a PASS means the tiny model's steps never split there;
#   3. gpu_attn_prefill:: (every form against the f64 reference; the f32 kernel's splits are now
#      whole runs) and the dense batch test under tiles.
# No bench: the runs change no default NVIDIA runs (coop matrices there), and the f32 kernel's
# cost of them is counted in NOTES (a fold per 512 keys: ~0.2 % of its work), not worth a call.
# Prepare (here): RELEASE_TARGET_DIR=/work/targets/<dir> experiments/h200/prepare.sh \
#     gpu_attn_prefill batch_invariance
# then `multi.sh detsplit:120`. Expected wall: the serving tests ~20 s each (tiny qwen3, a
# 600-token prompt on four engines), gpu_attn_prefill ~60 s (flash3's call). Files back:
# tests.log, gpu.csv.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
SECONDS=0

check() { # check LIMIT FORM BINARY [ARGS...]: one test run with FAK_ATTN_PREFILL=FORM ("": the
    # default), its verdict lines into tests.log
    local limit=$1 form=$2
    shift 2
    echo "== $* (FAK_ATTN_PREFILL=$form, at ${SECONDS}s)" >> "$OUT/tests.log"
    FAK_ATTN_PREFILL=$form timeout "$limit" "$@" 2>&1 \
        | grep -E "^test |test result|panicked at|differs|reused|mismatch|> tol" \
        | cut -c1-300 | head -40 >> "$OUT/tests.log"
}
check 60 tiles "$BIN/serving" batch_invariance::dense_logits_past_a_key_run_do_not_depend_on_the_step \
    batch_invariance::dense_logits_do_not_depend_on_the_batch_or_the_chunking
check 60 "" "$BIN/serving" batch_invariance::dense_logits_past_a_key_run_do_not_depend_on_the_step
check 90 "" "$BIN/gpu" gpu_attn_prefill::
grep -E "^==|test result|FAILED|panicked|differs" "$OUT/tests.log"
echo "[${SECONDS} s] done"
