#!/usr/bin/env bash
# The README's main job on its embedded default: write the tiny synthetic Qwen3 model (Q4_K_M,
# seed 1) and inspect it. Needs only Rust; no GPU, no download.
#
#   ci/main-job.sh [out.gguf]      default ${FAK_CACHE:-~/.cache/fak}/main-job/qwen3-tiny-q4_k_m.gguf
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "${here}/.."
# shellcheck source=ci/lib.sh
source "${here}/lib.sh"

out=${1:-${FAK_CACHE}/main-job/qwen3-tiny-q4_k_m.gguf}
mkdir -p "$(dirname "${out}")"
harness=(cargo run --locked --quiet --release -p fak-harness --bin harness --)

"${harness[@]}" synth --arch qwen3 --preset tiny --quant q4_k_m --seed 1 --out "${out}"
"${harness[@]}" inspect "${out}"
