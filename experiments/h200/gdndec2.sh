#!/usr/bin/env bash
# A second look at gdndec's wide split (`FAK_GDN_DECODE=wide`) on the Qwen3.5-27B: one
# `harness bench --depths 128 --sequences 8` per arm (the one-sequence decode and the 8-sequence
# aggregate), default / wide interleaved ROUNDS (2) times, each capped at 40 s; ~110 s on a
# fresh H100 (2026-12-06 #10's last call: gdndec.sh's 35 s caps cut two of its four benches).
# Prepare: any build carrying the harness. Files back: bench.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
M27=/dev/shm/qwen35-27b-q4_k_m.gguf
[ -s "$M27" ] || "$BIN/harness" synth --arch qwen35 --preset qwen35-27b --quant q4_k_m --seed 0 \
    --fast-random --out "$M27" > /dev/null 2>&1
for round in $(seq "${ROUNDS:-2}"); do
    for arm in default wide; do
        echo "== $arm-$round (at ${SECONDS} s)" >> "$OUT/bench.log"
        v=key; [ $arm = wide ] && v=wide
        FAK_GDN_DECODE=$v timeout 40 "$BIN/harness" bench --model "$M27" --depths 128 --n-out 32 \
            --sequences 8 --profile-steps 1 --suffix 0 --probe-mib 64 > /tmp/b.log 2>&1
        echo "rc=$?" >> "$OUT/bench.log"
        grep -E "^depth [0-9]+(:| batched)|^  gdn_decode |rror|panicked" /tmp/b.log | cut -c1-200 \
            >> "$OUT/bench.log"
    done
done
cat "$OUT/bench.log"
