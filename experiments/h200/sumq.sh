#!/usr/bin/env bash
# One device script (an H100 or the H200, ≤ 200 s wall, ~150–185 s expected; no llama.cpp;
# runnable alone or as `multi.sh sumq:200`): the batched mat-vec's block code sums of 2026-12-06
# #12 (sumq: FAK_MATVEC_SUMQ=1 — Q4_K's Σ qx of each x block written once by the vectors'
# producer, quantize_q8 or the gate/up pairing's quantized output, and read by every lane instead
# of 16 dot4I8Packed, 8 conversions and 6 adds per vector and unit; integer sums where the
# vectors hold none; the default's bits; experiments/NOTES.md, "sumq"). In order of what the
# call must not lose:
#   1. gpu_matvec under FAK_MATVEC_SUMQ=1: the form's test (quantize_q8's code sums against its
#      codes; the batched and split forms against the CPU with poisoned outputs, batches 1, 2,
#      3, 8, accumulate, strided x, the MLP fusion; bit for bit the default at 1, 3, 8 on Q4_K
#      and Q6_K, sums held and not), a row's bits at every batch against the wide batch-1 bits
#      (with the engine's rule: MatVec::new reads the variable), the quantizing gate/up writing
#      quantize_q8's code sums; then the model int-dot pins (the engine's logits with the form on:
#      quantize_q8 and the pairing writing sums, ffn_down and the projections reading them) →
#      tests.log. NVIDIA's compiler is the one lavapipe cannot vouch for;
#   2. matvec-bench, integer path, 27B MLP products (gate/up Q4_K, down Q4_K and Q6_K) at 1, 4 and
#      8 vectors: the engine's layouts (256/4/1/batched, 256/16/1/batched, their split2) q8
#      against q8+sumq, median of 3, warmed → matvec-sumq.tsv (awk: µs default → sumq per
#      product, layout, batch);
#   3. `harness bench` on the Qwen3.5-27B Q4_K_M at depth 128, 8 sequences: the default and
#      FAK_MATVEC_SUMQ=1 interleaved, two rounds where they end inside the budget, each with the
#      batched step's op profile (`batched.ops`: the per-op µs of a step of 8) → sumq.log,
#      bench-json.tgz.
# Knobs: ROUNDS (2), BUDGET_S (190: no bench starts past BUDGET_S − 25 s), PRESET (qwen35-27b;
# a dry run elsewhere: PRESET=tiny, with FAK_TMP, FAK_LOADER, FAK_VK_ICD as setup.sh says).
# SM clocks every 200 ms → clocks.csv. Prepare (main's build after the merge, release binaries;
# the tests need the gpu and model groups, the bench matvec-bench):
#   MATVEC_BENCH=1 RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh gpu_matvec \
#       model_qwen35 model_qwen3
# staged as target/<dir>/{experiments/h200/*.sh, target/h200/{bin.txz,gl,built-at,commit}},
# run `cd target/<dir> && bash experiments/h200/sumq.sh`, carry ["target/<dir>"].
# Files back: tests.log, matvec-sumq.tsv, sumq.log, bench-json.tgz, clocks.csv, gpu.csv.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
start=$SECONDS
budget=${BUDGET_S:-190}
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw --format=csv -lms 200 \
    > "$OUT/clocks.csv" 2>&1 &
CLOCKS=$!
preset=${PRESET:-qwen35-27b}
M27=/dev/shm/$preset-q4_k_m.gguf
synth() { # synth ARCH PRESET FILE: once per machine (another script of the call may have)
    [ -s "$3" ] && return 0
    "$BIN/harness" synth --arch "$1" --preset "$2" --quant q4_k_m --seed 0 --fast-random \
        --out "$3.part" && mv "$3.part" "$3"
}
synth qwen35 "$preset" "$M27" > /tmp/synth-sumq.log 2>&1 &
SYNTH=$!

tests() { # tests LIMIT BINARY FILTER...: one group binary's tests under the form, summarized
    local limit=$1 binary=$2
    shift 2
    echo "== $binary $* (FAK_MATVEC_SUMQ=1)" >> "$OUT/tests.log"
    # libtest ORs filters: whole test paths.
    FAK_MATVEC_SUMQ=1 timeout "$limit" "$BIN/$binary" "$@" 2>&1 \
        | grep -E "^test |test result|panicked at|assertion|differs|code sums" | cut -c1-300 \
        | head -20 >> "$OUT/tests.log"
}
tests 50 gpu gpu_matvec::code_sums_give gpu_matvec::a_rows_bits \
    gpu_matvec::a_gate_up_pairing_quantizes
if [ -x "$BIN/model" ]; then
    tests 40 model model_qwen35::int_dot model_qwen3::int_dot
fi
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"
echo "== tests done at $((SECONDS - start)) s"

LAYOUTS=256/4/1/batched,256/16/1/batched,256/4/1/split2,256/16/1/split2
if [ -x "$BIN/matvec-bench" ]; then
    timeout 45 "$BIN/matvec-bench" --paths q8 --plain --reps 3 --batches 1,4,8 --sumq \
        --products 27b_ffn_gate_up,27b_ffn_down --layouts "$LAYOUTS" \
        > "$OUT/matvec-sumq.tsv" 2>&1
    echo "== matvec-bench --sumq --batches 1,4,8: exit $? at $((SECONDS - start)) s"
    # Per product, layout and batch: the q8 µs → the q8+sumq µs (the rows' columns: product,
    # type, rows, cols, layout, path, µs).
    awk -F'\t' '/^# input vectors per dispatch/ { b = $0; sub(/.*: /, "", b) }
        $6 == "q8" { q[$1 FS $2 FS $5 FS b] = $7 }
        $6 == "q8+sumq" { k = $1 FS $2 FS $5 FS b
            printf "%s %s %s B=%s: %s → %s µs\n", $1, $2, $5, b, q[k], $7 }' \
        "$OUT/matvec-sumq.tsv"
    grep -E "FAILED" "$OUT/matvec-sumq.tsv" | cut -c1-200
fi

wait $SYNTH || { tail -3 /tmp/synth-sumq.log; exit 1; }
echo "== synth done at $((SECONDS - start)) s"
mkdir -p /tmp/bench-json-sumq
bench() { # bench LABEL [env...]: one 8-sequence `harness bench` at depth 128, profiled
    local label=$1
    shift
    if [ $((SECONDS - start + 25)) -gt "$budget" ]; then
        echo "== $label SKIPPED (at $((SECONDS - start)) s)" | tee -a "$OUT/sumq.log"
        return
    fi
    echo "== $label: sequences 8 $* (at $((SECONDS - start)) s)" >> "$OUT/sumq.log"
    env "$@" timeout 40 "$BIN/harness" bench --model "$M27" --depths 128 --n-out 32 \
        --sequences 8 --profile-steps 1 --suffix 0 --probe-mib 256 \
        --json-out "/tmp/bench-json-sumq/$label.json" > /tmp/bench-sumq.log 2>&1
    echo "rc=$?" >> "$OUT/sumq.log"
    # The one-sequence and batched lines, and the batched step's rows (after its line).
    grep -E "^depth 128(:| batched)|rror|panicked" /tmp/bench-sumq.log | cut -c1-240 \
        >> "$OUT/sumq.log"
    sed -n '/^depth 128 batched/,/^depth 128 prefill/p' /tmp/bench-sumq.log \
        | grep -E "^  [a-z_]+ " | cut -c1-130 >> "$OUT/sumq.log"
    (cd /tmp/bench-json-sumq && tar czf "$OUT/bench-json.tgz" ./*.json)
}
for round in $(seq "${ROUNDS:-2}"); do
    bench "seq8-default-$round"
    bench "seq8-sumq-$round" FAK_MATVEC_SUMQ=1
done
grep -E "^==|^rc|^depth" "$OUT/sumq.log" | cut -c1-200
echo "== done at $((SECONDS - start)) s"
kill $CLOCKS
