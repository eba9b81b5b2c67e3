#!/usr/bin/env bash
# Builds the llama.cpp peer engine for the CPU and installs its binaries in
#   ${FAK_CACHE:-~/.cache/fak}/llama.cpp-<version>/bin/
# (where tests/common/mod.rs::llama_cpp_bin_dir() looks). The source is the llama.cpp tree that
# the llama-cpp-python sdist of <version> vendors (vendor/llama.cpp, commit 0c1e57098): PyPI is
# reachable everywhere we run, GitHub is not.
#
# Does nothing when the binaries of this version and these build flags are already installed
# (a stamp file records both), so it is cheap to call on every CI run. A build costs about 14
# CPU-minutes (8-10 minutes on 2 idle cores; see experiments/NOTES.md). Concurrent callers wait
# for one build instead of racing in the same directory.
set -euo pipefail

readonly VERSION=0.3.36
readonly COMMIT=0c1e57098
readonly SDIST_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
readonly TARGETS=(llama-server llama-cli llama-quantize llama-tokenize)

# Static (no shared libs to carry along), no network features, nothing but the four tools.
# GGML_NATIVE=OFF: the cache may outlive the machine that filled it (a CI cache restored onto a
# different runner), and a -march=native build from an AVX-512 host dies with SIGILL elsewhere.
# OFF still enables SSE4.2/AVX/AVX2/FMA/F16C/BMI2, which every x86-64 CI runner has; the tests run
# tiny models, so AVX-512 would buy nothing measurable.
readonly CMAKE_FLAGS=(
    -DCMAKE_BUILD_TYPE=Release
    -DBUILD_SHARED_LIBS=OFF
    -DGGML_NATIVE=OFF
    -DLLAMA_BUILD_TESTS=OFF
    -DLLAMA_BUILD_EXAMPLES=OFF
    -DLLAMA_BUILD_APP=OFF
    -DLLAMA_BUILD_TOOLS=ON
    -DLLAMA_BUILD_SERVER=ON
    -DLLAMA_BUILD_UI=OFF
    -DLLAMA_USE_PREBUILT_UI=OFF
    -DLLAMA_OPENSSL=OFF
    -DLLAMA_BUILD_COMMIT="${COMMIT}"
    -DLLAMA_BUILD_NUMBER=0
)

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=ci/lib.sh
source "${here}/lib.sh"

readonly PREFIX="${FAK_CACHE}/llama.cpp-${VERSION}"
readonly STAMP="${PREFIX}/build-stamp"
readonly WANTED_STAMP="llama-cpp-python ${VERSION} (llama.cpp ${COMMIT}) sdist ${SDIST_SHA256}
targets: ${TARGETS[*]}
cmake: ${CMAKE_FLAGS[*]}"

already_built() {
    [[ -f ${STAMP} && "$(cat "${STAMP}")" == "${WANTED_STAMP}" ]] || return 1
    local t
    for t in "${TARGETS[@]}"; do
        [[ -x ${PREFIX}/bin/${t} ]] || return 1
    done
}

readonly SDIST="${FAK_CACHE}/downloads/llama_cpp_python-${VERSION}.tar.gz"
readonly WORK="${FAK_CACHE}/llama.cpp-${VERSION}.work"
readonly STAGING="${PREFIX}.staging"

# The sdist, downloaded once into the cache and checked against the pinned digest. pip prepares the
# sdist's metadata after downloading it (about a minute of CPU: it unpacks the 77 MB archive).
fetch_sdist() {
    if [[ -f ${SDIST} ]] && sha256_ok "${SDIST}"; then
        log "using the cached ${SDIST}"
        return
    fi
    mkdir -p "$(dirname "${SDIST}")"
    rm -f "${SDIST}"
    log "downloading the llama-cpp-python ${VERSION} sdist from PyPI"
    python3 -m pip download --quiet --no-binary :all: --no-deps --dest "$(dirname "${SDIST}")" \
        "llama-cpp-python==${VERSION}" || die "pip download llama-cpp-python==${VERSION} failed"
    sha256_ok "${SDIST}" || die "${SDIST}: sha256 is not ${SDIST_SHA256}"
}

sha256_ok() { [[ "$(sha256sum "$1" | cut -d' ' -f1)" == "${SDIST_SHA256}" ]]; }

configure() {
    rm -rf "${WORK}"
    mkdir -p "${WORK}"
    tar -xzf "${SDIST}" -C "${WORK}" --strip-components=1
    [[ -f ${WORK}/vendor/llama.cpp/CMakeLists.txt ]] || die "${SDIST} has no vendor/llama.cpp/CMakeLists.txt"
    cmake -S "${WORK}/vendor/llama.cpp" -B "${WORK}/build" "${CMAKE_FLAGS[@]}"
}

compile() {
    log "building ${TARGETS[*]} with $(nproc) jobs"
    cmake --build "${WORK}/build" --target "${TARGETS[@]}" -j "$(nproc)"
}

# Install into a fresh directory and swap it in, so an interrupted run never leaves a half-filled
# bin/ that the stamp check would trust.
install_peer() {
    rm -rf "${STAGING}"
    mkdir -p "${STAGING}/bin"
    local t
    for t in "${TARGETS[@]}"; do
        install -m 0755 "${WORK}/build/bin/${t}" "${STAGING}/bin/${t}"
    done
    "${STAGING}/bin/llama-cli" --version || die "the freshly built llama-cli does not run"
    printf '%s\n' "${WANTED_STAMP}" >"${STAGING}/build-stamp"
    rm -rf "${PREFIX}"
    mv "${STAGING}" "${PREFIX}"
    rm -rf "${WORK}"
}

main() {
    if already_built; then
        log "llama.cpp ${VERSION} peer already built in ${PREFIX}/bin"
        return
    fi
    mkdir -p "${FAK_CACHE}"
    exec 9>"${PREFIX}.lock"
    log "taking the build lock ${PREFIX}.lock"
    flock 9
    if already_built; then
        log "llama.cpp ${VERSION} peer built by another process in ${PREFIX}/bin"
        return
    fi
    need_command cmake cmake
    need_command g++ g++
    need_command make make
    step "peer: download sdist" fetch_sdist
    step "peer: unpack + configure" configure
    step "peer: compile" compile
    step "peer: install" install_peer
    print_step_summary
    log "installed ${TARGETS[*]} in ${PREFIX}/bin"
}

main "$@"
