//! The KV-cache write kernel (wgsl/kv_cache.wgsl) against a CPU placement of the rows by the
//! documented paged layout: a prefill and then a second prefill continuing the same sequence
//! across page boundaries (identity table), and one decode token for each of three sequences on
//! shuffled page tables, with k and v read as slices of a fused QKV row; f32 and f16 caches.
//! And the copy of one physical page (copy-on-write of a cached page).

use fak::gpu::kernels::kv_cache::{KvCache, KvDtype, KvLayout, KvWrite, PageTable};
use fak::gpu::kernels::support::{Positions, TokenSlot, View};
use fak::gpu::{GpuContext, Step, storage_buffer};
use fak_tests::inputs::{step_buffer, uniform_f32, upload_f32, upload_u32};
use fak_tests::kv::{Pages, fill, poisoned_cache, read_cache, stored};
use fak_tests::{Tolerance, assert_close, gpu, rng, variants};

/// The f32 cache holds the rows bit for bit. The f16 cache holds them rounded to f16: Vulkan
/// leaves the rounding mode of an f32 → f16 conversion to the driver, so one f16 ulp (2^-10 of
/// the value, 2^-24 absolute near zero) is allowed around the round-to-nearest-even value.
fn tolerance(dtype: KvDtype) -> Tolerance {
    match dtype {
        KvDtype::F32 => Tolerance::EXACT,
        KvDtype::F16 => Tolerance {
            rel: 1.0 / 1024.0,
            abs: 6e-8,
        },
    }
}

/// A fused QKV projection output for `n_tokens` tokens: per token n_q query values, then the
/// n_kv·hd k values, then the v values.
struct Qkv {
    data: Vec<f32>,
    n_q: u32,
    kv_dim: u32,
}

impl Qkv {
    fn random(seed: u64, n_tokens: u32, n_q: u32, kv_dim: u32) -> Qkv {
        let width = n_q + 2 * kv_dim;
        Qkv {
            data: uniform_f32(&mut rng(seed), (n_tokens * width) as usize, -4.0, 4.0),
            n_q,
            kv_dim,
        }
    }

    fn width(&self) -> u32 {
        self.n_q + 2 * self.kv_dim
    }

    fn k(&self, t: u32, i: u32) -> f32 {
        self.data[(t * self.width() + self.n_q + i) as usize]
    }

    fn v(&self, t: u32, i: u32) -> f32 {
        self.data[(t * self.width() + self.n_q + self.kv_dim + i) as usize]
    }
}

/// Writes `qkv`'s tokens into a poisoned cache (or the one given), the i-th token at
/// `(rows[i], positions[i])`, and checks every element: written ones against the rows, the rest
/// still NaN.
struct Write<'a> {
    pages: &'a Pages,
    n_kv: u32,
    hd: u32,
    /// Per token: (page-table row, position).
    placement: Vec<(usize, u32)>,
    table: bool,
}

fn check_writes(ctx: &GpuContext, kernel: &KvWrite, steps: &[(Write<'_>, Qkv)]) {
    let dtype = kernel.dtype();
    let first = &steps[0].0;
    let layout = first.pages.layout(first.n_kv, first.hd, dtype);
    let cache = poisoned_cache(ctx, layout);
    let table = PageTable::from_rows(ctx, first.pages.pages_per_row, &first.pages.rows).unwrap();
    let mut want_k = vec![f32::NAN; layout.elements() as usize];
    let mut want_v = want_k.clone();
    for (write, qkv) in steps {
        let n_tokens = write.placement.len() as u32;
        let (n_kv, hd) = (write.n_kv, write.hd);
        let qkv_buf = upload_f32(ctx, "qkv", &qkv.data);
        let k = View::heads(&qkv_buf, n_kv, hd)
            .at(qkv.n_q)
            .strided(qkv.width(), hd);
        let v = k.at(qkv.n_q + qkv.kv_dim);
        let slots: Vec<TokenSlot> = write
            .placement
            .iter()
            .map(|&(row, pos)| TokenSlot {
                pos,
                page_row: row as u32,
            })
            .collect();
        let slot_buf = upload_u32(ctx, "slots", bytemuck::cast_slice(&slots));
        let positions = if write.table {
            Positions::Table(&slot_buf)
        } else {
            Positions::Step
        };
        let step = step_buffer(ctx, Step::new(write.placement[0].1, n_tokens, 0));
        let binding = kernel
            .bind(ctx, k, v, &cache, &table, positions, &step, n_tokens)
            .unwrap();
        ctx.run_pass("kv write", |pass| kernel.encode(pass, &binding, n_tokens))
            .unwrap();
        for (t, &(row, pos)) in write.placement.iter().enumerate() {
            for g in 0..n_kv {
                let at = write.pages.index(&layout, row, pos, g);
                for d in 0..hd {
                    want_k[at + d as usize] = stored(qkv.k(t as u32, g * hd + d), dtype);
                    want_v[at + d as usize] = stored(qkv.v(t as u32, g * hd + d), dtype);
                }
            }
        }
    }
    let what = format!("{} n_kv {} hd {}", kernel.variant(), first.n_kv, first.hd);
    for (name, buffer, want) in [("k", &cache.k, &want_k), ("v", &cache.v, &want_v)] {
        let got = read_cache(ctx, buffer, &layout);
        let written: Vec<usize> = (0..want.len()).filter(|&i| !want[i].is_nan()).collect();
        let pick = |v: &[f32]| written.iter().map(|&i| v[i]).collect::<Vec<f32>>();
        assert_close(
            &format!("{what} {name} cache"),
            &pick(&got),
            &pick(want),
            tolerance(kernel.dtype()),
        );
        let stray = (0..want.len())
            .filter(|&i| want[i].is_nan() && !got[i].is_nan())
            .count();
        assert_eq!(
            stray, 0,
            "{what}: {stray} elements of the {name} cache written that no token owns"
        );
    }
}

#[test]
fn a_prefill_and_its_continuation_fill_consecutive_positions_across_pages() {
    let ctx = gpu();
    for paths in variants::<KvWrite>(ctx) {
        let kernel = KvWrite::new(ctx, paths).unwrap();
        for (n_kv, hd) in [(2u32, 64u32), (1, 256), (3, 40)] {
            let pages = Pages::identity(16, 80);
            // 37 tokens from position 0, then 20 more from 37: pages 0..3, partly filled.
            let step = |start: u32, n: u32| Write {
                pages: &pages,
                n_kv,
                hd,
                placement: (start..start + n).map(|p| (0, p)).collect(),
                table: false,
            };
            let steps = [
                (step(0, 37), Qkv::random(1, 37, 3 * hd, n_kv * hd)),
                (step(37, 20), Qkv::random(2, 20, 3 * hd, n_kv * hd)),
            ];
            check_writes(ctx, &kernel, &steps);
        }
    }
}

#[test]
fn decode_tokens_of_three_sequences_land_in_their_own_shuffled_pages() {
    let ctx = gpu();
    let mut rng = rng(8);
    for paths in variants::<KvWrite>(ctx) {
        let kernel = KvWrite::new(ctx, paths).unwrap();
        let lens = [5u32, 70, 33];
        let pages = Pages::shuffled(&mut rng, 16, &lens, 3);
        let (n_kv, hd) = (2, 64);
        // Each sequence's decode token goes to its last position.
        let write = Write {
            pages: &pages,
            n_kv,
            hd,
            placement: lens
                .iter()
                .enumerate()
                .map(|(row, &len)| (row, len - 1))
                .collect(),
            table: true,
        };
        check_writes(
            ctx,
            &kernel,
            &[(write, Qkv::random(3, 3, 2 * hd, n_kv * hd))],
        );
    }
}

#[test]
fn a_cache_of_the_wrong_type_or_table_width_is_refused() {
    let ctx = gpu();
    let kernel = KvWrite::new(ctx, ctx.paths()).unwrap();
    let pages = Pages::identity(16, 32);
    let other = match kernel.dtype() {
        KvDtype::F32 => KvDtype::F16,
        KvDtype::F16 => KvDtype::F32,
    };
    let qkv = upload_f32(ctx, "qkv", &[0.0; 256]);
    let k = View::heads(&qkv, 1, 64);
    let v = k.at(64);
    let step = step_buffer(ctx, Step::new(0, 1, 0));
    let table = PageTable::from_rows(ctx, pages.pages_per_row, &pages.rows).unwrap();
    let right = poisoned_cache(ctx, pages.layout(1, 64, kernel.dtype()));
    assert!(
        kernel
            .bind(ctx, k, v, &right, &table, Positions::Step, &step, 1)
            .is_ok()
    );
    let wrong = poisoned_cache(ctx, pages.layout(1, 64, other));
    assert!(
        kernel
            .bind(ctx, k, v, &wrong, &table, Positions::Step, &step, 1)
            .is_err()
    );
    let narrow = PageTable::from_rows(ctx, 1, &[vec![0]]).unwrap();
    assert!(
        kernel
            .bind(ctx, k, v, &right, &narrow, Positions::Step, &step, 1)
            .is_err()
    );
    let slots = upload_u32(ctx, "slots", &[0, 0]);
    // A table of one slot cannot serve two tokens.
    assert!(
        kernel
            .bind(
                ctx,
                k,
                v,
                &right,
                &table,
                Positions::Table(&slots),
                &step,
                2
            )
            .is_err()
    );
}

#[test]
fn a_token_past_its_row_or_on_a_page_past_the_cache_is_dropped() {
    let ctx = gpu();
    for paths in variants::<KvWrite>(ctx) {
        let kernel = KvWrite::new(ctx, paths).unwrap();
        let (n_kv, hd) = (1u32, 64u32);
        // Two rows of two pages over a cache of 3: row 1's second page (7) does not exist.
        let pages = Pages {
            page_size: 16,
            pages_per_row: 2,
            n_pages: 3,
            rows: vec![vec![2, 0], vec![1, 7]],
        };
        let layout = pages.layout(n_kv, hd, kernel.dtype());
        let cache = poisoned_cache(ctx, layout);
        let table = PageTable::from_rows(ctx, pages.pages_per_row, &pages.rows).unwrap();
        let qkv = Qkv::random(4, 3, 0, n_kv * hd);
        let qkv_buf = upload_f32(ctx, "qkv", &qkv.data);
        let k = View::heads(&qkv_buf, n_kv, hd).strided(qkv.width(), hd);
        let v = k.at(qkv.kv_dim);
        // Position 32 is past row 0's two pages; position 20 of row 1 is on page 7.
        let slots = [
            TokenSlot {
                pos: 32,
                page_row: 0,
            },
            TokenSlot {
                pos: 20,
                page_row: 1,
            },
            TokenSlot {
                pos: 3,
                page_row: 0,
            },
        ];
        let slot_buf = upload_u32(ctx, "slots", bytemuck::cast_slice(&slots));
        let step = step_buffer(ctx, Step::new(0, 3, 0));
        let binding = kernel
            .bind(
                ctx,
                k,
                v,
                &cache,
                &table,
                Positions::Table(&slot_buf),
                &step,
                3,
            )
            .unwrap();
        ctx.run_pass("kv write", |pass| kernel.encode(pass, &binding, 3))
            .unwrap();
        let got = read_cache(ctx, &cache.k, &layout);
        // Only token 2 (row 0, position 3: page 2, slot 3) lands.
        let at = pages.index(&layout, 0, 3, 0);
        let written: Vec<usize> = (0..got.len()).filter(|&i| !got[i].is_nan()).collect();
        assert_eq!(
            written,
            (at..at + hd as usize).collect::<Vec<_>>(),
            "{}",
            kernel.variant()
        );
    }
}

/// Copying physical page 1 onto page 3 (through a bounce buffer: wgpu never copies within one
/// buffer) moves exactly that page of K and of V, bit for bit, in both element types; every
/// other element keeps its value. A copy onto itself, past the cache or through a bounce buffer
/// smaller than a page is refused.
#[test]
fn copying_a_page_moves_exactly_that_page_of_k_and_v() {
    let ctx = gpu();
    for dtype in [KvDtype::F32, KvDtype::F16] {
        let layout = KvLayout {
            n_kv: 2,
            head_dim: 8,
            page_size: 4,
            n_pages: 5,
            pages_per_row: 5,
            dtype,
        };
        let cache = KvCache::new(ctx, layout).unwrap();
        let mut r = rng(9);
        let mut random = || -> Vec<f32> {
            uniform_f32(&mut r, layout.elements() as usize, -1.0, 1.0)
                .into_iter()
                .map(|x| stored(x, dtype))
                .collect()
        };
        let (k, v) = (random(), random());
        fill(ctx, &cache.k, &k, dtype);
        fill(ctx, &cache.v, &v, dtype);
        let bounce = storage_buffer(ctx, "bounce", cache.page_bytes()).unwrap();
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        cache.copy_page(&mut encoder, 1, 3, &bounce).unwrap();
        ctx.queue.submit([encoder.finish()]);
        let page = (layout.n_kv * layout.page_size * layout.head_dim) as usize;
        for (name, before, buffer) in [("k", &k, &cache.k), ("v", &v, &cache.v)] {
            let mut want = before.clone();
            want.copy_within(page..2 * page, 3 * page);
            assert_eq!(read_cache(ctx, buffer, &layout), want, "{dtype:?} {name}");
        }
        let small = storage_buffer(ctx, "small bounce", cache.page_bytes() - 4).unwrap();
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        for (src, dst, through) in [(2, 2, &bounce), (0, 5, &bounce), (0, 1, &small)] {
            let refused = cache.copy_page(&mut encoder, src, dst, through);
            assert!(refused.is_err(), "{dtype:?}: page {src} → {dst}");
        }
    }
}
