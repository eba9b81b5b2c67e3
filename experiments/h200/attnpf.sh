#!/usr/bin/env bash
# One device call (nvidia-h100-x1 or nvidia-h200, ≤ 200 s wall; no llama.cpp): the prefill
# attention's flash form (wgsl/attn_prefill_flash.wgsl, 2026-12-06 #8 attnpf, issue 19 "prefill on
# the matrix units") against today's default (the staged coop kernel, tile 64x64q), same binary,
# chosen by FAK_ATTN_PREFILL. In order of what the call must not lose:
#   1. correctness on NVIDIA (the flash form has run nowhere before): gpu_attn_prefill (every
#      tile, the flash tiles 128x32f and 64x32f and flash with slack 0 included, against the f64
#      reference, forced splits, NaN-poisoned cache tails); gpu_attention_step and model_qwen3's
#      prefill tests with FAK_ATTN_PREFILL=flash (the engine's path: 128-row tiles, the prompt
#      alignment and split scratch that follow from them); when the serving binary is carried,
#      batch_invariance's dense tests (several prompts in one step, chunked) → tests.log;
#   2. `harness bench --depths 128,2048 --n-out 8 --profile-steps 1` on the 8B synth file, the arms
#      default / 128x32f / 64x32f interleaved ROUNDS (2) times (the 64x32f arm in round 1 only,
#      unless ALL_ROUNDS=1), then 32x32f at 128 tokens only and 128x32f at 2048 with
#      FAK_ATTN_SPLIT=fill:4096:256 (a split per 256 keys), under BUDGET_S (185 s from the start: a bench that would pass it
#      is logged SKIPPED) → bench.log, attn.tsv (per arm and round: prefill tok/s at 128 and
#      2048, the attention op's profiled ms and share), bench-json.tgz;
#   3. with time left and matmul-bench carried: `matmul-bench --attn` on the default, 128x32f and
#      64x32f tiles (µs per dispatch of each 8B 512-token chunk, max |diff| against the f32-tile
#      kernel at full size) → attn-bench.tsv.
# SM clocks every 200 ms → clocks.csv. Prepare (here, not on the device):
#   MATMUL_BENCH=1 RELEASE_TARGET_DIR=/work/targets/attnpf-rel experiments/h200/prepare.sh \
#       gpu_attn_prefill gpu_attention_step model_qwen3 [batch_invariance]
# staged as target/<dir>/{experiments/h200/*.sh, target/h200/{bin.txz,gl,built-at}} (README.md,
# "Calls"), run `cd target/<dir> && bash experiments/h200/attnpf.sh`, carry ["target/<dir>"];
# or from main's build through `multi.sh attnpf:200`.
# Files back: tests.log, bench.log, attn.tsv, bench-json.tgz, attn-bench.tsv, clocks.csv, gpu.csv.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
SECONDS=0
BUDGET_S=${BUDGET_S:-185}
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw --format=csv -lms 200 \
    > "$OUT/clocks.csv" 2>&1 &
CLOCKS=$!
M8=/dev/shm/qwen3-8b-q4_k_m.gguf
"$BIN/harness" synth --arch qwen3 --preset qwen3-8b --quant q4_k_m --seed 0 --fast-random \
    --out "$M8" > /tmp/synth8.log 2>&1 &
SYNTH8=$!

check() { # check LIMIT FORM BINARY [ARGS...]: one test run with FAK_ATTN_PREFILL=FORM ("": the
    # default), its verdict lines into tests.log
    local limit=$1 form=$2
    shift 2
    echo "== $* (FAK_ATTN_PREFILL=$form, at ${SECONDS}s)" >> "$OUT/tests.log"
    FAK_ATTN_PREFILL=$form timeout "$limit" "$@" 2>&1 \
        | grep -E "^test |test result|panicked at|Err|mismatch|> tol|cosine" | head -40 \
        >> "$OUT/tests.log"
}
check 90 "" "$BIN/gpu_attn_prefill"
check 30 flash "$BIN/gpu_attention_step"
# model_qwen3's prefill tests through the group binary (its launcher would add `model_qwen3::`,
# which libtest ORs with these names: the whole file).
check 60 flash "$BIN/model" \
    model_qwen3::f32_logits_match_the_cpu_reference_on_every_path_and_step_shape \
    model_qwen3::the_plan_sizes_the_activations_the_model_allocates \
    model_qwen3::prefill_dispatches_do_not_grow_with_the_prompt
if [ -x "$BIN/serving" ]; then
    check 40 flash "$BIN/serving" \
        batch_invariance::dense_logits_do_not_depend_on_the_batch_or_the_chunking \
        batch_invariance::dense_prompts_prefilled_together_give_each_its_own_logits
fi
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"
wait $SYNTH8 || { tail -3 /tmp/synth8.log; kill $CLOCKS; exit 1; }
echo "[${SECONDS} s] tests and synth done"

mkdir -p /tmp/bench-json
printf 'arm\tround\tdepth\tprefill_tok_s\tattention_ms\tattention_share\tprefill_gpu_ms\n' \
    > "$OUT/attn.tsv"
bench() { # bench ARM ROUND DEPTHS FORM [SPLIT]: one `harness bench` with FAK_ATTN_PREFILL=FORM
    # ("": the default) and, when given, FAK_ATTN_SPLIT=SPLIT
    local arm=$1 round=$2 depths=$3 form=$4 split=${5:-} json=/tmp/bench-json/$1-$2.json
    if [ $((SECONDS + 25)) -gt "$BUDGET_S" ]; then
        echo "== $arm round $round SKIPPED (at ${SECONDS}s, budget ${BUDGET_S}s)" | tee -a "$OUT/bench.log"
        return
    fi
    echo "== $arm round $round (at ${SECONDS}s)" >> "$OUT/bench.log"
    FAK_ATTN_PREFILL=$form FAK_ATTN_SPLIT=$split timeout 60 "$BIN/harness" bench --model "$M8" --depths "$depths" \
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
    bench default "$round" 128,2048 ""
    bench 128x32f "$round" 128,2048 128x32f
    if [ "$round" = 1 ] || [ "${ALL_ROUNDS:-0}" = 1 ]; then
        bench 64x32f "$round" 128,2048 64x32f
    fi
    echo "[${SECONDS} s] round $round done"
done
# The 32-row flash tile at 128 tokens (4× the workgroups of 128x32f: 128 for 132 SMs); the
# 128-row one with twice the key splits (its first 512-token chunk runs 128 unbalanced
# workgroups unsplit under the default rule).
bench 32x32f 1 128 32x32f
bench 128x32f-split256 1 2048 128x32f fill:4096:256
cat "$OUT/attn.tsv"

# Per dispatch, per tile, each output against the f32-tile kernel's (when carried, time left).
if [ -x "$BIN/matmul-bench" ] && [ $((SECONDS + 20)) -le "$BUDGET_S" ]; then
    echo "== matmul-bench --attn (at ${SECONDS}s)"
    ATTN_SPLITS=auto ATTN_TILES=64x64q,128x32f,64x32f timeout $((BUDGET_S - SECONDS)) \
        "$BIN/matmul-bench" --attn > "$OUT/attn-bench.tsv" 2> /tmp/attn-bench.err
    echo "exit $?"
    grep "qwen3-8b" "$OUT/attn-bench.tsv" | cut -f1,2,7,8,9,10,11 | head -40
fi
kill $CLOCKS
echo "[${SECONDS} s] done"
