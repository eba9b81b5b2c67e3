#!/usr/bin/env bash
# Session 2026-12-06 #14, call 2's first part (~15 s; `multi.sh s14b:40`): the chunked delta
# rule's poisoned-scratch test on NVIDIA, every form checked before it fails (it names each
# failing form) → tests.log. Prepare: prepare.sh with gpu_gated_delta among the suites.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
timeout 30 "$BIN/gpu" gpu_gated_delta::every_chunked_form_on_a_poisoned_scratch > "$OUT/tests.log" 2>&1
echo "rc=$?" >> "$OUT/tests.log"
grep -E "panicked|forms that failed|test result|rc=" "$OUT/tests.log" | cut -c1-400
