#!/usr/bin/env bash
# One device call (nvidia-h200 or an H100, ~3–4 min wall; harness only, no llama.cpp): why a
# batched decode step of 8 sequences costs 4.0× a one-sequence step on the Qwen3.5-27B shape
# (llama.cpp CUDA: 2.4×; peers.sh, 2026-12-05 #5), and the decode fusions' before/after.
#   1. `harness bench --sequences N` at depth 128 for N = 8 and 4 (the aggregate decode curve),
#      then N = 8 with the integer mat-vec's narrow form (FAK_MATVEC_WIDE=0) and without the
#      integer path (FAK_INT_DOT=0: f32 inputs), each against the same file → batched.log;
#   2. one-sequence decode with the decode fusions off (FAK_DECODE_FUSION=0) and on (the default),
#      interleaved ROUNDS times (1) → fusion.log (tok/s, dispatches, ops, encode per token);
#   3. the multi-agent scenario with the fak-serve arm alone (3 agents arriving together,
#      2048 + 128 tokens, 2 turns, 32 out, cache on and off): the fix of the ragged step's
#      snapshot off the chunk grid on hardware → multi-agent.tgz.
# Prepare: HARNESS_ONLY=1 RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh
# carry ["target/h200/bin.txz", "target/h200/gl", "target/h200/built-at", "target/h200/commit"]
# Files back: batched.log, fusion.log, multi-agent.tgz, bench-json.tgz, clocks.csv, gpu.csv.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw --format=csv -lms 200 \
    > "$OUT/clocks.csv" 2>&1 &
CLOCKS=$!
M27=/dev/shm/qwen35-27b-q4_k_m.gguf
"$BIN/harness" synth --arch qwen35 --preset qwen35-27b --quant q4_k_m --seed 0 --fast-random \
    --out "$M27" > /tmp/synth.log 2>&1 || { tail -3 /tmp/synth.log; exit 1; }
mkdir -p /tmp/bench-json

bench() { # bench LOG LABEL SEQUENCES [env...]: one `harness bench` at depth 128
    local log=$1 label=$2 n=$3
    shift 3
    echo "== $label: sequences $n $*" >> "$OUT/$log"
    env "$@" timeout 90 "$BIN/harness" bench --model "$M27" --depths 128 --n-out 32 \
        --sequences "$n" --profile-steps 1 --suffix 0 --probe-mib 256 \
        --json-out "/tmp/bench-json/$label.json" > /tmp/bench.log 2>&1
    echo "rc=$?" >> "$OUT/$log"
    grep -E "^depth 128(:| batched)|rror|panicked" /tmp/bench.log | cut -c1-220 >> "$OUT/$log"
}
# In order of what the call must not lose (each bench ~25 s, the 27B loaded each time).
bench batched.log seq8 8
bench batched.log seq8-narrow 8 FAK_MATVEC_WIDE=0
bench batched.log seq8-f32 8 FAK_INT_DOT=0
bench batched.log seq4 4
cat "$OUT/batched.log"

for round in $(seq "${ROUNDS:-1}"); do
    bench fusion.log "unfused-$round" 1 FAK_DECODE_FUSION=0
    bench fusion.log "fused-$round" 1
done
cat "$OUT/fusion.log"
(cd /tmp/bench-json && tar czf "$OUT/bench-json.tgz" ./*.json)

RUN=/tmp/multi-agent-fak
timeout 150 "$BIN/harness" threeway --scenario multi-agent --model "$M27" --arms fak-serve \
    --agents 3 --preamble 2048 --suffix 128 --turns 2 --n-out 32 --no-selftest \
    --model-origin "harness synth --fast-random, seed 0 (random)" --out "$RUN" \
    > /tmp/multi-agent.log 2>&1
echo "== multi-agent (fak-serve): exit $?"
cp /tmp/multi-agent.log "$RUN/" 2>/dev/null
tar czf "$OUT/multi-agent.tgz" -C /tmp multi-agent-fak
grep -E "threeway: fak-serve|rror" /tmp/multi-agent.log | cut -c1-200 | head -20
kill $CLOCKS
