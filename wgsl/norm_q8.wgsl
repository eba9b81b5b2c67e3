// norm_q8 — one vector's RMSNorm(x)·nw as q8 blocks in one pass over x (the one-pass form,
// engine `NormQ8::OnePass`, FAK_NORM_Q8=onepass)
//
// Math: for block k (elements 32k .. 32k+31) of a row of `cols`,
//   u = x ∘ nw,   (q, d_u) = q8_block(u),   σ_k = Σ_i x_{32k+i}²  (in element order),
// lane i of NORM_Q8_LANES adds the squares of its blocks k = i, i + NORM_Q8_LANES, … one after
// another in element order (one running sum), workgroup_sum adds the lanes, s = 1 / sqrt(total / cols + eps), and the block is stored as
// codes q and scale d = d_u·s. In exact arithmetic that is quantize_q8's NORM block of
// v = (x·s)·nw: s > 0 factors out of the block's largest magnitude and out of every v / d. In
// f32 the codes of u and of v can differ by one where v / d sits within a rounding of a half,
// and d by an ulp or two: not the two-pass form's bits, held to the CPU reference instead.
// Why: the two-pass form (quantize_q8.wgsl's NORM, matvec_q8.wgsl's QUANTIZE_X) sums the row
// first (64 lanes, 64–80 values each: 4–5 batches of loads), reduces, and only then loads each
// block again, the chain of a decode norm in place ~7–9 µs on an H100 (experiments/NOTES.md,
// session 2026-12-06 #15). Here the codes need no sum, so a lane's x and nw loads, its squares
// and its rounding are one batch of loads in flight; the sum is waited for only by the scale.
// The order: fixed by NORM_Q8_LANES and the reduction variant; every kernel that includes this
// runs it on workgroups of exactly NORM_Q8_LANES invocations (the engine refuses others), so a
// quantize dispatch and a mat-vec quantizing in its workgroup make the same blocks bit for bit —
// a row never depends on which of them ran (batch invariance).
// requires: the including module's `fn norm_q8_x4(at: u32) -> vec4<f32>` (x[at .. at + 4], at
//           absolute), `fn norm_q8_w4(e: u32) -> vec4<f32>` (nw[e .. e + 4]), `fn
//           norm_q8_codes(b: u32, k: u32, codes: array<u32, 8>)` and `fn norm_q8_scale(b: u32,
//           k: u32, d: f32)` (vector b's block k, b < MAX_B); q8_block.wgsl; reduce_*.wgsl
//           (Lanes, workgroup_sum).
// provides: NORM_Q8_LANES · NORM_Q8_BLOCKS (a lane's most blocks: rows of at most
//           NORM_Q8_LANES·NORM_Q8_BLOCKS·32 values) · norm_q8_row(b, base, cols, eps, lanes)

const NORM_Q8_LANES: u32 = 256u;
const NORM_Q8_BLOCKS: u32 = 4u;

// Vector b (its element 0 at x[base]) as q8 blocks: every invocation of the workgroup calls it
// (uniform control flow: the sum's barriers).
fn norm_q8_row(b: u32, base: u32, cols: u32, eps: f32, lanes: Lanes) {
    let blocks = cols / 32u;
    var scales: array<f32, NORM_Q8_BLOCKS>;
    var squares = 0.0;
    for (var i = 0u; i < NORM_Q8_BLOCKS; i++) {
        let k = lanes.index + i * NORM_Q8_LANES;
        if k < blocks {
            var xs: array<vec4<f32>, 8>;
            var u: array<vec4<f32>, 8>;
            for (var j = 0u; j < 8u; j++) {
                xs[j] = norm_q8_x4(base + 32u * k + 4u * j);
                u[j] = xs[j] * norm_q8_w4(32u * k + 4u * j);
            }
            for (var j = 0u; j < 8u; j++) {
                let a = xs[j];
                squares += a.x * a.x;
                squares += a.y * a.y;
                squares += a.z * a.z;
                squares += a.w * a.w;
            }
            let q = q8_block(u);
            norm_q8_codes(b, k, q.codes);
            scales[i] = q.d;
        }
    }
    let total = workgroup_sum(squares, lanes);
    let s = 1.0 / sqrt(total / f32(cols) + eps);
    for (var i = 0u; i < NORM_Q8_BLOCKS; i++) {
        let k = lanes.index + i * NORM_Q8_LANES;
        if k < blocks {
            norm_q8_scale(b, k, scales[i] * s);
        }
    }
}
