#!/usr/bin/env bash
# One device call (an H100 or H200, ~180 s wall at ROUNDS=2, ~110 s at ROUNDS=1; no llama.cpp):
# issue 18's dispatch target, the producer-side quantize of 2026-12-06 #10 (pqz;
# experiments/NOTES.md, "pqz"), opt-in through FAK_DECODE_FUSE=pquant (the default computes what
# it did): each decode mat-vec that adds into the residual stream (gdn_out, attn_output,
# ffn_down) also writes, per 32-row block it owns, the q8 codes of x·w_next (the next norm's
# weight) and the block's Σ x²; the products after that norm read them and scale by the summed
# 1 / rms, so 127 of the 27B's 128 quantize dispatches a token go (71 of the 8B's 72): 27B
# 518 → 391 dispatches, 8B 348 → 277; with merge,rope 470 → 343 and 294 → 223 (issue 18's half
# of 742 is 371). Not the default's bits (a relative-error bound against the CPU reference). Its
# producers run in 8 teams of 4 rows (256/8/1) instead of 256/4/1: pqzlayout.sh prices that alone.
# In order of what the call must not lose:
#   1. the form's tests on NVIDIA's 32-wide paths → tests.log: gpu_matvec's producer/consumer
#      test (every form and int-dot variant, against the CPU), the int-dot model tests of qwen35
#      and qwen3 with FAK_DECODE_FUSE=pquant (the dispatch counts, the cosines against the
#      q8-input reference) and serving's batch_invariance (a sequence's bits alone and in a
#      batch) with the form on;
#   2. `harness bench` decode at depth 128 (`--n-out 32`) on the Qwen3.5-27B and Qwen3-8B shapes,
#      default vs pquant vs merge,rope,pquant, interleaved ROUNDS (2) times → pquant.log (tok/s,
#      dispatches, encode per token; the profiled steps in bench-json.tgz: ffn_down, gdn_out and
#      attn_output in the producing layout, the normed products without their quantize).
# SM clocks every 200 ms → clocks.csv. Prepare (in the worktree or on main, release binaries):
#   RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh gpu_matvec model_qwen35 \
#       model_qwen3 batch_invariance
# (any build carrying the gpu, model and serving groups serves), staged as target/<dir>, run
# `cd target/<dir> && bash experiments/h200/pqz.sh` or through multi.sh (`pqz:200`), carry
# ["target/<dir>"]. Files back: tests.log, pquant.log, bench-json.tgz, clocks.csv, gpu.csv.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw --format=csv -lms 200 \
    > "$OUT/clocks.csv" 2>&1 &
CLOCKS=$!
M27=/dev/shm/qwen35-27b-q4_k_m.gguf
M8=/dev/shm/qwen3-8b-q4_k_m.gguf
( [ -s "$M27" ] || "$BIN/harness" synth --arch qwen35 --preset qwen35-27b --quant q4_k_m --seed 0 \
    --fast-random --out "$M27" ) > /tmp/synth.log 2>&1 &
SYNTH27=$!
( [ -s "$M8" ] || "$BIN/harness" synth --arch qwen3 --preset qwen3-8b --quant q4_k_m --seed 0 \
    --fast-random --out "$M8" ) >> /tmp/synth.log 2>&1 &
SYNTH8=$!

# The group binaries (prepare.sh carries bin/gpu, bin/model and bin/serving), so that a filter
# picks tests.
for t in "gpu gpu_matvec::a_residual_producer" \
    "model model_qwen35::int_dot model_qwen3::int_dot --test-threads=1" \
    "serving batch_invariance::q4_k_m batch_invariance::dense_logits_do_not_depend_on_the_batch batch_invariance::hybrid_logits_do_not_depend_on_the_batch"; do
    set -- $t
    [ -x "$BIN/$1" ] || { echo "== $1: not carried" >> "$OUT/tests.log"; continue; }
    echo "== FAK_DECODE_FUSE=pquant $*" >> "$OUT/tests.log"
    FAK_DECODE_FUSE=pquant timeout 45 "$BIN/$1" --skip llama_cpp --skip mlx_lm "${@:2}" 2>&1 \
        | grep -E "^test |test result|panicked at|differ|cosine|dispatches per step|fed (true|false)" \
        | head -40 >> "$OUT/tests.log"
done
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"
wait $SYNTH27 && wait $SYNTH8 || { tail -3 /tmp/synth.log; exit 1; }
mkdir -p /tmp/bench-json

bench() { # bench MODEL LABEL [env...]: one one-sequence `harness bench` at depth 128
    local model=$1 label=$2
    shift 2
    echo "== $label: $*" >> "$OUT/pquant.log"
    env "$@" timeout 40 "$BIN/harness" bench --model "$model" --depths 128 --n-out 32 \
        --profile-steps 1 --suffix 0 --probe-mib 256 \
        --json-out "/tmp/bench-json/$label.json" > /tmp/bench.log 2>&1
    echo "rc=$?" >> "$OUT/pquant.log"
    grep -E "^depth 128:|^  (ffn_down|gdn_out|attn_output|ffn_gate_up|gdn_qkv|attn_q) +matvec|rror|panicked" \
        /tmp/bench.log | cut -c1-220 >> "$OUT/pquant.log"
    (cd /tmp/bench-json && tar czf "$OUT/bench-json.tgz" ./*.json)
}
for round in $(seq "${ROUNDS:-2}"); do
    for m in 27b 8b; do
        model=$M27
        [ $m = 8b ] && model=$M8
        bench "$model" "$m-default-$round"
        bench "$model" "$m-pquant-$round" FAK_DECODE_FUSE=pquant
        bench "$model" "$m-all-$round" FAK_DECODE_FUSE=merge,rope,pquant
    done
done
cat "$OUT/pquant.log"
kill $CLOCKS
