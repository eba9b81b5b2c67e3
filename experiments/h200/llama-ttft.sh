#!/usr/bin/env bash
# The llama.cpp arm against a plain client, on the H200 (issue 20 §1): `harness threeway --arms
# llama.cpp` on the Qwen3-8B and the Qwen3.5-27B hybrid shapes (Q4_K_M, --fast-random), once with
# the envelope's flags (--cache-ram 0 --ctx-checkpoints 0) and once with llama.cpp's own defaults
# restored through --llama-arg (--cache-ram 8192 --ctx-checkpoints 32: a later value wins). Each
# packet states the arm's TTFT p50 and a plain Python client's on the same server and prompts,
# and whether they are within 5 % or 3 ms; the summary prints those with the mean queue and
# prefill buckets, so the before/after of the queue (≈ 19 ms on the 8B, ≈ 180 ms on the 27B with
# the defaults) is in one call.
#
# Carried (experiments/h200/prepare-threeway.sh): target/h200/gl, target/h200/bin.txz,
# target/h200/llama-src.tgz, target/h200/commit. Knobs: PROMPTS (10), MODELS (/dev/shm/ttft: models
# already there are kept; a built llama-server in /tmp/llama is reused).
# Outputs ($OUT): steps.log, llama-build.log, synth.log, ttft-runs.tgz (the four run folders).
set -uo pipefail
T0=$SECONDS
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
log() { echo "[$((SECONDS - T0)) s] $*" | tee -a "$OUT/steps.log"; }
export FAK_COMMIT=$(cat target/h200/commit 2>/dev/null || true)
source experiments/h200/llama-build.sh
LLAMA_BUILD=$!

MODELS=${MODELS:-/dev/shm/ttft}
mkdir -p "$MODELS"
{
    for shape in "qwen3 qwen3-8b" "qwen35 qwen35-27b"; do
        set -- $shape
        # A caller that made the models already (peers.sh) keeps them.
        [ -f "$MODELS/$2.gguf" ] && continue
        time "$BIN/harness" synth --arch "$1" --preset "$2" --quant q4_k_m --seed 0 --fast-random \
            --out "$MODELS/$2.gguf"
    done
} >> "$OUT/synth.log" 2>&1
log "synth: models in $MODELS: $(ls "$MODELS" | tr '\n' ' ')"
wait $LLAMA_BUILD
[ -x "$LS" ] || { log "llama-server NOT built"; tail -5 "$OUT/llama-build.log"; exit 1; }
log "llama.cpp built"

RUNS=/tmp/ttft-runs
rm -rf "$RUNS" && mkdir -p "$RUNS"
for preset in qwen3-8b qwen35-27b; do
    for flags in envelope defaults; do
        extra=()
        [ "$flags" = defaults ] && extra=(--llama-arg "--cache-ram 8192 --ctx-checkpoints 32")
        "$BIN/harness" threeway --model "$MODELS/$preset.gguf" --arms llama.cpp --no-selftest \
            --llama-server "$LS" --flash-attn on --python python3 --prompts "${PROMPTS:-10}" \
            --quality-prompts 0 --model-origin "harness synth --fast-random, seed 0 (random)" \
            "${extra[@]}" --out "$RUNS/$preset-$flags" > "$RUNS/$preset-$flags.log" 2>&1
        log "$preset $flags: exit $?"
    done
done
python3 - "$RUNS" <<'PY' | tee -a "$OUT/steps.log"
import json, pathlib, sys
print("| model | flags | arm TTFT p50 ms | plain client p50 ms | within 5 % or 3 ms | queue mean ms | prefill mean ms |")
print("|---|---|---|---|---|---|---|")
for run in sorted(pathlib.Path(sys.argv[1]).glob("*/packet.json")):
    a = json.loads(run.read_text())["arms"][0]
    c, b = a.get("plain_client") or {}, (a.get("summary") or {}).get("buckets_mean", {})
    ms = lambda v: f"{v * 1e3:.1f}" if isinstance(v, (int, float)) else "—"
    print(f"| {run.parent.name.rsplit('-', 1)[0]} | {run.parent.name.rsplit('-', 1)[1]} | "
          f"{ms(c.get('arm_ttft_p50_s'))} | {ms(c.get('plain_ttft_p50_s'))} | {c.get('within')} | "
          f"{ms(b.get('queue_s'))} | {ms(b.get('prefill_s'))} |")
PY
tar czf "$OUT/ttft-runs.tgz" -C "$RUNS" .
log "packed $(du -h "$OUT/ttft-runs.tgz" | cut -f1)"
