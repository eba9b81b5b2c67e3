#!/usr/bin/env bash
# One device call (nvidia-h100-x1 or nvidia-h200, ≤ 200 s wall; no llama.cpp): the prefill folds
# (`FAK_PREFILL_FOLD=norm,swiglu`, experiments/NOTES.md "pf128", issue 19's 128-token step): the
# RMSNorm before the projections and gate/up, and the SwiGLU before W_down, applied by the x16
# mat-mul's conversion of X to f16 — one dispatch where the default records the op's and
# `to_f16`'s, the same bits (checked below).
# In order of what the call must not lose:
#   1. correctness on NVIDIA → tests.log: gpu_matmul::each_prefill_fold_computes_the_bits_of_the_
#      op_then_the_product (both folds on the engine's x16 kernel, K whole and split, Store and
#      Accumulate, rows of 256 and 1024, 5 and 150 tokens: bit for bit against the op then the
#      product, Y NaN-poisoned), then model_qwen3's and model_qwen35's prefill tests under
#      FAK_PREFILL_FOLD=norm,swiglu (every path and step shape against the CPU reference);
#   2. `harness bench --depths 128,2048 --n-out 8 --profile-steps 1` on the Qwen3-8B synth,
#      default / fold interleaved ROUNDS (2) times, under BUDGET_S (185 s from the start: a bench
#      that would pass it is logged SKIPPED) → bench.log, pf.tsv (per shape, arm, round and
#      depth: prefill tok/s, the step's GPU ms and dispatches, the folded ops' ms — ffn_norm,
#      attn_norm, swiglu — and the products' ms), bench-json.tgz;
#   3. with time left, the Qwen3.5-27B synth (written in the background from the start) the same
#      way, default / fold, as many rounds as fit; then the 8B's norm-only arm (FOLD=norm).
# SM clocks every 200 ms → clocks.csv. Prepare (here, not on the device):
#   RELEASE_TARGET_DIR=/work/targets/<dir> experiments/h200/prepare.sh \
#       gpu_matmul model_qwen3 model_qwen35
# (the gpu and model group binaries and the harness), then `multi.sh pf128:200`.
# A dry run elsewhere: PRESET8=tiny PRESET27=tiny DEPTHS=40,300 (the synth presets, the bench
# depths), with setup.sh's FAK_TMP / FAK_LOADER=system / FAK_VK_ICD.
# Expected wall: tests ~20 s, an 8B bench ~10 s, a 27B bench ~20 s after its synth (beside the
# tests and the 8B): 8B 4 benches, 27B 4, the norm arm: ~160 s. Dry run on lavapipe (tiny
# presets, DEPTHS=40,300, ROUNDS=1, BUDGET_S=600): 98 s, every step ran (NOTES "pf128").
# Files back: tests.log, bench.log, pf.tsv, bench-json.tgz, clocks.csv.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
SECONDS=0
BUDGET_S=${BUDGET_S:-185}
DEPTHS=${DEPTHS:-128,2048}
FOLD=${FOLD:-norm,swiglu}
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw --format=csv -lms 200 \
    > "$OUT/clocks.csv" 2>&1 &
CLOCKS=$!
PRESET8=${PRESET8:-qwen3-8b}
PRESET27=${PRESET27:-qwen35-27b}
M8=${M8:-/dev/shm/$PRESET8-q4_k_m.gguf}
M27=${M27:-/dev/shm/$PRESET27-q4_k_m.gguf}
"$BIN/harness" synth --arch qwen3 --preset "$PRESET8" --quant q4_k_m --seed 0 --fast-random \
    --out "$M8" > /tmp/synth8.log 2>&1 &
SYNTH8=$!
"$BIN/harness" synth --arch qwen35 --preset "$PRESET27" --quant q4_k_m --seed 0 --fast-random \
    --out "$M27" > /tmp/synth27.log 2>&1 &
SYNTH27=$!

check() { # check LIMIT FOLD BINARY [ARGS...]: one test run with FAK_PREFILL_FOLD=FOLD ("": the
    # default), its verdict lines into tests.log
    local limit=$1 fold=$2
    shift 2
    echo "== $* (FAK_PREFILL_FOLD=$fold, at ${SECONDS}s)" >> "$OUT/tests.log"
    FAK_PREFILL_FOLD=$fold timeout "$limit" "$@" 2>&1 \
        | grep -E "^test |test result|panicked at|Err|differ|mismatch|> tol|finite|cosine" \
        | cut -c1-300 | head -40 >> "$OUT/tests.log"
}
# Through the group binaries (a launcher adds its file's `name::`, which libtest ORs with a test
# name: the whole file).
check 60 "" "$BIN/gpu" gpu_matmul::each_prefill_fold_computes_the_bits_of_the_op_then_the_product \
    gpu_matmul::each_coop_tiling_declares_the_workgroup_memory_the_host_counts
check 60 "$FOLD" "$BIN/model" \
    model_qwen3::f32_logits_match_the_cpu_reference_on_every_path_and_step_shape \
    model_qwen3::prefill_dispatches_do_not_grow_with_the_prompt \
    model_qwen35::f32_logits_match_the_cpu_reference_on_the_subgroup_paths_and_every_step_shape \
    model_qwen35::a_prefill_split_over_several_steps_equals_one_prefill \
    model_qwen35::prefill_dispatches_do_not_grow_with_the_prompt
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"
echo "[${SECONDS} s] tests done"

wait $SYNTH8 || { tail -3 /tmp/synth8.log; kill $CLOCKS 2> /dev/null; exit 1; }
echo "[${SECONDS} s] 8B synth done"

mkdir -p /tmp/bench-json
rm -f /tmp/bench-json/*.json
printf 'shape\tarm\tround\tdepth\tprefill_tok_s\tgpu_ms\tdispatches\tfolded_ops_ms\tproducts_ms\n' \
    > "$OUT/pf.tsv"
bench() { # bench SHAPE MODEL ARM ROUND FOLD EST_S: one `harness bench` with FAK_PREFILL_FOLD=FOLD
    # ("": the default), skipped when EST_S more seconds would pass the budget
    local shape=$1 model=$2 arm=$3 round=$4 fold=$5 est=$6 json=/tmp/bench-json/$1-$3-$4.json
    if [ $((SECONDS + est)) -gt "$BUDGET_S" ]; then
        echo "== $shape $arm round $round SKIPPED (at ${SECONDS}s, budget ${BUDGET_S}s)" | tee -a "$OUT/bench.log"
        return
    fi
    echo "== $shape $arm round $round (FAK_PREFILL_FOLD=$fold, at ${SECONDS}s)" >> "$OUT/bench.log"
    FAK_PREFILL_FOLD=$fold timeout 90 "$BIN/harness" bench --model "$model" --depths "$DEPTHS" \
        --n-out 8 --profile-steps 1 --suffix 0 --probe-mib 256 --json-out "$json" \
        > /tmp/bench.log 2>&1
    echo "rc=$?" >> "$OUT/bench.log"
    grep -E "^depth [0-9]+ prefill:|^  (ffn_norm|attn_norm|swiglu|ffn_gate_up|ffn_down) |panicked|rror" \
        /tmp/bench.log | grep -v " matvec " | cut -c1-200 >> "$OUT/bench.log"
    python3 - "$json" "$shape" "$arm" "$round" >> "$OUT/pf.tsv" <<'EOF' || true
import json, sys
path, shape, arm, rnd = sys.argv[1:]
b = json.load(open(path))
for d in b["depths"]:
    p = d["prefill"]
    ops = p["ops"]
    folded = sum(o["gpu_us"] for o in ops if o["name"] in ("ffn_norm", "attn_norm", "swiglu"))
    products = sum(o["gpu_us"] for o in ops if o["kernel"] == "matmul")
    print(f"{shape}\t{arm}\t{rnd}\t{d['depth']}\t{d['prefill_tokens_per_s']:.0f}\t"
          f"{p['gpu_us'] / 1e3:.2f}\t{p['dispatches']}\t{folded / 1e3:.2f}\t{products / 1e3:.2f}")
EOF
    (cd /tmp/bench-json && tar czf "$OUT/bench-json.tgz" ./*.json)
}
for round in $(seq "${ROUNDS:-2}"); do
    bench 8b "$M8" default "$round" "" 15
    bench 8b "$M8" fold "$round" "$FOLD" 15
    echo "[${SECONDS} s] 8B round $round done"
done
if wait $SYNTH27; then
    echo "[${SECONDS} s] 27B synth done"
    for round in $(seq "${ROUNDS:-2}"); do
        bench 27b "$M27" default "$round" "" 30
        bench 27b "$M27" fold "$round" "$FOLD" 30
    done
else
    tail -3 /tmp/synth27.log
fi
# With time left: the norm fold alone on the 8B (how the gain splits between the two folds).
bench 8b "$M8" norm 1 norm 15
cat "$OUT/pf.tsv"
# Per shape and depth, the mean prefill tok/s and GPU ms of each arm, and fold's change.
python3 - "$OUT/pf.tsv" <<'EOF' || true
import csv, sys, collections
tok = collections.defaultdict(list)
gpu = collections.defaultdict(list)
for r in csv.DictReader(open(sys.argv[1]), delimiter="\t"):
    key = (r["shape"], r["depth"], r["arm"])
    tok[key].append(float(r["prefill_tok_s"]))
    gpu[key].append(float(r["gpu_ms"]))
mean = lambda v: sum(v) / len(v)
for shape, depth in sorted({(s, d) for s, d, _ in tok}, key=lambda k: (k[0], int(k[1]))):
    a, b = (shape, depth, "default"), (shape, depth, "fold")
    if a in tok and b in tok:
        ta, tb, ga, gb = mean(tok[a]), mean(tok[b]), mean(gpu[a]), mean(gpu[b])
        print(f"{shape} depth {depth}: prefill default {ta:.0f} tok/s, fold {tb:.0f} "
              f"({tb / ta - 1:+.1%}); profiled GPU {ga:.2f} → {gb:.2f} ms")
EOF
kill $CLOCKS 2> /dev/null
echo "[${SECONDS} s] done"
