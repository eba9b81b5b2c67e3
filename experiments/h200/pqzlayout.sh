#!/usr/bin/env bash
# One device call (an H100 or H200, ~150 s wall at ROUNDS=2, ~80 s at ROUNDS=1; no llama.cpp, no
# tests): the price of the producer-side quantize's layout (experiments/NOTES.md, "pqz"), before
# the form is built or timed. A mat-vec that adds into the residual stream (ffn_down, gdn_out,
# attn_output) can write the next norm's q8 blocks only if each workgroup owns whole 32-row
# blocks: 8 teams of 4 rows (256/8/1 or 128/8/1) instead of the integer layout's 4 teams (256/4/1,
# 16 rows: half the workgroups on the 27B's d = 5120 outputs, 160 instead of 320). The opt-in
# FAK_MATVEC_RESIDUAL_LAYOUT sets the layout of the accumulating bindings only (every other
# product keeps its own; the batched form as by default), so this A/B is those three products'
# layout and nothing else:
#   default    — 256/4/1 (batched) for every q8 product;
#   r256x8     — FAK_MATVEC_RESIDUAL_LAYOUT=256/8/1: teams of 32 invocations on 4 rows;
#   r128x8     — FAK_MATVEC_RESIDUAL_LAYOUT=128/8/1: teams of 16 (a batched candidate of
#                tests/gpu_matvec.rs).
# `harness bench` decode at depth 128 (`--n-out 32`, one profiled step) on the Qwen3.5-27B and
# Qwen3-8B shapes, the arms interleaved ROUNDS (2) times → layout.log (tok/s, ops); the profiled
# steps in bench-json.tgz: the ffn_down, gdn_out and attn_output rows of each arm are the price
# (the form would pay it on those rows and save ~2–4 µs per quantize dispatch it removes: 127 a
# token on the 27B, 71 on the 8B).
# SM clocks every 200 ms → clocks.csv. Prepare (in the worktree or on main, release binaries):
#   HARNESS_ONLY=1 RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh
# (any build carrying the harness serves), staged as target/<dir>, run
# `cd target/<dir> && bash experiments/h200/pqzlayout.sh` or through multi.sh (`pqzlayout:170`),
# carry ["target/<dir>"]. Files back: layout.log, bench-json.tgz, clocks.csv, gpu.csv.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw --format=csv -lms 200 \
    > "$OUT/clocks.csv" 2>&1 &
CLOCKS=$!
M27=/dev/shm/qwen35-27b-q4_k_m.gguf
M8=/dev/shm/qwen3-8b-q4_k_m.gguf
[ -s "$M27" ] || "$BIN/harness" synth --arch qwen35 --preset qwen35-27b --quant q4_k_m --seed 0 \
    --fast-random --out "$M27" > /tmp/synth.log 2>&1 || { tail -3 /tmp/synth.log; exit 1; }
[ -s "$M8" ] || "$BIN/harness" synth --arch qwen3 --preset qwen3-8b --quant q4_k_m --seed 0 \
    --fast-random --out "$M8" >> /tmp/synth.log 2>&1 || { tail -3 /tmp/synth.log; exit 1; }
mkdir -p /tmp/bench-json

bench() { # bench MODEL LABEL [env...]: one one-sequence `harness bench` at depth 128
    local model=$1 label=$2
    shift 2
    echo "== $label: $*" >> "$OUT/layout.log"
    env "$@" timeout 40 "$BIN/harness" bench --model "$model" --depths 128 --n-out 32 \
        --profile-steps 1 --suffix 0 --probe-mib 256 \
        --json-out "/tmp/bench-json/$label.json" > /tmp/bench.log 2>&1
    echo "rc=$?" >> "$OUT/layout.log"
    grep -E "^depth 128:|^  (ffn_down|gdn_out|attn_output) +matvec|rror|panicked" /tmp/bench.log \
        | cut -c1-220 >> "$OUT/layout.log"
    (cd /tmp/bench-json && tar czf "$OUT/bench-json.tgz" ./*.json)
}
for round in $(seq "${ROUNDS:-2}"); do
    for m in 27b 8b; do
        model=$M27
        [ $m = 8b ] && model=$M8
        bench "$model" "$m-default-$round"
        bench "$model" "$m-r256x8-$round" FAK_MATVEC_RESIDUAL_LAYOUT=256/8/1
        bench "$model" "$m-r128x8-$round" FAK_MATVEC_RESIDUAL_LAYOUT=128/8/1
    done
done
cat "$OUT/layout.log"
kill $CLOCKS
