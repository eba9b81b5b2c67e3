//! Prefill attention (wgsl/attn_prefill.wgsl, wgsl/attn_prefill_coop.wgsl,
//! wgsl/attn_prefill_flash.wgsl) against
//! `fak::reference::ops::attend` (f64), causal: GQA groups 1, 2, 4 and 6, head_dim 64, 256, 40
//! and 128, prompts that are not multiples of the row or key tile, a prefill continuing a cache
//! that already holds earlier tokens, a one-token prefill, and a sequence on a shuffled
//! page-table row read through a token table; f32 and f16 caches; the cooperative-matrix kernel
//! (where the adapter has one: the engine's choice there) with every workgroup tile that fits, the
//! flash form's included (plain and lean), and with O rescaled on every growth of a row's
//! max (staged, flash and lean); the lean step's bits against the flash tiles';
//! keys split across workgroups and combined, at
//! forced split counts; the row tiles taken longest first (the same bits as in order); the lean
//! step's tiles of 128, 64 and 32 rows unsplit (the same bits). Cache slots past the step's last token hold NaN, so a causal leak fails
//! the test; the split partials start as NaN too, so a combine reading one no split wrote fails.

use fak::gpu::kernels::attn_decode::AttnShape;
use fak::gpu::kernels::attn_prefill::{
    AttnPrefill, CoopForm, CoopTile, PrefillIo, RUN_KEYS, SplitKeys, TileOrder,
};
use fak::gpu::step::PageTable;

use fak::gpu::kernels::support::{Positions, View};
use fak::gpu::{GpuContext, Kernel, KernelPaths, Step};
use fak_tests::attn_prefill::{self, Case, PAGE};
use fak_tests::inputs::{step_buffer, upload_f32};
use fak_tests::kv::{Pages, poisoned_cache};
use fak_tests::wgsl_module::{
    all_coop_paths, odd_sized_workgroup_vars, parse_valid, u32_const, workgroup_bytes,
};
use fak_tests::{gpu, variants};

/// Runs `case`; its outputs must match the reference and nothing past the step be written.
fn run_case(ctx: &GpuContext, kernel: &AttnPrefill, case: &Case, seed: u64) {
    attn_prefill::run_case(ctx, kernel, case, seed).assert();
}

fn shapes() -> [AttnShape; 5] {
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
        shape(8, 2, 128),
    ]
}

/// The models' attention shapes (Qwen3-8B: GQA 4, head 128; Qwen3.5-27B: GQA 6, head 256 —
/// two subgroups a row block on 16×16 cooperative matrices).
const QWEN3_8B: AttnShape = AttnShape {
    n_head: 32,
    n_kv: 8,
    head_dim: 128,
};
const QWEN35_27B: AttnShape = AttnShape {
    n_head: 24,
    n_kv: 4,
    head_dim: 256,
};

/// The engine's kernel of every variant this adapter runs.
fn engine_kernels(ctx: &GpuContext, shape: AttnShape) -> Vec<AttnPrefill> {
    variants::<AttnPrefill>(ctx)
        .into_iter()
        .map(|paths| AttnPrefill::new(ctx, paths, shape).unwrap())
        .collect()
}

/// Every variant the engine selects on this adapter (the cooperative-matrix kernel where it has
/// one), and the cooperative-matrix kernel in every shape the adapter has, once per tile (row
/// blocks × key step; the flash form's too, and the lean step's on the largest
/// flash tile) that fits, and once more (staged, flash and lean) with the slack 0 (a rescale of O whenever a row's max grows:
/// the random inputs' maxima rarely outgrow the engine's slack after a row's first step).
fn kernels(ctx: &GpuContext, shape: AttnShape) -> Vec<AttnPrefill> {
    let mut out = engine_kernels(ctx, shape);
    let limit = ctx.device.limits().max_compute_workgroup_storage_size;
    for paths in coop_paths(ctx) {
        let coop = paths.coop_matrix.expect("a coop path");
        let flash = CoopTile::fitting_flash(coop, shape.head_dim, limit);
        for tile in CoopTile::candidates(coop, shape.head_dim) {
            // The lean step on the largest flash tile only (every row count has its bits test).
            let twin = tile.with_lean(false);
            if tile.workgroup_bytes() <= limit && (!tile.lean || Some(twin) == flash) {
                out.push(AttnPrefill::with_tile(ctx, paths, shape, Some(tile)).unwrap());
            }
        }
        let tile = CoopTile::fitting(coop, shape.head_dim, limit).expect("a tile fits");
        let always = tile.with_slack(0);
        out.push(AttnPrefill::with_tile(ctx, paths, shape, Some(always)).unwrap());
        // The flash form's rescale path (heads of at most 8 dim tiles): plain, lean.
        if let Some(flash) = flash {
            for lean in [false, true] {
                let always = flash.with_slack(0).with_lean(lean);
                out.push(AttnPrefill::with_tile(ctx, paths, shape, Some(always)).unwrap());
            }
        }
    }
    out
}

/// The cooperative-matrix variants of the prefill attention this adapter can run.
fn coop_paths(ctx: &GpuContext) -> Vec<KernelPaths> {
    let mut out = Vec::new();
    for paths in ctx.runnable_paths() {
        let variant = KernelPaths {
            int_dot: false,
            ..paths
        };
        if variant.coop_matrix.is_some()
            && AttnPrefill::variants().contains(&variant)
            && !out.contains(&variant)
        {
            out.push(variant);
        }
    }
    out
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

/// Split counts forced on the kernel: 1 (each tile writes o itself), 2 and 3, and 64 — more than
/// any case's runs of SPLIT_KEYS = 64 keys (at most 6), so most splits hold no keys and return.
/// (The f32-tile kernel splits only by its key runs of 512, more than these cases hold: it runs
/// them unsplit; `key_runs_give_the_same_bits_split_or_not` splits it.)
const FORCED_SPLITS: [u32; 4] = [1, 2, 3, 64];

/// (start, n_tokens, table): a fresh prompt whose last row tiles span two runs of keys; a
/// prefill continuing a cache (the prefix-cache case) whose tile crosses position 64, so its
/// rows before it have no keys in the last split (a partial of l = 0 that must weigh nothing); a
/// single token; 40 tokens after 300 (6 runs: real splits at every count); the token table.
const SPLIT_CASES: [(u32, u32, bool); 5] = [
    (0, 70, false),
    (45, 20, false),
    (70, 1, false),
    (300, 40, false),
    (30, 13, true),
];

#[test]
fn keys_split_across_workgroups_combine_to_the_reference() {
    let ctx = gpu();
    for (i, shape) in shapes().into_iter().enumerate() {
        for mut kernel in kernels(ctx, shape) {
            for splits in FORCED_SPLITS {
                kernel = kernel.with_split(SplitKeys::Fixed(splits));
                for (start, n_tokens, table) in SPLIT_CASES {
                    let case = Case {
                        shape,
                        start,
                        n_tokens,
                        table,
                    };
                    run_case(ctx, &kernel, &case, u64::from(start + splits) + i as u64);
                }
            }
        }
    }
}

/// Every kernel summing in key runs: the engine's where it does (the f32-tile kernel always; a
/// cooperative-matrix tile under `FAK_ATTN_RUNS=on`), and on cooperative matrices, with
/// [`CoopTile::runs`], the staged kernel's tile and every flash form on its largest tile (plain,
/// lean), and the staged tile and the lean step at the slack 0 (a rescale on every
/// growth of a row's max, so rescales inside a run and at its start are covered).
fn run_kernels(ctx: &GpuContext, shape: AttnShape) -> Vec<AttnPrefill> {
    let mut out: Vec<AttnPrefill> = engine_kernels(ctx, shape)
        .into_iter()
        .filter(AttnPrefill::sums_in_runs)
        .collect();
    let limit = ctx.device.limits().max_compute_workgroup_storage_size;
    for paths in coop_paths(ctx) {
        let coop = paths.coop_matrix.expect("a coop path");
        let staged = CoopTile::fitting(coop, shape.head_dim, limit).expect("a tile fits");
        let mut tiles = vec![staged, staged.with_slack(0)];
        if let Some(flash) = CoopTile::fitting_flash(coop, shape.head_dim, limit) {
            let lean = flash.with_lean(true);
            tiles.extend([flash, lean, lean.with_slack(0)]);
        }
        for tile in tiles {
            let tile = tile.with_runs(true);
            out.push(AttnPrefill::with_tile(ctx, paths, shape, Some(tile)).unwrap());
        }
    }
    out
}

/// Each row's keys summed in runs of 512 from key 0, folded in key order (wgsl/attn_prefill.wgsl
/// `RUN_KEYS`; the cooperative-matrix kernels' with [`CoopTile::runs`]; issue 21): unsplit, and
/// split into its runs (the host turns any forced count above 1, 2 or 64, into the longest
/// tile's runs: one run a split), the same bits, and each against the reference: a fresh
/// 600-token prompt (its last tiles over two runs, its first in one) and 40 tokens after 1100
/// through the token table (three runs, the last short). Every kernel of [`run_kernels`]: on
/// lavapipe the f32-tile kernel (no cooperative matrices there: their cases run on the device).
#[test]
fn key_runs_give_the_same_bits_split_or_not() {
    let ctx = gpu();
    let bits = |o: &[f32]| o.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
    for (i, shape) in shapes().into_iter().enumerate().take(3) {
        for mut kernel in run_kernels(ctx, shape) {
            for (start, n_tokens, table) in [(0u32, 600u32, false), (1100, 40, true)] {
                let case = Case {
                    shape,
                    start,
                    n_tokens,
                    table,
                };
                let seed = u64::from(start) + i as u64;
                let mut want: Option<Vec<u32>> = None;
                for splits in [1u32, 2, 64] {
                    kernel = kernel.with_split(SplitKeys::Fixed(splits));
                    let out = attn_prefill::run_case_in_pages(ctx, &kernel, &case, seed, 16);
                    out.assert();
                    let what = format!("{} in {splits} splits", out.what);
                    assert!(out.got.iter().all(|x| x.is_finite()), "{what}");
                    match &want {
                        None => want = Some(bits(&out.got)),
                        Some(w) => assert_eq!(&bits(&out.got), w, "{what}: not the unsplit bits"),
                    }
                }
            }
        }
    }
}

/// Where a tile's keys fit one run, a cooperative-matrix kernel computes the same bits with key
/// runs as without ([`CoopTile::runs`]: no fold, the old store), unsplit: a fresh 70-token prompt
/// on pages of 64 and 37 tokens after 100 through the token table on pages of 16, every tile of
/// [`run_kernels`] against its twin without runs. Only where the adapter has cooperative matrices
/// (none on lavapipe: then nothing runs).
#[test]
fn key_runs_keep_the_bits_of_keys_within_one_run() {
    let ctx = gpu();
    let bits = |o: &[f32]| o.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
    for (i, shape) in shapes().into_iter().enumerate() {
        for kernel in run_kernels(ctx, shape) {
            let Some(tile) = kernel.tile() else {
                continue;
            };
            let runs = kernel.with_split(SplitKeys::NEVER);
            let even =
                AttnPrefill::with_tile(ctx, runs.variant(), shape, Some(tile.with_runs(false)))
                    .unwrap()
                    .with_split(SplitKeys::NEVER);
            let cases = [(0u32, 70u32, false, 64u32), (100, 37, true, 16)];
            for (start, n_tokens, table, page) in cases {
                let case = Case {
                    shape,
                    start,
                    n_tokens,
                    table,
                };
                let seed = u64::from(start) + i as u64;
                let got = attn_prefill::run_case_in_pages(ctx, &runs, &case, seed, page);
                let want = attn_prefill::run_case_in_pages(ctx, &even, &case, seed, page);
                got.assert();
                assert_eq!(bits(&got.got), bits(&want.got), "{}", got.what);
            }
        }
    }
}

/// Pages of whole key steps (32 and 64 tokens: the flash form's lean step reads one page-table
/// entry a step, the engine's pages are 64): a fresh prompt over three pages, and a shuffled row
/// read through the token table whose step crosses pages, each unsplit and in 3 splits (one
/// split without keys at 70 tokens: its clamped page read must stay in bounds).
#[test]
fn pages_holding_whole_key_steps_are_read_a_page_at_a_time() {
    let ctx = gpu();
    for (i, shape) in shapes().into_iter().enumerate() {
        for mut kernel in kernels(ctx, shape) {
            for (page, splits) in [(32u32, 1u32), (64, 3)] {
                kernel = kernel.with_split(SplitKeys::Fixed(splits));
                for (start, n_tokens, table) in [(0u32, 70u32, false), (100, 37, true)] {
                    let case = Case {
                        shape,
                        start,
                        n_tokens,
                        table,
                    };
                    let seed = u64::from(start + page + splits) + i as u64;
                    attn_prefill::run_case_in_pages(ctx, &kernel, &case, seed, page).assert();
                }
            }
        }
    }
}

/// The lean step runs the flash tile's MMAs on the
/// same values in the same order per tile: its outputs are the flash tile's bit for bit (and
/// finite), on pages of 16 (key by key) and 64 (a page a step), unsplit and in 3 splits, every
/// flash row count, and the largest at slack 0 too (each kernel built once: the device call's
/// time). Only where the adapter has 16×16 cooperative matrices
/// (none on lavapipe: then no tile runs, as for every coop case).
#[test]
fn the_lean_step_computes_the_flash_tiles_bits() {
    let ctx = gpu();
    let limit = ctx.device.limits().max_compute_workgroup_storage_size;
    let bits = |o: &[f32]| o.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
    for (i, shape) in shapes().into_iter().enumerate() {
        for paths in coop_paths(ctx) {
            let coop = paths.coop_matrix.expect("a coop path");
            let mut tiles: Vec<CoopTile> = CoopTile::candidates(coop, shape.head_dim)
                .filter(|tile| tile.form == CoopForm::Flash && !tile.lean)
                .filter(|tile| tile.workgroup_bytes() <= limit)
                .collect();
            // The rescale path on the largest.
            tiles.extend(tiles.first().map(|tile| tile.with_slack(0)));
            for tile in tiles {
                let lean = tile.with_lean(true);
                let mut kernels = [tile, lean]
                    .map(|tile| AttnPrefill::with_tile(ctx, paths, shape, Some(tile)).unwrap());
                for (page, splits) in [(16u32, 1u32), (64, 3)] {
                    let case = Case {
                        shape,
                        start: 100,
                        n_tokens: 37,
                        table: true,
                    };
                    let seed = u64::from(page + splits) + i as u64;
                    kernels = kernels.map(|kernel| kernel.with_split(SplitKeys::Fixed(splits)));
                    let outputs = kernels.each_ref().map(|kernel| {
                        attn_prefill::run_case_in_pages(ctx, kernel, &case, seed, page).got
                    });
                    let what = format!("{tile:?} pages of {page}, {splits} splits");
                    assert!(!outputs[0].is_empty(), "{what}");
                    assert!(outputs[0].iter().all(|x| x.is_finite()), "{what}");
                    assert_eq!(bits(&outputs[1]), bits(&outputs[0]), "lean, {what}");
                }
            }
        }
    }
}

/// The engine's kernel of every variant this adapter runs (lavapipe: the f32-tile kernel), and
/// on cooperative matrices the staged kernel's tile and every flash row count's lean step (the
/// 8B's default, 128 rows, and its 64- and 32-row twins), each in the `Rows` tile order.
fn ordered_kernels(ctx: &GpuContext, shape: AttnShape) -> Vec<AttnPrefill> {
    let mut out = engine_kernels(ctx, shape);
    let limit = ctx.device.limits().max_compute_workgroup_storage_size;
    for paths in coop_paths(ctx) {
        let coop = paths.coop_matrix.expect("a coop path");
        let staged = CoopTile::fitting(coop, shape.head_dim, limit);
        let lean = CoopTile::candidates(coop, shape.head_dim)
            .filter(|tile| tile.lean)
            .filter(|tile| tile.workgroup_bytes() <= limit);
        for tile in staged.into_iter().chain(lean) {
            out.push(AttnPrefill::with_tile(ctx, paths, shape, Some(tile)).unwrap());
        }
    }
    out.into_iter()
        .map(|kernel| kernel.with_order(TileOrder::Rows))
        .collect()
}

/// Which row tile a workgroup takes ([`TileOrder`]) changes when the tile runs, not what it
/// computes: longest first, every kernel's outputs match the reference and are the default
/// `Rows` order's bit for bit (and finite), on steps of several row tiles — a fresh 70-token prompt on
/// pages of 64 (the engine's), 37 tokens after 100 through the token table on pages of 16 —
/// unsplit and in 3 splits (the combine finds a row's tile by its rows, whichever workgroup
/// computed it).
#[test]
fn the_tile_order_changes_no_bits() {
    let ctx = gpu();
    let bits = |o: &[f32]| o.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
    for (i, shape) in shapes().into_iter().enumerate() {
        for mut kernel in ordered_kernels(ctx, shape) {
            for splits in [1u32, 3] {
                kernel = kernel.with_split(SplitKeys::Fixed(splits));
                let cases = [(0u32, 70u32, false, 64u32), (100, 37, true, 16)];
                for (start, n_tokens, table, page) in cases {
                    let case = Case {
                        shape,
                        start,
                        n_tokens,
                        table,
                    };
                    let seed = u64::from(start + splits) + i as u64;
                    kernel = kernel.with_order(TileOrder::Rows);
                    let rows = attn_prefill::run_case_in_pages(ctx, &kernel, &case, seed, page);
                    kernel = kernel.with_order(TileOrder::LongFirst);
                    let long = attn_prefill::run_case_in_pages(ctx, &kernel, &case, seed, page);
                    long.assert();
                    let what = &long.what;
                    assert!(long.got.iter().all(|x| x.is_finite()), "{what}");
                    assert_eq!(bits(&long.got), bits(&rows.got), "longest first, {what}");
                }
            }
        }
    }
}

/// A row's arithmetic in the flash form's lean step does not depend on how many rows its tile
/// holds: its 16-row block sits at the same place in any tile (tiles start at multiples of 32
/// rows), its key steps are the same 32-key runs from key 0, and the steps a taller tile runs
/// past the row's position weigh nothing exactly (P = 0, α = 1). So unsplit, the 128-, 64- and
/// 32-row tiles give the same bits — what a rule taking short steps on shorter tiles would need
/// to keep a row's bits independent of the step it shares (issue 21). Only where the adapter has
/// 16×16 cooperative matrices (none on lavapipe). Splits cut each tile's own keys, so split
/// tiles of different heights sum in different runs: not compared.
#[test]
fn the_lean_row_counts_compute_the_same_bits() {
    let ctx = gpu();
    let limit = ctx.device.limits().max_compute_workgroup_storage_size;
    let bits = |o: &[f32]| o.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
    for (i, shape) in shapes().into_iter().enumerate() {
        for paths in coop_paths(ctx) {
            let coop = paths.coop_matrix.expect("a coop path");
            let kernels: Vec<AttnPrefill> = CoopTile::candidates(coop, shape.head_dim)
                .filter(|tile| tile.lean)
                .filter(|tile| tile.workgroup_bytes() <= limit)
                .map(|tile| {
                    AttnPrefill::with_tile(ctx, paths, shape, Some(tile))
                        .unwrap()
                        .with_split(SplitKeys::NEVER)
                })
                .collect();
            let cases = [(0u32, 70u32, false, 64u32), (100, 37, true, 16)];
            for (start, n_tokens, table, page) in cases {
                let case = Case {
                    shape,
                    start,
                    n_tokens,
                    table,
                };
                let seed = u64::from(start) + i as u64;
                let outputs: Vec<_> = kernels
                    .iter()
                    .map(|kernel| attn_prefill::run_case_in_pages(ctx, kernel, &case, seed, page))
                    .collect();
                for out in &outputs {
                    out.assert();
                    assert_eq!(bits(&out.got), bits(&outputs[0].got), "{}", out.what);
                }
            }
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
        scratch: None,
    };
    assert!(kernel.bind(ctx, io).is_err());
}

/// The host picks a cooperative-matrix tile by [`CoopTile::workgroup_bytes`] and grids by its
/// rows: both must be what the kernel's WGSL declares (its workgroup arrays, through naga's
/// layouter, each a whole number of 16 bytes; its `BM`), for every shape and tile, with key runs
/// and without, on adapters that cannot run it too; and every tile's module must validate (the
/// translation test builds only the first tile).
#[test]
fn the_host_coop_tile_geometry_matches_the_wgsl() {
    for (coop, paths) in all_coop_paths() {
        for shape in shapes().into_iter().chain([QWEN3_8B, QWEN35_27B]) {
            let tiles = CoopTile::candidates(coop, shape.head_dim);
            for tile in tiles.flat_map(|tile| [tile, tile.with_runs(true)]) {
                let source = AttnPrefill::source_for(paths, shape, Some(tile)).unwrap();
                // Each tile's module validates.
                let (module, info) = parse_valid(&source.module.text());
                // main's arrays (the combine entry point's are its own).
                let bytes = workgroup_bytes(&module, Some((&info, "main")));
                assert_eq!(bytes, tile.workgroup_bytes(), "{tile:?}");
                assert_eq!(u32_const(&module, "BM"), tile.rows(), "{tile:?}");
                let run_keys = if tile.runs { RUN_KEYS } else { 0 };
                assert_eq!(u32_const(&module, "RUN_KEYS"), run_keys, "{tile:?}");
                assert_eq!(odd_sized_workgroup_vars(&module), [], "{tile:?}");
            }
        }
    }
}
