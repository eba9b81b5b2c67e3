#!/usr/bin/env bash
# One device script (an H100 or the H200, ≤ 200 s wall; no llama.cpp; runnable alone or as
# `multi.sh mvbatch:200`): the batched form of the wide integer mat-vec of 2026-12-06 #8 (mvbatch:
# FAK_MATVEC_BATCHED=1 — for steps of several sequences the wide form's loop over vectors with
# each vector's codes read as 4 16-byte loads and no branch per vector; bit for bit the wide
# form's outputs), and the wide form's batch scaling at a steady SM clock. In order of what the
# call must not lose:
#   1. gpu_matvec's batched-form test, a row's bits at batches 1, 3 and 8 against the wide form's
#      batch-1 bits (staged and batched candidates, and the engine's rule with the form on:
#      NVIDIA's compiler contracts each form's f32 as it likes, lavapipe cannot vouch for it),
#      and the quantizing gate/up → tests.log;
#   2. matvec-bench on the integer path at 1, 2, 4 and 8 input vectors per dispatch on the 27B
#      MLP (gate/up Q4_K, down Q4_K and Q6_K), the engine's two wide layouts and their batched
#      twins plus the batched 256/16/2, q8 alone, median of 3 passes, a figure after a pause
#      (pipeline builds) timed after 400 ms of the same dispatches (the SM clock up: most of
#      2026-12-06's batch8 figures at B ≥ 2 ran at the 345 MHz idle clock) → matvec-batches.tsv
#      (its last table: each layout's time at every batch against its time at 1);
#   3. `harness bench` on the Qwen3.5-27B Q4_K_M at depth 128, 8 sequences, FAK_MATVEC_BATCHED=0
#      (the wide loop) and the default (batched at every batch since 2026-12-06 #8), a second
#      pair where time is left (each 8-sequence run first reports a one-sequence step: the A/B
#      at one sequence too) → batched.log, bench-json.tgz.
# SM clocks every 200 ms → clocks.csv. Prepare (main's build, release binaries; the tests need
# the gpu group, the bench matvec-bench):
#   MATVEC_BENCH=1 RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh gpu_matvec
# staged as target/<dir>/{experiments/h200/*.sh, target/h200/{bin.txz,gl,built-at,commit}},
# run `cd target/<dir> && bash experiments/h200/mvbatch.sh`, carry ["target/<dir>"].
# Files back: tests.log, matvec-batches.tsv, batched.log, bench-json.tgz, clocks.csv, gpu.csv.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
start=$SECONDS
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw --format=csv -lms 200 \
    > "$OUT/clocks.csv" 2>&1 &
CLOCKS=$!
M27=/dev/shm/qwen35-27b-q4_k_m.gguf
synth() { # synth ARCH PRESET FILE: once per machine (another script of the call may have)
    [ -s "$3" ] && return 0
    "$BIN/harness" synth --arch "$1" --preset "$2" --quant q4_k_m --seed 0 --fast-random \
        --out "$3.part" && mv "$3.part" "$3"
}
synth qwen35 qwen35-27b "$M27" > /tmp/synth-mvbatch.log 2>&1 &
SYNTH=$!

echo "== gpu_matvec, FAK_MATVEC_BATCHED=1" >> "$OUT/tests.log"
# The group binary with whole test paths: libtest ORs filters.
FAK_MATVEC_BATCHED=1 timeout 45 "$BIN/gpu" gpu_matvec::the_batched_form gpu_matvec::a_rows_bits \
    gpu_matvec::a_gate_up_pairing_quantizes 2>&1 \
    | grep -E "^test |test result|panicked at|assertion|differs" | cut -c1-300 | head -20 \
    >> "$OUT/tests.log"
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"
echo "== tests done at $((SECONDS - start)) s"

LAYOUTS=256/4/1/wide,256/16/1/wide,256/4/1/batched,256/16/1/batched,256/16/2/batched
timeout 70 "$BIN/matvec-bench" --paths q8 --plain --reps 3 --batches 1,2,4,8 \
    --products 27b_ffn_gate_up,27b_ffn_down --layouts "$LAYOUTS" > "$OUT/matvec-batches.tsv" 2>&1
echo "== matvec-bench --batches 1,2,4,8: exit $? at $((SECONDS - start)) s"
grep -E "^# batch|FAILED" "$OUT/matvec-batches.tsv" | cut -c1-200

wait $SYNTH || { tail -3 /tmp/synth-mvbatch.log; exit 1; }
echo "== synth done at $((SECONDS - start)) s"
mkdir -p /tmp/bench-json-mvbatch
bench() { # bench LABEL [env...]: one 8-sequence `harness bench` at depth 128
    local label=$1
    shift
    echo "== $label: sequences 8 $*" >> "$OUT/batched.log"
    env "$@" timeout 40 "$BIN/harness" bench --model "$M27" --depths 128 --n-out 32 \
        --sequences 8 --profile-steps 1 --suffix 0 --probe-mib 256 \
        --json-out "/tmp/bench-json-mvbatch/$label.json" > /tmp/bench-mvbatch.log 2>&1
    echo "rc=$?" >> "$OUT/batched.log"
    grep -E "^depth 128(:| batched)|rror|panicked" /tmp/bench-mvbatch.log | cut -c1-220 \
        >> "$OUT/batched.log"
    (cd /tmp/bench-json-mvbatch && tar czf "$OUT/bench-json.tgz" ./*.json)
}
# Since 2026-12-06 #8 the batched form is the default at every batch (its one-sequence step too):
# the wide arm is FAK_MATVEC_BATCHED=0, and each run's one-sequence line is the A/B at B = 1.
bench seq8-wide-1 FAK_MATVEC_BATCHED=0
bench seq8-batched-1
# A second pair (~65 s) only where it ends inside the 200 s.
if [ $((SECONDS - start)) -lt 130 ]; then
    bench seq8-wide-2 FAK_MATVEC_BATCHED=0
    bench seq8-batched-2
fi
cat "$OUT/batched.log"
echo "== done at $((SECONDS - start)) s"
kill $CLOCKS
