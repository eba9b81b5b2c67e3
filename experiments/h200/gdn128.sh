#!/usr/bin/env bash
# One device call (an H100 or H200, ≤ 200 s wall; no llama.cpp): issue 19's chunked delta rule
# with chunk_scan on 8 subgroups — helper gdn128 (2026-12-06 #15; experiments/NOTES.md
# "gdn128"), opt-in on top of the default coop+quads+fused+lean+blocks (named explicitly as
# BASE, so the call means the same before and after a default flip):
#   splitk — the scan's entry chunk_scan_split: 256 invocations a workgroup for the same 16
#            state rows, each pair of subgroups splitting W·S's and Q̃·S's dk k-steps and P·V''s
#            chunk steps in halves, the state update one dk tile a subgroup: 24 + 18 MMAs a warp
#            a chunk instead of 48 + 36, 23 warps an SM instead of 11.6, the same 4 barriers.
#            A new sum order (each half joined, the halves added): held to the f64 reference and
#            the CPU layer, not to the default's bits;
#   unfused — the same with Q̃·S after V''s barrier instead of in W·S's loop (2 accumulators at
#            the W·S phase instead of 4: the hedge, should registers hold an SM to two of the
#            256-invocation workgroups — 264 of the grid's 384 resident, a second round for the
#            rest); the same sums as splitk, so its bits.
# In order of what the call must not lose:
#   1. the tests on NVIDIA's coop paths → tests.log: gpu_gated_delta (every chunked test on every
#      form of both kernels against the f64 reference, splitk among them;
#      `every_form_computes_its_kernels_default_bits` for the forms that keep the bits; the
#      poisoned-scratch test: a ragged batch and a lone sequence with the scratch NaN-filled
#      before each step, against the CPU layer, every form; the workgroup-memory count and the
#      dk = 256 refusal of splitk), then model_qwen35's prefill tests with FAK_GDN_CHUNK=$SPLIT
#      (every step shape, a prefill split over steps, prefill then decode, the memory plan).
#   2. `harness bench --depths 64,128,2048 --n-out 8 --profile-steps 1` on the Qwen3.5-27B synth
#      (Q4_K_M; the 2048-token prompt is one prefill step): BASE, SPLIT and UNFUSED interleaved
#      ROUNDS (2) times while BUDGET_S (190 s) allows → bench.log (each run's prefill lines
#      and its gated_delta row; per-op µs of every depth in bench-json.tgz) and summary.tsv (arm,
#      depth, the op's ms, its share, its dispatches, µs a layer, and the split: c = t128 − t64
#      the scan a chunk, P = t64 − c the prepare wave; at 2048 (one step of 32 chunks a layer)
#      scan = 32c and prepare = the rest).
# A bench is skipped (logged SKIPPED) when it would pass BUDGET_S (190 s from the start).
# A dry run elsewhere: PRESET=tiny DEPTHS=64,128 LAYERS=<the preset's GDN layers>.
# SM clocks every 500 ms → clocks.csv. Prepare (release binaries; the gpu and model groups):
#   RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh gpu_gated_delta model_qwen35
# staged as target/<dir>/{experiments/h200/*.sh, target/h200/{bin.txz,gl,built-at,commit}}, run
# `cd target/<dir> && bash experiments/h200/gdn128.sh` (or through multi.sh: `gdn128:200`),
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
BASE=coop+quads+fused+lean+blocks
SPLIT=coop+quads+fused+lean+splitk+blocks
UNFUSED=coop+quads+lean+splitk+blocks

# The group binaries (prepare.sh carries bin/gpu and bin/model), so that a filter picks tests.
PREFILL_TESTS="model_qwen35::f32_logits_match_the_cpu_reference_on_the_subgroup
    model_qwen35::a_prefill_split model_qwen35::prefill_then_decode model_qwen35::the_plan_sizes"
for t in "gpu gpu_gated_delta::" "model $PREFILL_TESTS --test-threads=1"; do
    set -- $t
    env=()
    limit=80
    [ "$1" = model ] && env=(FAK_GDN_CHUNK=$SPLIT) && limit=60
    echo "== ${env[*]} $* (at ${SECONDS}s)" >> "$OUT/tests.log"
    env "${env[@]}" timeout "$limit" "$BIN/$1" --skip llama_cpp --skip mlx_lm "${@:2}" 2>&1 \
        | grep -E "^test |test result|panicked at|SKIPPED|differ|vs |outside|failed" \
        | cut -c1-240 | head -80 >> "$OUT/tests.log"
done
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"
wait $SYNTH || { tail -3 /tmp/synth.log; kill $CLOCKS; exit 1; }
mkdir -p /tmp/bench-json
BUDGET_S=${BUDGET_S:-190}

bench() { # bench LABEL [env...]: one 27B `harness bench`, unless the budget is spent
    local label=$1
    shift
    # A 27B bench at these depths took 22–24 s (gdnchunk2's call, 512-token steps).
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
    bench "27b-splitk-$round" FAK_GDN_CHUNK=$SPLIT
    bench "27b-unfused-$round" FAK_GDN_CHUNK=$UNFUSED
done
kill $CLOCKS

# summary.tsv: one line per arm and depth — the gated_delta row's µs (7th field), share (8th),
# dispatches (4th); the layer split from depths 64 and 128 (LAYERS GDN layers, one step each:
# chunk_prepare one wave, chunk_scan 1 and 2 chunks) and at 2048 (one step of 32 chunks a layer).
awk -v layers="${LAYERS:-48}" '
    /^== / { arm = $2; next }
    /^depth [0-9]+ prefill:/ { depth = $2; next }
    / gated_delta / && arm != "" {
        us[arm, depth] = $7; share[arm, depth] = $8; disp[arm, depth] = $4
        if (!(arm in seen)) { seen[arm] = 1; order[++n] = arm }
    }
    END {
        print "arm\tdepth\tgated_delta_ms\tshare_pct\tdispatches\tper_layer_us\tsplit"
        for (i = 1; i <= n; i++) {
            a = order[i]
            t64 = us[a, 64] / layers; t128 = us[a, 128] / layers; c = t128 - t64; p = t64 - c
            for (d = 64; d <= 2048; d *= 2) {
                if (!((a, d) in us)) continue
                per = us[a, d] / layers
                note = ""
                if (d == 128 && (a, 64) in us) note = sprintf("c=%.1f P=%.1f", c, p)
                if (d == 2048 && (a, 64) in us) note = sprintf("prepare=%.1f scan=%.1f", per - 32 * c, 32 * c)
                printf "%s\t%d\t%.2f\t%s\t%s\t%.1f\t%s\n", a, d, us[a, d] / 1000, share[a, d], disp[a, d], per, note
            }
        }
    }' "$OUT/bench.log" > "$OUT/summary.tsv"
grep -E "^==|^rc=|^depth [0-9]+ prefill:| gated_delta " "$OUT/bench.log" | cut -c1-160
column -t -s "$(printf '\t')" "$OUT/summary.tsv"
echo "== done at ${SECONDS}s"
