//! The KV cache's page copy (copy-on-write of a cached page, `KvCache::copy_page`) against the
//! same copy on the CPU, on f32 and f16 caches. (The rows themselves are written by `rope_kv`:
//! tests/gpu_rope_kv.rs.)

use fak::gpu::kernels::kv_cache::{KvCache, KvDtype, KvLayout};
use fak::gpu::storage_buffer;
use fak_tests::inputs::uniform_f32;
use fak_tests::kv::{fill, read_cache, stored};
use fak_tests::{gpu, rng};

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
