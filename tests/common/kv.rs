//! A CPU picture of the paged KV cache (engine `gpu::kernels::kv_cache`), written from the layout
//! the kernels document — `[page][kv head][slot][head_dim]`, pages found through page-table rows
//! — so the tests place and find tokens without the engine's own address arithmetic.

use fak::gpu::kernels::kv_cache::{KvCache, KvDtype, KvLayout};
use fak::gpu::{GpuContext, read_back, write};
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

/// Sequences' page-table rows over a shared pool of physical pages.
#[derive(Clone, Debug)]
pub struct Pages {
    pub page_size: u32,
    pub pages_per_row: u32,
    pub n_pages: u32,
    pub rows: Vec<Vec<u32>>,
}

impl Pages {
    /// Rows for sequences of `lens` positions, their pages drawn without repetition from a
    /// shuffled pool with `spare` pages more than they need, so no sequence's pages are in order.
    pub fn shuffled(rng: &mut ChaCha8Rng, page_size: u32, lens: &[u32], spare: u32) -> Pages {
        let need: Vec<u32> = lens.iter().map(|&l| l.div_ceil(page_size).max(1)).collect();
        let pages_per_row = *need.iter().max().expect("at least one sequence");
        let n_pages = need.iter().sum::<u32>() + spare;
        let mut pool: Vec<u32> = (0..n_pages).collect();
        pool.shuffle(rng);
        let mut rows = Vec::new();
        for &n in &need {
            rows.push(pool.drain(..n as usize).collect());
        }
        Pages {
            page_size,
            pages_per_row,
            n_pages,
            rows,
        }
    }

    /// One sequence of `len` positions on the identity table.
    pub fn identity(page_size: u32, len: u32) -> Pages {
        let n = len.div_ceil(page_size).max(1);
        Pages {
            page_size,
            pages_per_row: n,
            n_pages: n,
            rows: vec![(0..n).collect()],
        }
    }

    pub fn layout(&self, n_kv: u32, head_dim: u32, dtype: KvDtype) -> KvLayout {
        KvLayout {
            n_kv,
            head_dim,
            page_size: self.page_size,
            n_pages: self.n_pages,
            pages_per_row: self.pages_per_row,
            dtype,
        }
    }

    /// The element index of (row, position, kv head g, d = 0).
    pub fn index(&self, layout: &KvLayout, row: usize, pos: u32, g: u32) -> usize {
        let page = self.rows[row][(pos / self.page_size) as usize] as usize;
        let slot = (pos % self.page_size) as usize;
        ((page * layout.n_kv as usize + g as usize) * self.page_size as usize + slot)
            * layout.head_dim as usize
    }
}

/// `x` as the cache stores it (rounded to f16 for an f16 cache).
pub fn stored(x: f32, dtype: KvDtype) -> f32 {
    match dtype {
        KvDtype::F32 => x,
        KvDtype::F16 => half::f16::from_f32(x).to_f32(),
    }
}

fn encode(values: &[f32], dtype: KvDtype) -> Vec<u8> {
    match dtype {
        KvDtype::F32 => bytemuck::cast_slice(values).to_vec(),
        KvDtype::F16 => values
            .iter()
            .flat_map(|&x| half::f16::from_f32(x).to_bits().to_le_bytes())
            .collect(),
    }
}

/// Writes `values` (one per cache element) into a cache buffer.
pub fn fill(ctx: &GpuContext, buffer: &wgpu::Buffer, values: &[f32], dtype: KvDtype) {
    write(ctx, buffer, 0, &encode(values, dtype)).expect("filling a cache");
}

/// A cache of `layout` with every element NaN.
pub fn poisoned_cache(ctx: &GpuContext, layout: KvLayout) -> KvCache {
    let cache = KvCache::new(ctx, layout).expect("allocating a cache");
    let nan = vec![f32::NAN; layout.elements() as usize];
    fill(ctx, &cache.k, &nan, layout.dtype);
    fill(ctx, &cache.v, &nan, layout.dtype);
    cache
}

/// A cache buffer's elements as f32.
pub fn read_cache(ctx: &GpuContext, buffer: &wgpu::Buffer, layout: &KvLayout) -> Vec<f32> {
    let n = layout.elements() as usize;
    let bytes = (n as u64 * layout.dtype.bytes()).div_ceil(4) * 4;
    let raw = read_back(ctx, buffer, 0..bytes).expect("reading a cache back");
    match layout.dtype {
        KvDtype::F32 => bytemuck::pod_collect_to_vec(&raw[..4 * n]),
        KvDtype::F16 => raw[..2 * n]
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
    }
}
