//! Decode attention (wgsl/attn_decode.wgsl) against `fak::reference::ops::attend` (f64): GQA
//! groups 1, 2, 4 and 6, head_dim 64, 128, 256 and 40, cache lengths that are not multiples of
//! the page or of a step of the teams, one split and several (with the combining pass; 8 splits
//! of 37 keys leave some splits empty, 1 key leaves one split that writes the output itself), one
//! sequence reading its positions from the Step, and sequences of different lengths on shuffled
//! page tables reading theirs from a token table; the split rule at its edges (every one of
//! MAX_SPLITS splits used, a ragged last split, kv_len 1, kv_len whole steps, a batch whose
//! sequences are cut differently); f32 and f16 caches, every form of the key loop (`KeyWalk`: the
//! walk ahead also bit for bit the default) and longer splits (`with_split_keys`).
//! Cache slots no sequence owns hold NaN, so reading one fails the test.

use fak::gpu::kernels::attn_decode::{AttnDecode, AttnShape, DecodeIo, KeyWalk, MAX_SPLITS};
use fak::gpu::kernels::quantize_q8::Q8Vectors;
use fak::gpu::step::PageTable;

use fak::gpu::kernels::rope::RopePairing;
use fak::gpu::kernels::rope_kv::RopeKv;
use fak::gpu::kernels::support::{Positions, View};
use fak::gpu::{GpuContext, Step, storage_buffer};
use fak_tests::attn_decode::{self, Case, PAGE, ROPE_TOL, RopeCase, TOL};
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

/// Every variant in every form of the key loop.
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

/// `FAK_ATTN_DECODE=ahead` loads the next tile while it scores the current one: the same
/// arithmetic in the same order as the default, so the same bits, on one sequence (ragged and
/// split) and on a batch on shuffled pages; both are held to the reference too.
#[test]
fn the_walk_ahead_computes_the_default_bits() {
    let ctx = gpu();
    let shape = shape(8, 2, 128);
    let tiles = kernels_walking(ctx, shape, &[KeyWalk::Tiles]);
    let ahead = kernels_walking(ctx, shape, &[KeyWalk::Ahead]);
    let cases = [
        (vec![1], 1),
        (vec![37], 1),
        (vec![141], 3),
        (vec![5, 70, 130], 4),
    ];
    for (default, kernel) in tiles.iter().zip(&ahead) {
        for (i, (lens, n_split)) in cases.iter().enumerate() {
            let case = Case {
                shape,
                table: lens.len() > 1,
                lens: lens.clone(),
                n_split: *n_split,
                gated_q: i == 2,
            };
            let (what, got, want) = attn_decode::run_case(ctx, kernel, &case, 60 + i as u64);
            assert_close(&what, &got, &want, TOL);
            let (_, bits, _) = attn_decode::run_case(ctx, default, &case, 60 + i as u64);
            let differ = got
                .iter()
                .zip(&bits)
                .filter(|(a, b)| a.to_bits() != b.to_bits())
                .count();
            assert_eq!(
                differ, 0,
                "{what}: {differ} outputs differ from the default form's"
            );
        }
    }
}

/// A rope case: the sequences `lens` (from a token table where there are several) split
/// `n_split` ways, on one attention input's shape, rotation and norms.
fn rope_case(
    shape: AttnShape,
    (lens, n_split): &(Vec<u32>, u32),
    (n_rot, pairing): (u32, RopePairing),
    (norms, factors, gated_q): (bool, bool, bool),
) -> RopeCase {
    RopeCase {
        case: Case {
            shape,
            table: lens.len() > 1,
            lens: lens.clone(),
            n_split: *n_split,
            gated_q,
        },
        n_rot,
        pairing,
        norms,
        factors,
    }
}

/// The rope form (`FAK_DECODE_FUSE=rope`): rope_kv's work done inside the decode pass. For
/// qwen3's (norms, NeoX, q heads of 128 in groups of 4), qwen35's (norms, 64 of 256 dims rotated,
/// q inside [q | gate] rows with the gate applied, groups of 6) and llama's (no norms, adjacent
/// pairs, frequency divisors, 40 of 48 dims, groups of 3) attention inputs, on every variant
/// (subgroup and workgroup-tree reductions, f32 and f16 caches): one sequence whose new key
/// lands in its only split (kv_len 1 and 37) or in the last of several (100 keys, 8 splits, the
/// combine), and four sequences on shuffled pages at their own positions from a token table, one
/// at kv_len 1. Every case bit for bit rope_kv + the default (o, o's q8 blocks, both caches) and
/// against the CPU's rope and attention; the first shape in every form of the key walk.
#[test]
fn the_rope_form_computes_rope_kv_and_the_defaults_bits() {
    let ctx = gpu();
    let inputs = [
        (shape(8, 2, 128), 128, RopePairing::Neox, true, false, false),
        (shape(6, 1, 256), 64, RopePairing::Neox, true, false, true),
        (
            shape(3, 1, 48),
            40,
            RopePairing::Adjacent,
            false,
            true,
            false,
        ),
    ];
    let cases = [
        (vec![1], 1),
        (vec![37], 3),
        (vec![100], 8),
        (vec![30, 9, 17, 1], 4),
    ];
    for (i, (shape, n_rot, pairing, norms, factors, gated_q)) in inputs.into_iter().enumerate() {
        let walks: &[KeyWalk] = if i == 0 {
            &KeyWalk::ALL
        } else {
            &[KeyWalk::Tiles]
        };
        for mut kernel in kernels_walking(ctx, shape, walks) {
            kernel.build_rope(ctx).unwrap();
            let rope_kv = RopeKv::new(ctx, kernel.variant()).unwrap();
            for (j, split) in cases.iter().enumerate() {
                let rc = rope_case(shape, split, (n_rot, pairing), (norms, factors, gated_q));
                let seed = 90 + 10 * i as u64 + j as u64;
                let (what, got, want) =
                    attn_decode::run_rope_case(ctx, &kernel, &rope_kv, &rc, seed);
                assert_close(&what, &got, &want, ROPE_TOL);
            }
        }
    }
}

/// `FAK_ATTN_DECODE_SPLIT`: splits of at least 3 steps. A sequence that fits runs one split and
/// no combine (a combine skipped where a sequence needed it leaves o poisoned), one just past
/// it two; a long one is cut into fewer splits than the binding allows; a batch mixes them on
/// shuffled pages. In both 4-key forms, every variant, against the reference.
#[test]
fn longer_splits_match_the_reference() {
    let ctx = gpu();
    let shape = shape(4, 2, 64);
    for kernel in kernels_walking(ctx, shape, &[KeyWalk::Tiles, KeyWalk::Ahead]) {
        let step = kernel.walk().step();
        let kernel = kernel.with_split_keys(2 * step + 1);
        let fits = 3 * step;
        assert_eq!(kernel.split_keys(), fits);
        // The cuts the cases below are meant to reach.
        assert_eq!(kernel.cut(fits, MAX_SPLITS), (fits, 1));
        assert_eq!(kernel.cut(fits + 1, MAX_SPLITS), (fits, 2));
        assert_eq!(kernel.cut(20 * step, 4), (5 * step, 4));
        assert_eq!(kernel.cut(20 * step - 3, MAX_SPLITS), (fits, 7));
        let singles = [
            (vec![1], MAX_SPLITS),
            (vec![fits], MAX_SPLITS),
            (vec![fits + 1], MAX_SPLITS),
            (vec![20 * step], 4),
            (vec![20 * step - 3], MAX_SPLITS),
        ];
        for (lens, n_split) in singles {
            let case = Case {
                shape,
                lens,
                n_split,
                table: false,
                gated_q: false,
            };
            run_case(ctx, &kernel, &case, 17 + u64::from(n_split));
        }
        let case = Case {
            shape,
            lens: vec![fits + 1, 1, 20 * step - 3, fits],
            n_split: MAX_SPLITS,
            table: true,
            gated_q: true,
        };
        run_case(ctx, &kernel, &case, 98);
    }
}

/// `FAK_ATTN_DECODE_SPLITS`: at most 5 splits (and 1: the whole sequence in one workgroup per kv
/// head, no combine) under a binding of MAX_SPLITS, alone and with longer splits, on one
/// sequence and on a batch on shuffled pages; both 4-key forms, every variant.
#[test]
fn capped_splits_match_the_reference() {
    let ctx = gpu();
    let shape = shape(4, 2, 64);
    for walk in [KeyWalk::Tiles, KeyWalk::Ahead] {
        let step = walk.step();
        for kernel in kernels_walking(ctx, shape, &[walk]) {
            assert_eq!(kernel.cut(20 * step - 3, MAX_SPLITS), (step, 20));
            let capped = kernel.with_max_splits(5);
            assert_eq!(capped.cut(20 * step - 3, MAX_SPLITS), (4 * step, 5));
            assert_eq!(capped.cut(20 * step - 3, 2), (10 * step, 2));
            let mut kernels = vec![capped];
            for (cap, split_keys) in [(1, None), (5, Some(6 * step))] {
                let kernel = AttnDecode::with_walk(ctx, kernels[0].variant(), shape, walk)
                    .unwrap()
                    .with_max_splits(cap);
                kernels.push(match split_keys {
                    Some(keys) => kernel.with_split_keys(keys),
                    None => kernel,
                });
            }
            assert_eq!(kernels[1].cut(20 * step - 3, MAX_SPLITS), (20 * step, 1));
            assert_eq!(kernels[2].cut(20 * step - 3, MAX_SPLITS), (6 * step, 4));
            for (i, kernel) in kernels.iter().enumerate() {
                for (lens, table) in [(vec![20 * step - 3], false), (vec![33, 1, 7 * step], true)] {
                    let case = Case {
                        shape,
                        lens,
                        n_split: MAX_SPLITS,
                        table,
                        gated_q: table,
                    };
                    run_case(ctx, kernel, &case, 30 + i as u64);
                }
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
