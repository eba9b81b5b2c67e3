#!/usr/bin/env bash
# One device call (an H100 or H200, ≤ 150 s wall; no llama.cpp): the chunked delta rule's prepare
# under its scan in one dispatch — helper gdnover (2026-12-07 #19; experiments/NOTES.md "gdnover",
# issue 19). Built on the f32 kernel (the coop kernel's two roles' workgroup memory, 81 KB, does
# not fit one entry point: NOTES), so the arms are the f32 kernel's:
#   F2   f32+blocks          chunk_prepare, then chunk_scan (two dispatches; the reference);
#   F1   f32+overlap+blocks  chunk_overlap: the scan's workgroups start at once, the items
#                            (chunk, head) prepared in chunk order by helper workgroups or by a
#                            scan workgroup whose next chunk is not yet handed out; the same bits;
#   DEF  the engine's default (coop, two dispatches), for scale only.
# In order of what the call must not lose:
#   1. the tests on NVIDIA → tests.log: gpu_gated_delta with FAK_GDN_CHUNK=F1 (the new test holds
#      F1 to F2's bits on ragged batches with leads, a mid-step snapshot and three dispatches in
#      one pass; every chunked test runs F1 as one of the f32 forms, dk = 128 included — it fits
#      48 KiB; the GpuLayer::new tests build F1 through the variable), then model_qwen35's
#      prefill tests with FAK_GDN_CHUNK=F1.
#   2. `harness bench --depths 128,2048 --n-out 8 --profile-steps 1` on the Qwen3.5-27B synth
#      (Q4_K_M; the 2048-token prompt one prefill step): F2, F1, F2 with FAK_GDN_PROFILE=entries
#      (the f32 kernel's prepare and scan apart: what the overlap can hide), F2, F1, DEF while
#      BUDGET_S (145 s) allows → bench.log and summary.tsv (arm, depth, the op's ms, its share,
#      µs a layer, F1's ratio to F2 of the same round, the entries arm's prepare and scan ms).
# A bench is skipped (logged SKIPPED) when it would pass BUDGET_S (145 s from the start).
# A dry run elsewhere: PRESET=tiny DEPTHS=64,128 LAYERS=<the preset's GDN layers> MODEL_LIMIT_S=120.
# SM clocks every 500 ms → clocks.csv. Prepare (release binaries; the gpu and model groups):
#   RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh gpu_gated_delta model_qwen35
# staged as target/<dir>/{experiments/h200/*.sh, target/h200/{bin.txz,gl,built-at,commit}}, run
# `cd target/<dir> && bash experiments/h200/gdnover.sh` (or through multi.sh: `gdnover:150`),
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
F2=f32+blocks
F1=f32+overlap+blocks
unset FAK_GDN_CHUNK FAK_GDN_PROFILE

# The group binaries (prepare.sh carries bin/gpu and bin/model), so that a filter picks tests.
PREFILL_TESTS="model_qwen35::f32_logits_match_the_cpu_reference_on_the_subgroup
    model_qwen35::a_prefill_split model_qwen35::prefill_then_decode model_qwen35::the_plan_sizes"
for t in "gpu gpu_gated_delta::" "model $PREFILL_TESTS --test-threads=1"; do
    set -- $t
    limit=40
    [ "$1" = model ] && limit=${MODEL_LIMIT_S:-40}
    echo "== $* (at ${SECONDS}s)" >> "$OUT/tests.log"
    env FAK_GDN_CHUNK=$F1 timeout "$limit" "$BIN/$1" --skip llama_cpp --skip mlx_lm "${@:2}" 2>&1 \
        | grep -E "^test |test result|panicked at|SKIPPED|differ|vs |outside|failed" \
        | cut -c1-240 | head -80 >> "$OUT/tests.log"
done
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"
wait $SYNTH || { tail -3 /tmp/synth.log; kill $CLOCKS; exit 1; }
mkdir -p /tmp/bench-json
BUDGET_S=${BUDGET_S:-145}

bench() { # bench LABEL [env...]: one 27B `harness bench`, unless the budget is spent
    local label=$1
    shift
    # A 27B bench at 128,2048 took ~17 s on the coop kernel (#18); the f32 kernel's delta rule
    # is slower (its 2048-token step several times the coop one's), hence 24 s.
    if [ $((SECONDS + 24)) -gt "$BUDGET_S" ]; then
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
bench 27b-f2-1 FAK_GDN_CHUNK=$F2
bench 27b-f1-1 FAK_GDN_CHUNK=$F1
bench 27b-f2-entries FAK_GDN_CHUNK=$F2 FAK_GDN_PROFILE=entries
bench 27b-f2-2 FAK_GDN_CHUNK=$F2
bench 27b-f1-2 FAK_GDN_CHUNK=$F1
# DEF runs with FAK_GDN_CHUNK unset (what the engine builds by default).
bench 27b-def-1
kill $CLOCKS

# summary.tsv: one line per arm and depth — the gated_delta row's µs (7th field), share (8th);
# µs a layer (LAYERS GDN layers); F1's ratio to F2's of the same round (-1, -2) and depth; for
# the entries arm the prepare row's ms and the scan's (its gated_delta row alone is the scan; no
# share: the profile splits the op).
awk -v layers="${LAYERS:-48}" '
    /^== / { arm = $2; next }
    /^depth [0-9]+ prefill:/ { depth = $2; next }
    / gated_delta_prepare / && arm != "" { prep[arm, depth] = $7; next }
    / gated_delta / && arm != "" {
        us[arm, depth] = $7; share[arm, depth] = $8
        if (!(arm in seen)) { seen[arm] = 1; order[++n] = arm }
        if (!(depth in seen_d)) { seen_d[depth] = 1; depths[++nd] = depth }
    }
    # The op: the gated_delta row, and the prepare row where the profile split it. (`in` before
    # reading: reading prep[a, d] would create it.)
    function op_us(a, d) { return us[a, d] + (((a, d) in prep) ? prep[a, d] : 0) }
    END {
        print "arm\tdepth\tgated_delta_ms\tshare_pct\tper_layer_us\tover_f2\tprepare_ms\tscan_ms"
        for (i = 1; i <= n; i++) {
            a = order[i]
            def = a; sub(/-f1-/, "-f2-", def)
            for (j = 1; j <= nd; j++) {
                d = depths[j]
                if (!((a, d) in us)) continue
                total = op_us(a, d)
                ratio = ""; p = ""; c = ""
                if (a != def && (def, d) in us) ratio = sprintf("%.3f", total / op_us(def, d))
                sh = share[a, d]
                if ((a, d) in prep) { p = sprintf("%.2f", prep[a, d] / 1000); c = sprintf("%.2f", us[a, d] / 1000); sh = "" }
                printf "%s\t%d\t%.2f\t%s\t%.1f\t%s\t%s\t%s\n", a, d, total / 1000, sh, total / layers, ratio, p, c
            }
        }
    }' "$OUT/bench.log" > "$OUT/summary.tsv"
grep -E "^==|^rc=|^depth [0-9]+ prefill:| gated_delta(_prepare)? " "$OUT/bench.log" | cut -c1-160
column -t -s "$(printf '\t')" "$OUT/summary.tsv"
echo "== done at ${SECONDS}s"
