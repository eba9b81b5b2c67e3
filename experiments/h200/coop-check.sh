#!/usr/bin/env bash
# One device call (nvidia-h200 or an H100, ~8 min wall): the first run on hardware of issue 19's
# two opt-in matrix-unit kernels — the prefill attention with O in the matrix units
# (FAK_ATTN_PREFILL=coop, 2026-12-05 #3) and the chunked Gated DeltaNet on cooperative matrices
# with the hi/lo split in two accumulators (FAK_GDN_CHUNK=coop, 2026-12-05 #4) — the hybrid suites
# on the x16 mat-mul (the 16×16 default since 2026-12-05 #2, never run on the hybrid suites on
# hardware) and issue 17's H200 selftest. In order of what the call must not lose:
#   1. gpu_attn_prefill (every attention variant the adapter has against the f64 CPU reference),
#      gpu_attention_step (the engine's attention layer), gpu_gated_delta with FAK_GDN_CHUNK=coop
#      (the chunked tests run the f32 and the coop kernel each);
#   2. model_qwen3 with FAK_ATTN_PREFILL=coop, model_qwen35 with both coop kernels;
#   3. `harness bench --depths 128,2048` on the 8B shape (Q4_K_M --fast-random), the f32-tile
#      attention (`tiles`, the default) and `coop` interleaved twice;
#   4. on the 27B hybrid shape: today's defaults, the coop attention, both coop kernels;
#   5. `harness selftest`;
#   6. `matmul-bench --attn` when carried (µs per attention dispatch per tile and key split).
# Prepare: RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh gpu_attn_prefill \
#   gpu_attention_step gpu_gated_delta model_qwen3 model_qwen35   (MATMUL_BENCH=1 for step 6)
# carry target/h200's bin.txz, gl, built-at, commit (not llama-src.tgz: the tree is ~43 MiB);
# files back: tests.tgz (test logs), bench.log, bench-json.tgz, selftest.*, clocks.csv, gpu.csv.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu \
    --format=csv -lms 500 > "$OUT/clocks.csv" 2>&1 &
CLOCKS=$!
LOGS=/tmp/coop-logs
mkdir -p "$LOGS" /tmp/bench-json
Q8B=/dev/shm/qwen3-8b-q4_k_m.gguf
Q27=/dev/shm/qwen35-27b-q4_k_m.gguf
SYNTH=
if [ "${SKIP_BENCH:-0}" != 1 ]; then
    ("$BIN/harness" synth --arch qwen3 --preset qwen3-8b --quant q4_k_m --fast-random --out "$Q8B" \
        && "$BIN/harness" synth --arch qwen35 --preset qwen35-27b --quant q4_k_m --fast-random \
            --out "$Q27") > "$LOGS/synth.log" 2>&1 &
    SYNTH=$!
fi

suite() { # suite NAME [env...]: one carried test file, its summary lines printed
    local t=$1 threads=()
    shift
    # Model suites one test at a time: several engines' devices at once have crashed the NVIDIA
    # driver (SIGSEGV, 2026-12-03 and -04; landing.sh).
    case $t in model_*) threads=(--test-threads=1) ;; esac
    echo "== $t $*"
    env "$@" timeout 170 "$BIN/$t" --skip llama_cpp --skip mlx_lm "${threads[@]}" > "$LOGS/$t.log" 2>&1
    echo "exit $?"
    grep -E "^test |test result|panicked|worst|cosine [0-9.]+ <" "$LOGS/$t.log" | cut -c1-240 | head -30
}
suite gpu_attn_prefill
suite gpu_attention_step
suite gpu_gated_delta FAK_GDN_CHUNK=coop
suite model_qwen3 FAK_ATTN_PREFILL=coop
suite model_qwen35 FAK_ATTN_PREFILL=coop FAK_GDN_CHUNK=coop
(cd "$LOGS" && tar czf "$OUT/tests.tgz" ./*.log)

[ -z "$SYNTH" ] || wait "$SYNTH"
# SKIP_BENCH=1: the suites and the selftest only (~2 min: the recheck after a kernel fix).
if [ "${SKIP_BENCH:-0}" != 1 ]; then
bench() { # bench MODEL LABEL ROUND ATTN [GDN]: FAK_ATTN_PREFILL=ATTN, FAK_GDN_CHUNK=GDN (f32)
    local gdn=${5:-f32}
    echo "== $2 round $3 FAK_ATTN_PREFILL=$4 FAK_GDN_CHUNK=$gdn" >> "$OUT/bench.log"
    FAK_ATTN_PREFILL=$4 FAK_GDN_CHUNK=$gdn timeout 90 "$BIN/harness" bench --model "$1" \
        --depths 128,2048 --n-out 8 --profile-steps 1 --suffix 0 --probe-mib 256 \
        --json-out "/tmp/bench-json/$2-$4-$gdn-$3.json" >> "$OUT/bench.log" 2>&1
    echo "rc=$?" >> "$OUT/bench.log"
}
for round in 1 2; do for arm in tiles coop; do bench "$Q8B" 8b "$round" "$arm"; done; done
bench "$Q27" 27b 1 tiles f32
bench "$Q27" 27b 1 coop f32
bench "$Q27" 27b 1 coop coop
(cd /tmp/bench-json && tar czf "$OUT/bench-json.tgz" ./*.json)
grep -E "^==|^rc=|^depth [0-9]+( prefill)?:|attn_prefill|gated_delta_chunk|panicked|rror" \
    "$OUT/bench.log" | cut -c1-200 | head -80
fi

timeout 150 "$BIN/harness" selftest --out "$OUT/selftest.json" > "$OUT/selftest.log" 2>&1
echo "== selftest exit $?"
tail -12 "$OUT/selftest.log"
kill $CLOCKS

[ -x "$BIN/matmul-bench" ] || exit 0
ATTN_SPLITS=auto timeout 100 "$BIN/matmul-bench" --attn > "$OUT/attn-bench.tsv" 2> /tmp/attn-bench.err
echo "== matmul-bench --attn: exit $?"
cut -f1-3,7-11 "$OUT/attn-bench.tsv" | head -40
tail -3 /tmp/attn-bench.err
