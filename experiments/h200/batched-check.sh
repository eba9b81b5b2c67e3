#!/usr/bin/env bash
# One device call (nvidia-h200 or an H100, ~3 min wall; no llama.cpp): the decode q8 folds of
# 2026-12-05 #5 (gdn_decode and attn_decode write their outputs as q8 blocks: 27B 582 → 518
# dispatches per token) on the H200's own paths, their speed, and why a batched decode step of 8
# sequences costs 4.0× a one-sequence step on the Qwen3.5-27B shape (llama.cpp CUDA: 2.4×;
# peers.sh, the same session). In order of what the call must not lose:
#   1. gpu_gated_delta, gpu_attn_decode and model_qwen35 (one test at a time) on the defaults
#      → tests.log;
#   2. `harness bench --sequences 8` at depth 128 (the aggregate decode), then the same without
#      the integer path (FAK_INT_DOT=0: f32 inputs, another mat-vec) → batched.log;
#   3. one-sequence decode with the q8 folds off (FAK_DECODE_Q8_FOLD=0) and on (the default),
#      interleaved ROUNDS times (1) → fold.log (tok/s, dispatches, ops, encode per token);
#   4. `--sequences 4` and the narrow mat-vec at 8 (FAK_MATVEC_WIDE=0), where time is left;
#   5. the Qwen3-8B's prefill at 128 and 2048 tokens (the prompt step's output head is a mat-vec
#      since 2026-12-05 #5; that session's bench: 4947 / 6450 tok/s) → prefill8b.log;
#   6. when carried (MATVEC_BENCH=1 below), matvec-bench on the integer path with 1 and 8 input
#      vectors per dispatch (`--batch`): which layouts keep the weights streaming at B = 8
#      → matvec-b1.tsv, matvec-b8.tsv.
# Each bench loads the 27B again (~25 s apiece). Prepare:
#   MATVEC_BENCH=1 RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh \
#       gpu_gated_delta gpu_attn_decode model_qwen35
# staged as target/<dir>/{experiments/h200/*.sh, target/h200/{bin.txz,gl,built-at,commit}},
# run `cd target/<dir> && bash experiments/h200/batched-check.sh`, carry ["target/<dir>"].
# Files back: tests.log, batched.log, fold.log, prefill8b.log, bench-json.tgz, matvec-b{1,8}.tsv, clocks.csv,
# gpu.csv.
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
M8=/dev/shm/qwen3-8b-q4_k_m.gguf
"$BIN/harness" synth --arch qwen3 --preset qwen3-8b --quant q4_k_m --seed 0 --fast-random \
    --out "$M8" > /tmp/synth8.log 2>&1 &
SYNTH8=$!

for t in gpu_gated_delta gpu_attn_decode "model_qwen35 --test-threads=1"; do
    set -- $t
    echo "== $*" >> "$OUT/tests.log"
    timeout 100 "$BIN/$1" --skip llama_cpp --skip mlx_lm "${@:2}" 2>&1 \
        | grep -E "^test |test result|panicked at|cosine [0-9.]+ <" | head -40 >> "$OUT/tests.log"
done
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"
wait $SYNTH || { tail -3 /tmp/synth.log; exit 1; }
mkdir -p /tmp/bench-json

bench() { # bench LOG LABEL SEQUENCES [env...]: one `harness bench` at depth 128
    local log=$1 label=$2 n=$3
    shift 3
    echo "== $label: sequences $n $*" >> "$OUT/$log"
    env "$@" timeout 60 "$BIN/harness" bench --model "$M27" --depths 128 --n-out 32 \
        --sequences "$n" --profile-steps 1 --suffix 0 --probe-mib 256 \
        --json-out "/tmp/bench-json/$label.json" > /tmp/bench.log 2>&1
    echo "rc=$?" >> "$OUT/$log"
    grep -E "^depth 128(:| batched)|rror|panicked" /tmp/bench.log | cut -c1-220 >> "$OUT/$log"
    (cd /tmp/bench-json && tar czf "$OUT/bench-json.tgz" ./*.json)
}
bench batched.log seq8 8
bench batched.log seq8-f32 8 FAK_INT_DOT=0
cat "$OUT/batched.log"
for round in $(seq "${ROUNDS:-1}"); do
    bench fold.log "fold-off-$round" 1 FAK_DECODE_Q8_FOLD=0
    bench fold.log "fold-on-$round" 1
done
cat "$OUT/fold.log"
bench batched.log seq4 4
bench batched.log seq8-narrow 8 FAK_MATVEC_WIDE=0
tail -8 "$OUT/batched.log"
if wait $SYNTH8; then
    timeout 90 "$BIN/harness" bench --model "$M8" --depths 128,2048 --n-out 8 --profile-steps 1 \
        --suffix 0 --probe-mib 256 --json-out /tmp/bench-json/prefill8b.json \
        > "$OUT/prefill8b.log" 2>&1
    echo "== 8B prefill: exit $?"
    grep -E "^depth|prefill" "$OUT/prefill8b.log" | head -12
    (cd /tmp/bench-json && tar czf "$OUT/bench-json.tgz" ./*.json)
else
    tail -3 /tmp/synth8.log
fi
if [ -x "$BIN/matvec-bench" ]; then
    for b in 8 1; do
        timeout 100 "$BIN/matvec-bench" --paths q8 --batch "$b" > "$OUT/matvec-b$b.tsv" 2>&1
        echo "== matvec-bench --batch $b: exit $?"
        grep "^# best" "$OUT/matvec-b$b.tsv" | head -20
    done
fi
kill $CLOCKS
