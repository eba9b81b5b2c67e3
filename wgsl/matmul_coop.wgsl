// matmul_coop — Y[t, r] (+)= Σ_k W[r, k] · X[t, k] for t < n_tokens on cooperative matrices
//   (W a GGUF weight of any decoded type, X f32 [n_tokens, cols], Y f32 [n_tokens, rows]);
//   f16 inputs, f32 accumulation
//
// bindings: see matmul_load.wgsl (0 w · 1 x · 2 y · 3 params · 4 step), as matmul.wgsl.
// dispatch: (ceil(n_tokens / TILE_T), ceil(rows / TILE_R), 1) per row range of W, as matmul.wgsl,
//           with the tile of the pipeline the host picked for this token count.
// pipelines: one per ggml type (the type overrides of matmul_load.wgsl) × workgroup tiling
//            (SG_T × SG_R subgroups: the host's `Tile`s for the variant).
// variants: the shape file before it: matmul_coop16.wgsl (Vulkan) | matmul_coop8.wgsl (Metal);
//           the module gets `enable f16; enable wgpu_cooperative_matrix;` from the variant, and
//           the variant requires SUBGROUP (for subgroup_id).
//
// As matrices: Y_tile (tokens × rows) = X_tile (tokens × k) · W_tileᵀ (k × rows), so X is the
// A operand and W the B operand. A workgroup is a grid of SG_T × SG_R subgroups; subgroup s owns
// the WARP_T × WARP_R block at ((s / SG_R)·WARP_T, (s % SG_R)·WARP_R) of the workgroup's
// TILE_T × TILE_R block and keeps its CT_T × CT_R accumulators in registers. Each K step of 32,
// all invocations together dequantize the W tile and convert the X tile to f16 in workgroup
// memory (the shared loaders of matmul_load.wgsl, so every GGUF type works here exactly as in
// the register-tiled kernel), then each subgroup multiplies its block from there: tiles are
// row-per-row with k contiguous, W rows read column-major as B (coopLoad) and X rows row-major
// as A (coopLoadT), with a row stride of TILE_K + 8 halves so the 16-byte row segments of one
// fragment load fall in different banks. The f32 results go through a per-subgroup staging
// tile so ragged edges and the accumulate mode are handled by a guarded copy (coopStore itself
// cannot skip elements outside the matrix).
//
// Why several subgroups share one tile: every W element a workgroup dequantizes is reused for
// TILE_T tokens and every X element for TILE_R rows, so the loader's work per MMA falls as the
// tile grows, while each subgroup's registers stay at CT_T × CT_R accumulators. The
// one-subgroup-per-workgroup version of this kernel (32 × 64 tiles) dequantized 3× more per MMA
// and ran slower than the f32 register-tiled kernel on the H200 (experiments/NOTES.md). Large
// tiles leave too few workgroups for short prompts, so the host keeps several tilings and picks
// one per token count (`Matmul::tile_for`).
//
// Subgroups are assumed 32 wide (every adapter that offers square f16 → f32 cooperative
// matrices: NVIDIA, Apple): the host offers the variant only where the adapter's subgroup size
// is exactly 32, so a workgroup of WG invocations is SG_T · SG_R subgroups.
//
// naga 30 workaround: coopStore/coopStoreT with a computed pointer index or stride panics the
// SPIR-V writer ("Expression [N] is not cached"), so both are bound to `let`s first
// (wgpu-notes.md §7); loads get the same treatment for symmetry.
// requires: bytes.wgsl, blocks.wgsl, dequant_type.wgsl, step.wgsl, a shape file, then
//           matmul_load.wgsl.

// The workgroup's subgroup grid (pipeline constants).
override SG_T: u32 = 1u;
override SG_R: u32 = 1u;

const SUBGROUP_WIDTH: u32 = 32u;
// One subgroup's block of Y.
const WARP_T: u32 = CT_T * COOP;
const WARP_R: u32 = CT_R * COOP;
override WG: u32 = SG_T * SG_R * SUBGROUP_WIDTH;
override TILE_T: u32 = SG_T * WARP_T;
override TILE_R: u32 = SG_R * WARP_R;
const TILE_K: u32 = 32u;
// Row stride of the f16 tiles, in halves (see above).
const STRIDE: u32 = TILE_K + 8u;
const STAGE: u32 = COOP * COOP;
// The workgroup arrays' lengths. Each is a named override: naga 30 turns an override
// expression written inside `array<…, N>` into an unnamed override, which its
// pipeline-constant pass cannot key and panics on ("entered unreachable code").
override W_TILE_LEN: u32 = TILE_R * STRIDE;
override X_TILE_LEN: u32 = TILE_T * STRIDE;
override STAGE_LEN: u32 = SG_T * SG_R * STAGE;

var<workgroup> w_tile: array<f16, W_TILE_LEN>;
var<workgroup> x_tile: array<f16, X_TILE_LEN>;
// One COOP × COOP result tile per subgroup, row-major (token-major), on its way to Y.
var<workgroup> c_stage: array<f32, STAGE_LEN>;

fn put_w(r: u32, k: u32, v: vec4<f32>) {
    let at = r * STRIDE + k;
    w_tile[at] = f16(v.x);
    w_tile[at + 1u] = f16(v.y);
    w_tile[at + 2u] = f16(v.z);
    w_tile[at + 3u] = f16(v.w);
}

fn put_x(t: u32, k: u32, v: vec4<f32>) {
    let at = t * STRIDE + k;
    x_tile[at] = f16(v.x);
    x_tile[at + 1u] = f16(v.y);
    x_tile[at + 2u] = f16(v.z);
    x_tile[at + 3u] = f16(v.w);
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_id) subgroup: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let t0 = wg.x * TILE_T;
    let r0 = wg.y * TILE_R;
    // This subgroup's block inside the tiles.
    let st = (subgroup / SG_R) * WARP_T;
    let sr = (subgroup % SG_R) * WARP_R;
    // acc[i * CT_R + j]: tokens t0 + st + COOP·i.., rows r0 + sr + COOP·j..
    var acc: array<CoopC, CT_T * CT_R>;
    for (var i = 0u; i < CT_T * CT_R; i++) {
        acc[i] = CoopC();
    }
    for (var k0 = 0u; k0 < params.cols; k0 += TILE_K) {
        load_tiles(lid, r0, t0, k0);
        workgroupBarrier();
        for (var kk = 0u; kk < TILE_K; kk += COOP) {
            var b: array<CoopB, CT_R>;
            for (var j = 0u; j < CT_R; j++) {
                let at = (sr + j * COOP) * STRIDE + kk;
                let stride = STRIDE;
                b[j] = coopLoad<CoopB>(&w_tile[at], stride);
            }
            for (var i = 0u; i < CT_T; i++) {
                let at = (st + i * COOP) * STRIDE + kk;
                let stride = STRIDE;
                let a = coopLoadT<CoopA>(&x_tile[at], stride);
                for (var j = 0u; j < CT_R; j++) {
                    acc[i * CT_R + j] = coopMultiplyAdd(a, b[j], acc[i * CT_R + j]);
                }
            }
        }
        // The next K step overwrites the tiles only after every fragment has been loaded.
        workgroupBarrier();
    }
    let stage = subgroup * STAGE;
    for (var i = 0u; i < CT_T; i++) {
        for (var j = 0u; j < CT_R; j++) {
            let stride = COOP;
            coopStoreT(acc[i * CT_R + j], &c_stage[stage], stride);
            workgroupBarrier();
            for (var e = lane; e < STAGE; e += SUBGROUP_WIDTH) {
                let t = t0 + st + i * COOP + e / COOP;
                store_output(t, r0 + sr + j * COOP + e % COOP, c_stage[stage + e]);
            }
            // The next tile overwrites the stage only after it has been copied out.
            workgroupBarrier();
        }
    }
}
