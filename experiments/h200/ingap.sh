#!/usr/bin/env bash
# One device call (an H100 or H200, ~180 s wall at the defaults, ≤ 200 s through
# `multi.sh ingap:200`; no llama.cpp): where the Qwen3.5-27B's one-sequence decode token goes,
# UNPROFILED (experiments/NOTES.md, "ingap"; issue 18). A profile's per-op timestamps inflate the
# token (14.7 ms profiled against 11.0 timed) and nobody knows the unprofiled split, nor why the
# gate/up product costs ~70 µs a layer in the profile against 43.6 isolated (matvec-bench).
# `harness bench --probe` (FAK_DECODE_PROBE, `fak::gpu::profile::DecodeProbe`: a measurement,
# not a form) decodes the depth's tokens under probes — an op class recorded twice in every
# layer (`ffn_gate_up*2`) or left out (`ffn_norm*0`) — interleaved with the default over
# PROBE_ROUNDS rounds on one loaded model; Δµs a token is that op's unprofiled cost in its
# place. A probe that keeps the default's bits (repeats of ops that only overwrite their
# outputs) must decode the default's tokens, or the bench fails before it reports.
# And one opt-in form, FAK_MATVEC_OWN_OUT=1 (the same bits): each mat-vec binding without a
# quantized output gets its own yq/yd placeholder, so wgpu no longer puts a barrier between two
# products that share nothing but the placeholder (a GDN layer's qkv and z,β,α runs, an
# attention layer's q,k and v runs: 32 a token on the 27B).
# In order of what the call must not lose:
#   1. tests on NVIDIA → tests.log: model_qwen35's probe test (bits, dispatch counts, the prompt
#      step unprobed; integer path), harness_bench's `--probe` report test, and model_qwen35's
#      integer-path tests with and without FAK_MATVEC_OWN_OUT=1 (their printed fingerprints
#      must match: "own-out: the default's fingerprints");
#   2. the sweep on the 27B synth at depth 128 (PROBES below, 48 tokens out, PROBE_ROUNDS 2)
#      → probe.log (the probe table and the default's profile rows), probe-json.tgz;
#   3. `harness bench` default vs FAK_MATVEC_OWN_OUT=1 at depth 128, 64 tokens, AB_ROUNDS (2)
#      interleaved, as many as BUDGET_S holds (abbench.sh) → bench.log (with the gdn_qkv,
#      gdn_zba, attn_qk, attn_v rows), bench-json.tgz;
#   4. if carried (MATVEC_BENCH=1) and BUDGET_S allows, matvec-bench on the 27B's gate/up and
#      ffn_down: alone, with the q8 output, and behind their quantize dispatch → matvec.tsv;
#   5. if BUDGET_S allows, the sweep again with the probes in reverse order (an order effect
#      shows as a different Δ for the same probe) → probe.log, probe-json.tgz.
# SM clocks every 100 ms → clocks.csv (issue 18: clocks logged). Prepare (here, release build):
#   MATVEC_BENCH=1 RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh \
#       model_qwen35 harness_bench
# staged as target/<dir>; run `bash experiments/h200/multi.sh ingap:200` with carry
# ["target/<dir>"]; with more seconds (e.g. `ingap:280:BUDGET_S=270`) parts 4 and 5 run too.
# Files back: tests.log, probe.log, bench.log, matvec.tsv, probe-json.tgz, bench-json.tgz,
# clocks.csv, gpu.csv.
# A dry run elsewhere: PRESET=tiny DEPTH=20 NOUT=4 (with FAK_TMP, FAK_LOADER, FAK_VK_ICD, OUT).
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
start=$SECONDS
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu \
    --format=csv -lms 100 > "$OUT/clocks.csv" 2>&1 &
CLOCKS=$!
preset=${PRESET:-qwen35-27b}
model=/dev/shm/$preset-q4_k_m.gguf
( [ -s "$model" ] || "$BIN/harness" synth --arch qwen35 --preset "$preset" --quant q4_k_m \
    --seed 0 --fast-random --out "$model" ) > /tmp/synth.log 2>&1 &
SYNTH=$!

# 1. Tests (the group binaries; prepare.sh carries bin/model and bin/harness_cli): the probe's
# own, then the integer path's model tests with and without FAK_MATVEC_OWN_OUT=1 — on NVIDIA
# the pins are printed, not compared, so the two runs' printed fingerprints must be the same.
for t in "model model_qwen35::a_decode_probe" "harness_cli harness_bench::bench_probes"; do
    set -- $t
    [ -x "$BIN/$1" ] || { echo "== $1: not carried" >> "$OUT/tests.log"; continue; }
    echo "== $* (at $((SECONDS - start)) s)" >> "$OUT/tests.log"
    timeout 60 "$BIN/$1" "${@:2}" 2>&1 \
        | grep -E "^test |test result|panicked at|assertion|left|right|decode ops" \
        | head -30 >> "$OUT/tests.log"
done
pins() { # pins LABEL [env...]: model_qwen35's integer-path tests, their printed fingerprints
    local label=$1
    shift
    echo "== model_qwen35::int_dot_{logits,merge} $label $* (at $((SECONDS - start)) s)" \
        >> "$OUT/tests.log"
    env "$@" timeout 60 "$BIN/model" model_qwen35::int_dot_logits model_qwen35::int_dot_merge \
        --nocapture --test-threads=1 \
        > "/tmp/pins-$label.log" 2>&1
    grep -E "^test |test result|panicked at" "/tmp/pins-$label.log" >> "$OUT/tests.log"
    grep -E '^ +\("[^"]+", "[0-9a-f]{16}"\),$' "/tmp/pins-$label.log" > "/tmp/pins-$label.txt"
}
if [ -x "$BIN/model" ]; then
    pins default
    pins own FAK_MATVEC_OWN_OUT=1
    # (On lavapipe the tests compare the pins themselves and print nothing when they match.)
    if ! grep -q "test result: ok" /tmp/pins-own.log; then
        echo "== own-out: TESTS FAILED" >> "$OUT/tests.log"
    elif cmp -s /tmp/pins-default.txt /tmp/pins-own.txt; then
        echo "== own-out: the default's fingerprints ($(wc -l < /tmp/pins-own.txt) printed)" \
            >> "$OUT/tests.log"
    else
        echo "== own-out: FINGERPRINTS DIFFER" >> "$OUT/tests.log"
        diff /tmp/pins-default.txt /tmp/pins-own.txt >> "$OUT/tests.log"
    fi
fi
grep -E "^==|test result|FAILED|panicked|DIFFER" "$OUT/tests.log"
wait $SYNTH || { tail -3 /tmp/synth.log; exit 1; }

# 2. The sweep. Op names as the 27B's decode step notes them (27B: GDN layers' gdn_qkvzba, or
# gdn_qkv + gdn_zba where qkv is Q6_K; attention layers' attn_qk + attn_v or attn_qkv; a name
# the model lacks matches nothing). Single ops twice and left out, gate/up three times (is a
# copy's cost linear?), then two complements: the weight products alone (every other decode op
# left out), everything but the products, and every product twice.
PRODUCTS="gdn_qkvzba gdn_qkv gdn_zba gdn_out ffn_gate_up ffn_down attn_qkv attn_qk attn_v attn_output output"
OTHERS="attn_norm ffn_norm gdn_decode attention output_norm argmax"
join() { local n=$1; shift; local s=; for o in "$@"; do s=$s${s:+,}$o*$n; done; echo "$s"; }
PROBES=(
    "ffn_gate_up*2" "ffn_gate_up*3" "ffn_gate_up*0"
    "ffn_norm*2" "ffn_norm*0" "attn_norm*2" "attn_norm*0"
    "ffn_down*2" "ffn_down*0"
    "gdn_qkvzba*2" "gdn_qkv*2" "gdn_zba*2" "gdn_out*2" "gdn_decode*2" "gdn_decode*0"
    "attention*2" "attn_qk*2,attn_v*2,attn_qkv*2" "attn_output*2" "output*2"
    "ffn_norm*0,ffn_gate_up*2"
    "$(join 0 $OTHERS)"
    "$(join 0 $PRODUCTS)"
    "$(join 2 $PRODUCTS)"
)
sweep() { # sweep LABEL PROBE...: one `harness bench` with the probes, at DEPTH
    local label=$1
    shift
    local args=()
    for p in "$@"; do args+=(--probe "$p"); done
    echo "== $label (at $((SECONDS - start)) s)" >> "$OUT/probe.log"
    timeout "${SWEEP_S:-110}" "$BIN/harness" bench --model "$model" --depths "${DEPTH:-128}" \
        --n-out "${SWEEP_NOUT:-${NOUT:-48}}" --profile-steps 3 --suffix 0 --probe-mib 256 \
        --probe-rounds "${PROBE_ROUNDS:-2}" "${args[@]}" \
        --json-out "/tmp/probe-json/$label.json" > /tmp/probe.log 2>&1
    echo "rc=$?" >> "$OUT/probe.log"
    grep -vE "^depth [0-9]+ (prefill|\+)|^  .* (matmul|attn_prefill|gated_delta_chunk|ssm_conv)" \
        /tmp/probe.log | cut -c1-300 >> "$OUT/probe.log"
    (cd /tmp/probe-json && tar czf "$OUT/probe-json.tgz" ./*.json)
}
mkdir -p /tmp/probe-json
sweep forward "${PROBES[@]}"
kill $CLOCKS 2>/dev/null || true

# 3. The one form: FAK_MATVEC_OWN_OUT=1 against the default, `harness bench` at depth 128,
# interleaved (abbench.sh: its own clocks into clocks.csv; bench.log, bench-json.tgz).
# As many rounds (≤ AB_ROUNDS, 2) as the budget holds at AB_EST_S (22 s) a bench.
ab_rounds=$(((${BUDGET_S:-190} - (SECONDS - start)) / (2 * ${AB_EST_S:-22})))
[ "$ab_rounds" -le "${AB_ROUNDS:-2}" ] || ab_rounds=${AB_ROUNDS:-2}
if [ "$ab_rounds" -ge 1 ]; then
    ROUNDS=$ab_rounds EST_S=${AB_EST_S:-22} BUDGET_S=$((${BUDGET_S:-190} - (SECONDS - start))) \
        ROWS="  (gdn_qkv|gdn_zba|gdn_qkvzba|attn_qk|attn_v|attn_qkv) " PRESET=$preset \
        bash experiments/h200/abbench.sh 27b "${DEPTH:-128}" "${NOUT:-64}" default \
        own=FAK_MATVEC_OWN_OUT=1 > /dev/null
else
    echo "== own-out A/B SKIPPED (at $((SECONDS - start)) s)" >> "$OUT/bench.log"
fi
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu \
    --format=csv,noheader -lms 100 >> "$OUT/clocks.csv" 2>&1 &
CLOCKS=$!

# 4. The isolated side of the same question (matvec-bench, when carried: MATVEC_BENCH=1):
# the 27B's gate/up and ffn_down alone (q8), gate/up writing its q8 output (q8+q8out, the
# engine's), and each behind its quantize dispatch (q8+quantize: the producer and its boundary
# before every copy), each checked against the CPU before it is timed.
if [ -x "$BIN/matvec-bench" ] && [ $((SECONDS - start + ${MVB_S:-45})) -le "${BUDGET_S:-190}" ]; then
    echo "== matvec-bench (at $((SECONDS - start)) s)" >> "$OUT/probe.log"
    timeout "${MVB_S:-45}" "$BIN/matvec-bench" --paths q8 --reps 5 --batches 1 \
        --products 27b_ffn_gate_up,27b_ffn_down --layouts 256/16/1/batched,256/4/1/batched \
        ${MVB_ARGS:-} > "$OUT/matvec.tsv" 2>&1
    echo "rc=$?" >> "$OUT/probe.log"
    grep -vE "^#" "$OUT/matvec.tsv" | cut -f1-9,11 >> "$OUT/probe.log"
else
    echo "== matvec-bench: not carried or SKIPPED (at $((SECONDS - start)) s)" >> "$OUT/probe.log"
fi

# 5. If the budget allows, the sweep again in reverse order.
reversed=()
for ((i = ${#PROBES[@]} - 1; i >= 0; i--)); do reversed+=("${PROBES[$i]}"); done
if [ $((SECONDS - start + ${EST_S:-70})) -le "${BUDGET_S:-190}" ]; then
    sweep reversed "${reversed[@]}"
else
    echo "== reversed SKIPPED (at $((SECONDS - start)) s)" >> "$OUT/probe.log"
fi
grep -E "^==|^rc=|^depth [0-9]+( decode probes|:)|^ +[0-9]+ +-?[0-9]+ +[0-9.]+ " "$OUT/probe.log" \
    | cut -c1-300
grep -E "^==|^depth [0-9]+:" "$OUT/bench.log" 2>/dev/null | cut -c1-160
kill $CLOCKS 2>/dev/null || true
