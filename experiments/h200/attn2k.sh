#!/usr/bin/env bash
# One device call (nvidia-h100-x1 or nvidia-h200, ≤ 200 s wall; no llama.cpp): the prefill
# attention's row tiles taken longest first (`FAK_ATTN_ORDER=long`, wgsl/attn_prefill_rows.wgsl
# `tile_and_head`; experiments/NOTES.md "attn2k", issue 19) against today's order (tile x of kv
# head y: a causal step's short tiles start first, its longest last), same binary, the default
# kernel (the flash form's lean step, 128x32fl, unsplit at 2048). The order changes which
# workgroup computes which tile, never what a tile computes: the same bits (checked below).
# In order of what the call must not lose:
#   1. correctness on NVIDIA → tests.log: gpu_attn_prefill::the_tile_order_changes_no_bits (the
#      engine's kernel, the staged tile and the lean step at 128, 64 and 32 rows, longest first:
#      against the f64 reference and bit for bit against the default order, unsplit and in 3
#      splits, pages of 64 and 16 through the token table) and
#      the_lean_row_counts_compute_the_same_bits (128x32fl, 64x32fl, 32x32fl unsplit: the same
#      bits), then gpu_attention_step and model_qwen3's prefill tests under FAK_ATTN_ORDER=long
#      (the engine's path), and batch_invariance's dense test where the serving group is carried;
#   2. `harness bench --depths 128,1024,2048 --n-out 8 --profile-steps 1` on the Qwen3-8B synth,
#      default / long interleaved ROUNDS (2) times, under BUDGET_S (185 s from the start: a bench
#      that would pass it is logged SKIPPED) → bench.log, attn.tsv (per arm, round and depth:
#      prefill tok/s, the attention op's profiled ms and share, the step's GPU ms),
#      bench-json.tgz. Depth 1024 is the count's sharpest test (256 workgroups: 53 key steps of
#      wave in order, 32 longest first); 128 tokens (32 workgroups, one wave) must not move.
#      Then, with time left, the first depth alone on the lean step's 64- and 32-row tiles
#      (FAK_ATTN_PREFILL=64x32fl, 32x32fl: arms rows64, rows32), then a third round.
# SM clocks every 200 ms → clocks.csv. Prepare (here, not on the device):
#   RELEASE_TARGET_DIR=/work/targets/<dir> experiments/h200/prepare.sh \
#       gpu_attn_prefill gpu_attention_step model_qwen3
# (the gpu and model group binaries and the harness), then `multi.sh attn2k:200`, or staged as
# target/<dir>/{experiments/h200/{setup,attn2k}.sh, target/h200/{bin.txz,gl,built-at,commit}}:
# `cd target/<dir> && bash experiments/h200/attn2k.sh`, carry ["target/<dir>"], timeout 220.
# A dry run elsewhere: PRESET8=tiny DEPTHS=40,300 (the synth preset, the bench depths), with
# setup.sh's FAK_TMP / FAK_LOADER=system / FAK_VK_ICD.
# Expected wall (flash3's call: tests ~70 s with the whole gpu_attn_prefill, a bench ~10 s): tests
# ~50 s, four benches ~50 s, a third round in what is left.
# Files back: tests.log, bench.log, attn.tsv, bench-json.tgz, clocks.csv, gpu.csv.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
SECONDS=0
BUDGET_S=${BUDGET_S:-185}
DEPTHS=${DEPTHS:-128,1024,2048}
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw --format=csv -lms 200 \
    > "$OUT/clocks.csv" 2>&1 &
CLOCKS=$!
PRESET8=${PRESET8:-qwen3-8b}
M8=${M8:-/dev/shm/$PRESET8-q4_k_m.gguf}
"$BIN/harness" synth --arch qwen3 --preset "$PRESET8" --quant q4_k_m --seed 0 --fast-random \
    --out "$M8" > /tmp/synth8.log 2>&1 &
SYNTH8=$!

check() { # check LIMIT ORDER BINARY [ARGS...]: one test run with FAK_ATTN_ORDER=ORDER ("": the
    # default), its verdict lines into tests.log
    local limit=$1 order=$2
    shift 2
    echo "== $* (FAK_ATTN_ORDER=$order, at ${SECONDS}s)" >> "$OUT/tests.log"
    FAK_ATTN_ORDER=$order timeout "$limit" "$@" 2>&1 \
        | grep -E "^test |test result|panicked at|Err|mismatch|> tol|longest|cosine" \
        | cut -c1-300 | head -40 >> "$OUT/tests.log"
}
# Through the group binaries (a launcher adds its file's `name::`, which libtest ORs with a test
# name: the whole file).
check 60 "" "$BIN/gpu" gpu_attn_prefill::the_tile_order_changes_no_bits \
    gpu_attn_prefill::the_lean_row_counts_compute_the_same_bits
check 30 long "$BIN/gpu_attention_step"
check 60 long "$BIN/model" \
    model_qwen3::f32_logits_match_the_cpu_reference_on_every_path_and_step_shape \
    model_qwen3::the_plan_sizes_the_activations_the_model_allocates \
    model_qwen3::prefill_dispatches_do_not_grow_with_the_prompt
# Issue 21's batch and chunking invariance under the order, where the serving group is carried
# (prepare.sh … batch_invariance).
if [ -x "$BIN/serving" ]; then
    check 60 long "$BIN/serving" \
        batch_invariance::dense_logits_do_not_depend_on_the_batch_or_the_chunking
fi
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"
echo "[${SECONDS} s] tests done"

wait $SYNTH8 || { tail -3 /tmp/synth8.log; kill $CLOCKS 2> /dev/null; exit 1; }
echo "[${SECONDS} s] synth done"

mkdir -p /tmp/bench-json
rm -f /tmp/bench-json/*.json
printf 'arm\tround\tdepth\tprefill_tok_s\tattention_ms\tattention_share\tprefill_gpu_ms\n' \
    > "$OUT/attn.tsv"
bench() { # bench ARM ROUND ORDER [FORM [DEPTHS]]: one `harness bench` with FAK_ATTN_ORDER=ORDER
    # and FAK_ATTN_PREFILL=FORM ("": the defaults) at DEPTHS ($DEPTHS)
    local arm=$1 round=$2 order=$3 form=${4:-} depths=${5:-$DEPTHS} json=/tmp/bench-json/$1-$2.json
    if [ $((SECONDS + 20)) -gt "$BUDGET_S" ]; then
        echo "== $arm round $round SKIPPED (at ${SECONDS}s, budget ${BUDGET_S}s)" | tee -a "$OUT/bench.log"
        return
    fi
    echo "== $arm round $round (at ${SECONDS}s)" >> "$OUT/bench.log"
    FAK_ATTN_ORDER=$order FAK_ATTN_PREFILL=$form timeout 60 "$BIN/harness" bench --model "$M8" \
        --depths "$depths" \
        --n-out 8 --profile-steps 1 --suffix 0 --probe-mib 256 --json-out "$json" \
        > /tmp/bench.log 2>&1
    echo "rc=$?" >> "$OUT/bench.log"
    grep -E "^depth [0-9]+ prefill:|^  attention|panicked|rror" /tmp/bench.log | cut -c1-200 \
        >> "$OUT/bench.log"
    python3 - "$json" "$arm" "$round" >> "$OUT/attn.tsv" <<'EOF' || true
import json, sys
path, arm, rnd = sys.argv[1:]
b = json.load(open(path))
for d in b["depths"]:
    p = d["prefill"]
    att = sum(o["gpu_us"] for o in p["ops"] if o["name"] == "attention")
    print(f"{arm}\t{rnd}\t{d['depth']}\t{d['prefill_tokens_per_s']:.0f}\t{att / 1e3:.2f}\t"
          f"{att / p['gpu_us']:.3f}\t{p['gpu_us'] / 1e3:.1f}")
EOF
    (cd /tmp/bench-json && tar czf "$OUT/bench-json.tgz" ./*.json)
}
for round in $(seq "${ROUNDS:-2}"); do
    bench default "$round" ""
    bench long "$round" long
    echo "[${SECONDS} s] round $round done"
done
# With time left, the short step on shorter tiles (the lean step's 64- and 32-row tiles at the
# first depth alone: 64 and 128 workgroups where 128x32fl has 32; the same bits unsplit, as
# the_lean_row_counts_compute_the_same_bits checks) — data for a rule by step size, not built.
bench rows64 1 "" 64x32fl "${DEPTHS%%,*}"
bench rows32 1 "" 32x32fl "${DEPTHS%%,*}"
# A third round where the budget leaves one (the skip check stops a half round).
EXTRA=$((${ROUNDS:-2} + 1))
if [ $((SECONDS + 45)) -le "$BUDGET_S" ]; then
    bench default "$EXTRA" ""
    bench long "$EXTRA" long
fi
cat "$OUT/attn.tsv"
# Per depth and arm, the attention's mean ms over the rounds and long's change.
python3 - "$OUT/attn.tsv" <<'EOF' || true
import csv, sys, collections
ms = collections.defaultdict(list)
for r in csv.DictReader(open(sys.argv[1]), delimiter="\t"):
    ms[(r["depth"], r["arm"])].append(float(r["attention_ms"]))
for depth in sorted({d for d, _ in ms}, key=int):
    a, b = ms.get((depth, "default"), []), ms.get((depth, "long"), [])
    if a and b:
        ma, mb = sum(a) / len(a), sum(b) / len(b)
        print(f"depth {depth}: attention default {ma:.2f} ms, long {mb:.2f} ms ({mb / ma - 1:+.1%})")
EOF
kill $CLOCKS 2> /dev/null
echo "[${SECONDS} s] done"
