#!/usr/bin/env bash
# One device script (an H100 or H200, ~200 s at ROUNDS=2; `multi.sh shortab:230`): the arm
# mvb8.sh chose but had no room for (2026-12-06 #14 call 2, experiments/NOTES.md) — the short-row
# layout ALONE, before its flip (issue 21's 8-sequence aggregate; issue 18's one sequence):
#   1. gpu_matvec's bits and layout tests with FAK_MATVEC_SHORT_LAYOUT=64/4/1 on every row count
#      (FAK_MATVEC_SHORT_MIN_ROWS=1) → tests.log;
#   2. `harness bench --sequences 8` on the Qwen3.5-27B synth at depth 128 (each run also times
#      one sequence): default, short8k (64/4/1 from 8192 rows: the head, gdn_qkv, gdn_qkvzba,
#      attn_qk, attn_qkv) and short4k (from 4096 rows: also gdn_out, attn_output, gdn_zba)
#      interleaved ROUNDS (2) times → bench.log (tok/s at 1 and 8, the batched step's op rows),
#      bench-json.tgz, clocks.csv.
# Prepare: MATVEC_BENCH=0 RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh gpu_matvec
# Flip if short8k or short4k gains at 8 sequences in every round and loses < 0.3 % at one:
# ShortRows::from_env's default (engine/gpu/kernels/matvec.rs), then the int-dot pins and
# serving's batch invariance on lavapipe and NVIDIA.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
start=$SECONDS
M27=/dev/shm/${PRESET:-qwen35-27b}-q4_k_m.gguf
( [ -s "$M27" ] || { "$BIN/harness" synth --arch qwen35 --preset "${PRESET:-qwen35-27b}" \
    --quant q4_k_m --seed 0 --fast-random --out "$M27.part" && mv "$M27.part" "$M27"; } ) \
    > /tmp/synth-shortab.log 2>&1 &
SYNTH=$!
FAK_MATVEC_SHORT_LAYOUT=64/4/1 FAK_MATVEC_SHORT_MIN_ROWS=1 timeout 60 "$BIN/gpu" \
    gpu_matvec::a_rows_bits gpu_matvec::layouts_the_kernel 2>&1 \
    | grep -E "^test |test result|panicked at" | cut -c1-300 > "$OUT/tests.log"
cat "$OUT/tests.log"
wait $SYNTH || { tail -3 /tmp/synth-shortab.log; exit 1; }
echo "== synth and tests done at $((SECONDS - start)) s"
SEQS=8 ROUNDS=${ROUNDS:-2} EST_S=${EST_S:-24} BUDGET_S=$((${BUDGET_S:-220} - (SECONDS - start))) \
    ROWS="  (gdn_qkv|gdn_zba|gdn_out|attn_qk|attn_output|gdn_qkvzba|attn_qkv|output) " \
    bash experiments/h200/abbench.sh 27b 128 32 default \
    "short8k=FAK_MATVEC_SHORT_LAYOUT=64/4/1;FAK_MATVEC_SHORT_MIN_ROWS=8192" \
    "short4k=FAK_MATVEC_SHORT_LAYOUT=64/4/1;FAK_MATVEC_SHORT_MIN_ROWS=4096"
grep -E "^==|^depth 128: decode|batched decode" "$OUT/bench.log" | cut -c1-200
echo "== done at $((SECONDS - start)) s"
