#!/usr/bin/env bash
# One device call (an H100 or H200, ≤ 200 s wall at ROUNDS=2; no llama.cpp): issue 18's GDN
# decode step at the bandwidth limit and issue 21's 8-sequence step — helper gdndec's wide split
# of gdn_decode (2026-12-06 #10; experiments/NOTES.md "gdndec"), opt-in as FAK_GDN_DECODE=wide:
#   wide — a workgroup per (value head, sequence) instead of per (key head, sequence): 48
#          workgroups a layer and sequence on the 27B instead of 16, each walking 128 state rows
#          (one pass) instead of 384 (three); each recomputes its key head's q/k conv outputs
#          and the last of a key head's three workgroups to finish rolls those conv rows (an
#          arrival counter); its state rows are loaded before the conv (AHEAD). The same bits
#          as the default (gpu_gated_delta holds them equal); the same dispatch count.
#   wide-late — the same without AHEAD (state rows loaded after q̂/k̂, as the default does):
#          one arm at the end if the budget allows, to split the gain.
# In order of what the call must not lose:
#   1. the tests on NVIDIA's 32-wide paths, FAK_GDN_DECODE=wide → tests.log: gpu_gated_delta's
#      fused-decode tests (the wide split against the CPU and the default's bits; every fused
#      test then runs the wide split through the variable), model_qwen35's decode tests (f32
#      logits on the subgroup paths, int-dot, the fused dispatch count), serving's hybrid
#      batch_invariance (a sequence's bits alone and in a batch).
#   2. `harness bench` decode at depths 128 and 2048 (`--n-out 32`) on the Qwen3.5-27B synth,
#      default and wide interleaved ROUNDS (2) times → bench.log (tok/s and the gdn_decode row
#      of the profiled step); then one 8-sequence arm each at depth 128 (`--sequences 8`: the
#      aggregate tok/s and the gdn_decode row at B = 8), then wide-late once at depths 128 and
#      2048 if time is left. Per-op µs in bench-json.tgz.
# A bench is skipped (logged SKIPPED) when it would pass BUDGET_S (190 s from the start).
# A dry run elsewhere: PRESET=tiny (the synth preset).
# SM clocks every 500 ms → clocks.csv. Prepare (release binaries; the gpu, model and serving
# groups; no MATMUL_BENCH / MATVEC_BENCH needed):
#   RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh gpu_gated_delta \
#       model_qwen35 batch_invariance
# staged as target/<dir>, run `cd target/<dir> && bash experiments/h200/gdndec.sh` or through
# multi.sh (`gdndec:200`), carry ["target/<dir>"].
# Files back: tests.log, bench.log, bench-json.tgz, clocks.csv, gpu.csv.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
start=$SECONDS
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw --format=csv -lms 500 \
    > "$OUT/clocks.csv" 2>&1 &
CLOCKS=$!
PRESET=${PRESET:-qwen35-27b}
M27=/dev/shm/$PRESET-q4_k_m.gguf
synth() { # synth ARCH PRESET FILE: once per machine (another script of the call may have)
    [ -s "$3" ] && return 0
    "$BIN/harness" synth --arch "$1" --preset "$2" --quant q4_k_m --seed 0 --fast-random \
        --out "$3.part" && mv "$3.part" "$3"
}
synth qwen35 "$PRESET" "$M27" > /tmp/synth-gdndec.log 2>&1 &
SYNTH=$!

# The group binaries (prepare.sh carries bin/gpu, bin/model and bin/serving), so that a filter
# picks tests.
for t in "gpu gpu_gated_delta::fused_decode gpu_gated_delta::the_wide gpu_gated_delta::whole_layer gpu_gated_delta::prefill_dispatch" \
    "model model_qwen35::f32_logits_match_the_cpu_reference_on_the_subgroup model_qwen35::a_decode_step model_qwen35::int_dot_logits --test-threads=1" \
    "serving batch_invariance::hybrid_logits_do_not_depend_on_the_batch"; do
    set -- $t
    [ -x "$BIN/$1" ] || { echo "== $1: not carried" >> "$OUT/tests.log"; continue; }
    limit=30
    [ "$1" = model ] && limit=45
    echo "== FAK_GDN_DECODE=wide $* (at $((SECONDS - start)) s)" >> "$OUT/tests.log"
    FAK_GDN_DECODE=wide timeout "$limit" "$BIN/$1" --skip llama_cpp --skip mlx_lm "${@:2}" 2>&1 \
        | grep -E "^test |test result|panicked at|differ|outside" | cut -c1-240 | head -30 \
        >> "$OUT/tests.log"
done
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"
wait $SYNTH || { tail -3 /tmp/synth-gdndec.log; kill $CLOCKS; exit 1; }
echo "== synth done at $((SECONDS - start)) s"
mkdir -p /tmp/bench-json-gdndec
BUDGET_S=${BUDGET_S:-190}

bench() { # bench LABEL SECONDS SEQUENCES [env...]: one 27B `harness bench`, unless over budget
    local label=$1 need=$2 seqs=$3
    shift 3
    if [ $((SECONDS - start + need)) -gt "$BUDGET_S" ]; then
        echo "== $label $* SKIPPED (at $((SECONDS - start)) s)" >> "$OUT/bench.log"
        return
    fi
    local depths=128,2048
    [ "$seqs" -gt 1 ] && depths=128
    echo "== $label: sequences $seqs $* (at $((SECONDS - start)) s)" >> "$OUT/bench.log"
    env "$@" timeout "$need" "$BIN/harness" bench --model "$M27" --depths "$depths" --n-out 32 \
        --sequences "$seqs" --profile-steps 1 --suffix 0 --probe-mib 256 \
        --json-out "/tmp/bench-json-gdndec/$label.json" > /tmp/bench-gdndec.log 2>&1
    echo "rc=$?" >> "$OUT/bench.log"
    grep -E "^depth [0-9]+(:| batched)|^  gdn_decode |rror|panicked" /tmp/bench-gdndec.log \
        | cut -c1-220 >> "$OUT/bench.log"
    (cd /tmp/bench-json-gdndec && tar czf "$OUT/bench-json.tgz" ./*.json)
}
for round in $(seq "${ROUNDS:-2}"); do
    bench "27b-default-$round" 35 1
    bench "27b-wide-$round" 35 1 FAK_GDN_DECODE=wide
done
bench 27b-seq8-default 25 8
bench 27b-seq8-wide 25 8 FAK_GDN_DECODE=wide
bench 27b-wide-late 35 1 FAK_GDN_DECODE=wide-late
kill $CLOCKS
grep -E "^==|^rc=|^depth [0-9]+(:| batched)|^  gdn_decode " "$OUT/bench.log" | cut -c1-180
echo "== done at $((SECONDS - start)) s"
