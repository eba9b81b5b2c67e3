#!/usr/bin/env bash
# One device call (nvidia-h200), issue 17's rules for the one-way engine move: the carried GPU and
# model suites on the H200's paths (their parity must match the landing runs), then `harness bench`
# on the Qwen3-8B and Qwen3.5-27B shapes (Q4_K_M, random blocks made here with --fast-random) with
# the build before the move (`harness-base`) and after it (`harness`), interleaved three times in
# this one call, and a table of decode ms/token per shape and build: the two must agree within 2 %.
#
# Prepare: build the base (main before the arch merge) first, then the branch after touching its
# sources, in one target dir (README.md here: cargo reuses artifacts by name):
#   RELEASE_TARGET_DIR=/work/targets/arch-release BASE_HARNESS=<base harness> \
#     experiments/h200/prepare.sh model_qwen3 model_qwen35 model_qwen2 gpu_matvec gpu_matmul
# ROUNDS overrides the 3 rounds; DEPTHS the bench depths (default 128,2048).
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
[ -x "$BIN/harness-base" ] || { echo "harness-base not carried: nothing to compare" >&2; exit 2; }

synth() { # arch preset path
    { time "$BIN/harness" synth --arch "$1" --preset "$2" --quant q4_k_m --fast-random --out "$3"; } \
        > "$OUT/synth-$2.log" 2>&1
}
synth qwen3 qwen3-8b /dev/shm/qwen3-8b.gguf &
synth qwen35 qwen35-27b /dev/shm/qwen35-27b.gguf &

{
    for t in "$BIN"/gpu_* "$BIN"/model_*; do
        [ -x "$t" ] || continue
        echo "== $(basename "$t")"
        timeout 150 "$t" --skip llama_cpp --skip mlx_lm 2>&1 | grep -E "^test |test result|panicked" | head -40
    done
} > "$OUT/parity.log" 2>&1
wait

for round in $(seq 1 "${ROUNDS:-3}"); do
    for shape in qwen3-8b qwen35-27b; do
        for build in harness-base harness; do
            echo "== round $round $shape $build" >> "$OUT/bench.log"
            timeout 120 "$BIN/$build" bench --model "/dev/shm/$shape.gguf" --depths "${DEPTHS:-128,2048}" \
                --n-out 64 --json-out "$OUT/bench.$shape.$build.$round.json" >> "$OUT/bench.log" 2>&1
        done
    done
done

# decode ms/token: median over the rounds, per shape, build and depth; the ratio new / base.
python3 - "$OUT" <<'PY' | tee "$OUT/decode-ms.tsv"
import glob, json, os, statistics, sys
out = sys.argv[1]
rows = {}
for path in glob.glob(f"{out}/bench.*.*.*.json"):
    _, shape, build, _, _ = os.path.basename(path).split(".")
    for d in json.load(open(path))["depths"]:
        rows.setdefault((shape, d["depth"], build), []).append(d["decode_us_per_token"] / 1000)
print("shape\tdepth\tbase_ms\tnew_ms\tnew/base\truns")
for (shape, depth, build) in sorted(k for k in rows if k[2] == "harness"):
    new, base = rows[(shape, depth, "harness")], rows.get((shape, depth, "harness-base"), [])
    if not base:
        continue
    b, n = statistics.median(base), statistics.median(new)
    print(f"{shape}\t{depth}\t{b:.3f}\t{n:.3f}\t{n / b:.4f}\t{len(new)}+{len(base)}")
PY
