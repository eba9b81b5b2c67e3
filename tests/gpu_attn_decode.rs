//! Decode attention (wgsl/attn_decode.wgsl) against `fak::reference::ops::attend` (f64): GQA
//! groups 1, 2 and 6, head_dim 64, 256 and 40, cache lengths that are not multiples of the page
//! or the key tile, one split and several (with the combining pass), one sequence reading its
//! positions from the Step, and three sequences of different lengths on shuffled page tables
//! reading theirs from a token table; f32 and f16 caches. Cache slots no sequence owns hold NaN,
//! so reading one fails the test.

use fak::gpu::kernels::attn_decode::{AttnDecode, AttnShape, DecodeIo};
use fak::gpu::kernels::kv_cache::PageTable;
use fak::gpu::kernels::support::{Positions, TokenSlot, View};
use fak::gpu::{GpuContext, Step, read_back_f32, storage_buffer};
use fak_tests::inputs::{step_buffer, uniform_f32, upload_f32, upload_u32};
use fak_tests::kv::{Pages, Sequences, poisoned_cache};
use fak_tests::{Tolerance, assert_close, gpu, poisoned_f32, rng, variants};

const PAGE: u32 = 16;

/// Values are in [-1, 1] and every output is a convex combination of them. A weight
/// exp2(s − m) carries the f32 rounding of its score (hd products, ~hd·2^-24·|s|) and exp2's
/// error ((3 + 2|x|) ulp under Vulkan, ≤ 6e-6 relative for the |x| ≤ 20 of these scores); the
/// sums that follow add a few ulps. 3e-5 absolute bounds that with room; a wrong key, a missed
/// key or a mis-weighted split moves an output by ~1/len ≥ 1e-3.
const TOL: Tolerance = Tolerance {
    rel: 0.0,
    abs: 3e-5,
};

struct Case {
    shape: AttnShape,
    lens: Vec<u32>,
    n_split: u32,
    /// Positions from a token table (batched decode) rather than the Step.
    table: bool,
    /// Queries inside qwen35-style [q | gate] rows (head stride 2·hd).
    gated_q: bool,
}

fn run_case(ctx: &GpuContext, kernel: &AttnDecode, case: &Case, seed: u64) {
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
        cache: &cache,
        pages: &table,
        positions,
        step: &step,
        n_split: case.n_split,
        scratch: Some(&scratch),
        max_seqs: n_seqs,
    };
    let binding = kernel.bind(ctx, io).unwrap();
    ctx.run_pass("attn_decode", |pass| kernel.encode(pass, &binding, n_seqs))
        .unwrap();
    let got = read_back_f32(ctx, &o_buf, 0..u64::from(4 * n_seqs * n_head * hd)).unwrap();

    let mut want = Vec::new();
    for (b, &len) in case.lens.iter().enumerate() {
        for h in 0..n_head {
            let at = (b as u32 * n_head * q_head_stride + h * q_head_stride) as usize;
            want.extend(seqs.attend(b, len - 1, &q_data[at..at + hd as usize], h, n_head, n_kv));
        }
    }
    let what = format!(
        "{} {:?} lens {:?} splits {} table {} gated q {}",
        kernel.variant(),
        case.shape,
        case.lens,
        case.n_split,
        case.table,
        case.gated_q
    );
    assert_close(&what, &got, &want, TOL);
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

/// Every variant the device has, each built for `shape`.
fn kernels(ctx: &GpuContext, shape: AttnShape) -> Vec<AttnDecode> {
    variants::<AttnDecode>(ctx)
        .into_iter()
        .map(|paths| AttnDecode::new(ctx, paths, shape).unwrap())
        .collect()
}

#[test]
fn one_sequence_matches_the_reference_for_every_group_and_head_width() {
    let ctx = gpu();
    for (i, shape) in shapes().into_iter().enumerate() {
        for kernel in kernels(ctx, shape) {
            for len in [1u32, 37, 100] {
                for n_split in [1u32, 3, 8] {
                    let case = Case {
                        shape,
                        lens: vec![len],
                        n_split,
                        table: false,
                        gated_q: i == 3,
                    };
                    run_case(ctx, &kernel, &case, u64::from(len) + i as u64);
                }
            }
        }
    }
}

#[test]
fn three_sequences_on_shuffled_pages_each_attend_to_their_own_cache() {
    let ctx = gpu();
    for (i, shape) in shapes().into_iter().enumerate() {
        for kernel in kernels(ctx, shape) {
            for n_split in [1u32, 4] {
                let case = Case {
                    shape,
                    lens: vec![5, 70, 33],
                    n_split,
                    table: true,
                    gated_q: i == 1,
                };
                run_case(ctx, &kernel, &case, 40 + i as u64);
            }
        }
    }
}

#[test]
fn mismatched_caches_and_missing_scratch_are_refused() {
    let ctx = gpu();
    let shape = AttnShape {
        n_head: 4,
        n_kv: 2,
        head_dim: 64,
    };
    let kernel = AttnDecode::new(ctx, ctx.paths(), shape).unwrap();
    assert!(
        AttnDecode::new(
            ctx,
            ctx.paths(),
            AttnShape {
                n_head: 5,
                n_kv: 2,
                head_dim: 64
            }
        )
        .is_err()
    );
    assert!(
        AttnDecode::new(
            ctx,
            ctx.paths(),
            AttnShape {
                n_head: 64,
                n_kv: 1,
                head_dim: 64
            }
        )
        .is_err()
    );
    // A group of 32 heads of 256 needs 32 KiB of query tile: refused exactly where the device
    // has less workgroup memory than the kernel would use.
    let wide = AttnShape {
        n_head: 32,
        n_kv: 1,
        head_dim: 256,
    };
    let needed = AttnDecode::workgroup_bytes(wide).unwrap();
    let limit = u64::from(ctx.device.limits().max_compute_workgroup_storage_size);
    assert_eq!(
        AttnDecode::new(ctx, ctx.paths(), wide).is_err(),
        needed > limit
    );
    let pages = Pages::identity(PAGE, 32);
    let cache = poisoned_cache(ctx, pages.layout(2, 64, kernel.dtype()));
    let wrong = poisoned_cache(ctx, pages.layout(1, 64, kernel.dtype()));
    let table = PageTable::from_rows(ctx, pages.pages_per_row, &pages.rows).unwrap();
    let q = upload_f32(ctx, "q", &[0.0; 256]);
    let o = upload_f32(ctx, "o", &[0.0; 256]);
    let step = step_buffer(ctx, Step::new(0, 1, 0));
    let io = |cache, n_split, scratch| DecodeIo {
        q: View::heads(&q, 4, 64),
        o: View::heads(&o, 4, 64),
        cache,
        pages: &table,
        positions: Positions::Step,
        step: &step,
        n_split,
        scratch,
        max_seqs: 1,
    };
    assert!(kernel.bind(ctx, io(&cache, 1, None)).is_ok());
    assert!(kernel.bind(ctx, io(&wrong, 1, None)).is_err());
    assert!(kernel.bind(ctx, io(&cache, 2, None)).is_err());
    let small = storage_buffer(ctx, "scratch", kernel.scratch_bytes(1, 2) - 4).unwrap();
    assert!(kernel.bind(ctx, io(&cache, 2, Some(&small))).is_err());
}
