#!/usr/bin/env bash
# attn8k.sh's second call (2026-12-06 #8, ≤ 150 s wall; `multi.sh attn8k-splits:150`): its first
# round (2026-12-06 #8 call 1) had `ahead` alone losing at depth 8192 (171.4 vs 176.6 tok/s) and
# ahead with at most 16 splits winning at every depth (216.3 / 207.4 / 181.6 vs 207.3 / 197.8 /
# 176.6 at 128 / 2048 / 8192), one round each. This separates the split cap from the walk ahead:
# the default, at most 16 splits, at most 8, and 16 with the walk ahead, two rounds interleaved.
# Same prepare, files and steps as attn8k.sh.
A=FAK_ATTN_DECODE=ahead
S=FAK_ATTN_DECODE_SPLITS
ARMS="default: s16:$S=16 s8:$S=8 ahead-s16:$A,$S=16" LIMIT_S=${LIMIT_S:-140} \
    exec bash "$(dirname "$0")/attn8k.sh"
