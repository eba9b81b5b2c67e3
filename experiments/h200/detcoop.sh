#!/usr/bin/env bash
# One device call (nvidia-h100-x1 or nvidia-h200, ≤ 200 s wall through `multi.sh detcoop:200`; no
# llama.cpp): issue 21's key runs in the cooperative-matrix prefill attention (experiments/
# NOTES.md "detcoop"). Under FAK_ATTN_RUNS=on the staged coop kernel and the flash form (the
# default's lean step, 128x32fl, among them) sum each row's keys in runs of 512 from key 0,
# folded in key order through the output's memory, split or not; off (today's default) they
# split each tile's keys evenly. Same binary, both arms. In order of what the call must not lose:
#   1. correctness on NVIDIA → tests.log:
#      a. batch_invariance::dense_logits_past_a_key_run_do_not_depend_on_the_step and
#         dense_logits_do_not_depend_on_the_batch_or_the_chunking under FAK_ATTN_RUNS=on: must
#         PASS on the default kernel (the flash form's lean step);
#      b. gpu_attn_prefill:: with the switch off (every form against the f64 reference as before;
#         key_runs_give_the_same_bits_split_or_not and key_runs_keep_the_bits_of_keys_within_one_run
#         build their runs tiles themselves: the staged tile and every flash form, slack 0 too),
#         SKIP_TESTS (default: the tile-order, row-count and whole-page tests, which no runs
#         change) left out;
#      c. gpu_attn_prefill::key_runs and gpu_attention_step under FAK_ATTN_RUNS=on (the engine's
#         kernel with runs, through AttnPrefill::new);
#   2. `harness bench --depths 128,2048 --n-out 8 --profile-steps 1` on the Qwen3-8B synth, off /
#      on interleaved ROUNDS (2) times, under BUDGET_S (185 s from the start: a bench that would
#      pass it is logged SKIPPED) → bench.log, attn.tsv (per arm, round and depth: prefill tok/s,
#      the attention op's profiled ms and share, the step's GPU ms), bench-json.tgz, and per depth
#      "depth D: attention off X ms, on Y ms (±Z %)" at the end of stdout. At 128 (≤ 512 keys: no
#      fold) the arms run the same arithmetic: any gap there is noise or the final store's
#      select. At 2048 the longest tiles cross 3 run boundaries (a fold each, then a folded store);
#   3. with time left: the same batch test with the switch off (expected to FAIL: the finding of
#      NOTES "attn2k" on NVIDIA, the control that the test has teeth there), and, where the carry
#      has matmul-bench (MATMUL_BENCH=1 prepare), `matmul-bench --attn` with ATTN_SPLITS=auto off /
#      on (the engine's kernels at each case; the 27B's cached step: 128 tokens over 2176 keys,
#      the multi-agent shape, 5 splits either way: even 448-key splits off, runs of 512 + 128 on).
# SM clocks every 200 ms → clocks.csv. Prepare (here, not on the device):
#   RELEASE_TARGET_DIR=/work/targets/<dir> experiments/h200/prepare.sh \
#       gpu_attn_prefill gpu_attention_step batch_invariance
# (the gpu and serving group binaries and the harness), then `multi.sh detcoop:200`.
# A dry run elsewhere: PRESET8=tiny DEPTHS=40,600 (the synth preset, the bench depths), with
# setup.sh's FAK_TMP / FAK_LOADER=system / FAK_VK_ICD.
# Expected wall: batch tests ~40 s, gpu_attn_prefill ~60 s, the switch's tests ~15 s (the synth
# beside them), four 2-depth benches ~40 s: ~160 s; the control and matmul-bench only if left.
# Files back: tests.log, bench.log, attn.tsv, bench-json.tgz, attn-bench.tsv, clocks.csv, gpu.csv.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
SECONDS=0
BUDGET_S=${BUDGET_S:-185}
DEPTHS=${DEPTHS:-128,2048}
SKIP_TESTS=${SKIP_TESTS:-the_tile_order_changes_no_bits the_lean_row_counts_compute_the_same_bits pages_holding_whole_key_steps}
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw --format=csv -lms 200 \
    > "$OUT/clocks.csv" 2>&1 &
CLOCKS=$!
PRESET8=${PRESET8:-qwen3-8b}
M8=${M8:-/dev/shm/$PRESET8-q4_k_m.gguf}
"$BIN/harness" synth --arch qwen3 --preset "$PRESET8" --quant q4_k_m --seed 0 --fast-random \
    --out "$M8" > /tmp/synth8.log 2>&1 &
SYNTH8=$!

check() { # check LIMIT RUNS BINARY [ARGS...]: one test run with FAK_ATTN_RUNS=RUNS ("": the
    # default), its verdict lines into tests.log
    local limit=$1 runs=$2
    shift 2
    echo "== $* (FAK_ATTN_RUNS=$runs, at ${SECONDS}s)" >> "$OUT/tests.log"
    FAK_ATTN_RUNS=$runs timeout "$limit" "$@" 2>&1 \
        | grep -E "^test |test result|panicked at|differs|reused|mismatch|> tol|not the unsplit" \
        | cut -c1-300 | head -40 >> "$OUT/tests.log"
}
skips=()
for t in $SKIP_TESTS; do skips+=(--skip "$t"); done
# Through the group binaries (a launcher adds its file's `name::`, which libtest ORs with a test
# name: the whole file; so the group binaries by name, with `file::test` filters).
check 70 on "$BIN/serving" batch_invariance::dense_logits_past_a_key_run_do_not_depend_on_the_step \
    batch_invariance::dense_logits_do_not_depend_on_the_batch_or_the_chunking
check 90 off "$BIN/gpu" gpu_attn_prefill:: "${skips[@]}"
check 40 on "$BIN/gpu" gpu_attn_prefill::key_runs gpu_attention_step::
grep -E "^==|test result|FAILED|panicked|differs" "$OUT/tests.log"
echo "[${SECONDS} s] tests done"

wait $SYNTH8 || { tail -3 /tmp/synth8.log; kill $CLOCKS 2> /dev/null; exit 1; }
echo "[${SECONDS} s] synth done"

mkdir -p /tmp/bench-json
rm -f /tmp/bench-json/*.json
printf 'arm\tround\tdepth\tprefill_tok_s\tattention_ms\tattention_share\tprefill_gpu_ms\n' \
    > "$OUT/attn.tsv"
bench() { # bench ARM ROUND: one `harness bench` with FAK_ATTN_RUNS=ARM (off | on) at DEPTHS
    local arm=$1 round=$2 json=/tmp/bench-json/$1-$2.json
    if [ $((SECONDS + 20)) -gt "$BUDGET_S" ]; then
        echo "== $arm round $round SKIPPED (at ${SECONDS}s, budget ${BUDGET_S}s)" | tee -a "$OUT/bench.log"
        return
    fi
    echo "== $arm round $round (at ${SECONDS}s)" >> "$OUT/bench.log"
    FAK_ATTN_RUNS=$arm timeout 60 "$BIN/harness" bench --model "$M8" --depths "$DEPTHS" \
        --n-out 8 --profile-steps 1 --suffix 0 --probe-mib 256 --json-out "$json" \
        > /tmp/bench.log 2>&1
    echo "rc=$?" >> "$OUT/bench.log"
    grep -E "^depth [0-9]+ prefill:|^  attention|panicked|rror" /tmp/bench.log | cut -c1-200 \
        >> "$OUT/bench.log"
    python3 - "$json" "$arm" "$round" >> "$OUT/attn.tsv" <<'EOF' || true
import json, sys
path, arm, rnd = sys.argv[1:]
b = json.load(open(path))
for d in b["depths"]:
    p = d["prefill"]
    att = sum(o["gpu_us"] for o in p["ops"] if o["name"] == "attention")
    print(f"{arm}\t{rnd}\t{d['depth']}\t{d['prefill_tokens_per_s']:.0f}\t{att / 1e3:.2f}\t"
          f"{att / p['gpu_us']:.3f}\t{p['gpu_us'] / 1e3:.1f}")
EOF
    (cd /tmp/bench-json && tar czf "$OUT/bench-json.tgz" ./*.json)
}
for round in $(seq "${ROUNDS:-2}"); do
    bench off "$round"
    bench on "$round"
    echo "[${SECONDS} s] round $round done"
done
cat "$OUT/attn.tsv"
# Per depth, the attention's and the prefill's means over the rounds, and on's change.
python3 - "$OUT/attn.tsv" <<'EOF' || true
import csv, sys, collections
ms, tok = collections.defaultdict(list), collections.defaultdict(list)
for r in csv.DictReader(open(sys.argv[1]), delimiter="\t"):
    ms[(r["depth"], r["arm"])].append(float(r["attention_ms"]))
    tok[(r["depth"], r["arm"])].append(float(r["prefill_tok_s"]))
mean = lambda v: sum(v) / len(v)
for depth in sorted({d for d, _ in ms}, key=int):
    a, b = ms.get((depth, "off"), []), ms.get((depth, "on"), [])
    if a and b:
        ma, mb = mean(a), mean(b)
        ta, tb = mean(tok[(depth, "off")]), mean(tok[(depth, "on")])
        print(f"depth {depth}: attention off {ma:.2f} ms, on {mb:.2f} ms ({mb / ma - 1:+.1%}); "
              f"prefill off {ta:.0f}, on {tb:.0f} tok/s ({tb / ta - 1:+.1%})")
EOF

# With time left: the control (the batch test without the runs: expected to FAIL on NVIDIA).
if [ $((SECONDS + 30)) -le "$BUDGET_S" ]; then
    check 30 off "$BIN/serving" batch_invariance::dense_logits_past_a_key_run_do_not_depend_on_the_step
    tail -4 "$OUT/tests.log"
else
    echo "[${SECONDS} s] control SKIPPED"
fi
# And the engine's kernels in isolation, the 27B's cached step among the cases (only the
# engine's own choice: ATTN_TILES names no tile; the unsplit and the engine's rule).
if [ -x "$BIN/matmul-bench" ] && [ $((SECONDS + 30)) -le "$BUDGET_S" ]; then
    for arm in off on; do
        echo "== matmul-bench --attn FAK_ATTN_RUNS=$arm (at ${SECONDS}s)" >> "$OUT/attn-bench.tsv"
        FAK_ATTN_RUNS=$arm ATTN_TILES=none ATTN_SPLITS=auto timeout 25 "$BIN/matmul-bench" --attn \
            >> "$OUT/attn-bench.tsv" 2>&1
    done
    grep -E "==|qwen35-27b" "$OUT/attn-bench.tsv" | grep -v "^fallback\|^f16 " | cut -c1-200
fi
kill $CLOCKS 2> /dev/null
echo "[${SECONDS} s] done"
