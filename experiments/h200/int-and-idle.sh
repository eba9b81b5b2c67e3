#!/usr/bin/env bash
# One device call (nvidia-h200), measurements only (no kernel changed since the last parity run):
#  1. decode with the integer mat-vec (FAK_INT_DOT=1, its per-input layouts) against the default
#     f32 path, same process state order both ways (default, int, default) on the 27B shape, then
#     the 8B shape (default, int);
#  2. issue 7's scenario with STAGGER_MS (default 4200: just over a cold 27B request) while
#     nvidia-smi logs the SM clock every 100 ms, to see whether the ~180 ms a request pays after
#     ≥ 3 s of idle is the GPU's clocks;
#  3. matmul-bench --types (below).
# Carried: target/h200/{gl, bin.txz, built-at} (prepare.sh; the harness is all it runs). Writes 8 files.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh

BIG=/dev/shm/qwen35-27b-q4_k_m.gguf
SMALL=/dev/shm/qwen3-8b-q4_k_m.gguf
{
    time "$BIN/harness" synth --arch qwen35 --preset qwen35-27b --quant q4_k_m --fast-random --out "$BIG"
    time "$BIN/harness" synth --arch qwen3 --preset qwen3-8b --quant q4_k_m --fast-random --out "$SMALL"
} > "$OUT/synth.log" 2>&1

nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,pstate,utilization.gpu \
    --format=csv -lms 100 > "$OUT/clocks.csv" 2>&1 &
CLOCKS=$!

timeout 150 "$BIN/harness" threeway --scenario multi-agent --model "$BIG" --arms fak-native \
    --agents 3 --preamble 2048 --suffix 128 --turns 1 --n-out 8 \
    --arrival staggered --stagger-ms "${STAGGER_MS:-4200}" --no-selftest \
    --out "$OUT/multi-agent-27b" > "$OUT/multi-agent.log" 2>&1
"$BIN/harness" validate "$OUT/multi-agent-27b/packet.json" >> "$OUT/multi-agent.log" 2>&1
"$BIN/harness" report "$OUT/multi-agent-27b/packet.json" >> "$OUT/multi-agent.log" 2>&1
tar czf "$OUT/multi-agent-27b.tgz" -C "$OUT" multi-agent-27b && rm -r "$OUT/multi-agent-27b"

bench() { # label, model, depths, env...
    local label=$1 model=$2 depths=$3
    shift 3
    echo "== $label ($*)"
    env "$@" timeout 120 "$BIN/harness" bench --model "$model" --depths "$depths" --n-out 32 \
        --json-out "$OUT/bench-$label.json"
}
{
    bench 27b-f32 "$BIG" 128,2048 FAK_INT_DOT=0
    bench 27b-int "$BIG" 128,2048 FAK_INT_DOT=1
    bench 27b-f32-again "$BIG" 128 FAK_INT_DOT=0
    bench 8b-f32 "$SMALL" 128,2048 FAK_INT_DOT=0
    bench 8b-int "$SMALL" 128,2048 FAK_INT_DOT=1
} > "$OUT/bench.log" 2>&1
kill $CLOCKS
# 3. The prefill mat-mul's tile cost by weight type (matmul-bench --types, when carried: F16,
#    Q8_0, Q4_K on the 8B and 27B ffn_gate_up at 2048 tokens).
[ -x "$BIN/matmul-bench" ] && timeout 100 "$BIN/matmul-bench" --types > "$OUT/matmul-types.tsv" 2>&1
for f in "$OUT"/bench-*.json; do gzip "$f"; done
tar czf "$OUT/bench-json.tgz" -C "$OUT" $(cd "$OUT" && ls bench-*.json.gz) && rm "$OUT"/bench-*.json.gz
grep -E "TTFT|valid|idle" "$OUT/multi-agent.log" | head -20
grep -E "^==|^depth|tok/s" "$OUT/bench.log" | head -40
