#!/usr/bin/env bash
# One device call (nvidia-h200): the carried GPU suites on the H200's paths (32-wide subgroups,
# f16), then fak's decode profile op by op (`harness bench`) on the Qwen3-8B-shaped Q4_K_M model
# (random blocks, made here with --fast-random) at cache depths 128 / 2048 / 8192 — and at 128 /
# 2048 with the previous build (`harness-base`, when carried) for a before/after — beside llama.cpp
# CUDA's llama-bench on the same file. llama.cpp is built in the same call from the carried source
# (nice'd, in the background while fak runs; its bench starts only after fak's is done, so the two
# never share the GPU).
#
# Carried (experiments/h200/prepare.sh): target/h200/gl (Vulkan loader debs), target/h200/bin.txz
# (release harness [+ harness-base] + GPU test binaries), target/h200/llama-src.tgz
# (vendor/llama.cpp of the llama-cpp-python 0.3.36 sdist, trimmed to what a CUDA build needs).
# DEPTHS overrides the depths; LLAMA=0 skips llama.cpp (its build takes ~3 of a call's minutes:
# compare with a run that has it); INT_DOT=0 skips the integer mat-vec pass (FAK_INT_DOT=1 at
# 128 / 2048); extra arguments go to `harness bench`.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh

[ "${LLAMA:-1}" = 1 ] && (
    mkdir -p /tmp/llama && tar xzf target/h200/llama-src.tgz -C /tmp/llama && cd /tmp/llama/llama.cpp &&
    cmake -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
        -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_COMMIT=0c1e57098 -DLLAMA_BUILD_NUMBER=0 &&
    nice -n 19 cmake --build build -j 14 --target llama-bench
) > "$OUT/llama-build.log" 2>&1 &
LLAMA_BUILD=$!

MODEL=/dev/shm/qwen3-8b-q4_k_m.gguf
{ time "$BIN/harness" synth --arch qwen3 --preset qwen3-8b --quant q4_k_m --fast-random --out "$MODEL"; } \
    > "$OUT/synth.log" 2>&1 &
SYNTH=$!

{
    for t in "$BIN"/gpu_* "$BIN"/model_*; do
        [ -x "$t" ] || continue
        echo "== $(basename "$t")"
        timeout 150 "$t" --skip llama_cpp --skip mlx_lm 2>&1 | grep -E "^test |test result|panicked" | head -30
    done
} > "$OUT/parity.log" 2>&1

wait $SYNTH
"$BIN/harness" inspect "$MODEL" | tail -3 >> "$OUT/synth.log"
for harness in harness harness-base; do
    [ -x "$BIN/$harness" ] || continue
    depths=${DEPTHS:-128,2048,8192}
    [ $harness = harness ] || depths=128,2048
    echo "== $harness bench --depths $depths" >> "$OUT/bench.log"
    timeout 200 "$BIN/$harness" bench --model "$MODEL" --depths "$depths" --n-out 64 \
        --json-out "$OUT/bench-$harness.json" "$@" >> "$OUT/bench.log" 2>&1
done
# The integer mat-vec path (opt-in, FAK_INT_DOT=1) in the same process state as the run above:
# per-op times to set against it (experiments/NOTES.md, int-matvec). INT_DOT=0 skips it.
if [ "${INT_DOT:-1}" = 1 ]; then
    echo "== FAK_INT_DOT=1 harness bench --depths 128,2048" >> "$OUT/bench.log"
    FAK_INT_DOT=1 timeout 200 "$BIN/harness" bench --model "$MODEL" --depths 128,2048 --n-out 64 \
        --json-out "$OUT/bench-harness-int-dot.json" "$@" >> "$OUT/bench.log" 2>&1
fi

{ time wait $LLAMA_BUILD; } 2>> "$OUT/llama-build.log"
LB=/tmp/llama/llama.cpp/build/bin/llama-bench
if [ "${LLAMA:-1}" != 1 ]; then
    echo "llama.cpp skipped (LLAMA=0)" > "$OUT/llama-bench.md"
elif [ -x "$LB" ]; then
    {
        echo "== llama-bench prefill (flash attention on)"
        timeout 100 "$LB" -m "$MODEL" -ngl 99 -fa 1 -p 128,2048 -n 0 -r 3 -o md
        echo "== llama-bench decode at depths (flash attention on)"
        timeout 120 "$LB" -m "$MODEL" -ngl 99 -fa 1 -p 0 -n 64 -d 128,2048,8192 -r 3 -o md
    } > "$OUT/llama-bench.md" 2>&1
else
    echo "llama-bench did not build: see llama-build.log" > "$OUT/llama-bench.md"
fi
tail -5 "$OUT/llama-build.log"
cat "$OUT/parity.log" "$OUT/synth.log" "$OUT/bench.log" "$OUT/llama-bench.md"
