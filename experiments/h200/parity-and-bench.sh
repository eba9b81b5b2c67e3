#!/usr/bin/env bash
# One device call (nvidia-h200) after a kernel change: every carried GPU suite and model_qwen3 /
# model_qwen35 on the H200's own paths (subgroup 32, f16, 16×16 cooperative matrices: each test
# runs every variant the device has); `harness bench` on the Qwen3-8B-shaped Q4_K_M model at
# depths 128 / 2048 / 8192 with the defaults and at 2048 with cooperative matrices off
# (FAK_COOP_MATRIX=0), side by side in one call; matmul-bench when carried (MATMUL_BENCH=1
# prepare.sh); last `harness selftest` (the fast-path verdicts on this adapter; SELFTEST_S caps
# it). No llama.cpp here (bench-decode.sh builds it; ~3 of a call's minutes).
# Carried: target/h200 (experiments/h200/prepare.sh with the suites to run). Extra arguments go
# to `harness bench`. At most 8 files come back from a call: this writes 8.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh

MODEL=/dev/shm/qwen3-8b-q4_k_m.gguf
"$BIN/harness" synth --arch qwen3 --preset qwen3-8b --quant q4_k_m --fast-random --out "$MODEL" \
    > "$OUT/bench.log" 2>&1 &
SYNTH=$!

{
    for t in "$BIN"/gpu_* "$BIN"/model_*; do
        [ -x "$t" ] || continue
        echo "== $(basename "$t") (peers llama.cpp and mlx are not on this machine)"
        timeout 240 "$t" --skip llama_cpp --skip mlx_lm 2>&1 | grep -E "^test |test result|panicked" | head -30
    done
} > "$OUT/parity.log" 2>&1
wait $SYNTH
for coop in default 0; do
    depths=${DEPTHS:-128,2048,8192}
    [ $coop = default ] || depths=2048
    echo "== harness bench, FAK_COOP_MATRIX=$coop" >> "$OUT/bench.log"
    ( [ $coop = default ] || export FAK_COOP_MATRIX=$coop
      timeout 200 "$BIN/harness" bench --model "$MODEL" --depths "$depths" --n-out 32 \
          --json-out "$OUT/bench-coop-$coop.json" "$@" ) >> "$OUT/bench.log" 2>&1
done
[ -x "$BIN/matmul-bench" ] && timeout 120 "$BIN/matmul-bench" > "$OUT/matmul-bench.tsv" 2>&1
timeout "${SELFTEST_S:-120}" "$BIN/harness" selftest --out "$OUT/selftest.json" > "$OUT/selftest.log" 2>&1
cat "$OUT/parity.log"; tail -25 "$OUT/selftest.log"; grep -E "^==|^depth|read bandwidth" "$OUT/bench.log"
grep -E "layer" "$OUT/matmul-bench.tsv" 2>/dev/null
