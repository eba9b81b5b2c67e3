#!/usr/bin/env bash
# One device call (nvidia-h200) on the session's probe merge (coop-mm × attn-split over main), in
# priority order: the coop mat-mul's K-loop sweep (matmul-sweep.sh's step 2), the prefill
# attention with its keys split (attn-prefill.sh's bench), the 27B cached step in `harness bench`
# (depth 2048 + 128 resumed, and the same as a timed prefix-cache hit with its host phases: branch
# cache-path; the integer mat-vec by default, and its decode with the 128/8/1 layout), then the
# GPU suites of the changed kernels (gpu_matmul's checks are the sweep's own `check` lines).
# Carried: target/h200 from `MATMUL_BENCH=1 prepare.sh gpu_attn_prefill gpu_attn_decode
# gpu_matvec`. Writes 7 files.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
BIG=/dev/shm/qwen35-27b-q4_k_m.gguf
"$BIN/harness" synth --arch qwen35 --preset qwen35-27b --quant q4_k_m --fast-random --out "$BIG" \
    > "$OUT/errs.log" 2>&1 &
SYNTH=$!
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 500 > "$OUT/clocks.csv" 2>&1 &
CLOCKS=$!
timeout 200 "$BIN/matmul-bench" --sweep > "$OUT/matmul-sweep.tsv" 2>> "$OUT/errs.log"
echo "sweep rc=$?" >> "$OUT/errs.log"
timeout 150 "$BIN/matmul-bench" --attn > "$OUT/attn-bench.tsv" 2>> "$OUT/errs.log"
echo "attn rc=$?" >> "$OUT/errs.log"
wait $SYNTH
{
    echo "== 27B, defaults"
    timeout 100 "$BIN/harness" bench --model "$BIG" --depths 2048 --n-out 32 --cache-mem 4G
    echo "== 27B, FAK_MATVEC_LAYOUT=128/8/1"
    FAK_MATVEC_LAYOUT=128/8/1 timeout 60 "$BIN/harness" bench --model "$BIG" --depths 128 --n-out 32 --suffix 0
} > "$OUT/bench.log" 2>&1
kill $CLOCKS
for t in gpu_attn_prefill gpu_attn_decode gpu_matvec; do
    echo "== $t"
    { time timeout 90 "$BIN/$t" 2>&1 | grep -E "^test |test result|panicked|FAIL" | head -40; } 2>&1
done > "$OUT/parity.log" 2>&1
grep -E "check|^#" "$OUT/matmul-sweep.tsv" | head -20
grep -E "^==|^depth|tok/s" "$OUT/bench.log" | head -20
grep -E "^==|test result|real" "$OUT/parity.log"
