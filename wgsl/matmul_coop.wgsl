// matmul_coop — Y[t, r] (+)= Σ_k W[r, k] · X[t, k] for t < n_tokens on cooperative matrices
//   (W a GGUF weight of any decoded type, X f32 [n_tokens, cols], Y f32 [n_tokens, rows]);
//   f16 inputs, f32 accumulation
//
// bindings: see matmul_load.wgsl (0 w · 1 x · 2 y · 3 params · 4 step), as matmul.wgsl.
// dispatch: (ceil(n_tokens / TILE_T), ceil(rows / TILE_R), 1) per row range of W, as matmul.wgsl.
// pipelines: one per ggml type (the type overrides of matmul_load.wgsl).
// variants: the shape file before it: matmul_coop16.wgsl (Vulkan) | matmul_coop8.wgsl (Metal);
//           the module gets `enable f16; enable wgpu_cooperative_matrix;` from the variant.
//
// As matrices: Y_tile (tokens × rows) = X_tile (tokens × k) · W_tileᵀ (k × rows), so X is the
// A operand and W the B operand. Each K step of 32, the workgroup dequantizes its W tile and
// converts its X tile to f16 in workgroup memory (the shared loaders of matmul_load.wgsl, so
// every GGUF type works here exactly as in the register-tiled kernel), then multiplies from
// there: tiles are row-per-row with k contiguous, W rows read column-major as B (coopLoad) and
// X rows row-major as A (coopLoadT), with a row stride of TILE_K + 8 halves so the 16-byte row
// segments of one fragment load fall in different banks. The f32 results go through a small
// workgroup staging tile so ragged edges and the accumulate mode are handled by a guarded copy
// (coopStore itself cannot skip elements outside the matrix).
//
// One subgroup per workgroup (32 invocations), and no subgroup builtins: a cooperative matrix
// belongs to one subgroup, and without knowing which subgroup an invocation is in (that needs
// the SUBGROUP feature, which is not an axis of this kernel) only a workgroup that is a single
// subgroup can split tiles among subgroups safely. 32 is the subgroup width of every adapter
// that offers square f16 → f32 cooperative matrices (NVIDIA, Apple); an adapter with narrower
// subgroups would run the same product redundantly in each, and the variant runs only where
// its GPU test (`harness selftest`) passed. Occupancy comes from many workgroups per SM.
//
// naga 30 workaround: coopStore/coopStoreT with a computed pointer index or stride panics the
// SPIR-V writer ("Expression [N] is not cached"), so both are bound to `let`s first
// (wgpu-notes.md §7); loads get the same treatment for symmetry.
// requires: bytes.wgsl, blocks.wgsl, dequant_type.wgsl, step.wgsl, a shape file, then
//           matmul_load.wgsl.

const WG: u32 = 32u;
const TILE_T: u32 = CT_T * COOP;
const TILE_R: u32 = CT_R * COOP;
const TILE_K: u32 = 32u;
// Row stride of the f16 tiles, in halves (see above).
const STRIDE: u32 = TILE_K + 8u;

var<workgroup> w_tile: array<f16, TILE_R * STRIDE>;
var<workgroup> x_tile: array<f16, TILE_T * STRIDE>;
// One COOP × COOP result tile, row-major (token-major), on its way to Y.
var<workgroup> c_stage: array<f32, COOP * COOP>;

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
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t0 = wg.x * TILE_T;
    let r0 = wg.y * TILE_R;
    // acc[i * CT_R + j]: tokens t0 + COOP·i.., rows r0 + COOP·j..
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
                let at = j * COOP * STRIDE + kk;
                let stride = STRIDE;
                b[j] = coopLoad<CoopB>(&w_tile[at], stride);
            }
            for (var i = 0u; i < CT_T; i++) {
                let at = i * COOP * STRIDE + kk;
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
    for (var i = 0u; i < CT_T; i++) {
        for (var j = 0u; j < CT_R; j++) {
            let stride = COOP;
            coopStoreT(acc[i * CT_R + j], &c_stage[0], stride);
            workgroupBarrier();
            for (var e = lid; e < COOP * COOP; e += WG) {
                store_output(t0 + i * COOP + e / COOP, r0 + j * COOP + e % COOP, c_stage[e]);
            }
            // The next tile overwrites the stage only after it has been copied out.
            workgroupBarrier();
        }
    }
}
