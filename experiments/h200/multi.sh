#!/usr/bin/env bash
# One device call that runs several call scripts one after another, each under a wall limit: for
# a session whose device minutes do not cover a call per script (each call costs a cold start
# when the machine has gone back), or whose scripts share one carried build.
#   bash experiments/h200/multi.sh NAME:SECONDS[:VAR=value,VAR=value] ...
# runs experiments/h200/NAME.sh with OUT=/tmp/multi/NAME and the variables given, stops it at
# SECONDS (leftover binaries and clock loggers are killed before the next), prints its exit and
# the last lines of its output, and packs its folder as $OUT/NAME.tgz: a call returns at most 8
# files, so one archive per script. Every script sources setup.sh itself (the carried bin.txz is
# unpacked once, keyed by its checksum).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=${OUT:-/tmp/fak-out}
mkdir -p "$ROOT"
start=$SECONDS
for spec in "$@"; do
    IFS=: read -r name limit vars <<< "$spec"
    dir=/tmp/multi/$name
    rm -rf "$dir" && mkdir -p "$dir"
    echo "== $name: limit ${limit} s, at $((SECONDS - start)) s${vars:+, $vars}"
    # shellcheck disable=SC2086 # the variables are NAME=value words
    env ${vars//,/ } OUT="$dir" timeout -k 5 "$limit" bash "experiments/h200/$name.sh" \
        > "$dir/stdout.log" 2>&1
    echo "== $name: exit $? at $((SECONDS - start)) s"
    pkill -f /tmp/fak/bin/ 2> /dev/null
    pkill nvidia-smi 2> /dev/null
    tail -30 "$dir/stdout.log" | cut -c1-240
    (cd /tmp/multi && tar czf "$ROOT/$name.tgz" "$name")
done
