// matmul_coop8 — the 8×8 cooperative-matrix shape of matmul_coop.wgsl and attn_prefill_coop.wgsl
// (Metal: simdgroup matrices are 8×8 only; naga's coop_mat16x16 has no Metal type,
// wgpu-notes.md §1b)
//
// One simdgroup computes 2 × 4 tiles of 8 × 8: 16 tokens × 32 rows, eight f32 accumulators of
// two values per lane; the workgroup's tiling (matmul_coop.wgsl) sets how many share a W tile.
// provides: the aliases CoopA, CoopB, CoopC and the const COOP.

alias CoopA = coop_mat8x8<f16, A>;
alias CoopB = coop_mat8x8<f16, B>;
alias CoopC = coop_mat8x8<f32, C>;

const COOP: u32 = 8u;
