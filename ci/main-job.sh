#!/usr/bin/env bash
# The README's main job: `harness threeway` on its embedded default — the trained tiny Qwen3
# (tests/fixtures/trained/qwen3-trained-f16.gguf the reference, its Q4_K_M for fak and llama.cpp,
# MLX's 4-bit of it; written once into ${FAK_CACHE:-~/.cache/fak}/threeway), run on fak-native
# and on every other arm installed here (llama-server on PATH or the peer build in the cache; MLX where $FAK_PYTHON or
# python3 imports mlx_lm; an arm that is missing is recorded as skipped) — then `harness validate`
# and `harness report` on the packet. Then the multi-agent scenario on the same model, small
# (2 agents sharing a 64-token preamble, 2 turns; every engine with its prefix cache on and off),
# validated and reported into <run>-multi-agent. No GPU and no download needed (fak runs on
# lavapipe).
#
#   ci/main-job.sh [threeway options…]     e.g. --prompts 3 --n-out 16
#   HARNESS=path/to/harness ci/main-job.sh  use a harness already built (default: cargo --release)
#   FAK_RUN_OUT=dir ci/main-job.sh          the run's folder (default experiments/benchmark/runs/
#                                           by-machine/<host>/<UTC stamp>-threeway)
#   FAK_MULTI_AGENT=0 ci/main-job.sh        skip the multi-agent run
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "${here}/.."
# shellcheck source=ci/lib.sh
source "${here}/lib.sh"

if [[ -n ${HARNESS:-} ]]; then
    harness=("${HARNESS}")
else
    harness=(cargo run --locked --quiet --release -p fak-harness --bin harness --)
fi
out=${FAK_RUN_OUT:-experiments/benchmark/runs/by-machine/$(hostname)/$(date -u +%Y%m%dT%H%M%SZ)-threeway}

"${harness[@]}" threeway --out "${out}" "$@"
"${harness[@]}" validate "${out}/packet.json"
"${harness[@]}" report "${out}/packet.json" --out "${out}/report"
log "packet, raw files and report in ${out}"

if [[ ${FAK_MULTI_AGENT:-1} != 0 ]]; then
    scenario="${out}-multi-agent"
    "${harness[@]}" threeway --scenario multi-agent --agents 2 --preamble 64 --suffix 8 \
        --turns 2 --n-out 4 --page-size 16 --no-selftest --out "${scenario}"
    "${harness[@]}" validate "${scenario}/packet.json"
    "${harness[@]}" report "${scenario}/packet.json" --out "${scenario}/report"
    log "multi-agent packet, raw files and report in ${scenario}"
fi
