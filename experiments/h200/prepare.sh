#!/usr/bin/env bash
# Run here (not on the device) before a device call: builds stripped release binaries of harness
# and the GPU test suites, packs them into target/h200/bin.txz, fetches the Vulkan loader debs
# into target/h200/gl and trims llama.cpp's source (from the llama-cpp-python sdist the CI peer
# build downloads) into target/h200/llama-src.tgz. target/ is git-ignored: the device call names
# `target/h200` in `carry` (64 MiB in all; this comes to ~35 MiB).
#
#   experiments/h200/prepare.sh [test suites...]   (default: the GPU suites and model_qwen3)
# A suite is a test file (gpu_matvec) or a test binary (gpu, model: tests/groups/). Since
# 2026-12-05 #3 the files are compiled in a few group binaries; the group is carried as bin/<group>
# and each file named gets a launcher bin/<file> running `<group> <file>:: "$@"`, so the call
# scripts' `$BIN/gpu_matvec --skip x` still runs that file's tests. libtest ORs filters: to pick
# one test pass `<file>::<test>`, not a bare name.
#   RELEASE_TARGET_DIR: the cargo target dir (default /work/targets/speed-release);
#   BASE_HARNESS: a previous build's harness binary, carried as harness-base;
#   MATMUL_BENCH=1: also build experiments/matmul-bench and carry it (matmul.sh runs it);
#   MATVEC_BENCH=1: the same for experiments/matvec-bench (matvec.sh runs it);
#   HARNESS_ONLY=1: no test suites, the harness alone (~8 MB: threeway.sh's carry is tight).
# The llama.cpp source keeps tools/ui's top-level files (llama-server's build needs the llama-ui
# target, not the web UI) since 2026-12-04: an older llama-src.tgz, without
# target/h200/llama-src.v3, is packed again.
set -euo pipefail
cd "$(dirname "$0")/../.."
H=target/h200
mkdir -p "$H/gl"
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(gpu_matvec gpu_matmul gpu_attn_decode gpu_rms_norm gpu_embed model_qwen3)
[ "${HARNESS_ONLY:-0}" = 1 ] && suites=()

if ! ls "$H"/gl/libvulkan1_*.deb >/dev/null 2>&1; then
    o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
    mkdir -p /tmp/amd64/partial
    apt-get $o update >/dev/null
    (cd "$H/gl" && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
fi

export CARGO_TARGET_DIR=${RELEASE_TARGET_DIR:-/work/targets/speed-release}
export CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_STRIP=true
# The binary a suite is in: itself if tests/Cargo.toml declares it, else its group.
binary_of() {
    if grep -q "^name = \"$1\"$" tests/Cargo.toml; then
        echo "$1"
    else
        grep -l "^#\[path = \"../$1.rs\"\]$" tests/groups/*.rs | xargs -r -n1 basename -s .rs | grep . \
            || { echo "prepare.sh: no test file or binary named $1" >&2; exit 1; }
    fi
}
binaries=()
for t in "${suites[@]+"${suites[@]}"}"; do binaries+=("$(binary_of "$t")"); done
mapfile -t binaries < <(printf '%s\n' "${binaries[@]+"${binaries[@]}"}" | sort -u | grep .)
tests=()
for b in "${binaries[@]+"${binaries[@]}"}"; do tests+=(--test "$b"); done
[ ${#tests[@]} = 0 ] || nice cargo test --release -p fak-tests --no-run "${tests[@]}"
nice cargo build --release -p fak-harness
rm -rf "$H/bin" && mkdir -p "$H/bin"
cp "$CARGO_TARGET_DIR/release/harness" "$H/bin/"
if [ "${MATMUL_BENCH:-0}" = 1 ]; then
    nice cargo build --release --manifest-path experiments/matmul-bench/Cargo.toml
    cp "$CARGO_TARGET_DIR/release/matmul-bench" "$H/bin/"
fi
if [ "${MATVEC_BENCH:-0}" = 1 ]; then
    nice cargo build --release --manifest-path experiments/matvec-bench/Cargo.toml
    cp "$CARGO_TARGET_DIR/release/matvec-bench" "$H/bin/"
fi
# A previous build's harness, for bench-decode.sh's before/after in one call.
[ -z "${BASE_HARNESS:-}" ] || cp "$BASE_HARNESS" "$H/bin/harness-base"
for b in "${binaries[@]+"${binaries[@]}"}"; do
    cp "$(ls -t "$CARGO_TARGET_DIR"/release/deps/"$b"-* | grep -v '\.d$' | head -1)" "$H/bin/$b"
done
for t in "${suites[@]+"${suites[@]}"}"; do
    b=$(binary_of "$t")
    [ "$b" = "$t" ] && continue
    printf '#!/bin/sh\n# %s: its tests in the %s binary (tests/groups/%s.rs).\nexec "$(dirname "$0")/%s" %s:: "$@"\n' \
        "$t" "$b" "$b" "$b" "$t" > "$H/bin/$t"
    chmod +x "$H/bin/$t"
done
# xz, not gzip: the binaries pack ~25 % smaller (harness 31 MB → 10 MB), and a call carries the
# working tree (~44 MiB since the trained fixtures and fuzz corpora) within 64 MiB in all. -9, not
# -6: its 64 MiB dictionary spans the binaries, which share the engine's code (harness + gpu +
# model + matmul-bench: 17.9 MB at -6, 12.6 MB at -9; ~30 s on two cores).
rm -f "$H/bin.tgz"
XZ_OPT="-9 -T2" tar cJf "$H/bin.txz" -C "$H" bin && rm -r "$H/bin"
pwd > "$H/built-at"
git rev-parse --short HEAD > "$H/commit"

if [ ! -f "$H/llama-src.tgz" ] || [ ! -f "$H/llama-src.v3" ]; then
    sdist=${FAK_CACHE:-$HOME/.cache/fak}/downloads/llama_cpp_python-0.3.36.tar.gz
    [ -f "$sdist" ] || ci/build-llama-cpp.sh   # downloads it (and builds the CPU peer)
    work=$(mktemp -d)
    tar xzf "$sdist" -C "$work" llama_cpp_python-0.3.36/vendor/llama.cpp
    src=$work/llama_cpp_python-0.3.36/vendor
    # tools/ui: only its top-level files (CMakeLists.txt, sources.cmake, ui.h.in, ui.cpp.in:
    # the llama-ui target llama-server links; with LLAMA_BUILD_UI=OFF and no prebuilt assets it
    # embeds an empty table), not the web sources.
    (cd "$src/llama.cpp" && rm -rf models docs tests benches examples tools/server/tests &&
        find tools/ui -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} + &&
        cd ggml/src && rm -rf ggml-cann ggml-et ggml-hexagon ggml-hip ggml-metal ggml-musa ggml-opencl \
            ggml-openvino ggml-sycl ggml-virtgpu ggml-vulkan ggml-webgpu ggml-zdnn ggml-zendnn ggml-blas)
    tar czf "$H/llama-src.tgz" -C "$src" llama.cpp
    rm -rf "$work"
    touch "$H/llama-src.v3"
fi
du -sh "$H"
