#!/usr/bin/env bash
# One device call (nvidia-h200), about 4–5 minutes of wall time: issue 18 deliverables 2 and 5 (branch
# gdn-fuse): a GDN layer's decode step as one kernel (gdn_decode instead of ssm_conv → delta_prep →
# gated_delta → gated_norm) and the gated attention's gate inside attn_decode. First the hybrid
# model suite and the GDN and decode-attention kernel suites on the H200's paths (32-wide
# subgroups: the fused kernels' subgroup variants run nowhere else), then `harness bench` on the
# Qwen3.5-27B shape (Q4_K_M, --fast-random) at depth 128: the same binary before the fusions
# (FAK_DECODE_FUSION=0: the kernels main runs, bit for bit on lavapipe) and after, interleaved three
# times, with the SM clock logged; one more run in round 1 with gdn_decode in workgroups of 512
# (WG=…; WG= skips it), and main's build too when `harness-base` is carried (it does not fit beside
# the suites: 2 × 10 MB of harness). decode-ms.tsv: median decode ms/token per arm, its spread,
# dispatches and ops per token, host encode, the GDN ops' profiled GPU µs.
#
# Prepare (on the dev box):
#   RELEASE_TARGET_DIR=/work/targets/gdn-fuse-rel experiments/h200/prepare.sh model_qwen35 gpu_gated_delta gpu_attn_decode
# then, from the lead's checkout (the run tool copies /work/main, not this worktree):
#   D=/work/main/target/gdn-fuse; rm -rf $D; mkdir -p $D/experiments/h200 $D/target/h200
#   cp /work/wt/gdn-fuse/experiments/h200/*.sh $D/experiments/h200/
#   cp -r /work/wt/gdn-fuse/target/h200/{bin.txz,gl,built-at,commit} $D/target/h200/
#   run: command "cd target/gdn-fuse && bash experiments/h200/gdn-fuse.sh", carry ["target/gdn-fuse"]
# ROUNDS overrides the 3 rounds. Wall time: synth ~1 min beside the suites (≤ 3 × 90 s), then
# 7 bench runs of ≤ 60 s (~20–30 s each expected).
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh

{ time "$BIN/harness" synth --arch qwen35 --preset qwen35-27b --quant q4_k_m --fast-random \
    --out /dev/shm/q27.gguf; } > "$OUT/synth.log" 2>&1 &
{
    for t in model_qwen35 gpu_gated_delta gpu_attn_decode; do
        echo "== $t"
        timeout 90 "$BIN/$t" --skip llama_cpp --skip mlx_lm 2>&1 \
            | grep -E "^test |test result|panicked at|cosine [0-9.]+ <" | head -60
    done
} > "$OUT/parity.log" 2>&1
wait

nvidia-smi --query-gpu=clocks.sm --format=csv,noheader -lms 100 > "$OUT/sm-clocks.log" 2>&1 &
CLOCKS=$!
bench() { # label, then the binary and its environment
    local label=$1 build=$2
    shift 2
    echo "== round $round $label"
    env "$@" timeout 60 "$BIN/$build" bench --model /dev/shm/q27.gguf --depths 128 --n-out 64 \
        --json-out "$OUT/bench.$label.$round.json" 2>&1 | grep -E "^depth|dispatches"
}
for round in $(seq 1 "${ROUNDS:-3}"); do
    [ -x "$BIN/harness-base" ] && bench harness-base harness-base
    bench unfused harness FAK_DECODE_FUSION=0
    bench harness harness
    # The fused kernel's workgroup size: 256 by default; WG (default 512) once, in round 1.
    [ "$round" = 1 ] && [ -n "${WG-512}" ] && bench "harness-wg${WG-512}" harness FAK_GDN_DECODE_WG="${WG-512}"
done > "$OUT/bench.log" 2>&1
kill "$CLOCKS"

python3 - "$OUT" <<'PY' | tee "$OUT/decode-ms.tsv"
import glob, json, os, statistics, sys
out = sys.argv[1]
GDN = {"ssm_conv", "delta_prep", "gated_delta", "gated_norm", "gdn_decode"}
rows = {}
for path in glob.glob(f"{out}/bench.*.*.json"):
    _, build, _, _ = os.path.basename(path).split(".")  # bench.<label>.<round>.json
    for d in json.load(open(path))["depths"]:
        # The GDN ops' profiled GPU time per token (profiled times run long: where, not how much).
        gdn = sum(o["gpu_us"] or 0 for o in d["ops"] if o["name"] in GDN)
        rows.setdefault(build, []).append((d["decode_us_per_token"] / 1000, d["dispatches_per_step"],
                                           d["ops_per_step"], d["encode_us_per_token"], gdn))
print("build\tmedian_ms\tmin_ms\tmax_ms\tdispatches\tops\tencode_us\tgdn_gpu_us\truns")
for build, runs in sorted(rows.items()):
    ms = [r[0] for r in runs]
    print(f"{build}\t{statistics.median(ms):.3f}\t{min(ms):.3f}\t{max(ms):.3f}\t{runs[0][1]}\t"
          f"{runs[0][2]}\t{statistics.median(r[3] for r in runs):.0f}\t"
          f"{statistics.median(r[4] for r in runs):.0f}\t{len(runs)}")
new = rows.get("harness")
for before in ("unfused", "harness-base"):
    if rows.get(before) and new:
        b, n = statistics.median(r[0] for r in rows[before]), statistics.median(r[0] for r in new)
        print(f"harness/{before}\t{n / b:.4f}")
PY
sort -n "$OUT/sm-clocks.log" | awk '{a[NR]=$1} END {print "SM clock MHz min/median/max:", a[1], a[int((NR+1)/2)], a[NR]}'
cat "$OUT/parity.log" "$OUT/bench.log"
# At most 8 files come back from a call: the per-run JSONs in one archive.
(cd "$OUT" && tar czf bench-27b.tgz bench.*.json && rm -f bench.*.json)
