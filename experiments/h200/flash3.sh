#!/usr/bin/env bash
# One device call (nvidia-h100-x1 or nvidia-h200, ≤ 200 s wall; no llama.cpp): the flash prefill
# attention's lean step with S one step ahead of its softmax (wgsl/attn_prefill_flash.wgsl
# `AHEAD`, tiles `128x32fla`.., `FAK_ATTN_PREFILL=lean-a`: no barrier between a step's MMAs and
# its softmax, so the softmax's scalar work issues beside the MMAs) — experiments/NOTES.md
# "flash3", issue 19 — against today's default (the lean step of 128x32f, `128x32fl`, unsplit at
# 2048), same binary. In order of what the call must not lose:
#   1. correctness on NVIDIA (lean-a has run nowhere: lavapipe has no cooperative matrices):
#      gpu_attn_prefill with the variable unset (kernels() runs every tile, lean, lean-k and
#      lean-a of the largest flash tile and their slack-0 twins, against the f64 reference,
#      forced splits, NaN-poisoned cache tails, pages of 32 and 64; the bits test: every flash
#      tile's lean, lean-k and lean-a twins bit for bit against it) → tests.log; then
#      gpu_attention_step and model_qwen3's prefill tests under lean-a (the engine's path: pages
#      of 64);
#   2. `harness bench --depths 128,2048 --n-out 8 --profile-steps 1` on the 8B synth file, default
#      / lean-a interleaved ROUNDS (3) times, under BUDGET_S (185 s from the start: a bench that
#      would pass it is logged SKIPPED) → bench.log, attn.tsv (per arm and round: prefill tok/s,
#      the attention op's profiled ms and share), bench-json.tgz;
#   3. with time left and matmul-bench carried: `matmul-bench --attn` on 128x32fl and 128x32fla
#      (ATTN_SPLITS=auto: unsplit and the engine's rule; µs per dispatch per 512-token chunk of
#      the 8B at 0..7680 cached keys, max |diff| against the f16 f32-tile kernel; pages of 64)
#      → attn-bench.tsv.
# SM clocks every 200 ms → clocks.csv. Prepare (here, not on the device):
#   MATMUL_BENCH=1 RELEASE_TARGET_DIR=/work/targets/flash3-rel experiments/h200/prepare.sh \
#       gpu_attn_prefill gpu_attention_step model_qwen3
# (gpu_attn_prefill and gpu_attention_step are modules of the gpu group binary; model_qwen3 of
# the model one), then through main's build `multi.sh flash3:200`, or staged as
# target/<dir>/{experiments/h200/{setup,flash3}.sh, target/h200/{bin.txz,gl,built-at,commit}}:
# `cd target/<dir> && bash experiments/h200/flash3.sh`, carry ["target/<dir>"], timeout 220.
# Expected wall (flash2's call 4: tests 68 s, a bench ~9–10 s): tests ~75 s, six benches ~60 s,
# attn-bench ~20–40 s in what is left.
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
check 120 "" "$BIN/gpu_attn_prefill"
check 30 lean-a "$BIN/gpu_attention_step"
# model_qwen3's prefill tests through the group binary (its launcher would add `model_qwen3::`,
# which libtest ORs with these names: the whole file).
check 60 lean-a "$BIN/model" \
    model_qwen3::f32_logits_match_the_cpu_reference_on_every_path_and_step_shape \
    model_qwen3::the_plan_sizes_the_activations_the_model_allocates \
    model_qwen3::prefill_dispatches_do_not_grow_with_the_prompt
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"
echo "[${SECONDS} s] tests done"

wait $SYNTH8 || { tail -3 /tmp/synth8.log; kill $CLOCKS; exit 1; }
echo "[${SECONDS} s] synth done"

mkdir -p /tmp/bench-json
printf 'arm\tround\tdepth\tprefill_tok_s\tattention_ms\tattention_share\tprefill_gpu_ms\n' \
    > "$OUT/attn.tsv"
bench() { # bench ARM ROUND DEPTHS FORM: one `harness bench` with FAK_ATTN_PREFILL=FORM ("": the
    # default)
    local arm=$1 round=$2 depths=$3 form=$4 json=/tmp/bench-json/$1-$2.json
    if [ $((SECONDS + 25)) -gt "$BUDGET_S" ]; then
        echo "== $arm round $round SKIPPED (at ${SECONDS}s, budget ${BUDGET_S}s)" | tee -a "$OUT/bench.log"
        return
    fi
    echo "== $arm round $round (at ${SECONDS}s)" >> "$OUT/bench.log"
    FAK_ATTN_PREFILL=$form timeout 60 "$BIN/harness" bench --model "$M8" --depths "$depths" \
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
for round in $(seq "${ROUNDS:-3}"); do
    bench default "$round" 128,2048 ""
    bench lean-a "$round" 128,2048 lean-a
    echo "[${SECONDS} s] round $round done"
done
cat "$OUT/attn.tsv"

# Per dispatch, the two tiles, each output against the f32-tile kernel's (when carried, time left).
if [ -x "$BIN/matmul-bench" ] && [ $((SECONDS + 20)) -le "$BUDGET_S" ]; then
    echo "== matmul-bench --attn (at ${SECONDS}s)"
    ATTN_SPLITS=auto ATTN_TILES=128x32fl,128x32fla timeout $((BUDGET_S - SECONDS)) \
        "$BIN/matmul-bench" --attn > "$OUT/attn-bench.tsv" 2> /tmp/attn-bench.err
    echo "exit $?"
    grep "qwen3-8b" "$OUT/attn-bench.tsv" | grep -E "128x32f" | cut -f1,2,7,8,9,10,11 | head -20
fi
kill $CLOCKS
echo "[${SECONDS} s] done"
