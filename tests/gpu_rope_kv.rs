//! The fused per-head norm + RoPE + KV write (wgsl/rope_kv.wgsl) against the CPU reference
//! (`fak::reference::ops::{rms_norm, rope}`, f64) and a CPU placement of the cache by the
//! documented paged layout: q, k, v as slices of one fused QKV row and as separate buffers with
//! qwen35's [q | gate] heads, norms on and off, NeoX and adjacent pairs, partial rotary,
//! llama3-style frequency divisors; a prefill across page boundaries and its continuation on the
//! same cache, batched decode tokens on shuffled page tables (one past its row and one on a page
//! past the cache, which must write no k or v), positions up to 2^20 (where an angle computed in
//! f32 would be off by 0.03 rad) in any order; every variant (subgroup or not, f32 or f16 cache);
//! bad tables and bindings refused.

use fak::gpu::Step;
use fak::gpu::kernels::kv_cache::KvDtype;
use fak::gpu::kernels::rope::RopePairing;
use fak::gpu::kernels::rope::RopeTable;
use fak::gpu::kernels::rope_kv::{RopeKv, RopeKvIo};
use fak::gpu::kernels::support::{Positions, View};
use fak::gpu::step::PageTable;

use fak_tests::inputs::{step_buffer, upload_f32, upload_u32};
use fak_tests::kv::{Pages, poisoned_cache};
use fak_tests::rope_kv::{self, Case, StepTokens, batched_decode, prefill_across_pages};
use fak_tests::{gpu, rng, variants};
use rand::Rng;
use rand::seq::SliceRandom;

/// The model shapes, and NeoX with divisors on a partial rotary (no norms, GQA 1).
fn cases() -> [Case; 4] {
    [
        Case::QWEN3,
        Case::QWEN35,
        Case::LLAMA,
        Case {
            n_head: 1,
            n_kv: 1,
            head_dim: 40,
            n_rot: 24,
            pairing: RopePairing::Neox,
            base: 1e4,
            factors: true,
            norms: false,
            fused_qkv: true,
        },
    ]
}

/// Every case on every variant the adapter has, on the pages and steps `layout` gives for case
/// `i`, seeded `seed + i`: all three outputs asserted.
fn assert_every_variant_and_case(
    seed: u64,
    mut layout: impl FnMut(usize) -> (Pages, Vec<StepTokens>),
) {
    let ctx = gpu();
    for paths in variants::<RopeKv>(ctx) {
        let kernel = RopeKv::new(ctx, paths).unwrap();
        for (i, case) in cases().iter().enumerate() {
            let (pages, steps) = layout(i);
            for output in rope_kv::run(ctx, &kernel, case, &pages, &steps, seed + i as u64) {
                output.assert();
            }
        }
    }
}

#[test]
fn a_prefill_across_pages_matches_norm_then_rope_then_cache_write() {
    assert_every_variant_and_case(0x40be_0000, |_| prefill_across_pages());
}

#[test]
fn a_prefill_continued_by_a_second_step_fills_consecutive_positions_across_pages() {
    // 11 tokens from position 0, then 16 more from 11 (both from the Step): pages 0..3 of 8, the
    // last partly filled, the fifth untouched; the second step must leave the first's slots as
    // they were.
    let step = |from: u32, n: u32| StepTokens {
        tokens: (from..from + n).map(|p| (p, 0)).collect(),
        table: false,
    };
    assert_every_variant_and_case(0x40be_0100, |_| {
        (Pages::identity(8, 40), vec![step(0, 11), step(11, 16)])
    });
}

#[test]
fn batched_decode_tokens_land_in_their_own_rows_and_tokens_without_a_page_write_no_kv() {
    assert_every_variant_and_case(0x40be_2000, |i| batched_decode(0x40be_1000 + i as u64));
}

#[test]
fn positions_from_a_token_table_reach_a_million_and_match_the_reference() {
    let mut r = rng(99);
    assert_every_variant_and_case(50, |_| {
        // Batched decode: each token its own sequence, positions in any order, 2^12 and 2^20
        // (where the angle's split of p into 12-bit halves turns over) among them.
        let mut positions: Vec<u32> = vec![0, 1, 4095, 4096, 65_537, 262_143, 1 << 20, 999_999];
        positions.extend((0..5).map(|_| r.random_range(0..(1 << 20))));
        positions.shuffle(&mut r);
        // Pages of 128; every logical page of row t is physical page t, so each token has a page
        // of its own however far its position.
        let n = positions.len() as u32;
        let per_row = (1 << 20) / 128 + 1;
        let pages = Pages {
            page_size: 128,
            pages_per_row: per_row,
            n_pages: n,
            rows: (0..n).map(|t| vec![t; per_row as usize]).collect(),
        };
        let steps = vec![StepTokens {
            tokens: positions.iter().zip(0..).map(|(&p, t)| (p, t)).collect(),
            table: true,
        }];
        (pages, steps)
    });
}

#[test]
fn bad_tables_are_refused() {
    let ctx = gpu();
    assert!(RopeTable::new(ctx, 64, 1e4, None).is_ok());
    assert!(RopeTable::new(ctx, 7, 1e4, None).is_err());
    assert!(RopeTable::new(ctx, 0, 1e4, None).is_err());
    assert!(RopeTable::new(ctx, 8, 1.0, None).is_err());
    assert!(RopeTable::new(ctx, 8, 1e4, Some(&[1.0; 3])).is_err());
    assert!(RopeTable::new(ctx, 8, 1e4, Some(&[1.0, 0.0, 1.0, 1.0])).is_err());
}

#[test]
fn mismatched_caches_tables_and_shapes_are_refused() {
    let ctx = gpu();
    let kernel = RopeKv::new(ctx, ctx.paths()).unwrap();
    let other = match kernel.dtype() {
        KvDtype::F32 => KvDtype::F16,
        KvDtype::F16 => KvDtype::F32,
    };
    let pages = Pages::identity(16, 32);
    let right = poisoned_cache(ctx, pages.layout(1, 64, kernel.dtype()));
    let wrong_type = poisoned_cache(ctx, pages.layout(1, 64, other));
    let table = PageTable::from_rows(ctx, pages.pages_per_row, &pages.rows).unwrap();
    let narrow = PageTable::from_rows(ctx, 1, &[vec![0]]).unwrap();
    let rope_table = RopeTable::new(ctx, 64, 1e4, None).unwrap();
    let wide_rope = RopeTable::new(ctx, 128, 1e4, None).unwrap();
    // Two tokens' rows of 2 q heads, then k and v of one kv head, 64 each.
    let qkv = upload_f32(ctx, "qkv", &[0.0; 512]);
    let q_out = upload_f32(ctx, "q out", &[0.0; 256]);
    let slots = upload_u32(ctx, "slots", &[0, 0]);
    let step = step_buffer(ctx, Step::new(0, 1, 0));
    let io = |cache, pages, table, positions, max_tokens, q_out| RopeKvIo {
        q: View::heads(&qkv, 2, 64).strided(256, 64),
        k: View::heads(&qkv, 1, 64).strided(256, 64).at(128),
        v: View::heads(&qkv, 1, 64).strided(256, 64).at(192),
        q_out,
        n_head: 2,
        norms: None,
        pairing: RopePairing::Neox,
        table,
        cache,
        pages,
        positions,
        step: &step,
        max_tokens,
    };
    let out = View::heads(&q_out, 2, 64);
    let bind = |io: RopeKvIo<'_>| kernel.bind(ctx, &io).is_ok();
    assert!(bind(io(
        &right,
        &table,
        &rope_table,
        Positions::Step,
        1,
        out
    )));
    // A cache of the other type, a table with rows narrower than the layout's.
    assert!(!bind(io(
        &wrong_type,
        &table,
        &rope_table,
        Positions::Step,
        1,
        out
    )));
    assert!(!bind(io(
        &right,
        &narrow,
        &rope_table,
        Positions::Step,
        1,
        out
    )));
    // n_rot 128 > head_dim 64.
    assert!(!bind(io(
        &right,
        &table,
        &wide_rope,
        Positions::Step,
        1,
        out
    )));
    // Two tokens bind from the Step, but a token table of one slot cannot serve them.
    assert!(bind(io(
        &right,
        &table,
        &rope_table,
        Positions::Step,
        2,
        out
    )));
    assert!(!bind(io(
        &right,
        &table,
        &rope_table,
        Positions::Table(&slots),
        2,
        out
    )));
    // q_out in the buffer q is read from.
    let into_q = View::heads(&qkv, 2, 64);
    assert!(!bind(io(
        &right,
        &table,
        &rope_table,
        Positions::Step,
        1,
        into_q
    )));
}
