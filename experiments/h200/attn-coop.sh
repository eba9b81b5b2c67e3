#!/usr/bin/env bash
# One device call (nvidia-h200): the cooperative-matrix prefill attention with O in the matrix
# units (branch attn-coop, session 2026-12-05 #3, issue 19 deliverable 2). In order:
#   1. gpu_attn_prefill: every variant the H200 has (the f32-tile kernel on f32 and f16 caches,
#      the coop kernel as the engine selects it, with every row-block count that fits, and with
#      the slack 0 that rescales O on every growth of a row max) against the f64 CPU reference;
#      gpu_attention_step (the engine's attention layer, now on the coop kernel);
#   2. `matmul-bench --attn`: µs per dispatch and TFLOP/s of each variant × tile × key splits at
#      the Qwen3-8B shape (512-token chunks after 0..7680 cached) and the 27B's (128 after 2048),
#      each output against the f32-tile kernel's (max_diff_vs_f16);
#   4. the carried model suites (model_qwen3, model_qwen35) with FAK_ATTN_PREFILL=coop: the
#      models' parity with the coop attention on (what making it the default needs);
#   3. `harness bench --depths 2048` on the 8B-shaped Q4_K_M synth, FAK_ATTN_PREFILL=tiles (the
#      f32-tile kernel, still the engine's default), `coop` (CoopTile::fitting's tile: 64x64q at
#      head 128) and the ARMS given (tile labels, default 64x32) interleaved, ROUNDS times (3; ARMS="" for none beside tiles and coop);
#   then step 4 (model suites), then matmul-bench if carried.
# Carried: target/h200 from `MATMUL_BENCH=1 RELEASE_TARGET_DIR=… prepare.sh gpu_attn_prefill
# gpu_attention_step` (+ model_qwen3 model_qwen35 for 2b; without MATMUL_BENCH step 4 is
# skipped). Files back: the test logs, attn-bench.tsv, bench.log, clocks.csv.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu \
    --format=csv -lms 500 > "$OUT/clocks.csv" 2>&1 &
CLOCKS=$!
MODEL=/dev/shm/qwen3-8b-q4_k_m.gguf
"$BIN/harness" synth --arch qwen3 --preset qwen3-8b --quant q4_k_m --fast-random --out "$MODEL" \
    > /tmp/synth.log 2>&1 &
SYNTH=$!
for t in gpu_attn_prefill gpu_attention_step; do
    echo "== $t"
    timeout 150 "$BIN/$t" > "$OUT/$t.log" 2>&1
    echo "exit $?"
    grep -E "^test |test result|panicked|worst|diff|expected" "$OUT/$t.log" | cut -c1-300 | head -30
done
wait $SYNTH
for round in $(seq "${ROUNDS:-3}"); do
    for arm in tiles coop ${ARMS-64x32}; do
        echo "== round $round FAK_ATTN_PREFILL=$arm" >> "$OUT/bench.log"
        FAK_ATTN_PREFILL=$arm timeout 60 "$BIN/harness" bench --model "$MODEL" --depths 2048 \
            --n-out 4 --profile-steps 1 --suffix 0 --probe-mib 256 >> "$OUT/bench.log" 2>&1
        echo "rc=$?" >> "$OUT/bench.log"
    done
done
kill $CLOCKS
grep -E "^==|^rc=|depth [0-9]+ prefill:|attn_prefill|panicked|rror" "$OUT/bench.log" | cut -c1-200 | head -40
for t in model_qwen3 model_qwen35; do
    [ -x "$BIN/$t" ] || continue
    echo "== $t FAK_ATTN_PREFILL=coop"
    FAK_ATTN_PREFILL=coop timeout 150 "$BIN/$t" --skip llama_cpp --skip mlx_lm > "$OUT/$t.log" 2>&1
    echo "exit $?"
    grep -E "^test |test result|panicked|cosine [0-9.]+ <" "$OUT/$t.log" | cut -c1-300 | head -30
done
[ -x "$BIN/matmul-bench" ] || exit 0
ATTN_SPLITS=${ATTN_SPLITS:-auto} timeout 170 "$BIN/matmul-bench" --attn > "$OUT/attn-bench.tsv" 2> /tmp/attn-bench.err
echo "== matmul-bench --attn: exit $?"
cut -f1-3,7-11 "$OUT/attn-bench.tsv"
tail -3 /tmp/attn-bench.err
