//! The RoPE kernel (wgsl/rope.wgsl) against `fak::reference::ops::rope` (f64 angles): NeoX and
//! adjacent pairing, partial rotary (64 of 256 like qwen35), heads inside qwen35's [q | gate]
//! rows, llama3-style frequency divisors, positions from the Step and from a token table, and
//! positions up to 2^20, where an angle computed in f32 would already be off by 0.03 rad.

use fak::gpu::kernels::rope::{Rope, RopeShape, RopeTable};
use fak::gpu::kernels::support::{Positions, TokenSlot, View};
use fak::gpu::{GpuContext, Step, read_back_f32};
use fak::model::RopePairing;
use fak::reference::ops::rope;
use fak_tests::inputs::{step_buffer, uniform_f32, upload_f32, upload_u32};
use fak_tests::{Tolerance, assert_close, gpu, rng, variants};
use rand::Rng;
use rand::seq::SliceRandom;

/// Inputs are in [-2, 2]. The kernel's angle is within ~1e-6 rad of the f64 one at every tested
/// position (the phase is reduced exactly; see wgsl/rope.wgsl), and cos/sin and the two products
/// add a few f32 roundings: |error| ≤ 4·(1e-6 + 3·2^-24) < 1e-5. Unrotated values must not move.
const TOL: Tolerance = Tolerance {
    rel: 0.0,
    abs: 1e-5,
};

struct Case {
    n_heads: u32,
    head_dim: u32,
    n_rot: u32,
    /// Elements between heads (≥ head_dim) and between tokens.
    head_stride: u32,
    pairing: RopePairing,
    base: f32,
    factors: bool,
}

/// Runs `case` at `positions` (one per token), through the Step when they are consecutive from
/// `positions[0]` and `table` is false, else through a token table.
fn run_case(
    ctx: &GpuContext,
    kernel: &Rope,
    case: &Case,
    positions: &[u32],
    table: bool,
    seed: u64,
) {
    let mut rng = rng(seed);
    let n_tokens = positions.len() as u32;
    let token_stride = case.n_heads * case.head_stride + 5;
    let len = (n_tokens * token_stride) as usize;
    let x = uniform_f32(&mut rng, len, -2.0, 2.0);
    let half = case.n_rot as usize / 2;
    let factors: Vec<f32> = (0..half).map(|_| rng.random_range(1.0..8.0)).collect();
    let factors = case.factors.then_some(&factors[..]);
    let rope_table = RopeTable::new(ctx, case.n_rot, case.base, factors).unwrap();
    let x_buf = upload_f32(ctx, "x", &x);
    let slots: Vec<TokenSlot> = positions
        .iter()
        .map(|&pos| TokenSlot { pos, page_row: 7 })
        .collect();
    let slot_buf = upload_u32(ctx, "slots", bytemuck::cast_slice(&slots));
    let positions_src = if table {
        Positions::Table(&slot_buf)
    } else {
        Positions::Step
    };
    let step = step_buffer(ctx, Step::new(positions[0], n_tokens, 0));
    let shape = RopeShape {
        n_heads: case.n_heads,
        head_dim: case.head_dim,
        pairing: case.pairing,
        max_tokens: n_tokens,
    };
    let view =
        View::heads(&x_buf, case.n_heads, case.head_dim).strided(token_stride, case.head_stride);
    let binding = kernel
        .bind(ctx, shape, view, &rope_table, positions_src, &step)
        .unwrap();
    ctx.run_pass("rope", |pass| kernel.encode(pass, &binding, n_tokens))
        .unwrap();
    let got = read_back_f32(ctx, &x_buf, 0..4 * len as u64).unwrap();
    let mut want = x.clone();
    for (t, &pos) in positions.iter().enumerate() {
        for h in 0..case.n_heads {
            let at = t * token_stride as usize + (h * case.head_stride) as usize;
            let head = &mut want[at..at + case.head_dim as usize];
            rope(
                head,
                pos as usize,
                case.n_rot as usize,
                case.base,
                case.pairing,
                factors,
            );
        }
    }
    let what = format!(
        "{} heads × {} (n_rot {}, stride {}) {:?} factors {} positions {:?}… table {table}",
        case.n_heads,
        case.head_dim,
        case.n_rot,
        case.head_stride,
        case.pairing,
        case.factors,
        &positions[..positions.len().min(3)]
    );
    assert_close(&what, &got, &want, TOL);
}

fn cases() -> Vec<Case> {
    let case = |n_heads, head_dim, n_rot, head_stride, pairing, base, factors| Case {
        n_heads,
        head_dim,
        n_rot,
        head_stride,
        pairing,
        base,
        factors,
    };
    vec![
        // qwen3: full rotary, NeoX.
        case(3, 64, 64, 64, RopePairing::Neox, 1e6, false),
        // qwen35: 64 of 256 dims, heads at stride 2·hd inside [q | gate].
        case(2, 256, 64, 512, RopePairing::Neox, 1e7, false),
        // llama: adjacent pairs, rope_freqs divisors, an odd head count.
        case(5, 40, 40, 40, RopePairing::Adjacent, 5e5, true),
        case(1, 40, 24, 48, RopePairing::Neox, 1e4, true),
    ]
}

#[test]
fn consecutive_positions_from_the_step_match_the_reference() {
    let ctx = gpu();
    for paths in variants::<Rope>(ctx) {
        let kernel = Rope::new(ctx, paths).unwrap();
        for (i, case) in cases().iter().enumerate() {
            for start in [0u32, 17, 40_000] {
                let positions: Vec<u32> = (start..start + 7).collect();
                run_case(ctx, &kernel, case, &positions, false, i as u64);
            }
        }
    }
}

#[test]
fn positions_from_a_token_table_reach_a_million_and_match_the_reference() {
    let ctx = gpu();
    let mut rng = rng(99);
    for paths in variants::<Rope>(ctx) {
        let kernel = Rope::new(ctx, paths).unwrap();
        for (i, case) in cases().iter().enumerate() {
            // Batched decode: each token its own sequence, positions in any order.
            let mut positions: Vec<u32> = vec![0, 1, 4095, 4096, 65_537, 262_143, 1 << 20, 999_999];
            positions.extend((0..5).map(|_| rng.random_range(0..(1 << 20))));
            positions.shuffle(&mut rng);
            run_case(ctx, &kernel, case, &positions, true, 50 + i as u64);
        }
    }
}

#[test]
fn bad_tables_and_shapes_are_refused() {
    let ctx = gpu();
    assert!(RopeTable::new(ctx, 7, 1e4, None).is_err());
    assert!(RopeTable::new(ctx, 0, 1e4, None).is_err());
    assert!(RopeTable::new(ctx, 8, 1.0, None).is_err());
    assert!(RopeTable::new(ctx, 8, 1e4, Some(&[1.0; 3])).is_err());
    assert!(RopeTable::new(ctx, 8, 1e4, Some(&[1.0, 0.0, 1.0, 1.0])).is_err());
    let kernel = Rope::new(ctx, ctx.paths()).unwrap();
    let table = RopeTable::new(ctx, 64, 1e4, None).unwrap();
    let x = upload_f32(ctx, "x", &[0.0; 128]);
    let step = step_buffer(ctx, Step::new(0, 1, 0));
    let shape = |n_heads, head_dim, max_tokens| RopeShape {
        n_heads,
        head_dim,
        pairing: RopePairing::Neox,
        max_tokens,
    };
    let bind = |shape, view| kernel.bind(ctx, shape, view, &table, Positions::Step, &step);
    assert!(bind(shape(2, 64, 1), View::heads(&x, 2, 64)).is_ok());
    // n_rot 64 > head_dim 32.
    assert!(bind(shape(4, 32, 1), View::heads(&x, 4, 32)).is_err());
    // 2 tokens of 2 heads of 64 do not fit 128 values.
    assert!(bind(shape(2, 64, 2), View::heads(&x, 2, 64)).is_err());
}
