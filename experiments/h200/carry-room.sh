#!/usr/bin/env bash
# Room in a device call's carry: the run tool sends the checkout's working tree (~49 MiB since
# 2026-12-06) beside what `carry` names, 62 MiB in all, and a tracked file missing from the
# working tree is not sent. No device suite reads the vocabulary fixtures at run time (the
# harness embeds the two it needs with include_bytes!; the tokenizer and gguf suites, which read
# them, run in CI), so a call that needs the room can go without them:
#   experiments/h200/carry-room.sh out    moves tests/fixtures/vocab/*.gguf (~19.7 MB) to $STASH
#   experiments/h200/carry-room.sh back   puts them back (do it right after the call)
#   experiments/h200/carry-room.sh size   the file bytes a call carrying target/h200 would send
# While they are out, a pre-commit hook (installed by `out`) refuses commits, so their absence
# cannot be committed by mistake.
set -euo pipefail
cd "$(dirname "$0")/../.."
STASH=${STASH:-/work/carry-stash}
MARK=target/carry-room.out
HOOK=$(git rev-parse --git-path hooks)/pre-commit
case ${1:-size} in
    out)
        mkdir -p "$STASH" target
        for f in tests/fixtures/vocab/*.gguf; do mv "$f" "$STASH/"; done
        echo "$STASH" > "$MARK"
        mkdir -p "$(dirname "$HOOK")"
        printf '#!/bin/sh\n[ ! -e %s ] || { echo "carry-room.sh: fixtures are out; run carry-room.sh back" >&2; exit 1; }\n' \
            "$PWD/$MARK" > "$HOOK"
        chmod +x "$HOOK"
        ;;
    back)
        [ -e "$MARK" ] || { echo "carry-room.sh: nothing is out"; exit 0; }
        mv "$(cat "$MARK")"/*.gguf tests/fixtures/vocab/
        rm "$MARK"
        git status --short tests/fixtures
        ;;
    size) ;;
    *) echo "usage: carry-room.sh out|back|size" >&2; exit 2 ;;
esac
{ git ls-files -co --exclude-standard | while read -r f; do [ -e "$f" ] && printf '%s\0' "$f"; done
  find target/h200/bin.txz target/h200/gl target/h200/built-at target/h200/commit -type f -print0 2> /dev/null
} | xargs -0 du -cb | awk '/\ttotal$/ {s += $1} END {printf "tree + target/h200 carry: %.1f MiB of ~61.5\n", s / 1048576}'
