#!/usr/bin/env bash
# One device call (nvidia-h200 or an H100; ≤ 90 s wall: setup ~10 s, the 53 probes a few seconds):
# experiments/coop-probe on the device — which WGSL construct on 16×16 cooperative matrices the
# NVIDIA driver (or naga's SPIR-V for it) gets wrong, behind the zeros / NaN of
# wgsl/attn_prefill_coop.wgsl and wgsl/gated_delta_chunk_coop.wgsl (2026-12-05 #4). One line per
# probe kernel: PASS/FAIL, its largest error, the construct, the first wrong values; `control`
# does only what the x16 mat-mul does (a FAIL there means the probe is wrong, not the driver).
# Prepare (from the coop-probe worktree; the carry is ~3 MB):
#   CARGO_TARGET_DIR=/work/targets/coop-probe-rel cargo build --release \
#       --manifest-path experiments/coop-probe/Cargo.toml
#   then bin.txz with bin/coop-probe, gl/, built-at, commit in target/h200 (NOTES.md, coop-probe)
# Files back: probe.txt, gpu.csv (probe-single.txt after a crash).
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
timeout 30 "$BIN/coop-probe" > "$OUT/probe.txt" 2>&1
rc=$?
echo "coop-probe exit $rc" >> "$OUT/probe.txt"
cat "$OUT/gpu.csv" "$OUT/probe.txt"
# A crash (signal) or hang loses the probes after it: run those not yet reported one process
# each (~0.5 s apiece; the call stays under 90 s), so one bad pipeline cannot hide the others.
if [ "$rc" -ge 124 ]; then
    echo "== rerunning the unreported probes one at a time"
    for name in $("$BIN/coop-probe" --list); do
        [ "$SECONDS" -lt 80 ] || { echo "== out of time"; break; }
        grep -qE "^(PASS|FAIL|ERROR) +$name " "$OUT/probe.txt" && continue
        timeout 5 "$BIN/coop-probe" --only "$name" 2>&1 | grep -vE "^# (naga|[0-9]+ probes)" \
            | tee -a "$OUT/probe-single.txt"
        echo "$name exit ${PIPESTATUS[0]}" | tee -a "$OUT/probe-single.txt"
    done
fi
