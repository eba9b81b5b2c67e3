#!/usr/bin/env bash
# The decode attention's defaults of 2026-12-06 #9 on the Qwen3.5-27B hybrid (4 kv heads: at
# most 64 workgroups a sequence under the 16-split cap; measured only on the 8B's 8 kv heads
# when flipped): the default (the walk ahead, ≤ 16 splits) against the form before it
# (`FAK_ATTN_DECODE=tiles`, `FAK_ATTN_DECODE_SPLITS=64`: no cap) at depths 128 / 2048 / 8192,
# ROUNDS (2) interleaved. Same prepare, files and steps as attn8k.sh (its gpu tests first);
# ~40 s an arm and round on an H100 plus the 27B's synth (~60 s) where no earlier script of the
# call wrote it: `multi.sh attn27k:200`.
ARMS="default: tiles64:FAK_ATTN_DECODE=tiles,FAK_ATTN_DECODE_SPLITS=64" ARCH=qwen35 \
    PRESET=qwen35-27b LIMIT_S=${LIMIT_S:-190} BENCH_TIMEOUT=90 exec bash "$(dirname "$0")/attn8k.sh"
