#!/usr/bin/env bash
# One short device call (≤ ~120 s wall; tests only, no bench, no llama.cpp): session 2026-12-07
# #17 had 313 s of device time, one machine's start. It checks on NVIDIA what main changed in
# session #16 without a device run, default paths first (experiments/NOTES.md "Session
# 2026-12-07 #17"):
#   1. gdnflip's fold of both chunk scans into shared WGSL helpers and the split scan as the
#      default: every gpu_gated_delta test (every chunked form, coop ones included, against the
#      f64 reference; the forms' bits against each other), then model_qwen35's prefill tests with
#      FAK_GDN_CHUNK unset;
#   2. detcoop's RUN_KEYS=0 branches in the default coop/flash prefill attention: gpu_attn_prefill
#      (every form against the f64 reference, the key-runs bit tests; the three long tile-order /
#      row-count / page tests left out: nothing there changed) and gpu_attention_step, switch off;
#      then the dense batch tests under FAK_ATTN_RUNS=on (must pass on the flash form's lean step);
#   3. the opt-in knobs' bits: pf128's folds (gpu_matmul's fold test, the model prefill tests
#      under FAK_PREFILL_FOLD=norm,swiglu) and dec8b's one-pass norm (gpu_matvec's norm tests, the
#      int-dot model tests under FAK_NORM_Q8=onepass, then with FAK_DECODE_NORM_FOLD=1).
# Since spvequiv (NOTES "spvequiv (2026-12-07 #17)") steps 1 and 2 are the same programs as
# 5f3b821's, which passed on an H100 (#16 call 1): what they check anew is that the driver builds
# every pipeline a default model load creates (the x16 mat-mul's to_f16_norm / to_f16_swiglu
# among them, compiled at every load though only FAK_PREFILL_FOLD runs them) and the runs-on path.
# Each step appends to tests.log with its start time; a step that would pass BUDGET_S (110 s) is
# logged SKIPPED. Prepare (here): release `cargo test --no-run --test gpu --test model --test
# serving`, the three group binaries packed as target/h200/bin.txz (bin/{gpu,model,serving}),
# the loader debs in target/h200/gl (prepare.sh's download). Run: `bash
# experiments/h200/verify17.sh`, carry target/h200/{bin.txz,gl,built-at,commit}.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
SECONDS=0
BUDGET_S=${BUDGET_S:-110}

step() { # step LIMIT ENV BINARY [FILTERS...]: one test run under `env ENV` (";"-separated)
    local limit=$1 vars=$2
    shift 2
    if [ $((SECONDS + limit / 2)) -gt "$BUDGET_S" ]; then
        echo "== SKIPPED $* ($vars, at ${SECONDS}s)" >> "$OUT/tests.log"
        return
    fi
    echo "== $* (${vars:-defaults}, at ${SECONDS}s)" >> "$OUT/tests.log"
    # shellcheck disable=SC2086 # the variables are NAME=value words
    env ${vars//;/ } timeout "$limit" "$BIN/$@" --skip llama_cpp --skip mlx_lm 2>&1 \
        | grep -E "^test |test result|panicked at|differ|mismatch|> tol|finite|outside|not the unsplit" \
        | cut -c1-300 | head -60 >> "$OUT/tests.log"
}
QWEN35_PREFILL="model_qwen35::f32_logits_match_the_cpu_reference_on_the_subgroup
    model_qwen35::a_prefill_split model_qwen35::prefill_then_decode model_qwen35::the_plan_sizes"
# shellcheck disable=SC2086 # the filters are words
{
    step 40 "" gpu gpu_gated_delta::
    step 30 "" model $QWEN35_PREFILL --test-threads=1
    step 60 "" gpu gpu_attn_prefill:: gpu_attention_step:: --skip the_tile_order_changes_no_bits \
        --skip the_lean_row_counts_compute_the_same_bits --skip pages_holding_whole_key_steps
    step 40 "FAK_ATTN_RUNS=on" serving \
        batch_invariance::dense_logits_past_a_key_run_do_not_depend_on_the_step \
        batch_invariance::dense_logits_do_not_depend_on_the_batch_or_the_chunking
    step 30 "" gpu gpu_matmul::each_prefill_fold_computes_the_bits_of_the_op_then_the_product
    step 30 "FAK_PREFILL_FOLD=norm,swiglu" model \
        model_qwen3::f32_logits_match_the_cpu_reference_on_every_path_and_step_shape \
        model_qwen35::f32_logits_match_the_cpu_reference_on_the_subgroup_paths_and_every_step_shape
    step 30 "" gpu gpu_matvec::each_norm_form gpu_matvec::the_one_pass_norm \
        gpu_matvec::the_norm_quantized_in_the_workgroup
    step 30 "FAK_NORM_Q8=onepass" model model_qwen3::int_dot model_qwen35::int_dot
    step 30 "FAK_NORM_Q8=onepass;FAK_DECODE_NORM_FOLD=1;FAK_DECODE_MERGE=0" model \
        model_qwen3::int_dot model_qwen35::int_dot
}
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"
echo "== done at ${SECONDS}s"
