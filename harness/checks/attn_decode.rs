//! One decode-attention case (wgsl/attn_decode.wgsl) against `fak::reference::ops::attend`
//! (f64): the GPU test (tests/gpu_attn_decode.rs) asserts it, `harness selftest` reports it
//! (`report`).

use super::compare::Tolerance;
use super::inputs::{step_buffer, uniform_f32, upload_f32, upload_u32};
use super::kv::{Pages, Sequences};
use super::{poisoned_f32, poisoned_q8, quantize_q8_of, rng};
use fak::gpu::kernels::attn_decode::{AttnDecode, AttnShape, DecodeIo};
use fak::gpu::step::{PageTable, TokenSlot};

use fak::gpu::kernels::support::{Positions, View};
use fak::gpu::{GpuContext, Step, read_back_f32, storage_buffer};

/// Tokens per KV page.
pub const PAGE: u32 = 16;

/// Values are in [-1, 1] and every output is a convex combination of them. A weight
/// exp2(s − m) carries the f32 rounding of its score (hd products, ~hd·2^-24·|s|) and exp2's
/// error ((3 + 2|x|) ulp under Vulkan, ≤ 6e-6 relative for the |x| ≤ 20 of these scores); the
/// sums that follow add a few ulps. 3e-5 absolute bounds that with room; a wrong key, a missed
/// key or a mis-weighted split moves an output by ~1/len ≥ 1e-3.
pub const TOL: Tolerance = Tolerance {
    rel: 0.0,
    abs: 3e-5,
};

pub struct Case {
    pub shape: AttnShape,
    pub lens: Vec<u32>,
    pub n_split: u32,
    /// Positions from a token table (batched decode) rather than the Step.
    pub table: bool,
    /// Queries inside qwen35-style [q | gate] rows (head stride 2·hd), and the output gate
    /// applied as the model's decode step does: o ⊙= σ(gate).
    pub gated_q: bool,
}

/// Runs `case` on seeded random caches and queries (output poisoned first): what ran, the
/// kernel's output and the reference's. Where the heads are whole q8 blocks the kernel also
/// writes o's q8 blocks (poisoned first too), which must be bit for bit what quantize_q8 makes of
/// the o it wrote (else it panics: the test fails, the selftest reports the case failed).
pub fn run_case(
    ctx: &GpuContext,
    kernel: &AttnDecode,
    case: &Case,
    seed: u64,
) -> (String, Vec<f32>, Vec<f32>) {
    let mut rng = rng(seed);
    let AttnShape {
        n_head,
        n_kv,
        head_dim: hd,
    } = case.shape;
    let dtype = kernel.dtype();
    let n_seqs = case.lens.len() as u32;
    let pages = if case.table {
        Pages::shuffled(&mut rng, PAGE, &case.lens, 2)
    } else {
        Pages::identity(PAGE, case.lens[0] + 9)
    };
    let layout = pages.layout(n_kv, hd, dtype);
    let seqs = Sequences::random(&mut rng, &case.lens, n_kv * hd, dtype);
    let cache = seqs.cache(ctx, &pages, layout);
    let table = PageTable::from_rows(ctx, pages.pages_per_row, &pages.rows).unwrap();

    let q_head_stride = if case.gated_q { 2 * hd } else { hd };
    let q_data = uniform_f32(
        &mut rng,
        (n_seqs * n_head * q_head_stride) as usize,
        -1.5,
        1.5,
    );
    let q_buf = upload_f32(ctx, "q", &q_data);
    let q =
        View::heads(&q_buf, n_head, q_head_stride).strided(n_head * q_head_stride, q_head_stride);
    let o_buf = poisoned_f32(ctx, "o", u64::from(n_seqs * n_head * hd));
    let cols = u64::from(n_head * hd);
    let o_q8 = AttnDecode::quantizes(&case.shape).then(|| poisoned_q8(ctx, "o q8", cols, n_seqs));
    let slots: Vec<TokenSlot> = case
        .lens
        .iter()
        .enumerate()
        .map(|(row, &len)| TokenSlot {
            pos: len - 1,
            page_row: row as u32,
        })
        .collect();
    let slot_buf = upload_u32(ctx, "slots", bytemuck::cast_slice(&slots));
    let positions = if case.table {
        Positions::Table(&slot_buf)
    } else {
        Positions::Step
    };
    let step = step_buffer(ctx, Step::new(case.lens[0] - 1, n_seqs, 0));
    let scratch =
        storage_buffer(ctx, "scratch", kernel.scratch_bytes(n_seqs, case.n_split)).unwrap();
    let io = DecodeIo {
        q,
        o: View::heads(&o_buf, n_head, hd),
        gate: case.gated_q.then(|| q.at(hd)),
        o_q8: o_q8.as_ref(),
        cache: &cache,
        pages: &table,
        positions,
        step: &step,
        n_split: case.n_split,
        scratch: Some(&scratch),
        max_seqs: n_seqs,
    };
    let binding = kernel.bind(ctx, io).unwrap();
    let keys = case.lens.iter().sum();
    ctx.run_pass("attn_decode", |pass| {
        kernel.encode(pass, &binding, n_seqs, keys).unwrap();
    })
    .unwrap();
    let got = read_back_f32(ctx, &o_buf, 0..u64::from(4 * n_seqs * n_head * hd)).unwrap();
    let what = format!(
        "{} {:?} lens {:?} splits {} table {} gated q {}",
        kernel.variant(),
        case.shape,
        case.lens,
        case.n_split,
        case.table,
        case.gated_q
    );
    if let Some(q8) = &o_q8 {
        let blocks = q8.read_back(ctx, cols, n_seqs).unwrap();
        let want = quantize_q8_of(ctx, &got, cols, n_seqs);
        assert!(
            blocks == want,
            "{what}: o's q8 blocks are not quantize_q8 of o"
        );
    }

    let mut want = Vec::new();
    for (b, &len) in case.lens.iter().enumerate() {
        for h in 0..n_head {
            let at = (b as u32 * n_head * q_head_stride + h * q_head_stride) as usize;
            let o = seqs.attend(b, len - 1, &q_data[at..at + hd as usize], h, n_head, n_kv);
            if case.gated_q {
                let gate = &q_data[at + hd as usize..at + 2 * hd as usize];
                let sigmoid = |g: f32| 1.0 / (1.0 + (-f64::from(g)).exp());
                want.extend(
                    o.iter()
                        .zip(gate)
                        .map(|(&x, &g)| (f64::from(x) * sigmoid(g)) as f32),
                );
            } else {
                want.extend(o);
            }
        }
    }
    (what, got, want)
}
