#!/usr/bin/env bash
# The part calls of the three-arm sequence (threeway.sh comes after them): copy the carried part
# of the mlx-cuda-13 wheel (89.8 MB, more than one call's 64 MiB carry once the working tree's
# 44 MiB is counted) out of the checkout into /tmp/mlx-parts, where the next call finds it if it
# comes within the 30 s a machine stays warm (a carried folder not named again is removed there,
# /tmp is not). A few seconds; no GPU work.
#
# Carried (experiments/h200/prepare-threeway.sh: target/h3w-<n>):
# target/h200-mlx/mlx_cuda_13-*.whl.part<NN> (one part per call; the call with room also the mlx
# and mlx-lm wheels), beside this script in the copy the call names.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p /tmp/mlx-parts
cp target/h200-mlx/* /tmp/mlx-parts/
cd /tmp/mlx-parts
ls -l
sha256sum -- *
