#!/usr/bin/env bash
# One device call (an H100 or H200, ≤ 120 s wall; no llama.cpp): the chunked delta rule's new
# default — helper gdnflip (2026-12-07 #16; experiments/NOTES.md "gdnflip"). The default flipped
# from coop+quads+fused+lean+blocks (OLD, now by name only) to
# coop+quads+fused+lean+splitk+blocks (the split scan, chunk_scan_split), after both scans'
# shared setup, chunk head and end, V' quads and fragment loads were folded into WGSL helpers
# (the same operations in the same order: each form's bits as before the fold).
# In order of what the call must not lose:
#   1. the tests on NVIDIA's coop paths → tests.log: gpu_gated_delta (every chunked test on every
#      form of both kernels against the f64 reference — the folded chunk_scan and
#      chunk_scan_split among them; `every_form_computes_its_kernels_default_bits`: every form
#      that keeps the plain form's bits against it, the two split forms against each other; the
#      poisoned-scratch test on every form; the workgroup-memory count; the dk = 256 refusal of
#      the split forms and the default's host-side fall back to OLD there), then model_qwen35's
#      prefill tests with FAK_GDN_CHUNK unset (the new default: every step shape, a prefill split
#      over steps, prefill then decode, the memory plan).
#   2. `harness bench --depths 128,2048 --n-out 8 --profile-steps 1` on the Qwen3.5-27B synth
#      (Q4_K_M; the 2048-token prompt is one prefill step): OLD (named) and NEW (FAK_GDN_CHUNK
#      unset: what the flip gives) interleaved ROUNDS (2) times while BUDGET_S (110 s) allows →
#      bench.log (each run's prefill lines and its gated_delta row; per-op µs in
#      bench-json.tgz) and summary.tsv (arm, depth, the op's ms, its share, µs a layer, and NEW's
#      ratio to OLD's of the same round).
#   3. if the budget allows, one more NEW bench with FAK_GDN_PROFILE=entries: chunk_prepare timed
#      as its own op (gated_delta_prepare) and the scan as gated_delta — the two dispatches'
#      split measured, not inferred from t128 − t64 (summary.tsv's prepare_ms, scan_us_a_chunk).
# A bench is skipped (logged SKIPPED) when it would pass BUDGET_S (110 s from the start).
# A dry run elsewhere: PRESET=tiny DEPTHS=64,128 LAYERS=<the preset's GDN layers> MODEL_LIMIT_S=120
# (the four model tests take ~36 s on lavapipe, ~3 s on an H100).
# SM clocks every 500 ms → clocks.csv. Prepare (release binaries; the gpu and model groups):
#   RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh gpu_gated_delta model_qwen35
# staged as target/<dir>/{experiments/h200/*.sh, target/h200/{bin.txz,gl,built-at,commit}}, run
# `cd target/<dir> && bash experiments/h200/gdnflip.sh` (or through multi.sh: `gdnflip:120`),
# carry ["target/<dir>"]. Files back: tests.log, bench.log, summary.tsv, bench-json.tgz,
# clocks.csv, gpu.csv.
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
OLD=coop+quads+fused+lean+blocks
unset FAK_GDN_CHUNK

# The group binaries (prepare.sh carries bin/gpu and bin/model), so that a filter picks tests.
PREFILL_TESTS="model_qwen35::f32_logits_match_the_cpu_reference_on_the_subgroup
    model_qwen35::a_prefill_split model_qwen35::prefill_then_decode model_qwen35::the_plan_sizes"
for t in "gpu gpu_gated_delta::" "model $PREFILL_TESTS --test-threads=1"; do
    set -- $t
    limit=40
    [ "$1" = model ] && limit=${MODEL_LIMIT_S:-40}
    echo "== $* (at ${SECONDS}s)" >> "$OUT/tests.log"
    timeout "$limit" "$BIN/$1" --skip llama_cpp --skip mlx_lm "${@:2}" 2>&1 \
        | grep -E "^test |test result|panicked at|SKIPPED|differ|vs |outside|failed" \
        | cut -c1-240 | head -80 >> "$OUT/tests.log"
done
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"
wait $SYNTH || { tail -3 /tmp/synth.log; kill $CLOCKS; exit 1; }
mkdir -p /tmp/bench-json
BUDGET_S=${BUDGET_S:-110}

bench() { # bench LABEL [env...]: one 27B `harness bench`, unless the budget is spent
    local label=$1
    shift
    # A 27B bench at 64,128,2048 took 20 s (session #16 call 1); at 128,2048 a little less.
    if [ $((SECONDS + 22)) -gt "$BUDGET_S" ]; then
        echo "== $label $* SKIPPED (at ${SECONDS}s, budget ${BUDGET_S}s)" | tee -a "$OUT/bench.log"
        return
    fi
    echo "== $label $* (at ${SECONDS}s)" >> "$OUT/bench.log"
    env "$@" timeout 40 "$BIN/harness" bench --model "$Q27" --depths "${DEPTHS:-128,2048}" \
        --n-out 8 --profile-steps 1 --suffix 0 --probe-mib 256 \
        --json-out "/tmp/bench-json/$label.json" > /tmp/bench.log 2>&1
    echo "rc=$?" >> "$OUT/bench.log"
    grep -E "^depth [0-9]+ prefill:| gated_delta(_prepare)? |panicked|rror" /tmp/bench.log \
        | cut -c1-200 >> "$OUT/bench.log"
    (cd /tmp/bench-json && tar czf "$OUT/bench-json.tgz" ./*.json)
}
for round in $(seq "${ROUNDS:-2}"); do
    bench "27b-old-$round" FAK_GDN_CHUNK=$OLD
    bench "27b-new-$round"
done
bench 27b-entries FAK_GDN_PROFILE=entries
kill $CLOCKS

# summary.tsv: one line per arm and depth — the gated_delta row's µs (7th field), share (8th);
# µs a layer (LAYERS GDN layers); NEW's ratio to OLD's of the same round and depth; for the
# entries arm the prepare row's ms and the scan's µs a chunk a layer (its gated_delta row alone
# is the scan: 2 chunks of 64 rows at 128 tokens, 32 at 2048).
awk -v layers="${LAYERS:-48}" '
    /^== / { arm = $2; next }
    /^depth [0-9]+ prefill:/ { depth = $2; next }
    / gated_delta_prepare / && arm != "" { prep[arm, depth] = $7; next }
    / gated_delta / && arm != "" {
        us[arm, depth] = $7; share[arm, depth] = $8
        if (!(arm in seen)) { seen[arm] = 1; order[++n] = arm }
        if (!(depth in seen_d)) { seen_d[depth] = 1; depths[++nd] = depth }
    }
    END {
        print "arm\tdepth\tgated_delta_ms\tshare_pct\tper_layer_us\tnew_over_old\tprepare_ms\tscan_us_a_chunk"
        for (i = 1; i <= n; i++) {
            a = order[i]
            old = a; sub(/-new-/, "-old-", old)
            for (j = 1; j <= nd; j++) {
                d = depths[j]
                if (!((a, d) in us)) continue
                ratio = ""; p = ""; c = ""
                if (a ~ /-new-/ && (old, d) in us) ratio = sprintf("%.3f", us[a, d] / us[old, d])
                if ((a, d) in prep) {
                    p = sprintf("%.2f", prep[a, d] / 1000)
                    c = sprintf("%.1f", us[a, d] / layers / int((d + 63) / 64))
                }
                printf "%s\t%d\t%.2f\t%s\t%.1f\t%s\t%s\t%s\n", a, d, us[a, d] / 1000, share[a, d], us[a, d] / layers, ratio, p, c
            }
        }
    }' "$OUT/bench.log" > "$OUT/summary.tsv"
grep -E "^==|^rc=|^depth [0-9]+ prefill:| gated_delta(_prepare)? " "$OUT/bench.log" | cut -c1-160
column -t -s "$(printf '\t')" "$OUT/summary.tsv"
echo "== done at ${SECONDS}s"
