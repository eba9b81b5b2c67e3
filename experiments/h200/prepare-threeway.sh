#!/usr/bin/env bash
# Run here (not on the device) before the three-arm sequence: makes the three folders the three
# calls carry, each a copy of experiments/h200 plus what that call needs, sized to fit one call's
# 64 MiB together with the session checkout's working tree.
#
#   target/h3w-1/  call 1 (mlx-part.sh): target/h200-mlx/<mlx-cuda-13 wheel>.part0
#   target/h3w-2/  call 2 (mlx-part.sh): target/h200-mlx/<mlx-cuda-13 wheel>.part1
#   target/h3w-3/  call 3 (threeway.sh): target/h200/{gl/, bin.txz, llama-src.tgz, commit}
#                  (prepare.sh with HARNESS_ONLY=1) and target/h200-mlx/{part2, the mlx and
#                  mlx-lm wheels, SHA256SUMS of the three whole wheels, BIG, PARTS}
#
# The wheels come from PyPI (pip download, cp312 manylinux_2_35: the device's Python 3.12);
# the 89.8 MB mlx-cuda-13 one is split into PART_MIB-MiB parts (default 34: 35.7 + 35.7 + 18.4
# MB). Then it prints each folder's size with the working tree of CHECKOUT (default /work/main,
# the checkout the run tool sends). RELEASE_TARGET_DIR as for prepare.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
CHECKOUT=${CHECKOUT:-/work/main}
PART_MIB=${PART_MIB:-34}
M=target/h200-mlx
mkdir -p "$M/wheels"
WHEELS=(mlx==0.32.4 mlx-cuda-13==0.32.4 mlx-lm==0.32.2)
if [ "$(ls "$M"/wheels/*.whl 2>/dev/null | wc -l)" != 3 ]; then
    pip download --no-deps --python-version 3.12 --platform manylinux_2_35_x86_64 \
        --only-binary=:all: -d "$M/wheels" "${WHEELS[@]}"
fi
big=$(cd "$M/wheels" && ls mlx_cuda_13-*.whl)
(cd "$M/wheels" && sha256sum -- *.whl > ../SHA256SUMS)
rm -f "$M"/*.part*
split -b "${PART_MIB}M" -d -a 1 "$M/wheels/$big" "$M/$big.part"
echo "$big" > "$M/BIG"
ls "$M/$big".part* | wc -l > "$M/PARTS"
# The split joins back to the wheel (what threeway.sh checks on the device).
cat "$M/$big".part* | sha256sum | grep -q "$(grep "  $big\$" "$M/SHA256SUMS" | cut -d' ' -f1)" ||
    { echo "the parts do not join to $big" >&2; exit 1; }

HARNESS_ONLY=1 experiments/h200/prepare.sh

for n in 1 2 3; do
    d=target/h3w-$n
    rm -rf "$d" && mkdir -p "$d/experiments/h200" "$d/$M"
    cp experiments/h200/*.sh "$d/experiments/h200/"
done
cp "$M/$big.part0" target/h3w-1/$M/
cp "$M/$big.part1" target/h3w-2/$M/
mkdir -p target/h3w-3/target/h200
cp -r target/h200/gl target/h200/bin.txz target/h200/llama-src.tgz target/h200/commit \
    target/h200/built-at target/h3w-3/target/h200/
cp "$M"/$big.part[2-9] "$M"/SHA256SUMS "$M"/BIG "$M"/PARTS target/h3w-3/$M/
cp "$M"/wheels/mlx-0*.whl "$M"/wheels/mlx_lm-*.whl target/h3w-3/$M/

tree_bytes=$(cd "$CHECKOUT" && { git ls-files; git ls-files -o --exclude-standard; } |
    tr '\n' '\0' | xargs -0 du -cb 2>/dev/null | awk '/\ttotal$/ {s += $1} END {print s}')
for n in 1 2 3; do
    carry=$(du -sb target/h3w-$n | cut -f1)
    total=$((carry + tree_bytes))
    printf 'target/h3w-%s: %5.1f MiB carried + %5.1f MiB tree (%s) = %5.1f MiB of 64\n' "$n" \
        "$(echo "$carry / 1048576" | bc -l)" "$(echo "$tree_bytes / 1048576" | bc -l)" "$CHECKOUT" \
        "$(echo "$total / 1048576" | bc -l)"
    [ "$total" -lt $((62 * 1048576)) ] || echo "  over 62 MiB: lower PART_MIB or trim the tree" >&2
done
