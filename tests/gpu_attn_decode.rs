//! Decode attention (wgsl/attn_decode.wgsl) against `fak::reference::ops::attend` (f64): GQA
//! groups 1, 2, 4 and 6, head_dim 64, 128, 256 and 40, cache lengths that are not multiples of
//! the page or of a step of the teams, one split and several (with the combining pass; 8 splits
//! of 37 keys leave some splits empty, 1 key leaves one split that writes the output itself), one
//! sequence reading its positions from the Step, and sequences of different lengths on shuffled
//! page tables reading theirs from a token table; the split rule at its edges (every one of
//! MAX_SPLITS splits used, a ragged last split, kv_len 1, kv_len whole steps, a batch whose
//! sequences are cut differently); f32 and f16 caches, both forms of the key loop (`KeyWalk`).
//! Cache slots no sequence owns hold NaN, so reading one fails the test.

use fak::gpu::kernels::attn_decode::{AttnDecode, AttnShape, DecodeIo, KeyWalk, MAX_SPLITS};
use fak::gpu::kernels::quantize_q8::Q8Vectors;
use fak::gpu::step::PageTable;

use fak::gpu::kernels::support::{Positions, View};
use fak::gpu::{GpuContext, Step, storage_buffer};
use fak_tests::attn_decode::{self, Case, PAGE, TOL};
use fak_tests::inputs::{step_buffer, upload_f32};
use fak_tests::kv::{Pages, poisoned_cache};
use fak_tests::{assert_close, gpu, variants};

/// Runs `case` and holds the output to the reference under [`TOL`].
fn run_case(ctx: &GpuContext, kernel: &AttnDecode, case: &Case, seed: u64) {
    let (what, got, want) = attn_decode::run_case(ctx, kernel, case, seed);
    assert_close(&what, &got, &want, TOL);
}

fn shape(n_head: u32, n_kv: u32, head_dim: u32) -> AttnShape {
    AttnShape {
        n_head,
        n_kv,
        head_dim,
    }
}

fn shapes() -> [AttnShape; 5] {
    [
        shape(2, 2, 64),
        shape(4, 2, 256),
        shape(12, 2, 40),
        shape(6, 1, 256),
        // Qwen3-8B's group and width.
        shape(8, 2, 128),
    ]
}

/// Every variant the device has in each of `walks`, each built for `shape`.
fn kernels_walking(ctx: &GpuContext, shape: AttnShape, walks: &[KeyWalk]) -> Vec<AttnDecode> {
    variants::<AttnDecode>(ctx)
        .into_iter()
        .flat_map(|paths| walks.iter().map(move |&walk| (paths, walk)))
        .map(|(paths, walk)| AttnDecode::with_walk(ctx, paths, shape, walk).unwrap())
        .collect()
}

/// Every variant in both forms of the key loop.
fn kernels(ctx: &GpuContext, shape: AttnShape) -> Vec<AttnDecode> {
    kernels_walking(ctx, shape, &KeyWalk::ALL)
}

/// The default form on every shape; the old one (`FAK_ATTN_DECODE=old`, kept for A/B runs) is
/// held to the reference by the two tests below, which keep lavapipe's time in bounds.
#[test]
fn one_sequence_matches_the_reference_for_every_group_and_head_width() {
    let ctx = gpu();
    for (i, shape) in shapes().into_iter().enumerate() {
        for kernel in kernels_walking(ctx, shape, &[KeyWalk::Tiles]) {
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
    // The narrow heads only: positions and page rows do not depend on the head width, and a
    // head of 256 costs lavapipe seconds per pipeline (32 floats per lane of its 8-wide
    // subgroups, per query head).
    for (i, shape) in shapes().into_iter().enumerate().step_by(2) {
        for kernel in kernels(ctx, shape) {
            for n_split in [1u32, 4] {
                let case = Case {
                    shape,
                    lens: vec![5, 70, 33],
                    n_split,
                    table: true,
                    gated_q: i == 2,
                };
                run_case(ctx, &kernel, &case, 40 + i as u64);
            }
        }
    }
}

/// The split rule at its edges, for each form's step (32 or 8 keys): all MAX_SPLITS splits
/// holding keys, the last one ragged or whole, a single key (one split, no combine), lengths of
/// whole steps, and a batch whose sequences are cut into 1, 2, 33 and 64 splits in one dispatch.
#[test]
fn the_split_rule_holds_at_its_edges() {
    let ctx = gpu();
    let shape = shape(4, 2, 64);
    for kernel in kernels(ctx, shape) {
        let step = kernel.walk().step();
        let full = MAX_SPLITS * step;
        // The cut the cases below are meant to reach.
        assert_eq!(kernel.walk().cut(full, MAX_SPLITS), (step, MAX_SPLITS));
        assert_eq!(kernel.walk().cut(full - 5, MAX_SPLITS), (step, MAX_SPLITS));
        assert_eq!(kernel.walk().cut(1, MAX_SPLITS), (step, 1));
        assert_eq!(kernel.walk().cut(2 * step, 2), (step, 2));
        let singles = [
            (vec![full], MAX_SPLITS),
            (vec![full - 5], MAX_SPLITS),
            (vec![1], MAX_SPLITS),
            (vec![step], 3),
            (vec![2 * step], 2),
            (vec![3 * step + 1], 3),
        ];
        for (lens, n_split) in singles {
            let case = Case {
                shape,
                lens,
                n_split,
                table: false,
                gated_q: false,
            };
            run_case(ctx, &kernel, &case, 7 + u64::from(n_split));
        }
        let case = Case {
            shape,
            lens: vec![full - 5, 1, 2 * step, 33 * step - 1],
            n_split: MAX_SPLITS,
            table: true,
            gated_q: true,
        };
        run_case(ctx, &kernel, &case, 99);
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
    // A group of 32 heads of 256 over at most 32 lanes per key row is ≥ 256 accumulators per
    // lane, above the kernel's bound on every adapter.
    assert!(
        AttnDecode::new(
            ctx,
            ctx.paths(),
            AttnShape {
                n_head: 32,
                n_kv: 1,
                head_dim: 256
            }
        )
        .is_err()
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
        gate: None,
        o_q8: None,
        cache,
        pages: &table,
        positions: Positions::Step,
        step: &step,
        n_split,
        scratch,
        max_seqs: 1,
    };
    assert!(kernel.bind(ctx, io(&cache, 1, None)).is_ok());
    // o's q8 blocks need room for every sequence's 4 heads of 64.
    let fits = Q8Vectors::new(ctx, "o q8", 256, 1).unwrap();
    let narrow = Q8Vectors::new(ctx, "o q8", 128, 1).unwrap();
    let with_q8 = |q8| DecodeIo {
        o_q8: Some(q8),
        ..io(&cache, 1, None)
    };
    assert!(kernel.bind(ctx, with_q8(&fits)).is_ok());
    assert!(kernel.bind(ctx, with_q8(&narrow)).is_err());
    assert!(kernel.bind(ctx, io(&wrong, 1, None)).is_err());
    assert!(kernel.bind(ctx, io(&cache, 2, None)).is_err());
    let small = storage_buffer(ctx, "scratch", kernel.scratch_bytes(1, 2) - 4).unwrap();
    assert!(kernel.bind(ctx, io(&cache, 2, Some(&small))).is_err());
    let splits = MAX_SPLITS + 1;
    let big = storage_buffer(ctx, "scratch", kernel.scratch_bytes(1, splits)).unwrap();
    assert!(kernel.bind(ctx, io(&cache, splits, Some(&big))).is_err());
}
