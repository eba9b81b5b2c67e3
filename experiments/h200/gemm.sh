#!/usr/bin/env bash
# One device call (nvidia-h200): the x16 cooperative-matrix mat-mul (wgsl/matmul_x16.wgsl) against
# the staged one, from the kernel to the 8B prefill (experiments/NOTES.md, "gemm (session
# 2026-12-04 #4)").
#  1. gpu_matmul: every test; among them every_coop_tiling_matches_the_cpu runs each kernel of
#     CoopKernel::every() (the staged K loops and the x16 tilings) against the CPU on the 16×16
#     path, which runs nowhere else;
#  2. matmul-bench --sweep: each kernel of CoopKernel::SWEEP checked once more, then timed in 3
#     interleaved rounds on the Qwen3-8B layer (Q4_K, Q6_K; 128/2048 tokens) and the 27B FFN
#     (Q4_K; 128/2048), SM clocks logged every 500 ms;
#  3. `harness bench` prefill on the Qwen3-8B-shaped Q4_K_M file (harness synth --fast-random) at
#     128 and 2048 tokens, the engine default and FAK_MATMUL_TILING=$X16 interleaved 3 times; X16
#     (unless given) is the sliced x16 tiling with the best Q4_K layer line at 2048 tokens in
#     round 0 of the sweep that passed its check;
#  4. model_qwen3 (when carried) with FAK_MATMUL_TILING=$X16: the model's parity on that kernel.
# Carried: target/h200 from `MATMUL_BENCH=1 prepare.sh gpu_matmul` (see NOTES for the exact
# commands). Files: matmul-parity.log, matmul-sweep.tsv, clocks.csv, bench.log, model-qwen3.log
# and rest.tgz (gpu.csv, synth.log, matmul-sweep.err, json/bench-*.json).
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu \
    --format=csv -lms 500 > "$OUT/clocks.csv" 2>&1 &
CLOCKS=$!
MODEL=/dev/shm/qwen3-8b-q4_k_m.gguf
"$BIN/harness" synth --arch qwen3 --preset qwen3-8b --quant q4_k_m --fast-random --out "$MODEL" \
    > "$OUT/synth.log" 2>&1 &
SYNTH=$!
{
    echo "== gpu_matmul (every coop kernel against the CPU)"
    timeout 150 "$BIN/gpu_matmul" 2>&1 | grep -E "^test |test result|panicked|FAIL|worst|expected" | head -60
} > "$OUT/matmul-parity.log" 2>&1
timeout 200 "$BIN/matmul-bench" --sweep > "$OUT/matmul-sweep.tsv" 2> "$OUT/matmul-sweep.err"
echo "matmul-bench rc=$?" >> "$OUT/matmul-sweep.err"
wait $SYNTH
if [ -z "${X16:-}" ]; then
    X16=$(awk -F'\t' '$1 == 0 && $3 ~ /^x16/ && $3 !~ /unsliced/ && $4 == "Q4_K" && $5 == "layer" && $8 == 2048 {
        if ($9 < best || best == "") { best = $9; name = $3 } } END { print name }' "$OUT/matmul-sweep.tsv")
fi
X16=${X16:-x16-128x128-k32-2st}
echo "x16 arm: $X16" >> "$OUT/bench.log"
mkdir -p "$OUT/json"
for round in 1 2 3; do
    for arm in default "$X16"; do
        echo "== round $round FAK_MATMUL_TILING=$arm" >> "$OUT/bench.log"
        tiling=$arm; [ "$arm" = default ] && tiling=
        FAK_MATMUL_TILING=$tiling timeout 60 "$BIN/harness" bench --model "$MODEL" --depths 128,2048 \
            --n-out 4 --profile-steps 1 --suffix 0 --probe-mib 256 \
            --json-out "$OUT/json/bench-$arm-$round.json" >> "$OUT/bench.log" 2>&1
        echo "rc=$?" >> "$OUT/bench.log"
    done
done
kill $CLOCKS
# The chosen x16 kernel in the model's own parity tests (cooperative-matrix floor 0.9999).
if [ -x "$BIN/model_qwen3" ]; then
    FAK_MATMUL_TILING=$X16 timeout 120 "$BIN/model_qwen3" 2>&1 \
        | grep -E "^test |test result|panicked|cosine" | head -40 > "$OUT/model-qwen3.log"
fi
# The run tool returns at most 8 files: the small ones go back in one archive.
(cd "$OUT" && tar czf rest.tgz json gpu.csv synth.log matmul-sweep.err && rm -r json gpu.csv synth.log)
cat "$OUT/matmul-parity.log"
grep -E "^check" "$OUT/matmul-sweep.tsv" | cut -c1-160
awk -F'\t' '$5 == "layer" { print $1, $3, $4, $8, $9, $11 }' "$OUT/matmul-sweep.tsv" | cut -c1-140 | head -80
tar xzOf "$OUT/rest.tgz" matmul-sweep.err | tail -3
grep -E "^==|^rc=|depth [0-9]+ prefill:|^x16" "$OUT/bench.log" | cut -c1-200 | head -40
cat "$OUT/model-qwen3.log" 2>/dev/null
