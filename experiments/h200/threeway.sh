#!/usr/bin/env bash
# The last call(s) of the three-arm sequence (the part calls before it: mlx-part.sh): `harness
# threeway` on the H200
# with all three arms — fak-native (Vulkan), llama.cpp CUDA (llama-server built here from the
# carried source, sm_90 only) and MLX's CUDA backend (mlx + mlx-cuda-13 + mlx-lm from the carried
# wheels) — on the Qwen3-8B shape (PRESET; the Qwen3.5-27B hybrid: PRESET=qwen35-27b, two calls,
# README "The headline"), then `harness validate` and `harness report`, the run folder
# packed into $OUT/threeway-run.tgz (it goes to experiments/benchmark/runs/by-machine/nvidia-h200/).
#
# The models are made here (`harness synth`, no download): the Q4_K_M GGUF fak and llama.cpp run
# (--fast-random: random Q4_K/Q6_K blocks, seconds), from the same weights MLX's affine 4-bit
# directory (the GGUF's blocks dequantized and quantized again by MLX's rule, group 64) and the
# f16 reference GGUF of the quality pass (the blocks dequantized, rounded to f16). The llama.cpp
# build runs in the background (nice'd) while the wheels install and the models are written;
# threeway starts only after it, so no compiler shares the machine with a timed arm.
#
# Carried (experiments/h200/prepare-threeway.sh makes the folder, target/h3w-run): target/h200/gl
# (Vulkan loader debs), target/h200/bin.txz (the release harness alone), target/h200/llama-src.tgz
# (llama.cpp of the llama-cpp-python 0.3.36 sdist, trimmed), target/h200/commit,
# target/h200-mlx/ (the last parts of the mlx-cuda-13 wheel where they fit, SHA256SUMS of the
# three whole wheels, BIG, PARTS); the other parts and the mlx and mlx-lm wheels are in
# /tmp/mlx-parts from the part calls (back to back).
#
# Knobs: PRESET (qwen3-8b; qwen3-0.6b for a quick run; qwen35-27b for the headline hybrid), ARCH
# (qwen35 for a qwen35-* preset, else qwen3), REFERENCE (1: the f16 reference and the quality
# pass; 0: neither — the default for qwen35-27b, whose f16 file would be ~54 GB: the packet then
# says the reference comparison was skipped), MODELS (where the models go; /dev/shm/h3w if it
# has NEED_GB (40) free, else /tmp/h3w), DEADLINE (s of this call after which threeway is
# stopped, 565: the run tool stops a call at 600 s), LLAMA_JOBS (16), PHASE (all; `prepare`
# stops once MLX is installed, llama.cpp built and the models written, so that a second call on
# the still-warm machine spends its whole time on threeway: every step skips what a previous
# call on the same machine finished — the wheels installed, the models of the same synth
# command, the build); extra arguments go to `harness threeway`.
# Outputs ($OUT, 7 files): steps.log, gpu.csv, llama-build.log, mlx-install.log, synth.log,
# threeway.log (its stderr: every step it took), threeway-run.tgz (the last two not in PHASE
# prepare).
set -uo pipefail
T0=$SECONDS
cd "$(dirname "$0")/../.."
source experiments/h200/setup.sh
PRESET=${PRESET:-qwen3-8b}
case $PRESET in qwen35*) ARCH=${ARCH:-qwen35} ;; *) ARCH=${ARCH:-qwen3} ;; esac
[ "$PRESET" = qwen35-27b ] && REFERENCE=${REFERENCE:-0}
REFERENCE=${REFERENCE:-1}
PHASE=${PHASE:-all}
DEADLINE=${DEADLINE:-565}
log() { echo "[$((SECONDS - T0)) s] $*" | tee -a "$OUT/steps.log"; }
log "setup done; harness $(cat target/h200/commit 2>/dev/null || echo '?'), $ARCH preset $PRESET, reference $REFERENCE, phase $PHASE"
export FAK_COMMIT=$(cat target/h200/commit 2>/dev/null || true)

# llama-server with CUDA, only sm_90, in the background at the lowest priority.
source experiments/h200/llama-build.sh
LLAMA_BUILD=$!

# MLX: join the wheel, check it against the sums made where it was downloaded, install without
# dependencies (the image has the CUDA-13 libraries, transformers, jinja2, numpy, …); nothing to
# do where an earlier call on this machine installed them.
[ -f /tmp/mlx-site.path ] && export PYTHONPATH=/tmp/mlx-site${PYTHONPATH:+:$PYTHONPATH}
if python3 -c 'import mlx.core, mlx_lm' 2>/dev/null; then
    echo "mlx and mlx_lm already importable: nothing installed" >> "$OUT/mlx-install.log"
else {
    W=/tmp/mlx-wheels
    rm -rf "$W" && mkdir -p "$W"
    # The small wheels ride with a part call where there is room, else with this one.
    cp target/h200-mlx/SHA256SUMS "$W/"
    cp $(ls target/h200-mlx/*.whl /tmp/mlx-parts/*.whl 2>/dev/null) "$W/"
    big=$(cat target/h200-mlx/BIG)
    for ((i = 0; i < $(cat target/h200-mlx/PARTS); i++)); do
        name=$(printf '%s.part%02d' "$big" "$i")
        part=$(ls /tmp/mlx-parts/"$name" target/h200-mlx/"$name" 2>/dev/null | head -1)
        [ -n "$part" ] || { echo "$name missing (the part calls not run back to back?)"; break; }
        cat "$part" >> "$W/$big"
    done
    if (cd "$W" && sha256sum -c SHA256SUMS); then
        if ! python3 -m pip install --no-deps --no-index --no-compile --no-cache-dir "$W"/*.whl; then
            # Not into python3's own environment: a folder of its own, with the environment's
            # nvidia/ linked in (libmlx.so finds cuBLAS & co. through $ORIGIN/../../nvidia/…).
            echo "== pip into python3's environment failed; --target /tmp/mlx-site"
            python3 -m pip install --no-deps --no-index --no-compile --no-cache-dir \
                --target /tmp/mlx-site "$W"/*.whl
            nv=$(python3 -c 'import nvidia, os; print([p for p in nvidia.__path__ if os.path.isdir(p + "/cublas") or os.path.isdir(p + "/cu13")][0])')
            ln -sfn "$nv" /tmp/mlx-site/nvidia
            echo "/tmp/mlx-site" > /tmp/mlx-site.path
        fi
    fi
} >> "$OUT/mlx-install.log" 2>&1
fi
[ -f /tmp/mlx-site.path ] && export PYTHONPATH=/tmp/mlx-site${PYTHONPATH:+:$PYTHONPATH}
python3 - >> "$OUT/mlx-install.log" 2>&1 <<'PY'
import mlx.core as mx, mlx_lm, importlib.metadata as md
a = mx.random.normal((1024, 1024))
print("mlx", mx.__version__, "mlx-lm", md.version("mlx-lm"), "device", mx.default_device(),
      "cuda", mx.cuda.is_available(), "matmul ok", bool(mx.allclose(a @ mx.eye(1024), a).item()))
PY
log "mlx: $(tail -1 "$OUT/mlx-install.log")"

# The models, from one seed: GGUF (fak, llama.cpp), MLX 4-bit, f16 reference.
# Room the models need: the 8B's GGUF, MLX and f16 files ~26 GB; the 27B's GGUF and MLX ~32 GB.
NEED_GB=${NEED_GB:-40}
need=$((NEED_GB * 1024 * 1024 * 1024))
MODELS=${MODELS:-/dev/shm/h3w}
mkdir -p "$(dirname "$MODELS")"
avail=$(df -B1 --output=avail "$(dirname "$MODELS")" 2>/dev/null | tail -1)
[ "${avail:-0}" -gt "$need" ] || MODELS=/tmp/h3w
GGUF=$MODELS/$PRESET-q4_k_m.gguf
REF=()
[ "$REFERENCE" = 1 ] && REF=(--f16-reference "$MODELS/$PRESET-f16-reference.gguf")
SYNTH=(synth --arch "$ARCH" --preset "$PRESET" --quant q4_k_m --seed 0 --fast-random --out "$GGUF"
    --mlx-4bit "$MODELS/mlx-4bit" "${REF[@]}")
# The same command with the same harness already wrote them (an earlier call on this machine).
SYNTH_DONE="$(sha256sum "$BIN/harness" | cut -d' ' -f1) ${SYNTH[*]}"
if [ "$(cat "$MODELS/synth.done" 2>/dev/null)" = "$SYNTH_DONE" ]; then
    log "synth: the models are already in $MODELS ($(du -sh "$MODELS" | cut -f1))"
else
    rm -rf "$MODELS" && mkdir -p "$MODELS"
    {
        echo "harness ${SYNTH[*]}"
        time "$BIN/harness" "${SYNTH[@]}" && echo "$SYNTH_DONE" > "$MODELS/synth.done"
        ls -l "$MODELS" "$MODELS/mlx-4bit"
    } > "$OUT/synth.log" 2>&1
    log "synth: $(grep -E '^real' "$OUT/synth.log") into $MODELS ($(du -sh "$MODELS" | cut -f1))"
fi

wait $LLAMA_BUILD
log "llama.cpp build: $(grep -E '^real' "$OUT/llama-build.log" || echo 'no time'); $([ -x "$LS" ] && echo built || echo 'NOT built: the arm is skipped')"
LLAMA=()
[ -x "$LS" ] && LLAMA=(--llama-server "$LS")
if [ "$PHASE" = prepare ]; then
    log "prepared: the next call (PHASE all, on this machine within its 30 s) runs threeway"
    exit 0
fi

REFM=()
[ "$REFERENCE" = 1 ] && REFM=(--reference-model "$MODELS/$PRESET-f16-reference.gguf")
RUN=/tmp/h3w-run/$(date -u +%Y%m%dT%H%M%SZ)-threeway-$PRESET
mkdir -p "$(dirname "$RUN")"
left=$((DEADLINE - (SECONDS - T0) - 25))
[ "$left" -gt 30 ] || left=30   # (timeout 0 would mean none)
mkdir -p "$RUN/logs"
log "threeway into $RUN (stopped after $left s)"
timeout -s INT -k 15 "$left" "$BIN/harness" threeway --model "$GGUF" "${REFM[@]}" \
    --mlx-model "$MODELS/mlx-4bit" "${LLAMA[@]}" --flash-attn on --python python3 \
    --out "$RUN" "$@" > "$OUT/threeway.log" 2>&1
log "threeway exit $?"
{
    echo "== validate"
    "$BIN/harness" validate "$RUN/packet.json"
    echo "validate exit $?"
    "$BIN/harness" report "$RUN/packet.json" --out "$RUN/report"
} >> "$OUT/threeway.log" 2>&1
cp "$OUT/steps.log" "$OUT/synth.log" "$OUT/mlx-install.log" "$OUT/gpu.csv" "$RUN/logs/" 2>/dev/null
tail -3 "$OUT/llama-build.log" > "$RUN/logs/llama-build-tail.log"
tar czf "$OUT/threeway-run.tgz" -C "$(dirname "$RUN")" "$(basename "$RUN")"
log "packed $(du -h "$OUT/threeway-run.tgz" | cut -f1)"
cat "$OUT/steps.log"
tail -25 "$OUT/threeway.log"
sed -n 1,60p "$RUN/report/report.md" 2>/dev/null
