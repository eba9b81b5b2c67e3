#!/usr/bin/env bash
# The quality pass on trained weights: for each trained tiny model and each of Q8_0, Q6_K and
# Q4_K_M (made by `harness quantize` from the committed f16), one `harness threeway` run with
# the f16 as --reference-model (the true unquantized weights): fak-native and llama.cpp on the
# same GGUF (strict token parity), each against the reference (what the quantization costs), and
# for Qwen3 MLX's own 4-bit of the same weights against it too. Writes one run folder per
# (model, type) under experiments/benchmark/runs/by-machine/$FAK_MACHINE/ and validates it.
#
#   experiments/trained-tiny/quality.sh        (CARGO_TARGET_DIR, FAK_PYTHON, lavapipe env as
#                                               for ci/test.sh; the llama.cpp peer built)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "${here}/../.." && pwd)
cd "${repo}"
harness=${CARGO_TARGET_DIR:-target}/debug/harness
machine=${FAK_MACHINE:-$(hostname)}
work=${WORK:-/tmp/fak-trained-quality}
runs=experiments/benchmark/runs/by-machine/${machine}
mkdir -p "${work}" "${runs}"
cargo build --locked -p fak-harness --bin harness

for arch in qwen3 qwen35; do
    f16=tests/fixtures/trained/${arch}-trained-f16.gguf
    mlx=()
    if [[ ${arch} == qwen3 ]]; then
        # MLX's own 4-bit of the same weights, as the threeway default writes it (for qwen35,
        # synth's MLX writer does not yet undo the converter's transforms: issue 20 §2).
        rm -rf "${work}/qwen3-mlx-4bit"
        "${harness}" synth --arch qwen3 --preset trained --quant f16 --weights "${f16}" \
            --out "${work}/qwen3-again-f16.gguf" --mlx-4bit "${work}/qwen3-mlx-4bit"
        cmp "${f16}" "${work}/qwen3-again-f16.gguf"
        mlx=(--mlx-model "${work}/qwen3-mlx-4bit")
    fi
    for ftype in Q8_0 Q6_K Q4_K_M; do
        model="${work}/${arch}-trained-${ftype}.gguf"
        "${harness}" quantize "${f16}" "${model}" "${ftype}"
        arms=fak-native,llama.cpp
        [[ ${ftype} == Q4_K_M && ${#mlx[@]} -gt 0 ]] && arms=fak-native,llama.cpp,mlx
        out="${runs}/$(date -u +%Y%m%dT%H%M%SZ)-threeway-trained-${arch}-${ftype,,}"
        command=("${harness}" threeway --model "${model}" --reference-model "${f16}" "${mlx[@]}"
            --arms "${arms}" --prompts 3 --n-out 16 --quality-prompts 4 --quality-tail 16
            --no-selftest --out "${out}")
        "${command[@]}"
        # threeway wrote command.txt and validation.json (both in its manifest); what it cannot
        # know goes beside them.
        {
            echo "commit $(git rev-parse HEAD)"
            echo "VK_DRIVER_FILES=${VK_DRIVER_FILES:-} WGPU_BACKEND=${WGPU_BACKEND:-}"
        } >"${out}/provenance.txt"
        "${harness}" validate "${out}/packet.json"
        "${harness}" report "${out}/packet.json" --out "${out}/report"
        rm -rf "${out}/logs"
    done
done
