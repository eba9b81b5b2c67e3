// matmul_coop8 — the 8×8 cooperative-matrix shape of matmul_coop.wgsl (Metal: simdgroup
// matrices are 8×8 only; naga's coop_mat16x16 has no Metal type, wgpu-notes.md §1b)
//
// One simdgroup computes CT_T × CT_R tiles of 8 × 8: 32 tokens × 32 rows, sixteen f32
// accumulators of two values per lane (the 32 × 32 per-simdgroup block MLX's steel GEMM uses).
// provides: the aliases CoopA, CoopB, CoopC and the consts COOP, CT_T, CT_R.

alias CoopA = coop_mat8x8<f16, A>;
alias CoopB = coop_mat8x8<f16, B>;
alias CoopC = coop_mat8x8<f32, C>;

const COOP: u32 = 8u;
const CT_T: u32 = 4u;
const CT_R: u32 = 4u;
