#!/usr/bin/env bash
# Call A of the acceptance run of issues 18 (decode) and 19 (prefill): fak against llama.cpp CUDA
# on the same files in one call, on the Qwen3-8B and Qwen3.5-27B shapes (Q4_K_M, `harness synth
# --fast-random --seed 0`, in /dev/shm). Call B (acceptance-vulkan.sh) is the same-API anchor.
#
# Timeline (STEPS, comma-separated, picks the kinds: default all four):
#   0 s      llama.cpp CUDA build starts (llama-server + llama-bench, sm_90, nice'd, pinned to all
#            CPUs but 0-1, ~3-5 min: llama-build.sh); the models are written (~20 s);
#            `harness selftest` once (~60 s, not timed), reused by both packets (--selftest-json)
#   bench    while it builds, pinned to CPUs 0-1: `harness bench` at depths 128,2048 on the 27B,
#            then the 8B, then at 8192 on each if the compiler still runs (else at the very end;
#            one capped process per group; decode ms/token, dispatches, roofline, per-op GB/s,
#            prefill chunks and TFLOP/s); after the build a control on the quiet machine (8B,
#            depth 128) says what the compiler beside it cost (summary.md: during vs quiet)
#   packets  after the build, nothing else running: `harness threeway` fak-native + llama.cpp
#            (llama-server CUDA, the envelope's flags, -fa on), 20 prompts × 128 in / 64 out,
#            1 quality prompt, on the 8B, then the 27B → two packets
#   llama-bench  `llama-bench -p 128,2048 -n 64 -ub 512 -fa 1 -r 10` on the 27B, then the 8B
#   depth    `llama-bench -p 0 -n 64 -d 2048,8192 -fa 1 -r 3` on the 27B, then the 8B (beside
#            bench's depths; 3 repetitions: 8192 tokens of context are refilled every one)
# Each step starts only if the time it needs is left before DEADLINE (560 s); a skipped step is
# named in steps.log and summary.md. Expected wall: ~530 s (build ~280 s; afterwards the control
# 20, packets 45 + 100, llama-bench 27 + 10, depth 32 + 10). Split over two calls, each stands
# alone (it builds and writes what it needs; a warm machine's build and models are reused):
# STEPS=packets,llama-bench (~460 s) then STEPS=bench,depth (~380 s bare, ~200 s warm).
#
# Carry (experiments/h200/prepare-acceptance.sh stages it): target/h200/{gl, bin.txz (harness
# alone), commit, built-at}, llama.cpp's source with call A0 right before (accept-vk-part.sh, into
# /tmp/accept-src; a carried target/h200/llama-src.txz serves too); the Vulkan server's parts
# travel with calls B0 and B.
# Files back ($OUT): steps.log, summary.md, clocks.csv, gpu.csv, llama-build.log, synth.log,
# acceptance.tgz (the run folders → experiments/benchmark/runs/by-machine/nvidia-h200/, the bench
# JSONs and logs, the llama-bench JSONL, the selftest, the call's logs).
set -uo pipefail
ACCEPT_CALL="acceptance call A (CUDA)"
source "$(dirname "$0")/accept-lib.sh"
STEPS=${STEPS:-bench,packets,llama-bench,depth}
has() { [[ ",$STEPS," == *",$1,"* ]]; }
stage_vk_part   # a part of the Vulkan server for call B, when one is carried (accept-lib.sh)

# The compiler on every CPU but 0-1, fak's bench on those two.
FAK_PIN=()
if [ "$(nproc)" -ge 8 ] && command -v taskset > /dev/null; then
    export LLAMA_TASKSET=2-$(($(nproc) - 1)) LLAMA_JOBS=$(($(nproc) - 2))
    FAK_PIN=(taskset -c 0-1)
fi
clocks_start
LLAMA_BUILD=
if has packets || has llama-bench || has depth; then
    export LLAMA_TARGETS=llama-bench
    source experiments/h200/llama-build.sh
    LLAMA_BUILD=$!
    log "llama.cpp build started (CPUs ${LLAMA_TASKSET:-all}, ${LLAMA_JOBS:-16} jobs)"
fi
LB=$LLAMA_DIR/llama.cpp/build/bin/llama-bench
synth_models

SELFTEST=(--no-selftest)
if has packets && begin selftest 90 150; then
    "${TIMEOUT[@]}" "$BIN/harness" selftest --json --out "$WORK/selftest.json" > "$WORK/selftest.log" 2>&1
    end $?
    [ -s "$WORK/selftest.json" ] && SELFTEST=(--selftest-json "$WORK/selftest.json")
    log "selftest: $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("pass" if r["pass"] else "FAILED", "force:", r.get("force") or "none")' "$WORK/selftest.json" 2> /dev/null || echo 'no result: the packets say it was skipped')"
fi

# fak's decode and prefill profile at the issues' depths (bench JSON per shape and phase).
# One process per depth group, each capped, so a slow one loses only its own depths and cannot
# hold the packets back (bench writes its JSON at the end). Its phase: during the build (pinned
# away from the compiler) or quiet.
building() { [ -n "$LLAMA_BUILD" ] && kill -0 "$LLAMA_BUILD" 2> /dev/null; }
fak_bench() { # label depths need cap
    local phase=quiet
    building && phase=during-build
    local m=$MODELS/$1.gguf name=$1-$phase-d${2//,/-}
    begin "bench $1 $phase ($2)" "$3" "$4" || return
    "${TIMEOUT[@]}" "${FAK_PIN[@]}" "$BIN/harness" bench --model "$m" --depths "$2" --n-out 64 \
        --json-out "$WORK/bench/bench-$name.json" > "$WORK/bench/bench-$name.log" 2>&1
    end $?
}
mkdir -p "$WORK/bench" "$WORK/llama-bench"
M8=$(label "${SHAPES[0]}") M27=$(label "${SHAPES[1]}")
# Depths 128 and 2048 (issue 19's) first; 8192 while the compiler still runs, else after
# everything else.
DEFERRED=()
if has bench; then
    fak_bench "$M27" 128,2048 60 120
    fak_bench "$M8" 128,2048 30 60
    for g in "$M27 8192 50 100" "$M8 8192 25 60"; do
        if building; then fak_bench $g; else DEFERRED+=("$g"); fi
    done
fi

if [ -n "$LLAMA_BUILD" ]; then
    wait "$LLAMA_BUILD"
    log "llama.cpp build: $(grep -E '^real' "$OUT/llama-build.log" | tail -1 | tr '\t' ' ' | grep . || echo 'none needed'); llama-server $([ -x "$LS" ] && echo built || echo 'NOT built'), llama-bench $([ -x "$LB" ] && echo built || echo 'NOT built')"
fi
has bench && fak_bench "$M8" 128 20 45

if has packets && [ -x "$LS" ]; then
    for m in "$M8 45 100" "$M27 110 200"; do # model need cap
        set -- $m
        begin "threeway $1" "$2" "$3" || continue
        threeway_packet "$1" "$MODELS/$1.gguf" --arms fak-native,llama.cpp \
            --llama-server "$LS" --prompts 20 --n-ctx 128 --n-out 64 --quality-prompts 1 "${SELFTEST[@]}"
        end $?
    done
fi

# llama-bench on the same files: -o jsonl keeps every finished test if the deadline stops it.
llama_bench() { # label kind need cap args...
    local m=$MODELS/$1.gguf name=$1-$2 need=$3 cap=$4
    shift 4
    begin "llama-bench $name" "$need" "$cap" || return
    "${TIMEOUT[@]}" "$LB" -m "$m" -ngl 99 -fa 1 -o jsonl "$@" \
        > "$WORK/llama-bench/$name.jsonl" 2> "$WORK/llama-bench/$name.log"
    end $?
}
if [ -x "$LB" ]; then
    if has llama-bench; then
        llama_bench "$M27" pp-tg 30 60 -p 128,2048 -n 64 -ub 512 -r 10
        llama_bench "$M8" pp-tg 12 30 -p 128,2048 -n 64 -ub 512 -r 10
    fi
    if has depth; then
        llama_bench "$M27" depth 35 70 -p 0 -n 64 -d 2048,8192 -ub 512 -r 3
        llama_bench "$M8" depth 12 30 -p 0 -n 64 -d 2048,8192 -ub 512 -r 3
    fi
fi

for g in "${DEFERRED[@]+"${DEFERRED[@]}"}"; do fak_bench $g; done

summarize_bench > "$WORK/summary-bench.md"
pack acceptance
