#!/usr/bin/env bash
# Session 2026-12-06 #15, call 2 (~300 s; `multi.sh s15b:330`): the two changes after call 1,
# before the acceptance run —
#   - the short-row layout on by default (ShortRows::DEFAULT_LAYOUT 64/4/1 from 4096 rows;
#     `FAK_MATVEC_SHORT_LAYOUT=off` is the old default), and
#   - the norms' sums of squares with their loads batched (wgsl/strided_squares.wgsl: the same
#     bits, a sixteenth of the dependent L2 round trips; no switch: the old build is
#     `harness-base`, prepare.sh's BASE_HARNESS, main d62a1c3).
# 1. Tests on NVIDIA → tests.log: the int-dot model tests of both shapes (their bits against the
#    q8-rounding reference and the merge's bits), gpu_rms_norm, gpu_matvec's bits and layout tests.
# 2. `harness bench --sequences 8` at depth 128 (one sequence timed too), arms base (d62a1c3),
#    new (this build), noshort (this build, short rule off: the strided sums alone) interleaved
#    two rounds on the 27B and then the 8B → bench.log, bench-json.tgz, clocks.csv.
# Prepare: BASE_HARNESS=<d62a1c3's harness> MATVEC_BENCH=0 RELEASE_TARGET_DIR=/work/targets/rel
#   experiments/h200/prepare.sh gpu_matvec gpu_rms_norm model_qwen35 model_qwen3
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
[ -x "$BIN/harness-base" ] || { echo "harness-base not carried" >&2; exit 2; }
{
    timeout 60 "$BIN/model" model_qwen35::int_dot model_qwen3::int_dot 2>&1
    timeout 60 "$BIN/gpu" gpu_rms_norm:: gpu_matvec::a_rows_bits gpu_matvec::layouts 2>&1
} | grep -E "^test |test result|panicked at" | cut -c1-300 > "$OUT/tests.log"
cat "$OUT/tests.log"
arms=(base=HARNESS=harness-base new noshort=FAK_MATVEC_SHORT_LAYOUT=off)
SEQS=8 BUDGET_S=${BUDGET_S:-150} bash experiments/h200/abbench.sh 27b 128 32 "${arms[@]}"
mv "$OUT/bench-json.tgz" "$OUT/bench-json-27b.tgz"
SEQS=8 BUDGET_S=${BUDGET_S8:-110} bash experiments/h200/abbench.sh 8b 128 32 "${arms[@]}"
mv "$OUT/bench-json.tgz" "$OUT/bench-json-8b.tgz"
