#!/usr/bin/env bash
# One device call (nvidia-h200) for issue 7's cached request, branch `cache-path`: where the
# cached 27B request's ~500 ms go, in priority order so that a call cut short still returns what
# matters most:
#  1. parity: prefix_cache (the snapshot pool: reused buffers, NaN-filled when idle, must still
#     give the cold prefill's logits);
#  2. `harness bench --cache-mem` on the Qwen3.5-27B shape at depth 2048: the 128-token suffix
#     profiled op by op (the resumed steps' GPU time) and the same suffix as a prefix-cache hit
#     right after its prompt (TTFT and host phases, no idle gap before it);
#  3. the multi-agent scenario (cache on and off, as landing.sh) staggered STAGGER_MS apart (default 7000, as
#     call 1 of 2026-12-04) and again 4200 apart (just over a cold request), with the SM clock
#     sampled every 100 ms: each cached turn's phases (open, steps, snapshots, insert, wait) and
#     the snapshot pool's counts come from the raw file's engine reports.
# Carried: target/h200/{gl, bin.txz, built-at} (prepare.sh prefix_cache). Writes 7 files.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh

BIG=/dev/shm/qwen35-27b-q4_k_m.gguf
{ time "$BIN/harness" synth --arch qwen35 --preset qwen35-27b --quant q4_k_m --fast-random \
    --out "$BIG"; } > "$OUT/synth.log" 2>&1 &
SYNTH=$!
{ time timeout 150 "$BIN/prefix_cache" 2>&1 |
    grep -E "^test |test result|panicked|cosine|error" | head -40; } > "$OUT/parity.log" 2>&1
wait $SYNTH

nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw --format=csv -lms 100 \
    > "$OUT/clocks.csv" 2>&1 &
CLOCKS=$!
timeout 150 "$BIN/harness" bench --model "$BIG" --depths 2048 --suffix 128 --n-out 8 \
    --profile-steps 2 --cache-mem 4G --json-out "$OUT/bench-27b.json" > "$OUT/bench.log" 2>&1

# Each cached turn: TTFT, tokens reused, the host phases (ms) and the snapshot pool's counts.
phases() {
    python3 - "$1" <<'EOF'
import json, sys
raw = json.load(open(sys.argv[1]))
for t in raw["turns"]:
    e = t["engine_report"]["engine"]
    p = {k: round(v / 1e6, 2) for k, v in e["prefill_phases_ns"].items()}
    print(f"agent {t['agent']}: TTFT {t['ttft_s'] * 1e3:.0f} ms, reused {t['cached_tokens']}, "
          f"phases ms {p}, snapshots {e['snapshot_stats']}")
EOF
}
for stagger in "${STAGGER_MS:-7000}" 4200; do
    run=multi-agent-27b-$stagger
    echo "== stagger $stagger ms, from $(date +%T.%N)"
    timeout 150 "$BIN/harness" threeway --scenario multi-agent --model "$BIG" \
        --arms fak-native --agents 3 --preamble 2048 --suffix 128 --turns 1 --n-out 8 \
        --arrival staggered --stagger-ms "$stagger" --no-selftest --out "$OUT/$run" 2>&1 |
        tail -3
    phases "$OUT/$run/multi-agent-fak-native-cache-raw.json"
    "$BIN/harness" report "$OUT/$run/packet.json" | grep -E "^\| fak" | head -12
    tar czf "$OUT/$run.tgz" -C "$OUT" "$run" && rm -r "$OUT/$run"
done > "$OUT/multi-agent.log" 2>&1
kill $CLOCKS
grep -E "test result|panicked|real" "$OUT/parity.log"
grep -E "^depth 2048" "$OUT/bench.log"
cat "$OUT/multi-agent.log"
