#!/usr/bin/env bash
# One device call (an H100 or H200, ≤ 200 s wall; no llama.cpp): issue 19's chunked delta rule in
# the forms of helper gdnchunk2 (2026-12-06 #11; experiments/NOTES.md "gdnchunk2"), opt-in on top
# of the default coop+quads+fused+lean+blocks (named explicitly as BASE, so the call means the
# same before and after main's default flip):
#   pairs — chunk_scan loads the global fragments of two k-steps of W·S / Q̃·S (8) and of two
#           chunk steps of the state update (12) into named values before their MMAs (no
#           fragment arrays, nothing held across a barrier, half of deep's W·S registers): 4 + 2
#           dependent L2 round trips a chunk instead of 8 + 4 if the driver issues them one step
#           at a time;
#   lower — chunk_prepare's Gram phase computes the 10 tiles of K·Kᵀ and Q·Kᵀ on or below the
#           diagonal (+ 4 spare) as 3 tile products a subgroup instead of 4: 6 accumulators
#           instead of 8 at the kernel's register peak (two resident workgroups an SM, if that
#           is what holds it to one), 24 tile products instead of 32.
# Both compute the default's results (the same products in the same order; lower's upper tiles
# of a_sh hold other finite products, which P's mask zeroes as before); pairs acts on
# chunk_scan alone, lower on chunk_prepare alone, so the depth-64 split says whose a change is.
# In order of what the call must not lose:
#   1. the tests on NVIDIA's coop paths → tests.log: gpu_gated_delta (every chunked test on every
#      form of both kernels against the f64 reference — the three new forms among them — and
#      `every_form_computes_its_kernels_default_bits`: each form's o and states equal its kernel's
#      plain form bit for bit), then model_qwen35's prefill tests with both new forms on
#      (FAK_GDN_CHUNK=coop+quads+fused+lean+pairs+lower+blocks).
#   2. `harness bench --depths 64,128,2048 --n-out 8 --profile-steps 1` on the Qwen3.5-27B synth:
#      BASE and BOTH interleaved twice (ROUNDS), then with time left lower alone, pairs alone,
#      and (OLD=1, never timed alone) the old deep and ahead alone → bench.log (each run's
#      prefill lines and its gated_delta row; per-op µs of every depth in bench-json.tgz). Depth
#      64 splits the op: at 64 and 128 tokens chunk_prepare is one wave and chunk_scan walks 1
#      and 2 chunks, so scan µs a chunk c = t128 − t64 and P = t64 − c (per layer: the row's µs
#      / 48; at 2048 / 192 layer-steps of 8 chunks, prepare ≈ row/192 − 8c).
# A bench is skipped (logged SKIPPED) when it would pass BUDGET_S (190 s from the start).
# A dry run elsewhere: PRESET=tiny DEPTHS=64,128 (the synth preset and the bench depths).
# SM clocks every 500 ms → clocks.csv. Prepare (release binaries; the gpu and model groups):
#   RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh gpu_gated_delta model_qwen35
# staged as target/<dir>/{experiments/h200/*.sh, target/h200/{bin.txz,gl,built-at,commit}}, run
# `cd target/<dir> && bash experiments/h200/gdnchunk2.sh` (or through multi.sh: `gdnchunk2:200`;
# `gdnchunk2:320:BUDGET_S=310,OLD=1` adds the old arms), carry ["target/<dir>"]. Files back:
# tests.log, bench.log, bench-json.tgz, clocks.csv, gpu.csv.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu \
    --format=csv -lms 500 > "$OUT/clocks.csv" 2>&1 &
CLOCKS=$!
PRESET=${PRESET:-qwen35-27b}
Q27=/dev/shm/$PRESET-q4_k_m.gguf
"$BIN/harness" synth --arch qwen35 --preset "$PRESET" --quant q4_k_m --seed 0 --fast-random \
    --out "$Q27" > /tmp/synth.log 2>&1 &
SYNTH=$!
BASE=coop+quads+fused+lean+blocks
BOTH=coop+quads+fused+lean+pairs+lower+blocks

# The group binaries (prepare.sh carries bin/gpu and bin/model), so that a filter picks tests.
PREFILL_TESTS="model_qwen35::f32_logits_match_the_cpu_reference_on_the_subgroup
    model_qwen35::a_prefill_split model_qwen35::prefill_then_decode model_qwen35::the_plan_sizes"
for t in "gpu gpu_gated_delta::" "model $PREFILL_TESTS --test-threads=1"; do
    set -- $t
    env=()
    limit=80
    [ "$1" = model ] && env=(FAK_GDN_CHUNK=$BOTH) && limit=60
    echo "== ${env[*]} $* (at ${SECONDS}s)" >> "$OUT/tests.log"
    env "${env[@]}" timeout "$limit" "$BIN/$1" --skip llama_cpp --skip mlx_lm "${@:2}" 2>&1 \
        | grep -E "^test |test result|panicked at|SKIPPED|differ|vs " | cut -c1-240 \
        | head -60 >> "$OUT/tests.log"
done
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"
wait $SYNTH || { tail -3 /tmp/synth.log; kill $CLOCKS; exit 1; }
mkdir -p /tmp/bench-json
BUDGET_S=${BUDGET_S:-190}

bench() { # bench LABEL [env...]: one 27B `harness bench`, unless the budget is spent
    local label=$1
    shift
    # A 27B bench at these depths takes ~25–30 s.
    if [ $((SECONDS + 30)) -gt "$BUDGET_S" ]; then
        echo "== $label $* SKIPPED (at ${SECONDS}s, budget ${BUDGET_S}s)" | tee -a "$OUT/bench.log"
        return
    fi
    echo "== $label $* (at ${SECONDS}s)" >> "$OUT/bench.log"
    env "$@" timeout 60 "$BIN/harness" bench --model "$Q27" --depths "${DEPTHS:-64,128,2048}" \
        --n-out 8 --profile-steps 1 --suffix 0 --probe-mib 256 \
        --json-out "/tmp/bench-json/$label.json" > /tmp/bench.log 2>&1
    echo "rc=$?" >> "$OUT/bench.log"
    grep -E "^depth [0-9]+ prefill:| gated_delta |panicked|rror" /tmp/bench.log \
        | cut -c1-200 >> "$OUT/bench.log"
    (cd /tmp/bench-json && tar czf "$OUT/bench-json.tgz" ./*.json)
}
for round in $(seq "${ROUNDS:-2}"); do
    bench "27b-base-$round" FAK_GDN_CHUNK=$BASE
    bench "27b-both-$round" FAK_GDN_CHUNK=$BOTH
done
bench "27b-lower" FAK_GDN_CHUNK=coop+quads+fused+lean+lower+blocks
bench "27b-pairs" FAK_GDN_CHUNK=coop+quads+fused+lean+pairs+blocks
if [ "${OLD:-0}" = 1 ]; then
    bench "27b-deep" FAK_GDN_CHUNK=coop+quads+fused+lean+deep+blocks
    bench "27b-ahead" FAK_GDN_CHUNK=coop+quads+fused+lean+ahead+blocks
fi
kill $CLOCKS
grep -E "^==|^rc=|^depth [0-9]+ prefill:| gated_delta " "$OUT/bench.log" | cut -c1-160
echo "== done at ${SECONDS}s"
