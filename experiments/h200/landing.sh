#!/usr/bin/env bash
# One device call (nvidia-h200) before a merge of kernel changes lands, in priority order so that
# a call cut short still returns what matters most:
#  1. parity: every carried GPU and model suite on the H200's own paths (subgroup 32, f16, 16×16
#     cooperative matrices), llama.cpp/mlx_lm tests skipped (no peers here);
#  2. issue 7's target: `harness threeway --scenario multi-agent` with fak's prefix cache on and
#     off on the Qwen3.5-27B-shaped Q4_K_M model (3 agents, 2048-token preamble, 128-token
#     suffixes, one turn, staggered STAGGER_MS apart so that no request queues behind another);
#  3. `harness bench` on that model at depths 128/2048, then on the Qwen3-8B shape at
#     128/2048/8192 (per-op profile, roofline, dispatches per token).
# No llama.cpp build (3 of a call's minutes): its numbers on these files are in earlier calls.
# Carried: target/h200/{gl, bin.txz, built-at} (prepare.sh with the suites to run). Writes 8 files.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh

BIG=/dev/shm/qwen35-27b-q4_k_m.gguf
SMALL=/dev/shm/qwen3-8b-q4_k_m.gguf
{
    time "$BIN/harness" synth --arch qwen35 --preset qwen35-27b --quant q4_k_m --fast-random --out "$BIG"
    "$BIN/harness" synth --arch qwen3 --preset qwen3-8b --quant q4_k_m --fast-random --out "$SMALL"
} > "$OUT/synth.log" 2>&1 &
SYNTH=$!

# The model suites one test at a time: run multi-threaded, their engines' devices have crashed
# the NVIDIA driver (SIGSEGV, 2026-12-03 and -04), never one at a time.
for t in "$BIN"/gpu_* "$BIN"/model_* "$BIN"/prefix_cache; do
    [ -x "$t" ] || continue
    threads=()
    case $(basename "$t") in model_*) threads=(--test-threads=1) ;; esac
    echo "== $(basename "$t") (peers llama.cpp and mlx are not on this machine)"
    { time timeout 150 "$t" --skip llama_cpp --skip mlx_lm "${threads[@]}" 2>&1 |
        grep -E "^test |test result|panicked|cosine|error" | head -60; } 2>&1
done > "$OUT/parity.log" 2>&1
wait $SYNTH

timeout 150 "$BIN/harness" threeway --scenario multi-agent --model "$BIG" --arms fak-native \
    --agents 3 --preamble 2048 --suffix 128 --turns 1 --n-out 8 \
    --arrival staggered --stagger-ms "${STAGGER_MS:-7000}" --no-selftest \
    --out "$OUT/multi-agent-27b" > "$OUT/multi-agent.log" 2>&1
"$BIN/harness" validate "$OUT/multi-agent-27b/packet.json" >> "$OUT/multi-agent.log" 2>&1
"$BIN/harness" report "$OUT/multi-agent-27b/packet.json" >> "$OUT/multi-agent.log" 2>&1
# The run tool returns only a few files per call: the run's folder travels as one archive.
tar czf "$OUT/multi-agent-27b.tgz" -C "$OUT" multi-agent-27b && rm -r "$OUT/multi-agent-27b"

{
    echo "== 27B"
    timeout 120 "$BIN/harness" bench --model "$BIG" --depths 128,2048 --n-out 32 \
        --json-out "$OUT/bench-27b.json"
    echo "== 8B"
    timeout 120 "$BIN/harness" bench --model "$SMALL" --depths 128,2048,8192 --n-out 32 \
        --json-out "$OUT/bench-8b.json"
} > "$OUT/bench.log" 2>&1
grep -E "^==|test result|panicked|real" "$OUT/parity.log"
grep -E "TTFT|valid" "$OUT/multi-agent.log"
grep -E "^==|^depth|tok/s|dispatches|roofline" "$OUT/bench.log" | head -40
