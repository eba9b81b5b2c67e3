// matvec_q8 — y[b, r] (+)= Σ_c W[r, c]·x̂[b, c] with x̂ = d·q the 8-bit blocks quantize_q8.wgsl
// made of x: the integer path of the decode mat-vec (Q8_0, Q4_K, Q5_K, Q6_K weights)
//
// Math: within one 32-element block of x (scale dx, codes qx) and one group of weights sharing a
// scale a and (K-quants with minimums) an offset −m, w = a·q − m, so
//   Σ w·x̂ = dx·(a·Σ q·qx − m·Σ qx)
// where Σ q·qx and Σ qx are exact integer sums: dot4I8Packed multiplies 4 code bytes by 4 x bytes
// and adds them (one DP4A / SDot on NVIDIA, a polyfill elsewhere), and Σ qx is dot4I8Packed(qx,
// 0x01010101), taken once per vector and unit for all 4 rows. Weight codes enter as the bytes
// the block stores after masking: nibbles and 5-bit codes are non-negative i8 as they are, Q8_0
// codes are i8 already, and Q6_K's 6-bit codes q become q − 32 in i8 by (q + 0x60) ^ 0x80 per byte
// (no carry: q + 0x60 ≤ 0x9f). Per weight that is ~0.5 integer operations (a mask or shift per 4
// codes, a quarter of a DP4A) instead of the f32 path's ~3 integer and ~2 float operations
// (experiments/matvec-design.md); the float work is a few multiplies per group of 8–32.
// Integer sums are exact in f32 (|Σ| ≤ 32·127·127 < 2^24), so the result differs from the f32
// oracle of W·x̂ only by f32 roundings of the scale products and the accumulation, the same
// bound as the f32 path (tests/common/matvec.rs); its distance from W·x is the q8 rounding of x.
// QUANTIZE_X (override): no quantize dispatch before the product — x is the residual stream and
// each workgroup first writes x̂ = quantize_q8(RMSNorm(x)·nw) of its n vectors into workgroup
// memory (quantize_input), then multiplies those codes. The norm needs the whole row, which the
// previous mat-vec writes from all its workgroups, so only a later dispatch can take it; doing
// it per workgroup costs a read of x and nw from L2 (2 × 4·cols bytes) and cols / 32 blocks of
// rounding per workgroup, against a dispatch and its tail. The sum of squares runs in
// quantize_q8.wgsl's order (QUANTIZE_LANES invocations striding the row, then workgroup_sum: the
// other invocations add zeros, which changes no partial), and the blocks round through
// q8_block, so x̂ is quantize_q8's bits and the product the one after a quantize dispatch
// (wherever subgroups are formed from consecutive invocations of one width, as on NVIDIA and
// lavapipe). Workgroup memory: MAX_B·X_COLS code bytes and MAX_B·X_COLS/8 scale bytes (the
// engine's `MatVec` refuses capacities the adapter cannot hold).
// bindings: matvec.wgsl's, plus 8 xq (array<u32>, read: the codes of `Q8Vectors`, vector b's at
//           word b·cols/4) · 9 xd (array<f32>, read: the block scales, vector b's at b·cols/32).
//           x, x16 and nw are placeholders (the norm, if any, was folded into quantize_q8) —
//           except under QUANTIZE_X, which reads x, x16 and nw and not xq, xd.
// dispatch, rows, pairing, accumulate, reduction: as matvec.wgsl (the same helpers).
// pipelines: one per (ggml type ∈ {Q8_0, Q4_K, Q5_K, Q6_K}, MAX_B), entry point matvec_q8, NORM off;
//           QUANTIZE_X ones also per X_COLS (= params.cols).
// requires: matvec.wgsl (and what it requires), strided_squares.wgsl.


// x is the residual stream: quantize its RMSNorm inside each workgroup (see the header).
override QUANTIZE_X: bool = false;
// QUANTIZE_X: the row length (params.cols), so the workgroup's q8 input has a fixed size.
override X_COLS: u32 = 0u;
// The workgroup's x̂: code words and block scales of MAX_B vectors, laid out as xq and xd (one
// slot when unused; named overrides, as naga 30 wants for sizes: reduce_rows_*.wgsl).
override X_WORDS: u32 = MAX_B * X_COLS / 4u + 1u;
override X_BLOCKS: u32 = MAX_B * X_COLS / 32u + 1u;
var<workgroup> x_codes: array<u32, X_WORDS>;
var<workgroup> x_scales: array<f32, X_BLOCKS>;
// quantize_q8.wgsl's workgroup size (engine `quantize_q8::WG`): the lanes its norm sums over.
const QUANTIZE_LANES: u32 = 64u;

// Code word i of the q8 input (vector b's words from b·cols/4).
fn xq_word(i: u32) -> u32 {
    if QUANTIZE_X {
        return x_codes[i];
    }
    return xq[i];
}

// Block scale k of the q8 input (vector b's from b·cols/32).
fn xd_scale(k: u32) -> f32 {
    if QUANTIZE_X {
        return x_scales[k];
    }
    return xd[k];
}

// strided_squares.wgsl's element (QUANTIZE_X's norm).
fn squares_value(c: u32) -> f32 {
    return x[c];
}

// QUANTIZE_X: x̂ of the n vectors into x_codes, x_scales — quantize_q8.wgsl's NORM pipeline,
// one workgroup doing every block (the same sums in the same order, the same q8_block). Ends
// with a barrier; uniform control flow.
fn quantize_input(n: u32, lanes: Lanes) {
    let blocks = p.cols / 32u;
    for (var b = 0u; b < MAX_B; b++) {
        if b < n {
            let base = p.x_index + b * p.x_stride;
            var squares = 0.0;
            if lanes.index < QUANTIZE_LANES {
                squares = strided_squares(base + lanes.index, base + p.cols, QUANTIZE_LANES);
            }
            let total = workgroup_sum(squares, lanes);
            let s = 1.0 / sqrt(total / f32(p.cols) + p.eps);
            for (var k = lanes.index; k < blocks; k += WG) {
                var v: array<vec4<f32>, 8>;
                for (var j = 0u; j < 8u; j++) {
                    let e = 32u * k + 4u * j;
                    v[j] = (x4(base + e) * s) * nw[e / 4u];
                }
                let q = q8_block(v);
                let out = b * (p.cols / 4u) + 8u * k;
                for (var j = 0u; j < 8u; j++) {
                    x_codes[out + j] = q.codes[j];
                }
                x_scales[b * blocks + k] = q.d;
            }
        }
    }
    workgroupBarrier();
}

// One input vector's share of a unit: code words a (and b: Q4_K's high group, Q5_K's groups 2, 3)
// in the order the type's dot pairs them with weight words, the scale of each element group's x
// block, and each group's Σ qx (as f32, exact).
struct Xq {
    a: vec4<u32>,
    b: vec4<u32>,
    d: vec4<f32>,
    s: vec4<f32>,
}

const ONES: u32 = 0x01010101u;

// Σ qx of the codes in words a and b (either may be 0: no codes).
fn code_sum(a: u32, b: u32) -> f32 {
    return f32(dot4I8Packed(a, ONES) + dot4I8Packed(b, ONES));
}

// The 4 code words of x elements e..e+15 (e a multiple of 4) of the vector whose codes start at
// word `base`.
fn xq4(base: u32, e: u32) -> vec4<u32> {
    let at = base + e / 4u;
    return vec4<u32>(xq_word(at), xq_word(at + 1u), xq_word(at + 2u), xq_word(at + 3u));
}

// Unit u's share of input vector b.
fn load_xq(b: u32, u: u32) -> Xq {
    let codes = b * (p.cols / 4u);
    let blocks = b * (p.cols / 32u);
    let lane = u % UNIT_LANES;
    let first = (u / UNIT_LANES) * BLOCK_ELEMS;
    var v: Xq;
    switch GGML_TYPE {
        // Q8_0 lane p: elements 8p..8p+7 of one block.
        case 8u: {
            let at = codes + (first + 8u * lane) / 4u;
            v.a = vec4<u32>(xq_word(at), xq_word(at + 1u), 0u, 0u);
            v.d.x = xd_scale(blocks + first / 32u);
        }
        // Q4_K lane l: 16 elements at e (sub-block 2c) and 16 at e + 32 (sub-block 2c + 1).
        case 12u: {
            let e = first + 64u * (lane / 2u) + 16u * (lane % 2u);
            v.a = xq4(codes, e);
            v.b = xq4(codes, e + 32u);
            let k = blocks + e / 32u;
            v.d = vec4<f32>(xd_scale(k), xd_scale(k + 1u), 0.0, 0.0);
            v.s = vec4<f32>(code_sum(v.a.x, v.a.y) + code_sum(v.a.z, v.a.w),
                            code_sum(v.b.x, v.b.y) + code_sum(v.b.z, v.b.w), 0.0, 0.0);
        }
        // Q5_K lane 4·iq + ir: 8 elements at e + 0, 32, 128, 160 (sub-blocks 2iq, 2iq+1, 2iq+4,
        // 2iq+5), two words each: group k in words 2k, 2k + 1 of (a, b).
        case 13u: {
            let e = first + 64u * (lane / 4u) + 8u * (lane % 4u);
            let group = vec4<u32>(0u, 32u, 128u, 160u);
            var w: array<u32, 8>;
            for (var k = 0u; k < 4u; k++) {
                let at = codes + (e + group[k]) / 4u;
                w[2u * k] = xq_word(at);
                w[2u * k + 1u] = xq_word(at + 1u);
                v.d[k] = xd_scale(blocks + (e + group[k]) / 32u);
                v.s[k] = code_sum(w[2u * k], w[2u * k + 1u]);
            }
            v.a = vec4<u32>(w[0], w[1], w[2], w[3]);
            v.b = vec4<u32>(w[4], w[5], w[6], w[7]);
        }
        // Q6_K lane 8·ip + il: 4 elements at e + 32k for k < 4, one word and one block each.
        case 14u: {
            let e = first + 128u * (lane / 8u) + 4u * (lane % 8u);
            for (var k = 0u; k < 4u; k++) {
                v.a[k] = xq_word(codes + (e + 32u * k) / 4u);
                v.d[k] = xd_scale(blocks + (e + 32u * k) / 32u);
            }
        }
        default: {}
    }
    return v;
}

// Σ_k dot4I8Packed(w[k], x[k]) over the 4 word pairs.
fn dot16(w: vec4<u32>, x: vec4<u32>) -> i32 {
    return dot4I8Packed(w.x, x.x) + dot4I8Packed(w.y, x.y) + dot4I8Packed(w.z, x.z)
        + dot4I8Packed(w.w, x.w);
}

// Σ over the unit of w·x̂ for one row (matvec.wgsl's Unit: code words q, h and the group
// multipliers f (a) and g (−m)) and one input vector.
fn dot_unit_q8(u: Unit, v: Xq) -> f32 {
    let q = u.q;
    switch GGML_TYPE {
        case 8u: {
            let s = dot4I8Packed(q.x, v.a.x) + dot4I8Packed(q.y, v.a.y);
            return (u.f.x * v.d.x) * f32(s);
        }
        case 12u: {
            let lo = q & vec4<u32>(0x0f0f0f0fu);
            let hi = (q >> vec4<u32>(4u)) & vec4<u32>(0x0f0f0f0fu);
            let sums = vec2<f32>(vec2<i32>(dot16(lo, v.a), dot16(hi, v.b)));
            return dot(v.d.xy, u.f.xy * sums + u.g.xy * v.s.xy);
        }
        case 13u: {
            let h = u.h;
            let lo = (q & vec4<u32>(0x0f0f0f0fu))
                | vec4<u32>(fifth(h.x, 0u), fifth(h.y, 0u), fifth(h.x, 4u), fifth(h.y, 4u));
            let hi = ((q >> vec4<u32>(4u)) & vec4<u32>(0x0f0f0f0fu))
                | vec4<u32>(fifth(h.x, 1u), fifth(h.y, 1u), fifth(h.x, 5u), fifth(h.y, 5u));
            // Groups as in matvec.wgsl's k_sums: (lo.xy, hi.xy, lo.zw, hi.zw).
            let sums = vec4<f32>(vec4<i32>(
                dot4I8Packed(lo.x, v.a.x) + dot4I8Packed(lo.y, v.a.y),
                dot4I8Packed(hi.x, v.a.z) + dot4I8Packed(hi.y, v.a.w),
                dot4I8Packed(lo.z, v.b.x) + dot4I8Packed(lo.w, v.b.y),
                dot4I8Packed(hi.z, v.b.z) + dot4I8Packed(hi.w, v.b.w)));
            return dot(v.d, u.f * sums + u.g * v.s);
        }
        case 14u: {
            let qh = q.z;
            let g = vec4<u32>(low4(q.x) | ((qh & 0x03030303u) << 4u),
                              low4(q.y) | (((qh >> 2u) & 0x03030303u) << 4u),
                              high4(q.x) | (((qh >> 4u) & 0x03030303u) << 4u),
                              high4(q.y) | (((qh >> 6u) & 0x03030303u) << 4u));
            let centred = (g + vec4<u32>(0x60606060u)) ^ vec4<u32>(0x80808080u);
            let sums = vec4<f32>(vec4<i32>(
                dot4I8Packed(centred.x, v.a.x), dot4I8Packed(centred.y, v.a.y),
                dot4I8Packed(centred.z, v.a.z), dot4I8Packed(centred.w, v.a.w)));
            return dot(u.f * v.d, sums);
        }
        default: {
            return 0.0;
        }
    }
}

// matvec.wgsl's add_products on the integer path.
fn add_products_q8(acc: ptr<function, array<vec4<f32>, 8>>, w: array<Unit, 4>, u: u32, n: u32) {
    for (var b = 0u; b < MAX_B; b++) {
        if b < n {
            let v = load_xq(b, u);
            (*acc)[b] += vec4<f32>(dot_unit_q8(w[0], v), dot_unit_q8(w[1], v), dot_unit_q8(w[2], v),
                                   dot_unit_q8(w[3], v));
        }
    }
}

@compute @workgroup_size(WG)
fn matvec_q8(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) count: vec3<u32>,
             lanes: Lanes) {
    let part_wg = enter_part(wg, count);
    let paired = p.pair_byte != 0u;
    let at = place_of(part_wg, lanes, paired);
    if at.first >= p.rows {
        return;
    }
    let n = min(step.n_tokens, MAX_B);
    if QUANTIZE_X {
        quantize_input(n, lanes);
    }
    let starts = row_starts(at.team_first, paired);
    var acc: array<vec4<f32>, 8>;
    for (var u = at.lane; u < p.units; u += TEAM * UNROLL) {
        let loaded = load_step(starts, u);
        add_products_q8(&acc, loaded.first, u, n);
        if loaded.has_second {
            add_products_q8(&acc, loaded.second, u + TEAM, n);
        }
    }
    finish(&acc, at, n, lanes, paired);
}
