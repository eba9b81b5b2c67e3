#!/usr/bin/env bash
# One short device call (~80 s wall): the Qwen3-8B shape's decode with the integer mat-vec's
# narrow form and its wide form (FAK_MATVEC_WIDE=1 on a build from before the wide default;
# after it, FAK_MATVEC_WIDE=0 is the narrow arm), one run each at depth 128. Carried: the
# final-check.sh build (target/c3). Files back: bench.log, gpu.csv.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
M8=/dev/shm/qwen3-8b-q4_k_m.gguf
"$BIN/harness" synth --arch qwen3 --preset qwen3-8b --quant q4_k_m --fast-random --out "$M8" \
    > /tmp/synth.log 2>&1 || tail -3 /tmp/synth.log
for arm in "narrow FAK_MATVEC_WIDE=0" "wide FAK_MATVEC_WIDE=1"; do
    set -- $arm
    echo "== 8b $1"
    env "${@:2}" timeout 40 "$BIN/harness" bench --model "$M8" --depths 128 --n-out 64 \
        --profile-steps 3 --suffix 0 --probe-mib 256 2>&1 | grep -E "^depth 128:|ffn_|attn_qkv|output "
done > "$OUT/bench.log" 2>&1
cut -c1-200 "$OUT/bench.log"
