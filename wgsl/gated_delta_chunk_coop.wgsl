// gated_delta_chunk_coop — the chunked gated delta rule of gated_delta_chunk.wgsl (same math,
// entry points, grids and results) with its dense products on 16×16 cooperative matrices
//
// Products on the matrix units, f32 accumulators:
// - chunk_prepare: the Gram matrices K·Kᵀ and Q·Kᵀ (64 × 64 over dk), and T·R for W and U
//   (64 × 64 by 64 × (dk + dv));
// - chunk_scan: W·S and Q̃·S (64 × dk by dk × 16 state rows), P·V' (64 × 64 by 64 × 16) and the
//   state update K̃ᵀ·V' (dk × 64 by 64 × 16).
// Kept scalar: γ (a cumulative sum), the masks and decays of A and P (elementwise exps), the
// triangular inverse T = (I + A)⁻¹ (sequential in its rows, gated_delta_chunk_io.wgsl), V' = U −
// W·S, the decay of the state by e^{γ_C} and every store with a bound (live rows, dv).
//
// Precision: each operand x of a product is split into two f16 values, hi = x with the low 13
// bits of its f32 significand cleared (11 significant bits: exact in f16; 0 where that is below
// f16's normal range, 2^-14) and lo' = f16(2^11·(x − hi)), the remainder scaled into f16's normal
// range. A·B is accumulated in two f32 accumulators, main = Σ hi_A·hi_B and small = Σ (hi_A·lo'_B
// + lo'_A·hi_B), and A·B = main + 2^-11·small (the lo·lo term, 2^-22 of the product, dropped):
// about 22 significant bits per operand where plain f16 keeps 11. Neither part goes through an
// f32 → f16 → f32 round trip a compiler may fold, and lo' is an f16 subnormal only where the
// remainder itself is below 2^-25 (what a flush to zero then loses is under 2^-25 absolute), so
// the split holds whether the device keeps f16 subnormals or flushes them. The first form of this
// kernel (hi = f16(x), lo = f16(x − hi) in one accumulator) lost its lo parts on the H100 and was
// ~1e-3 off (experiments/NOTES.md, gdn-coop); the unit tests of engine/reference/coop_delta.rs
// emulate both forms' arithmetic against the f64 reference.
// The state, U, γ and every accumulator stay f32. So the kernel is held to the f32 kernel's
// tolerance of the f64 reference (tests/gpu_gated_delta.rs) and the model suites need no
// reference that rounds like it: plain f16 operands would round q̂, k̂, the state, T and every
// intermediate to 2^-11, which the chunk's decays and the model's gates stretch. Three MMAs per
// product instead of one is cheap here: the kernel waits on barriers and loads, not on the MMAs.
// Operands must stay below f16's 65504 (q̂, k̂ are unit-norm; S, T, V', P are bounded by |v|).
//
// Layouts in the scratch (block = (chunk0_s + c)·nv + h, as in gated_delta_chunk.wgsl):
//   3 scratch (array<f32>, read_write): U [blocks][C][dv] at u_at, γ [blocks][C] at gamma_at;
//   7 halves (array<f16>, read_write), each [blocks][2 (hi, lo)][rows][cols]:
//     W [..][C][dk] at w_at, Q̃ = diag(e^γ) Q [..][C][dk] at q_at, K̃ = diag(e^{γ_C − γ}) K
//     [..][C][dk] at k_at, P [..][C][C] at p_at.
// Q̃, K̃ and P are written by chunk_prepare (which reads q̂ and k̂ anyway) so that chunk_scan
// loads its A operands straight from the scratch, with no staging and no barrier per dk tile.
//
// chunk_prepare (256 invocations = 8 subgroups, one workgroup per chunk, head and sequence):
//   γ, β; K, Q as hi/lo f16 tiles of 64 × 32 (Q̃, K̃ hi/lo to the scratch on the way); subgroup
//   g holds the Gram tiles (g / 2, 2(g mod 2) + {0, 1}) of K·Kᵀ and Q·Kᵀ; Q·Kᵀ through a_sh to P
//   (masked, decayed, split), then K·Kᵀ to A in a_sh; T in place; T (with its unit diagonal)
//   as hi/lo f16; then for each 32-column block of R = diag(β e^γ) K, then R = diag(β) V:
//   R staged hi/lo, subgroup g computes the output tile (g / 2, g mod 2) over k = 64, stored
//   through a_sh and written as W (hi/lo) or U (f32).
// chunk_scan (128 invocations = 4 subgroups, ROWS = 16 state rows of one head): S in state_sh
//   (f32, [row][dk + 4] plus one 16 × 16 tile the idle subgroups store into) and as hi/lo f16
//   (s16); per chunk subgroup g owns chunk rows 16g..16g+15: W·S → vst; V' = U − W·S (hi/lo
//   f16 in d16); O = Q̃·S + P·V' → vst → o (live rows); S ← e^{γ_C} S (scalar), then + K̃ᵀ V'
//   over dk tiles g, g + 4, …; S re-split.
//
// Every product's main and cross-term accumulators are registers (two CoopC each): the split
// costs no workgroup memory.
//
// f16 cells: the f16 scratch and tiles are arrays of `HalfCell` from the file before this one —
// gated_delta_chunk_halves.wgsl (f16, the default) or gated_delta_chunk_quads.wgsl (vec4<f16>,
// `FAK_GDN_CHUNK=coop+quads`). Every f16 store writes four consecutive halves (`put_*4`), every
// fragment load points at cell at / CELL with its stride / CELL: the layouts hold the same
// values in the same places, so their results agree bit for bit.
// SCAN_FUSED (override, `FAK_GDN_CHUNK=coop+fused`): 1 computes Q̃·S in W·S's loop (both read
// S's fragments; Q̃·S no longer waits for V' and the barriers before it), and P·V' with the
// state update's dk tiles, two tiles a pass (all read V''s fragments): two MMA phases a chunk
// instead of four; each accumulator still adds the same products in the same order, so 0 and 1
// agree bit for bit too.
// SCAN_LEAN (override, `FAK_GDN_CHUNK=coop+quads+fused+lean+…`): 1 takes two steps off the chain
// of chunk_scan's chunks — U is loaded before W·S (its L2 round trip under the MMAs instead of
// after the barrier that publishes W·S), and S's decay e^{γ_C} is applied to the state update's
// accumulators as they are loaded (the same multiplication per element) instead of a pass over
// state_sh behind its own barrier (4 barriers a chunk, not 5, where P·V' rides in the update's
// pass). The same values: bit for bit the same results.
// (gdnchunk's PREP_AHEAD, chunk_prepare's loads a round ahead, and SCAN_DEEP, chunk_scan's
// fragments loaded several steps before their MMAs, lost or were neutral on an H100 and were
// removed: experiments/NOTES.md "Second prune".)
// PREP_KEY_HEADS (gated_delta_chunk_io.wgsl's override, `…+splitk+keyheads+…`): chunk_prepare one
// workgroup per (chunk, key head): the Gram tiles once, joined and held as values (4 CoopC a
// subgroup), then finish_head for each value head that reads the key head — its γ, β, Q̃ and K̃
// (put_decayed_keys: k̂, q̂ read again), P, A, T, T·R. U_DIRECT (override, `…+ustore+…`): where dv
// is a whole number of 32-column blocks, T·R's U blocks are stored from the accumulators straight
// to the f32 scratch (put_u_tile: one barrier a block, no pass through a_sh). Both: the same
// values in the same order, bit for bit the same results.
// chunk_scan_split (`…+lean+splitk+…`, at the end of this file): chunk_scan's work on 8
// subgroups, each pair splitting W·S's, Q̃·S's and P·V''s reductions in halves — a new sum
// order, held to the f64 reference rather than to chunk_scan's bits. The default's scan since
// 2026-12-07 (`coop+quads+fused+lean+splitk+blocks`: 61.2 → 57.6 ms at the 27B's 2048-token
// step on an H100); chunk_scan where its workgroup memory does not fit (dk = 256 on 48 KiB).
// The two scans share their setup, chunk head and end, V' quads and fragment loads (the
// helpers before chunk_scan).
// dispatch: as gated_delta_chunk.wgsl (chunk_scan_split on chunk_scan's grid; chunk_prepare's y
//   over nk with PREP_KEY_HEADS).
// workgroup memory: prepare 45.5 KB (h16 28 KB, a_sh 17 KB); scan 4·(16·(dk + 4) + 256) +
//   2·(2·16·(dk + 8)) + 6 KB + 5 KB + 0.5 KB (30.2 KB at dk = 128, 45.2 KB at dk = 256): within
//   NVIDIA's 48 KiB, not Metal's 32 KiB (the 8×8 Metal shape is not offered: gated_delta_chunk.rs).
// variants: `subgroup+f16+coop16x16` (subgroup_id splits the workgroup; subgroups exactly 32
//           wide, as for every coop kernel), the engine's default where the adapter has it
//           (`FAK_GDN_CHUNK=f32` turns it off). overrides: DK (multiple of 16, ≤ 256).
// Every workgroup variable is a whole number of 16 bytes: beside a lone u32 the H200's tiles
//   came out wrong (experiments/coop-probe; tests/gpu_gated_delta.rs checks it).
// naga 30: coopLoad/coopStore pointers and strides bound to `let`s first (wgpu-notes.md §7); no
//   cooperative op under a branch that differs between subgroups (an idle subgroup's store goes
//   to a junk tile instead), nor after a return or in a loop whose condition naga cannot prove
//   uniform: a sequence's chunk count is read from the table (read-only storage) in the entry
//   point itself (not through workgroupUniformLoad: tiles came out wrong beside it on the H200,
//   experiments/NOTES.md, coop-probe).
// requires: sequences.wgsl, matmul_coop16.wgsl (CoopA/B/C, COOP = 16), gated_delta_chunk_io.wgsl,
//           gated_delta_chunk_halves.wgsl | gated_delta_chunk_quads.wgsl (binding 7, the cells).

@group(0) @binding(3) var<storage, read_write> scratch: array<f32>;

override DK: u32 = 128u;
override SCAN_FUSED: u32 = 0u;
override SCAN_LEAN: u32 = 0u;
override U_DIRECT: u32 = 0u;

// Subgroups of chunk_prepare and chunk_scan.
const PREP_SUBGROUPS: u32 = 8u;
const SCAN_SUBGROUPS: u32 = 4u;
// Gram stage: dk columns per stage and the padded row stride of its tiles (halves; strides and
// tile offsets stay multiples of 8 halves = 16 bytes).
const KT: u32 = 32u;
const KS: u32 = KT + 8u;
// T·R: columns of R per block, and the padded row strides of R and T (halves).
const BW: u32 = 32u;
const BS: u32 = BW + 8u;
const TS: u32 = CHUNK + 8u;
// Row stride of a_sh (floats, a multiple of 4 for cooperative loads and stores).
const AP: u32 = CHUNK + 4u;

// h16 in the Gram phase: K hi, K lo, Q hi, Q lo tiles of CHUNK × KS.
const K_HI: u32 = 0u;
const K_LO: u32 = CHUNK * KS;
const Q_HI: u32 = 2u * CHUNK * KS;
const Q_LO: u32 = 3u * CHUNK * KS;
// h16 in the T·R phase: T hi, T lo (CHUNK × TS), R hi, R lo (CHUNK × BS).
const T_HI: u32 = 0u;
const T_LO: u32 = CHUNK * TS;
const R_HI: u32 = 2u * CHUNK * TS;
const R_LO: u32 = 2u * CHUNK * TS + CHUNK * BS;
const H16_HALVES: u32 = 2u * CHUNK * TS + 2u * CHUNK * BS;

var<workgroup> a_sh: array<f32, 4352>; // CHUNK × AP
const H16_CELLS: u32 = H16_HALVES / CELL;
var<workgroup> h16: array<HalfCell, H16_CELLS>;

// chunk_scan: state_sh rows [ROWS][DK + 4], then the junk tile (COOP × COOP, stride COOP).
override STATE_STRIDE: u32 = DK + 4u;
override STATE_FLOATS: u32 = ROWS * STATE_STRIDE + COOP * COOP;
// s16: S hi then S lo, [ROWS][DK + 8] each.
override S16_STRIDE: u32 = DK + 8u;
override S16_HALVES: u32 = 2u * ROWS * S16_STRIDE;
override S16_CELLS: u32 = S16_HALVES / CELL;
// d16: V' hi then V' lo, [CHUNK][ROWS + 8] each; vst: an f32 [CHUNK][ROWS + 4] result tile.
const DS: u32 = ROWS + 8u;
const VS: u32 = ROWS + 4u;
var<workgroup> s16: array<HalfCell, S16_CELLS>;
const D16_CELLS: u32 = 2u * CHUNK * DS / CELL;
// Halves from a hi part to its lo part: s16, d16, and the scratch's [C][dk] and [C][C] regions.
override S_LO: u32 = ROWS * S16_STRIDE;
const D_LO: u32 = CHUNK * DS;
override DK_LO: u32 = CHUNK * DK;
const P_LO: u32 = CHUNK * CHUNK;
var<workgroup> d16: array<HalfCell, D16_CELLS>;
var<workgroup> vst: array<f32, 1280>; // CHUNK × VS

// The least f16 normal, 2^-14, and the scale of the lo parts, 2^11, and its inverse.
const F16_MIN_NORMAL: f32 = 6.103515625e-5;
const LO_SCALE: f32 = 2048.0;
const LO_UNIT: f32 = 4.8828125e-4;

// Four values' hi and lo' parts.
struct Split4 {
    hi: vec4<f16>,
    lo: vec4<f16>,
}

// (hi, lo') of each x: hi is x cut to 11 significant bits (so exact in f16), or 0 below f16's
// normal range; lo' = 2^11·(x − hi) (x − hi and the scaling are exact in f32) rounded to f16.
fn hi_lo4(x: vec4<f32>) -> Split4 {
    let cut = bitcast<vec4<f32>>(bitcast<vec4<u32>>(x) & vec4<u32>(0xffffe000u));
    let hi = select(vec4<f32>(0.0), cut, abs(cut) >= vec4<f32>(F16_MIN_NORMAL));
    return Split4(vec4<f16>(hi), vec4<f16>((x - hi) * LO_SCALE));
}

// The cell of half `at` (a fragment's first half: a multiple of CELL).
fn cell(at: u32) -> u32 {
    return at / CELL;
}

// small + hi_A·lo'_B + lo'_A·hi_B: the cross terms of A·B, in units of 2^-11.
fn mma_cross(a_hi: CoopA, a_lo: CoopA, b_hi: CoopB, b_lo: CoopB, small: CoopC) -> CoopC {
    return coopMultiplyAdd(a_lo, b_hi, coopMultiplyAdd(a_hi, b_lo, small));
}

// The product's value from its two accumulators: main + 2^-11·small.
fn joined(main: CoopC, small: CoopC) -> CoopC {
    return main + LO_UNIT * small;
}

// Index in `halves` of row `row`, column `col` of the hi part of a [blocks][2][rows][cols]
// region at `at` (the lo part is rows·cols further).
fn half_at(at: u32, block: u32, rows: u32, cols: u32, row: u32, col: u32) -> u32 {
    return at + (block * 2u * rows + row) * cols + col;
}

// Four consecutive values from half `at` on as hi (there) and lo' (`part` halves further).
fn put_split4(at: u32, part: u32, x: vec4<f32>) {
    let v = hi_lo4(x);
    put_halves4(at, v.hi);
    put_halves4(at + part, v.lo);
}

// ---- chunk_prepare

// k̂ and q̂ quads of one Gram stage an invocation holds (CHUNK rows × KT columns over 256).
const KEY_QUADS: u32 = CHUNK * KT / 4u / 256u;

// This invocation's quads of dk columns i0..i0 + KT of the chunk's k̂ and q̂ (zero past the
// chunk's live rows or dk).
struct KeyQuads {
    k: array<vec4<f32>, KEY_QUADS>,
    q: array<vec4<f32>, KEY_QUADS>,
}

fn load_keys(ch: Chunk, tid: u32, i0: u32) -> KeyQuads {
    var keys: KeyQuads;
    // Four columns a quad (DK is a multiple of 16: a quad is inside the head or past it).
    for (var n = 0u; n < KEY_QUADS; n++) {
        let e = tid + n * 256u;
        let t = e / (KT / 4u);
        let i = i0 + 4u * (e % (KT / 4u));
        var kv = vec4<f32>();
        var qv = vec4<f32>();
        if live(ch, t) && i < DK {
            let at = (ch.row0 + t) * params.conv_dim + i;
            let k_at = at + ch.k_col;
            let q_at = at + ch.q_col;
            kv = vec4<f32>(mixed[k_at], mixed[k_at + 1u], mixed[k_at + 2u], mixed[k_at + 3u]);
            qv = vec4<f32>(mixed[q_at], mixed[q_at + 1u], mixed[q_at + 2u], mixed[q_at + 3u]);
        }
        keys.k[n] = kv;
        keys.q[n] = qv;
    }
    return keys;
}

// Stage the quads of `keys` (load_keys at i0) as hi/lo tiles, and write K̃ and Q̃ of those
// columns to the scratch (with PREP_KEY_HEADS the value heads' γ is not loaded yet: each value
// head writes its own, put_decayed_keys).
fn stage_keys(ch: Chunk, tid: u32, i0: u32, keys: KeyQuads) {
    let gamma_last = gamma_sh[CHUNK - 1u];
    for (var n = 0u; n < KEY_QUADS; n++) {
        let e = tid + n * 256u;
        let t = e / (KT / 4u);
        let ii = 4u * (e % (KT / 4u));
        let kv = keys.k[n];
        let qv = keys.q[n];
        let k2 = hi_lo4(kv);
        let q2 = hi_lo4(qv);
        put_h16_4(K_HI + t * KS + ii, k2.hi);
        put_h16_4(K_LO + t * KS + ii, k2.lo);
        put_h16_4(Q_HI + t * KS + ii, q2.hi);
        put_h16_4(Q_LO + t * KS + ii, q2.lo);
        if PREP_KEY_HEADS == 0u && i0 + ii < DK {
            put_scaled_keys(ch, t, i0 + ii, kv, qv, gamma_last);
        }
    }
}

// K̃ = e^{γ_C − γ_t} k̂_t and Q̃ = e^{γ_t} q̂_t of chunk row t, columns i..i + 3 (i < dk),
// hi/lo to the scratch; gamma_last is γ_C.
fn put_scaled_keys(ch: Chunk, t: u32, i: u32, kv: vec4<f32>, qv: vec4<f32>, gamma_last: f32) {
    let part = CHUNK * DK;
    let decay_k = exp(gamma_last - gamma_sh[t]);
    let decay_q = exp(gamma_sh[t]);
    put_split4(half_at(params.k_at, ch.block, CHUNK, DK, t, i), part, decay_k * kv);
    put_split4(half_at(params.q_at, ch.block, CHUNK, DK, t, i), part, decay_q * qv);
}

// PREP_KEY_HEADS: K̃ and Q̃ of the value head whose γ is loaded (ch its chunk) to the scratch —
// what stage_keys writes in the other form, from k̂ and q̂ loaded again (the Gram phase read them
// a moment before: L2) with no barrier.
fn put_decayed_keys(ch: Chunk, tid: u32) {
    let gamma_last = gamma_sh[CHUNK - 1u];
    for (var i0 = 0u; i0 < DK; i0 += KT) {
        let keys = load_keys(ch, tid, i0);
        for (var n = 0u; n < KEY_QUADS; n++) {
            let e = tid + n * 256u;
            let t = e / (KT / 4u);
            let ii = 4u * (e % (KT / 4u));
            if i0 + ii < DK {
                put_scaled_keys(ch, t, i0 + ii, keys.k[n], keys.q[n], gamma_last);
            }
        }
    }
}

// One block of columns of R for T·R: BW columns of mixed from col0 (width valid ones), scaled
// by β (and e^γ when `decayed`: then W's columns out_col.., else U's).
struct RBlock {
    col0: u32,
    width: u32,
    decayed: bool,
    out_col: u32,
}

// Blocks of R a chunk_prepare workgroup goes through: ⌈dk / BW⌉ of W, then ⌈dv / BW⌉ of U.
fn r_blocks() -> u32 {
    return w_blocks() + (params.dv + BW - 1u) / BW;
}

fn w_blocks() -> u32 {
    return (DK + BW - 1u) / BW;
}

fn r_block(ch: Chunk, h: u32, b: u32) -> RBlock {
    if b < w_blocks() {
        let c0 = b * BW;
        return RBlock(ch.k_col + c0, min(BW, DK - c0), true, c0);
    }
    let c0 = (b - w_blocks()) * BW;
    return RBlock(v_col(h) + c0, min(BW, params.dv - c0), false, c0);
}

// R quads an invocation stages (CHUNK × BW / 4 over 256).
const R_QUADS: u32 = CHUNK * BW / 4u / 256u;
alias RQuads = array<vec4<f32>, R_QUADS>;

// This invocation's quads of R block `rb` (zero past the live rows and the block's width).
fn load_r(ch: Chunk, tid: u32, rb: RBlock) -> RQuads {
    var r: RQuads;
    for (var n = 0u; n < R_QUADS; n++) {
        let e = tid + n * 256u;
        let t = e / (BW / 4u);
        let ii = 4u * (e % (BW / 4u));
        var x = vec4<f32>();
        if live(ch, t) {
            var scale = beta_sh[t];
            if rb.decayed {
                scale *= exp(gamma_sh[t]);
            }
            let at = (ch.row0 + t) * params.conv_dim + rb.col0 + ii;
            for (var k = 0u; k < 4u; k++) {
                if ii + k < rb.width {
                    x[k] = scale * mixed[at + k];
                }
            }
        }
        r[n] = x;
    }
    return r;
}

// Stages block b of R (of r_blocks()) as hi/lo tiles.
fn stage_block(ch: Chunk, h: u32, tid: u32, b: u32) {
    let r = load_r(ch, tid, r_block(ch, h, b));
    for (var n = 0u; n < R_QUADS; n++) {
        let e = tid + n * 256u;
        let t = e / (BW / 4u);
        let ii = 4u * (e % (BW / 4u));
        let x = hi_lo4(r[n]);
        put_h16_4(R_HI + t * BS + ii, x.hi);
        put_h16_4(R_LO + t * BS + ii, x.lo);
    }
    workgroupBarrier();
}

// The output tile (ta, tb) of T·R for the staged block of R.
fn t_times_r(ta: u32, tb: u32) -> CoopC {
    let ts = TS / CELL;
    let bs = BS / CELL;
    var main = CoopC();
    var small = CoopC();
    for (var s0 = 0u; s0 < CHUNK; s0 += COOP) {
        let t_hi = cell(T_HI + ta * COOP * TS + s0);
        let t_lo = cell(T_LO + ta * COOP * TS + s0);
        let r_hi = cell(R_HI + s0 * BS + tb * COOP);
        let r_lo = cell(R_LO + s0 * BS + tb * COOP);
        let a_hi = coopLoadT<CoopA>(&h16[t_hi], ts);
        let b_hi = coopLoadT<CoopB>(&h16[r_hi], bs);
        main = coopMultiplyAdd(a_hi, b_hi, main);
        small = mma_cross(a_hi, coopLoadT<CoopA>(&h16[t_lo], ts), b_hi,
                          coopLoadT<CoopB>(&h16[r_lo], bs), small);
    }
    return joined(main, small);
}

// Block rb's output tiles, this subgroup's (ta, tb) being `tile`, through a_sh to W (hi/lo, dk
// columns) or U (f32).
fn put_block(ch: Chunk, tid: u32, ta: u32, tb: u32, rb: RBlock, tile: CoopC) {
    let out_at = ta * COOP * AP + tb * COOP;
    let ap = AP;
    coopStoreT(tile, &a_sh[out_at], ap);
    workgroupBarrier();
    for (var e = tid; e < CHUNK * BW / 4u; e += 256u) {
        let t = e / (BW / 4u);
        let ii = 4u * (e % (BW / 4u));
        let at = t * AP + ii;
        let x = vec4<f32>(a_sh[at], a_sh[at + 1u], a_sh[at + 2u], a_sh[at + 3u]);
        let col = rb.out_col + ii;
        if rb.decayed {
            // W's blocks are whole quads (DK is a multiple of 16).
            if ii < rb.width {
                put_split4(half_at(params.w_at, ch.block, CHUNK, DK, t, col), CHUNK * DK, x);
            }
        } else {
            let u_at = params.u_at + (ch.block * CHUNK + t) * params.dv + col;
            for (var k = 0u; k < 4u; k++) {
                if ii + k < rb.width {
                    scratch[u_at + k] = x[k];
                }
            }
        }
    }
    workgroupBarrier();
}

// U_DIRECT: U's block rb, this subgroup's tile (ta, tb) being `tile`, from the accumulator straight to
// the scratch (row stride dv, a whole number of blocks: every column of a block is U's, and the
// tile's first float and stride stay multiples of 16 bytes), then the barrier after which the
// next block's R may be staged. The same floats as put_block's: bit for bit the same U.
fn put_u_tile(ch: Chunk, ta: u32, tb: u32, rb: RBlock, tile: CoopC) {
    let at = params.u_at + (ch.block * CHUNK + ta * COOP) * params.dv + rb.out_col + tb * COOP;
    let dv = params.dv;
    coopStoreT(tile, &scratch[at], dv);
    workgroupBarrier();
}

@compute @workgroup_size(256)
fn chunk_prepare(@builtin(workgroup_id) wg: vec3<u32>,
                 @builtin(local_invocation_index) tid: u32,
                 @builtin(subgroup_id) sg: u32) {
    // The host counts the longest sequence's chunks with room for its lead rows
    // (gated_delta_chunk.rs).
    // chunks(wg.z), inline: naga takes a function's result for non-uniform when it depends on an
    // argument, and no cooperative op may follow a non-uniform return.
    if wg.x >= (seqs.seq[wg.z].len + seqs.seq[wg.z].lead + CHUNK - 1u) / CHUNK {
        return;
    }
    // PREP_KEY_HEADS: ch is the first value head's chunk, whose key columns are every one's.
    let h = wg.y;
    let ch = chunk_of(wg.x, prep_head(h, 0u), wg.z);
    if PREP_KEY_HEADS == 0u {
        start_head(ch, h, tid);
    }

    // Gram tiles of this subgroup: row tile ta, column tiles tb and tb + 1.
    let ta = sg / 2u;
    let tb = (sg % 2u) * 2u;
    let ks = KS / CELL;
    // Each product's main and cross-term accumulators.
    var kk0 = CoopC();
    var kk1 = CoopC();
    var qk0 = CoopC();
    var qk1 = CoopC();
    var kk0_small = CoopC();
    var kk1_small = CoopC();
    var qk0_small = CoopC();
    var qk1_small = CoopC();
    for (var i0 = 0u; i0 < DK; i0 += KT) {
        let keys = load_keys(ch, tid, i0);
        stage_keys(ch, tid, i0, keys);
        workgroupBarrier();
        for (var kk = 0u; kk < KT; kk += COOP) {
            let a_at = K_HI + ta * COOP * KS + kk;
            let b_at = K_HI + tb * COOP * KS + kk;
            let ka_hi_at = cell(a_at);
            let ka_lo_at = cell(a_at + K_LO);
            let qa_hi_at = cell(a_at + Q_HI);
            let qa_lo_at = cell(a_at + Q_LO);
            let b0_hi_at = cell(b_at);
            let b0_lo_at = cell(b_at + K_LO);
            let b1_hi_at = cell(b_at + COOP * KS);
            let b1_lo_at = cell(b_at + COOP * KS + K_LO);
            let ka_hi = coopLoadT<CoopA>(&h16[ka_hi_at], ks);
            let ka_lo = coopLoadT<CoopA>(&h16[ka_lo_at], ks);
            let qa_hi = coopLoadT<CoopA>(&h16[qa_hi_at], ks);
            let qa_lo = coopLoadT<CoopA>(&h16[qa_lo_at], ks);
            // Kᵀ as B: element (i, s) is k_s[i], column-major in the K tile.
            let b0_hi = coopLoad<CoopB>(&h16[b0_hi_at], ks);
            let b0_lo = coopLoad<CoopB>(&h16[b0_lo_at], ks);
            let b1_hi = coopLoad<CoopB>(&h16[b1_hi_at], ks);
            let b1_lo = coopLoad<CoopB>(&h16[b1_lo_at], ks);
            kk0 = coopMultiplyAdd(ka_hi, b0_hi, kk0);
            kk1 = coopMultiplyAdd(ka_hi, b1_hi, kk1);
            qk0 = coopMultiplyAdd(qa_hi, b0_hi, qk0);
            qk1 = coopMultiplyAdd(qa_hi, b1_hi, qk1);
            kk0_small = mma_cross(ka_hi, ka_lo, b0_hi, b0_lo, kk0_small);
            kk1_small = mma_cross(ka_hi, ka_lo, b1_hi, b1_lo, kk1_small);
            qk0_small = mma_cross(qa_hi, qa_lo, b0_hi, b0_lo, qk0_small);
            qk1_small = mma_cross(qa_hi, qa_lo, b1_hi, b1_lo, qk1_small);
        }
        workgroupBarrier();
    }

    // The Gram tiles (each product's accumulators joined) and where the first goes in a_sh.
    let g0 = ta * COOP * AP + tb * COOP;
    let p0 = joined(qk0, qk0_small);
    let p1 = joined(qk1, qk1_small);
    let a0 = joined(kk0, kk0_small);
    let a1 = joined(kk1, kk1_small);
    // (Not one loop for both forms: the value-head form's program stays what it was.)
    if PREP_KEY_HEADS == 0u {
        finish_head(ch, h, tid, sg, g0, p0, p1, a0, a1);
    } else {
        for (var m = 0u; m < prep_heads(); m++) {
            let head = prep_head(h, m);
            let chunk = chunk_of(wg.x, head, wg.z);
            start_head(chunk, head, tid);
            put_decayed_keys(chunk, tid);
            finish_head(chunk, head, tid, sg, g0, p0, p1, a0, a1);
        }
    }
}

// γ and β of value head h's chunk ch into workgroup memory, and γ to the scratch.
fn start_head(ch: Chunk, h: u32, tid: u32) {
    load_gates(ch, h, tid);
    if tid < CHUNK {
        scratch[params.gamma_at + ch.block * CHUNK + tid] = gamma_sh[tid];
    }
}

// What chunk_prepare computes for value head h (chunk ch, its γ and β loaded) from this
// subgroup's Gram tiles — Q·Kᵀ's p0, p1 and K·Kᵀ's a0, a1, the first of each at a_sh's g0, the
// second the next tile along the row: P, A, T, then
// W and U. With PREP_KEY_HEADS it runs once for each value head of the key head, in turn: every
// workgroup variable it writes (a_sh, h16's T and R, γ and β before it) is written after a barrier
// that follows the previous head's last reads, and the Gram tiles are values, not memory.
fn finish_head(ch: Chunk, h: u32, tid: u32, sg: u32, g0: u32, p0: CoopC, p1: CoopC,
               a0: CoopC, a1: CoopC) {
    // P = (Q Kᵀ) ⊙ Γ (lower, with the diagonal) through a_sh to the scratch, hi/lo. (The
    // offsets bound to `let`s first, as for every cooperative op here.)
    let ap = AP;
    let g1 = g0 + COOP;
    coopStoreT(p0, &a_sh[g0], ap);
    coopStoreT(p1, &a_sh[g1], ap);
    workgroupBarrier();
    for (var e = tid; e < CHUNK * CHUNK / 4u; e += 256u) {
        let t = e / (CHUNK / 4u);
        let s = 4u * (e % (CHUNK / 4u));
        var x = vec4<f32>();
        for (var k = 0u; k < 4u; k++) {
            var decay = 0.0;
            if s + k <= t {
                decay = exp(gamma_sh[t] - gamma_sh[s + k]);
            }
            x[k] = a_sh[t * AP + s + k] * decay;
        }
        put_split4(half_at(params.p_at, ch.block, CHUNK, CHUNK, t, s), CHUNK * CHUNK, x);
    }
    workgroupBarrier();
    // A (strictly lower) in a_sh, then T in place.
    coopStoreT(a0, &a_sh[g0], ap);
    coopStoreT(a1, &a_sh[g1], ap);
    workgroupBarrier();
    for (var e = tid; e < CHUNK * CHUNK; e += 256u) {
        let t = e / CHUNK;
        let s = e % CHUNK;
        var a = 0.0;
        if s < t {
            a = beta_sh[t] * a_sh[t * AP + s] * exp(gamma_sh[t] - gamma_sh[s]);
        }
        a_sh[t * AP + s] = a;
    }
    workgroupBarrier();
    invert_unit_lower(ch.n, tid);

    // T with its unit diagonal as hi/lo (a_sh then holds the T·R output tiles).
    for (var e = tid; e < CHUNK * CHUNK / 4u; e += 256u) {
        let t = e / (CHUNK / 4u);
        let s = 4u * (e % (CHUNK / 4u));
        let at = t * AP + s;
        let diagonal = vec4<u32>(s, s + 1u, s + 2u, s + 3u) == vec4<u32>(t);
        let x = hi_lo4(vec4<f32>(a_sh[at], a_sh[at + 1u], a_sh[at + 2u], a_sh[at + 3u])
                       + select(vec4<f32>(0.0), vec4<f32>(1.0), diagonal));
        put_h16_4(T_HI + t * TS + s, x.hi);
        put_h16_4(T_LO + t * TS + s, x.lo);
    }
    workgroupBarrier();
    // W = T diag(β e^γ) K and U = T diag(β) V, one 32-column block of R at a time; subgroup sg
    // computes the block's tile (sg / 2, sg mod 2).
    // U_DIRECT where dv is a whole number of blocks: U's blocks by put_u_tile (one barrier and
    // a_sh's pass less a block). Its loops are apart from W's because a cooperative store may
    // branch on uniform values only, which naga does not take a loop's counter for.
    let oa = sg / 2u;
    let ob = sg % 2u;
    let blocks = r_blocks();
    if (U_DIRECT == 1u) & (params.dv % BW == 0u) {
        for (var b = 0u; b < w_blocks(); b++) {
            stage_block(ch, h, tid, b);
            put_block(ch, tid, oa, ob, r_block(ch, h, b), t_times_r(oa, ob));
        }
        for (var b = w_blocks(); b < blocks; b++) {
            stage_block(ch, h, tid, b);
            put_u_tile(ch, oa, ob, r_block(ch, h, b), t_times_r(oa, ob));
        }
    } else {
        for (var b = 0u; b < blocks; b++) {
            stage_block(ch, h, tid, b);
            put_block(ch, tid, oa, ob, r_block(ch, h, b), t_times_r(oa, ob));
        }
    }
}

// ---- chunk_scan

// Whether P·V' rides in the state update's pass: fused with one pass in all (DK ≤ 128).
// (`&`, not `&&`: naga lowers a short circuit through a variable, which it takes for
// non-uniform, and cooperative ops branch on this.)
fn pv_rides_update() -> bool {
    let rounds = (DK / COOP + SCAN_SUBGROUPS - 1u) / SCAN_SUBGROUPS;
    return (SCAN_FUSED == 1u) & (rounds <= 1u + SCAN_FUSED);
}

// Output x of chunk row t, state row (value column) jr of this workgroup's tile, if the row is
// live and the column < dv.
fn put_o(ch: Chunk, h: u32, rows_tile: u32, t: u32, jr: u32, x: f32) {
    let j = rows_tile * ROWS + jr;
    if live(ch, t) && j < params.dv {
        o[(ch.row0 + t) * params.nv * params.dv + h * params.dv + j] = x;
    }
}

// The chunk's outputs of this workgroup's value columns from vst (live rows, columns < dv).
fn write_o(ch: Chunk, h: u32, rows_tile: u32, tid: u32) {
    for (var e = tid; e < CHUNK * ROWS; e += SCAN_WG) {
        let t = e / ROWS;
        let jr = e % ROWS;
        put_o(ch, h, rows_tile, t, jr, vst[t * VS + jr]);
    }
}

// V' quads a chunk_scan invocation computes (CHUNK × ROWS / 4 over SCAN_WG invocations).
const V_QUADS: u32 = CHUNK * ROWS / 4u / SCAN_WG;

// Quad e of a chunk's CHUNK × ROWS values (V', U, o): chunk row t, state rows (value columns)
// jr..jr + 3 of this workgroup's tile.
struct Quad {
    t: u32,
    jr: u32,
}

fn quad(e: u32) -> Quad {
    return Quad(e / (ROWS / 4u), 4u * (e % (ROWS / 4u)));
}

// U's four values of V' quad e (columns ≥ dv are zero).
fn u_quad(ch: Chunk, rows_tile: u32, e: u32) -> vec4<f32> {
    let q = quad(e);
    let u_at = params.u_at + (ch.block * CHUNK + q.t) * params.dv;
    var u = vec4<f32>();
    for (var k = 0u; k < 4u; k++) {
        let j = rows_tile * ROWS + q.jr + k;
        if j < params.dv {
            u[k] = scratch[u_at + j];
        }
    }
    return u;
}

// s16 (hi/lo) from the f32 state in state_sh, on `threads` invocations.
fn split_state(tid: u32, threads: u32) {
    for (var e = tid; e < ROWS * DK / 4u; e += threads) {
        let r = e / (DK / 4u);
        let i = 4u * (e % (DK / 4u));
        let at = r * STATE_STRIDE + i;
        let x = hi_lo4(vec4<f32>(state_sh[at], state_sh[at + 1u], state_sh[at + 2u],
                                 state_sh[at + 3u]));
        put_s16_4(r * S16_STRIDE + i, x.hi);
        put_s16_4((ROWS + r) * S16_STRIDE + i, x.lo);
    }
}

// V' quad q = x as hi/lo f16 into d16 (the lo parts D_LO further).
fn put_v4(q: Quad, x: vec4<f32>) {
    let v = hi_lo4(x);
    put_d16_4(q.t * DS + q.jr, v.hi);
    put_d16_4(D_LO + q.t * DS + q.jr, v.lo);
}

// vst's four values of quad q.
fn vst4(q: Quad) -> vec4<f32> {
    let at = q.t * VS + q.jr;
    return vec4<f32>(vst[at], vst[at + 1u], vst[at + 2u], vst[at + 3u]);
}

// The scan's start (both scan entry points): this workgroup's state rows (tile `rows_tile` of
// the head's state at `at`) into state_sh on the first SCAN_WG invocations (load_state's
// stride), then S as hi/lo into s16 on all `threads`.
fn begin_scan(at: u32, rows_tile: u32, tid: u32, threads: u32) {
    if tid < SCAN_WG {
        load_state(at, rows_tile, tid);
    }
    workgroupBarrier();
    split_state(tid, threads);
    workgroupBarrier();
}

// A chunk's operands in the scan: its rows, and the half offsets (hi parts; lo parts DK_LO or
// P_LO further) of this subgroup's rows of W, Q̃ and P, and of K̃ (all its rows).
struct ScanChunk {
    ch: Chunk,
    w_hi: u32,
    q_hi: u32,
    p_hi: u32,
    k_hi: u32,
}

// Chunk c of head h, sequence s for the subgroup of chunk rows row0..; the chunk's γ into
// gamma_sh (read after the chunk's first barrier).
fn scan_chunk(c: u32, h: u32, s: u32, row0: u32, tid: u32) -> ScanChunk {
    let ch = chunk_of(c, h, s);
    if tid < CHUNK {
        gamma_sh[tid] = scratch[params.gamma_at + ch.block * CHUNK + tid];
    }
    return ScanChunk(ch, half_at(params.w_at, ch.block, CHUNK, DK, row0, 0u),
                     half_at(params.q_at, ch.block, CHUNK, DK, row0, 0u),
                     half_at(params.p_at, ch.block, CHUNK, CHUNK, row0, 0u),
                     half_at(params.k_at, ch.block, CHUNK, DK, 0u, 0u));
}

// A chunk's end (after its o): S re-split into s16 on `threads` invocations, sequence s's
// snapshot after chunk `save` (head h, tile `rows_tile`), then the barrier before the next
// chunk.
fn end_chunk(c: u32, save: u32, s: u32, h: u32, rows_tile: u32, tid: u32, threads: u32) {
    split_state(tid, threads);
    if c == save && tid < SCAN_WG {
        store_state(snapshot_at(s, h), rows_tile, tid);
    }
    workgroupBarrier();
}

// The scan's fragments, each by the half offset of its hi or lo part (the first half: a
// multiple of CELL). A: W's or Q̃'s 16 chunk rows × 16 dk columns (rows of DK halves); K̃ᵀ's 16
// dk × 16 chunk rows (element (i, t) is K̃[t][i], column-major with stride dk); P's 16 × 16
// (rows of CHUNK halves). B: S's 16 dk × 16 state rows from s16, V''s 16 chunk rows × 16 state
// rows from d16.
fn dk_rows_frag(at: u32) -> CoopA {
    let a = cell(at);
    let stride = DK / CELL;
    return coopLoadT<CoopA>(&halves[a], stride);
}

fn key_frag(at: u32) -> CoopA {
    let a = cell(at);
    let stride = DK / CELL;
    return coopLoad<CoopA>(&halves[a], stride);
}

fn p_frag(at: u32) -> CoopA {
    let a = cell(at);
    let stride = CHUNK / CELL;
    return coopLoadT<CoopA>(&halves[a], stride);
}

fn s_frag(at: u32) -> CoopB {
    let a = cell(at);
    let stride = S16_STRIDE / CELL;
    return coopLoad<CoopB>(&s16[a], stride);
}

fn v_frag(at: u32) -> CoopB {
    let a = cell(at);
    let stride = DS / CELL;
    return coopLoadT<CoopB>(&d16[a], stride);
}

@compute @workgroup_size(SCAN_WG)
fn chunk_scan(@builtin(workgroup_id) wg: vec3<u32>,
              @builtin(local_invocation_index) tid: u32,
              @builtin(subgroup_id) sg: u32) {
    let h = wg.y;
    let s = wg.z;
    let at = state_at(seqs.seq[s].slot, h);
    begin_scan(at, wg.x, tid, SCAN_WG);
    // chunks(s), inline (as in chunk_prepare): the loop below holds cooperative ops.
    let n_chunks = (seqs.seq[s].len + seqs.seq[s].lead + CHUNK - 1u) / CHUNK;
    let save = save_after(s);
    let dk = DK / CELL;
    let chunk = CHUNK / CELL;
    let ss = S16_STRIDE / CELL;
    let ds = DS / CELL;
    let vs = VS;
    // This subgroup's chunk rows (16sg..) and its tile of vst.
    let row0 = sg * COOP;
    let v_at = row0 * VS;
    // The state update's dk tiles: those of round r are sg + 4r; SCAN_FUSED takes two rounds at
    // a time.
    let tiles = DK / COOP;
    let rounds = (tiles + SCAN_SUBGROUPS - 1u) / SCAN_SUBGROUPS;
    let rounds_per_pass = 1u + SCAN_FUSED;
    let pv_in_update = pv_rides_update();
    for (var c = 0u; c < n_chunks; c++) {
        let sc = scan_chunk(c, h, s, row0, tid);
        // Lean: this invocation's U quads now, in flight under W·S.
        var u_early: array<vec4<f32>, V_QUADS>;
        if SCAN_LEAN == 1u {
            for (var k = 0u; k < V_QUADS; k++) {
                u_early[k] = u_quad(sc.ch, wg.x, tid + k * SCAN_WG);
            }
        }

        // W S for this subgroup's rows (and, fused, Q̃ S from the same S fragments).
        var ws = CoopC();
        var ws_small = CoopC();
        var acc = CoopC();
        var acc_small = CoopC();
        for (var i0 = 0u; i0 < DK; i0 += COOP) {
            let a_hi = dk_rows_frag(sc.w_hi + i0);
            let b_hi = s_frag(i0);
            let b_lo = s_frag(S_LO + i0);
            ws = coopMultiplyAdd(a_hi, b_hi, ws);
            ws_small = mma_cross(a_hi, dk_rows_frag(sc.w_hi + i0 + DK_LO), b_hi, b_lo, ws_small);
            if SCAN_FUSED == 1u {
                let qa_hi = dk_rows_frag(sc.q_hi + i0);
                acc = coopMultiplyAdd(qa_hi, b_hi, acc);
                acc_small = mma_cross(qa_hi, dk_rows_frag(sc.q_hi + i0 + DK_LO), b_hi, b_lo,
                                      acc_small);
            }
        }
        coopStoreT(joined(ws, ws_small), &vst[v_at], vs);
        workgroupBarrier();
        // V' = U − W S as hi/lo (zero past dv: U is, and so is S there), four columns an
        // iteration.
        for (var q = 0u; q < V_QUADS; q++) {
            let e = tid + q * SCAN_WG;
            var u: vec4<f32>;
            if SCAN_LEAN == 1u {
                u = u_early[q];
            } else {
                u = u_quad(sc.ch, wg.x, e);
            }
            let v = quad(e);
            put_v4(v, u - vst4(v));
        }
        workgroupBarrier();
        // O = Q̃ S + P V' for this subgroup's rows, into vst (fused: Q̃ S is done; P V' in the
        // state update's pass where it has one, which loads the same V' fragments).
        if SCAN_FUSED == 0u {
            for (var i0 = 0u; i0 < DK; i0 += COOP) {
                let a_hi = dk_rows_frag(sc.q_hi + i0);
                let b_hi = s_frag(i0);
                acc = coopMultiplyAdd(a_hi, b_hi, acc);
                acc_small = mma_cross(a_hi, dk_rows_frag(sc.q_hi + i0 + DK_LO), b_hi,
                                      s_frag(S_LO + i0), acc_small);
            }
        }
        if !pv_in_update {
            for (var s0 = 0u; s0 < CHUNK; s0 += COOP) {
                let a_hi = p_frag(sc.p_hi + s0);
                let b_hi = v_frag(s0 * DS);
                acc = coopMultiplyAdd(a_hi, b_hi, acc);
                acc_small = mma_cross(a_hi, p_frag(sc.p_hi + s0 + P_LO), b_hi,
                                      v_frag(D_LO + s0 * DS), acc_small);
            }
            coopStoreT(joined(acc, acc_small), &vst[v_at], vs);
        }
        // S ← e^{γ_C} S (scalar; the MMAs above read s16, not state_sh). Lean: on the update's
        // accumulators as they are loaded, and no barrier where nothing else needs one.
        let decay_last = exp(gamma_sh[CHUNK - 1u]);
        if SCAN_LEAN == 0u {
            for (var e = tid; e < ROWS * DK; e += SCAN_WG) {
                let at_e = (e / DK) * STATE_STRIDE + e % DK;
                state_sh[at_e] *= decay_last;
            }
        }
        if (SCAN_LEAN == 0u) | !pv_in_update {
            workgroupBarrier();
        }
        if !pv_in_update {
            write_o(sc.ch, h, wg.x, tid);
        }
        // S += K̃ᵀ V' over dk tiles sg, sg + 4, …; a subgroup past the last tile computes the last
        // one again and stores it into the junk tile. Fused, a pass takes rounds r and r + 1
        // (tiles it and it + 4), and P V' where there is one pass, loading each V' fragment once
        // for all of them.
        for (var r = 0u; r < rounds; r += rounds_per_pass) {
            let it = sg + r * SCAN_SUBGROUPS;
            let i0 = min(it, tiles - 1u) * COOP;
            let mine = it < tiles;
            let s_at = select(ROWS * STATE_STRIDE, i0, mine);
            let s_stride = select(COOP, STATE_STRIDE, mine);
            let it2 = it + SCAN_SUBGROUPS;
            let i2 = min(it2, tiles - 1u) * COOP;
            let mine2 = it2 < tiles && SCAN_FUSED == 1u;
            let s_at2 = select(ROWS * STATE_STRIDE, i2, mine2);
            let s_stride2 = select(COOP, STATE_STRIDE, mine2);
            var upd = coopLoad<CoopC>(&state_sh[s_at], s_stride);
            var upd_small = CoopC();
            var upd2 = CoopC();
            var upd2_small = CoopC();
            if SCAN_FUSED == 1u {
                upd2 = coopLoad<CoopC>(&state_sh[s_at2], s_stride2);
            }
            if SCAN_LEAN == 1u {
                upd = decay_last * upd;
                upd2 = decay_last * upd2;
            }
            for (var s0 = 0u; s0 < CHUNK; s0 += COOP) {
                let a_hi = key_frag(sc.k_hi + s0 * DK + i0);
                let b_hi = v_frag(s0 * DS);
                let b_lo = v_frag(D_LO + s0 * DS);
                upd = coopMultiplyAdd(a_hi, b_hi, upd);
                upd_small = mma_cross(a_hi, key_frag(sc.k_hi + s0 * DK + i0 + DK_LO), b_hi, b_lo,
                                      upd_small);
                if pv_in_update {
                    let pa_hi = p_frag(sc.p_hi + s0);
                    acc = coopMultiplyAdd(pa_hi, b_hi, acc);
                    acc_small = mma_cross(pa_hi, p_frag(sc.p_hi + s0 + P_LO), b_hi, b_lo,
                                          acc_small);
                }
                if SCAN_FUSED == 1u {
                    let a2_hi = key_frag(sc.k_hi + s0 * DK + i2);
                    upd2 = coopMultiplyAdd(a2_hi, b_hi, upd2);
                    upd2_small = mma_cross(a2_hi, key_frag(sc.k_hi + s0 * DK + i2 + DK_LO), b_hi,
                                           b_lo, upd2_small);
                }
            }
            coopStore(joined(upd, upd_small), &state_sh[s_at], s_stride);
            if SCAN_FUSED == 1u {
                coopStore(joined(upd2, upd2_small), &state_sh[s_at2], s_stride2);
            }
        }
        if pv_in_update {
            coopStoreT(joined(acc, acc_small), &vst[v_at], vs);
        }
        workgroupBarrier();
        if pv_in_update {
            write_o(sc.ch, h, wg.x, tid);
        }
        end_chunk(c, save, s, h, wg.x, tid, SCAN_WG);
    }
    store_state(at, wg.x, tid);
}

// ---- chunk_scan_split (`FAK_GDN_CHUNK=…+lean+splitk+…`)
//
// chunk_scan's work on twice the subgroups: 256 invocations = 8 subgroups for the same ROWS = 16
// state rows of one head. Subgroup g owns chunk rows 16(g mod 4).. as in chunk_scan, and half
// g / 4 of each reduction over them: W·S and Q̃·S over its half of the dk k-steps (⌈dk/32⌉
// each; an odd count's extra step on half 1 multiplies S by 0), P·V' over its half of the
// chunk's 4 steps; the state update's dk tiles one a subgroup (g, g + 8, …). So a subgroup's
// MMAs a chunk are 24 + 18 instead of chunk_scan's 48 + 36, on twice the warps an SM, with
// chunk_scan's lean form's 4 barriers (U loaded at the chunk's start, S decayed on the
// update's accumulators). SCAN_FUSED: 1 computes Q̃·S in W·S's loop (4 accumulators there),
// 0 after V''s barrier beside the update (2 there: fewer registers at the peak, for the three
// 256-invocation workgroups an SM the grid needs); the same sums either way.
// Each half's W·S and O is joined (main + 2^-11·small) to its own f32 tile of vst2, and the two
// added where they are read: V' = U − (W·S₀ + W·S₁), o = O₀ + O₁. A different sum order from
// chunk_scan's (one joined sum over all k): held to the f64 reference, not to chunk_scan's bits
// (engine/reference/coop_delta.rs emulates it). The state update's sums are chunk_scan's.
// workgroup memory: chunk_scan's with vst2 (2 × CHUNK × VS floats) for vst: 35.1 KB at dk = 128
// (over 48 KiB at dk = 256: the host refuses it there).
// dispatch: as chunk_scan (dv/16, nv, sequences).

const SPLIT_WG: u32 = 256u;
const SPLIT_SUBGROUPS: u32 = 8u;
// V' quads an invocation computes (CHUNK × ROWS / 4 over SPLIT_WG).
const SPLIT_V_QUADS: u32 = CHUNK * ROWS / 4u / SPLIT_WG;
// Half h's f32 tile of W·S, then of O: chunk rows × (ROWS + 4) at h·CHUNK·VS.
var<workgroup> vst2: array<f32, 2560>; // 2 × CHUNK × VS

// dk step `step`'s fragment of S as B, its hi part (part 0) or lo' (part S_LO): the last step's
// where `step` is past it, then times 0, so that half 1's extra step of an odd count adds exact
// zeros to finite products. (Fragments pass one at a time: no struct or array of cooperative
// matrices, which no driver's own shaders are known to use.)
fn state_frag(step: u32, part: u32) -> CoopB {
    let steps = DK / COOP;
    var b = s_frag(part + min(step, steps - 1u) * COOP);
    if steps % 2u == 1u {
        b = select(f16(0.0), f16(1.0), step < steps) * b;
    }
    return b;
}

// The sum of the two halves' values of quad q in vst2.
fn halves_sum4(q: Quad) -> vec4<f32> {
    let at = q.t * VS + q.jr;
    let b = at + CHUNK * VS;
    return vec4<f32>(vst2[at], vst2[at + 1u], vst2[at + 2u], vst2[at + 3u])
        + vec4<f32>(vst2[b], vst2[b + 1u], vst2[b + 2u], vst2[b + 3u]);
}

@compute @workgroup_size(SPLIT_WG)
fn chunk_scan_split(@builtin(workgroup_id) wg: vec3<u32>,
                    @builtin(local_invocation_index) tid: u32,
                    @builtin(subgroup_id) sg: u32) {
    let h = wg.y;
    let s = wg.z;
    let at = state_at(seqs.seq[s].slot, h);
    begin_scan(at, wg.x, tid, SPLIT_WG);
    // chunks(s), inline (as in chunk_scan): the loop below holds cooperative ops.
    let n_chunks = (seqs.seq[s].len + seqs.seq[s].lead + CHUNK - 1u) / CHUNK;
    let save = save_after(s);
    let vs = VS;
    // This subgroup's chunk rows, its half of the reductions and its tile of vst2.
    let half = sg / SCAN_SUBGROUPS;
    let row0 = (sg % SCAN_SUBGROUPS) * COOP;
    let v_at = half * CHUNK * VS + row0 * VS;
    // W·S's and Q̃·S's dk steps of this half: half_steps from k_first (the same count on both
    // halves, so that no cooperative op depends on the subgroup).
    let half_steps = (DK / COOP + 1u) / 2u;
    let k_first = half * half_steps;
    // P·V''s chunk steps of this half.
    let p_first = half * (CHUNK / 2u);
    // The state update's dk tiles: those of round r are sg + 8r.
    let tiles = DK / COOP;
    let rounds = (tiles + SPLIT_SUBGROUPS - 1u) / SPLIT_SUBGROUPS;
    for (var c = 0u; c < n_chunks; c++) {
        let sc = scan_chunk(c, h, s, row0, tid);
        // This invocation's U quads now, in flight under W·S.
        var u: array<vec4<f32>, SPLIT_V_QUADS>;
        for (var q = 0u; q < SPLIT_V_QUADS; q++) {
            u[q] = u_quad(sc.ch, wg.x, tid + q * SPLIT_WG);
        }

        // W·S (and, fused, Q̃·S from the same S fragments) over this half's dk steps.
        var ws = CoopC();
        var ws_small = CoopC();
        var acc = CoopC();
        var acc_small = CoopC();
        for (var k = 0u; k < half_steps; k++) {
            let step = k_first + k;
            let i0 = min(step, tiles - 1u) * COOP;
            let wa = dk_rows_frag(sc.w_hi + i0);
            let wa_lo = dk_rows_frag(sc.w_hi + i0 + DK_LO);
            let b_hi = state_frag(step, 0u);
            let b_lo = state_frag(step, S_LO);
            ws = coopMultiplyAdd(wa, b_hi, ws);
            ws_small = mma_cross(wa, wa_lo, b_hi, b_lo, ws_small);
            if SCAN_FUSED == 1u {
                let qa = dk_rows_frag(sc.q_hi + i0);
                acc = coopMultiplyAdd(qa, b_hi, acc);
                acc_small = mma_cross(qa, dk_rows_frag(sc.q_hi + i0 + DK_LO), b_hi, b_lo,
                                      acc_small);
            }
        }
        coopStoreT(joined(ws, ws_small), &vst2[v_at], vs);
        workgroupBarrier();
        // V' = U − (W·S₀ + W·S₁) as hi/lo (zero past dv: U is, and so is S there).
        for (var q = 0u; q < SPLIT_V_QUADS; q++) {
            let v = quad(tid + q * SPLIT_WG);
            put_v4(v, u[q] - halves_sum4(v));
        }
        workgroupBarrier();
        // Not fused: Q̃·S now (s16 still holds the chunk's S), in the fused loop's order.
        for (var k = 0u; k < half_steps * (1u - SCAN_FUSED); k++) {
            let step = k_first + k;
            let i0 = min(step, tiles - 1u) * COOP;
            let qa = dk_rows_frag(sc.q_hi + i0);
            let b_hi = state_frag(step, 0u);
            acc = coopMultiplyAdd(qa, b_hi, acc);
            acc_small = mma_cross(qa, dk_rows_frag(sc.q_hi + i0 + DK_LO), b_hi,
                                  state_frag(step, S_LO), acc_small);
        }
        // S ← e^{γ_C} S + K̃ᵀ V' over this subgroup's dk tiles (a subgroup past the last tile
        // computes the last one again and stores it into the junk tile), in chunk_scan's order.
        let decay_last = exp(gamma_sh[CHUNK - 1u]);
        for (var r = 0u; r < rounds; r++) {
            let it = sg + r * SPLIT_SUBGROUPS;
            let i0 = min(it, tiles - 1u) * COOP;
            let mine = it < tiles;
            let s_at = select(ROWS * STATE_STRIDE, i0, mine);
            let s_stride = select(COOP, STATE_STRIDE, mine);
            var upd = decay_last * coopLoad<CoopC>(&state_sh[s_at], s_stride);
            var upd_small = CoopC();
            for (var s0 = 0u; s0 < CHUNK; s0 += COOP) {
                let a_hi = key_frag(sc.k_hi + s0 * DK + i0);
                let b_hi = v_frag(s0 * DS);
                upd = coopMultiplyAdd(a_hi, b_hi, upd);
                upd_small = mma_cross(a_hi, key_frag(sc.k_hi + s0 * DK + i0 + DK_LO), b_hi,
                                      v_frag(D_LO + s0 * DS), upd_small);
            }
            coopStore(joined(upd, upd_small), &state_sh[s_at], s_stride);
        }
        // O = Q̃·S + P·V' for this half: P·V' over its chunk steps into the same accumulators.
        for (var k = 0u; k < CHUNK / (2u * COOP); k++) {
            let s0 = p_first + k * COOP;
            let a_hi = p_frag(sc.p_hi + s0);
            let b_hi = v_frag(s0 * DS);
            acc = coopMultiplyAdd(a_hi, b_hi, acc);
            acc_small = mma_cross(a_hi, p_frag(sc.p_hi + s0 + P_LO), b_hi,
                                  v_frag(D_LO + s0 * DS), acc_small);
        }
        coopStoreT(joined(acc, acc_small), &vst2[v_at], vs);
        workgroupBarrier();
        // o = O₀ + O₁, four values an iteration.
        for (var e = tid; e < CHUNK * ROWS / 4u; e += SPLIT_WG) {
            let q = quad(e);
            let x = halves_sum4(q);
            for (var k = 0u; k < 4u; k++) {
                put_o(sc.ch, h, wg.x, q.t, q.jr + k, x[k]);
            }
        }
        end_chunk(c, save, s, h, wg.x, tid, SPLIT_WG);
    }
    if tid < SCAN_WG {
        store_state(at, wg.x, tid);
    }
}
