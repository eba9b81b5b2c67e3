#!/usr/bin/env bash
# A newer Mesa lavapipe beside the system's, to see whether fak's cooperative-matrix kernels run on
# this CPU machine (experiments/NOTES.md "lavacoop": they do not; this is the recipe to re-check a
# later Mesa). Debian 12 ships 22.3.6, which has no VK_KHR_cooperative_matrix; Mesa 26.1
# (trixie-backports, pinned in lavapipe.pins with the trixie runtime it links) has it with 8×8×8
# matrices only. Nothing is installed system-wide: the pinned .debs are unpacked under $FAK_CACHE.
# The driver needs glibc 2.39 and Debian 12 has 2.36, so a program that loads it runs through
# trixie's dynamic loader with trixie's libraries (`<root>/run PROGRAM ARGS`; `env` makes cargo do
# that for test binaries).
#
#   experiments/lavacoop/fetch-lavapipe.sh                fetch and unpack (once), then probe
#   eval "$(experiments/lavacoop/fetch-lavapipe.sh env)"  point Vulkan and cargo's runner at it
#   experiments/lavacoop/fetch-lavapipe.sh probe          its cooperative-matrix configurations
#   experiments/lavacoop/fetch-lavapipe.sh pins           lavapipe.pins for what Debian has now
#
# `env` sets LP_NATIVE_VECTOR_WIDTH=1024 (FAK_LAVAPIPE_WIDTH overrides): 32-wide subgroups, which
# fak's coop kernels require; Mesa 26.1's coop lowering supports only 8-wide ones (256 bits).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=ci/lib.sh
source "${here}/../../ci/lib.sh"

readonly PINS="${here}/lavapipe.pins"
readonly SUITES=(trixie trixie-backports)
readonly KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
# 32-bit lanes × 32: the subgroup width fak's cooperative-matrix kernels are written for.
readonly VECTOR_WIDTH=${FAK_LAVAPIPE_WIDTH:-1024}

pinned() { grep -v '^#' "${PINS}"; }

# One folder per pins list: a changed list unpacks beside the old one, never over it.
root_dir() {
    local digest
    digest=$(sha256sum "${PINS}" | cut -c1-12)
    echo "${FAK_CACHE}/lavapipe-coop/${digest}"
}

lib_dir() { echo "$(root_dir)/usr/lib/x86_64-linux-gnu"; }

# The Debian mirror this machine's apt already uses, so no host is written down here.
debian_mirror() {
    local codename mirror
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME}")
    mirror=$(apt-get indextargets --format '$(REPO_URI)' "Codename: ${codename}" 'Identifier: Packages' | head -n1)
    [[ -n ${mirror} ]] || die "apt knows no mirror for ${codename}: run apt-get update first"
    echo "${mirror}"
}

# `private_apt DIR apt-get|apt-cache ARGS`: apt with package lists of its own (trixie and
# trixie-backports) under DIR, leaving the system's sources and lists alone; as root throughout
# (its _apt user cannot write under $HOME).
private_apt() {
    local dir=$1 tool=$2
    shift 2
    "${tool}" -o APT::Sandbox::User=root -o Dir::State::Lists="${dir}/lists" -o Dir::Etc::SourceList="${dir}/sources.list" \
        -o Dir::Etc::SourceParts=/dev/null -o Dir::Cache="${dir}/cache" "$@"
}

update_private_lists() {
    local dir=$1 mirror suite
    mirror=$(debian_mirror)
    mkdir -p "${dir}/lists/partial" "${dir}/cache/archives/partial"
    for suite in "${SUITES[@]}"; do
        echo "deb [signed-by=${KEYRING}] ${mirror} ${suite} main"
    done >"${dir}/sources.list"
    private_apt "${dir}" apt-get -q update >/dev/null
}

# The file `apt-get download` writes for a package version (an epoch's colon as %3a).
deb_name() { echo "${1}_${2/:/%3a}_amd64.deb"; }

# The suite a pinned package comes from: the driver from trixie-backports, the rest from trixie.
suite_of() {
    if [[ $1 == mesa-vulkan-drivers ]]; then echo trixie-backports; else echo trixie; fi
}

# Downloads every pinned .deb into $1 (unless there) and checks its sha256 against the pin.
download_pinned() {
    local debs=$1 apt_dir=$2 name version sha file
    mkdir -p "${debs}"
    while read -r name version sha; do
        file="${debs}/$(deb_name "${name}" "${version}")"
        if [[ ! -f ${file} ]]; then
            (cd "${debs}" && private_apt "${apt_dir}" apt-get -qq download "${name}=${version}") ||
                die "${name} ${version} is no longer in Debian: update lavapipe.pins (fetch-lavapipe.sh pins)"
        fi
        [[ $(sha256sum "${file}" | cut -c1-64) == "${sha}" ]] || die "${file}: sha256 differs from the pin"
    done < <(pinned)
}

# The ICD manifest pointing at the unpacked driver, and `run`: PROGRAM ARGS through trixie's
# loader. --library-path, not LD_LIBRARY_PATH: children (python, cargo) keep the system glibc.
write_launchers() {
    local root=$1 lib
    lib=$(lib_dir)
    cat >"${root}/lvp_icd.json" <<EOF
{ "file_format_version": "1.0.1",
  "ICD": { "library_path": "${lib}/libvulkan_lvp.so", "api_version": "1.4.0" } }
EOF
    cat >"${root}/run" <<EOF
#!/bin/sh
exec "${lib}/ld-linux-x86-64.so.2" --library-path "${lib}:/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu" "\$@"
EOF
    chmod +x "${root}/run"
}

install() {
    local root work
    root=$(root_dir)
    if [[ -f ${root}/.complete ]]; then
        log "lavapipe-coop: ${root} already unpacked"
        return
    fi
    work="${FAK_CACHE}/lavapipe-coop/download"
    log "lavapipe-coop: fetching $(pinned | wc -l) packages into ${work}"
    update_private_lists "${work}/apt"
    download_pinned "${work}/debs" "${work}/apt"
    rm -rf "${root}"
    mkdir -p "${root}"
    local name version sha
    while read -r name version sha; do
        dpkg-deb -x "${work}/debs/$(deb_name "${name}" "${version}")" "${root}"
    done < <(pinned)
    write_launchers "${root}"
    touch "${root}/.complete"
    log "lavapipe-coop: unpacked into ${root} ($(du -sh "${root}" | cut -f1))"
}

print_env() {
    local root
    root=$(root_dir)
    [[ -f ${root}/.complete ]] || die "not unpacked yet: run experiments/lavacoop/fetch-lavapipe.sh first"
    cat <<EOF
export VK_DRIVER_FILES=${root}/lvp_icd.json
export WGPU_BACKEND=vulkan
export LP_NATIVE_VECTOR_WIDTH=${VECTOR_WIDTH}
export CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER=${root}/run
EOF
}

probe() {
    local root
    root=$(root_dir)
    VK_DRIVER_FILES="${root}/lvp_icd.json" LP_NATIVE_VECTOR_WIDTH=${VECTOR_WIDTH} \
        "${root}/run" /usr/bin/python3 "${here}/vk-coop-probe.py"
}

# Today's version and sha256 of each pinned package in its suite, in the pins file's format.
print_pins() {
    local work name suite version sha
    work=$(mktemp -d)
    update_private_lists "${work}"
    grep '^#' "${PINS}"
    while read -r name _ _; do
        suite=$(suite_of "${name}")
        # madison: NAME | VERSION | MIRROR SUITE/main amd64 Packages
        version=$(private_apt "${work}" apt-cache madison "${name}" 2>/dev/null |
            awk -F'|' -v suite="${suite}/main" '{ gsub(/ /, "", $2) } index($3, " " suite " ") { print $2; exit }')
        [[ -n ${version} ]] || die "no ${name} in ${suite}"
        sha=$(private_apt "${work}" apt-cache show "${name}=${version}" 2>/dev/null | sed -n 's/^SHA256: //p' | head -n1)
        echo "${name} ${version} ${sha}"
    done < <(pinned)
    rm -rf "${work}"
}

case "${1:-install}" in
install)
    install
    probe
    ;;
env) print_env ;;
probe) probe ;;
pins) print_pins ;;
*) die "usage: $0 [install|env|probe|pins]" ;;
esac
