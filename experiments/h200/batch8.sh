#!/usr/bin/env bash
# One device call (an H100 or the H200, ~3 min wall; no llama.cpp): the staged integer mat-vec of
# batch8 (2026-12-05 #6, issue 21's aggregate decode): the wide form with the batch's x staged in
# workgroup memory, which the engine runs for steps of 2–8 sequences (same bits as the wide form
# it keeps for one). In order of what the call must not lose (3's last run and 4 only where time
# is left):
#   1. gpu_matvec's staged tests on the device's own compiler: the staged form against the CPU,
#      and a row's bits equal at batches 1, 3 and 8 and to the wide form's (FMA contraction is
#      the driver's: lavapipe cannot vouch for it) → tests.log;
#   2. matvec-bench on the integer path at 1, 2, 4 and 8 input vectors per dispatch, the 27B MLP
#      (gate/up Q4_K, down Q4_K and Q6_K), the engine's wide layouts and staged ones, q8 alone,
#      median of 3 passes → matvec-batches.tsv (its last table: each layout's time at every batch
#      against its time at 1, and the best layout per batch);
#   3. `harness bench` on the Qwen3.5-27B Q4_K_M at depth 128: 8 sequences staged
#      (FAK_MATVEC_STAGE=1), 8 sequences wide (the default: the wide form at every batch; the A/B on one
#      binary), 1 sequence (each 8-sequence run reports a one-sequence step first)
#      → batched.log, bench-json.tgz;
#   4. model_qwen35's step-shape parity (batched steps) and int-dot tests, staged (FAK_MATVEC_STAGE=1)
#      → tests.log.
# Prepare (here, not on the device):
#   MATVEC_BENCH=1 RELEASE_TARGET_DIR=/work/targets/batch8-rel experiments/h200/prepare.sh \
#       gpu_matvec model_qwen35
# staged as target/<dir>/{experiments/h200/{setup,batch8}.sh, target/h200/{bin.txz,gl,built-at,
# commit}} (README "From a worktree"), run `cd target/<dir> && bash experiments/h200/batch8.sh`,
# carry ["target/<dir>"].
# Files back: tests.log, matvec-batches.tsv, batched.log, bench-json.tgz, clocks.csv, gpu.csv.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw --format=csv -lms 200 \
    > "$OUT/clocks.csv" 2>&1 &
CLOCKS=$!
M27=/dev/shm/qwen35-27b-q4_k_m.gguf
"$BIN/harness" synth --arch qwen35 --preset qwen35-27b --quant q4_k_m --seed 0 --fast-random \
    --out "$M27" > /tmp/synth.log 2>&1 &
SYNTH=$!

echo "== gpu_matvec staged" >> "$OUT/tests.log"
# The group binary with whole test paths: libtest ORs filters, and the gpu_matvec launcher's own
# `gpu_matvec::` would run the whole file.
FAK_MATVEC_STAGE=1 timeout 40 "$BIN/gpu" gpu_matvec::the_staged_form gpu_matvec::a_rows_bits 2>&1 \
    | grep -E "^test |test result|panicked at|assertion|differs" | cut -c1-300 | head -20 \
    >> "$OUT/tests.log"
cat "$OUT/tests.log"

if [ -x "$BIN/matvec-bench" ]; then
    # The engine's two wide layouts (256/4/1: every product but the quantizing gate/up,
    # 256/16/1: that one), their staged twins, and two staged layouts of more teams or fewer
    # lanes per team. ~72 timings of 4 passes of ~300 MB.
    layouts=256/4/1/wide,256/16/1/wide
    layouts+=,256/4/1/staged,256/16/1/staged,128/8/1/staged,256/8/1/staged
    timeout 75 "$BIN/matvec-bench" --paths q8 --plain --reps 3 --batches 1,2,4,8 \
        --products 27b_ffn_gate_up,27b_ffn_down --layouts "$layouts" \
        > "$OUT/matvec-batches.tsv" 2>&1
    echo "== matvec-bench --batches 1,2,4,8: exit $?"
    grep "^# batch best" "$OUT/matvec-batches.tsv"
fi

wait $SYNTH || { tail -3 /tmp/synth.log; exit 1; }
mkdir -p /tmp/bench-json
bench() { # bench LABEL SEQUENCES [env...]: one `harness bench` at depth 128
    local label=$1 n=$2
    shift 2
    echo "== $label: sequences $n $*" >> "$OUT/batched.log"
    env "$@" timeout 40 "$BIN/harness" bench --model "$M27" --depths 128 --n-out 32 \
        --sequences "$n" --profile-steps 1 --suffix 0 --probe-mib 256 \
        --json-out "/tmp/bench-json/$label.json" > /tmp/bench.log 2>&1
    echo "rc=$?" >> "$OUT/batched.log"
    grep -E "^depth 128(:| batched)|rror|panicked" /tmp/bench.log | cut -c1-220 >> "$OUT/batched.log"
    (cd /tmp/bench-json && tar czf "$OUT/bench-json.tgz" ./*.json)
}
bench seq8-staged 8 FAK_MATVEC_STAGE=1
bench seq8-wide 8
# Each 8-sequence run measures a one-sequence step first; this one only where time is left.
[ $SECONDS -lt 140 ] && bench seq1 1
cat "$OUT/batched.log"

if [ $SECONDS -lt 150 ]; then
    echo "== model_qwen35 f32_logits|int_dot" >> "$OUT/tests.log"
    FAK_MATVEC_STAGE=1 timeout $((175 - SECONDS)) "$BIN/model" --test-threads=1 model_qwen35::f32_logits \
        model_qwen35::int_dot 2>&1 \
        | grep -E "^test |test result|panicked at|cosine [0-9.]+ <" | head -30 >> "$OUT/tests.log"
fi
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"
kill $CLOCKS
