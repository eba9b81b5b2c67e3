#!/usr/bin/env bash
# One device call (nvidia-h200 or an H100, ~7–8 min wall): issue 18's two decode changes of
# 2026-12-05 #4 on hardware, in one build — the fused GDN decode step (`gdn_decode`, the
# attention gate inside attn_decode: the default; FAK_DECODE_FUSION=0 runs the kernels before
# them) and the integer mat-vec's wide form (opt-in: FAK_MATVEC_WIDE=1, or `…/wide` layouts).
# Merges experiments/h200/gdn-fuse.sh and matvec-redesign.sh (whose headers say more):
#   1. while the 27B and 8B Q4_K_M files are written (--fast-random): model_qwen35 (one test at
#      a time), gpu_gated_delta, gpu_attn_decode and gpu_matvec's wide / quantizing / integer
#      tests on the device's own paths (32-wide subgroups run nowhere else) → parity.log;
#   2. matvec-bench: every 8B decode product and the 27B MLP, narrow and wide layouts, each
#      checked against the CPU before it is timed → matvec-bench.tsv;
#   3. `harness bench --depths 128 --n-out 64` on the 27B: unfused, default (fused), default +
#      wide, interleaved ROUNDS times (2); on the 8B default and wide once → bench.log, decode-ms.tsv
#      (median decode ms/token per arm, dispatches, ops, host encode), SM clocks logged.
# Prepare: MATVEC_BENCH=1 RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh \
#   model_qwen35 gpu_gated_delta gpu_attn_decode gpu_matvec
# carry target/h200's bin.txz, gl, built-at, commit. Knobs for a short call: ROUNDS=1, SKIP_8B=1,
# MVB_TIMEOUT (matvec-bench's seconds, 150).
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
M8=/dev/shm/qwen3-8b-q4_k_m.gguf
M27=/dev/shm/qwen35-27b-q4_k_m.gguf
{
    time "$BIN/harness" synth --arch qwen35 --preset qwen35-27b --quant q4_k_m --fast-random \
        --out "$M27"
    "$BIN/harness" synth --arch qwen3 --preset qwen3-8b --quant q4_k_m --fast-random --out "$M8"
} > "$OUT/synth.log" 2>&1 &
SYNTH=$!
{
    # Model suites one test at a time (several engines' devices at once have crashed the
    # NVIDIA driver: landing.sh).
    for t in "model_qwen35 --test-threads=1" gpu_gated_delta gpu_attn_decode; do
        set -- $t
        echo "== $*"
        timeout 120 "$BIN/$1" --skip llama_cpp --skip mlx_lm "${@:2}" 2>&1 \
            | grep -E "^test |test result|panicked at|cosine [0-9.]+ <" | head -40
    done
    echo "== gpu_matvec: the wide form, the quantized gate/up output, the integer path"
    timeout 60 "$BIN/gpu" gpu_matvec::the_wide_form gpu_matvec::a_gate_up_pairing_quantizes \
        gpu_matvec::the_integer_path_matches 2>&1 | grep -E "^test |test result|panicked" | head -20
} > "$OUT/parity.log" 2>&1
cat "$OUT/parity.log"

LAYOUTS=64/1/1,256/4/1,256/16/1
LAYOUTS+=,256/4/1/wide,128/8/1/wide,128/4/2/wide,256/16/1/wide
LAYOUTS+=,64/4/1/wide,128/2/1/wide,256/8/1/wide,128/8/2/wide
timeout "${MVB_TIMEOUT:-150}" "$BIN/matvec-bench" --layouts "$LAYOUTS" > "$OUT/matvec-bench.tsv" 2> /tmp/mvb.err
echo "== matvec-bench exit $?"
grep -E "^#|FAILED" "$OUT/matvec-bench.tsv" | head -40
tail -3 /tmp/mvb.err
wait $SYNTH

nvidia-smi --query-gpu=clocks.sm --format=csv,noheader -lms 100 > "$OUT/sm-clocks.log" 2>&1 &
CLOCKS=$!
mkdir -p /tmp/bench-json
bench() { # model-label model arm [env...]
    local label=$1 model=$2 arm=$3
    shift 3
    echo "== round $round $label $arm"
    env "$@" timeout 60 "$BIN/harness" bench --model "$model" --depths 128 --n-out 64 \
        --profile-steps 3 --suffix 0 --probe-mib 256 \
        --json-out "/tmp/bench-json/bench.$label-$arm.$round.json" 2>&1 | grep -E "^depth 128:"
}
for round in $(seq "${ROUNDS:-2}"); do
    bench 27b "$M27" unfused FAK_DECODE_FUSION=0
    bench 27b "$M27" fused
    bench 27b "$M27" wide FAK_MATVEC_WIDE=1
done > "$OUT/bench.log" 2>&1
round=1
[ "${SKIP_8B:-0}" = 1 ] ||
    { bench 8b "$M8" default; bench 8b "$M8" wide FAK_MATVEC_WIDE=1; } >> "$OUT/bench.log" 2>&1
kill "$CLOCKS"
cut -c1-220 "$OUT/bench.log"

python3 - /tmp/bench-json <<'PY' | tee "$OUT/decode-ms.tsv"
import glob, json, os, statistics, sys
rows = {}
for path in glob.glob(f"{sys.argv[1]}/bench.*.*.json"):
    arm = os.path.basename(path).split(".")[1]  # bench.<model-arm>.<round>.json
    for d in json.load(open(path))["depths"]:
        rows.setdefault(arm, []).append((d["decode_us_per_token"] / 1000, d["dispatches_per_step"],
                                         d["ops_per_step"], d["encode_us_per_token"]))
print("arm\tmedian_ms\tmin_ms\tmax_ms\tdispatches\tops\tencode_us\truns")
for arm, runs in sorted(rows.items()):
    ms = [r[0] for r in runs]
    print(f"{arm}\t{statistics.median(ms):.3f}\t{min(ms):.3f}\t{max(ms):.3f}\t{runs[0][1]}\t"
          f"{runs[0][2]}\t{statistics.median(r[3] for r in runs):.0f}\t{len(runs)}")
PY
sort -n "$OUT/sm-clocks.log" | awk '{a[NR]=$1} END {print "SM clock MHz min/median/max:", a[1], a[int((NR+1)/2)], a[NR]}'
(cd /tmp/bench-json && tar czf "$OUT/bench-json.tgz" ./*.json)
