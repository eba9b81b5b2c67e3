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

    /// The physical page holding position `pos` of row `row` (entries a row leaves out are page
    /// 0, as `PageTable::from_rows` fills them), or None where the kernels write nothing: a
    /// position past the row, or a page past the cache.
    pub fn page(&self, row: usize, pos: u32) -> Option<u32> {
        let logical = pos / self.page_size;
        if logical >= self.pages_per_row {
            return None;
        }
        let page = self.rows[row].get(logical as usize).copied().unwrap_or(0);
        (page < self.n_pages).then_some(page)
    }

    /// The element index of (row, position, kv head g, d = 0); the position must have a page.
    pub fn index(&self, layout: &KvLayout, row: usize, pos: u32, g: u32) -> usize {
        let page = self.page(row, pos).expect("a position with a page") as usize;
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

/// Random keys and values of some sequences, as the cache stores them (f16-rounded for f16):
/// per sequence, per position, n_kv·head_dim values in [-1, 1].
pub struct Sequences {
    pub lens: Vec<u32>,
    pub keys: Vec<Vec<Vec<f32>>>,
    pub values: Vec<Vec<Vec<f32>>>,
}

impl Sequences {
    pub fn random(rng: &mut ChaCha8Rng, lens: &[u32], kv_dim: u32, dtype: KvDtype) -> Sequences {
        let mut rows = |len| -> Vec<Vec<f32>> {
            (0..len)
                .map(|_| {
                    super::inputs::uniform_f32(rng, kv_dim as usize, -1.0, 1.0)
                        .into_iter()
                        .map(|x| stored(x, dtype))
                        .collect()
                })
                .collect()
        };
        let keys = lens.iter().map(|&l| rows(l)).collect();
        let values = lens.iter().map(|&l| rows(l)).collect();
        Sequences {
            lens: lens.to_vec(),
            keys,
            values,
        }
    }

    /// A cache of `layout` holding sequence i at page-table row i of `pages`; every slot no
    /// sequence owns is NaN.
    pub fn cache(&self, ctx: &GpuContext, pages: &Pages, layout: KvLayout) -> KvCache {
        let cache = KvCache::new(ctx, layout).expect("allocating a cache");
        let hd = layout.head_dim as usize;
        let mut k = vec![f32::NAN; layout.elements() as usize];
        let mut v = k.clone();
        for (row, &len) in self.lens.iter().enumerate() {
            for pos in 0..len {
                for g in 0..layout.n_kv {
                    let at = pages.index(&layout, row, pos, g);
                    let span = g as usize * hd..(g as usize + 1) * hd;
                    k[at..at + hd].copy_from_slice(&self.keys[row][pos as usize][span.clone()]);
                    v[at..at + hd].copy_from_slice(&self.values[row][pos as usize][span]);
                }
            }
        }
        fill(ctx, &cache.k, &k, layout.dtype);
        fill(ctx, &cache.v, &v, layout.dtype);
        cache
    }

    /// The reference attention (`fak::reference::ops::attend`, f64) of query head `h` (`q`,
    /// head_dim values) of sequence `seq` against its positions 0..=pos, GQA group n_head/n_kv.
    pub fn attend(
        &self,
        seq: usize,
        pos: u32,
        q: &[f32],
        h: u32,
        n_head: u32,
        n_kv: u32,
    ) -> Vec<f32> {
        let hd = q.len();
        let g = (h / (n_head / n_kv)) as usize;
        let span = g * hd..(g + 1) * hd;
        let upto = pos as usize + 1;
        let keys: Vec<&[f32]> = self.keys[seq][..upto]
            .iter()
            .map(|k| &k[span.clone()])
            .collect();
        let values: Vec<&[f32]> = self.values[seq][..upto]
            .iter()
            .map(|v| &v[span.clone()])
            .collect();
        let scale = (1.0 / (hd as f64).sqrt()) as f32;
        fak::reference::ops::attend(q, &keys, &values, scale)
    }
}
