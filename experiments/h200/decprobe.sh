#!/usr/bin/env bash
# What a decode step's weight products would cost on the matrix units today (issue 21's
# aggregate decode, session 2026-12-06 #12): the existing cooperative-matrix mat-mul (its
# 128-token tiles, so 1–16 tokens pad a tile) at 1, 2, 4, 8 and 16 tokens on the 8B's and the
# 27B's products (`matmul-bench --decode`, Q4_K and Q6_K), beside the engine's batched int-dot
# mat-vec at 1, 2, 4 and 8 vectors on the 27B's MLP (matvec-bench, split2 = the GPU default
# above 2 vectors). Read against each other per product: µs at B = 8.
# Carry target/h200/{gl, bin.txz (matmul-bench, matvec-bench), built-at}; ~100–150 s.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
start=$SECONDS
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw --format=csv -lms 200 > "$OUT/clocks.csv" 2>&1 &
CLOCKS=$!
timeout 60 "$BIN/matvec-bench" --paths q8 --plain --reps 3 --batches 1,2,4,8 \
    --products 27b_ffn_gate_up,27b_ffn_down --layouts 256/16/1/batched,256/16/1/split2,256/4/1/split2 \
    > "$OUT/matvec-batches.tsv" 2>&1
echo "== matvec-bench: exit $? at $((SECONDS - start)) s"
timeout 240 "$BIN/matmul-bench" --decode > "$OUT/matmul-decode.tsv" 2>&1
echo "== matmul-bench --decode: exit $? at $((SECONDS - start)) s"
kill $CLOCKS
grep -E "ffn_(gate_up|down)" "$OUT/matmul-decode.tsv" | awk -F'\t' '$6 == 8' | cut -c1-160
