#!/usr/bin/env bash
# The README's main job: `harness threeway` on its embedded default — the tiny synthetic Qwen3
# (written once into ${FAK_CACHE:-~/.cache/fak}/threeway), run on fak-native and on every other arm
# installed here (llama-server on PATH or the peer build in the cache; MLX where $FAK_PYTHON or
# python3 imports mlx_lm; an arm that is missing is recorded as skipped) — then `harness validate`
# and `harness report` on the packet. No GPU and no download needed (fak runs on lavapipe).
#
#   ci/main-job.sh [threeway options…]     e.g. --prompts 3 --n-out 16
#   HARNESS=path/to/harness ci/main-job.sh  use a harness already built (default: cargo --release)
#   FAK_RUN_OUT=dir ci/main-job.sh          the run's folder (default experiments/benchmark/runs/
#                                           by-machine/<host>/<UTC stamp>-threeway)
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
