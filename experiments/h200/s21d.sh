#!/usr/bin/env bash
# Session 2026-12-07 #21: one device call (≤ DEADLINE, 590 s) for what the session owed, when
# failed starts left too few device minutes for separate calls. A call returns about eight files
# at most: steps.log, synth.log, tests.log and multi-agent.tgz did not come back from its run
# (pack results into fewer files when reusing it):
#   0 s   llama.cpp's CUDA build starts (llama-server, llama-batched-bench; llama-build.sh, nice'd);
#         the 27B and 8B synth files (Q4_K_M --fast-random, seed 0) into /dev/shm/ttft;
#         while it builds, the prune's suites on NVIDIA (untimed: lavapipe cannot run the
#         cooperative-matrix kernels whose WGSL lost the removed forms' paths) → tests.log;
#   then, the machine quiet, per shape (27B, then 8B): fak's `bench --sequences 8` at depth 128
#         and llama-batched-bench on the same file (-npp 128 -ntg 64 -npl 1,4,8, -fa on): issue
#         21's aggregate decode at 8 sequences, like for like (#20's 27B run had fak beside the
#         compiler) → batched.log, bench-<shape>-seq8.json;
#   then  issue 21's multi-agent scenario on the 8B (never run on that shape): 8 agents, then 3,
#         fak-serve against llama.cpp, each with its prefix cache on and off, 2048 + 128, 2 turns,
#         32 out → multi-agent.tgz;
#   then  with the time left, the Q6_K bindings' own split at 8 sequences on the 27B (abbench.sh:
#         default, FAK_MATVEC_SPLIT_Q6=4, =1, interleaved) → bench.log.
# Prepare: RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh gpu_attn_prefill
# gpu_gated_delta gpu_matvec model_qwen35 model_qwen3; carry target/h200/{bin.txz, gl, built-at,
# commit, llama-src.tgz} (experiments/h200/carry-room.sh out first).
set -uo pipefail
T0=$SECONDS
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
DEADLINE=${DEADLINE:-590}
log() { echo "[$((SECONDS - T0)) s] $*" | tee -a "$OUT/steps.log"; }
left() { echo $((DEADLINE - (SECONDS - T0))); }
export LLAMA_TARGETS=llama-batched-bench
source experiments/h200/llama-build.sh
LLAMA_BUILD=$!
MODELS=/dev/shm/ttft
mkdir -p "$MODELS"
declare -A ARCH=([27b]=qwen35 [8b]=qwen3) PRESET=([27b]=qwen35-27b [8b]=qwen3-8b)
for shape in 27b 8b; do
    "$BIN/harness" synth --arch "${ARCH[$shape]}" --preset "${PRESET[$shape]}" --quant q4_k_m \
        --seed 0 --fast-random --out "$MODELS/${PRESET[$shape]}.gguf" >> "$OUT/synth.log" 2>&1
    log "${PRESET[$shape]} synth: exit $?"
done

tests "gpu_attn_prefill" 100 gpu gpu_attn_prefill::
tests "gpu_gated_delta" 50 gpu gpu_gated_delta::
tests "gpu_matvec" 100 gpu gpu_matvec::
tests "model int-dot and prefill" 90 model model_qwen35::int_dot model_qwen35::a_prefill_split \
    model_qwen35::prefill_then_decode model_qwen3::int_dot model_qwen3::q4_k_m_greedy
log "tests done"
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"

wait $LLAMA_BUILD
BB=/tmp/llama/llama.cpp/build/bin/llama-batched-bench
[ -x "$LS" ] && [ -x "$BB" ] || { log "llama.cpp NOT built"; tail -5 "$OUT/llama-build.log"; exit 1; }
log "llama.cpp built"
for shape in 27b 8b; do
    model=$MODELS/${PRESET[$shape]}.gguf
    timeout 120 "$BIN/harness" bench --model "$model" --depths 128 --n-out 64 --sequences 8 \
        --profile-steps 1 --suffix 0 --probe-mib 256 --json-out "$OUT/bench-$shape-seq8.json" \
        > /tmp/bench-seq8.log 2>&1
    log "$shape fak bench --sequences 8: exit $?"
    echo "== $shape" >> "$OUT/batched.log"
    grep -E "^depth 128(:| batched)" /tmp/bench-seq8.log | cut -c1-200 | tee -a "$OUT/batched.log"
    timeout 100 "$BB" -m "$model" -ngl 99 -fa on -c 16384 -b 2048 -ub 512 -npp 128 -ntg 64 \
        -npl 1,4,8 > /tmp/batched-bench.log 2>&1
    log "$shape llama-batched-bench: exit $?"
    grep -E "^\|" /tmp/batched-bench.log | tee -a "$OUT/batched.log"
done

for agents in 8 3; do
    cap=$(($(left) - 10))
    [ "$cap" -gt 60 ] || { log "multi-agent 8b $agents agents: SKIPPED ($(left) s left)"; continue; }
    [ "$cap" -le 200 ] || cap=200
    RUN=/tmp/multi-agent-8b-$agents
    timeout "$cap" "$BIN/harness" threeway --scenario multi-agent --model "$MODELS/qwen3-8b.gguf" \
        --arms fak-serve,llama.cpp --agents "$agents" --preamble 2048 --suffix 128 --turns 2 \
        --n-out 32 --llama-server "$LS" --flash-attn on --no-selftest \
        --model-origin "harness synth --fast-random, seed 0 (random)" \
        --out "$RUN" > /tmp/multi-agent.log 2>&1
    log "multi-agent 8b $agents agents: exit $? (cap $cap s)"
    "$BIN/harness" validate "$RUN/packet.json" >> /tmp/multi-agent.log 2>&1
    "$BIN/harness" report "$RUN/packet.json" >> /tmp/multi-agent.log 2>&1
    cp /tmp/multi-agent.log "$RUN/" 2>/dev/null
    grep -iE "ttft|turn|error" /tmp/multi-agent.log | cut -c1-200 | head -20
    (cd /tmp && tar czf "$OUT/multi-agent.tgz" multi-agent-8b-*)
done

# abbench.sh's 27B path: the same synth (seed 0, --fast-random, Q4_K_M).
ln -sf "$MODELS/qwen35-27b.gguf" /dev/shm/qwen35-27b-q4_k_m.gguf
budget=$(($(left) - 5))
if [ "$budget" -gt 45 ]; then
    SEQS=8 ROUNDS=2 EST_S=40 BUDGET_S=$budget ROWS='ffn_down|output |gdn_qkv ' \
        bash experiments/h200/abbench.sh 27b 128 32 default q6s4=FAK_MATVEC_SPLIT_Q6=4 \
        q6s1=FAK_MATVEC_SPLIT_Q6=1
fi
log "done"
