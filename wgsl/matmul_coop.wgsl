// matmul_coop — Y[t, r] (+)= Σ_k W[r, k] · X[t, k] for t < n_tokens on cooperative matrices
//   (W a GGUF weight of any decoded type, X f32 [n_tokens, cols], Y f32 [n_tokens, rows]);
//   f16 inputs, f32 accumulation
//
// bindings: see matmul_load.wgsl (0 w · 1 x · 2 y · 3 params · 4 step), as matmul.wgsl.
// dispatch: (ceil(n_tokens / TILE_T), ceil(rows / TILE_R), S) per row range of W, S slices of K,
//           as matmul.wgsl (matmul_split.wgsl).
// pipelines: one per ggml type (the type overrides of matmul_load.wgsl).
// specialisation (consts the host puts before the files: engine `matmul::CoopTiling`):
//   TILE_K (the K step: 32 or 64), PREFETCH (1: the next step's quads go through registers
//   while this step's MMAs run; 0: each invocation loads and stores them after its MMAs),
//   BUFFERS (1: one pair of tiles, two barriers per K step; 2: ping-pong tiles, the next step
//   written into the other pair while this one is read, one barrier per K step) and
//   WARP_TILES_T (a subgroup's block is WARP_TILES_T × 4 tiles: 2, in 4 × 2 subgroups, or 4, in
//   2 × 2 subgroups; the workgroup tile is 8·COOP × 8·COOP either way). The engine's default is
//   TILE_K 32, PREFETCH 1, BUFFERS 1, WARP_TILES_T 2; matmul-bench --sweep times the others.
// variants: the shape file before it: matmul_coop16.wgsl (Vulkan) | matmul_coop8.wgsl (Metal);
//           the module gets `enable f16; enable wgpu_cooperative_matrix;` from the variant, and
//           the variant requires SUBGROUP (for subgroup_id).
//
// As matrices: Y_tile (tokens × rows) = X_tile (tokens × k) · W_tileᵀ (k × rows), so X is the
// A operand and W the B operand. A workgroup is a grid of SG_T × SG_R subgroups; subgroup s owns
// the WARP_T × WARP_R block at ((s / SG_R)·WARP_T, (s % SG_R)·WARP_R) of the workgroup's
// TILE_T × TILE_R block and keeps its WARP_TILES_T × 4 accumulators in registers. Each K step
// of TILE_K, all invocations together dequantize the W tile and convert the X tile to f16 in
// workgroup memory (the shared loaders of matmul_load.wgsl, so every GGUF type works here
// exactly as in the register-tiled kernel; with PREFETCH the next step's quads are fetched into
// registers before this step's MMAs and stored after them, so their loads overlap the MMAs),
// then each subgroup multiplies its block from there: tiles are row-per-row with k contiguous,
// W rows read column-major as B (coopLoad) and X rows row-major as A (coopLoadT), with a row
// stride of TILE_K + 8 halves so the 16-byte row segments of one fragment load fall in
// different banks. With BUFFERS = 2 the tiles hold two K steps, buffer b's rows after buffer
// 0's: step s reads buffer s % 2 and fills the other, which every subgroup finished reading
// before the barrier that ended step s - 1, so one barrier per step suffices. The f32 results
// go through a per-subgroup staging tile so ragged edges and the accumulate mode are handled by
// a guarded copy (coopStore itself cannot skip elements outside the matrix).
//
// Why several subgroups share one tile: every W element a workgroup dequantizes is reused for
// TILE_T tokens and every X element for TILE_R rows, so the loader's work per MMA falls as the
// tile grows, while each subgroup's registers stay at WARP_TILES_T × 4 accumulators. Measured
// on the H200 (experiments/NOTES.md, session #4 calls 2–4; Qwen3-8B shapes, 128 to 2048
// tokens), with 2 × 4 tiles per subgroup: 4 × 2 subgroups (128 × 128 for 16×16) won at every
// token count against 4 × 1, 2 × 2, 2 × 1, 1 × 2 and 1 × 1 (the old one-subgroup kernel, 3.8×
// slower at 2048 tokens), and K steps of 32 beat 64 (equal for this tiling, up to 2× slower for
// the others). Workgroup memory: BUFFERS · (TILE_R + TILE_T) · STRIDE halves plus one f32
// staging tile per subgroup, 48 KiB at most on NVIDIA's Vulkan (so no ping-pong with K steps of
// 64: engine `CoopTiling::workgroup_bytes`).
//
// Subgroups are assumed 32 wide (every adapter that offers square f16 → f32 cooperative
// matrices: NVIDIA, Apple): the host offers the variant only where the adapter's subgroup size
// is exactly 32, so a workgroup of WG invocations is SG_T · SG_R subgroups.
//
// naga 30 workaround: coopStore/coopStoreT with a computed pointer index or stride panics the
// SPIR-V writer ("Expression [N] is not cached"), so both are bound to `let`s first
// (wgpu-notes.md §7); loads get the same treatment for symmetry.
// requires: the specialisation consts, bytes.wgsl, blocks.wgsl, dequant_type.wgsl, step.wgsl,
//           a shape file, then matmul_words.wgsl, matmul_load.wgsl, matmul_split.wgsl and
//           matmul_coop_out.wgsl.

// The workgroup's subgroup grid: 4 × 2 or 2 × 2.
const SG_T: u32 = 8u / WARP_TILES_T;
const SG_R: u32 = 2u;

const SUBGROUP_WIDTH: u32 = 32u;
// One subgroup's block of Y: WARP_TILES_T × 4 tiles of COOP × COOP (written out by hand in
// main).
const WARP_T: u32 = WARP_TILES_T * COOP;
const WARP_R: u32 = 4u * COOP;
const WG: u32 = SG_T * SG_R * SUBGROUP_WIDTH;
const TILE_T: u32 = SG_T * WARP_T;
const TILE_R: u32 = SG_R * WARP_R;
// Row stride of the f16 tiles, in halves (see above).
const STRIDE: u32 = TILE_K + 8u;
// Quads of the W and X tiles each invocation loads per K step (the tiles are whole multiples of
// the workgroup: 4 and 4 for 16×16 with K steps of 32 in 4 × 2 subgroups, twice that with K
// steps of 64 or in 2 × 2 subgroups; half that for 8×8).
const W_QUADS: u32 = TILE_R * QUADS_K / WG;
const X_QUADS: u32 = TILE_T * QUADS_K / WG;
const_assert TILE_R * QUADS_K % WG == 0u;
const_assert TILE_T * QUADS_K % WG == 0u;
const_assert TILE_K % COOP == 0u;
const_assert PREFETCH <= 1u;
const_assert BUFFERS == 1u || BUFFERS == 2u;
const_assert WARP_TILES_T == 2u || WARP_TILES_T == 4u;

var<workgroup> w_tile: array<f16, BUFFERS * TILE_R * STRIDE>;
var<workgroup> x_tile: array<f16, BUFFERS * TILE_T * STRIDE>;

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

// Quad i of the W (X) tile in buffer b: buffer b's rows follow buffer 0's.
fn put_w_in(b: u32, i: u32, v: vec4<f32>) {
    put_w_quad(b * TILE_R * QUADS_K + i, v);
}

fn put_x_in(b: u32, i: u32, v: vec4<f32>) {
    put_x_quad(b * TILE_T * QUADS_K + i, v);
}

// This invocation's quads of the K step at k0, loaded and stored into buffer b at once.
fn fill(b: u32, lid: u32, r0: u32, t0: u32, k0: u32) {
    for (var q = 0u; q < W_QUADS; q++) {
        put_w_in(b, lid + q * WG, w_tile_quad(lid + q * WG, r0, k0));
    }
    for (var q = 0u; q < X_QUADS; q++) {
        put_x_in(b, lid + q * WG, x_tile_quad(lid + q * WG, t0, k0));
    }
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_id) subgroup: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let slice = k_slice(wg.z, groups.z);
    let t0 = wg.x * TILE_T;
    let r0 = wg.y * TILE_R;
    // This subgroup's block inside the tiles.
    let st = (subgroup / SG_R) * WARP_T;
    let sr = (subgroup % SG_R) * WARP_R;
    // accIJ: tokens t0 + st + COOP·I.., rows r0 + sr + COOP·J.. Named, not an array: the
    // subgroup's tiles are written out by hand so every accumulator and fragment is a plain SSA
    // value the driver keeps in registers (an array of cooperative matrices indexed in loops is
    // what the first version of this kernel had; see experiments/NOTES.md). Rows 2 and 3 are
    // used only with WARP_TILES_T = 4.
    var acc00 = CoopC();
    var acc01 = CoopC();
    var acc02 = CoopC();
    var acc03 = CoopC();
    var acc10 = CoopC();
    var acc11 = CoopC();
    var acc12 = CoopC();
    var acc13 = CoopC();
    var acc20 = CoopC();
    var acc21 = CoopC();
    var acc22 = CoopC();
    var acc23 = CoopC();
    var acc30 = CoopC();
    var acc31 = CoopC();
    var acc32 = CoopC();
    var acc33 = CoopC();
    let stride = STRIDE;
    fill(0u, lid, r0, t0, slice.begin);
    workgroupBarrier();
    // With PREFETCH, this invocation's quads of the next K step, fetched before the current
    // step's MMAs so the global loads are in flight while the matrix units work (register double
    // buffering); they go into the tiles once every subgroup is done reading them. Past the
    // last K step they are zeros (the loaders' bounds) or the next slice's, stored but never read.
    var w_next: array<vec4<f32>, W_QUADS>;
    var x_next: array<vec4<f32>, X_QUADS>;
    // The buffer this step reads.
    var cur = 0u;
    for (var k0 = slice.begin; k0 < slice.end; k0 += TILE_K) {
        let next = (cur + 1u) % BUFFERS;
        if PREFETCH == 1u {
            for (var q = 0u; q < W_QUADS; q++) {
                w_next[q] = w_tile_quad(lid + q * WG, r0, k0 + TILE_K);
            }
            for (var q = 0u; q < X_QUADS; q++) {
                x_next[q] = x_tile_quad(lid + q * WG, t0, k0 + TILE_K);
            }
        }
        let w_row = (cur * TILE_R + sr) * STRIDE;
        let x_row = (cur * TILE_T + st) * STRIDE;
        for (var kk = 0u; kk < TILE_K; kk += COOP) {
            let w_at = w_row + kk;
            let b0 = coopLoad<CoopB>(&w_tile[w_at], stride);
            let w_at1 = w_at + COOP * STRIDE;
            let b1 = coopLoad<CoopB>(&w_tile[w_at1], stride);
            let w_at2 = w_at + 2u * COOP * STRIDE;
            let b2 = coopLoad<CoopB>(&w_tile[w_at2], stride);
            let w_at3 = w_at + 3u * COOP * STRIDE;
            let b3 = coopLoad<CoopB>(&w_tile[w_at3], stride);
            let x_at = x_row + kk;
            let a0 = coopLoadT<CoopA>(&x_tile[x_at], stride);
            let x_at1 = x_at + COOP * STRIDE;
            let a1 = coopLoadT<CoopA>(&x_tile[x_at1], stride);
            acc00 = coopMultiplyAdd(a0, b0, acc00);
            acc01 = coopMultiplyAdd(a0, b1, acc01);
            acc02 = coopMultiplyAdd(a0, b2, acc02);
            acc03 = coopMultiplyAdd(a0, b3, acc03);
            acc10 = coopMultiplyAdd(a1, b0, acc10);
            acc11 = coopMultiplyAdd(a1, b1, acc11);
            acc12 = coopMultiplyAdd(a1, b2, acc12);
            acc13 = coopMultiplyAdd(a1, b3, acc13);
            // Rows 2–3 repeat 0–1 by hand: a helper would need the accumulators by pointer (acc00).
            if WARP_TILES_T == 4u {
                let x_at2 = x_at + 2u * COOP * STRIDE;
                let a2 = coopLoadT<CoopA>(&x_tile[x_at2], stride);
                let x_at3 = x_at + 3u * COOP * STRIDE;
                let a3 = coopLoadT<CoopA>(&x_tile[x_at3], stride);
                acc20 = coopMultiplyAdd(a2, b0, acc20);
                acc21 = coopMultiplyAdd(a2, b1, acc21);
                acc22 = coopMultiplyAdd(a2, b2, acc22);
                acc23 = coopMultiplyAdd(a2, b3, acc23);
                acc30 = coopMultiplyAdd(a3, b0, acc30);
                acc31 = coopMultiplyAdd(a3, b1, acc31);
                acc32 = coopMultiplyAdd(a3, b2, acc32);
                acc33 = coopMultiplyAdd(a3, b3, acc33);
            }
        }
        // One pair of tiles: the next K step overwrites it only after every fragment has been
        // loaded. Two: the next step goes into the pair no subgroup reads in this step.
        if BUFFERS == 1u {
            workgroupBarrier();
        }
        if PREFETCH == 1u {
            for (var q = 0u; q < W_QUADS; q++) {
                put_w_in(next, lid + q * WG, w_next[q]);
            }
            for (var q = 0u; q < X_QUADS; q++) {
                put_x_in(next, lid + q * WG, x_next[q]);
            }
        } else {
            fill(next, lid, r0, t0, k0 + TILE_K);
        }
        workgroupBarrier();
        cur = next;
    }
    let stage = subgroup * STAGE;
    let t_sub = t0 + st;
    let r_sub = r0 + sr;
    store_tile(acc00, slice, t_sub, r_sub, stage, lane);
    store_tile(acc01, slice, t_sub, r_sub + 1u * COOP, stage, lane);
    store_tile(acc02, slice, t_sub, r_sub + 2u * COOP, stage, lane);
    store_tile(acc03, slice, t_sub, r_sub + 3u * COOP, stage, lane);
    store_tile(acc10, slice, t_sub + 1u * COOP, r_sub, stage, lane);
    store_tile(acc11, slice, t_sub + 1u * COOP, r_sub + 1u * COOP, stage, lane);
    store_tile(acc12, slice, t_sub + 1u * COOP, r_sub + 2u * COOP, stage, lane);
    store_tile(acc13, slice, t_sub + 1u * COOP, r_sub + 3u * COOP, stage, lane);
    if WARP_TILES_T == 4u {
        store_tile(acc20, slice, t_sub + 2u * COOP, r_sub, stage, lane);
        store_tile(acc21, slice, t_sub + 2u * COOP, r_sub + 1u * COOP, stage, lane);
        store_tile(acc22, slice, t_sub + 2u * COOP, r_sub + 2u * COOP, stage, lane);
        store_tile(acc23, slice, t_sub + 2u * COOP, r_sub + 3u * COOP, stage, lane);
        store_tile(acc30, slice, t_sub + 3u * COOP, r_sub, stage, lane);
        store_tile(acc31, slice, t_sub + 3u * COOP, r_sub + 1u * COOP, stage, lane);
        store_tile(acc32, slice, t_sub + 3u * COOP, r_sub + 2u * COOP, stage, lane);
        store_tile(acc33, slice, t_sub + 3u * COOP, r_sub + 3u * COOP, stage, lane);
    }
}
