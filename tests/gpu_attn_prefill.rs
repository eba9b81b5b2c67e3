//! Prefill attention (wgsl/attn_prefill.wgsl) against `fak::reference::ops::attend` (f64),
//! causal: GQA groups 1, 2 and 6, head_dim 64, 256 and 40, prompts that are not multiples of the
//! row or key tile, a prefill continuing a cache that already holds earlier tokens, a one-token
//! prefill, and a sequence on a shuffled page-table row read through a token table; f32 and f16
//! caches. Cache slots past the step's last token hold NaN, so a causal leak fails the test.

use fak::gpu::kernels::attn_decode::AttnShape;
use fak::gpu::kernels::attn_prefill::{AttnPrefill, PrefillIo};
use fak::gpu::kernels::kv_cache::PageTable;
use fak::gpu::kernels::support::{Positions, TokenSlot, View};
use fak::gpu::{GpuContext, Step, read_back_f32};
use fak_tests::inputs::{step_buffer, uniform_f32, upload_f32, upload_u32};
use fak_tests::kv::{Pages, Sequences, poisoned_cache};
use fak_tests::{Tolerance, assert_close, gpu, poisoned_f32, rng, variants};

const PAGE: u32 = 16;

/// As for decode (tests/gpu_attn_decode.rs): values in [-1, 1], outputs convex combinations of
/// them, each weight off by its score's f32 rounding and exp2's (3 + 2|x|)-ulp error; 3e-5
/// absolute bounds that, while one key too many or too few moves an output by ~1/len ≥ 1e-3.
const TOL: Tolerance = Tolerance {
    rel: 0.0,
    abs: 3e-5,
};

struct Case {
    shape: AttnShape,
    /// Position of the step's first token (the cache already holds 0..start).
    start: u32,
    n_tokens: u32,
    /// Read positions from a token table, the sequence on row 1 of a shuffled two-row table.
    table: bool,
}

fn run_case(ctx: &GpuContext, kernel: &AttnPrefill, case: &Case, seed: u64) {
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
        (Pages::shuffled(&mut rng, PAGE, &[23, end + 5], 2), 1)
    } else {
        (Pages::identity(PAGE, end + 7), 0)
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
    let io = PrefillIo {
        q: View::heads(&q_buf, n_head, hd),
        o: View::heads(&o_buf, n_head, hd),
        cache: &cache,
        pages: &table,
        positions,
        step: &step,
        max_tokens,
    };
    let binding = kernel.bind(ctx, io).unwrap();
    ctx.run_pass("attn_prefill", |pass| {
        kernel.encode(pass, &binding, case.n_tokens)
    })
    .unwrap();
    let got = read_back_f32(ctx, &o_buf, 0..4 * u64::from(o_len)).unwrap();

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
    let what = format!(
        "{} {:?} tokens {}..{} table {}",
        kernel.variant(),
        case.shape,
        case.start,
        end,
        case.table
    );
    let split = want.len();
    assert_close(&what, &got[..split], &want, TOL);
    assert!(
        got[split..].iter().all(|v| v.is_nan()),
        "{what}: wrote past the step's tokens"
    );
}

fn shapes() -> [AttnShape; 4] {
    let shape = |n_head, n_kv, head_dim| AttnShape {
        n_head,
        n_kv,
        head_dim,
    };
    [
        shape(2, 2, 64),
        shape(4, 2, 256),
        shape(12, 2, 40),
        shape(6, 1, 256),
    ]
}

fn kernels(ctx: &GpuContext, shape: AttnShape) -> Vec<AttnPrefill> {
    variants::<AttnPrefill>(ctx)
        .into_iter()
        .map(|paths| AttnPrefill::new(ctx, paths, shape).unwrap())
        .collect()
}

#[test]
fn a_fresh_prompt_attends_causally_for_every_group_and_head_width() {
    let ctx = gpu();
    for (i, shape) in shapes().into_iter().enumerate() {
        for kernel in kernels(ctx, shape) {
            for n_tokens in [1u32, 37] {
                let case = Case {
                    shape,
                    start: 0,
                    n_tokens,
                    table: false,
                };
                run_case(ctx, &kernel, &case, u64::from(n_tokens) + i as u64);
            }
        }
    }
}

#[test]
fn a_prefill_continuing_a_cache_sees_the_earlier_tokens() {
    let ctx = gpu();
    for (i, shape) in shapes().into_iter().enumerate() {
        for kernel in kernels(ctx, shape) {
            for (start, n_tokens) in [(45u32, 20u32), (70, 1)] {
                let case = Case {
                    shape,
                    start,
                    n_tokens,
                    table: false,
                };
                run_case(ctx, &kernel, &case, u64::from(start) + i as u64);
            }
        }
    }
}

#[test]
fn a_sequence_on_a_shuffled_page_row_reads_its_positions_from_the_token_table() {
    let ctx = gpu();
    for (i, shape) in shapes().into_iter().enumerate() {
        for kernel in kernels(ctx, shape) {
            let case = Case {
                shape,
                start: 30,
                n_tokens: 13,
                table: true,
            };
            run_case(ctx, &kernel, &case, 90 + i as u64);
        }
    }
}

#[test]
fn unsupported_shapes_and_mismatched_caches_are_refused() {
    let ctx = gpu();
    assert!(
        AttnPrefill::new(
            ctx,
            ctx.paths(),
            AttnShape {
                n_head: 2,
                n_kv: 1,
                head_dim: 512
            }
        )
        .is_err()
    );
    assert!(
        AttnPrefill::new(
            ctx,
            ctx.paths(),
            AttnShape {
                n_head: 3,
                n_kv: 2,
                head_dim: 64
            }
        )
        .is_err()
    );
    let shape = AttnShape {
        n_head: 2,
        n_kv: 1,
        head_dim: 64,
    };
    let kernel = AttnPrefill::new(ctx, ctx.paths(), shape).unwrap();
    let pages = Pages::identity(PAGE, 32);
    let wrong = poisoned_cache(ctx, pages.layout(1, 32, kernel.dtype()));
    let table = PageTable::from_rows(ctx, pages.pages_per_row, &pages.rows).unwrap();
    let q = upload_f32(ctx, "q", &[0.0; 128]);
    let o = upload_f32(ctx, "o", &[0.0; 128]);
    let step = step_buffer(ctx, Step::new(0, 1, 0));
    let io = PrefillIo {
        q: View::heads(&q, 2, 64),
        o: View::heads(&o, 2, 64),
        cache: &wrong,
        pages: &table,
        positions: Positions::Step,
        step: &step,
        max_tokens: 1,
    };
    assert!(kernel.bind(ctx, io).is_err());
}
