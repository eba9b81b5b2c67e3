#!/usr/bin/env bash
# The test command README.md gives and CI (.ci/run) runs: installs what the tests need, builds the
# llama.cpp peer (cached; in the background while cargo builds), forces Mesa lavapipe as the GPU,
# then runs format, lint and the whole test suite, cheapest first. Safe to rerun: every install step skips what is already there.
#
#   ci/test.sh                       everything
#   FAK_CACHE=/some/dir ci/test.sh   keep the peer build and the Python venv elsewhere
#                                    (default ~/.cache/fak)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "${here}/.." && pwd)
cd "${repo}"
# shellcheck source=ci/lib.sh
source "${here}/lib.sh"

# Debian packages: lavapipe (software Vulkan) to run every kernel, cmake for the peer build,
# spirv-tools (spirv-val) for the portability tests, nginx-light for the scale-out test (two
# fak serve replicas behind it, docs/SCALE-OUT.md).
readonly APT_PACKAGES=(mesa-vulkan-drivers libvulkan1 cmake spirv-tools nginx-light)

check_rust() {
    local tool
    for tool in cargo rustfmt cargo-clippy; do
        command -v "${tool}" >/dev/null || die "${tool} not found: install Rust 1.95 with rustup (components rustfmt, clippy)"
    done
    cargo --version
}

install_system_packages() {
    local missing=() pkg
    for pkg in "${APT_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "${pkg}" 2>/dev/null | grep -q 'install ok installed' || missing+=("${pkg}")
    done
    if [[ ${#missing[@]} -gt 0 ]]; then
        apt_install "${missing[@]}"
    else
        log "system packages present: ${APT_PACKAGES[*]}"
    fi
}

# A venv in the cache rather than the system interpreter: Debian's python3 refuses pip installs
# (PEP 668), and a venv keeps the pinned oracle versions away from whatever else is installed.
install_python_packages() {
    local venv="${FAK_CACHE}/venv"
    if ! "${venv}/bin/python" -c 'import sys' 2>/dev/null; then
        rm -rf "${venv}"
        mkdir -p "${FAK_CACHE}"
        python3 -m venv "${venv}" 2>/dev/null || {
            apt_install python3-venv
            python3 -m venv "${venv}"
        }
    fi
    "${venv}/bin/python" -m pip install --quiet --disable-pip-version-check -r ci/requirements.txt
    "${venv}/bin/python" -c 'import gguf, numpy' || die "the venv ${venv} cannot import gguf and numpy"
}

# Every GPU test runs on lavapipe, whatever else the machine has: the results must not depend on
# which driver CI happened to get.
use_lavapipe() {
    local icd="/usr/share/vulkan/icd.d/lvp_icd.$(uname -m).json"
    [[ -f ${icd} ]] || die "${icd} missing: mesa-vulkan-drivers did not install lavapipe"
    export VK_DRIVER_FILES="${icd}"
    export WGPU_BACKEND=vulkan
    log "GPU: lavapipe (${icd})"
}

# The main job as CI runs it: all three arms for real on the tiny model (fak-native on lavapipe,
# llama.cpp from the peer build, MLX on CPU), small enough for a couple of minutes, then validate
# and report, and the small multi-agent scenario (about 40 s more); fails unless every arm ran.
run_threeway() {
    cargo build --locked -p fak-harness --bin harness
    local out="${FAK_CACHE}/ci-threeway"
    rm -rf "${out}" "${out}-multi-agent"
    HARNESS="${CARGO_TARGET_DIR:-target}/debug/harness" FAK_RUN_OUT="${out}" \
        "${here}/main-job.sh" --prompts 3 --n-out 16 --quality-prompts 2
    "${FAK_PYTHON}" - "${out}" <<'PY'
import json, sys
out = sys.argv[1]
for arm in ["fak-native", "llama.cpp", "mlx"]:
    status = json.load(open(f"{out}/{arm}-raw.json"))["status"]
    assert status["state"] == "ran", f"{arm}: {status}"
scenario = f"{out}-multi-agent"
for engine in ["fak-native", "llama.cpp", "mlx"]:
    for cache in ["cache", "nocache"]:
        raw = json.load(open(f"{scenario}/multi-agent-{engine}-{cache}-raw.json"))
        assert raw["status"]["state"] == "ran", f"{engine}-{cache}: {raw['status']}"
print("threeway: every arm ran, the multi-agent scenario's too")
PY
}

# The fak-tests integration binaries, by name, from cargo's own metadata: a few groups of test
# files by area (tests/groups/) and the files that must run alone in a process.
integration_tests() {
    cargo metadata --locked --no-deps --format-version 1 | "${FAK_PYTHON}" -c '
import json, sys
meta = json.load(sys.stdin)
pkg = next(p for p in meta["packages"] if p["name"] == "fak-tests")
print("\n".join(sorted(t["name"] for t in pkg["targets"] if "test" in t["kind"])))'
}

# `list_tests <binary>`: its tests' names, one a line (a group's are `<file>::<test>`: each
# tests/groups/<area>.rs makes its files modules).
list_tests() {
    cargo test --locked -q -p fak-tests --test "$1" -- --list --format terse | sed -n 's/: test$//p'
}

# The test build, and the harness and fak binaries the tests run as child processes: both bins in
# one cargo invocation resolve the dependencies' features as the tests do (tests/common/harness.rs
# runs the same command when a test first needs one), so no dependency compiles twice and no test
# compiles anything.
build_tests() {
    cargo test --locked --workspace --no-run
    cargo build --locked -p fak-harness -p fak-cli --bin harness --bin fak
}

# The whole suite, one test file at a time (a group binary run once per file, filtered to its
# module), removing the scratch files (target/tmp: synthetic GGUFs of up to 130 MB each, hostile
# variants of them, exports) before the next. Run in one `cargo test` they pile up to 8 GB; CI's
# disk is shared and has been seen with far less free, and a run failed on ENOSPC (2026-12-04).
# Every file makes what it needs itself; the one folder two files share (threeway and
# multi_agent's model cache, 0.3 GB) is kept so it is made once. Keeps going past a failing file
# and names every one that failed; logs each file's seconds, wall and CPU (a file whose CPU is
# well under twice its wall leaves a core idle).
run_tests() {
    local tmp="${CARGO_TARGET_DIR:-target}/tmp" failed=() name names file files start these cpu
    local shell=${BASHPID}
    cargo test --locked --workspace --exclude fak-tests --no-fail-fast || failed+=("engine and harness unit and doc tests")
    cargo test --locked -p fak-tests --lib || failed+=("fak-tests --lib")
    for name in $(integration_tests); do
        names=$(list_tests "${name}") && [[ -n ${names} ]] || {
            failed+=("${name} (listing its tests)")
            continue
        }
        # The files in the binary; "-" for a file alone in its binary (tests at its root).
        files=$(sed -e 's/::.*//' -e t -e 's/.*/-/' <<<"${names}" | sort -u)
        for file in ${files}; do
            start=${SECONDS}
            cpu=$(children_cpu_seconds "${shell}")
            if [[ ${file} == - ]]; then
                cargo test --locked -p fak-tests --test "${name}" || failed+=("${name}")
            else
                # By exact name: a filter is a substring, and `quant::` is in `gpu_dequant::…`.
                mapfile -t these < <(grep "^${file}::" <<<"${names}")
                cargo test --locked -p fak-tests --test "${name}" -- --exact "${these[@]}" || failed+=("${name} ${file}")
            fi
            [[ -d ${tmp} ]] && find "${tmp}" -mindepth 1 -maxdepth 1 ! -name threeway-cache -exec rm -rf {} +
            log "${name} ${file} done in $((SECONDS - start)) s, cpu $(($(children_cpu_seconds "${shell}") - cpu)) s; $(free_disk) free"
        done
    done
    [[ ${#failed[@]} -eq 0 ]] || die "failing tests: ${failed[*]}"
}

free_disk() { df -h --output=avail . | tail -n 1 | tr -d ' '; }

# The llama.cpp peer builds in the background, nice'd, while cargo checks and builds: cargo's
# chain (naga → wgpu → fak → the tests) leaves a core idle for long stretches on a 2-core box,
# and a fresh CI box compiles the peer from source (~10 CPU-minutes; nothing when cached).
PEER_LOG="${FAK_CACHE}/peer-build.log"
start_peer_build() {
    mkdir -p "${FAK_CACHE}"
    rm -f "${PEER_LOG}.rc"
    # All of the job's output to the log: nothing of it holds CI's stdout open.
    (
        set +e
        nice -n 10 "${here}/build-llama-cpp.sh"
        echo $? >"${PEER_LOG}.rc"
    ) >"${PEER_LOG}" 2>&1 &
    log "llama.cpp peer: building in the background (log ${PEER_LOG})"
}

# Waits for it by its exit-status file (a step runs in a subshell, which cannot `wait` for the
# main shell's job). Its CPU time shows in no step: the main shell reaps it at the end.
wait_peer_build() {
    while [[ ! -s ${PEER_LOG}.rc ]]; do sleep 2; done
    if [[ $(<"${PEER_LOG}.rc") != 0 ]]; then
        tail -n 40 "${PEER_LOG}" >&2
        die "the llama.cpp peer build failed (log ${PEER_LOG})"
    fi
    tail -n 12 "${PEER_LOG}" >&2
}

main() {
    local start=${SECONDS}
    # One build from scratch: incremental state would only add gigabytes to a disk that is short.
    export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
    # tests/fuzz.rs: its three targets mutate at once for this long (fuzz/README.md).
    export FAK_FUZZ_SECONDS="${FAK_FUZZ_SECONDS:-60}"
    log "disk: $(free_disk) free at the start"
    step "rust toolchain" check_rust
    step "cargo fmt --check" cargo fmt --all --check
    step "system packages" install_system_packages
    step "python packages" install_python_packages
    export FAK_PYTHON="${FAK_CACHE}/venv/bin/python"
    start_peer_build
    step "cargo clippy" cargo clippy --locked --workspace --all-targets -- -D warnings
    step "build tests" build_tests
    step "llama.cpp peer (wait)" wait_peer_build
    use_lavapipe
    export RUST_BACKTRACE=1
    step "run tests" run_tests
    step "threeway, all arms" run_threeway
    print_step_summary
    log "disk: $(free_disk) free at the end"
    log "all checks passed in $(clock $((SECONDS - start))) (m:ss)"
}

main "$@"
