#!/usr/bin/env bash
# Session 2026-12-07 #23, the last call (≤ ~75 s of command: the session's device minutes went
# to failed starts): s23b's 8B A/B cut to one round — the 8B at 8 sequences, default against
# c4096 (FAK_MATVEC_SHORT_MIN_COLS=4096: the 4096-column products and the head in 64/4/1, the
# default splits) and c4096s4 (the same in 64/4/1/split4), while BUDGET_S (55) lasts.
# Prepare and carry: as s23b.sh. Returns steps.log, bench.log, bench-json.tgz, clocks.csv.
set -uo pipefail
T0=$SECONDS
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
SEQS=8 ROUNDS=1 EST_S=14 BUDGET_S=${BUDGET_S:-55} bash experiments/h200/abbench.sh 8b 128 32 \
    default c4096=FAK_MATVEC_SHORT_MIN_COLS=4096 \
    "c4096s4=FAK_MATVEC_SHORT_MIN_COLS=4096;FAK_MATVEC_SHORT_LAYOUT=64/4/1/split4"
echo "[$((SECONDS - T0)) s] abbench 8b: exit $?" | tee -a "$OUT/steps.log"
