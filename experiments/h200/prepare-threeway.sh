#!/usr/bin/env bash
# Run here (not on the device) before the three-arm sequence: makes the folders the calls carry,
# each a copy of experiments/h200 plus what that call needs, sized so that each fits one call's
# 64 MiB together with the session checkout's working tree (kept under 62 MiB here).
#
#   target/h3w-run/  the threeway.sh call(s): target/h200/{gl/, bin.txz, llama-src.tgz, commit,
#                    built-at} (prepare.sh with HARNESS_ONLY=1) and target/h200-mlx/{SHA256SUMS
#                    of the three whole wheels, BIG, PARTS, and the mlx-cuda-13 wheel's last
#                    parts where they fit}
#   target/h3w-1/ … target/h3w-K/  one mlx-part.sh call each: one part of the mlx-cuda-13 wheel
#                    (89.8 MB), copied to /tmp/mlx-parts on the device; the mlx and mlx-lm
#                    wheels (1.3 MB) go with the last part call, which has room
#
# The part size is what a call has left beside the tree (PART_MIB overrides it): with the
# 23 MiB tree of 2026-12-04 that was two part calls, with the 44.3 MiB tree of 2026-12-05 it is
# five (17 MiB parts) and the run folder takes the last. The calls, in order, are printed at the
# end: the part calls, then threeway.sh (README: "Three-arm packet" and "The headline").
#
# The wheels come from PyPI (pip download, cp312 manylinux_2_35: the device's Python 3.12).
# CHECKOUT (default /work/main, the checkout the run tool sends) is the tree measured.
# RELEASE_TARGET_DIR as for prepare.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
CHECKOUT=${CHECKOUT:-/work/main}
readonly MIB=1048576 LIMIT=$((62 * 1048576))
M=target/h200-mlx
mkdir -p "$M/wheels"
WHEELS=(mlx==0.32.4 mlx-cuda-13==0.32.4 mlx-lm==0.32.2)
if [ "$(ls "$M"/wheels/*.whl 2>/dev/null | wc -l)" != 3 ]; then
    pip download --no-deps --python-version 3.12 --platform manylinux_2_35_x86_64 \
        --only-binary=:all: -d "$M/wheels" "${WHEELS[@]}"
fi
big=$(cd "$M/wheels" && ls mlx_cuda_13-*.whl)
(cd "$M/wheels" && sha256sum -- *.whl > ../SHA256SUMS)
echo "$big" > "$M/BIG"

HARNESS_ONLY=1 experiments/h200/prepare.sh

tree_bytes=$(cd "$CHECKOUT" && { git ls-files; git ls-files -o --exclude-standard; } |
    tr '\n' '\0' | xargs -0 du -cb 2>/dev/null | awk '/\ttotal$/ {s += $1} END {print s}')
folder() { # a call's folder: the scripts, and the mlx folder
    rm -rf "$1" && mkdir -p "$1/experiments/h200" "$1/$M"
    cp experiments/h200/*.sh "$1/experiments/h200/"
}
rm -rf target/h3w-[0-9]*
folder target/h3w-run
mkdir -p target/h3w-run/target/h200
cp -r target/h200/gl target/h200/bin.txz target/h200/llama-src.tgz target/h200/commit \
    target/h200/built-at target/h3w-run/target/h200/
cp "$M"/SHA256SUMS "$M"/BIG target/h3w-run/$M/

# Each part call carries the scripts (~0.2 MiB) and one part.
scripts=$(du -sb experiments/h200/*.sh | awk '{s += $1} END {print s}')
PART_MIB=${PART_MIB:-$(((LIMIT - tree_bytes - scripts) / MIB - 1))}
[ "$PART_MIB" -gt 0 ] || { echo "the tree leaves no room for a part: trim it" >&2; exit 1; }
rm -f "$M"/*.part*
split -b "${PART_MIB}M" -d -a 2 "$M/wheels/$big" "$M/$big.part"
parts=$(ls "$M/$big".part* | wc -l)
echo "$parts" > "$M/PARTS"
cp "$M/PARTS" target/h3w-run/$M/
# The split joins back to the wheel (what threeway.sh checks on the device).
cat "$M/$big".part* | sha256sum | grep -q "$(grep "  $big\$" "$M/SHA256SUMS" | cut -d' ' -f1)" ||
    { echo "the parts do not join to $big" >&2; exit 1; }
# The run folder takes the last parts while it stays within the limit; the rest go one a call.
size() { du -sb "$1" | cut -f1; }
last=$parts
while [ "$last" -gt 0 ]; do
    p=$(printf '%s/%s.part%02d' "$M" "$big" $((last - 1)))
    [ $(($(size target/h3w-run) + $(size "$p") + tree_bytes)) -lt "$LIMIT" ] || break
    cp "$p" target/h3w-run/$M/
    last=$((last - 1))
done
for ((i = 0; i < last; i++)); do
    folder "target/h3w-$((i + 1))"
    cp "$(printf '%s/%s.part%02d' "$M" "$big" $i)" "target/h3w-$((i + 1))/$M/"
done
# The small wheels: with the last part call (the shortest part) if it has room, else the run.
small=target/h3w-run
[ "$last" -gt 0 ] && [ $(($(size "target/h3w-$last") + 2 * MIB + tree_bytes)) -lt "$LIMIT" ] &&
    small=target/h3w-$last
cp "$M"/wheels/mlx-0*.whl "$M"/wheels/mlx_lm-*.whl "$small/$M/"

echo "== the folders, each with the tree of $CHECKOUT ($(echo "$tree_bytes / $MIB" | bc -l | cut -c1-5) MiB)"
for d in $(ls -d target/h3w-[0-9]* 2>/dev/null | sort -t- -k2 -n) target/h3w-run; do
    total=$(($(size "$d") + tree_bytes))
    printf '%s: %5.1f MiB carried, %5.1f MiB of 64 with the tree\n' "$d" \
        "$(echo "$(size "$d") / $MIB" | bc -l)" "$(echo "$total / $MIB" | bc -l)"
    [ "$total" -lt "$LIMIT" ] || echo "  over 62 MiB: trim the tree" >&2
done
echo "== the calls, back to back (cp -r target/h3w-* $CHECKOUT/target/ first, from a worktree)"
for ((i = 1; i <= last; i++)); do
    echo "cd target/h3w-$i && bash experiments/h200/mlx-part.sh    carry [\"target/h3w-$i\"]"
done
echo "cd target/h3w-run && [PRESET=… PHASE=prepare] bash experiments/h200/threeway.sh    carry [\"target/h3w-run\"]"
