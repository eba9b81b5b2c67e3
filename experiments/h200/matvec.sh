#!/usr/bin/env bash
# One device call (nvidia-h200), or the tail of one: the decode mat-vec (branch decode-matvec).
# 1. experiments/matvec-bench: µs, GB/s and % of the read probe of every layout × input path at
#    the Qwen3-8B Q4_K_M decode products (and Qwen3.5-27B's MLP);
# 2. gpu_matvec on the H200's paths (every layout candidate, f32 and integer path, the quantized
#    gate/up output) against the CPU;
# 3. harness bench at depth 128 on the 8B shape: the default and the integer path (FAK_INT_DOT=1:
#    its gate/up writes ffn_down's q8 input), each twice, alternating.
# Carried: target/h200 from `MATVEC_BENCH=1 experiments/h200/prepare.sh gpu_matvec model_qwen3`.
# MODEL: the 8B file (default /dev/shm/qwen3-8b-q4_k_m.gguf, synthesized here when missing).
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
MODEL=${MODEL:-/dev/shm/qwen3-8b-q4_k_m.gguf}
[ -f "$MODEL" ] || "$BIN/harness" synth --arch qwen3 --preset qwen3-8b --quant q4_k_m --fast-random \
    --out "$MODEL" > "$OUT/synth.log" 2>&1 &
SYNTH=$!
# The bench first: its numbers come back even if the parity runs out of time (the layout test
# builds ~1000 pipelines; on lavapipe those with 16 teams take minutes each to compile).
timeout 300 "$BIN/matvec-bench" > "$OUT/matvec-bench.tsv" 2> "$OUT/matvec-bench.err"
{
    echo "== gpu_matvec (all but the every-layout test)"
    timeout 150 "$BIN/gpu_matvec" --skip every_layout 2>&1 |
        grep -E "^test |test result|panicked|FAIL|assert" | head -40
    echo "== gpu_matvec every_layout"
    timeout 200 "$BIN/gpu_matvec" every_layout 2>&1 |
        grep -E "^test |test result|panicked|FAIL|assert" | head -40
} > "$OUT/matvec-parity.log" 2>&1
cat "$OUT/matvec-parity.log"
grep "^#" "$OUT/matvec-bench.tsv"
tail -3 "$OUT/matvec-bench.err"
wait $SYNTH
run() {
    echo "== $*" >> "$OUT/matvec-decode.log"
    env "$@" timeout 150 "$BIN/harness" bench --model "$MODEL" --depths 128 --n-out 32 \
        >> "$OUT/matvec-decode.log" 2>&1
}
# Each input path in its own layouts (f32 64/1/1; q8 256/4/1, the quantizing gate/up 256/16/1),
# twice alternating, since the process state moves the rate by up to 1.4× between processes.
run FAK_MATVEC_LAYOUT=
run FAK_INT_DOT=1
run FAK_MATVEC_LAYOUT=
run FAK_INT_DOT=1
grep -E "^==|tok/s|decode|ffn_|attn_|output|probe" "$OUT/matvec-decode.log" | head -120
