#!/usr/bin/env bash
# One device call (nvidia-h200): the parity suite on the H200's own paths (subgroup 32, f16,
# cooperative-matrix 16x16), then fak's decode and prefill speed on the Qwen3-8B-shaped Q4_K_M
# model (random blocks), cooperative matrices off and on.
#
# Prepared here (see experiments/h200/README.md): .gl/ holds the Vulkan loader debs, .dev/bin the
# stripped release test binaries and harness built on this machine. Results land in $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json WGPU_BACKEND=vulkan
tar xzf .dev/bin.tgz -C .dev && BIN=$PWD/.dev/bin
export FAK_HARNESS_BIN=$BIN/harness
OUT=${OUT:-/tmp/fak-out}
mkdir -p "$OUT"
# The test binaries name their fixtures by the path they were built at.
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > "$OUT/gpu.csv" 2>&1
"$BIN/harness" devices --json > "$OUT/devices.json" 2>&1

{
  for t in "$BIN"/gpu_*; do
    for coop in 0 1; do
      echo "== $(basename "$t") FAK_COOP_MATRIX=$coop"
      FAK_COOP_MATRIX=$coop timeout 120 "$t" 2>&1 | grep -E "test result|FAILED|panicked|failed|test GPU" | head -20
    done
  done
  for coop in 0 1; do
    echo "== model_qwen3 FAK_COOP_MATRIX=$coop (peers llama.cpp and mlx are not on this machine)"
    FAK_COOP_MATRIX=$coop timeout 240 "$BIN/model_qwen3" --skip llama_cpp --skip mlx_lm 2>&1 \
      | grep -E "^test |test result|panicked|dispatches" | head -30
  done
} > "$OUT/parity.log" 2>&1

MODEL=/tmp/qwen3-8b-q4_k_m.gguf
"$BIN/harness" synth --arch qwen3 --preset qwen3-8b --quant q4_k_m --fast-random --out "$MODEL" > "$OUT/bench.log" 2>&1
"$BIN/harness" inspect "$MODEL" | tail -3 >> "$OUT/bench.log"
ids() { python3 -c "import random; random.seed($2); print(','.join(str(random.randrange(1000, 150000)) for _ in range($1)))"; }
for coop in 0 1; do
  for shape in "128 128" "2048 32"; do
    set -- $shape
    echo "== prompt $1, generate $2, FAK_COOP_MATRIX=$coop" >> "$OUT/bench.log"
    FAK_COOP_MATRIX=$coop timeout 180 "$BIN/harness" run --model "$MODEL" --tokens "$(ids "$1" 7)" \
      -n "$2" --ignore-eos --max-context 4096 --json > "$OUT/run-$1-coop$coop.json" 2>> "$OUT/bench.log"
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print({k: r[k] for k in ('adapter','load_s','prefill_tokens_per_s','decode_tokens_per_s','prefill_step_dispatches','decode_step_dispatches')})" \
      "$OUT/run-$1-coop$coop.json" >> "$OUT/bench.log" 2>&1
  done
done
cat "$OUT/parity.log" "$OUT/bench.log"
