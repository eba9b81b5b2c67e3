#!/usr/bin/env bash
# One device script (an H100 or the H200, ≤ 200 s wall; no llama.cpp; runnable alone or as
# `multi.sh q6bw:200`): the lean Q6_K units of the integer mat-vec of 2026-12-06 #9 (q6bw:
# FAK_MATVEC_Q6=lean — Q6_K's −32 folded through x, each group's integer sum starting at
# −32·Σ qx taken once per vector and unit for the 4 rows, so the codes are multiplied unbiased;
# each run's half-word funnel a shift and a multiply-add per word; the scales from three
# funnelled words; the same integer sums, so bit for bit the default's outputs) on NVIDIA's
# paths, and its speed. In order of what the call must not lose:
#   1. gpu_matvec's lean test (bit for bit against the word loads and within the CPU's bound, in
#      256/4/1/batched on every int-dot variant, 128/4/2/wide and 128/4/2/staged on the first),
#      the mixed binding (lean in it too), and under FAK_MATVEC_Q6=lean the rows-bits test (the
#      engine's kernel at batches 1, 3 and 8 against the wide word loads' batch-1 bits) → tests.log;
#   2. matvec-bench on the integer path at 1 and 8 input vectors per dispatch on the Q6_K shapes
#      (8B ffn_down, attn_v, output head; 27B ffn_down) with the Q4_K ones of the same names
#      beside them (the per-byte bar), in the engine's layout 256/4/1/batched and 128/8/1/batched
#      (the head's best), default (`q8`) and lean (`q8+q6lean`), each checked against the CPU
#      before it is timed, median of 3 passes, a figure after a pause timed after 400 ms of the
#      same dispatches (matvec-bench's warm-up: the SM clock up) → matvec-q6.tsv;
#   3. `harness bench` decode (depth 128, 32 out, one profiled step) on the Qwen3-8B and
#      Qwen3.5-27B Q4_K_M synth files, default and FAK_MATVEC_Q6=lean, interleaved, a second
#      round where it ends inside the 200 s → decode.log, bench-json.tgz (the profiled ops:
#      ffn_down, output, attn_v, gdn_qkv carry the Q6_K bytes);
#   4. where time is left: the model group's int-dot tests under FAK_MATVEC_Q6=lean (the pinned
#      fingerprints: the lean form's bits in whole models) → tests.log.
# SM clocks every 200 ms → clocks.csv. Prepare (main's build, release binaries; the tests need
# the gpu group (and the model group for step 4), the bench matvec-bench):
#   MATVEC_BENCH=1 RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh gpu_matvec \
#       model_qwen35 model_qwen3
# staged as target/<dir>/{experiments/h200/*.sh, target/h200/{bin.txz,gl,built-at,commit}},
# run `cd target/<dir> && bash experiments/h200/multi.sh q6bw:200`, carry ["target/<dir>"].
# Files back: tests.log, matvec-q6.tsv, decode.log, bench-json.tgz, clocks.csv, gpu.csv.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
start=$SECONDS
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw --format=csv -lms 200 \
    > "$OUT/clocks.csv" 2>&1 &
CLOCKS=$!
M27=/dev/shm/qwen35-27b-q4_k_m.gguf
M8=/dev/shm/qwen3-8b-q4_k_m.gguf
synth() { # synth ARCH PRESET FILE: once per machine (another script of the call may have)
    [ -s "$3" ] && return 0
    "$BIN/harness" synth --arch "$1" --preset "$2" --quant q4_k_m --seed 0 --fast-random \
        --out "$3.part" && mv "$3.part" "$3"
}
( synth qwen3 qwen3-8b "$M8" && synth qwen35 qwen35-27b "$M27" ) > /tmp/synth-q6bw.log 2>&1 &
SYNTH=$!

tests() { # tests LABEL TIMEOUT BINARY FILTERS... [env in ENV]: libtest ORs whole test paths
    local label=$1 limit=$2 binary=$3
    shift 3
    echo "== $label" >> "$OUT/tests.log"
    # shellcheck disable=SC2086 # ENV holds NAME=value words
    env ${ENV:-} timeout "$limit" "$BIN/$binary" "$@" 2>&1 \
        | grep -E "^test |test result|panicked at|differ|wrote past|pinned|cosine" | cut -c1-300 \
        | head -20 >> "$OUT/tests.log"
}
tests "gpu_matvec: lean, mixed" 45 gpu gpu_matvec::lean_q6_k gpu_matvec::a_mixed_binding
ENV=FAK_MATVEC_Q6=lean tests "gpu_matvec: rows bits, FAK_MATVEC_Q6=lean" 30 gpu \
    gpu_matvec::a_rows_bits
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"
echo "== tests done at $((SECONDS - start)) s"

timeout 40 "$BIN/matvec-bench" --paths q8 --plain --reps 3 --batches 1,8 --q6 lean \
    --layouts 256/4/1/batched,128/8/1/batched --products ffn_down,attn_v,output,27b_ffn_down \
    > "$OUT/matvec-q6.tsv" 2>&1
echo "== matvec-bench --batches 1,8 --q6 lean: exit $? at $((SECONDS - start)) s"
grep -E "FAILED|probe" "$OUT/matvec-q6.tsv" | head -5
# Per product, layout and batch: µs default, lean, lean/default; GB/s; and Q4_K's GB/s beside.
awk -F'\t' '/^# input vectors per dispatch/ { b = $NF; sub(/.*: /, "", b) }
    NF >= 9 && $1 !~ /^#/ && ($6 == "q8" || $6 == "q8+q6lean") {
        k = $1 " " $5 " B=" b; if ($2 == "Q4_K") { q4[k] = $8; next }
        if ($6 == "q8") { us[k] = $7; gb[k] = $8 } else { lean[k] = $7; lgb[k] = $8 } }
    END { for (k in us) printf "%s: Q6_K %s us (%s GB/s) -> lean %s us (%s GB/s), x%.3f; Q4_K %s GB/s\n",
          k, us[k], gb[k], lean[k], lgb[k], (us[k] > 0 ? lean[k] / us[k] : 0), q4[k] }' \
    "$OUT/matvec-q6.tsv" | sort

wait $SYNTH || { tail -3 /tmp/synth-q6bw.log; exit 1; }
echo "== synth done at $((SECONDS - start)) s"
mkdir -p /tmp/bench-json-q6bw
bench() { # bench MODEL LABEL [env...]: one one-sequence `harness bench` at depth 128
    local model=$1 label=$2
    shift 2
    echo "== $label: $*" >> "$OUT/decode.log"
    env "$@" timeout 40 "$BIN/harness" bench --model "$model" --depths 128 --n-out 32 \
        --profile-steps 1 --suffix 0 --probe-mib 256 \
        --json-out "/tmp/bench-json-q6bw/$label.json" > /tmp/bench-q6bw.log 2>&1
    echo "rc=$?" >> "$OUT/decode.log"
    grep -E "^depth 128:|rror|panicked" /tmp/bench-q6bw.log | cut -c1-220 >> "$OUT/decode.log"
    (cd /tmp/bench-json-q6bw && tar czf "$OUT/bench-json.tgz" ./*.json)
}
for round in 1 2; do
    # A round is ~56 s on an H100 (4 runs); the second only where it ends inside the 200 s.
    if [ "$round" = 2 ] && [ $((SECONDS - start)) -gt 135 ]; then
        echo "== no second round (at $((SECONDS - start)) s)" >> "$OUT/decode.log"
        break
    fi
    bench "$M8" "8b-words-$round"
    bench "$M8" "8b-lean-$round" FAK_MATVEC_Q6=lean
    bench "$M27" "27b-words-$round"
    bench "$M27" "27b-lean-$round" FAK_MATVEC_Q6=lean
done
cat "$OUT/decode.log"

# The model group's int-dot tests (the pinned fingerprints) where time is left.
if [ -x "$BIN/model" ] && [ $((SECONDS - start)) -lt 160 ]; then
    ENV=FAK_MATVEC_Q6=lean tests "model int_dot (qwen35, qwen3), FAK_MATVEC_Q6=lean" \
        $((190 - (SECONDS - start))) model model_qwen35::int_dot model_qwen3::int_dot
    grep -A20 "^== model" "$OUT/tests.log" | grep -E "^==|test result|FAILED|panicked"
else
    echo "== model int_dot not run (no model group, or no time left)" | tee -a "$OUT/tests.log"
fi
echo "== done at $((SECONDS - start)) s"
kill $CLOCKS
