#!/usr/bin/env bash
# One device script (an H100 or the H200, ≤ 200 s wall, ~150–190 s expected; no llama.cpp;
# runnable alone or as `multi.sh b8:200`): the batched mat-vec's split of 2026-12-06 #9 (b8:
# FAK_MATVEC_SPLIT=G, or a layout `…/splitG` — a step of more than G vectors on B / G times the
# grid, each workgroup taking G of them for its rows: the batched form's bits, lighter lanes and
# more of them, W read again from L2; experiments/NOTES.md, "b8"). In order of what the call
# must not lose:
#   1. gpu_matvec's split-form test (the CPU reference, poisoned outputs, batches 1, 2, 3, 8),
#      a row's bits at batches 1, 3, 5 and 8 against the wide form's batch-1 bits (every staged,
#      batched and split candidate, and the engine's rule with FAK_MATVEC_SPLIT=4: NVIDIA's
#      compiler contracts each form's f32 as it likes, lavapipe cannot vouch for it), the
#      quantizing gate/up (its q8 blocks written by the workgroup that took the vector) and the
#      parse test → tests.log;
#   2. matvec-bench on the integer path at 1, 2, 4 and 8 input vectors per dispatch on the 27B
#      MLP (gate/up Q4_K, down Q4_K and Q6_K): the engine's two batched layouts (the default)
#      against their splits of 4, 2 and 1 vectors a workgroup, q8 alone, median of 3, warmed
#      (mvbatch's rule) → matvec-batches.tsv (its last table: each layout at every batch);
#   3. `harness bench` on the Qwen3.5-27B Q4_K_M at depth 128, 8 sequences: the default,
#      FAK_MATVEC_SPLIT=4 and FAK_MATVEC_SPLIT=2, interleaved; a second round where it ends
#      inside the 200 s (each run's one-sequence line is the same pipelines: the split never
#      runs for one vector) → split.log, bench-json.tgz.
# SM clocks every 200 ms → clocks.csv. Prepare (main's build after the merge, release binaries;
# the tests need the gpu group, the bench matvec-bench):
#   MATVEC_BENCH=1 RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh gpu_matvec
# staged as target/<dir>/{experiments/h200/*.sh, target/h200/{bin.txz,gl,built-at,commit}},
# run `cd target/<dir> && bash experiments/h200/b8.sh`, carry ["target/<dir>"].
# Files back: tests.log, matvec-batches.tsv, split.log, bench-json.tgz, clocks.csv, gpu.csv.
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
synth qwen35 qwen35-27b "$M27" > /tmp/synth-b8.log 2>&1 &
SYNTH=$!

echo "== gpu_matvec, FAK_MATVEC_SPLIT=4" >> "$OUT/tests.log"
# The group binary with whole test paths: libtest ORs filters.
FAK_MATVEC_SPLIT=4 timeout 60 "$BIN/gpu" gpu_matvec::the_split_form gpu_matvec::a_rows_bits \
    gpu_matvec::a_gate_up_pairing_quantizes gpu_matvec::layouts_the_kernel 2>&1 \
    | grep -E "^test |test result|panicked at|assertion|differs" | cut -c1-300 | head -20 \
    >> "$OUT/tests.log"
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"
echo "== tests done at $((SECONDS - start)) s"

LAYOUTS=256/4/1/batched,256/16/1/batched,256/4/1/split4,256/4/1/split2,256/4/1/split1
LAYOUTS=$LAYOUTS,256/16/1/split4,256/16/1/split2
timeout 60 "$BIN/matvec-bench" --paths q8 --plain --reps 3 --batches 1,2,4,8 \
    --products 27b_ffn_gate_up,27b_ffn_down --layouts "$LAYOUTS" > "$OUT/matvec-batches.tsv" 2>&1
echo "== matvec-bench --batches 1,2,4,8: exit $? at $((SECONDS - start)) s"
grep -E "^# batch|FAILED" "$OUT/matvec-batches.tsv" | cut -c1-200

wait $SYNTH || { tail -3 /tmp/synth-b8.log; exit 1; }
echo "== synth done at $((SECONDS - start)) s"
mkdir -p /tmp/bench-json-b8
bench() { # bench LABEL [env...]: one 8-sequence `harness bench` at depth 128
    local label=$1
    shift
    echo "== $label: sequences 8 $*" >> "$OUT/split.log"
    env "$@" timeout 40 "$BIN/harness" bench --model "$M27" --depths 128 --n-out 32 \
        --sequences 8 --profile-steps 1 --suffix 0 --probe-mib 256 \
        --json-out "/tmp/bench-json-b8/$label.json" > /tmp/bench-b8.log 2>&1
    echo "rc=$?" >> "$OUT/split.log"
    grep -E "^depth 128(:| batched)|rror|panicked" /tmp/bench-b8.log | cut -c1-220 \
        >> "$OUT/split.log"
    (cd /tmp/bench-json-b8 && tar czf "$OUT/bench-json.tgz" ./*.json)
}
# The default is the batched form at every batch (2026-12-06 #8); the split only changes steps
# of more than G sequences.
for round in 1 2; do
    # A second round (~60 s) only where it ends inside the 200 s.
    if [ "$round" = 2 ] && [ $((SECONDS - start)) -gt 130 ]; then
        break
    fi
    bench "seq8-default-$round"
    bench "seq8-split4-$round" FAK_MATVEC_SPLIT=4
    bench "seq8-split2-$round" FAK_MATVEC_SPLIT=2
done
cat "$OUT/split.log"
echo "== done at $((SECONDS - start)) s"
kill $CLOCKS
