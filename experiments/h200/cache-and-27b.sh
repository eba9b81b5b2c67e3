#!/usr/bin/env bash
# One device call (nvidia-h200) for issue 7's target and the 27B shape's decode numbers:
#  1. the Qwen3.5-27B-shaped Q4_K_M model (`harness synth --fast-random`, random blocks);
#  2. issue 7: `harness threeway --scenario multi-agent` with fak's prefix cache on and off on it,
#     3 agents sharing a 2048-token preamble, 128-token suffixes, one turn, staggered far enough
#     apart (STAGGER_MS) that no request queues behind another: the cold TTFT is the cache-off
#     arm's, the cached TTFT the cache-on arm's later agents';
#  3. `harness bench` on it at depths 128/2048 (per-op profile, roofline);
#  4. llama.cpp CUDA's llama-bench on the same file (built here in the background, nice'd).
# Carried: target/h200/{gl, bin.txz (release harness), llama-src.tgz} under the folder named by
# the call (see README). Writes $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh

(
    mkdir -p /tmp/llama && tar xzf target/h200/llama-src.tgz -C /tmp/llama && cd /tmp/llama/llama.cpp &&
    cmake -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
        -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_COMMIT=0c1e57098 -DLLAMA_BUILD_NUMBER=0 &&
    nice -n 19 cmake --build build -j 14 --target llama-bench
) > "$OUT/llama-build.log" 2>&1 &
LLAMA_BUILD=$!

MODEL=/dev/shm/qwen35-27b-q4_k_m.gguf
{ time "$BIN/harness" synth --arch qwen35 --preset qwen35-27b --quant q4_k_m --fast-random \
    --out "$MODEL"; } > "$OUT/synth.log" 2>&1
"$BIN/harness" inspect "$MODEL" | tail -3 >> "$OUT/synth.log"

timeout 300 "$BIN/harness" threeway --scenario multi-agent --model "$MODEL" --arms fak-native \
    --agents 3 --preamble 2048 --suffix 128 --turns 1 --n-out 8 \
    --arrival staggered --stagger-ms "${STAGGER_MS:-15000}" --no-selftest \
    --out "$OUT/multi-agent-27b" > "$OUT/multi-agent.log" 2>&1
"$BIN/harness" validate "$OUT/multi-agent-27b/packet.json" >> "$OUT/multi-agent.log" 2>&1
"$BIN/harness" report "$OUT/multi-agent-27b/packet.json" >> "$OUT/multi-agent.log" 2>&1
# The run tool returns only a few files per call: the run's folder travels as one archive.
tar czf "$OUT/multi-agent-27b.tgz" -C "$OUT" multi-agent-27b && rm -r "$OUT/multi-agent-27b"

timeout 200 "$BIN/harness" bench --model "$MODEL" --depths 128,2048 --n-out 32 \
    --json-out "$OUT/bench-27b.json" > "$OUT/bench.log" 2>&1

{ time wait $LLAMA_BUILD; } 2>> "$OUT/llama-build.log"
LB=/tmp/llama/llama.cpp/build/bin/llama-bench
if [ -x "$LB" ]; then
    {
        echo "== llama-bench prefill (flash attention on)"
        timeout 120 "$LB" -m "$MODEL" -ngl 99 -fa 1 -p 128,2048 -n 0 -r 3 -o md
        echo "== llama-bench decode at depths (flash attention on)"
        timeout 120 "$LB" -m "$MODEL" -ngl 99 -fa 1 -p 0 -n 32 -d 128,2048 -r 3 -o md
    } > "$OUT/llama-bench.md" 2>&1
else
    echo "llama-bench did not build: see llama-build.log" > "$OUT/llama-bench.md"
fi
tail -3 "$OUT/llama-build.log"
cat "$OUT/synth.log" "$OUT/multi-agent.log" "$OUT/bench.log" "$OUT/llama-bench.md"
