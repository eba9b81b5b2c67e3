// matvec_q8_wide — matvec_q8's product (y[b, r] (+)= Σ_c W[r, c]·x̂[b, c], x̂ the q8 blocks of x)
// in the wide form: each invocation's unit is 64 elements of a K-quant super-block instead of
// 32 (Q4_K) or 16 (Q6_K), aimed at the bandwidth the mat-vec leaves unused (issue 18).
//
// Math: as matvec_q8.wgsl — per group of weights sharing a scale a and offset −m and the x block
// (scale dx) it lies in, Σ w·x̂ = dx·(a·Σ q·qx − m·Σ qx), integer sums by dot4I8Packed.
// Why wider units (experiments/NOTES.md, "matvec (2026-12-05 #4)"): the narrow unit loads a
// Q4_K block's 16-byte header in each of its 8 lanes and decodes its scales 8 times per row, and
// a Q6_K lane issues ~11 loads (two-byte aligned words, each possibly two) for 12 bytes of codes.
// Here a Q4_K invocation loads the header once and the 32 code bytes of sub-blocks 2c, 2c + 1
// (4 lanes per block, two 16-byte loads); a Q6_K invocation loads 48 code bytes (16 of the low
// ql, 16 of the high ql, 16 of qh: elements 128ip + 16h + {0, 32, 64, 96} + 0..15) as three
// 16-byte runs of five words each (blocks of 210 bytes start on 2-byte boundaries), so each
// invocation has twice (Q4_K) or four times (Q6_K) the weight bytes in flight per load step
// with fewer load instructions per byte.
// bindings: matvec_q8.wgsl's (xq, xd: the q8 input; x, x16, nw placeholders).
// dispatch, rows, teams, pairing, accumulate, quantized output, reduction: matvec.wgsl's, with
//           params.units = 4 wide units per super-block (UNIT_LANES = 4).
// pipelines: one per (ggml type ∈ {Q4_K, Q6_K}, MAX_B) and layout, entry point matvec_q8_wide.
// Q6_K units (wide_q6_k): the −32 of Q6_K's codes folded through x, Σ (q − 32)·qx = Σ q·qx −
//           32·Σ qx per 16-element group, Σ qx taken once per vector and unit for the 4 rows
//           (`with_code_sums`) and each row's dot4I8Packed chain starting at −32·Σ qx, so the codes
//           are multiplied unbiased (`dot_q6_folded`: no add and xor per code word and row, each
//           group's qh bits placed by one shift and mask); each run's half-word funnel a shift
//           and a multiply-add per word (`run16`: the block's shift is 0 or 16 bits); the four
//           scales from three words funnelled the same way. (Two other loads of the same bytes
//           lost to this one on an H100 and were removed in 2026-12-07 #21: five word loads and
//           a funnel select per run, −2 to −3 % in the model; 16-byte-aligned vec4 pairs shifted
//           into place, −1 to −2 %: experiments/NOTES.md, "q6bw" and "Session 2026-12-06 #8".)
// variants: BATCHED (override, declared in matvec_q8_batched.wgsl; engine `MatVecLayout::batched`,
//           the default for q8 inputs): the loop over input vectors in that file's form — the
//           same sums, bit for bit, x's codes in 16-byte loads (faster at every batch on an H100).
//           Its split (VECTOR_GROUPS; the engine's default on GPUs) spreads a step's vectors
//           over more workgroups, the same bits.
// requires: matvec.wgsl, matvec_q8.wgsl, matvec_q8_batched.wgsl (and what they require).

// One row's wide unit as loaded: code words a, b (Q4_K: the 32 qs bytes; Q6_K: the low and
// high ql runs) and c (Q6_K: qh), and per element group the multiplier f of Σ q·qx and g of
// Σ qx (Q4_K: groups x, y = sub-blocks 2c, 2c + 1; Q6_K: the four 16-element groups).
struct Wide {
    a: vec4<u32>,
    b: vec4<u32>,
    c: vec4<u32>,
    f: vec4<f32>,
    g: vec4<f32>,
}

// Q4_K wide lane c: the header and qs bytes 32c..32c+31 (low nibbles: sub-block 2c, high:
// sub-block 2c + 1); k_unit_of's groups for iq = c % 2 are (2iq, 2iq + 1, 2iq + 4, 2iq + 5), so
// the lane's pair is xy for c < 2 and zw otherwise.
fn wide_q4_k(block: u32, lane: u32) -> Wide {
    var head: vec4<u32>;
    var a: vec4<u32>;
    var b: vec4<u32>;
    if (p.wide & WIDE_W) != 0u {
        let at = block >> 4u;
        head = w16[at];
        a = w16[at + 1u + 2u * lane];
        b = w16[at + 2u + 2u * lane];
    } else {
        let at = block + 16u + 32u * lane;
        head = vec4<u32>(word_at(block), word_at(block + 4u), word_at(block + 8u),
                         word_at(block + 12u));
        a = vec4<u32>(word_at(at), word_at(at + 4u), word_at(at + 8u), word_at(at + 12u));
        b = vec4<u32>(word_at(at + 16u), word_at(at + 20u), word_at(at + 24u),
                      word_at(at + 28u));
    }
    let k = k_unit_of(head, lane % 2u, vec4<u32>(0u), vec2<u32>(0u));
    let upper = lane >= 2u;
    let f = select(k.f.xy, k.f.zw, upper);
    let g = select(k.g.xy, k.g.zw, upper);
    return Wide(a, b, vec4<u32>(0u), vec4<f32>(f, 0.0, 0.0), vec4<f32>(g, 0.0, 0.0));
}

// A Q6_K unit's two words from byte 4·at + shift / 8 (shift 0 or 16: blocks of 210 bytes start
// on 2-byte boundaries) — lo shifted down plus hi·2^16 (or hi·0), the carried half-word: the
// halves do not overlap, so the sum is their or. A shift and a multiply-add per word, no select.
fn funnel16(lo: vec4<u32>, hi: vec4<u32>, shift: u32) -> vec4<u32> {
    return (lo >> vec4<u32>(shift)) + hi * vec4<u32>(shift << 12u);
}

// 16 bytes from word `at` on, shifted by the block's `shift`: five word loads and a funnel (the
// fifth word lies inside the block for every run a Q6_K unit reads: the last ends 34 bytes
// before its block's end).
fn run16(at: u32, shift: u32) -> vec4<u32> {
    let lo = vec4<u32>(src_word(at), src_word(at + 1u), src_word(at + 2u), src_word(at + 3u));
    return funnel16(lo, vec4<u32>(lo.yzw, src_word(at + 4u)), shift);
}

// Q6_K wide lane l = 2·ip + h: ql bytes 64ip + 16h .. +15 (a) and 32 on (b), qh bytes
// 128 + 32ip + 16h .. +15 (c). The lane's i8 scales of groups k < 4 (elements +32k, bytes
// 192 + 8ip + h + 2k) are bytes h and h + 2 of the two words at 192 + 8ip, read as three words
// and funnelled (the third lies inside the block, or for an aligned block with ip = 1 is the
// word d is read from), packed in the order k = 0, 2, 1, 3 and swizzled back after the same
// per-group products; times d.
fn wide_q6_k(block: u32, lane: u32) -> Wide {
    let ip = lane / 2u;
    let h = lane % 2u;
    let shift = (block & 2u) * 8u;
    let ql = (block + 64u * ip + 16u * h) >> 2u;
    let a = run16(ql, shift);
    let b = run16(ql + 8u, shift);
    let c = run16((block + 128u + 32u * ip + 16u * h) >> 2u, shift);
    let at = (block + 192u + 8u * ip) >> 2u;
    let words = funnel16(vec4<u32>(src_word(at), src_word(at + 1u), 0u, 0u),
                         vec4<u32>(src_word(at + 1u), src_word(at + 2u), 0u, 0u), shift);
    let picked = (words.xy >> vec2<u32>(8u * h)) & vec2<u32>(0x00ff00ffu);
    let scales = picked.x | (picked.y << 8u);
    let d = load_f16_at(block + 208u);
    let f = d * byte_floats(scales ^ 0x80808080u, 128.0);
    return Wide(a, b, c, f.xzyw, vec4<f32>(0.0));
}

// Whether the weight is Q6_K (else Q4_K).
fn wide_q6() -> bool {
    return GGML_TYPE == 14u;
}

// Wide unit u of the row starting at byte `row`.
fn load_wide(row: u32, u: u32) -> Wide {
    let lane = u % UNIT_LANES;
    let block = row + (u / UNIT_LANES) * BLOCK_BYTES;
    if wide_q6() {
        return wide_q6_k(block, lane);
    }
    return wide_q4_k(block, lane);
}

fn load_wide_rows(starts: vec4<u32>, u: u32) -> array<Wide, 4> {
    return array<Wide, 4>(load_wide(starts.x, u), load_wide(starts.y, u), load_wide(starts.z, u),
                          load_wide(starts.w, u));
}

// One input vector's share of a wide unit: the code words paired with each group (Q4_K: x, y
// the 32 elements of sub-blocks 2c, 2c + 1, eight words each in lo/hi; Q6_K: group k's 16
// elements in words[k]), each group's x block scale d, (Q4_K) its Σ qx, and (Q6_K) −32·Σ qx of
// each group, where its integer sum starts.
struct WideX {
    words: array<vec4<u32>, 4>,
    d: vec4<f32>,
    s: vec4<f32>,
    base: vec4<i32>,
}

// Where vector b's share of wide unit u lies: the index of its code word w < 16 (words 4k..4k + 3
// are WideX.words[k]) and of group k's block scale, in xq, xd. The loads below and
// matvec_q8_batched.wgsl's read x through these two.
fn wide_x_code(b: u32, u: u32, w: u32) -> u32 {
    let lane = u % UNIT_LANES;
    let first = (u / UNIT_LANES) * BLOCK_ELEMS;
    if wide_q6() {
        // Group k: elements 128ip + 16h + 32k + 0..15, inside x block 4ip + k.
        let e = first + 128u * (lane / 2u) + 16u * (lane % 2u) + 32u * (w / 4u);
        return b * (p.cols / 4u) + e / 4u + w % 4u;
    }
    // Q4_K sub-blocks 2c, 2c + 1: x blocks 2c, 2c + 1 of the super-block, 8 words each.
    return b * (p.cols / 4u) + (first + 64u * lane) / 4u + w;
}

// Q6_K: groups k < 4; Q4_K: k < 2 (its groups are the two x blocks of the unit).
fn wide_x_scale(b: u32, u: u32, k: u32) -> u32 {
    let lane = u % UNIT_LANES;
    let first = (u / UNIT_LANES) * BLOCK_ELEMS;
    if wide_q6() {
        return b * (p.cols / 32u) + (first + 128u * (lane / 2u) + 16u * (lane % 2u)) / 32u + k;
    }
    return b * (p.cols / 32u) + (first + 64u * lane) / 32u + k;
}

// Groups with a scale of their own: 4 (Q6_K) or 2 (Q4_K).
fn wide_x_groups() -> u32 {
    return select(2u, 4u, wide_q6());
}

// Q4_K: the Σ qx of each x block (sub-blocks 2c, 2c + 1: words 0..7 and 8..15), exact; Q6_K:
// −32·Σ qx of each group (words[k]).
fn with_code_sums(x: WideX) -> WideX {
    var v = x;
    if wide_q6() {
        let ones = vec4<u32>(ONES);
        let w = v.words;
        v.base = -32 * vec4<i32>(dot16(w[0], ones), dot16(w[1], ones), dot16(w[2], ones),
                                 dot16(w[3], ones));
    }
    if !wide_q6() {
        let w = v.words;
        v.s = vec4<f32>(code_sum(w[0].x, w[0].y) + code_sum(w[0].z, w[0].w)
                            + code_sum(w[1].x, w[1].y) + code_sum(w[1].z, w[1].w),
                        code_sum(w[2].x, w[2].y) + code_sum(w[2].z, w[2].w)
                            + code_sum(w[3].x, w[3].y) + code_sum(w[3].z, w[3].w),
                        0.0, 0.0);
    }
    return v;
}

fn load_wide_x(b: u32, u: u32) -> WideX {
    var v: WideX;
    for (var k = 0u; k < 4u; k++) {
        let at = wide_x_code(b, u, 4u * k);
        v.words[k] = vec4<u32>(xq[at], xq[at + 1u], xq[at + 2u], xq[at + 3u]);
    }
    for (var k = 0u; k < wide_x_groups(); k++) {
        v.d[k] = xd[wide_x_scale(b, u, k)];
    }
    return with_code_sums(v);
}

// dot_wide's Q6_K sums with the codes as they are, q = low nibble | two qh bits << 4 (0..63,
// non-negative i8; group k's: elements +0 ← low a, qh bits 0-1; +32 ← low b, bits 2-3; +64 ←
// high a, bits 4-5; +96 ← high b, bits 6-7), each group's qh bits moved into bits 4-5 by one
// shift of c and a mask; each group's dot4I8Packed chain starts at v.base = −32·Σ qx: the
// exact integer Σ (q − 32)·qx.
fn dot_q6_folded(w: Wide, v: WideX) -> f32 {
    let nib = vec4<u32>(0x0f0f0f0fu);
    let top = vec4<u32>(0x30303030u);
    let q0 = (w.a & nib) | ((w.c << vec4<u32>(4u)) & top);
    let q1 = (w.b & nib) | ((w.c << vec4<u32>(2u)) & top);
    let q2 = ((w.a >> vec4<u32>(4u)) & nib) | (w.c & top);
    let q3 = ((w.b >> vec4<u32>(4u)) & nib) | ((w.c >> vec4<u32>(2u)) & top);
    let sums = vec4<f32>(v.base + vec4<i32>(dot16(q0, v.words[0]), dot16(q1, v.words[1]),
                                            dot16(q2, v.words[2]), dot16(q3, v.words[3])));
    return dot(w.f * v.d, sums);
}

// Σ over the wide unit of w·x̂ for one row and one input vector.
fn dot_wide(w: Wide, v: WideX) -> f32 {
    if wide_q6() {
        return dot_q6_folded(w, v);
    }
    let nib = vec4<u32>(0x0f0f0f0fu);
    let lo = vec2<i32>(dot16(w.a & nib, v.words[0]), dot16(w.b & nib, v.words[1]));
    let hi = vec2<i32>(dot16((w.a >> vec4<u32>(4u)) & nib, v.words[2]),
                       dot16((w.b >> vec4<u32>(4u)) & nib, v.words[3]));
    let sums = vec2<f32>(f32(lo.x + lo.y), f32(hi.x + hi.y));
    return dot(v.d.xy, w.f.xy * sums + w.g.xy * v.s.xy);
}

// Unit u's products of the 4 rows `w` with one input vector.
fn wide_products(w: array<Wide, 4>, v: WideX) -> vec4<f32> {
    return vec4<f32>(dot_wide(w[0], v), dot_wide(w[1], v), dot_wide(w[2], v), dot_wide(w[3], v));
}

fn add_products_wide(acc: ptr<function, array<vec4<f32>, 8>>, w: array<Wide, 4>, u: u32,
                     n: u32) {
    if BATCHED {
        // The same products, x in 16-byte loads, no branch per vector (matvec_q8_batched.wgsl).
        add_products_batched(acc, w, u, n);
        return;
    }
    for (var b = 0u; b < MAX_B; b++) {
        if b < n {
            (*acc)[b] += wide_products(w, load_wide_x(b, u));
        }
    }
}

@compute @workgroup_size(WG)
fn matvec_q8_wide(@builtin(workgroup_id) wg: vec3<u32>,
                  @builtin(num_workgroups) count: vec3<u32>, lanes: Lanes) {
    // The batched form's split (matvec_q8_batched.wgsl) takes a share of the step's vectors;
    // unsplit, every workgroup takes them all (n = min(n_tokens, MAX_B)).
    let share = split_vectors(enter(wg, count), step.n_tokens);
    let paired = p.pair_byte != 0u;
    let at = place_of(share.x, lanes, paired);
    if at.first >= p.rows || (VECTOR_GROUPS > 1u && share.y == 0u) {
        return;
    }
    let n = share.y;
    let starts = row_starts(at.team_first, paired);
    var acc: array<vec4<f32>, 8>;
    wide_loop(&acc, starts, at.lane, n);
    finish(&acc, at, n, lanes, paired);
}

// The product's loop over the units of lane `lane` of its team.
fn wide_loop(acc: ptr<function, array<vec4<f32>, 8>>, starts: vec4<u32>, lane: u32, n: u32) {
    for (var u = lane; u < p.units; u += TEAM * UNROLL) {
        let first = load_wide_rows(starts, u);
        if UNROLL == 2u {
            // The second unit clamped to the row's last (valid memory), dropped past the end.
            let second = load_wide_rows(starts, min(u + TEAM, p.units - 1u));
            add_products_wide(acc, first, u, n);
            if u + TEAM < p.units {
                add_products_wide(acc, second, u + TEAM, n);
            }
        } else {
            add_products_wide(acc, first, u, n);
        }
    }
}
