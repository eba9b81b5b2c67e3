// quantize_q8 — v[b] (f32, B vectors of `cols`) → 8-bit blocks of 32: codes q and one scale d each
//
// Math: for block k (elements 32k .. 32k+31) of vector b < step.n_tokens,
//   d = max_i |v_i| / 127,   q_i = clamp(round(v_i / d), −127, 127)   (all 0 when d = 0),
// so v_i ≈ d·q_i with |v_i − d·q_i| ≤ d/2 (round: ties to even; q8_block.wgsl). v is x, or under NORM the RMSNorm
// of x: v = (x·s)·nw with s = 1 / sqrt(Σ_c x_c² / cols + eps), rounded in the CPU reference's
// order. This is llama.cpp's q8_1 activation rounding (CUDA quantize_q8_1: d in
// f32, q = round(v / d)); matvec_q8.wgsl multiplies the codes with integer dot products. No block
// sum is stored: the K-quant minimum terms need sums of codes over half blocks (a mat-vec lane
// covers 16 or 8 elements of a block), which matvec_q8 takes with one dot4I8Packed(q, 0x01010101)
// per word, once per vector and unit for all 4 of its rows.
// Layout (engine `Q8Vectors`): vector b's codes at codes[b·cols/4 ..], word 8k + j holding
// q_{32k+4j+i} in byte i (two's complement); its scales at scales[b·cols/32 + k] (f32).
//
// Why its own dispatch, with the norm folded in here: the integer mat-vec needs x as codes before
// its main loop. Quantizing inside every mat-vec workgroup (as the f32 mat-vec folds the norm)
// would repeat a full f32 pass over x, a block max and a rounding per element in each of
// thousands of workgroups of 4 rows; here it happens once per step and vector, and one quantized
// x serves every mat-vec that reads it (q, k and v, gate and up). The norm that produces x rides
// along, so the pre-norm q/k/v and gate/up projections cost this dispatch plus their mat-vecs, as
// the f32 path cost its folded mat-vecs alone; attn_output and ffn_down gain one dispatch each
// (experiments/NOTES.md, int-matvec: about 4 dispatches per layer, ~2 µs each on the H200).
// bindings: 0 x (array<f32>, read) · 1 codes (array<u32>, read_write) · 2 scales (array<f32>,
//           read_write) · 3 params (uniform Params) · 4 step (uniform Step) · 5 nw (array<f32>,
//           read: the norm weight of NORM pipelines, else a placeholder)
// dispatch: (ceil(cols / 32 / WG), MAX_B) workgroups of WG; an invocation quantizes one block of
//           vector b = workgroup_id.y; workgroups of b ≥ step.n_tokens return at once.
// pipelines: NORM ∈ {false, true}.
// variants: subgroup (reduce_subgroup.wgsl) | fallback (reduce_workgroup.wgsl): the NORM sum of
//           squares only.
// requires: reduce_*.wgsl (struct Lanes, workgroup_sum), step.wgsl, q8_block.wgsl,
//           strided_squares.wgsl.

struct Params {
    cols: u32,
    // Element index of x[0, 0] inside the x binding, and of x[1, 0] − x[0, 0].
    x_index: u32,
    x_stride: u32,
    // NORM: the eps of the norm.
    eps: f32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> codes: array<u32>;
@group(0) @binding(2) var<storage, read_write> scales: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;
@group(0) @binding(4) var<uniform> step: Step;
@group(0) @binding(5) var<storage, read> nw: array<f32>;

override WG: u32 = 64u;
override NORM: bool = false;

// strided_squares.wgsl's element.
fn squares_value(c: u32) -> f32 {
    return x[c];
}

// 1 / rms of vector `base` (every invocation of the workgroup calls it: uniform control flow).
fn inverse_rms(base: u32, lanes: Lanes) -> f32 {
    let squares = strided_squares(base + lanes.index, base + params.cols, WG);
    let total = workgroup_sum(squares, lanes);
    return 1.0 / sqrt(total / f32(params.cols) + params.eps);
}

@compute @workgroup_size(WG)
fn quantize_q8(@builtin(workgroup_id) wg: vec3<u32>, lanes: Lanes) {
    let b = wg.y;
    // Uniform per workgroup, so the norm's reduction stays in uniform control flow.
    if b >= step.n_tokens {
        return;
    }
    let base = params.x_index + b * params.x_stride;
    var s = 1.0;
    if NORM {
        s = inverse_rms(base, lanes);
    }
    let block = wg.x * WG + lanes.index;
    let blocks = params.cols / 32u;
    if block >= blocks {
        return;
    }
    let first = base + 32u * block;
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 8u; j++) {
        let at = first + 4u * j;
        var w = vec4<f32>(x[at], x[at + 1u], x[at + 2u], x[at + 3u]);
        if NORM {
            let e = 32u * block + 4u * j;
            w = (w * s) * vec4<f32>(nw[e], nw[e + 1u], nw[e + 2u], nw[e + 3u]);
        }
        v[j] = w;
    }
    let q = q8_block(v);
    let out = b * (params.cols / 4u) + 8u * block;
    for (var j = 0u; j < 8u; j++) {
        codes[out + j] = q.codes[j];
    }
    scales[b * blocks + block] = q.d;
}
