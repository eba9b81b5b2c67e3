// matmul_coop16 — the 16×16 cooperative-matrix shape of matmul_coop.wgsl and
// attn_prefill_coop.wgsl (Vulkan: NVIDIA offers 16×16×16 f16 → f32 and no 8×8; wgpu-notes.md §7)
//
// One subgroup computes 2 × 4 tiles of 16 × 16: 32 tokens × 64 rows. Eight f32 accumulators
// cost 64 registers per lane on a 32-wide subgroup, which leaves room for four B fragments, two
// A fragments and the loader; the workgroup's tiling (matmul_coop.wgsl) sets how many such
// blocks share one dequantized W tile.
// provides: the aliases CoopA (X tile, tokens × k), CoopB (W tile, k × rows), CoopC (f32 result)
//           and the const COOP.

alias CoopA = coop_mat16x16<f16, A>;
alias CoopB = coop_mat16x16<f16, B>;
alias CoopC = coop_mat16x16<f32, C>;

const COOP: u32 = 16u;
