#!/usr/bin/env bash
# One device script (nvidia-h200 or an H100, ≤ 200 s wall; no llama.cpp; runnable alone or as
# `multi.sh q6mv:200`): the wide mat-vec's aligned Q6_K loads of 2026-12-05 #7 (q6mv:
# FAK_MATVEC_Q6=aligned — each Q6_K run read as a 16-byte-aligned vec4 pair of w16 and shifted
# into place, 8 vec4 loads per row and unit instead of ~20 word loads; bit for bit the default's
# outputs) on NVIDIA's paths, and its speed. In order of what the call must not lose:
#   1. gpu_matvec, the whole suite (~25 s on an H100): its aligned-loads test (bit for bit
#      against the word loads, and the CPU), the mixed binding (aligned loads in it too), the
#      wide form's and every other mat-vec test → tests.log;
#   2. matvec-bench on the integer path, the Q6_K shapes (8B ffn_down, attn_v, output head; 27B
#      ffn_down) with the Q4_K ones of the same names beside them (the per-byte bar), in the
#      three wide layouts, default loads (`q8`) and aligned (`q8+q6aligned`), each checked
#      against the CPU before it is timed; then 8 vectors per dispatch on the ffn_downs, in the
#      first wide layout and in batch8's staged twin of the unrolled one (it reads W through the
#      wide loads, so it takes the aligned ones too) → matvec-b1.tsv, matvec-b8.tsv;
#   3. `harness bench` decode (depth 128, 32 out, one profiled step) on the Qwen3-8B and
#      Qwen3.5-27B Q4_K_M synth files, without and with FAK_MATVEC_Q6=aligned, interleaved
#      ROUNDS (2) times → decode.log, bench-json.tgz (the profiled ops: ffn_down, output,
#      attn_v, gdn_qkv carry the Q6_K bytes).
# SM clocks every 200 ms → clocks.csv. Prepare (main's build, release binaries; the tests need
# the gpu group, the bench matvec-bench):
#   MATVEC_BENCH=1 RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh gpu_matvec
# staged as target/<dir>/{experiments/h200/*.sh, target/h200/{bin.txz,gl,built-at,commit}},
# run `cd target/<dir> && bash experiments/h200/q6mv.sh`, carry ["target/<dir>"].
# Files back: tests.log, matvec-b1.tsv, matvec-b8.tsv, decode.log, bench-json.tgz, clocks.csv,
# gpu.csv.
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
( synth qwen3 qwen3-8b "$M8" && synth qwen35 qwen35-27b "$M27" ) > /tmp/synth-q6mv.log 2>&1 &
SYNTH=$!

echo "== gpu_matvec" >> "$OUT/tests.log"
timeout 60 "$BIN/gpu_matvec" 2>&1 \
    | grep -E "^test |test result|panicked at|differ|wrote past" | head -40 >> "$OUT/tests.log"
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"
echo "== tests done at $((SECONDS - start)) s"

LAYOUTS=256/4/1/wide,128/4/2/wide,128/8/1/wide
timeout 40 "$BIN/matvec-bench" --paths q8 --layouts "$LAYOUTS" --q6 aligned \
    --products ffn_down,attn_v,output,27b_ffn_down > "$OUT/matvec-b1.tsv" 2>&1
echo "== matvec-bench B=1: exit $? at $((SECONDS - start)) s"
grep -E "Q6_K|probe" "$OUT/matvec-b1.tsv" | grep -vE "quantize" | cut -f1,2,5,6,7,8,9 | head -30
timeout 30 "$BIN/matvec-bench" --paths q8 --layouts 256/4/1/wide,128/4/2/staged --q6 aligned \
    --batches 8 --products ffn_down,27b_ffn_down > "$OUT/matvec-b8.tsv" 2>&1
echo "== matvec-bench B=8: exit $? at $((SECONDS - start)) s"
grep -E "^(27b_)?ffn_down" "$OUT/matvec-b8.tsv" | grep -v quantize | cut -f1,2,5,6,7,8,9

wait $SYNTH || { tail -3 /tmp/synth-q6mv.log; exit 1; }
echo "== synth done at $((SECONDS - start)) s"
mkdir -p /tmp/bench-json-q6mv
bench() { # bench MODEL LABEL [env...]: one one-sequence `harness bench` at depth 128
    local model=$1 label=$2
    shift 2
    echo "== $label: $*" >> "$OUT/decode.log"
    env "$@" timeout 40 "$BIN/harness" bench --model "$model" --depths 128 --n-out 32 \
        --profile-steps 1 --suffix 0 --probe-mib 256 \
        --json-out "/tmp/bench-json-q6mv/$label.json" > /tmp/bench-q6mv.log 2>&1
    echo "rc=$?" >> "$OUT/decode.log"
    grep -E "^depth 128:|rror|panicked" /tmp/bench-q6mv.log | cut -c1-220 >> "$OUT/decode.log"
    (cd /tmp/bench-json-q6mv && tar czf "$OUT/bench-json.tgz" ./*.json)
}
for round in $(seq "${ROUNDS:-2}"); do
    bench "$M8" "8b-words-$round"
    bench "$M8" "8b-aligned-$round" FAK_MATVEC_Q6=aligned
    bench "$M27" "27b-words-$round"
    bench "$M27" "27b-aligned-$round" FAK_MATVEC_Q6=aligned
done
cat "$OUT/decode.log"
echo "== done at $((SECONDS - start)) s"
kill $CLOCKS
