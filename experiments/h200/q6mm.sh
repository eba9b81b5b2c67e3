#!/usr/bin/env bash
# One device call (an H100 or H200, ≤ 200 s wall; no llama.cpp), or one part of multi.sh
# (`multi.sh q6mm:200`): issue 19's slow weight products (experiments/NOTES.md, "q6mm") in the
# mat-mul's forms, checked, then timed in the model:
#   FAK_MATMUL_TILING=x16-128x128-k64-1st        "old": Q6_K through dequant4 as it loads (the
#                                                 default until 2026-12-05 #7, which made the
#                                                 Q6_K raw-word path `-rawq6` the default from
#                                                 the H200 sweep of 2026-12-05 alone)
#   FAK_MATMUL_SPLIT=waves:132                    "split": split K across workgroups only where
#                                                 the slices fill 132-workgroup waves better
# All compute the default's bits (the gpu_matmul tests below check it).
#   1. gpu_matmul (every coop kernel against the CPU; the raw path bit for bit against its twin;
#      every split rule bit for bit against the engine's), summary printed, log in tests.tgz.
#   2. matmul-bench --forms (when carried): x16 default / -rawq6 × below / waves:132, each
#      checked against the CPU, then every product of the 8B and 27B layer sets with its Q4_K_M
#      type at 128 and 512 tokens, two rounds; forms.tsv, its totals printed.
#   3. `harness bench --depths 128,2048 --n-out 8 --profile-steps 1` on the 8B and 27B synth
#      files, old, default and split interleaved: 8b-old, 8b-default, 27b-old, 27b-default,
#      8b-split, 27b-split, then while the budget (BUDGET_S, 190 s from the start) lasts
#      8b-old-2, 8b-default-2; bench.log keeps each run's prefill lines and its product rows;
#      bench-json.tgz.
# Prepare (here): MATMUL_BENCH=1 RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh \
#     gpu_matmul   (the lead's build of main: then `multi.sh q6mm:200 …`, carry ["target/h200"])
# Files back: tests.tgz, forms.tsv, bench.log, bench-json.tgz, clocks.csv, gpu.csv.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu \
    --format=csv -lms 500 > "$OUT/clocks.csv" 2>&1 &
CLOCKS=$!
LOGS=/tmp/q6mm-logs
mkdir -p "$LOGS" /tmp/q6mm-json
# A dry run elsewhere (lavapipe, setup.sh's FAK_TMP / FAK_LOADER / FAK_VK_ICD) names small
# presets, depths and synth flags: P8B=qwen3-0.6b P27B=mid DEPTHS=16,40 SHM=/tmp/q6mm-dry
# SYNTH_ARGS="--vocab cut" FORMS_ARGS=--quick BENCH_TIMEOUT=600 PROBE_MIB=16.
P8B=${P8B:-qwen3-8b}
P27B=${P27B:-qwen35-27b}
SHM=${SHM:-/dev/shm}
Q8B=$SHM/qwen3-${P8B#qwen3-}-q4_k_m.gguf
Q27=$SHM/qwen35-${P27B#qwen35-}-q4_k_m.gguf
read -ra SYNTH_ARGS <<< "${SYNTH_ARGS:-}"
# prefill-sweep.sh's files (deterministic: the same bytes in every call); 8B ~3 s, 27B ~14 s.
mkdir -p "$SHM"
("$BIN/harness" synth --arch qwen3 --preset "$P8B" --quant q4_k_m --fast-random --out "$Q8B" \
    "${SYNTH_ARGS[@]}" && "$BIN/harness" synth --arch qwen35 --preset "$P27B" --quant q4_k_m \
    --fast-random --out "$Q27" "${SYNTH_ARGS[@]}") > "$LOGS/synth.log" 2>&1 &
SYNTH=$!

echo "== gpu_matmul (at ${SECONDS}s)"
timeout 60 "$BIN/gpu_matmul" > "$LOGS/gpu_matmul.log" 2>&1
echo "exit $?"
grep -E "^test .*(FAILED|ok)$|test result|panicked|SKIPPED" "$LOGS/gpu_matmul.log" \
    | grep -vE "\.\.\. ok$" | cut -c1-240 | head -20
(cd "$LOGS" && tar czf "$OUT/tests.tgz" ./*.log)

if [ -x "$BIN/matmul-bench" ]; then
    echo "== matmul-bench --forms (at ${SECONDS}s)"
    # shellcheck disable=SC2086 # FORMS_ARGS: flags, word-split on purpose
    MATMUL_WAVES=132 timeout 60 "$BIN/matmul-bench" --forms ${FORMS_ARGS:-} > "$OUT/forms.tsv" \
        2> "$LOGS/forms.err"
    echo "exit $?"
    grep -E "^check|^total" "$OUT/forms.tsv" | cut -c1-200
    tail -2 "$LOGS/forms.err"
fi

wait "$SYNTH" || { tail -3 "$LOGS/synth.log"; kill $CLOCKS; exit 1; }
BUDGET_S=${BUDGET_S:-190}
OLD=(FAK_MATMUL_TILING=x16-128x128-k64-1st)
SPLIT=(FAK_MATMUL_SPLIT=waves:132)
# The products' rows of a bench (ffn_down, attn_output, attn_v, gdn_qkv … by name).
PRODUCT_ROWS=" (attn_qkv|attn_qk|attn_v|attn_output|ffn_gate_up|ffn_down|gdn_qkv|gdn_zba|gdn_out|gdn_qkvzba) "
bench() { # bench MODEL LABEL [VAR=value...]: one harness bench, unless the budget is spent
    local model=$1 label=$2
    shift 2
    # A 27B bench takes ~32 s on an H100, an 8B one ~15 s (2026-12-05 #7 call 1).
    local need=18
    [ "$model" = "$Q27" ] && need=36
    if [ $((SECONDS + need)) -gt "$BUDGET_S" ]; then
        echo "== $label $* SKIPPED (at ${SECONDS}s, budget ${BUDGET_S}s)" | tee -a "$OUT/bench.log"
        return
    fi
    echo "== $label $* (at ${SECONDS}s)" | tee -a "$OUT/bench.log"
    env "$@" timeout "${BENCH_TIMEOUT:-60}" "$BIN/harness" bench --model "$model" \
        --depths "${DEPTHS:-128,2048}" --n-out 8 --profile-steps 1 --suffix 0 \
        --probe-mib "${PROBE_MIB:-256}" --json-out "/tmp/q6mm-json/$label.json" \
        > /tmp/q6mm-bench.log 2>&1
    echo "rc=$?" >> "$OUT/bench.log"
    grep -E "^depth [0-9]+ prefill:|$PRODUCT_ROWS|panicked|rror" /tmp/q6mm-bench.log \
        | grep -v " attn_decode\| matvec " | cut -c1-200 >> "$OUT/bench.log"
    grep -E "^depth [0-9]+ prefill:" /tmp/q6mm-bench.log | cut -c1-120
    ls /tmp/q6mm-json/*.json > /dev/null 2>&1 \
        && (cd /tmp/q6mm-json && tar czf "$OUT/bench-json.tgz" ./*.json)
}
bench "$Q8B" 8b-old "${OLD[@]}"
bench "$Q8B" 8b-default
bench "$Q27" 27b-old "${OLD[@]}"
bench "$Q27" 27b-default
bench "$Q8B" 8b-split "${SPLIT[@]}"
bench "$Q27" 27b-split "${SPLIT[@]}"
bench "$Q8B" 8b-old-2 "${OLD[@]}"
bench "$Q8B" 8b-default-2
kill $CLOCKS
echo "== done at ${SECONDS}s"
