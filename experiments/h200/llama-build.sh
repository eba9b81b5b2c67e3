# Sourced: starts the llama-server CUDA build (sm_90 only, nice'd) from the carried
# target/h200/llama-src.tgz in the background, its log in $OUT/llama-build.log; the caller waits
# on $! before any timed work. LS is the server it makes. LLAMA_JOBS: build jobs (16);
# LLAMA_TARGETS: more targets beside llama-server (e.g. llama-batched-bench, llama-bench).
LS=/tmp/llama/llama.cpp/build/bin/llama-server
(
    [ -x "$LS" ] && exit 0
    mkdir -p /tmp/llama && tar xzf target/h200/llama-src.tgz -C /tmp/llama && cd /tmp/llama/llama.cpp &&
    cmake -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
        -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF \
        -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
        -DLLAMA_BUILD_COMMIT=0c1e57098 -DLLAMA_BUILD_NUMBER=0 &&
    time nice -n 19 cmake --build build -j "${LLAMA_JOBS:-16}" --target llama-server ${LLAMA_TARGETS:-}
) >> "$OUT/llama-build.log" 2>&1 &
