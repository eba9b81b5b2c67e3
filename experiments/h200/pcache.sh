#!/usr/bin/env bash
# pcache (2026-12-07 #23, helper; issue 21's prefix cache; ≤ 120 s, tests only: `multi.sh
# pcache:120` beside another call's scripts): a hybrid model's state where a sequence stopped
# part-way into a page now stays in the tree beside whichever cached page holds those tokens (a
# longer tail, a tail that replaced the stop's, a child's first page: `tail_states` in
# engine/cache/radix.rs), so the next turn resumes at the stop (#22's probe resumed at 64, not
# 102). Nothing to time: the change is host bookkeeping (one scan of a node's tail states per
# node a lookup walks), predicted not measurable in any step.
# Tests on NVIDIA → tests.log: serving's prefix_cache file whole (the new
# {dense,hybrid}_next_turn_resumes_where_its_conversation_stopped hold the resumed turn's
# first-token logits bit for bit to an engine whose cache held the stop alone; on lavapipe they
# pass), and batch_invariance's next-turn and in-flight tests (resumes off the chunk grid, the
# stop token's state kept).
# Prepare: RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh prefix_cache \
#   batch_invariance; carry target/h200/{bin.txz, gl, built-at, commit}.
set -uo pipefail
T0=$SECONDS
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
tests "prefix_cache (the whole file)" 80 serving prefix_cache::
tests "batch_invariance next turns and steps in flight" 35 serving \
    batch_invariance::dense_next_turn batch_invariance::hybrid_next_turn \
    batch_invariance::hybrid_decode_steps batch_invariance::dense_decode_steps
grep -E "^==|test result|FAILED|panicked" "$OUT/tests.log"
