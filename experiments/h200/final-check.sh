#!/usr/bin/env bash
# One short device call (~4 min wall) for what a session whose device time is nearly spent must
# still learn, in order: (1) the cooperative-matrix construct probe (experiments/coop-probe:
# which construct breaks the two coop kernels); (2) `harness selftest` with the merged defaults
# (issue 17's H200 check; it also checks the fused GDN decode kernel and every model path on the
# device's 32-wide subgroups); (3) `harness bench --depths 128 --n-out 64` on the 27B shape:
# FAK_DECODE_FUSION=0 (the kernels before gdn_decode), the default, and FAK_MATVEC_WIDE=1, once.
# Prepare: HARNESS_ONLY=1 RELEASE_TARGET_DIR=… experiments/h200/prepare.sh, then add the
# coop-probe binary to bin.txz (bin/coop-probe). Files back: probe.txt, selftest.log,
# selftest.json, bench.log, gpu.csv.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
M27=/dev/shm/qwen35-27b-q4_k_m.gguf
"$BIN/harness" synth --arch qwen35 --preset qwen35-27b --quant q4_k_m --fast-random --out "$M27" \
    > /tmp/synth.log 2>&1 &
SYNTH=$!
timeout 30 "$BIN/coop-probe" > "$OUT/probe.txt" 2>&1
echo "coop-probe exit $?" >> "$OUT/probe.txt"
cat "$OUT/probe.txt"
timeout 150 "$BIN/harness" selftest --out "$OUT/selftest.json" > "$OUT/selftest.log" 2>&1
echo "== selftest exit $?"
grep -E "FAIL|fast path|selftest on|bandwidth" "$OUT/selftest.log" | head -30
wait $SYNTH || tail -3 /tmp/synth.log
for arm in "unfused FAK_DECODE_FUSION=0" "fused" "wide FAK_MATVEC_WIDE=1"; do
    set -- $arm
    echo "== 27b $1"
    env "${@:2}" timeout 60 "$BIN/harness" bench --model "$M27" --depths 128 --n-out 64 \
        --profile-steps 3 --suffix 0 --probe-mib 256 2>&1 | grep -E "^depth 128:|gdn_decode|ssm_conv"
done > "$OUT/bench.log" 2>&1
cut -c1-240 "$OUT/bench.log"
