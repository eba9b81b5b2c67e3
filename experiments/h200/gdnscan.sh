#!/usr/bin/env bash
# One device call (an H100 or H200, ≤ 200 s wall; no llama.cpp): issue 19's chunked delta rule
# in the forms of helper gdnscan (2026-12-06 #9; experiments/NOTES.md "gdnscan"), opt-in as
# FAK_GDN_CHUNK=coop+quads+fused+lean+blocks against the default coop+quads+fused+columns:
#   blocks — chunk_prepare's inverse T = (I + A)⁻¹ by block rows: its longest chain of dependent
#            fmas on one invocation 479 instead of 1953 (the same fmas in the same order);
#   lean   — chunk_scan loads U before W·S and decays S on the update's accumulators: one
#            barrier and one L2 round trip less on each chunk's chain (the same values).
# Both compute the default's bits; blocks acts on chunk_prepare alone, lean on chunk_scan alone,
# so the depth-64 split below says which part of a difference is whose.
# In order of what the call must not lose:
#   1. the tests on NVIDIA's coop paths → tests.log: gpu_gated_delta (every chunked test on every
#      form of both kernels against the f64 reference — the coop blocks and lean forms — and
#      `every_form_computes_its_kernels_default_bits`: each form's o and states equal its
#      kernel's plain form bit for bit), then model_qwen35's prefill tests with the new form
#      (FAK_GDN_CHUNK=coop+quads+fused+lean+blocks: the engine's path through the variable, the
#      plan).
#   2. `harness bench --depths 64,128,2048 --n-out 8 --profile-steps 1` on the Qwen3.5-27B synth,
#      default and the new form interleaved twice (ROUNDS), then, with time left, blocks without
#      lean once → bench.log (each run's prefill lines and its gated_delta row; per-op µs of
#      every depth in bench-json.tgz). Depth 64 splits the op: at 64 and 128 tokens
#      chunk_prepare is one wave (48 and 96 working workgroups for 132 SMs) and chunk_scan walks
#      1 and 2 chunks, so scan µs per chunk c = t128 − t64 and prepare P = t64 − c (per layer:
#      the row's µs / 48).
# A bench is skipped (logged SKIPPED) when it would pass BUDGET_S (190 s from the start).
# A dry run elsewhere: PRESET=tiny DEPTHS=64,128 (the synth preset and the bench depths).
# SM clocks every 500 ms → clocks.csv. Prepare (release binaries; the gpu and model groups):
#   RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh gpu_gated_delta model_qwen35
# staged as target/<dir>/{experiments/h200/*.sh, target/h200/{bin.txz,gl,built-at,commit}}, run
# `cd target/<dir> && bash experiments/h200/gdnscan.sh` (or through multi.sh: `gdnscan:200`),
# carry ["target/<dir>"]. Files back: tests.log, bench.log, bench-json.tgz, clocks.csv, gpu.csv.
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
NEW=coop+quads+fused+lean+blocks

# The group binaries (prepare.sh carries bin/gpu and bin/model), so that a filter picks tests.
PREFILL_TESTS="model_qwen35::f32_logits_match_the_cpu_reference_on_the_subgroup
    model_qwen35::a_prefill_split model_qwen35::prefill_then_decode model_qwen35::the_plan_sizes"
for t in "gpu gpu_gated_delta::" "model $PREFILL_TESTS --test-threads=1"; do
    set -- $t
    env=()
    limit=80
    [ "$1" = model ] && env=(FAK_GDN_CHUNK=$NEW) && limit=60
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
    bench "27b-default-$round"
    bench "27b-new-$round" FAK_GDN_CHUNK=$NEW
done
bench "27b-blocks" FAK_GDN_CHUNK=coop+quads+fused+blocks
kill $CLOCKS
grep -E "^==|^rc=|^depth [0-9]+ prefill:| gated_delta " "$OUT/bench.log" | cut -c1-160
echo "== done at ${SECONDS}s"
