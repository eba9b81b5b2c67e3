# Sourced by every experiments/h200 script at the start of a device call: the Vulkan loader
# (the bare machine has the NVIDIA driver's ICD but no libvulkan), the carried release binaries
# unpacked into $BIN, $OUT for results, and the machine's GPU recorded.
# Once per carried bin.txz: a script that runs another (prefill.sh runs matmul.sh) sources this
# twice, and a call that finds the machine still warm finds the last call's /tmp (2026-12-04: a
# call ran the previous call's binaries until the unpack was keyed by the archive's checksum).
# A dry run elsewhere (accept-lib.sh's ACCEPT_DRY=1) sets FAK_TMP (where the binaries go),
# FAK_LOADER=system (that machine has its loader: no debs unpacked into /) and FAK_VK_ICD.
FAK_TMP=${FAK_TMP:-/tmp/fak}
BIN=$FAK_TMP/bin
SUM=$(sha256sum target/h200/bin.txz | cut -d' ' -f1)
if [ "$(cat "$FAK_TMP/bin.sha256" 2>/dev/null)" != "$SUM" ]; then
    if [ "${FAK_LOADER:-debs}" = debs ]; then
        for f in target/h200/gl/*.deb; do dpkg -x "$f" /; done
        ldconfig
    fi
    rm -rf "$FAK_TMP" && mkdir -p "$FAK_TMP" && tar xJf target/h200/bin.txz -C "$FAK_TMP"
    echo "$SUM" > "$FAK_TMP/bin.sha256"
fi
export VK_DRIVER_FILES=${FAK_VK_ICD:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json} WGPU_BACKEND=vulkan
export FAK_HARNESS_BIN=$BIN/harness
OUT=${OUT:-/tmp/fak-out}
mkdir -p "$OUT"
# The test binaries name their fixtures by the path they were built at. Run from a copy of
# experiments/ and target/h200 alone (a checkout's ignored target/<dir>), the fixtures are the
# checkout's, two levels up.
[ -d tests ] || ln -s ../../tests tests
# prepare.sh records the checkout the binaries were built in (target/h200/built-at).
BUILT_AT=$(cat target/h200/built-at 2>/dev/null || echo /work/wt/speed)
[ -e "$BUILT_AT" ] || { mkdir -p "$(dirname "$BUILT_AT")" && ln -s "$PWD" "$BUILT_AT"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > "$OUT/gpu.csv" 2>&1
# The call scripts' test runner (T0: the script's start, set before sourcing this), appending
# each suite's verdict lines to $OUT/tests.log:
tests() { # tests LABEL TIMEOUT BINARY FILTERS...: libtest ORs whole test paths
    local label=$1 limit=$2 binary=$3
    shift 3
    echo "== $label (at $((SECONDS - T0)) s)" >> "$OUT/tests.log"
    timeout "$limit" "$BIN/$binary" "$@" 2>&1 \
        | grep -E "^test |test result|panicked at|differ|pinned|SKIPPED" | cut -c1-300 \
        | head -40 >> "$OUT/tests.log"
}
# Their step log and clock (T0 as above; DEADLINE: the call's seconds, read when asked):
log() { echo "[$((SECONDS - T0)) s] $*" | tee -a "$OUT/steps.log"; }
left() { echo $((${DEADLINE:-600} - (SECONDS - T0))); }
# The 8B synth (Q4_K_M --fast-random, seed 0: abbench.sh's file) into MODEL in the background
# unless a warm machine kept it; SYNTH its pid (empty when none ran) for `wait`.
synth_8b() {
    MODEL=/dev/shm/qwen3-8b-q4_k_m.gguf SYNTH=""
    [ -s "$MODEL" ] && return
    "$BIN/harness" synth --arch qwen3 --preset qwen3-8b --quant q4_k_m --seed 0 --fast-random \
        --out "$MODEL" > "$OUT/synth-8b.log" 2>&1 &
    SYNTH=$!
}
# matvec-bench on the 8B's decode products, the q8 path, batches 1 and 8 (issue 21's 8-sequence
# step): matvec_bench_8b REPS CAP LAYOUTS.
matvec_bench_8b() {
    timeout "$2" "$BIN/matvec-bench" --products \
        attn_qkv,attn_qk,attn_v,attn_output,ffn_gate_up,ffn_down,output --paths q8 --plain \
        --batches 1,8 --reps "$1" --layouts "$3"
}
