#!/usr/bin/env bash
# One device call (nvidia-h200 or an H100; ≤ 90 s wall: setup ~10 s, the probes a few seconds):
# experiments/coop-probe on the device — which WGSL construct on 16×16 cooperative matrices the
# NVIDIA driver (or naga's SPIR-V for it) gets wrong, behind the zeros / NaN of
# wgsl/attn_prefill_coop.wgsl and wgsl/gated_delta_chunk_coop.wgsl (2026-12-05 #4). One line per
# probe kernel: PASS/FAIL, its largest error, the construct, the first wrong values; `control`
# does only what the x16 mat-mul does (a FAIL there means the probe is wrong, not the driver).
# Prepare (from the coop-probe worktree; the carry is ~3 MB):
#   CARGO_TARGET_DIR=/work/targets/coop-probe-rel cargo build --release \
#       --manifest-path experiments/coop-probe/Cargo.toml
#   then bin.txz with bin/coop-probe, gl/, built-at, commit in target/h200 (NOTES.md, coop-probe)
# Files back: probe.txt, gpu.csv.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
timeout 60 "$BIN/coop-probe" > "$OUT/probe.txt" 2>&1
echo "coop-probe exit $?" >> "$OUT/probe.txt"
cat "$OUT/gpu.csv" "$OUT/probe.txt"
