// matvec — y[b, r] = Σ_c W[r, c]·x[b, c]  (or y[b, r] += …) for b < B, r < rows: GGUF weights as stored
//
// Math: W is `rows` rows of `cols` elements of one ggml type (blocks.wgsl); x is f32 [B, cols] and
// y f32 [B, rows], each at an element offset with a row stride; B = min(step.n_tokens, MAX_B).
// accumulate = 1 adds the product to y (residual adds fused into the output projections).
// Block scales are factored out of the sums, as ggml's own kernels do:
//   Σ_i ((d·sc)·q_i − dmin·m)·x_i = (d·sc)·Σ_i q_i·x_i − (dmin·m)·Σ_i x_i   per 16- or 32-element group.
// Two fusions save the dispatches around a decode step's projections (experiments/NOTES.md):
// - NORM (override): x is the un-normed residual stream and the product is taken with
//   RMSNorm(x)·nw instead:  y[b, r] = s_b · Σ_c W[r, c]·(nw[c]·x[b, c]),
//   s_b = 1 / sqrt(Σ_c x[b, c]² / cols + eps). Every workgroup recomputes s_b (a pass over x,
//   which stays in cache) rather than waiting for a norm dispatch.
// - pairing (params.pair_byte ≠ 0): W holds gate rows followed by up rows (pair_byte bytes
//   later) and y[b, r] = silu(g)·u with g, u the products of gate row r and up row r,
//   silu(z) = z / (1 + e^−z): gate + up + SwiGLU in one dispatch.
//   With params.quantize_out, the paired outputs are also written as 8-bit blocks (q8_block.wgsl:
//   the next product's integer-path input, so it needs no quantize dispatch): vector b's codes at
//   yq[b·rows/4 ..], its scales at yd[b·rows/32 ..]. A workgroup then owns whole blocks (2·TEAMS
//   a multiple of 32 outputs: TEAMS = 16), gathers its outputs in workgroup memory and one
//   invocation per vector rounds its block, the same way quantize_q8.wgsl would round y.
// bindings: 0 w (array<u32>, read: the GGUF blocks) · 1 x (array<f32>, read) · 2 y (array<f32>,
//           read_write) · 3 params (uniform Params) · 4 step (uniform Step, step.wgsl)
//           · 5 w16 (array<vec4<u32>>, read) · 6 x16 (array<vec4<f32>>, read): the same bytes as
//           w and x, read 16 at a time where params.wide says they are 16-byte aligned (else a
//           placeholder the kernel does not read) · 7 nw (array<vec4<f32>>, read: the norm
//           weight of NORM pipelines, cols a multiple of 4; else a placeholder)
//           · 8, 9: the q8 input of matvec_q8.wgsl (placeholders here)
//           · 10 yq (array<u32>, read_write), 11 yd (array<f32>, read_write): the quantized output
//           (placeholders unless quantize_out)
// dispatch: one workgroup of WG invocations per 4·TEAMS consecutive rows (per 2·TEAMS output rows
//           when paired: their gate and up rows), on the 2-D grid of ceil(rows / (4·TEAMS))
//           (ceil(rows / (2·TEAMS))) workgroups (engine `gpu::Grid`). Weights larger than one binding are split into
//           row ranges on the host, one dispatch each (never paired).
// pipelines: one per (ggml type, MAX_B ∈ {1, 2, 4, 8}, NORM), specialised by override constants
//           GGML_TYPE, MAX_B, NORM, UNIT_LANES, BLOCK_ELEMS, BLOCK_BYTES and the layout WG, TEAMS,
//           UNROLL (engine `MatVecLayout`).
// variants: the reduction — reduce_rows_subgroup.wgsl (subgroupAdd, one barrier) or
//           reduce_rows_workgroup.wgsl (a tree in workgroup memory); and the integer path
//           (int-dot variants append matvec_q8.wgsl: entry point matvec_q8, which reads x as 8-bit
//           blocks from bindings 8 and 9 and shares this file's weight loads and epilogue).
// requires: bytes.wgsl, blocks.wgsl, byte_floats.wgsl, grid.wgsl, step.wgsl, q8_block.wgsl,
//           reduce_{subgroup,workgroup}.wgsl (struct Lanes, workgroup_sum), reduce_rows_*.wgsl
//           (sum_rows).
//
// Layout, and why (the strategy of llama.cpp's Metal kernel_mul_mv_q4_K_f32, made independent of
// the subgroup size; experiments/matvec-design.md has the numbers):
// - A row is cut into *units*: the part of a block one invocation decodes. The workgroup's
//   TEAMS teams of TEAM = WG / TEAMS invocations each stream 4 rows (2 gate rows and their up rows
//   when paired): unit u of a team's rows belongs to its invocation u mod TEAM, so consecutive
//   invocations read consecutive bytes. One team (the default) is the whole workgroup on 4 rows;
//   more teams amortise the folded norm's prologue over more rows and give narrow products
//   (4096 outputs) fewer, fuller workgroups. With UNROLL = 2 an invocation loads the units u and
//   u + TEAM of its 4 rows before multiplying either (a clamped unit past the end is loaded and
//   its products dropped), doubling the weight bytes it has in flight. Teams reduce on their own:
//   a halving tree in workgroup memory (log2(TEAM) steps, the same barriers whatever TEAMS is: an
//   earlier form ran sum_rows once per team, and lavapipe's LLVM took minutes per pipeline to
//   split 16 teams' barriers into coroutines) leaves each team's totals in its first invocation,
//   which writes them. Per unit an invocation loads the unit's code words and
//   scales for all 4 rows once (registers), then for each input vector b loads its x values once
//   and dots them against the 4 rows: each weight byte is read once for every b, each x value once
//   for 4 rows. One reduction per output at the end (sum_rows); no barrier in the main loop.
// - Units follow the block layout so that every code word is one aligned-or-not u32 load and
//   every lane decodes with masks: Q4_K/Q5_K 8 lanes per super-block, 32 elements each (Q4_K:
//   16 contiguous qs bytes, two sub-blocks; Q5_K: two u32 of qs in each 128-element half plus
//   two u32 of qh, four sub-blocks; the 6-bit scales come from the header words); Q6_K 16 lanes, 16 elements each (one u32
//   of the low ql, of the high ql and of qh); Q8_0 and the 32-element legacy blocks 4 lanes, 8
//   elements each; F32/F16/BF16 4 consecutive elements per unit.
// - Loads are as wide as the data's alignment allows (params.wide, uniform across a dispatch):
//   x four floats per load, and Q4_K's 16-byte block header and each lane's 16 bytes of codes one
//   vec4<u32> each. Narrow loads read the same values, so both paths compute the same sums.
// - Codes become floats through byte_floats (no int→float conversions, see there); sums run in
//   f32.
// - Rows past the end are clamped to the last row (valid memory, results discarded), so the inner
//   loop has no row guards; F32/F16/BF16 rows may end inside a unit and guard their last unit.

struct Params {
    // Rows in this dispatch's range, their length, units per row and bytes per row.
    rows: u32,
    cols: u32,
    units: u32,
    row_bytes: u32,
    // Byte offset of the range's first row inside the w binding.
    w_byte: u32,
    // Element index of x[0, 0] inside the x binding, and of x[1, 0] − x[0, 0].
    x_index: u32,
    x_stride: u32,
    // Element index of y[0, the range's first row] inside the y binding; y[1, r] − y[0, r].
    y_index: u32,
    y_stride: u32,
    // 1: y += W x; 0: y = W x.
    accumulate: u32,
    // Bit 0 (WIDE_X): every x row starts on a 16-byte boundary of x16; bit 1 (WIDE_W): every row
    // of W and w_byte do, in w16 (Q4_K).
    wide: u32,
    // NORM: the eps of s_b.
    eps: f32,
    // Pairing: bytes from a gate row to its up row inside w (0: not paired).
    pair_byte: u32,
    // 1: also write the (paired) outputs as q8 blocks into yq, yd (see the header).
    quantize_out: u32,
    // Params is 64 bytes, a multiple of 16 (the engine's `Params`).
    pad0: u32,
    pad1: u32,
}

const WIDE_X: u32 = 1u;
const WIDE_W: u32 = 2u;

@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;
@group(0) @binding(4) var<uniform> step: Step;
@group(0) @binding(5) var<storage, read> w16: array<vec4<u32>>;
@group(0) @binding(6) var<storage, read> x16: array<vec4<f32>>;
@group(0) @binding(7) var<storage, read> nw: array<vec4<f32>>;
@group(0) @binding(8) var<storage, read> xq: array<u32>;
@group(0) @binding(9) var<storage, read> xd: array<f32>;
@group(0) @binding(10) var<storage, read_write> yq: array<u32>;
@group(0) @binding(11) var<storage, read_write> yd: array<f32>;

override WG: u32 = 64u;
// Input vectors this pipeline can take (1, 2, 4 or 8): its accumulators are unrolled for them.
override MAX_B: u32 = 1u;
// Teams per workgroup (a power of two ≤ WG): team t of TEAM = WG / TEAMS invocations streams its
// own 4 rows, so a workgroup takes 4·TEAMS rows (see the layout notes above).
override TEAMS: u32 = 1u;
override TEAM: u32 = WG / TEAMS;
// Units an invocation loads before it multiplies (1 or 2): more bytes in flight per invocation.
override UNROLL: u32 = 1u;
// 1 with teams, else 0 (override expressions below are plain arithmetic: naga 30 is fragile
// with them, experiments/NOTES.md).
override HAS_TEAMS: u32 = (TEAMS + WG - 2u) / WG;
// The partial sums sum_rows keeps (reduce_rows_*.wgsl; one slot when teams reduce on their own).
override ROW_SLOTS: u32 = 1u + (1u - HAS_TEAMS) * (WG * MAX_B - 1u);
// The teams' reduction tree: half of each team parks its partials per step (one slot without).
override TEAM_SLOTS: u32 = 1u + HAS_TEAMS * (WG / 2u * MAX_B - 1u);
override GGML_TYPE: u32;
// Units per block, elements per block (4 for F32/F16/BF16: one unit) and bytes per block.
override UNIT_LANES: u32 = 1u;
override BLOCK_ELEMS: u32;
override BLOCK_BYTES: u32;
// x is the residual stream: multiply by RMSNorm(x)·nw (see the header).
override NORM: bool = false;

// The workgroup's copy of params: the batched form's split moves its y_index to the workgroup's
// vectors (matvec_q8_batched.wgsl). Set by enter before anything reads it.
var<private> p: Params;
// The step's index of the workgroup's first input vector: 0, except in the batched form's split
// (matvec_q8_batched.wgsl, VECTOR_GROUPS > 1), where each workgroup takes MAX_B of the step's
// vectors; its acc[b] is vector first_vector + b (quantize_block's output index).
var<private> first_vector: u32;

const ROWS: u32 = 4u;

fn src_word(index: u32) -> u32 {
    return w[index];
}

// Sets p; returns the workgroup's flat index.
fn enter(wg: vec3<u32>, count: vec3<u32>) -> u32 {
    p = params;
    return flat_workgroup(wg, count);
}

// y[at] = v, or y[at] += v when accumulating.
fn write_y(at: u32, v: f32) {
    if p.accumulate != 0u {
        y[at] += v;
        return;
    }
    y[at] = v;
}

// The word at a 4-aligned byte offset (fields of 20-, 24-, 144- and 176-byte blocks, F32 rows).
fn word_at(byte: u32) -> u32 {
    return src_word(byte >> 2u);
}

// One row's share of a unit, as loaded: code words q (and h: Q5_K's fifth bits), the multiplier
// f of Σ q·x and g of Σ x for each of up to four element groups.
struct Unit {
    q: vec4<u32>,
    h: vec2<u32>,
    f: vec4<f32>,
    g: vec4<f32>,
}

// One input vector's share of a unit: v[k] the 4 values paired with code byte lanes of group k
// (see each type's dot), s the sums of x per offset group where the type has offsets.
struct Xs {
    v: array<vec4<f32>, 8>,
    s: vec4<f32>,
}

fn unit(q: vec4<u32>, f: vec4<f32>) -> Unit {
    return Unit(q, vec2<u32>(0u), f, vec4<f32>(0.0));
}

// ---- weights

// F32: elements e..e+3 of the row at byte `at` (the unit's first element), zero past the row.
fn unit_f32(at: u32, e: u32) -> Unit {
    var q = vec4<u32>(0u);
    if e + 4u <= p.cols {
        q = vec4<u32>(word_at(at), word_at(at + 4u), word_at(at + 8u), word_at(at + 12u));
    } else {
        for (var i = 0u; i < 4u; i++) {
            if e + i < p.cols {
                q[i] = word_at(at + 4u * i);
            }
        }
    }
    return unit(q, vec4<f32>(0.0));
}

// F16, BF16: four 16-bit elements packed in q.xy (rows of an odd length start 2 bytes into a word).
fn unit_16bit(at: u32, e: u32) -> Unit {
    var q = vec4<u32>(0u);
    if e + 4u <= p.cols {
        q = vec4<u32>(load_u32_at(at), load_u32_at(at + 4u), 0u, 0u);
    } else {
        // The row ends inside this unit: element by element, never past its last byte.
        for (var i = 0u; i < 4u; i++) {
            if e + i < p.cols {
                q[i / 2u] |= load_u16_at(at + 2u * i) << (16u * (i % 2u));
            }
        }
    }
    return unit(q, vec4<f32>(0.0));
}

// Q8_0 lane p: codes 8p..8p+7.
fn unit_q8_0(block: u32, p: u32) -> Unit {
    let at = block + 2u + 8u * p;
    return unit(vec4<u32>(load_u32_at(at), load_u32_at(at + 4u), 0u, 0u),
                vec4<f32>(load_f16_at(block), 0.0, 0.0, 0.0));
}

// Q4_0 lane p: the qs bytes 4p..4p+3, whose nibbles are elements 4p+i (low) and 16+4p+i (high).
fn unit_q4_0(block: u32, p: u32) -> Unit {
    return unit(vec4<u32>(load_u32_at(block + 2u + 4u * p), 0u, 0u, 0u),
                vec4<f32>(load_f16_at(block), 0.0, 0.0, 0.0));
}

fn unit_q4_1(block: u32, p: u32) -> Unit {
    let dm = unpack2x16float(word_at(block));
    return Unit(vec4<u32>(word_at(block + 4u + 4u * p), 0u, 0u, 0u), vec2<u32>(0u),
                vec4<f32>(dm.x, 0.0, 0.0, 0.0), vec4<f32>(dm.y, 0.0, 0.0, 0.0));
}

// Q5_0 lane p: as Q4_0, with qh shifted so bits 0..3 / 16..19 are the fifth bits of its elements.
fn unit_q5_0(block: u32, p: u32) -> Unit {
    let qh = load_u32_at(block + 2u) >> (4u * p);
    return unit(vec4<u32>(load_u32_at(block + 6u + 4u * p), qh, 0u, 0u),
                vec4<f32>(load_f16_at(block), 0.0, 0.0, 0.0));
}

fn unit_q5_1(block: u32, p: u32) -> Unit {
    let dm = unpack2x16float(word_at(block));
    let qh = word_at(block + 4u) >> (4u * p);
    return Unit(vec4<u32>(word_at(block + 8u + 4u * p), qh, 0u, 0u), vec2<u32>(0u),
                vec4<f32>(dm.x, 0.0, 0.0, 0.0), vec4<f32>(dm.y, 0.0, 0.0, 0.0));
}

// Q4_K/Q5_K: the scales of sub-blocks 2iq, 2iq+1, 2iq+4, 2iq+5 (the lane's four groups), decoded
// from the three header words with masks: the 6-bit values of sub-blocks j < 4 are the low bits
// of bytes j (scale) and j+4 (min); those of j ≥ 4 take 4 bits from byte j+4 and 2 from the top of
// bytes j−4 and j (model-spec.md §2).
fn k_unit(block: u32, iq: u32, q: vec4<u32>, h: vec2<u32>) -> Unit {
    let head = vec4<u32>(word_at(block), word_at(block + 4u), word_at(block + 8u),
                         word_at(block + 12u));
    return k_unit_of(head, iq, q, h);
}

// k_unit from the block's first 16 bytes (d, dmin and the 12 scale bytes) as loaded.
fn k_unit_of(head: vec4<u32>, iq: u32, q: vec4<u32>, h: vec2<u32>) -> Unit {
    let dm = unpack2x16float(head.x);
    let shift = 16u * iq;
    let a = head.y >> shift;
    let b = head.z >> shift;
    let c = head.w >> shift;
    let scales = (a & 0x3f3fu) | (((c & 0x0f0fu) | ((a & 0xc0c0u) >> 2u)) << 16u);
    let mins = (b & 0x3f3fu) | ((((c >> 4u) & 0x0f0fu) | ((b & 0xc0c0u) >> 2u)) << 16u);
    return Unit(q, h, dm.x * byte_floats(scales, 0.0), -dm.y * byte_floats(mins, 0.0));
}

// Q4_K lane l (8 per block): the 16 qs bytes at 16l, i.e. half l%2 of the 32-byte chunk c = l/2,
// whose low nibbles are elements 64c + 16(l%2) + 0..15 (sub-block 2c) and high nibbles the same
// + 32 (sub-block 2c + 1). k_unit_of decodes the scales of sub-blocks 2iq, 2iq+1, 2iq+4, 2iq+5
// with iq = c%2: this lane's pair is the first two for c < 2, the last two otherwise.
fn unit_q4_k(block: u32, lane: u32) -> Unit {
    var head: vec4<u32>;
    var q: vec4<u32>;
    if (p.wide & WIDE_W) != 0u {
        head = w16[block >> 4u];
        q = w16[(block >> 4u) + 1u + lane];
    } else {
        let at = block + 16u + 16u * lane;
        head = vec4<u32>(word_at(block), word_at(block + 4u), word_at(block + 8u),
                         word_at(block + 12u));
        q = vec4<u32>(word_at(at), word_at(at + 4u), word_at(at + 8u), word_at(at + 12u));
    }
    let chunk = lane / 2u;
    let u = k_unit_of(head, chunk % 2u, q, vec2<u32>(0u));
    if chunk < 2u {
        return Unit(q, u.h, vec4<f32>(u.f.xy, 0.0, 0.0), vec4<f32>(u.g.xy, 0.0, 0.0));
    }
    return Unit(q, u.h, vec4<f32>(u.f.zw, 0.0, 0.0), vec4<f32>(u.g.zw, 0.0, 0.0));
}

// Q5_K lane l = 4·iq + ir: qs bytes 32iq + 8ir .. +7 from byte 48 (elements 64iq + 8ir + 0..7
// low, +32 high) and the same 64 bytes on (elements +128, +160); and the qh bytes 8ir .. +7 shifted so that bits 0, 1, 4, 5 of
// each byte lane are the fifth bits of the lane's four groups.
fn unit_q5_k(block: u32, lane: u32) -> Unit {
    let iq = lane / 4u;
    let ir = lane % 4u;
    let at = block + 48u + 32u * iq + 8u * ir;
    let q = vec4<u32>(word_at(at), word_at(at + 4u), word_at(at + 64u), word_at(at + 68u));
    let qh = block + 16u + 8u * ir;
    let h = vec2<u32>(word_at(qh), word_at(qh + 4u)) >> vec2<u32>(2u * iq);
    return k_unit(block, iq, q, h);
}

// Q6_K lane l = 8·ip + il: ql bytes 64ip + 4il .. +3 (elements 128ip + 4il + i, +64 in the high
// nibbles) and 32 bytes on (+32, +96), qh bytes 32ip + 4il .. +3 (2 bits for each of the four),
// and the i8 scales of the four 16-element groups, bytes is, is+2, is+4, is+6 (is = 8ip + il/4).
fn unit_q6_k(block: u32, lane: u32) -> Unit {
    let ip = lane / 8u;
    let il = lane % 8u;
    let ql = block + 64u * ip + 4u * il;
    let q = vec4<u32>(load_u32_at(ql), load_u32_at(ql + 32u),
                      load_u32_at(block + 128u + 32u * ip + 4u * il), 0u);
    let is = 8u * ip + il / 4u;
    let s0 = load_u32_at(block + 192u + is);
    let s1 = load_u32_at(block + 196u + is);
    let scales = (s0 & 0xffu) | ((s0 >> 8u) & 0xff00u) | ((s1 & 0xffu) << 16u)
        | ((s1 << 8u) & 0xff000000u);
    let d = load_f16_at(block + 208u);
    return unit(q, d * byte_floats(scales ^ 0x80808080u, 128.0));
}

// Unit u of the row starting at byte `row`.
fn load_unit(row: u32, u: u32) -> Unit {
    let lane = u % UNIT_LANES;
    let block = row + (u / UNIT_LANES) * BLOCK_BYTES;
    switch GGML_TYPE {
        case 0u: { return unit_f32(block, 4u * u); }
        case 1u, 30u: { return unit_16bit(block, 4u * u); }
        case 2u: { return unit_q4_0(block, lane); }
        case 3u: { return unit_q4_1(block, lane); }
        case 6u: { return unit_q5_0(block, lane); }
        case 7u: { return unit_q5_1(block, lane); }
        case 8u: { return unit_q8_0(block, lane); }
        case 12u: { return unit_q4_k(block, lane); }
        case 13u: { return unit_q5_k(block, lane); }
        case 14u: { return unit_q6_k(block, lane); }
        default: { return unit(vec4<u32>(0u), vec4<f32>(0.0)); }
    }
}

// ---- inputs

// x[at..at+4]; `at` is a multiple of 4 whenever WIDE_X is set (rows start on 16 bytes and every
// unit's x values start on a multiple of 4 elements).
fn x4(at: u32) -> vec4<f32> {
    if (p.wide & WIDE_X) != 0u {
        return x16[at >> 2u];
    }
    return vec4<f32>(x[at], x[at + 1u], x[at + 2u], x[at + 3u]);
}

// Elements e..e+3 (e a multiple of 4) of the vector whose element 0 is x[base], times the norm
// weight under NORM.
fn xv(base: u32, e: u32) -> vec4<f32> {
    if NORM {
        return x4(base + e) * nw[e >> 2u];
    }
    return x4(base + e);
}

// xv, zero past cols (NORM rows are whole vec4s: the tail loop only runs without it).
fn x4_guarded(base: u32, e: u32) -> vec4<f32> {
    if e + 4u <= p.cols {
        return xv(base, e);
    }
    var v = vec4<f32>(0.0);
    for (var i = 0u; i < 4u; i++) {
        if e + i < p.cols {
            v[i] = x[base + e + i];
        }
    }
    return v;
}

fn sum4(v: vec4<f32>) -> f32 {
    return dot(v, vec4<f32>(1.0));
}

// Unit u's x values of the vector whose element 0 is x[base].
fn load_xs(base: u32, u: u32) -> Xs {
    let lane = u % UNIT_LANES;
    let first = (u / UNIT_LANES) * BLOCK_ELEMS;
    var xs: Xs;
    switch GGML_TYPE {
        case 0u, 1u, 30u: {
            xs.v[0] = x4_guarded(base, 4u * u);
        }
        case 8u: {
            xs.v[0] = xv(base, first + 8u * lane);
            xs.v[1] = xv(base, first + 8u * lane + 4u);
        }
        case 2u, 3u, 6u, 7u: {
            xs.v[0] = xv(base, first + 4u * lane);
            xs.v[1] = xv(base, first + 16u + 4u * lane);
            xs.s.x = sum4(xs.v[0] + xs.v[1]);
        }
        case 12u: {
            let at = first + 64u * (lane / 2u) + 16u * (lane % 2u);
            for (var k = 0u; k < 4u; k++) {
                xs.v[k] = xv(base, at + 4u * k);
                xs.v[k + 4u] = xv(base, at + 32u + 4u * k);
            }
            xs.s.x = sum4(xs.v[0] + xs.v[1] + xs.v[2] + xs.v[3]);
            xs.s.y = sum4(xs.v[4] + xs.v[5] + xs.v[6] + xs.v[7]);
        }
        case 13u: {
            let at = first + 64u * (lane / 4u) + 8u * (lane % 4u);
            let group = vec4<u32>(0u, 32u, 128u, 160u);
            for (var k = 0u; k < 4u; k++) {
                xs.v[2u * k] = xv(base, at + group[k]);
                xs.v[2u * k + 1u] = xv(base, at + group[k] + 4u);
                xs.s[k] = sum4(xs.v[2u * k] + xs.v[2u * k + 1u]);
            }
        }
        case 14u: {
            let at = first + 128u * (lane / 8u) + 4u * (lane % 8u);
            for (var k = 0u; k < 4u; k++) {
                xs.v[k] = xv(base, at + 32u * k);
            }
        }
        default: {}
    }
    return xs;
}

// ---- products

fn low4(word: u32) -> u32 {
    return word & 0x0f0f0f0fu;
}

fn high4(word: u32) -> u32 {
    return (word >> 4u) & 0x0f0f0f0fu;
}

// Bit `bit` of each byte lane of `h`, moved to bit 4 (a Q5_K fifth bit).
fn fifth(h: u32, bit: u32) -> u32 {
    return ((h >> bit) & 0x01010101u) << 4u;
}

// Q5_K: the four groups' Σ q·x. lo/hi hold the codes of the low/high nibbles of the qs
// words q.x..q.w; group 0 is (lo.x, lo.y)·(v0, v1), 1 (hi.x, hi.y)·(v2, v3), 2 (lo.z, lo.w)·(v4, v5),
// 3 (hi.z, hi.w)·(v6, v7).
fn k_sums(lo: vec4<u32>, hi: vec4<u32>, xs: Xs) -> vec4<f32> {
    return vec4<f32>(
        dot(byte_floats(lo.x, 0.0), xs.v[0]) + dot(byte_floats(lo.y, 0.0), xs.v[1]),
        dot(byte_floats(hi.x, 0.0), xs.v[2]) + dot(byte_floats(hi.y, 0.0), xs.v[3]),
        dot(byte_floats(lo.z, 0.0), xs.v[4]) + dot(byte_floats(lo.w, 0.0), xs.v[5]),
        dot(byte_floats(hi.z, 0.0), xs.v[6]) + dot(byte_floats(hi.w, 0.0), xs.v[7]));
}

// Σ over the unit of weight·x for one row and one input vector.
fn dot_unit(u: Unit, xs: Xs) -> f32 {
    let q = u.q;
    switch GGML_TYPE {
        case 0u: {
            return dot(bitcast<vec4<f32>>(q), xs.v[0]);
        }
        case 1u: {
            return dot(vec4<f32>(unpack2x16float(q.x), unpack2x16float(q.y)), xs.v[0]);
        }
        case 30u: {
            let bits = vec4<u32>(q.x << 16u, q.x & 0xffff0000u, q.y << 16u, q.y & 0xffff0000u);
            return dot(bitcast<vec4<f32>>(bits), xs.v[0]);
        }
        case 8u: {
            return u.f.x * (dot(byte_floats(q.x ^ 0x80808080u, 128.0), xs.v[0])
                + dot(byte_floats(q.y ^ 0x80808080u, 128.0), xs.v[1]));
        }
        case 2u: {
            return u.f.x * (dot(byte_floats(low4(q.x), 8.0), xs.v[0])
                + dot(byte_floats(high4(q.x), 8.0), xs.v[1]));
        }
        case 3u: {
            return u.f.x * (dot(byte_floats(low4(q.x), 0.0), xs.v[0])
                + dot(byte_floats(high4(q.x), 0.0), xs.v[1])) + u.g.x * xs.s.x;
        }
        case 6u: {
            let lo = low4(q.x) | high_bits4(q.y);
            let hi = high4(q.x) | high_bits4(q.y >> 16u);
            return u.f.x * (dot(byte_floats(lo, 16.0), xs.v[0])
                + dot(byte_floats(hi, 16.0), xs.v[1]));
        }
        case 7u: {
            let lo = low4(q.x) | high_bits4(q.y);
            let hi = high4(q.x) | high_bits4(q.y >> 16u);
            return u.f.x * (dot(byte_floats(lo, 0.0), xs.v[0])
                + dot(byte_floats(hi, 0.0), xs.v[1])) + u.g.x * xs.s.x;
        }
        case 12u: {
            let lo = q & vec4<u32>(0x0f0f0f0fu);
            let hi = (q >> vec4<u32>(4u)) & vec4<u32>(0x0f0f0f0fu);
            let low = dot(byte_floats(lo.x, 0.0), xs.v[0]) + dot(byte_floats(lo.y, 0.0), xs.v[1])
                + dot(byte_floats(lo.z, 0.0), xs.v[2]) + dot(byte_floats(lo.w, 0.0), xs.v[3]);
            let high = dot(byte_floats(hi.x, 0.0), xs.v[4]) + dot(byte_floats(hi.y, 0.0), xs.v[5])
                + dot(byte_floats(hi.z, 0.0), xs.v[6]) + dot(byte_floats(hi.w, 0.0), xs.v[7]);
            return u.f.x * low + u.f.y * high + dot(u.g.xy, xs.s.xy);
        }
        case 13u: {
            let h = u.h;
            let lo = (q & vec4<u32>(0x0f0f0f0fu))
                | vec4<u32>(fifth(h.x, 0u), fifth(h.y, 0u), fifth(h.x, 4u), fifth(h.y, 4u));
            let hi = ((q >> vec4<u32>(4u)) & vec4<u32>(0x0f0f0f0fu))
                | vec4<u32>(fifth(h.x, 1u), fifth(h.y, 1u), fifth(h.x, 5u), fifth(h.y, 5u));
            return dot(u.f, k_sums(lo, hi, xs)) + dot(u.g, xs.s);
        }
        case 14u: {
            let qh = q.z;
            let g0 = low4(q.x) | ((qh & 0x03030303u) << 4u);
            let g1 = low4(q.y) | (((qh >> 2u) & 0x03030303u) << 4u);
            let g2 = high4(q.x) | (((qh >> 4u) & 0x03030303u) << 4u);
            let g3 = high4(q.y) | (((qh >> 6u) & 0x03030303u) << 4u);
            return dot(u.f, vec4<f32>(
                dot(byte_floats(g0, 32.0), xs.v[0]), dot(byte_floats(g1, 32.0), xs.v[1]),
                dot(byte_floats(g2, 32.0), xs.v[2]), dot(byte_floats(g3, 32.0), xs.v[3])));
        }
        default: {
            return 0.0;
        }
    }
}

// NORM: s_b of each input vector (see the header), written before the main loop.
var<workgroup> norm_scales: array<f32, 8>;
// Pairing: each output's total, so the gate row's invocation can read its up row's.
var<workgroup> pair_totals: array<f32, 32>;
// quantize_out: the workgroup's block of 32 outputs of each vector.
var<workgroup> block_values: array<f32, 256>;
// TEAMS > 1: the partials half a team hands to the other half at each step of team_tree.
var<workgroup> team_scratch: array<vec4<f32>, TEAM_SLOTS>;

// NORM: s_b for every b < n into norm_scales (uniform control flow: n is).
fn norm_scales_of(n: u32, lanes: Lanes) {
    for (var b = 0u; b < MAX_B; b++) {
        if b < n {
            let base = p.x_index + b * p.x_stride;
            var squares = 0.0;
            for (var c = 4u * lanes.index; c < p.cols; c += 4u * WG) {
                let v = x4(base + c);
                squares += dot(v, v);
            }
            let total = workgroup_sum(squares, lanes);
            if lanes.index == 0u {
                norm_scales[b] = 1.0 / sqrt(total / f32(p.cols) + p.eps);
            }
        }
    }
}

// The byte offsets of the 4 weight rows a team streams: rows first..first+3, or (paired) gate
// rows first, first+1 and their up rows. Rows past the end are clamped to the last one.
fn row_starts(first: u32, paired: bool) -> vec4<u32> {
    if paired {
        let r = min(vec2<u32>(first) + vec2<u32>(0u, 1u), vec2<u32>(p.rows - 1u));
        let gate = vec2<u32>(p.w_byte) + r * p.row_bytes;
        return vec4<u32>(gate, gate + vec2<u32>(p.pair_byte));
    }
    let rows = min(vec4<u32>(first) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(p.rows - 1u));
    return vec4<u32>(p.w_byte) + rows * p.row_bytes;
}

// Output rows per team: 4, or 2 when each takes a gate row and its up row.
fn outputs_per_team(paired: bool) -> u32 {
    return select(ROWS, ROWS / 2u, paired);
}

// Where a workgroup's invocation works: its workgroup's first output row, its team's first
// output row and its index inside the team.
struct Place {
    first: u32,
    team_first: u32,
    team: u32,
    lane: u32,
}

fn place_of(flat: u32, lanes: Lanes, paired: bool) -> Place {
    let first = flat * TEAMS * outputs_per_team(paired);
    let team = lanes.index / TEAM;
    return Place(first, first + team * outputs_per_team(paired), team, lanes.index % TEAM);
}

// The units of the 4 rows starting at `starts`, unit index u.
fn load_rows(starts: vec4<u32>, u: u32) -> array<Unit, 4> {
    return array<Unit, 4>(load_unit(starts.x, u), load_unit(starts.y, u), load_unit(starts.z, u),
                          load_unit(starts.w, u));
}

// What one step of an invocation's unit loop loads before it multiplies anything: unit u of the
// 4 rows and, with UNROLL = 2, unit u + TEAM (both kernels' loops, matvec and matvec_q8).
struct UnitStep {
    first: array<Unit, 4>,
    second: array<Unit, 4>,
    // u + TEAM is inside the row: its products count.
    has_second: bool,
}

// The loads of the step at unit u. The second unit is clamped to the row's last unit (always
// valid memory; its products are dropped when u + TEAM is past the end).
fn load_step(starts: vec4<u32>, u: u32) -> UnitStep {
    var loads: UnitStep;
    loads.first = load_rows(starts, u);
    if UNROLL == 2u {
        loads.second = load_rows(starts, min(u + TEAM, p.units - 1u));
        loads.has_second = u + TEAM < p.units;
    }
    return loads;
}

// silu(gate)·up, the pairing's output.
fn swiglu(gate: f32, up: f32) -> f32 {
    return gate / (1.0 + exp(-gate)) * up;
}

// One team: writes invocation lanes.index's total (output slot index % 4 of vector index / 4,
// sum_rows's mapping): y = total, y += total, or (paired) silu(gate total)·(up total). Uniform
// control flow.
fn store_output(total: f32, first: u32, n: u32, lanes: Lanes, paired: bool) {
    let b = lanes.index / ROWS;
    let slot = lanes.index % ROWS;
    if paired {
        if lanes.index < ROWS * MAX_B {
            pair_totals[lanes.index] = total;
        }
        workgroupBarrier();
        let row = first + slot;
        if b < n && slot < 2u && row < p.rows {
            let up = pair_totals[lanes.index + 2u];
            y[p.y_index + b * p.y_stride + row] = swiglu(total, up);
        }
        return;
    }
    let row = first + slot;
    if b < n && row < p.rows {
        write_y(p.y_index + b * p.y_stride + row, total);
    }
}

// The workgroup's outputs: with one team, sum_rows over the workgroup and one output per
// invocation (store_output); with several, each team's partials summed by team_tree into its first
// invocation, which writes the team's outputs (store_team). Then, under quantize_out, each vector's
// block is rounded. Uniform control flow.
fn finish(acc: ptr<function, array<vec4<f32>, 8>>, at: Place, n: u32, lanes: Lanes,
          paired: bool) {
    if TEAMS == 1u {
        var total = sum_rows(acc, lanes);
        let b = lanes.index / ROWS;
        if NORM && b < n {
            total *= norm_scales[b];
        }
        store_output(total, at.first, n, lanes, paired);
    } else {
        team_tree(acc, at);
        if at.lane == 0u {
            store_team(acc, at.team_first, n, paired);
        }
    }
    if p.quantize_out != 0u {
        workgroupBarrier();
        if lanes.index < n {
            quantize_block(lanes.index, at.first);
        }
    }
}

// Sums each team's partials into its invocation 0 by halving: at each step the upper half of the
// active invocations park theirs in team_scratch (each team its own WG / TEAMS / 2 slots per
// vector) and the lower half add them. log2(TEAM) steps of two barriers, whatever TEAMS is.
fn team_tree(acc: ptr<function, array<vec4<f32>, 8>>, at: Place) {
    let region = at.team * (TEAM / 2u);
    for (var stride = TEAM / 2u; stride > 0u; stride = stride / 2u) {
        if at.lane >= stride && at.lane < 2u * stride {
            let slot = (region + at.lane - stride) * MAX_B;
            for (var b = 0u; b < MAX_B; b++) {
                team_scratch[slot + b] = (*acc)[b];
            }
        }
        workgroupBarrier();
        if at.lane < stride {
            let slot = (region + at.lane) * MAX_B;
            for (var b = 0u; b < MAX_B; b++) {
                (*acc)[b] += team_scratch[slot + b];
            }
        }
        workgroupBarrier();
    }
}

// A team's outputs from its totals (rows `first`.., vector b's in acc[b]): y = total, y += total,
// or (paired: totals of gate rows 0, 1 and their up rows 2, 3) silu(gate)·up, scaled by s_b
// under NORM; under quantize_out the paired values also go to block_values.
fn store_team(acc: ptr<function, array<vec4<f32>, 8>>, first: u32, n: u32, paired: bool) {
    for (var b = 0u; b < MAX_B; b++) {
        if b < n {
            var totals = (*acc)[b];
            if NORM {
                totals *= norm_scales[b];
            }
            let base = p.y_index + b * p.y_stride;
            for (var slot = 0u; slot < ROWS; slot++) {
                let row = first + slot;
                if paired {
                    if slot < 2u && row < p.rows {
                        let value = swiglu(totals[slot], totals[slot + 2u]);
                        y[base + row] = value;
                        if p.quantize_out != 0u {
                            block_values[32u * b + row % 32u] = value;
                        }
                    }
                } else if row < p.rows {
                    write_y(base + row, totals[slot]);
                }
            }
        }
    }
}

// quantize_out: vector b's block of the 32 outputs from `first` (a multiple of 32) as q8 (b the
// workgroup's slot: the step's vector first_vector + b).
fn quantize_block(b: u32, first: u32) {
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 8u; j++) {
        let at = 32u * b + 4u * j;
        v[j] = vec4<f32>(block_values[at], block_values[at + 1u], block_values[at + 2u],
                         block_values[at + 3u]);
    }
    let q = q8_block(v);
    let out_vector = first_vector + b;
    let codes = out_vector * (p.rows / 4u) + first / 4u;
    for (var j = 0u; j < 8u; j++) {
        yq[codes + j] = q.codes[j];
    }
    let block = out_vector * (p.rows / 32u) + first / 32u;
    yd[block] = q.d;
}

// Adds unit u's products of the 4 rows `w` with every input vector b < n to acc[b].
fn add_products(acc: ptr<function, array<vec4<f32>, 8>>, w: array<Unit, 4>, u: u32, n: u32) {
    for (var b = 0u; b < MAX_B; b++) {
        if b < n {
            let xs = load_xs(p.x_index + b * p.x_stride, u);
            (*acc)[b] += vec4<f32>(dot_unit(w[0], xs), dot_unit(w[1], xs), dot_unit(w[2], xs),
                                   dot_unit(w[3], xs));
        }
    }
}

@compute @workgroup_size(WG)
fn matvec(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) count: vec3<u32>,
          lanes: Lanes) {
    let flat = enter(wg, count);
    let paired = p.pair_byte != 0u;
    let at = place_of(flat, lanes, paired);
    if at.first >= p.rows {
        return;
    }
    let n = min(step.n_tokens, MAX_B);
    if NORM {
        norm_scales_of(n, lanes);
    }
    let starts = row_starts(at.team_first, paired);
    var acc: array<vec4<f32>, 8>;
    for (var u = at.lane; u < p.units; u += TEAM * UNROLL) {
        let loaded = load_step(starts, u);
        add_products(&acc, loaded.first, u, n);
        if loaded.has_second {
            add_products(&acc, loaded.second, u + TEAM, n);
        }
    }
    finish(&acc, at, n, lanes, paired);
}
