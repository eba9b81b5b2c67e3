# Sourced: starts the llama-server CUDA build (sm_90 only, nice'd) from the carried
# target/h200/llama-src.t[gx]z (or call A0's /tmp/accept-src/llama-src.txz) in the background,
# its log in $OUT/llama-build.log; the caller waits on $! before any timed work. LS is the server
# it makes. LLAMA_JOBS: build jobs (16); LLAMA_TARGETS: more targets beside llama-server (e.g.
# llama-batched-bench, llama-bench).
# A call that finds every target built (a warm machine) builds nothing. For a dry run elsewhere
# (accept-lib.sh): LLAMA_DIR (/tmp/llama), LLAMA_GPU_FLAGS (the CUDA flags; -DGGML_CUDA=OFF
# builds the CPU backend alone), LLAMA_GENERATOR (Ninja; "Unix Makefiles" where there is no
# ninja), LLAMA_TASKSET (a `taskset -c` CPU list for the compiler).
LLAMA_DIR=${LLAMA_DIR:-/tmp/llama}
LS=$LLAMA_DIR/llama.cpp/build/bin/llama-server
(
    built=1
    for t in llama-server ${LLAMA_TARGETS:-}; do [ -x "$LLAMA_DIR/llama.cpp/build/bin/$t" ] || built=0; done
    [ $built = 1 ] && exit 0
    pin=()
    [ -n "${LLAMA_TASKSET:-}" ] && pin=(taskset -c "$LLAMA_TASKSET")
    # xz (prepare-acceptance.sh: 1.6 MB less to carry), else gzip; call A0 leaves it in /tmp.
    src=$(ls target/h200/llama-src.txz /tmp/accept-src/llama-src.txz target/h200/llama-src.tgz \
        2> /dev/null | head -1)
    mkdir -p "$LLAMA_DIR" && { [ -d "$LLAMA_DIR/llama.cpp" ] || tar xf "$src" -C "$LLAMA_DIR"; } &&
    cd "$LLAMA_DIR/llama.cpp" &&
    cmake -B build -G "${LLAMA_GENERATOR:-Ninja}" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
        ${LLAMA_GPU_FLAGS:--DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90} \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF \
        -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
        -DLLAMA_BUILD_COMMIT=0c1e57098 -DLLAMA_BUILD_NUMBER=0 &&
    time "${pin[@]}" nice -n 19 cmake --build build -j "${LLAMA_JOBS:-16}" --target llama-server ${LLAMA_TARGETS:-}
) >> "$OUT/llama-build.log" 2>&1 &
