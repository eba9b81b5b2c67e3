#!/usr/bin/env bash
# The next session's first call (written in #23, whose device minutes went to failed starts;
# ≤ DEADLINE, default 560 s): what #23 built and could not measure, most needed first.
#   0 s   the 8B synth into /dev/shm in the background; pcache.sh: the prefix cache's tail
#         states on NVIDIA (serving's prefix_cache file, batch_invariance's next-turn and
#         in-flight tests; ≤ 115 s) → tests.log;
#   then  (#24) gpu_matmul's bits tests on NVIDIA (≤ 60 s: every sliced x16 tiling against the
#         engine's kernel, the raw Q6_K path against its twin — the condition for a rule that
#         picks a tile by token count) → tests.log;
#   then  the 8B at 8 sequences, 2 rounds interleaved (abbench.sh; one-sequence decode and both
#         aggregates on every line): default; c4096s4 (FAK_MATVEC_SHORT_MIN_COLS=4096 with
#         FAK_MATVEC_SHORT_LAYOUT=64/4/1/split4: the 8B's 4096-column products and head in 16-lane
#         teams, 4 vectors a workgroup — s23a's warm matvec-bench put a step's products at 8204
#         → 5779 µs at 8 vectors, 2606 → 2672 at one); c4096 (the same, the default splits);
#         w128s4 (128/4/1/split4: teams of one 32-lane warp, 2 units a lane at 4096 columns, a
#         layout between the two, never timed) → bench.log, bench-json.tgz, clocks.csv;
#   then  matvec-bench, warm, --reps 9, batches 1 and 8, on the 8B's products: the engine's
#         layout, 64/4/1 and 128/4/1 at splits 2 and 4 → matvec-bench.tsv;
#   then  matmul-bench --sweep --tokens 160,640 (every x16 tiling checked against the CPU, then
#         timed: a later turn's prefill steps, issue 21's 8-agent later turn) → matmul-sweep.tsv;
#   then  the 8B's later-turn prefill (bench --depths 2176 --suffix 160: a prefix-cache hit's
#         160-token step) with the engine's 128-token x16 tile against the 64-token one
#         (FAK_MATMUL_TILING=x16-64x128-k64-1st-rawq6: at 160 tokens 3 tiles 83 % full against
#         2 at 62.5 %; its Q6_K on the raw-word path as the engine's, added to the sweep in #24 —
#         without it the arm's Q6_K products would decode as they load: 4.2× the engine's raw
#         128-token kernel at 128 tokens in 2026-12-05's sweep), interleaved twice →
#         bench-suffix.tgz;
#   then  the 27B at 8 sequences, 2 rounds: default against s4
#         (FAK_MATVEC_SHORT_LAYOUT=64/4/1/split4, its short rows 4 vectors a workgroup).
# Prepare: MATVEC_BENCH=1 MATMUL_BENCH=1 RELEASE_TARGET_DIR=/work/targets/rel
# experiments/h200/prepare.sh prefix_cache batch_invariance gpu_matmul; carry target/h200/{bin.txz,
# gl, built-at, commit} (check `carry-room.sh size` with the fixtures out: the gpu group binary
# rides too).
# Returns: tests.log, steps.log, bench.log, bench-json.tgz, matvec-bench.tsv, matmul-sweep.tsv,
# bench-suffix.tgz, misc.tgz (the .err files, synth logs, gpu.csv, clocks.csv).
set -uo pipefail
T0=$SECONDS
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
DEADLINE=${DEADLINE:-560}
synth_8b
timeout 115 bash experiments/h200/pcache.sh
log "pcache tests: exit $?"
tests "gpu_matmul: the x16 tilings' and the raw path's bits (#24)" 60 gpu \
    gpu_matmul::every_sliced_x16_tiling_computes_the_engine_kernels_bits \
    gpu_matmul::the_q6k_raw_path_computes_the_dequant_paths_bits
log "gpu_matmul bits tests: done"
wait $SYNTH

SHORT=FAK_MATVEC_SHORT_MIN_COLS=4096
SEQS=8 ROUNDS=2 BUDGET_S=150 bash experiments/h200/abbench.sh 8b 128 32 default \
    "c4096s4=$SHORT;FAK_MATVEC_SHORT_LAYOUT=64/4/1/split4" c4096=$SHORT \
    "w128s4=$SHORT;FAK_MATVEC_SHORT_LAYOUT=128/4/1/split4"
log "abbench 8b: exit $?"

LAYOUTS=256/4/1/split2,256/4/1/split4,64/4/1/split2,64/4/1/split4,128/4/1/split2,128/4/1/split4
matvec_bench_8b 1 30 "$LAYOUTS" > /dev/null 2> "$OUT/matvec-bench-warmup.err"
matvec_bench_8b 9 60 "$LAYOUTS" > "$OUT/matvec-bench.tsv" 2> "$OUT/matvec-bench.err"
log "matvec-bench: exit $?"

cap=$(($(left) - 130))
[ "$cap" -le 100 ] || cap=100
if [ "$cap" -gt 40 ]; then
    timeout "$cap" "$BIN/matmul-bench" --sweep --tokens 160,640 > "$OUT/matmul-sweep.tsv" \
        2> "$OUT/matmul-sweep.err"
    log "matmul-bench sweep: exit $?"
else
    log "matmul-bench sweep: SKIPPED ($(left) s left)"
fi
mkdir -p /tmp/suffix
for arm in default t64 default t64; do # the 64-token x16 tile at a later turn's 160 tokens
    [ "$(left)" -gt 150 ] || { log "suffix $arm: SKIPPED ($(left) s left)"; continue; }
    tiling=""
    [ $arm = default ] || tiling=x16-64x128-k64-1st-rawq6
    n=$(ls /tmp/suffix | wc -l)
    FAK_MATMUL_TILING=$tiling timeout 60 "$BIN/harness" bench --model "$MODEL" --depths 2176 \
        --n-out 4 --profile-steps 1 --suffix 160 --probe-mib 256 \
        --json-out /tmp/suffix/$n-$arm.json > /tmp/suffix/$n-$arm.log 2>&1
    log "bench depth 2176 suffix 160 $arm: exit $? · $(grep -m1 -iE 'suffix' /tmp/suffix/$n-$arm.log \
        | cut -c1-160)"
done
tar czf "$OUT/bench-suffix.tgz" -C /tmp suffix
if [ "$(left)" -gt 100 ]; then
    SEQS=8 ROUNDS=2 BUDGET_S=$(($(left) - 50)) bash experiments/h200/abbench.sh 27b 128 32 \
        default s4=FAK_MATVEC_SHORT_LAYOUT=64/4/1/split4
    log "abbench 27b: exit $?"
else
    log "abbench 27b: SKIPPED ($(left) s left)"
fi
(cd "$OUT" && tar czf misc.tgz ./*.err gpu.csv clocks.csv synth-*.log 2>/dev/null
    rm -f ./*.err gpu.csv clocks.csv synth-*.log)
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"
grep -E "^(==|depth 128)" "$OUT/bench.log" | cut -c1-200
grep "^# byte-weighted\|^# per token" "$OUT/matvec-bench.tsv"
grep -E "^check|layer" "$OUT/matmul-sweep.tsv" 2>/dev/null | cut -c1-150
log "done"
