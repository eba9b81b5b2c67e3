#!/usr/bin/env bash
# One device call (nvidia-h200, ~8–9 min wall): the llama.cpp peer measurements of issues 20 and
# 21 on the Qwen3.5-27B hybrid (and 8B) shapes (Q4_K_M --fast-random, seed 0), with llama.cpp's
# CUDA build made here (llama-server and llama-batched-bench, sm_90, ~3 min, nice'd):
#   1. after llama.cpp builds (the machine quiet): `harness bench --sequences 8` at depth 128: fak's
#      single-sequence decode and 8 sequences decoding together (aggregate tok/s; issue 21's
#      "aggregate decode at 8 ≥ llama.cpp's");
#   2. llama-batched-bench on the same file (-npp 128 -ntg 64 -npl 1,4,8, flash attention on):
#      its S_TG aggregate at 1, 4 and 8 sequences;
#   3. issue 21's multi-agent target: `harness threeway --scenario multi-agent` with fak-serve
#      and llama.cpp (each with its prefix cache on and off), 3 agents arriving together, 2048-token
#      preamble + 128 own tokens, 2 turns, 32 out; the fak-serve arm's queue bucket (TTFT − the
#      server's own prompt_ms) is the server's overhead over its engine;
#   4. issue 20 §1: llama-ttft.sh on the models made here (the llama.cpp arm's TTFT against a
#      plain client, envelope flags vs llama.cpp's defaults, both shapes).
# AGENTS (default "3"): the multi-agent runs of step 3, one per count in the list, each under
#   its own 240 s cap (issue 21 names 3 and 8: `AGENTS="8 3" TTFT=0` took 549 s in #20's call
#   with step 1 beside the build; with it after the build, ~610 s: past one call's 600, so
#   `AGENTS=8` in one call and the 3-agent run in the next); TTFT=0 skips step 4.
# Prepare: HARNESS_ONLY=1 RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh
# carry ["target/h200/bin.txz", "target/h200/gl", "target/h200/built-at", "target/h200/commit"]
# and llama.cpp's source: since the tree passed ~48 MB it no longer fits beside them — make
# acceptance call A0 first (prepare-acceptance.sh's target/acc-a0: it leaves the source in
# /tmp/accept-src, where llama-build.sh finds it) and this call right after it.
# SHAPE (default 27b): the model of steps 1–3, the Qwen3.5-27B hybrid (27b) or the Qwen3-8B
#   (8b: issue 21's targets name both shapes).
# Files back: steps.log, llama-build.log, synth.log, batched.log, bench-<SHAPE>-seq8.json,
# multi-agent.tgz, ttft-runs.tgz, gpu.csv.
set -uo pipefail
T0=$SECONDS
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
log() { echo "[$((SECONDS - T0)) s] $*" | tee -a "$OUT/steps.log"; }
export LLAMA_TARGETS=llama-batched-bench
source experiments/h200/llama-build.sh
LLAMA_BUILD=$!
export MODELS=/dev/shm/ttft
mkdir -p "$MODELS"
SHAPE=${SHAPE:-27b}
case $SHAPE in
    27b) ARCH=qwen35 PRESET=qwen35-27b ;;
    8b) ARCH=qwen3 PRESET=qwen3-8b ;;
    *) log "SHAPE=$SHAPE: 27b or 8b"; exit 2 ;;
esac
MODEL=$MODELS/$PRESET.gguf
{ time "$BIN/harness" synth --arch "$ARCH" --preset "$PRESET" --quant q4_k_m --seed 0 \
    --fast-random --out "$MODEL"; } > "$OUT/synth.log" 2>&1
log "$PRESET synth: exit $?"

wait $LLAMA_BUILD
BB=/tmp/llama/llama.cpp/build/bin/llama-batched-bench
[ -x "$LS" ] && [ -x "$BB" ] || { log "llama.cpp NOT built"; tail -5 "$OUT/llama-build.log"; exit 1; }
log "llama.cpp built"
# On the quiet machine, as llama-batched-bench: until 2026-12-07 #20 this ran beside the
# compiler (that call: 268.8 tok/s against #19's 278.8, on a GPU-bound step).
timeout 150 "$BIN/harness" bench --model "$MODEL" --depths 128 --n-out 64 --sequences 8 \
    --profile-steps 1 --suffix 0 --probe-mib 256 --json-out "$OUT/bench-$SHAPE-seq8.json" \
    > /tmp/bench-seq8.log 2>&1
log "fak bench --sequences 8: exit $?"
grep -E "^depth 128(:| batched)" /tmp/bench-seq8.log | cut -c1-200 | tee "$OUT/batched.log"
for fa in "-fa on" "-fa 1"; do
    timeout 150 "$BB" -m "$MODEL" -ngl 99 $fa -c 16384 -b 2048 -ub 512 -npp 128 -ntg 64 -npl 1,4,8 \
        > /tmp/batched-bench.log 2>&1 && break
done
log "llama-batched-bench: exit $?"
grep -E "^\|" /tmp/batched-bench.log | tee -a "$OUT/batched.log"

for agents in ${AGENTS:-3}; do
    RUN=/tmp/multi-agent-$SHAPE-$agents
    timeout 240 "$BIN/harness" threeway --scenario multi-agent --model "$MODEL" \
        --arms fak-serve,llama.cpp --agents "$agents" --preamble 2048 --suffix 128 --turns 2 \
        --n-out 32 --llama-server "$LS" --flash-attn on --no-selftest \
        --model-origin "harness synth --fast-random, seed 0 (random)" \
        --out "$RUN" > /tmp/multi-agent.log 2>&1
    log "multi-agent $agents agents: exit $?"
    "$BIN/harness" validate "$RUN/packet.json" >> /tmp/multi-agent.log 2>&1
    "$BIN/harness" report "$RUN/packet.json" >> /tmp/multi-agent.log 2>&1
    cp /tmp/multi-agent.log "$RUN/" 2>/dev/null
    grep -iE "ttft|turn|queue|error" /tmp/multi-agent.log | cut -c1-200 | head -30
    # After each run: a call cut at its limit still brings back the runs it finished.
    (cd /tmp && tar czf "$OUT/multi-agent.tgz" multi-agent-"$SHAPE"-*)
done

[ "${TTFT:-1}" = 0 ] || bash experiments/h200/llama-ttft.sh
log "done"
