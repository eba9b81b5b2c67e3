#!/usr/bin/env bash
# One device script (an H100 or the H200, ≤ 200 s wall; no llama.cpp; runnable alone or as
# `multi.sh mvb8:200`): issue 21's aggregate decode at 8 sequences — two opt-in layout rules of
# 2026-12-06 #14 (mvb8; experiments/NOTES.md, "mvb8"), neither a new kernel:
#   FAK_MATVEC_SPLIT_Q6=G (0, 1, 2, 4): Q6_K bindings' own split (the default G = 2 repeats
#     a Q6_K unit's heavy W side B / G times; the same bits at every split);
#   FAK_MATVEC_SHORT_LAYOUT=L (+ FAK_MATVEC_SHORT_MIN_ROWS, default 4096): the q8 products of
#     ≤ 8192 columns that name no layout (the 27B's GDN and attention projections, their output
#     projections, the head) in L instead of 256/4/1, whose teams of 64 lanes give a 5120-column
#     row 1.25 units a lane (other bits than 256/4/1's for those products, at every batch alike).
# In order of what the call must not lose:
#   1. gpu_matvec's bits test (each vector's outputs at batches 1, 3, 5, 8 against its wide
#      batch-1 bits in every staged, batched and split candidate, and the engine's rule under
#      both knobs — Q6_K unsplit, 256/16/1 forced onto the test's 37 rows by
#      FAK_MATVEC_SHORT_MIN_ROWS=1) and the parse test; serving's batch invariance (tiny Q4_K_M
#      models' logits alone and as row 2 of 4, bit for bit) under Q6_K split 4 and 128/8/1 where
#      bin/serving is carried → tests.log;
#   2. matvec-bench on the 27B's products of short rows and ffn_down (both types), batches 1, 4,
#      8, the default 256/4/1/split2 against 256/4/1 unsplit and split 4 (the Q6_K rule) and the
#      16-team layouts 256/16/1, 128/8/1, 64/4/1 at split 2 (the short-rows rule), warmed, median
#      of 3 → matvec-batches.tsv; from its last table the arm `new` is chosen (choice.log: the
#      Q6_K split with the least B = 8 time weighted by the 27B's counts; the short layout and
#      row minimum with the least B = 8 time whose B = 1 time stays ≤ 1.01× the default's);
#   3. `harness bench` on the Qwen3.5-27B Q4_K_M synth at depth 128, 8 sequences (each run also
#      times one sequence): default vs new interleaved, two rounds (abbench.sh), then the two
#      knobs alone where time is left → bench.log (ms a step, tok/s, the batched step's op rows),
#      bench-json.tgz. ARMS (space-separated abbench arms) replaces the arms.
# SM clocks → clocks.csv. Prepare (main's build after the merge, release binaries):
#   MATVEC_BENCH=1 RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh gpu_matvec
# (add batch_invariance for the serving test: the serving group's ~8 MB and ~15 s of the call,
# which may then leave the second round's `new` no room), staged as target/<dir>, run
# `cd target/<dir> && bash experiments/h200/mvb8.sh` or `multi.sh mvb8:200`, carry
# ["target/<dir>"]. Files back: tests.log, matvec-batches.tsv, choice.log, bench.log,
# bench-json.tgz, clocks-matvec.csv (the bench's), clocks.csv (the model's), gpu.csv.
# Dry run (lavapipe, debug binaries): PRESET=tiny QUICK=1 BUDGET_S=900 (the quick products: the
# choice falls back to FALLBACK, as it says in choice.log).
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
start=$SECONDS
BUDGET_S=${BUDGET_S:-192}
M27=/dev/shm/${PRESET:-qwen35-27b}-q4_k_m.gguf
arch=qwen35
( [ -s "$M27" ] || { "$BIN/harness" synth --arch $arch --preset "${PRESET:-qwen35-27b}" \
    --quant q4_k_m --seed 0 --fast-random --out "$M27.part" && mv "$M27.part" "$M27"; } ) \
    > /tmp/synth-mvb8.log 2>&1 &
SYNTH=$!
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw --format=csv -lms 200 \
    > "$OUT/clocks-matvec.csv" 2>&1 &
CLOCKS=$!

# 1. The bits (the group binary with whole test paths: libtest ORs filters).
tests() { # tests LABEL TIMEOUT BINARY FILTER... under the knobs in $KNOBS
    [ -x "$BIN/$3" ] || { echo "== $1: bin/$3 not carried" >> "$OUT/tests.log"; return; }
    echo "== $1: $KNOBS $3 ${*:4}" >> "$OUT/tests.log"
    # shellcheck disable=SC2086 # KNOBS is VAR=value words
    env $KNOBS timeout "$2" "$BIN/$3" --skip llama_cpp --skip mlx_lm "${@:4}" 2>&1 \
        | grep -E "^test |test result|panicked at|assertion|differs" | cut -c1-300 | head -20 \
        >> "$OUT/tests.log"
}
KNOBS="FAK_MATVEC_SPLIT_Q6=0 FAK_MATVEC_SHORT_LAYOUT=256/16/1 FAK_MATVEC_SHORT_MIN_ROWS=1"
tests "q6 unsplit, short 256/16/1" 30 gpu gpu_matvec::a_rows_bits gpu_matvec::layouts_the_kernel
KNOBS="FAK_MATVEC_SPLIT_Q6=4 FAK_MATVEC_SHORT_LAYOUT=128/8/1 FAK_MATVEC_SHORT_MIN_ROWS=1"
tests "serving, q6 split 4, short 128/8/1" 30 serving batch_invariance::q4_k_m
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"
echo "== tests done at $((SECONDS - start)) s"

# 2. The isolated products. QUICK=1 (a dry run): the bench's small products.
LAYOUTS=256/4/1/split2,256/4/1/batched,256/4/1/split4,256/16/1/split2,128/8/1/split2
LAYOUTS=$LAYOUTS,64/4/1/split2
PRODUCTS=${PRODUCTS:-27b_ffn_down,27b_gdn_qkv,27b_gdn_qkvzba,27b_gdn_zba,27b_gdn_out,27b_output}
quick=()
[ "${QUICK:-0}" = 1 ] && { quick=(--quick); PRODUCTS=small_normed,small_down,small_head; }
timeout "${BENCH_S:-75}" "$BIN/matvec-bench" "${quick[@]}" --paths q8 --plain --reps 3 \
    --batches 1,4,8 --products "$PRODUCTS" --layouts "$LAYOUTS" > "$OUT/matvec-batches.tsv" 2>&1
echo "== matvec-bench --batches 1,4,8: exit $? at $((SECONDS - start)) s"
grep -E "^# batch	|FAILED" "$OUT/matvec-batches.tsv" | cut -c1-200

# The arm `new` from the last table: "# batch<TAB>product<TAB>type<TAB>layout<TAB>us at 1 4 8".
# Per 27B step: ffn_down 32 + 32 (Q4_K, Q6_K), GDN q/k/v Q6_K 24, q/k/v+z/b/a Q4_K 24, z/b/a 24,
# the output projections 48 + 16 (gdn_out's shape stands for attn_output's), the head 1.
FALLBACK="0 128/8/1 4096"
choice=$(awk -F'\t' -v fallback="$FALLBACK" '
    $1 == "# batch" && $4 ~ /\// {
        split($5, us, " ")
        n = $2 "/" $3
        count = n == "27b_ffn_down/Q4_K" ? 32 : n == "27b_ffn_down/Q6_K" ? 32 \
            : $2 == "27b_gdn_qkv" || $2 == "27b_gdn_qkvzba" || $2 == "27b_gdn_zba" ? 24 \
            : $2 == "27b_gdn_out" ? 64 : $2 == "27b_output" ? 1 : 0
        rows = $2 == "27b_gdn_zba" ? 6240 : $2 == "27b_gdn_out" ? 5120 : 10240
        if (count == 0) next
        one[n, $4] = count * us[1]; eight[n, $4] = count * us[3]; prod[n] = rows; has[$4] = 1
    }
    END {
        base = "256/4/1/split2"
        # The Q6_K split: the least B = 8 time over the Q6_K products in 256/4/1.
        split("256/4/1/split2 256/4/1/batched 256/4/1/split4", q6s, " ")
        split("2 0 4", q6g, " ")
        best = ""; bestq6 = ""
        for (i = 1; i <= 3; i++) {
            t = 0; ok = 0
            for (n in prod) if (n ~ /Q6_K/) {
                if (!((n, q6s[i]) in eight)) { ok = -1; break }
                ok = 1; t += eight[n, q6s[i]]
            }
            ok = ok > 0
            printf "q6 %s: B=8 %.1f us a step%s\n", q6s[i], t, ok ? "" : " (incomplete)" > "/dev/stderr"
            if (ok && (best == "" || t < best)) { best = t; bestq6 = q6g[i] }
        }
        # The short layout and its row minimum: short products (not ffn_down) in L where the
        # rule takes them (rows ≥ min), else in the default; B = 8 least, B = 1 ≤ 1.01× default.
        split("256/16/1/split2 128/8/1/split2 64/4/1/split2", ls, " ")
        d1 = 0; d8 = 0
        for (n in prod) if (n !~ /ffn_down/) { d1 += one[n, base]; d8 += eight[n, base] }
        bests = ""; bestl = ""; bestm = ""
        for (i = 1; i <= 3; i++) for (m = 4096; m <= 8192; m += 4096) {
            t1 = 0; t8 = 0; ok = 0
            for (n in prod) if (n !~ /ffn_down/) {
                l = prod[n] >= m ? ls[i] : base
                if (!((n, l) in eight) || !((n, base) in eight)) { ok = -1; break }
                ok = 1; t1 += one[n, l]; t8 += eight[n, l]
            }
            ok = ok > 0
            printf "short %s min %d: B=1 %.1f (default %.1f), B=8 %.1f (default %.1f) us a step%s\n", \
                ls[i], m, t1, d1, t8, d8, ok ? "" : " (incomplete)" > "/dev/stderr"
            if (ok && t1 <= 1.01 * d1 && (bests == "" || t8 < bests)) {
                bests = t8; bestl = ls[i]; bestm = m
            }
        }
        sub(/\/split2$/, "", bestl)
        if (bestq6 == "" || bestl == "") { print fallback " fallback"; exit }
        print bestq6, bestl, bestm
    }' "$OUT/matvec-batches.tsv" 2> "$OUT/choice.log")
read -r Q6 SHORT MIN FELL <<< "${choice:-$FALLBACK fallback}"
echo "chosen: FAK_MATVEC_SPLIT_Q6=$Q6 FAK_MATVEC_SHORT_LAYOUT=$SHORT FAK_MATVEC_SHORT_MIN_ROWS=$MIN ${FELL:-}" \
    >> "$OUT/choice.log"
cat "$OUT/choice.log"

kill $CLOCKS 2> /dev/null

# 3. The model: default vs new, two rounds, then each knob alone where time is left.
wait $SYNTH || { tail -3 /tmp/synth-mvb8.log; exit 1; }
echo "== synth done at $((SECONDS - start)) s"
NEW="new=FAK_MATVEC_SPLIT_Q6=$Q6;FAK_MATVEC_SHORT_LAYOUT=$SHORT;FAK_MATVEC_SHORT_MIN_ROWS=$MIN"
read -r -a arms <<< "${ARMS:-default $NEW}"
SEQS=8 ROUNDS=2 EST_S=${EST_S:-26} BUDGET_S=$((BUDGET_S - (SECONDS - start))) \
    ROWS="  (gdn_qkv|gdn_zba|gdn_out|ffn_gate_up|ffn_down|attn_qk|attn_v|attn_output|gdn_qkvzba|attn_qkv|output) " \
    bash experiments/h200/abbench.sh 27b 128 32 "${arms[@]}"
if [ -z "${ARMS:-}" ]; then
    SEQS=8 ROUNDS=1 EST_S=${EST_S:-26} BUDGET_S=$((BUDGET_S - (SECONDS - start))) \
        bash experiments/h200/abbench.sh 27b 128 32 "q6=FAK_MATVEC_SPLIT_Q6=$Q6" \
        "short=FAK_MATVEC_SHORT_LAYOUT=$SHORT;FAK_MATVEC_SHORT_MIN_ROWS=$MIN" > /dev/null
fi
grep -E "^==|batched decode" "$OUT/bench.log" | cut -c1-200
echo "== done at $((SECONDS - start)) s"
