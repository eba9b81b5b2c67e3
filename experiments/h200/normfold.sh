#!/usr/bin/env bash
# One device call (nvidia-h200 or an H100, ~4 min wall, ~6 with EXTRA=1; no llama.cpp): the
# decode norm fold and the mixed projection dispatch of 2026-12-05 #6 (normfold: the integer mat-vecs after an
# RMSNorm norm and quantize x in each workgroup instead of after a quantize dispatch, and a
# Q6_K projection run shares one dispatch with the Q4_K run beside it: 27B 518 → 358 dispatches
# per token, 8B 348 → 258, counted on lavapipe), on the H200's own paths and its speed.
# In order of what the call must not lose:
#   1. the changed suites' tests on the H200 (32-wide subgroups): gpu_matvec's new tests and
#      the integer path's, model_qwen35 and model_qwen3's int-dot tests (pins, dispatch counts)
#      → tests.log;
#   2. the Qwen3.5-27B and Qwen3-8B decode at depth 128 (`--n-out 64`), the fold off
#      (FAK_DECODE_NORM_FOLD=0: the quantize dispatches and two runs back, the other fusions
#      stay) and on (the default) interleaved ROUNDS (3) times → fold.log (tok/s, dispatches,
#      ops, encode per token; the profiled step's ops in bench-json.tgz);
#   3. with EXTRA=1: the fold without the merge (FAK_DECODE_MERGE=0), and every mat-vec
#      in the layout of 64 rows per workgroup (FAK_MATVEC_LAYOUT=256/16/1/wide: a quarter of the
#      workgroups of the default 256/4/1, so a quarter of the folded products' per-workgroup
#      reads of x and its norm weight) once each on the 27B, and main's build (harness-base,
#      where prepare.sh carried one: BASE_HARNESS=…) once per shape → fold.log.
# SM clocks every 200 ms → clocks.csv. Prepare (in the worktree, release binaries):
#   RELEASE_TARGET_DIR=/work/targets/normfold-rel experiments/h200/prepare.sh gpu_matvec \
#       model_qwen35 model_qwen3
# staged as target/<dir>/{experiments/h200/*.sh, target/h200/{bin.txz,gl,built-at,commit}},
# run `cd target/<dir> && bash experiments/h200/normfold.sh`, carry ["target/<dir>"].
# Files back: tests.log, fold.log, bench-json.tgz, clocks.csv, gpu.csv.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw --format=csv -lms 200 \
    > "$OUT/clocks.csv" 2>&1 &
CLOCKS=$!
M27=/dev/shm/qwen35-27b-q4_k_m.gguf
M8=/dev/shm/qwen3-8b-q4_k_m.gguf
( "$BIN/harness" synth --arch qwen35 --preset qwen35-27b --quant q4_k_m --seed 0 --fast-random \
    --out "$M27" && "$BIN/harness" synth --arch qwen3 --preset qwen3-8b --quant q4_k_m \
    --seed 0 --fast-random --out "$M8" ) > /tmp/synth.log 2>&1 &
SYNTH=$!

for t in "gpu_matvec the_norm_quantized a_mixed_binding quantizing_in integer" \
    "model_qwen35 int_dot --test-threads=1" "model_qwen3 int_dot --test-threads=1"; do
    set -- $t
    echo "== $*" >> "$OUT/tests.log"
    timeout 40 "$BIN/$1" --skip llama_cpp --skip mlx_lm "${@:2}" 2>&1 \
        | grep -E "^test |test result|panicked at|cosine [0-9.]+ <|dispatches per step" \
        | head -40 >> "$OUT/tests.log"
done
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"
wait $SYNTH || { tail -3 /tmp/synth.log; exit 1; }
mkdir -p /tmp/bench-json

bench() { # bench MODEL LABEL [env...]: one one-sequence `harness bench` at depth 128
    local model=$1 label=$2
    shift 2
    echo "== $label: $*" >> "$OUT/fold.log"
    env "$@" timeout 45 "${BENCH_BIN:-$BIN/harness}" bench --model "$model" --depths 128 --n-out 64 \
        --profile-steps 1 --suffix 0 --probe-mib 256 \
        --json-out "/tmp/bench-json/$label.json" > /tmp/bench.log 2>&1
    echo "rc=$?" >> "$OUT/fold.log"
    grep -E "^depth 128:|rror|panicked" /tmp/bench.log | cut -c1-220 >> "$OUT/fold.log"
    (cd /tmp/bench-json && tar czf "$OUT/bench-json.tgz" ./*.json)
}
for round in $(seq "${ROUNDS:-3}"); do
    bench "$M27" "27b-off-$round" FAK_DECODE_NORM_FOLD=0
    bench "$M27" "27b-on-$round"
    bench "$M8" "8b-off-$round" FAK_DECODE_NORM_FOLD=0
    bench "$M8" "8b-on-$round"
done
cat "$OUT/fold.log"
# EXTRA=1 (another ~2 min): the fold without the merge, the 64-row layout, and main's build
# (prepare.sh's BASE_HARNESS) where carried — both arms above share this branch's `enter_part`
# (every mat-vec reads its Params through a private copy), which only main's build can show.
if [ "${EXTRA:-0}" = 1 ]; then
    bench "$M27" "27b-no-merge" FAK_DECODE_MERGE=0
    bench "$M27" "27b-64-rows" FAK_MATVEC_LAYOUT=256/16/1/wide
    if [ -x "$BIN/harness-base" ]; then
        BENCH_BIN=$BIN/harness-base bench "$M27" "27b-main"
        BENCH_BIN=$BIN/harness-base bench "$M8" "8b-main"
    fi
    tail -12 "$OUT/fold.log"
fi
kill $CLOCKS
