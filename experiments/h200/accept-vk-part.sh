#!/usr/bin/env bash
# Call B0 of the acceptance run, right before call B on the same machine: copies the carried first part of the Vulkan llama-server archive into
# /tmp/accept-vk-parts, where call B (acceptance-vulkan.sh) finds it if it comes within the 30 s
# a machine stays warm. A few seconds; no GPU work. Carry: target/acc-b0 (prepare-acceptance.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p /tmp/accept-vk-parts
cp target/h200-vk/*.part* /tmp/accept-vk-parts/
cd /tmp/accept-vk-parts
ls -l
sha256sum -- *.part*
