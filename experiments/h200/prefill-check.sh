#!/usr/bin/env bash
# One device call (nvidia-h200, or the H100 when that is what is lent): a landing check for
# prefill kernel changes (issue 19). First every carried model/GPU suite on the device's default
# paths (parity), then `harness selftest`, then `harness bench` prefill on the Qwen3-8B and
# Qwen3.5-27B shapes (Q4_K_M, --fast-random) with the build before the change (`harness-base`)
# and after it (`harness`), interleaved ROUNDS times, and a table per shape, depth and build:
# median prefill tok/s (host-timed, as `harness run`) and the GPU ms of the prefill's attention
# (attn_prefill) and chunked delta rule (gated_delta_chunk), with their shares of the prefill's
# GPU time.
#
# Prepare (README.md here: base first, then the change after touching its sources):
#   RELEASE_TARGET_DIR=... BASE_HARNESS=<base harness> experiments/h200/prepare.sh <suites>
# SUITES: the carried suites to run (default: the model suites, gpu_attn_prefill,
# gpu_gated_delta, gpu_matmul; a missing one is skipped); ROUNDS (default 2), DEPTHS (default
# 128,2048), SUITE_S (each suite's timeout, default 150).
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
    for t in ${SUITES:-model_qwen35 model_qwen3 model_qwen2 gpu_attn_prefill gpu_gated_delta gpu_matmul}; do
        [ -x "$BIN/$t" ] || continue
        echo "== $t"
        timeout "${SUITE_S:-150}" "$BIN/$t" --skip llama_cpp --skip mlx_lm 2>&1 |
            grep -E "^test |test result|panicked|cosine [0-9.]+ <" | head -60
    done
    echo "== harness selftest"
    timeout 120 "$BIN/harness" selftest --out "$OUT/selftest.json" 2>&1 | tail -8
} > "$OUT/parity.log" 2>&1
wait
cat "$OUT/parity.log"

mkdir -p "$OUT/bench"
for round in $(seq 1 "${ROUNDS:-2}"); do
    for shape in qwen3-8b qwen35-27b; do
        for build in harness-base harness; do
            echo "== round $round $shape $build"
            timeout 120 "$BIN/$build" bench --model "/dev/shm/$shape.gguf" --depths "${DEPTHS:-128,2048}" \
                --n-out 8 --profile-steps 2 --suffix 0 \
                --json-out "$OUT/bench/$shape.$build.$round.json" 2>&1 | grep -E "^depth"
        done
    done
done > "$OUT/bench.log" 2>&1

python3 - "$OUT/bench" <<'PY' | tee "$OUT/prefill.tsv"
import glob, json, os, statistics, sys
rows = {}
for path in glob.glob(f"{sys.argv[1]}/*.json"):
    shape, build, _, _ = os.path.basename(path).split(".")
    for d in json.load(open(path))["depths"]:
        p = d["prefill"]
        op = lambda name: sum(o["gpu_us"] or 0 for o in p["ops"] if o["kernel"].startswith(name)) / 1e3
        rows.setdefault((shape, d["depth"], build), []).append(
            (d["prefill_tokens_per_s"], (p["gpu_us"] or 0) / 1e3, op("attn_prefill"), op("gated_delta_chunk")))
print("shape\tdepth\tbuild\tprefill_tok_s\tgpu_ms\tattn_ms\tattn_share\tgdn_ms\tgdn_share\truns")
for key in sorted(rows):
    med = [statistics.median(v[i] for v in rows[key]) for i in range(4)]
    share = lambda ms: f"{ms / med[1]:.3f}" if med[1] else "-"
    print(f"{key[0]}\t{key[1]}\t{key[2]}\t{med[0]:.0f}\t{med[1]:.1f}\t{med[2]:.1f}\t{share(med[2])}\t"
          f"{med[3]:.1f}\t{share(med[3])}\t{len(rows[key])}")
PY
# At most 8 files come back from a call: the JSONs in one archive.
tar czf "$OUT/bench.tgz" -C "$OUT" bench selftest.json && rm -rf "$OUT/bench" "$OUT/selftest.json"
