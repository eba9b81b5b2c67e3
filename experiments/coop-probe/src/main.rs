//! Which WGSL construct on 16×16 cooperative matrices does the device (or naga's SPIR-V for it)
//! get wrong? wgsl/attn_prefill_coop.wgsl and wgsl/gated_delta_chunk_coop.wgsl give zeros / NaN
//! on the H200 (Vulkan, driver 580) while wgsl/matmul_x16.wgsl passes there; each probe below is
//! one tiny kernel (one 32-lane subgroup, 16 × 16 tiles) that isolates one construct the failing
//! kernels use and x16 does not, runs it on a known input and compares with the CPU. `control`
//! does only what x16 does (coopLoadT A and coopLoad B from workgroup tiles, a zero-constructed
//! accumulator `var`, one MMA, coopStoreT to storage): if it fails, the probe itself is wrong.
//!
//! Every probe is first validated and translated to SPIR-V by naga (any machine; `--spirv DIR`
//! keeps the binaries); on an adapter without 16×16 f16 → f32 matrices (lavapipe) the program
//! stops there. One line per probe: PASS/FAIL, the largest error, the construct, and for a FAIL
//! the first wrong values. Exit status 0 unless a probe fails to translate or to build.

use fak::gpu::{CoopShape, GpuContext, read_back_f32, uniform, upload};
use half::f16;

/// The engine's 16×16 shape file (the CoopA/CoopB/CoopC aliases and COOP).
const SHAPE: &str = include_str!("../../../wgsl/matmul_coop16.wgsl");

/// Bindings and staged tiles every probe module has. Matrices in `src` (and `halves`, a
/// read_write copy): A, B, A2, B2 at 0, 256, 512, 768 halves, each row-major as math matrices.
/// Tiles: ta (A row-major, as x16's X tile), ta_cols (A column-major), tb (B column-major, as
/// x16's W tile), tb_rows (B row-major), ta2, tb2 (A2 row-major, B2 column-major), ta4 / tb4 (A
/// and B as x16 stages them: vec4<f16> tiles, strides in vec4s), tkv (the attention's K/V tile:
/// 16 rows of KV4 vec4s, B's row k at vec4s KV_AT.. of row k, 7 elsewhere), tc (f32, C
/// row-major; also the O staging slot).
const COMMON: &str = r#"
@group(0) @binding(0) var<storage, read> src: array<f16>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
@group(0) @binding(2) var<uniform> info: vec4<u32>;
@group(0) @binding(3) var<storage, read> c_in: array<f32>;
@group(0) @binding(4) var<storage, read_write> halves: array<f16>;
// A read-only table as the sequence table (seqs) is: [1, 0, 0, 0].
@group(0) @binding(5) var<storage, read> table: array<u32>;

const A_AT: u32 = 0u;
const B_AT: u32 = 256u;
const A2_AT: u32 = 512u;
const B2_AT: u32 = 768u;
const KV4: u32 = 18u;
const KV_AT: u32 = 4u;
const ONE: u32 = 1u;
const TILES: u32 = 2u;
const F16_MIN_NORMAL: f32 = 6.103515625e-5;
const LO_SCALE: f32 = 2048.0;
const LO_UNIT: f32 = 4.8828125e-4;

var<workgroup> ta: array<f16, 256>;
var<workgroup> ta_cols: array<f16, 256>;
var<workgroup> tb: array<f16, 256>;
var<workgroup> tb_rows: array<f16, 256>;
var<workgroup> ta2: array<f16, 256>;
var<workgroup> tb2: array<f16, 256>;
var<workgroup> ta4: array<vec4<f16>, 64>;
var<workgroup> tb4: array<vec4<f16>, 64>;
var<workgroup> tkv: array<vec4<f16>, 288>;
var<workgroup> tc: array<f32, 256>;
var<workgroup> flag: u32;

fn quad(at: u32, step: u32) -> vec4<f16> {
    return vec4<f16>(src[at], src[at + step], src[at + 2u * step], src[at + 3u * step]);
}

fn stage(lid: u32) {
    for (var e = lid; e < 256u; e += WG) {
        let t = (e % 16u) * 16u + e / 16u;
        ta[e] = src[A_AT + e];
        ta_cols[t] = src[A_AT + e];
        tb[t] = src[B_AT + e];
        tb_rows[e] = src[B_AT + e];
        ta2[e] = src[A2_AT + e];
        tb2[t] = src[B2_AT + e];
        tc[e] = c_in[e];
    }
    for (var q = lid; q < 64u; q += WG) {
        let r = q / 4u;
        let k = 4u * (q % 4u);
        ta4[q] = quad(A_AT + r * 16u + k, 1u);
        tb4[q] = quad(B_AT + k * 16u + r, 16u);
    }
    for (var q = lid; q < 16u * KV4; q += WG) {
        let k = q / KV4;
        let c = q % KV4;
        var v = vec4<f16>(7.0);
        if c >= KV_AT && c < KV_AT + 4u {
            v = quad(B_AT + k * 16u + 4u * (c - KV_AT), 1u);
        }
        tkv[q] = v;
    }
}

"#;

/// gdn's split (gated_delta_chunk_coop.wgsl).
const HI_LO: &str = r#"
fn hi_lo(x: f32) -> vec2<f16> {
    let cut = bitcast<f32>(bitcast<u32>(x) & 0xffffe000u);
    let hi = select(0.0, cut, abs(cut) >= F16_MIN_NORMAL);
    return vec2<f16>(f16(hi), f16((x - hi) * LO_SCALE));
}
"#;

/// gdn's cross terms.
const MMA_CROSS: &str = r#"
fn mma_cross(a_hi: CoopA, a_lo: CoopA, b_hi: CoopB, b_lo: CoopB, small: CoopC) -> CoopC {
    return coopMultiplyAdd(a_lo, b_hi, coopMultiplyAdd(a_hi, b_lo, small));
}
"#;

/// gdn's join: main + 2^-11·small.
const JOINED: &str = r#"
fn joined(main: CoopC, small: CoopC) -> CoopC {
    return main + LO_UNIT * small;
}
"#;

/// attn_prefill_coop.wgsl's rescale: O through a workgroup slot, each lane scaling its cells.
const SCALED: &str = r#"
fn scaled(o: CoopC, slot: u32, lane: u32, alpha: f32) -> CoopC {
    let stride = 16u;
    workgroupBarrier();
    coopStoreT(o, &tc[slot], stride);
    workgroupBarrier();
    let at = slot + (lane / 2u) * 16u + (lane % 2u) * 8u;
    for (var c = 0u; c < 8u; c++) {
        tc[at + c] *= alpha;
    }
    workgroupBarrier();
    return coopLoadT<CoopC>(&tc[slot], stride);
}
"#;

/// A function returning an MMA of its parameters.
const MMA: &str = r#"
fn mma(a: CoopA, b: CoopB, c: CoopC) -> CoopC {
    return coopMultiplyAdd(a, b, c);
}
"#;

/// A function with a local accumulator var, returned.
const PRODUCT: &str = r#"
fn product(a: CoopA, b: CoopB) -> CoopC {
    var acc = CoopC();
    acc = coopMultiplyAdd(a, b, acc);
    return acc;
}
"#;

/// A function returning a fragment load.
const LOAD_A: &str = r#"
fn load_a(at: u32) -> CoopA {
    let s = 16u;
    return coopLoadT<CoopA>(&ta[at], s);
}
"#;

/// A function returning a fragment load.
const LOAD_B: &str = r#"
fn load_b(at: u32) -> CoopB {
    let s = 16u;
    return coopLoad<CoopB>(&tb[at], s);
}
"#;

/// attn_prefill_coop.wgsl's score_regs: eight fragments by value, those past TILES unused.
const TWO_PRODUCTS: &str = r#"
fn two_products(q0: CoopA, q1: CoopA, q2: CoopA, q3: CoopA, q4: CoopA, q5: CoopA, q6: CoopA,
                q7: CoopA) -> CoopC {
    let s = 16u;
    let at = 0u;
    var acc = CoopC();
    acc = coopMultiplyAdd(q0, coopLoad<CoopB>(&tb[at], s), acc);
    if TILES > 1u {
        acc = coopMultiplyAdd(q1, coopLoad<CoopB>(&tb2[at], s), acc);
    }
    if TILES > 2u {
        acc = coopMultiplyAdd(q2, coopLoad<CoopB>(&tb2[at], s), acc);
    }
    return acc;
}
"#;

/// attn_prefill_coop.wgsl's P·V and output path: P (f16, stride 24 halves) as A through a
/// function, V row-major from the padded vec4 K/V tile, O out through the slot.
const ATTN_O: &str = r#"
var<workgroup> p_tile: array<f16, 384>;

fn p_block(kb: u32) -> CoopA {
    let at = kb * 16u;
    let stride = 24u;
    return coopLoadT<CoopA>(&p_tile[at], stride);
}

fn pv(o: CoopC, p: CoopA, dt: u32) -> CoopC {
    let at = KV_AT + dt * 4u;
    let stride = KV4;
    let v = coopLoadT<CoopB>(&tkv[at], stride);
    return coopMultiplyAdd(p, v, o);
}

fn write_tile(o: CoopC, slot: u32, lane: u32) {
    let stride = 16u;
    workgroupBarrier();
    coopStoreT(o, &tc[slot], stride);
    workgroupBarrier();
    let at = slot + (lane / 2u) * 16u + (lane % 2u) * 8u;
    for (var c = 0u; c < 8u; c++) {
        dst[at + c] = tc[at + c];
    }
}

// One slot per subgroup (`slot` = 256 · subgroup_id).
var<workgroup> o_stage: array<f32, 1024>;

fn write_tile_wide(o: CoopC, slot: u32, out: u32, lane: u32) {
    let stride = 16u;
    workgroupBarrier();
    coopStoreT(o, &o_stage[slot], stride);
    workgroupBarrier();
    let cell = (lane / 2u) * 16u + (lane % 2u) * 8u;
    for (var c = 0u; c < 8u; c++) {
        dst[out + cell + c] = o_stage[slot + cell + c];
    }
}

fn scaled_wide(o: CoopC, slot: u32, lane: u32, alpha: f32) -> CoopC {
    let stride = 16u;
    workgroupBarrier();
    coopStoreT(o, &o_stage[slot], stride);
    workgroupBarrier();
    let at = slot + (lane / 2u) * 16u + (lane % 2u) * 8u;
    for (var c = 0u; c < 8u; c++) {
        o_stage[at + c] *= alpha;
    }
    workgroupBarrier();
    return coopLoadT<CoopC>(&o_stage[slot], stride);
}
"#;

/// A flag padded to 16 bytes (the failing kernels' flags are lone u32s in workgroup memory, beside
/// f16 / f32 tiles that cooperative loads need 16-byte aligned).
const FLAG4: &str = r#"
var<workgroup> flag4: vec4<u32>;
"#;

/// The probes' inputs, as the CPU sees them (A, B, A2, B2 exact in f16).
struct Data {
    a: Vec<f32>,
    b: Vec<f32>,
    a2: Vec<f32>,
    b2: Vec<f32>,
    /// 256 f32 values in [-1, 1] (C; Y of `split_product`), then 256 more (X of
    /// `split_product` and `hi_lo_split`'s inputs), some tiny.
    c: Vec<f32>,
}

fn pattern(f: impl Fn(usize, usize) -> f32) -> Vec<f32> {
    (0..256).map(|e| f(e / 16, e % 16)).collect()
}

/// A deterministic value in [-1, 1) (not exact in f16).
fn noise(e: usize, seed: u64) -> f32 {
    let h = (e as u64 + 1).wrapping_mul(2654435761 ^ seed) % 1_000_003;
    (h as f64 / 1_000_003.0 * 2.0 - 1.0) as f32
}

impl Data {
    fn new() -> Self {
        let mut c: Vec<f32> = (0..512).map(|e| noise(e, 0x9e37)).collect();
        for (e, x) in c.iter_mut().enumerate().skip(256) {
            if e % 16 == 5 {
                *x *= 1e-6;
            }
        }
        Data {
            a: pattern(|i, k| ((i * 7 + k * 3) % 11) as f32 * 0.125 - 0.625),
            b: pattern(|k, j| ((k * 5 + j * 2 + 1) % 9) as f32 * 0.25 - 1.0),
            a2: pattern(|i, k| ((i * 3 + k * 5 + 2) % 13) as f32 * 0.0625 - 0.375),
            b2: pattern(|k, j| ((k * 11 + j * 7 + 3) % 7) as f32 * 0.5 - 1.5),
            c,
        }
    }
    fn halves(&self) -> Vec<f16> {
        [&self.a, &self.b, &self.a2, &self.b2]
            .into_iter()
            .flatten()
            .map(|&x| f16::from_f32(x))
            .collect()
    }
}

/// x · y of 16 × 16 row-major matrices, in f64.
fn mm(x: &[f32], y: &[f32]) -> Vec<f32> {
    pattern(|i, j| {
        (0..16)
            .map(|k| f64::from(x[i * 16 + k]) * f64::from(y[k * 16 + j]))
            .sum::<f64>() as f32
    })
}

fn transpose(x: &[f32]) -> Vec<f32> {
    pattern(|i, j| x[j * 16 + i])
}

fn scale(x: &[f32], s: f32) -> Vec<f32> {
    x.iter().map(|v| v * s).collect()
}

fn add(x: &[f32], y: &[f32]) -> Vec<f32> {
    x.iter().zip(y).map(|(p, q)| p + q).collect()
}

/// gated_delta_chunk_coop.wgsl's hi_lo on the CPU.
fn hi_lo(x: f32) -> (f32, f32) {
    let cut = f32::from_bits(x.to_bits() & 0xffff_e000);
    let hi = if cut.abs() >= 6.103_515_6e-5 {
        cut
    } else {
        0.0
    };
    (
        f16::from_f32(hi).to_f32(),
        f16::from_f32((x - hi) * 2048.0).to_f32(),
    )
}

struct Probe {
    name: &'static str,
    /// The construct isolated, and where the failing kernels use it.
    construct: &'static str,
    /// Invocations per workgroup (32: one subgroup).
    wg: u32,
    /// Workgroups dispatched (a second one tests an early return).
    groups: u32,
    /// Helper functions the module gets (only these: the control has none).
    helpers: &'static [&'static str],
    body: &'static str,
    expect: fn(&Data) -> Vec<f32>,
    /// Allowed |got − want|: absolute, plus relative to |want|.
    tol: (f32, f32),
}

/// Exact products of f16 values accumulated in f32 (sums of multiples of 2^-9): only the
/// accumulation order can round.
const EXACT: (f32, f32) = (1e-5, 1e-6);

macro_rules! body {
    ($($part:expr),* $(,)?) => { concat!($($part),*) };
}

fn probes() -> Vec<Probe> {
    vec![
        Probe {
            name: "control",
            construct: "x16's ops only: coopLoadT A + coopLoad B (f16 workgroup tiles), var acc = CoopC(), one MMA, coopStoreT to storage",
            wg: 32,
            groups: 1,
            helpers: &[],
            body: body!(
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    var acc = CoopC();\n    acc = coopMultiplyAdd(a, b, acc);\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| mm(&d.a, &d.b),
            tol: EXACT,
        },
        Probe {
            name: "control_loop",
            construct: "x16's K loop: accumulator var carried through 3 iterations with workgroupBarrier",
            wg: 32,
            groups: 1,
            helpers: &[],
            body: body!(
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    var acc = CoopC();\n    for (var k = 0u; k < 3u; k++) {\n        acc = coopMultiplyAdd(a, b, acc);\n        workgroupBarrier();\n    }\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| scale(&mm(&d.a, &d.b), 3.0),
            tol: EXACT,
        },
        Probe {
            name: "vec4_tiles",
            construct: "x16's vec4<f16> tiles: coopLoadT A / coopLoad B through vec4 pointers, strides in vec4s",
            wg: 32,
            groups: 1,
            helpers: &[],
            body: body!(
                "    let s4 = 4u;\n    let a = coopLoadT<CoopA>(&ta4[at], s4);\n    let b = coopLoad<CoopB>(&tb4[at], s4);\n",
                "    var acc = CoopC();\n    acc = coopMultiplyAdd(a, b, acc);\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| mm(&d.a, &d.b),
            tol: EXACT,
        },
        Probe {
            name: "store_via_slot",
            construct: "store_tile / write_tile: coopStoreT to a workgroup slot, barrier, lanes copy out",
            wg: 32,
            groups: 1,
            helpers: &[],
            body: body!(
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    var acc = CoopC();\n    acc = coopMultiplyAdd(a, b, acc);\n",
                "    coopStoreT(acc, &tc[at], s);\n    workgroupBarrier();\n",
                "    for (var e = lane; e < 256u; e += 32u) {\n        dst[e] = tc[e];\n    }\n"
            ),
            expect: |d| mm(&d.a, &d.b),
            tol: EXACT,
        },
        Probe {
            name: "zero_c_operand",
            construct: "CoopC() straight into coopMultiplyAdd (the old register form's P·V)",
            wg: 32,
            groups: 1,
            helpers: &[],
            body: body!(
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    let acc = coopMultiplyAdd(a, b, CoopC());\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| mm(&d.a, &d.b),
            tol: EXACT,
        },
        Probe {
            name: "zero_a_operand",
            construct: "CoopA() (OpConstantNull of a MatrixA type) as an MMA operand: acc + 0·B",
            wg: 32,
            groups: 1,
            helpers: &[],
            body: body!(
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    var acc = CoopC();\n    acc = coopMultiplyAdd(a, b, acc);\n    acc = coopMultiplyAdd(CoopA(), b, acc);\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| mm(&d.a, &d.b),
            tol: EXACT,
        },
        Probe {
            name: "zero_a_var_const_if",
            construct: "attention's q0: var q = CoopA(), assigned a coopLoadT inside `if ONE == 1u` (module const)",
            wg: 32,
            groups: 1,
            helpers: &[],
            body: body!(
                "    var q = CoopA();\n    if ONE == 1u {\n        q = coopLoadT<CoopA>(&ta[at], s);\n    }\n",
                "    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    var acc = CoopC();\n    acc = coopMultiplyAdd(q, b, acc);\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| mm(&d.a, &d.b),
            tol: EXACT,
        },
        Probe {
            name: "const_if_assign",
            construct: "attention's `if DIM_TILES > 1u { o1 = ... }`: coop assignments under ifs on module consts (one taken, one not)",
            wg: 32,
            groups: 1,
            helpers: &[],
            body: body!(
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    var acc = CoopC();\n    if TILES > 1u {\n        acc = coopMultiplyAdd(a, b, acc);\n    }\n",
                "    if TILES > 2u {\n        acc = coopMultiplyAdd(a, b, acc);\n    }\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| mm(&d.a, &d.b),
            tol: EXACT,
        },
        Probe {
            name: "fn_local_acc",
            construct: "score_regs' `var s = CoopC()` inside a non-entry function that returns it",
            wg: 32,
            groups: 1,
            helpers: &[PRODUCT],
            body: body!(
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    let acc = product(a, b);\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| mm(&d.a, &d.b),
            tol: EXACT,
        },
        Probe {
            name: "four_subgroups",
            construct: "4 subgroups (subgroup_id), each its own MMA and slot of o_stage, out through write_tile()",
            wg: 128,
            groups: 1,
            helpers: &[ATTN_O],
            body: body!(
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    var acc = CoopC();\n    acc = coopMultiplyAdd(a, b, acc);\n",
                "    let slot = sg * 256u;\n    write_tile_wide(acc, slot, slot, lane);\n"
            ),
            expect: |d| mm(&d.a, &d.b).repeat(4),
            tol: EXACT,
        },
        Probe {
            name: "fn_returns_mma",
            construct: "a function returning coopMultiplyAdd of its CoopC parameter (pv, qk, mma_cross), twice",
            wg: 32,
            groups: 1,
            helpers: &[MMA],
            body: body!(
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    var acc = CoopC();\n    acc = mma(a, b, acc);\n    acc = mma(a, b, acc);\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| scale(&mm(&d.a, &d.b), 2.0),
            tol: EXACT,
        },
        Probe {
            name: "fn_returns_load_a",
            construct: "a function returning coopLoadT<CoopA> (q_fragment, p_block)",
            wg: 32,
            groups: 1,
            helpers: &[LOAD_A],
            body: body!(
                "    let a = load_a(at);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    var acc = CoopC();\n    acc = coopMultiplyAdd(a, b, acc);\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| mm(&d.a, &d.b),
            tol: EXACT,
        },
        Probe {
            name: "fn_returns_load_b",
            construct: "a function returning coopLoad<CoopB>",
            wg: 32,
            groups: 1,
            helpers: &[LOAD_B],
            body: body!(
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = load_b(at);\n",
                "    var acc = CoopC();\n    acc = coopMultiplyAdd(a, b, acc);\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| mm(&d.a, &d.b),
            tol: EXACT,
        },
        Probe {
            name: "q_regs_pattern",
            construct: "attention's Q_REGS: 8 `var qN = CoopA()`, 2 assigned under const ifs, all 8 passed by value to a function (6 zero, unused) returning CoopC",
            wg: 32,
            groups: 1,
            helpers: &[TWO_PRODUCTS],
            body: body!(
                "    var q0 = CoopA();\n    var q1 = CoopA();\n    var q2 = CoopA();\n    var q3 = CoopA();\n",
                "    var q4 = CoopA();\n    var q5 = CoopA();\n    var q6 = CoopA();\n    var q7 = CoopA();\n",
                "    if ONE == 1u {\n        q0 = coopLoadT<CoopA>(&ta[at], s);\n        if TILES > 1u {\n            q1 = coopLoadT<CoopA>(&ta2[at], s);\n        }\n    }\n",
                "    let acc = two_products(q0, q1, q2, q3, q4, q5, q6, q7);\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| add(&mm(&d.a, &d.b), &mm(&d.a2, &d.b2)),
            tol: EXACT,
        },
        Probe {
            name: "rowmajor_b",
            construct: "coopLoadT<CoopB> (row-major B) from an f16 workgroup tile (pv, solve_block, the scan's d16)",
            wg: 32,
            groups: 1,
            helpers: &[],
            body: body!(
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoadT<CoopB>(&tb_rows[at], s);\n",
                "    var acc = CoopC();\n    acc = coopMultiplyAdd(a, b, acc);\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| mm(&d.a, &d.b),
            tol: EXACT,
        },
        Probe {
            name: "kv_tile_rowmajor_b",
            construct: "attention's pv load: coopLoadT<CoopB> from the padded vec4<f16> K/V tile (offset 4 vec4s, stride 18)",
            wg: 32,
            groups: 1,
            helpers: &[],
            body: body!(
                "    let kv = KV_AT;\n    let kvs = KV4;\n",
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoadT<CoopB>(&tkv[kv], kvs);\n",
                "    var acc = CoopC();\n    acc = coopMultiplyAdd(a, b, acc);\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| mm(&d.a, &d.b),
            tol: EXACT,
        },
        Probe {
            name: "kv_tile_colmajor_b",
            construct: "attention's qk load: coopLoad<CoopB> from the padded vec4 K/V tile (Kᵀ)",
            wg: 32,
            groups: 1,
            helpers: &[],
            body: body!(
                "    let kv = KV_AT;\n    let kvs = KV4;\n",
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tkv[kv], kvs);\n",
                "    var acc = CoopC();\n    acc = coopMultiplyAdd(a, b, acc);\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| mm(&d.a, &transpose(&d.b)),
            tol: EXACT,
        },
        Probe {
            name: "kv_tile_a",
            construct: "attention's q_fragment load: coopLoadT<CoopA> from the padded vec4 K/V tile",
            wg: 32,
            groups: 1,
            helpers: &[],
            body: body!(
                "    let kv = KV_AT;\n    let kvs = KV4;\n",
                "    let a = coopLoadT<CoopA>(&tkv[kv], kvs);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    var acc = CoopC();\n    acc = coopMultiplyAdd(a, b, acc);\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| mm(&d.b, &d.b),
            tol: EXACT,
        },
        Probe {
            name: "colmajor_a",
            construct: "coopLoad<CoopA> (column-major A) from a workgroup tile (the scan's K̃ᵀ)",
            wg: 32,
            groups: 1,
            helpers: &[],
            body: body!(
                "    let a = coopLoad<CoopA>(&ta_cols[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    var acc = CoopC();\n    acc = coopMultiplyAdd(a, b, acc);\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| mm(&d.a, &d.b),
            tol: EXACT,
        },
        Probe {
            name: "storage_rw_a",
            construct: "coopLoadT<CoopA> from a read_write storage array<f16> (the scan's W, Q̃, P from `halves`)",
            wg: 32,
            groups: 1,
            helpers: &[],
            body: body!(
                "    let a = coopLoadT<CoopA>(&halves[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    var acc = CoopC();\n    acc = coopMultiplyAdd(a, b, acc);\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| mm(&d.a, &d.b),
            tol: EXACT,
        },
        Probe {
            name: "storage_rw_colmajor_a",
            construct: "coopLoad<CoopA> (column-major) from read_write storage f16 (the scan's K̃ᵀ from `halves`)",
            wg: 32,
            groups: 1,
            helpers: &[],
            body: body!(
                "    let a = coopLoad<CoopA>(&halves[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    var acc = CoopC();\n    acc = coopMultiplyAdd(a, b, acc);\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| mm(&transpose(&d.a), &d.b),
            tol: EXACT,
        },
        Probe {
            name: "storage_rw_rowmajor_b",
            construct: "coopLoadT<CoopB> from read_write storage f16",
            wg: 32,
            groups: 1,
            helpers: &[],
            body: body!(
                "    let hb = B_AT;\n",
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoadT<CoopB>(&halves[hb], s);\n",
                "    var acc = CoopC();\n    acc = coopMultiplyAdd(a, b, acc);\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| mm(&d.a, &d.b),
            tol: EXACT,
        },
        Probe {
            name: "load_c_colmajor",
            construct: "the scan's state update: var upd = coopLoad<CoopC> (f32 workgroup), MMA, coopStore (column-major) to storage",
            wg: 32,
            groups: 1,
            helpers: &[],
            body: body!(
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    var upd = coopLoad<CoopC>(&tc[at], s);\n    upd = coopMultiplyAdd(a, b, upd);\n",
                "    coopStore(upd, &dst[at], s);\n"
            ),
            expect: |d| add(&d.c[..256], &transpose(&mm(&d.a, &d.b))),
            tol: EXACT,
        },
        Probe {
            name: "load_c_rowmajor",
            construct: "coopLoadT<CoopC> (f32 workgroup) as the accumulator (scaled's reload)",
            wg: 32,
            groups: 1,
            helpers: &[],
            body: body!(
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    var acc = coopLoadT<CoopC>(&tc[at], s);\n    acc = coopMultiplyAdd(a, b, acc);\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| add(&d.c[..256], &mm(&d.a, &d.b)),
            tol: EXACT,
        },
        Probe {
            name: "scalar_times_matrix",
            construct: "0.5 * acc (naga: OpMatrixTimesScalar, operands swapped)",
            wg: 32,
            groups: 1,
            helpers: &[],
            body: body!(
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    var acc = CoopC();\n    acc = coopMultiplyAdd(a, b, acc);\n    let out = 0.5 * acc;\n",
                "    coopStoreT(out, &dst[at], s);\n"
            ),
            expect: |d| scale(&mm(&d.a, &d.b), 0.5),
            tol: EXACT,
        },
        Probe {
            name: "matrix_times_scalar",
            construct: "acc * 0.5 (OpMatrixTimesScalar)",
            wg: 32,
            groups: 1,
            helpers: &[],
            body: body!(
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    var acc = CoopC();\n    acc = coopMultiplyAdd(a, b, acc);\n    let out = acc * 0.5;\n",
                "    coopStoreT(out, &dst[at], s);\n"
            ),
            expect: |d| scale(&mm(&d.a, &d.b), 0.5),
            tol: EXACT,
        },
        Probe {
            name: "matrix_plus_matrix",
            construct: "acc + acc2 (OpFAdd on CoopC; x16's tot + acc)",
            wg: 32,
            groups: 1,
            helpers: &[],
            body: body!(
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    let a2 = coopLoadT<CoopA>(&ta2[at], s);\n    let b2 = coopLoad<CoopB>(&tb2[at], s);\n",
                "    var acc = CoopC();\n    acc = coopMultiplyAdd(a, b, acc);\n    var acc2 = CoopC();\n    acc2 = coopMultiplyAdd(a2, b2, acc2);\n",
                "    let out = acc + acc2;\n    coopStoreT(out, &dst[at], s);\n"
            ),
            expect: |d| add(&mm(&d.a, &d.b), &mm(&d.a2, &d.b2)),
            tol: EXACT,
        },
        Probe {
            name: "joined",
            construct: "gdn's joined(): main + LO_UNIT * small in a function returning CoopC",
            wg: 32,
            groups: 1,
            helpers: &[JOINED],
            body: body!(
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    let a2 = coopLoadT<CoopA>(&ta2[at], s);\n    let b2 = coopLoad<CoopB>(&tb2[at], s);\n",
                "    var acc = CoopC();\n    acc = coopMultiplyAdd(a, b, acc);\n    var small = CoopC();\n    small = coopMultiplyAdd(a2, b2, small);\n",
                "    coopStoreT(joined(acc, small), &dst[at], s);\n"
            ),
            expect: |d| add(&mm(&d.a, &d.b), &scale(&mm(&d.a2, &d.b2), 1.0 / 2048.0)),
            tol: EXACT,
        },
        Probe {
            name: "mma_cross",
            construct: "gdn's mma_cross(): nested coopMultiplyAdd as an argument, in a function returning CoopC",
            wg: 32,
            groups: 1,
            helpers: &[MMA_CROSS],
            body: body!(
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    let a2 = coopLoadT<CoopA>(&ta2[at], s);\n    let b2 = coopLoad<CoopB>(&tb2[at], s);\n",
                "    var acc = CoopC();\n    acc = mma_cross(a, a2, b, b2, acc);\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| add(&mm(&d.a, &d.b2), &mm(&d.a2, &d.b)),
            tol: EXACT,
        },
        Probe {
            name: "scaled_roundtrip",
            construct: "attention's scaled(): O stored to a slot, lanes scale cells, coopLoadT<CoopC> back, between 3 barriers, in a function",
            wg: 32,
            groups: 1,
            helpers: &[SCALED],
            body: body!(
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    var acc = CoopC();\n    acc = coopMultiplyAdd(a, b, acc);\n",
                "    acc = scaled(acc, 0u, lane, 0.5);\n    acc = coopMultiplyAdd(a, b, acc);\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| scale(&mm(&d.a, &d.b), 1.5),
            tol: EXACT,
        },
        Probe {
            name: "uniform_load_return",
            construct: "gdn's chunk_prepare: flag = table value, `if wg.x >= workgroupUniformLoad(&flag) { return; }` before the coop ops (2 workgroups, the second returns)",
            wg: 32,
            groups: 2,
            helpers: &[],
            body: body!(
                "    if lid == 0u {\n        flag = info.x;\n    }\n",
                "    if wg.x >= workgroupUniformLoad(&flag) {\n        return;\n    }\n",
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    var acc = CoopC();\n    acc = coopMultiplyAdd(a, b, acc);\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| mm(&d.a, &d.b),
            tol: EXACT,
        },
        Probe {
            name: "uniform_return",
            construct: "attention's entry: `if wg.x >= <uniform buffer value> { return; }` before the coop ops (2 workgroups)",
            wg: 32,
            groups: 2,
            helpers: &[],
            body: body!(
                "    if wg.x >= info.x {\n        return;\n    }\n",
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    var acc = CoopC();\n    acc = coopMultiplyAdd(a, b, acc);\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| mm(&d.a, &d.b),
            tol: EXACT,
        },
        Probe {
            name: "uniform_load_loop_bound",
            construct: "gdn's chunk_scan: loop count from workgroupUniformLoad, accumulator carried through it",
            wg: 32,
            groups: 1,
            helpers: &[],
            body: body!(
                "    if lid == 0u {\n        flag = info.x + 1u;\n    }\n    let n = workgroupUniformLoad(&flag);\n",
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    var acc = CoopC();\n    for (var k = 0u; k < n; k++) {\n        acc = coopMultiplyAdd(a, b, acc);\n        workgroupBarrier();\n    }\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| scale(&mm(&d.a, &d.b), 2.0),
            tol: EXACT,
        },
        Probe {
            name: "uniform_load_in_loop",
            construct: "attention's step D: per iteration a lane sets a flag, workgroupUniformLoad decides a scaled() round trip, then MMA (3 iterations, scaled on the second)",
            wg: 32,
            groups: 1,
            helpers: &[SCALED],
            body: body!(
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    if lid == 0u {\n        flag = 0u;\n    }\n    var acc = CoopC();\n",
                "    for (var k = 0u; k < 3u; k++) {\n        workgroupBarrier();\n",
                "        if lane == 0u && k == 1u {\n            flag = k + 1u;\n        }\n",
                "        let marked = workgroupUniformLoad(&flag) == k + 1u;\n",
                "        if marked {\n            acc = scaled(acc, 0u, lane, 0.5);\n        }\n",
                "        acc = coopMultiplyAdd(a, b, acc);\n        workgroupBarrier();\n    }\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| scale(&mm(&d.a, &d.b), 2.5),
            tol: EXACT,
        },
        Probe {
            name: "shuffle_beside",
            construct: "subgroupShuffleXor before and after an MMA (attention's softmax), results of both checked",
            wg: 32,
            groups: 1,
            helpers: &[],
            body: body!(
                "    var m = f32(lane);\n    m = max(m, subgroupShuffleXor(m, 1u));\n",
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    var acc = CoopC();\n    acc = coopMultiplyAdd(a, b, acc);\n",
                "    let sum = m + subgroupShuffleXor(m, 2u);\n",
                "    coopStoreT(acc, &dst[at], s);\n    dst[256u + lane] = sum;\n"
            ),
            expect: |d| {
                let m = |l: usize| l.max(l ^ 1) as f32;
                let mut out = mm(&d.a, &d.b);
                out.extend((0..32).map(|l| m(l) + m(l ^ 2)));
                out
            },
            tol: EXACT,
        },
        Probe {
            name: "attn_o_path",
            construct: "attention's O path together: P via p_block() (f16 tile, stride 24), pv() with V row-major from the vec4 K/V tile, in a loop, write_tile() through the slot",
            wg: 32,
            groups: 1,
            helpers: &[ATTN_O],
            body: body!(
                "    for (var e = lid; e < 384u; e += WG) {\n        let i = e / 24u;\n        let j = e % 24u;\n",
                "        p_tile[e] = select(f16(0.0), src[A_AT + i * 16u + min(j, 15u)], j < 16u);\n    }\n",
                "    workgroupBarrier();\n    var o0 = CoopC();\n",
                "    for (var kb = 0u; kb < 1u; kb++) {\n        let p = p_block(kb);\n        o0 = pv(o0, p, 0u);\n    }\n",
                "    write_tile(o0, 0u, lane);\n"
            ),
            expect: |d| mm(&d.a, &d.b),
            tol: EXACT,
        },
        Probe {
            name: "attn_mini",
            construct: "the attention's step loop in small: 4 subgroups, o0/o1 carried through 2 key steps with shuffles, a lane-set flag read by workgroupUniformLoad, a scaled() rescale of both under it (step 2), p_block/pv under const ifs, write_tile out",
            wg: 128,
            groups: 1,
            helpers: &[ATTN_O],
            body: body!(
                "    for (var e = lid; e < 384u; e += WG) {\n        let i = e / 24u;\n        let j = e % 24u;\n",
                "        p_tile[e] = select(f16(0.0), src[A_AT + i * 16u + min(j, 15u)], j < 16u);\n    }\n",
                "    if lid == 0u {\n        flag = 0u;\n    }\n    workgroupBarrier();\n",
                "    let slot = sg * 256u;\n    var o0 = CoopC();\n    var o1 = CoopC();\n",
                "    for (var k = 0u; k < 2u; k++) {\n        workgroupBarrier();\n",
                "        var m = f32(lane);\n        m = max(m, subgroupShuffleXor(m, 1u));\n",
                "        if lane == 0u && sg == 1u && k == 1u && m > 0.0 {\n            flag = k + 1u;\n        }\n",
                "        let rescale = workgroupUniformLoad(&flag) == k + 1u;\n",
                "        if rescale {\n            o0 = scaled_wide(o0, slot, lane, 0.5);\n",
                "            if TILES > 1u {\n                o1 = scaled_wide(o1, slot, lane, 0.5);\n            }\n        }\n",
                "        for (var kb = 0u; kb < 1u; kb++) {\n            let p = p_block(kb);\n            o0 = pv(o0, p, 0u);\n",
                "            if TILES > 1u {\n                o1 = pv(o1, p, 0u);\n            }\n        }\n",
                "        workgroupBarrier();\n    }\n",
                "    write_tile_wide(o0, slot, sg * 512u, lane);\n    write_tile_wide(o1, slot, sg * 512u + 256u, lane);\n"
            ),
            expect: |d| scale(&mm(&d.a, &d.b), 1.5).repeat(8),
            tol: EXACT,
        },
        Probe {
            name: "hi_lo_split",
            construct: "gdn's hi_lo (scalar: bitcast truncation, select, f16 conversions), no coop op",
            wg: 32,
            groups: 1,
            helpers: &[HI_LO],
            body: body!(
                "    for (var e = lid; e < 256u; e += WG) {\n        let v = hi_lo(c_in[256u + e]);\n",
                "        dst[2u * e] = f32(v.x);\n        dst[2u * e + 1u] = f32(v.y);\n    }\n"
            ),
            expect: |d| {
                d.c[256..]
                    .iter()
                    .flat_map(|&x| {
                        let (hi, lo) = hi_lo(x);
                        [hi, lo]
                    })
                    .collect()
            },
            // A device that flushes f16 subnormals loses lo' values below 2^-14 (6e-5); one that
            // rounds f32 → f16 otherwise than to nearest moves lo' by an ulp (2^-11 relative).
            tol: (6.2e-5, 1e-3),
        },
        Probe {
            name: "split_product",
            construct: "gdn's whole product: X, Y (f32) split by hi_lo into 4 f16 tiles, main = hi·hi, small = mma_cross, joined (vs f64; plain f16 would be ~1e-3 off)",
            wg: 32,
            groups: 1,
            helpers: &[HI_LO, MMA_CROSS, JOINED],
            body: body!(
                "    for (var e = lid; e < 256u; e += WG) {\n        let t = (e % 16u) * 16u + e / 16u;\n",
                "        let x = hi_lo(c_in[256u + e]);\n        ta[e] = x.x;\n        ta2[e] = x.y;\n",
                "        let y = hi_lo(c_in[e]);\n        tb[t] = y.x;\n        tb2[t] = y.y;\n    }\n",
                "    workgroupBarrier();\n",
                "    let a_hi = coopLoadT<CoopA>(&ta[at], s);\n    let a_lo = coopLoadT<CoopA>(&ta2[at], s);\n",
                "    let b_hi = coopLoad<CoopB>(&tb[at], s);\n    let b_lo = coopLoad<CoopB>(&tb2[at], s);\n",
                "    var hh = CoopC();\n    var small = CoopC();\n",
                "    hh = coopMultiplyAdd(a_hi, b_hi, hh);\n    small = mma_cross(a_hi, a_lo, b_hi, b_lo, small);\n",
                "    coopStoreT(joined(hh, small), &dst[at], s);\n"
            ),
            expect: |d| mm(&d.c[256..], &d.c[..256]),
            tol: (2e-5, 0.0),
        },
        // Replacements for workgroupUniformLoad (FAIL in the four probes above on the H200, 580).
        Probe {
            name: "flag_plain_beside",
            construct: "uniform_return plus the lone u32 `flag` written by a lane, workgroupBarrier, read plainly (no workgroupUniformLoad) into dst[256]: FAIL = the flag's presence in workgroup memory (layout) breaks the tiles",
            wg: 32,
            groups: 2,
            helpers: &[],
            body: body!(
                "    if lid == 0u {\n        flag = info.x;\n    }\n    workgroupBarrier();\n",
                "    if wg.x >= info.x {\n        return;\n    }\n",
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    var acc = CoopC();\n    acc = coopMultiplyAdd(a, b, acc);\n",
                "    coopStoreT(acc, &dst[at], s);\n    if lid == 0u {\n        dst[256u] = f32(flag);\n    }\n"
            ),
            expect: |d| {
                let mut out = mm(&d.a, &d.b);
                out.push(1.0);
                out
            },
            tol: EXACT,
        },
        Probe {
            name: "barrier_uniform_load_return",
            construct: "uniform_load_return with `workgroupBarrier(); let v = workgroupUniformLoad(&flag);` (an extra barrier before it)",
            wg: 32,
            groups: 2,
            helpers: &[],
            body: body!(
                "    if lid == 0u {\n        flag = info.x;\n    }\n    workgroupBarrier();\n",
                "    let v = workgroupUniformLoad(&flag);\n    if wg.x >= v {\n        return;\n    }\n",
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    var acc = CoopC();\n    acc = coopMultiplyAdd(a, b, acc);\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| mm(&d.a, &d.b),
            tol: EXACT,
        },
        Probe {
            name: "uniform_load_vec4_return",
            construct: "uniform_load_return with the flag a 16-byte vec4<u32> (workgroupUniformLoad(&flag4).x): PASS where uniform_load_return fails = the lone u32's layout is the bug",
            wg: 32,
            groups: 2,
            helpers: &[FLAG4],
            body: body!(
                "    if lid == 0u {\n        flag4 = vec4<u32>(info.x);\n    }\n",
                "    if wg.x >= workgroupUniformLoad(&flag4).x {\n        return;\n    }\n",
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    var acc = CoopC();\n    acc = coopMultiplyAdd(a, b, acc);\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| mm(&d.a, &d.b),
            tol: EXACT,
        },
        Probe {
            name: "uniform_load_vec4_in_loop",
            construct: "uniform_load_in_loop with the flag a vec4<u32> (attention's mark padded to 16 bytes)",
            wg: 32,
            groups: 1,
            helpers: &[SCALED, FLAG4],
            body: body!(
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    if lid == 0u {\n        flag4 = vec4<u32>(0u);\n    }\n    var acc = CoopC();\n",
                "    for (var k = 0u; k < 3u; k++) {\n        workgroupBarrier();\n",
                "        if lane == 0u && k == 1u {\n            flag4.x = k + 1u;\n        }\n",
                "        let marked = workgroupUniformLoad(&flag4).x == k + 1u;\n",
                "        if marked {\n            acc = scaled(acc, 0u, lane, 0.5);\n        }\n",
                "        acc = coopMultiplyAdd(a, b, acc);\n        workgroupBarrier();\n    }\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| scale(&mm(&d.a, &d.b), 2.5),
            tol: EXACT,
        },
        Probe {
            name: "storage_return",
            construct: "gdn's chunk count read in the entry point from a read-only storage table (as seqs), inlined: `if wg.x >= (table[wg.z] + table[1] + 63u) / 64u { return; }` before the coop ops (2 workgroups)",
            wg: 32,
            groups: 2,
            helpers: &[],
            body: body!(
                "    let n = (table[wg.z] + table[1] + 63u) / 64u;\n    if wg.x >= n {\n        return;\n    }\n",
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    var acc = CoopC();\n    acc = coopMultiplyAdd(a, b, acc);\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| mm(&d.a, &d.b),
            tol: EXACT,
        },
        Probe {
            name: "storage_loop_bound",
            construct: "gdn's chunk_scan loop bound from the read-only storage table in the entry point, accumulator carried through it",
            wg: 32,
            groups: 1,
            helpers: &[],
            body: body!(
                "    let n = (table[wg.z] + table[1] + 63u) / 64u + 1u;\n",
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    var acc = CoopC();\n    for (var k = 0u; k < n; k++) {\n        acc = coopMultiplyAdd(a, b, acc);\n        workgroupBarrier();\n    }\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| scale(&mm(&d.a, &d.b), 2.0),
            tol: EXACT,
        },
        Probe {
            name: "always_rescale_in_loop",
            construct: "uniform_load_in_loop with no branch: a barrier, then every iteration scaled() with alpha = select(1, 0.5, flag == k + 1) (flag read plainly)",
            wg: 32,
            groups: 1,
            helpers: &[SCALED],
            body: body!(
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    if lid == 0u {\n        flag = 0u;\n    }\n    var acc = CoopC();\n",
                "    for (var k = 0u; k < 3u; k++) {\n        workgroupBarrier();\n",
                "        if lane == 0u && k == 1u {\n            flag = k + 1u;\n        }\n        workgroupBarrier();\n",
                "        let alpha = select(1.0, 0.5, flag == k + 1u);\n        acc = scaled(acc, 0u, lane, alpha);\n",
                "        acc = coopMultiplyAdd(a, b, acc);\n        workgroupBarrier();\n    }\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| scale(&mm(&d.a, &d.b), 2.5),
            tol: EXACT,
        },
        Probe {
            name: "attn_mini_always",
            construct: "attn_mini with no branch: a barrier, then both tiles scaled_wide() every step with alpha = select(1, 0.5, flag == k + 1) (flag read plainly)",
            wg: 128,
            groups: 1,
            helpers: &[ATTN_O],
            body: body!(
                "    for (var e = lid; e < 384u; e += WG) {\n        let i = e / 24u;\n        let j = e % 24u;\n",
                "        p_tile[e] = select(f16(0.0), src[A_AT + i * 16u + min(j, 15u)], j < 16u);\n    }\n",
                "    if lid == 0u {\n        flag = 0u;\n    }\n    workgroupBarrier();\n",
                "    let slot = sg * 256u;\n    var o0 = CoopC();\n    var o1 = CoopC();\n",
                "    for (var k = 0u; k < 2u; k++) {\n        workgroupBarrier();\n",
                "        var m = f32(lane);\n        m = max(m, subgroupShuffleXor(m, 1u));\n",
                "        if lane == 0u && sg == 1u && k == 1u && m > 0.0 {\n            flag = k + 1u;\n        }\n",
                "        workgroupBarrier();\n        let alpha = select(1.0, 0.5, flag == k + 1u);\n",
                "        o0 = scaled_wide(o0, slot, lane, alpha);\n",
                "        if TILES > 1u {\n            o1 = scaled_wide(o1, slot, lane, alpha);\n        }\n",
                "        for (var kb = 0u; kb < 1u; kb++) {\n            let p = p_block(kb);\n            o0 = pv(o0, p, 0u);\n",
                "            if TILES > 1u {\n                o1 = pv(o1, p, 0u);\n            }\n        }\n",
                "        workgroupBarrier();\n    }\n",
                "    write_tile_wide(o0, slot, sg * 512u, lane);\n    write_tile_wide(o1, slot, sg * 512u + 256u, lane);\n"
            ),
            expect: |d| scale(&mm(&d.a, &d.b), 1.5).repeat(8),
            tol: EXACT,
        },
        Probe {
            name: "attn_mini_vec4",
            construct: "attn_mini with the mark a vec4<u32> read by workgroupUniformLoad(&flag4).x (the attention's mark padded to 16 bytes)",
            wg: 128,
            groups: 1,
            helpers: &[ATTN_O, FLAG4],
            body: body!(
                "    for (var e = lid; e < 384u; e += WG) {\n        let i = e / 24u;\n        let j = e % 24u;\n",
                "        p_tile[e] = select(f16(0.0), src[A_AT + i * 16u + min(j, 15u)], j < 16u);\n    }\n",
                "    if lid == 0u {\n        flag4 = vec4<u32>(0u);\n    }\n    workgroupBarrier();\n",
                "    let slot = sg * 256u;\n    var o0 = CoopC();\n    var o1 = CoopC();\n",
                "    for (var k = 0u; k < 2u; k++) {\n        workgroupBarrier();\n",
                "        var m = f32(lane);\n        m = max(m, subgroupShuffleXor(m, 1u));\n",
                "        if lane == 0u && sg == 1u && k == 1u && m > 0.0 {\n            flag4.x = k + 1u;\n        }\n",
                "        let rescale = workgroupUniformLoad(&flag4).x == k + 1u;\n",
                "        if rescale {\n            o0 = scaled_wide(o0, slot, lane, 0.5);\n",
                "            if TILES > 1u {\n                o1 = scaled_wide(o1, slot, lane, 0.5);\n            }\n        }\n",
                "        for (var kb = 0u; kb < 1u; kb++) {\n            let p = p_block(kb);\n            o0 = pv(o0, p, 0u);\n",
                "            if TILES > 1u {\n                o1 = pv(o1, p, 0u);\n            }\n        }\n",
                "        workgroupBarrier();\n    }\n",
                "    write_tile_wide(o0, slot, sg * 512u, lane);\n    write_tile_wide(o1, slot, sg * 512u + 256u, lane);\n"
            ),
            expect: |d| scale(&mm(&d.a, &d.b), 1.5).repeat(8),
            tol: EXACT,
        },
        Probe {
            name: "barrier_flag_return",
            construct: "(a) flag published by workgroupBarrier(), a plain load decides an early return before coop ops",
            wg: 32,
            groups: 2,
            helpers: &[],
            body: body!(
                "    if lid == 0u {\n        flag = info.x;\n    }\n    workgroupBarrier();\n",
                "    if wg.x >= flag {\n        return;\n    }\n",
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    var acc = CoopC();\n    acc = coopMultiplyAdd(a, b, acc);\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| mm(&d.a, &d.b),
            tol: EXACT,
        },
        Probe {
            name: "barrier_flag_in_loop",
            construct: "(a) per iteration: barrier, plain load of the flag decides a scaled() round trip",
            wg: 32,
            groups: 1,
            helpers: &[SCALED],
            body: body!(
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    if lid == 0u {\n        flag = 0u;\n    }\n    var acc = CoopC();\n",
                "    for (var k = 0u; k < 3u; k++) {\n        workgroupBarrier();\n",
                "        if lane == 0u && k == 1u {\n            flag = k + 1u;\n        }\n        workgroupBarrier();\n",
                "        if flag == k + 1u {\n            acc = scaled(acc, 0u, lane, 0.5);\n        }\n",
                "        acc = coopMultiplyAdd(a, b, acc);\n        workgroupBarrier();\n    }\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| scale(&mm(&d.a, &d.b), 2.5),
            tol: EXACT,
        },
        Probe {
            name: "broadcast_first_in_loop",
            construct: "(c) per iteration: subgroupBroadcastFirst of the flag decides a scaled() round trip",
            wg: 32,
            groups: 1,
            helpers: &[SCALED],
            body: body!(
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    if lid == 0u {\n        flag = 0u;\n    }\n    var acc = CoopC();\n",
                "    for (var k = 0u; k < 3u; k++) {\n        workgroupBarrier();\n",
                "        if lane == 0u && k == 1u {\n            flag = k + 1u;\n        }\n        workgroupBarrier();\n",
                "        if subgroupBroadcastFirst(flag) == k + 1u {\n            acc = scaled(acc, 0u, lane, 0.5);\n        }\n",
                "        acc = coopMultiplyAdd(a, b, acc);\n        workgroupBarrier();\n    }\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| scale(&mm(&d.a, &d.b), 2.5),
            tol: EXACT,
        },
        Probe {
            name: "subgroup_any_in_loop",
            construct: "(c) per iteration: subgroupAny(this lane's rows need it) decides a scaled() round trip",
            wg: 32,
            groups: 1,
            helpers: &[SCALED],
            body: body!(
                "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
                "    var acc = CoopC();\n",
                "    for (var k = 0u; k < 3u; k++) {\n        workgroupBarrier();\n",
                "        if subgroupAny(lane == 0u && k == 1u) {\n            acc = scaled(acc, 0u, lane, 0.5);\n        }\n",
                "        acc = coopMultiplyAdd(a, b, acc);\n        workgroupBarrier();\n    }\n",
                "    coopStoreT(acc, &dst[at], s);\n"
            ),
            expect: |d| scale(&mm(&d.a, &d.b), 2.5),
            tol: EXACT,
        },
        Probe {
            name: "attn_mini_barrier_flag",
            construct: "(a) attn_mini with `workgroupBarrier(); let rescale = flag == k + 1u;` (a plain load of the lone u32 flag) in place of workgroupUniformLoad",
            wg: 128,
            groups: 1,
            helpers: &[ATTN_O],
            body: body!(
                "    for (var e = lid; e < 384u; e += WG) {\n        let i = e / 24u;\n        let j = e % 24u;\n",
                "        p_tile[e] = select(f16(0.0), src[A_AT + i * 16u + min(j, 15u)], j < 16u);\n    }\n",
                "    if lid == 0u {\n        flag = 0u;\n    }\n    workgroupBarrier();\n",
                "    let slot = sg * 256u;\n    var o0 = CoopC();\n    var o1 = CoopC();\n",
                "    for (var k = 0u; k < 2u; k++) {\n        workgroupBarrier();\n",
                "        var m = f32(lane);\n        m = max(m, subgroupShuffleXor(m, 1u));\n",
                "        if lane == 0u && sg == 1u && k == 1u && m > 0.0 {\n            flag = k + 1u;\n        }\n",
                "        workgroupBarrier();\n        let rescale = flag == k + 1u;\n",
                "        if rescale {\n            o0 = scaled_wide(o0, slot, lane, 0.5);\n",
                "            if TILES > 1u {\n                o1 = scaled_wide(o1, slot, lane, 0.5);\n            }\n        }\n",
                "        for (var kb = 0u; kb < 1u; kb++) {\n            let p = p_block(kb);\n            o0 = pv(o0, p, 0u);\n",
                "            if TILES > 1u {\n                o1 = pv(o1, p, 0u);\n            }\n        }\n",
                "        workgroupBarrier();\n    }\n",
                "    write_tile_wide(o0, slot, sg * 512u, lane);\n    write_tile_wide(o1, slot, sg * 512u + 256u, lane);\n"
            ),
            expect: |d| scale(&mm(&d.a, &d.b), 1.5).repeat(8),
            tol: EXACT,
        },
    ]
}

/// naga 30's uniformity analysis, checked at every run: a return on a lane-dependent value before
/// cooperative ops must be refused (it accepts (a) a plain load of a workgroup flag after a
/// barrier and (c) subgroupBroadcastFirst / subgroupAny decisions: those are probes above).
fn naga_candidates() -> Vec<Probe> {
    vec![Probe {
        name: "lane_return",
        construct: "control: `if lid == 0u { return; }` before coop ops (non-uniform)",
        wg: 32,
        groups: 1,
        helpers: &[],
        body: body!(
            "    if lid == 0u {\n        return;\n    }\n",
            "    let a = coopLoadT<CoopA>(&ta[at], s);\n    let b = coopLoad<CoopB>(&tb[at], s);\n",
            "    var acc = CoopC();\n    acc = coopMultiplyAdd(a, b, acc);\n",
            "    coopStoreT(acc, &dst[at], s);\n"
        ),
        expect: |_| Vec::new(),
        tol: EXACT,
    }]
}

/// Whether a probe uses no cooperative matrix (it then also runs without them: `--self-test`).
fn scalar_only(probe: &Probe) -> bool {
    !probe.body.contains("oop") && probe.helpers.iter().all(|h| !h.contains("oop"))
}

/// The probe's module text, as the engine composes one (enables, the shape file, the kernel);
/// without the cooperative-matrix enable and shape file for a scalar-only probe on an adapter
/// without them.
fn module_text(probe: &Probe, coop: bool) -> String {
    let head = if coop {
        format!("enable f16;\nenable wgpu_cooperative_matrix;\n{SHAPE}")
    } else {
        "enable f16;\n".to_string()
    };
    format!(
        "{head}const WG: u32 = {}u;\n{COMMON}{}\n\
         @compute @workgroup_size(WG)\n\
         fn probe(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>,\n\
         \x20        @builtin(subgroup_invocation_id) lane: u32, @builtin(subgroup_id) sg: u32) {{\n\
         \x20   stage(lid);\n    workgroupBarrier();\n    let s = 16u;\n    let at = 0u;\n{}}}\n",
        probe.wg,
        probe.helpers.concat(),
        probe.body
    )
}

/// naga: parse, validate with the capabilities a 16×16 device gives, translate to SPIR-V 1.6 as
/// tests/portability.rs does.
fn to_spirv(text: &str) -> Result<Vec<u32>, String> {
    use naga::valid::{
        Capabilities, ShaderStages, SubgroupOperationSet, ValidationFlags, Validator,
    };
    let module = naga::front::wgsl::parse_str(text).map_err(|e| e.emit_to_string(text))?;
    let caps =
        Capabilities::SHADER_FLOAT16 | Capabilities::SUBGROUP | Capabilities::COOPERATIVE_MATRIX;
    let info = Validator::new(ValidationFlags::all(), caps)
        .subgroup_stages(ShaderStages::COMPUTE)
        .subgroup_operations(SubgroupOperationSet::all())
        .validate(&module)
        .map_err(|e| e.emit_to_string(text))?;
    let options = naga::back::spv::Options {
        lang_version: (1, 6),
        zero_initialize_workgroup_memory: naga::back::spv::ZeroInitializeWorkgroupMemoryMode::None,
        force_loop_bounding: false,
        ..naga::back::spv::Options::default()
    };
    let pipeline = naga::back::spv::PipelineOptions {
        shader_stage: naga::ShaderStage::Compute,
        entry_point: "probe".to_string(),
    };
    naga::back::spv::write_vec(&module, &info, &options, Some(&pipeline))
        .map_err(|e| format!("SPIR-V: {e}"))
}

fn layout(ctx: &GpuContext) -> (wgpu::BindGroupLayout, wgpu::PipelineLayout) {
    let entry = |binding, ty| wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty,
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    };
    let storage = |read_only| wgpu::BufferBindingType::Storage { read_only };
    let group = ctx
        .device
        .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("coop-probe"),
            entries: &[
                entry(0, storage(true)),
                entry(1, storage(false)),
                entry(2, wgpu::BufferBindingType::Uniform),
                entry(3, storage(true)),
                entry(4, storage(false)),
                entry(5, storage(true)),
            ],
        });
    let pipeline = ctx
        .device
        .create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("coop-probe"),
            bind_group_layouts: &[Some(&group)],
            immediate_size: 0,
        });
    (group, pipeline)
}

/// Builds and runs one probe as the engine builds kernels (trusted module, no runtime checks,
/// workgroup memory not zeroed); returns dst (poisoned with NaN before the run).
fn run(ctx: &GpuContext, probe: &Probe, data: &Data, coop: bool) -> Result<Vec<f32>, String> {
    let text = module_text(probe, coop);
    let (group, pipeline_layout) = layout(ctx);
    let internal = ctx.device.push_error_scope(wgpu::ErrorFilter::Internal);
    let validation = ctx.device.push_error_scope(wgpu::ErrorFilter::Validation);
    // SAFETY: every probe indexes inside its arrays (the same text runs through naga's validator
    // first).
    let module = unsafe {
        ctx.device.create_shader_module_trusted(
            wgpu::ShaderModuleDescriptor {
                label: Some(probe.name),
                source: wgpu::ShaderSource::Wgsl(text.into()),
            },
            wgpu::ShaderRuntimeChecks::unchecked(),
        )
    };
    let pipeline = ctx
        .device
        .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(probe.name),
            layout: Some(&pipeline_layout),
            module: &module,
            entry_point: Some("probe"),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants: &[],
                zero_initialize_workgroup_memory: false,
            },
            cache: None,
        });
    let errors: Vec<String> = [validation, internal]
        .map(|scope| pollster::block_on(scope.pop()))
        .into_iter()
        .flatten()
        .map(|e| e.to_string())
        .collect();
    if !errors.is_empty() {
        return Err(errors.join("; "));
    }
    let halves = data.halves();
    let err = |e: fak::gpu::GpuError| e.to_string();
    let src = upload(ctx, "src", bytemuck::cast_slice(&halves)).map_err(err)?;
    let rw = upload(ctx, "halves", bytemuck::cast_slice(&halves)).map_err(err)?;
    let dst = upload(ctx, "dst", bytemuck::cast_slice(&[f32::NAN; 4096])).map_err(err)?;
    let info = uniform(ctx, "info", &[1u32, 0, 0, 0]);
    let c_in = upload(ctx, "c_in", bytemuck::cast_slice(&data.c)).map_err(err)?;
    let table = upload(ctx, "table", bytemuck::cast_slice(&[1u32, 0, 0, 0])).map_err(err)?;
    let buffers = [&src, &dst, &info, &c_in, &rw, &table];
    let entries: Vec<wgpu::BindGroupEntry> = buffers
        .iter()
        .enumerate()
        .map(|(i, b)| wgpu::BindGroupEntry {
            binding: i as u32,
            resource: b.as_entire_binding(),
        })
        .collect();
    let bind = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some(probe.name),
        layout: &group,
        entries: &entries,
    });
    ctx.run_pass(probe.name, |pass| {
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind, &[]);
        pass.dispatch_workgroups(probe.groups, 1, 1);
    })
    .map_err(err)?;
    read_back_f32(ctx, &dst, 0..16384).map_err(err)
}

/// "PASS"/"FAIL", the largest error and, for a FAIL, the count and first wrong values.
fn verdict(got: &[f32], want: &[f32], tol: (f32, f32)) -> (bool, f32, String) {
    let mut worst = 0.0f32;
    let mut wrong = Vec::new();
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (g - w).abs();
        if err.is_nan() || err > tol.0 + tol.1 * w.abs() {
            wrong.push(i);
        }
        if !err.is_nan() {
            worst = worst.max(err);
        }
    }
    let nans = got[..want.len()].iter().filter(|g| g.is_nan()).count();
    let first: Vec<String> = wrong
        .iter()
        .take(4)
        .map(|&i| format!("[{i}] {} want {}", got[i], want[i]))
        .collect();
    // What a wrong tile looks like: all zero, or the expected tile transposed (a layout mix-up).
    let tile = &got[..want.len().min(256)];
    let shape = if tile.iter().all(|&g| g == 0.0) {
        " [all zero]"
    } else if want.len() >= 256
        && transpose(tile)
            .iter()
            .zip(want)
            .all(|(g, w)| (g - w).abs() <= tol.0 + tol.1 * w.abs())
    {
        " [= want transposed]"
    } else {
        ""
    };
    let detail = if wrong.is_empty() {
        String::new()
    } else {
        format!(
            "  {}/{} wrong ({nans} NaN){shape}: {}",
            wrong.len(),
            want.len(),
            first.join(", ")
        )
    };
    (wrong.is_empty(), worst, detail)
}

/// `--validate FILE...`: naga validates the files concatenated in order (a kernel after the files
/// it requires) with the enables and capabilities of a 16×16 device, as a patched kernel would
/// be; prints "valid" or naga's error. (The engine composes modules the same way.)
fn validate_files(files: &[String]) -> bool {
    let mut text = String::from("enable f16;\nenable wgpu_cooperative_matrix;\n");
    for file in files {
        text += &std::fs::read_to_string(file).expect("reading a WGSL file");
        text.push('\n');
    }
    use naga::valid::{
        Capabilities, ShaderStages, SubgroupOperationSet, ValidationFlags, Validator,
    };
    let checked = naga::front::wgsl::parse_str(&text)
        .map_err(|e| e.emit_to_string(&text))
        .and_then(|module| {
            let caps = Capabilities::SHADER_FLOAT16
                | Capabilities::SUBGROUP
                | Capabilities::COOPERATIVE_MATRIX;
            Validator::new(ValidationFlags::all(), caps)
                .subgroup_stages(ShaderStages::COMPUTE)
                .subgroup_operations(SubgroupOperationSet::all())
                .validate(&module)
                .map_err(|e| e.emit_to_string(&text))
        });
    match &checked {
        Ok(_) => println!("valid: {}", files.join(" ")),
        Err(e) => println!("naga refuses {}:\n{e}", files.join(" ")),
    }
    checked.is_ok()
}

fn main() {
    let validate: Vec<String> = std::env::args()
        .skip_while(|a| a != "--validate")
        .skip(1)
        .collect();
    if !validate.is_empty() {
        std::process::exit(i32::from(!validate_files(&validate)));
    }
    let spirv_dir = std::env::args()
        .skip_while(|a| a != "--spirv")
        .nth(1)
        .map(std::path::PathBuf::from);
    // `--only NAME`: that probe alone (the device script reruns each alone after a crash);
    // `--list`: the probes' names.
    let only = std::env::args().skip_while(|a| a != "--only").nth(1);
    let probes: Vec<Probe> = probes()
        .into_iter()
        .filter(|p| only.as_deref().is_none_or(|name| p.name == name))
        .collect();
    if std::env::args().any(|a| a == "--list") {
        for probe in &probes {
            println!("{}", probe.name);
        }
        return;
    }
    let mut broken = 0;
    for probe in &probes {
        match to_spirv(&module_text(probe, true)) {
            Ok(words) => {
                if let Some(dir) = &spirv_dir {
                    std::fs::create_dir_all(dir).expect("SPIR-V dir");
                    let path = dir.join(format!("{}.spv", probe.name));
                    std::fs::write(path, bytemuck::cast_slice(&words)).expect("writing SPIR-V");
                }
            }
            Err(e) => {
                broken += 1;
                println!("NAGA {}: {e}", probe.name);
            }
        }
    }
    if only.is_none() {
        for candidate in naga_candidates() {
            match to_spirv(&module_text(&candidate, true)) {
                Ok(_) => println!("# naga ACCEPTS {}: {}", candidate.name, candidate.construct),
                Err(e) => {
                    let why = e
                        .lines()
                        .filter(|l| l.contains("error"))
                        .collect::<Vec<_>>()
                        .join(" / ");
                    println!("# naga refuses {}: {why}", candidate.name);
                }
            }
        }
    }
    println!(
        "# naga: {}/{} probes validate and translate to SPIR-V",
        probes.len() - broken,
        probes.len()
    );
    if broken > 0 {
        std::process::exit(1);
    }
    // SAFETY: no other thread runs yet.
    unsafe { fak::gpu::skip_display_probe() };
    let ctx = GpuContext::from_env().expect("opening the GPU");
    let facts = ctx.facts();
    println!(
        "# {} ({}, {} {}), subgroups {}..{}",
        facts.name,
        facts.backend,
        facts.driver,
        facts.driver_info,
        facts.subgroup_min_size,
        facts.subgroup_max_size
    );
    let coop = ctx.paths().coop_matrix == Some(CoopShape::M16x16);
    // `--self-test`: without cooperative matrices, the scalar-only probes still check this
    // program's buffers, dispatch and comparison (lavapipe: f16 and subgroups, no matrices).
    let self_test = std::env::args().any(|a| a == "--self-test");
    if !coop && !self_test {
        println!(
            "# no cooperative matrices on this adapter (16×16 f16 → f32, 32-wide subgroups): nothing to probe"
        );
        return;
    }
    let probes: Vec<&Probe> = probes.iter().filter(|p| coop || scalar_only(p)).collect();
    let data = Data::new();
    let mut failed = 0;
    for probe in probes.iter().copied() {
        let want = (probe.expect)(&data);
        match run(&ctx, probe, &data, coop) {
            Ok(got) => {
                let (pass, worst, detail) = verdict(&got, &want, probe.tol);
                failed += usize::from(!pass);
                println!(
                    "{} {:<24} max|err| {:<9.2e} {}{detail}",
                    if pass { "PASS" } else { "FAIL" },
                    probe.name,
                    worst,
                    probe.construct
                );
            }
            Err(e) => {
                broken += 1;
                println!("ERROR {:<23} {e}", probe.name);
            }
        }
    }
    println!(
        "# {} probes: {} pass, {failed} fail, {broken} did not build",
        probes.len(),
        probes.len() - failed - broken
    );
    if broken > 0 {
        std::process::exit(1);
    }
}
