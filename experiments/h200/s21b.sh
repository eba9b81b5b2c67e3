#!/usr/bin/env bash
# Session 2026-12-07 #21, the call after `AGENTS=8 TTFT=0 peers.sh` on the same warm machine
# (llama.cpp's server and batched-bench already built in /tmp/llama, the 27B synth in
# /dev/shm/ttft): ≤ DEADLINE + 5 s.
#   1. issue 21's steps on the Qwen3-8B shape: `SHAPE=8b AGENTS="8 3" TTFT=0 peers.sh` (fak's
#      bench --sequences 8 and llama-batched-bench on the quiet machine, then the multi-agent
#      runs at 8 and 3 agents);
#   2. with the time left (BUDGET_S of abbench), the Q6_K bindings' own split at 8 sequences on
#      the 27B: default (G = 2 for every batched binding) against FAK_MATVEC_SPLIT_Q6=4 (Q6_K's
#      W side, ~3× a Q4_K unit's, decoded twice instead of four times a step of 8) and =1,
#      interleaved; never measured in the model (mvb8 measured only Q6_K unsplit: neutral).
# Prepare: HARNESS_ONLY=1 RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh;
# carry as peers.sh. Files back: peers.sh's (steps.log, batched.log, bench-8b-seq8.json,
# multi-agent.tgz, …) and abbench.sh's (bench.log, bench-json.tgz, clocks.csv).
set -uo pipefail
T0=$SECONDS
cd "$(dirname "$0")/../.."
SHAPE=8b AGENTS=${AGENTS:-8 3} TTFT=0 bash experiments/h200/peers.sh
# abbench.sh's model path for the 27B: the same synth (seed 0, --fast-random, Q4_K_M).
[ -s /dev/shm/ttft/qwen35-27b.gguf ] && ln -sf /dev/shm/ttft/qwen35-27b.gguf /dev/shm/qwen35-27b-q4_k_m.gguf
# DEADLINE (585 s): where the split arms stop (the session's device minutes may be fewer).
left=$((${DEADLINE:-585} - (SECONDS - T0)))
[ "$left" -gt 60 ] || { echo "no time left for the split arms ($left s)"; exit 0; }
SEQS=8 ROUNDS=2 EST_S=40 BUDGET_S=$left ROWS='ffn_down|output |gdn_qkv ' \
    bash experiments/h200/abbench.sh 27b 128 32 default q6s4=FAK_MATVEC_SPLIT_Q6=4 q6s1=FAK_MATVEC_SPLIT_Q6=1
