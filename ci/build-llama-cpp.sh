#!/usr/bin/env bash
# Builds the llama.cpp peer engine for the CPU and installs its binaries in
#   ${FAK_CACHE:-~/.cache/fak}/llama.cpp-<version>/bin/
# (where tests/common/mod.rs::llama_cpp_bin_dir() looks). The source is the llama.cpp tree that
# the llama-cpp-python sdist of <version> vendors (vendor/llama.cpp, commit 0c1e57098): PyPI is
# reachable everywhere we run, GitHub is not.
#
# Does nothing when the binaries of this version and these build flags are already installed
# (a stamp file records both), so it is cheap to call on every CI run. About 10 minutes on 2 cores
# when it does build.
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

prefix="${FAK_CACHE}/llama.cpp-${VERSION}"
stamp="${prefix}/build-stamp"
wanted_stamp="llama-cpp-python ${VERSION} (llama.cpp ${COMMIT}) sdist ${SDIST_SHA256}
targets: ${TARGETS[*]}
cmake: ${CMAKE_FLAGS[*]}"

already_built() {
    [[ -f ${stamp} && "$(cat "${stamp}")" == "${wanted_stamp}" ]] || return 1
    local t
    for t in "${TARGETS[@]}"; do
        [[ -x ${prefix}/bin/${t} ]] || return 1
    done
}

# The sdist, downloaded once into the cache and checked against the pinned digest.
fetch_sdist() {
    local dir="${FAK_CACHE}/downloads"
    local file="${dir}/llama_cpp_python-${VERSION}.tar.gz"
    if [[ ! -f ${file} ]] || ! sha256_ok "${file}"; then
        mkdir -p "${dir}"
        rm -f "${file}"
        log "downloading the llama-cpp-python ${VERSION} sdist from PyPI"
        python3 -m pip download --quiet --no-binary :all: --no-deps --dest "${dir}" \
            "llama-cpp-python==${VERSION}" >&2 || die "pip download llama-cpp-python==${VERSION} failed"
        sha256_ok "${file}" || die "${file}: sha256 is not ${SDIST_SHA256}"
    fi
    printf '%s\n' "${file}"
}

sha256_ok() { [[ "$(sha256sum "$1" | cut -d' ' -f1)" == "${SDIST_SHA256}" ]]; }

main() {
    if already_built; then
        log "llama.cpp ${VERSION} peer already built in ${prefix}/bin"
        return
    fi
    need_command cmake cmake
    need_command g++ g++
    need_command make make

    local sdist work
    sdist=$(fetch_sdist)
    work="${FAK_CACHE}/llama.cpp-${VERSION}.work"
    rm -rf "${work}"
    mkdir -p "${work}"
    log "unpacking ${sdist}"
    tar -xzf "${sdist}" -C "${work}" --strip-components=1
    local src="${work}/vendor/llama.cpp"
    [[ -f ${src}/CMakeLists.txt ]] || die "${sdist} has no vendor/llama.cpp/CMakeLists.txt"

    log "configuring llama.cpp ${COMMIT}"
    cmake -S "${src}" -B "${work}/build" "${CMAKE_FLAGS[@]}"
    log "building ${TARGETS[*]} with $(nproc) jobs"
    cmake --build "${work}/build" --target "${TARGETS[@]}" -j "$(nproc)"

    # Install into a fresh directory and swap it in, so an interrupted run never leaves a
    # half-filled bin/ that the stamp check would trust.
    local staging="${prefix}.staging"
    rm -rf "${staging}"
    mkdir -p "${staging}/bin"
    local t
    for t in "${TARGETS[@]}"; do
        install -m 0755 "${work}/build/bin/${t}" "${staging}/bin/${t}"
    done
    "${staging}/bin/llama-cli" --version >&2 || die "the freshly built llama-cli does not run"
    printf '%s\n' "${wanted_stamp}" >"${staging}/build-stamp"
    rm -rf "${prefix}"
    mv "${staging}" "${prefix}"
    rm -rf "${work}"
    log "installed ${TARGETS[*]} in ${prefix}/bin"
}

main "$@"
