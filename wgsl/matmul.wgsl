// matmul — Y[t, r] (+)= Σ_k W[r, k] · X[t, k] for t < n_tokens: the prefill mat-mul, register-tiled
//   (W a GGUF weight [rows, cols] of any decoded type, X f32 [n_tokens, cols], Y f32 [n_tokens, rows])
//
// bindings: see matmul_load.wgsl (0 w · 1 x · 2 y · 3 params · 4 step).
// dispatch: (ceil(n_tokens / TILE_T), ceil(rows / TILE_R), Z) per row range of W: Z = 1, each
//           workgroup summing K's slices in order, or Z = the slice count, one slice per
//           workgroup into the partial sums (matmul_split.wgsl); n_tokens
//           comes from the Step uniform, so only the grid depends on it, never the number of
//           dispatches. A W larger than one binding is split into row ranges on the host.
// pipelines: one per ggml type (the type overrides of matmul_load.wgsl).
// variants: one, f32 throughout: the fallback of matmul_coop.wgsl. No subgroup operations
//           (nothing is reduced across lanes) and no f16 tiles: at 4 × 4 outputs per invocation
//           the inner loop is bound by FMAs, not by workgroup-memory traffic, so halving that
//           traffic would not pay for an f16 → f32 conversion per element read
//           (experiments/matmul-tiles.md).
//
// Layout, and why. A workgroup of 256 invocations computes a 64-token × 64-row block of Y over
// K steps of 32: it dequantizes a 64 × 32 W tile once (the GGUF blocks are read straight from
// the weight binding, W is never expanded in memory) and reuses every W element for 64 tokens
// and every X element for 64 rows. Each invocation keeps 4 tokens × 4 rows of f32 accumulators
// in registers: per k it reads one vec4 of W (4 rows) and one vec4 of X (4 tokens) from
// workgroup memory for 16 FMAs (the register blocking of ggml-webgpu's mul_mat_reg_tile). The
// tiles are k-major and packed in vec4 along rows (tokens) — element (r, k) of the W tile is
// component r % 4 of w_tile[k · TILE_R/4 + r/4] — so those reads are single vec4 loads;
// 2 × 32 × 64 × 4 B = 16 KiB of the 32 KiB Metal and lavapipe allow. Lanes next to each other
// take neighbouring rows, so the final stores of a token's outputs coalesce.
// requires: bytes.wgsl, blocks.wgsl, dequant_type.wgsl, step.wgsl, then matmul_load.wgsl and
//           matmul_split.wgsl.

const WG: u32 = 256u;
const TILE_T: u32 = 64u;
const TILE_R: u32 = 64u;
const TILE_K: u32 = 32u;
// Invocations along the rows of the block (each takes 4 rows); the rest go along tokens.
const LANES_R: u32 = TILE_R / 4u;

var<workgroup> w_tile: array<vec4<f32>, TILE_K * TILE_R / 4u>;
var<workgroup> x_tile: array<vec4<f32>, TILE_K * TILE_T / 4u>;

// The loaders' tile storage (matmul_load.wgsl): quad v at k..k+3 of row r / token t.
fn put_w(r: u32, k: u32, v: vec4<f32>) {
    for (var j = 0u; j < 4u; j++) {
        w_tile[(k + j) * (TILE_R / 4u) + r / 4u][r % 4u] = v[j];
    }
}

fn put_x(t: u32, k: u32, v: vec4<f32>) {
    for (var j = 0u; j < 4u; j++) {
        x_tile[(k + j) * (TILE_T / 4u) + t / 4u][t % 4u] = v[j];
    }
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let run = slice_run(wg.z, groups.z);
    let t0 = wg.x * TILE_T;
    let r0 = wg.y * TILE_R;
    let rq = lid % LANES_R;
    let tq = lid / LANES_R;
    // total[j][i]: token t0 + 4·tq + j, row r0 + 4·rq + i, the slices' sums added in order.
    var total: array<vec4<f32>, 4>;
    for (var s = run.first; s < run.end; s++) {
        let slice = k_slice(s, run.count);
        var acc: array<vec4<f32>, 4>;
        for (var k0 = slice.begin; k0 < slice.end; k0 += TILE_K) {
            load_tiles(lid, r0, t0, k0);
            workgroupBarrier();
            for (var k = 0u; k < TILE_K; k++) {
                let wv = w_tile[k * (TILE_R / 4u) + rq];
                let xv = x_tile[k * (TILE_T / 4u) + tq];
                acc[0] += wv * xv.x;
                acc[1] += wv * xv.y;
                acc[2] += wv * xv.z;
                acc[3] += wv * xv.w;
            }
            // The next K step overwrites the tiles only after everyone has read them.
            workgroupBarrier();
        }
        for (var j = 0u; j < 4u; j++) {
            total[j] += acc[j];
        }
    }
    for (var j = 0u; j < 4u; j++) {
        for (var i = 0u; i < 4u; i++) {
            store_result(run.out, t0 + 4u * tq + j, r0 + 4u * rq + i, total[j][i]);
        }
    }
}
