#!/usr/bin/env bash
# One device call (nvidia-h200), or part of one: the prefill attention on cooperative matrices
# (wgsl/attn_prefill_coop.wgsl; branch attn-prefill-coop). First its GPU tests (every variant the
# H200 has — the f32-tile kernel on f32 and f16 caches and the 16×16 cooperative-matrix kernel
# with every workgroup tile that fits — against the f64 CPU reference; the coop kernel runs
# nowhere else) and the decode attention's (its combine is shared, wgsl/attn_combine.wgsl), then
# `matmul-bench --attn`: µs per dispatch and TFLOP/s of every variant × tile × key-split count
# at the Qwen3-8B shape (512-token chunks after 0 / 512 / 1024 / 1536 / 7680 cached tokens) and the
# Qwen3.5-27B attention shape (128 tokens after 2048).
# Carried: target/h200 from `MATMUL_BENCH=1 prepare.sh gpu_attn_prefill gpu_attention_step gpu_attn_decode`.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
for t in gpu_attn_prefill gpu_attention_step gpu_attn_decode; do
    echo "== $t"
    timeout 150 "$BIN/$t" > "$OUT/$t.log" 2>&1
    echo "exit $?"
    grep -E "^test |test result|panicked" "$OUT/$t.log" | head -20
done
timeout 300 "$BIN/matmul-bench" --attn > "$OUT/attn-bench.tsv" 2> "$OUT/attn-bench.err"
echo "== matmul-bench --attn: exit $?"
cat "$OUT/attn-bench.tsv"
tail -5 "$OUT/attn-bench.err"
