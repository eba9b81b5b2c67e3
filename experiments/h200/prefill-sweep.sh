#!/usr/bin/env bash
# One device call (nvidia-h200 or an H100, ≤ 5 min wall; no llama.cpp): issue 19's two prefill
# kernels in the forms of 2026-12-05 #6 (helper prefill, experiments/NOTES.md "prefill"), each
# checked, then timed against today's defaults on both shapes.
#   1. The suites that run the coop kernels (stdout summary; logs in tests.tgz):
#      gpu_gated_delta — every chunked test on every form of the coop delta rule (ChunkForm::COOP:
#        default, +quads, +fused, +columns, +quads+fused+columns) and the f32 kernel's two, against
#        the f64 reference, and `every_form_computes_its_kernels_default_bits` (each form's o and
#        state equal the default's bit for bit);
#      gpu_attn_prefill — every coop tile (the sweep's 64x32 and the interleaved 64x64qi
#        included) and forced key splits against the f64 reference;
#      model_qwen35 with the all-in form and no attention splits (the engine's path through both
#        variables), one test at a time.
#   2. `harness bench --depths 128,2048 --n-out 8 --profile-steps 1` per variant, the 8B and the 27B
#      interleaved, the defaults first and again at the end (drift), skipping what would pass the
#      time budget (BUDGET_S, default 285 s from the start): on the 8B the attention
#      (FAK_ATTN_PREFILL tile, FAK_ATTN_SPLIT rule), on the 27B the delta rule (FAK_GDN_CHUNK form).
#      bench.log keeps each run's prefill lines and the attention / delta-rule op rows;
#      bench-json.tgz the JSONs (per-op µs at both depths).
# Prepare (here, not on the device; ~6 min on this box; ~18 MiB):
#   MATMUL_BENCH=1 RELEASE_TARGET_DIR=/work/targets/prefill-rel experiments/h200/prepare.sh \
#       gpu_gated_delta gpu_attn_prefill model_qwen35
#   then stage target/h200 with the scripts as a copy in the lead's checkout, e.g.
#   D=/work/main/target/prefill-sweep; rm -rf $D; mkdir -p $D/experiments/h200
#   cp experiments/h200/{setup.sh,prefill-sweep.sh} $D/experiments/h200/
#   cp -r target/h200/{bin.txz,gl,built-at,commit} $D/target/h200/   (mkdir -p $D/target/h200 first)
# run `cd target/prefill-sweep && bash experiments/h200/prefill-sweep.sh`, carry
# ["target/prefill-sweep"], timeout_s 330.
#   3. `matmul-bench --attn` after the first four benches, when carried (attn-bench.tsv: every
#      attention tile's µs per dispatch, unsplit and split by the engine's rule).
# SUITES=0 skips step 1; ARMS="label …" runs only the benches named.
# Files back: tests.tgz, bench.log, bench-json.tgz, attn-bench.tsv, clocks.csv, gpu.csv.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu \
    --format=csv -lms 500 > "$OUT/clocks.csv" 2>&1 &
CLOCKS=$!
LOGS=/tmp/sweep-logs
mkdir -p "$LOGS" /tmp/bench-json
Q8B=/dev/shm/qwen3-8b-q4_k_m.gguf
Q27=/dev/shm/qwen35-27b-q4_k_m.gguf
("$BIN/harness" synth --arch qwen3 --preset qwen3-8b --quant q4_k_m --fast-random --out "$Q8B" \
    && "$BIN/harness" synth --arch qwen35 --preset qwen35-27b --quant q4_k_m --fast-random \
        --out "$Q27") > "$LOGS/synth.log" 2>&1 &
SYNTH=$!

suite() { # suite NAME [env...]: one carried test file, its summary lines printed
    local t=$1 threads=()
    shift
    # Model suites one test at a time (several engines' devices at once have crashed the driver).
    case $t in model_*) threads=(--test-threads=1) ;; esac
    echo "== $t $* (at ${SECONDS}s)"
    env "$@" timeout 120 "$BIN/$t" --skip llama_cpp --skip mlx_lm "${threads[@]}" > "$LOGS/$t.log" 2>&1
    echo "exit $?"
    grep -E "^test .*(FAILED|ok)$|test result|panicked|SKIPPED" "$LOGS/$t.log" | grep -vE "\.\.\. ok$" \
        | cut -c1-240 | head -20
}
# SUITES=0: benches only (the suites passed on this build before: 2026-12-05 #7 call 1).
if [ "${SUITES:-1}" != 0 ]; then
    suite gpu_gated_delta
    suite gpu_attn_prefill
    suite model_qwen35 FAK_GDN_CHUNK=coop+quads+fused+columns FAK_ATTN_SPLIT=never
    (cd "$LOGS" && tar czf "$OUT/tests.tgz" ./*.log)
fi

wait "$SYNTH" || { tail -3 "$LOGS/synth.log"; kill $CLOCKS; exit 1; }
BUDGET_S=${BUDGET_S:-285}
bench() { # bench MODEL LABEL [VAR=value...]: one harness bench, unless the budget is spent
    local model=$1 label=$2
    shift 2
    # ARMS="27b-default+27b-all…" (or spaces): only the labels named (a short call's subset).
    [ -n "${ARMS:-}" ] && [[ " ${ARMS//+/ } " != *" $label "* ]] && return
    # A 27B bench takes ~35 s, an 8B one ~15 s.
    local need=20
    [ "$model" = "$Q27" ] && need=40
    if [ $((SECONDS + need)) -gt "$BUDGET_S" ]; then
        echo "== $label $* SKIPPED (at ${SECONDS}s, budget ${BUDGET_S}s)" | tee -a "$OUT/bench.log"
        return
    fi
    echo "== $label $* (at ${SECONDS}s)" >> "$OUT/bench.log"
    env "$@" timeout 80 "$BIN/harness" bench --model "$model" --depths 128,2048 --n-out 8 \
        --profile-steps 1 --suffix 0 --probe-mib 256 --json-out "/tmp/bench-json/$label.json" \
        > /tmp/bench.log 2>&1
    echo "rc=$?" >> "$OUT/bench.log"
    grep -E "^depth [0-9]+ prefill:| attention | gated_delta |panicked|rror" /tmp/bench.log \
        | cut -c1-200 >> "$OUT/bench.log"
    (cd /tmp/bench-json && tar czf "$OUT/bench-json.tgz" ./*.json)
}
bench "$Q8B" 8b-default
bench "$Q27" 27b-default
bench "$Q27" 27b-all FAK_GDN_CHUNK=coop+quads+fused+columns
bench "$Q8B" 8b-64x64qi FAK_ATTN_PREFILL=64x64qi
# Every attention tile (the qi twins included) × the unsplit and the engine's split rule, per
# dispatch at the 8B's four 512-token chunks and the 27B's cached step, each output checked
# against the f32-tile kernel's (when carried: MATMUL_BENCH=1 in the prepare; ≤ 45 s).
if [ -x "$BIN/matmul-bench" ] && [ $((SECONDS + 45)) -le "$BUDGET_S" ]; then
    echo "== matmul-bench --attn (at ${SECONDS}s)"
    ATTN_SPLITS=auto timeout 45 "$BIN/matmul-bench" --attn > "$OUT/attn-bench.tsv" 2> /tmp/attn-bench.err
    echo "exit $?"
    tail -2 /tmp/attn-bench.err
fi
bench "$Q27" 27b-quads FAK_GDN_CHUNK=coop+quads
bench "$Q8B" 8b-split-never FAK_ATTN_SPLIT=never
# The staged attention, the default before the flash form (2026-12-06 #9).
bench "$Q8B" 8b-staged FAK_ATTN_PREFILL=coop
bench "$Q27" 27b-fused FAK_GDN_CHUNK=coop+fused
bench "$Q27" 27b-columns FAK_GDN_CHUNK=coop+columns
bench "$Q8B" 8b-split-more FAK_ATTN_SPLIT=fill:8192:256
bench "$Q8B" 8b-64x32 FAK_ATTN_PREFILL=64x32
# q6mm's split rule (2026-12-06 #8: 8B 6886 → 7438 tok/s at 2048 on an H100; the 27B untimed).
bench "$Q27" 27b-split FAK_MATMUL_SPLIT=waves:132
bench "$Q8B" 8b-split FAK_MATMUL_SPLIT=waves:132
bench "$Q8B" 8b-default-2
bench "$Q27" 27b-default-2
kill $CLOCKS
grep -E "^==|^rc=|^depth [0-9]+ prefill:| attention | gated_delta " "$OUT/bench.log" | cut -c1-160
echo "== done at ${SECONDS}s"
