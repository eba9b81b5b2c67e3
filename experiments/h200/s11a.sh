#!/usr/bin/env bash
# The first device call of 2026-12-06 #11 (an H100 or H200, ~8 min wall; no tests: every form
# here passed its tests on NVIDIA in session #10's calls): what #10 left untimed, through
# abbench.sh (one folder and archive a part, each under its own wall limit):
#   1. decode27 — the Qwen3.5-27B at depth 128, 32 tokens out: the defaults, pqz's
#      FAK_DECODE_FUSE=pquant, ropekv's rope alone (never timed), merge,rope,pquant (cut by #10's
#      130 s cap), two rounds interleaved (~30 s a bench);
#   2. decode8 — the Qwen3-8B likewise: defaults, rope, pquant, merge,rope,pquant;
#   3. gdnchunk — the 27B's 64/128/2048-token prefill, gated_delta_chunk's row: the default form
#      against gdnchunk's `deep` and `ahead` alone (both together lost 70.4 → 81.9 ms), one round.
# Prepare: RELEASE_TARGET_DIR=/work/targets/rel experiments/h200/prepare.sh gpu_matvec (any build
# with the harness), staged as target/<dir>; run `cd target/<dir> && bash experiments/h200/s11a.sh`,
# carry ["target/<dir>"]. Files back: decode27.tgz, decode8.tgz, gdnchunk.tgz, gpu.csv, steps.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=${OUT:-/tmp/fak-out}
mkdir -p "$ROOT"
T0=$SECONDS
part() { # part NAME LIMIT_S [VAR=value...] -- abbench.sh arguments
    local name=$1 limit=$2
    shift 2
    local vars=()
    while [ "$1" != -- ]; do vars+=("$1"); shift; done
    shift
    echo "[$((SECONDS - T0)) s] $name (limit $limit s)" | tee -a "$ROOT/steps.log"
    rm -rf "/tmp/s11a/$name" && mkdir -p "/tmp/s11a/$name"
    env "${vars[@]}" OUT="/tmp/s11a/$name" timeout -k 5 "$limit" bash experiments/h200/abbench.sh "$@" \
        > "/tmp/s11a/$name/stdout.log" 2>&1
    echo "[$((SECONDS - T0)) s] $name exit $?" | tee -a "$ROOT/steps.log"
    pkill -f /tmp/fak/bin/ 2> /dev/null
    pkill nvidia-smi 2> /dev/null
    tail -20 "/tmp/s11a/$name/stdout.log" | cut -c1-200
    (cd /tmp/s11a && tar czf "$ROOT/$name.tgz" "$name")
}
part decode27 250 BUDGET_S=240 EST_S=32 -- 27b 128 32 default pquant=FAK_DECODE_FUSE=pquant \
    rope=FAK_DECODE_FUSE=rope mrp=FAK_DECODE_FUSE=merge,rope,pquant
part decode8 130 BUDGET_S=125 EST_S=16 -- 8b 128 32 default rope=FAK_DECODE_FUSE=rope \
    pquant=FAK_DECODE_FUSE=pquant mrp=FAK_DECODE_FUSE=merge,rope,pquant
part gdnchunk 110 BUDGET_S=105 EST_S=30 ROUNDS=1 ROWS=' gated_delta ' -- 27b 64,128,2048 8 \
    base deep=FAK_GDN_CHUNK=coop+quads+fused+lean+deep+blocks \
    ahead=FAK_GDN_CHUNK=coop+quads+fused+lean+ahead+blocks
cp /tmp/s11a/decode27/gpu.csv "$ROOT/" 2> /dev/null
