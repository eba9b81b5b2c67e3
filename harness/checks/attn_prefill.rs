//! One prefill-attention case (wgsl/attn_prefill.wgsl) against `fak::reference::ops::attend`
//! (f64), causal: the GPU test (tests/gpu_attn_prefill.rs) asserts it, `harness selftest` reports
//! it (`report`). Cache slots past the step's last token hold NaN, so a causal leak fails.

use super::compare::{Bound, Output, Tolerance};
use super::inputs::{step_buffer, uniform_f32, upload_f32, upload_u32};
use super::kv::{Pages, Sequences};
use super::{poisoned_f32, rng};
use fak::gpu::kernels::attn_decode::AttnShape;
use fak::gpu::kernels::attn_prefill::{AttnPrefill, PrefillIo};
use fak::gpu::step::{PageTable, TokenSlot};

use fak::gpu::kernels::support::{Positions, View};
use fak::gpu::{GpuContext, Step, read_back_f32};

pub use super::attn_decode::{PAGE, TOL};

/// The cooperative-matrix variant's bound (u = 2^-11, f16's unit roundoff; values in [-1, 1],
/// |q| ≤ 1.5): it rounds each weight p_j to f16 and divides by the sum of the rounded weights, so
/// o moves by at most u·max|v_j − o| ≤ 2u ≈ 1e-3; an f32 cache's values rounded to f16 add at
/// most u·max|v| ≈ 5e-4 (the variant's own cache is f16, exact); the scaled queries rounded to
/// f16 move each score by a sum of head_dim independent errors of at most u·|q_d k_d|·scale —
/// worst case aligned 0.017 (log2 units) at head_dim 256, but at random ~1e-4, and a CPU
/// simulation of these roundings over the tests' shapes (head_dim 40–256, 1–1000 keys) never
/// exceeded 5.5e-4 in all. 2e-3 holds that with room and stays below what a key too many or too
/// few costs (~|v_j − o|/len ≥ 5e-3 at the tests' ≤ 71 keys; unwritten slots are NaN anyway).
pub const COOP_TOL: Tolerance = Tolerance {
    rel: 0.0,
    abs: 2e-3,
};

pub struct Case {
    pub shape: AttnShape,
    /// Position of the step's first token (the cache already holds 0..start).
    pub start: u32,
    pub n_tokens: u32,
    /// Read positions from a token table, the sequence on row 1 of a shuffled two-row table.
    pub table: bool,
}

/// Runs `case` on a seeded random cache and queries: the step's outputs against the reference
/// under [`TOL`] ([`COOP_TOL`] on cooperative matrices; as for decode: values in [-1, 1], outputs convex combinations of them; one key
/// too many or too few moves an output by ~1/len ≥ 1e-3), the rows past the step's tokens
/// required to stay poisoned.
pub fn run_case(ctx: &GpuContext, kernel: &AttnPrefill, case: &Case, seed: u64) -> Output {
    run_case_in_pages(ctx, kernel, case, seed, PAGE)
}

/// [`run_case`] on a cache of `page`-token pages (a power of two): pages of at least a key step
/// take the flash form's lean step through one page-table read a step.
pub fn run_case_in_pages(
    ctx: &GpuContext,
    kernel: &AttnPrefill,
    case: &Case,
    seed: u64,
    page: u32,
) -> Output {
    let mut rng = rng(seed);
    let AttnShape {
        n_head,
        n_kv,
        head_dim: hd,
    } = case.shape;
    let dtype = kernel.dtype();
    let end = case.start + case.n_tokens;
    // The sequence (row `seq`) holds positions 0..end: earlier tokens and this step's.
    let (pages, seq) = if case.table {
        (Pages::shuffled(&mut rng, page, &[23, end + 5], 2), 1)
    } else {
        (Pages::identity(page, end + 7), 0)
    };
    let mut lens = vec![end; pages.rows.len()];
    lens[0] = if case.table { 23 } else { end };
    let layout = pages.layout(n_kv, hd, dtype);
    let seqs = Sequences::random(&mut rng, &lens, n_kv * hd, dtype);
    let cache = seqs.cache(ctx, &pages, layout);
    let table = PageTable::from_rows(ctx, pages.pages_per_row, &pages.rows).unwrap();

    let max_tokens = case.n_tokens + 3;
    let q_data = uniform_f32(&mut rng, (max_tokens * n_head * hd) as usize, -1.5, 1.5);
    let q_buf = upload_f32(ctx, "q", &q_data);
    let o_len = max_tokens * n_head * hd;
    let o_buf = poisoned_f32(ctx, "o", u64::from(o_len));
    // The table has a slot for every token the binding allows; the step uses the first n_tokens.
    let slots: Vec<TokenSlot> = (case.start..case.start + max_tokens)
        .map(|pos| TokenSlot {
            pos,
            page_row: seq as u32,
        })
        .collect();
    let slot_buf = upload_u32(ctx, "slots", bytemuck::cast_slice(&slots));
    let positions = if case.table {
        Positions::Table(&slot_buf)
    } else {
        Positions::Step
    };
    let step = step_buffer(ctx, Step::new(case.start, case.n_tokens, 0));
    // Poisoned too: a combine reading a partial no split wrote gives NaN.
    let scratch_bytes = kernel.scratch_bytes(max_tokens, end);
    let scratch = (scratch_bytes > 0).then(|| poisoned_f32(ctx, "partials", scratch_bytes / 4));
    let io = PrefillIo {
        q: View::heads(&q_buf, n_head, hd),
        o: View::heads(&o_buf, n_head, hd),
        cache: &cache,
        pages: &table,
        positions,
        step: &step,
        max_tokens,
        scratch: scratch.as_ref(),
    };
    let binding = kernel.bind(ctx, io).unwrap();
    let splits = kernel.splits(&binding, case.n_tokens, end);
    ctx.run_pass("attn_prefill", |pass| {
        kernel
            .encode(pass, &binding, case.n_tokens, end)
            .expect("recording the prefill");
    })
    .unwrap();
    let mut got = read_back_f32(ctx, &o_buf, 0..4 * u64::from(o_len)).unwrap();

    let mut want = Vec::new();
    for t in 0..case.n_tokens {
        for h in 0..n_head {
            let at = ((t * n_head + h) * hd) as usize;
            want.extend(seqs.attend(
                seq,
                case.start + t,
                &q_data[at..at + hd as usize],
                h,
                n_head,
                n_kv,
            ));
        }
    }
    let past = got.split_off(want.len());
    Output {
        part: "",
        what: format!(
            "{} ({:?}) {:?} tokens {}..{} table {} splits {splits} ({:?}) {:?} pages of {page}",
            kernel.variant(),
            kernel.tile(),
            case.shape,
            case.start,
            end,
            case.table,
            kernel.split(),
            kernel.order(),
        ),
        got,
        want,
        bound: Bound::Within(if kernel.variant().coop_matrix.is_some() {
            COOP_TOL
        } else {
            TOL
        }),
        wrote_outside: past.iter().any(|v| !v.is_nan()),
    }
}
