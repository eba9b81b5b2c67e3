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
// bindings: matvec.wgsl's, plus 8 xq (array<u32>, read: the codes of `Q8Vectors`, vector b's at
//           word b·cols/4) · 9 xd (array<f32>, read: the block scales, vector b's at b·cols/32).
//           x, x16 and nw are placeholders (the norm, if any, was folded into quantize_q8).
// dispatch, rows, pairing, accumulate, reduction: as matvec.wgsl (the same helpers).
// pipelines: one per (ggml type ∈ {Q8_0, Q4_K, Q5_K, Q6_K}, MAX_B), entry point matvec_q8, NORM off.
// requires: matvec.wgsl (and what it requires).


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
    return vec4<u32>(xq[at], xq[at + 1u], xq[at + 2u], xq[at + 3u]);
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
            v.a = vec4<u32>(xq[at], xq[at + 1u], 0u, 0u);
            v.d.x = xd[blocks + first / 32u];
        }
        // Q4_K lane l: 16 elements at e (sub-block 2c) and 16 at e + 32 (sub-block 2c + 1).
        case 12u: {
            let e = first + 64u * (lane / 2u) + 16u * (lane % 2u);
            v.a = xq4(codes, e);
            v.b = xq4(codes, e + 32u);
            let k = blocks + e / 32u;
            v.d = vec4<f32>(xd[k], xd[k + 1u], 0.0, 0.0);
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
                w[2u * k] = xq[at];
                w[2u * k + 1u] = xq[at + 1u];
                v.d[k] = xd[blocks + (e + group[k]) / 32u];
                v.s[k] = code_sum(w[2u * k], w[2u * k + 1u]);
            }
            v.a = vec4<u32>(w[0], w[1], w[2], w[3]);
            v.b = vec4<u32>(w[4], w[5], w[6], w[7]);
        }
        // Q6_K lane 8·ip + il: 4 elements at e + 32k for k < 4, one word and one block each.
        case 14u: {
            let e = first + 128u * (lane / 8u) + 4u * (lane % 8u);
            for (var k = 0u; k < 4u; k++) {
                v.a[k] = xq[codes + (e + 32u * k) / 4u];
                v.d[k] = xd[blocks + (e + 32u * k) / 32u];
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
    let flat = enter(wg, count);
    let paired = p.pair_byte != 0u;
    let at = place_of(flat, lanes, paired);
    if at.first >= p.rows {
        return;
    }
    let n = min(step.n_tokens, MAX_B);
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
