#!/usr/bin/env bash
# One device call (nvidia-h200 or an H100; branch gdn-coop2, session 2026-12-05 #4, issue 19
# deliverable 2): the chunked Gated DeltaNet on cooperative matrices with the hi-by-truncation /
# lo·2^11 split in two accumulators (wgsl/gated_delta_chunk_coop.wgsl), opt-in through
# FAK_GDN_CHUNK=coop. In order, ≤ 4 minutes of wall time with every timeout hit (~3.3 expected):
#   1. in parallel, while the 27B Q4_K_M synth is written: gpu_gated_delta with FAK_GDN_CHUNK=coop
#      (the chunked tests run the f32 and the coop kernel each, explicitly; the other tests take
#      the engine's choice, here coop) and model_qwen35 with FAK_GDN_CHUNK=coop (the tiny
#      Qwen3.5 models' logits against the CPU reference through the coop kernel);
#   2. `harness bench --depths 128,2048` on the Qwen3.5-27B shape, FAK_GDN_CHUNK=f32 (today's
#      kernel) and =coop interleaved twice (f32, coop, f32, coop), lean options as in session
#      #3's call (4 decode tokens, no suffix table, 1 profiled decode step).
# Prepare (on the helper's machine):
#   RELEASE_TARGET_DIR=/work/targets/gdn-coop2-rel experiments/h200/prepare.sh gpu_gated_delta model_qwen35
# then carry the scripts and target/h200 without llama-src.tgz (the tree is ~42 MiB of the 64):
#   D=/work/main/target/gdn-coop2-h200; rm -rf $D; mkdir -p $D/experiments/h200 $D/target/h200
#   cp experiments/h200/*.sh $D/experiments/h200/
#   cp -r target/h200/{bin.txz,gl,built-at,commit} $D/target/h200/
#   run: command "cd target/gdn-coop2-h200 && bash experiments/h200/gdn-coop.sh",
#        carry ["target/gdn-coop2-h200"], timeout_s 270
# Files back (≤ 8): gpu.csv, clocks.csv, gpu_gated_delta.log, model_qwen35.log, bench.log,
# bench-27b-f32-1.json, bench-27b-coop-1.json (round 1's; round 2's numbers are in bench.log).
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu \
    --format=csv -lms 1000 > "$OUT/clocks.csv" 2>&1 &
CLOCKS=$!
MODEL=/dev/shm/q27.gguf
"$BIN/harness" synth --arch qwen35 --preset qwen35-27b --quant q4_k_m --fast-random --out "$MODEL" \
    > /tmp/synth.log 2>&1 &
SYNTH=$!
FAK_GDN_CHUNK=coop timeout 90 "$BIN/gpu_gated_delta" > "$OUT/gpu_gated_delta.log" 2>&1 &
GDN=$!
FAK_GDN_CHUNK=coop timeout 90 "$BIN/model_qwen35" --skip llama_cpp --skip mlx_lm \
    > "$OUT/model_qwen35.log" 2>&1 &
MODELS=$!
wait $GDN; echo "== gpu_gated_delta (FAK_GDN_CHUNK=coop): exit $?"
grep -E "^test |test result|panicked|SKIPPED|worst" "$OUT/gpu_gated_delta.log" | cut -c1-300 | head -30
wait $MODELS; echo "== model_qwen35 (FAK_GDN_CHUNK=coop): exit $?"
grep -E "^test |test result|panicked|cosine [0-9.]+ <" "$OUT/model_qwen35.log" | cut -c1-300 | head -30
wait $SYNTH || { echo "synth failed"; tail -5 /tmp/synth.log; }
for round in 1 2; do
    for arm in f32 coop; do
        echo "== round $round FAK_GDN_CHUNK=$arm" >> "$OUT/bench.log"
        json=/tmp/bench-27b-$arm-$round.json
        [ "$round" = 1 ] && json=$OUT/bench-27b-$arm-1.json
        FAK_GDN_CHUNK=$arm timeout 32 "$BIN/harness" bench --model "$MODEL" --depths 128,2048 \
            --n-out 4 --suffix 0 --profile-steps 1 --json-out "$json" >> "$OUT/bench.log" 2>&1
        echo "rc=$?" >> "$OUT/bench.log"
    done
done
kill $CLOCKS
grep -E "^==|^rc=|^depth [0-9]+ prefill:|gated_delta_chunk|panicked|rror" "$OUT/bench.log" | cut -c1-220
