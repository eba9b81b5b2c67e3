#!/usr/bin/env python3
"""The longest chain of dependent fmas on one invocation, and the workgroup barriers, of
chunk_prepare's inverse T = (I + A)^-1 (wgsl/gated_delta_chunk_io.wgsl) for a full 64-row chunk:
the columns form (column j on invocation j) and the block-row form for several block heights,
with the block form's pair-to-invocation map (pair e = j * B + (t - r0) on invocation e mod 256).
Prints: form, block rows, longest chain (fmas), barriers."""

N, WG = 64, 256


def columns():
    chain = max(sum(max(0, t - j - 1) for t in range(j + 1, N)) for j in range(N))
    return chain, 2


def blocks(b):
    chain, barriers = 0, 1  # the move to the lower triangle
    for r0 in range(0, N, b):
        width = r0 + b
        per = [0] * WG
        for e in range(width * b):
            t, j = r0 + e % b, e // b
            if j < t:
                per[e % WG] += max(0, r0 - j - 1)  # step 1: the prefix over earlier block rows
        finish = max(sum(t - max(r0, j + 1) for t in range(max(r0, j + 1), width))
                     for j in range(width))  # step 2: column j through the block's rows
        chain += max(per) + finish
        barriers += 2
    return chain, barriers


print("columns", "-", *columns())
for b in (4, 8, 16, 32):
    print("blocks", b, *blocks(b))
