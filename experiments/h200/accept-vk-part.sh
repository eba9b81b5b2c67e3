#!/usr/bin/env bash
# Calls A0 and B0 of the acceptance run, each right before its call (A, B) on the same machine:
# copies what the folder carries ahead of its call — B0: the first part of the Vulkan llama-server
# archive, into /tmp/accept-vk-parts, where call B (acceptance-vulkan.sh) finds it; A0: llama.cpp's
# source, into /tmp/accept-src, where call A's llama-build.sh finds it — if the call comes within
# the 30 s a machine stays warm. A few seconds; no GPU work. Carry: target/acc-b0 or target/acc-a0
# (prepare-acceptance.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -f target/h200/llama-src.txz ]; then
    mkdir -p /tmp/accept-src
    cp target/h200/llama-src.txz /tmp/accept-src/
    ls -l /tmp/accept-src && sha256sum /tmp/accept-src/*
fi
if ls target/h200-vk/*.part* > /dev/null 2>&1; then
    mkdir -p /tmp/accept-vk-parts
    cp target/h200-vk/*.part* /tmp/accept-vk-parts/
    cd /tmp/accept-vk-parts
    ls -l
    sha256sum -- *.part*
fi
