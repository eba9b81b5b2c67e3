//! `matmul-bench --attn`: GPU time of the prefill attention (engine gpu::kernels::attn_prefill),
//! every variant the adapter runs — the f32-tile kernel on its f32 and f16 caches and the
//! cooperative-matrix kernel once per workgroup tile that fits — at the prompt chunks the engine
//! runs: Qwen3-8B (32 query heads, 8 kv heads of 128) 512-token chunks after 0, 512, 1024, 1536
//! and 7680 cached tokens (the four chunks of a 2048-token prompt, and the last of an 8192-token
//! one), and Qwen3.5-27B's attention layers (24 query heads, 4 kv heads of 256) 128 tokens after
//! 2048 (a prefix-cache hit). Each variant runs unsplit (`split=1`), with the engine's key-split
//! rule (`split=auto:N`, when it splits) and with 4, 8 and 16 splits forced (`split=N`), each
//! count once. FLOPs count the causal part only: 4 · head_dim per (query row, key) pair a row
//! attends to. Each output is compared with the unsplit f32-tile kernel's on the same f16 cache
//! (`max_diff_vs_f16`), a check at full size of what the GPU tests check on tiny shapes.

use crate::median_seconds;
use fak::gpu::kernels::attn_decode::AttnShape;
use fak::gpu::kernels::attn_prefill::{
    AttnPrefill, CoopTile, PrefillBinding, PrefillIo, SplitKeys,
};
use fak::gpu::kernels::kv_cache::{KvCache, KvDtype, KvLayout};
use fak::gpu::kernels::support::{Positions, View};
use fak::gpu::step::PageTable;
use fak::gpu::{GpuContext, Kernel, KernelPaths, Step, StepBuffer, storage_buffer, upload};

/// (case, shape, chunk tokens, cached tokens before the chunk).
type Case = (&'static str, AttnShape, u32, u32);

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
const CASES: [Case; 6] = [
    ("qwen3-8b", QWEN3_8B, 512, 0),
    ("qwen3-8b", QWEN3_8B, 512, 512),
    ("qwen3-8b", QWEN3_8B, 512, 1024),
    ("qwen3-8b", QWEN3_8B, 512, 1536),
    ("qwen3-8b", QWEN3_8B, 512, 7680),
    ("qwen35-27b", QWEN35_27B, 128, 2048),
];
const QUICK_CASES: [Case; 2] = [
    (
        "small",
        AttnShape {
            n_head: 4,
            n_kv: 2,
            head_dim: 64,
        },
        20,
        30,
    ),
    (
        "wide",
        AttnShape {
            n_head: 6,
            n_kv: 1,
            head_dim: 256,
        },
        9,
        5,
    ),
];
const PAGE: u32 = 64;
const DISPATCHES: u32 = 4;
/// The key-split rules each variant runs with, after the unsplit one.
const SPLITS: [SplitKeys; 4] = [
    SplitKeys::DEFAULT,
    SplitKeys::Fixed(4),
    SplitKeys::Fixed(8),
    SplitKeys::Fixed(16),
];

pub fn run(ctx: &GpuContext, quick: bool) {
    println!(
        "variant\ttile_rows_x_keys\tcase\tn_head\tn_kv\thead_dim\ttokens\tcached\tus_per_dispatch\ttflops\tmax_diff_vs_f16"
    );
    let cases: &[Case] = if quick { &QUICK_CASES } else { &CASES };
    for &(name, shape, n_tokens, cached) in cases {
        let mut f16_output: Option<Vec<f32>> = None;
        for mut kernel in kernels(ctx, shape) {
            let chunk = Chunk::new(ctx, &kernel, shape, n_tokens, cached);
            let mut counts = Vec::new();
            // ATTN_SPLITS=auto: the unsplit and the engine's rule only (a shorter run).
            let forced = std::env::var("ATTN_SPLITS")
                .map_or(SPLITS.len(), |v| if v == "auto" { 1 } else { SPLITS.len() });
            for split in [SplitKeys::NEVER]
                .into_iter()
                .chain(SPLITS.into_iter().take(forced))
            {
                kernel = kernel.with_split(split);
                let Some(bound) = chunk.bind(ctx, &kernel, &mut counts) else {
                    continue;
                };
                let (seconds, output) = chunk.time(ctx, &kernel, &bound);
                if kernel.variant().f16 && kernel.tile().is_none() && bound.splits == 1 {
                    f16_output = Some(output.clone());
                }
                let case = (name, shape, n_tokens, cached);
                print_row(&kernel, case, bound.splits, seconds, &output, &f16_output);
            }
        }
    }
}

/// One TSV row: `splits` is the count the kernel's rule gave the chunk.
fn print_row(
    kernel: &AttnPrefill,
    case: Case,
    splits: u32,
    seconds: f64,
    output: &[f32],
    f16_output: &Option<Vec<f32>>,
) {
    let (name, shape, n_tokens, cached) = case;
    // The f32-cache fallback comes first and reads other values: no comparison.
    let diff = f16_output.as_ref().map_or("-".to_string(), |want| {
        let max = want
            .iter()
            .zip(output)
            .map(|(a, b)| (a - b).abs())
            .fold(
                0.0,
                |m: f32, d| if d.is_nan() { f32::NAN } else { m.max(d) },
            );
        format!("{max:.2e}")
    });
    let pairs: u64 = (0..u64::from(n_tokens))
        .map(|t| u64::from(cached) + t + 1)
        .sum::<u64>()
        * u64::from(shape.n_head);
    let flops = 4.0 * pairs as f64 * f64::from(shape.head_dim);
    let split = match kernel.split() {
        SplitKeys::Fixed(_) => format!("{splits}"),
        SplitKeys::Fill { .. } => format!("auto:{splits}"),
    };
    println!(
        "{} split={split}\t{}\t{name}\t{}\t{}\t{}\t{n_tokens}\t{cached}\t{:.1}\t{:.2}\t{diff}",
        kernel.variant(),
        kernel
            .tile()
            .map_or(kernel.rows_per_tile().to_string(), CoopTile::label),
        shape.n_head,
        shape.n_kv,
        shape.head_dim,
        seconds * 1e6,
        flops / seconds / 1e12
    );
}

/// Every variant the engine selects on this adapter (the cooperative-matrix kernel where it has
/// one), then the cooperative-matrix kernel in each shape the adapter has, once per tile (row
/// blocks × key step, the flash form's too) that fits and `ATTN_TILES` names; the f32-tile
/// kernels first (the f16 one's output is the others' check).
fn kernels(ctx: &GpuContext, shape: AttnShape) -> Vec<AttnPrefill> {
    let limit = ctx.device.limits().max_compute_workgroup_storage_size;
    let mut selected = Vec::new();
    let mut coop = Vec::new();
    for paths in ctx.runnable_paths() {
        let paths = KernelPaths {
            int_dot: false,
            ..paths
        };
        let variant = AttnPrefill::select(paths);
        if !selected.contains(&variant) {
            selected.push(variant);
        }
        if paths.coop_matrix.is_some()
            && AttnPrefill::variants().contains(&paths)
            && !coop.contains(&paths)
        {
            coop.push(paths);
        }
    }
    let mut out: Vec<AttnPrefill> = selected
        .into_iter()
        .map(|paths| AttnPrefill::new(ctx, paths, shape).expect("building attn_prefill"))
        .collect();
    for paths in coop {
        let shape_of = paths.coop_matrix.expect("a coop path");
        for tile in CoopTile::candidates(shape_of, shape.head_dim) {
            if tile.workgroup_bytes() <= limit && wanted_tile(tile) {
                out.push(
                    AttnPrefill::with_tile(ctx, paths, shape, Some(tile))
                        .expect("building attn_prefill"),
                );
            }
        }
    }
    out.sort_by_key(|kernel| kernel.tile().is_some());
    out
}

/// Whether `ATTN_TILES` (labels, comma-separated; unset: every tile) names the tile: a shorter
/// run for a device call that times a few forms (the engine's own choice always runs).
fn wanted_tile(tile: CoopTile) -> bool {
    std::env::var("ATTN_TILES").map_or(true, |labels| {
        labels.split(',').any(|label| label == tile.label())
    })
}

/// One chunk of `n_tokens` after `cached` tokens on one variant's cache type: its buffers.
struct Chunk {
    shape: AttnShape,
    n_tokens: u32,
    cached: u32,
    cache: KvCache,
    pages: PageTable,
    q: wgpu::Buffer,
    o: wgpu::Buffer,
    step: StepBuffer,
}

/// A chunk bound for one split rule: the split count it runs in, and its scratch.
struct Bound {
    splits: u32,
    binding: PrefillBinding,
    _scratch: Option<wgpu::Buffer>,
}

impl Chunk {
    fn new(
        ctx: &GpuContext,
        kernel: &AttnPrefill,
        shape: AttnShape,
        n_tokens: u32,
        cached: u32,
    ) -> Chunk {
        let dtype = kernel.dtype();
        let layout =
            KvLayout::contiguous(shape.n_kv, shape.head_dim, PAGE, cached + n_tokens, dtype);
        let cache = KvCache::new(ctx, layout).expect("the cache");
        let elements = layout.elements() as usize;
        for (buffer, salt) in [(&cache.k, 0), (&cache.v, 7)] {
            let values = (0..elements).map(|i| ((i * 31 + salt) % 61) as f32 / 30.0 - 1.0);
            let bytes: Vec<u8> = match dtype {
                KvDtype::F32 => values.flat_map(f32::to_le_bytes).collect(),
                KvDtype::F16 => values.flat_map(|x| f16_bits(x).to_le_bytes()).collect(),
            };
            fak::gpu::write(ctx, buffer, 0, &bytes).expect("filling the cache");
        }
        let pages = PageTable::identity(ctx, layout.pages_per_row).expect("the page table");
        let width = u64::from(n_tokens * shape.n_head * shape.head_dim);
        let q: Vec<f32> = (0..width)
            .map(|i| ((i % 89) as f32 - 44.0) / 44.0)
            .collect();
        let q = upload(ctx, "q", bytemuck::cast_slice(&q)).unwrap();
        let o = storage_buffer(ctx, "o", width * 4).unwrap();
        let step = StepBuffer::new(ctx);
        step.set(ctx, Step::new(cached, n_tokens, 0));
        Chunk {
            shape,
            n_tokens,
            cached,
            cache,
            pages,
            q,
            o,
            step,
        }
    }

    /// Binds the chunk for `kernel`'s split rule; None when its split count is in `counts`
    /// already (then timed), else adds it.
    fn bind(&self, ctx: &GpuContext, kernel: &AttnPrefill, counts: &mut Vec<u32>) -> Option<Bound> {
        let keys = self.cached + self.n_tokens;
        let bytes = kernel.scratch_bytes(self.n_tokens, keys);
        let scratch = (bytes > 0).then(|| storage_buffer(ctx, "partials", bytes).unwrap());
        let (n_head, head_dim) = (self.shape.n_head, self.shape.head_dim);
        let io = PrefillIo {
            q: View::heads(&self.q, n_head, head_dim),
            o: View::heads(&self.o, n_head, head_dim),
            cache: &self.cache,
            pages: &self.pages,
            positions: Positions::Step,
            step: &self.step,
            max_tokens: self.n_tokens,
            scratch: scratch.as_ref(),
        };
        let binding = kernel.bind(ctx, io).expect("binding attn_prefill");
        let splits = kernel.splits(&binding, self.n_tokens, keys);
        if counts.contains(&splits) {
            return None;
        }
        counts.push(splits);
        Some(Bound {
            splits,
            binding,
            _scratch: scratch,
        })
    }

    /// Median seconds per dispatch (with its combine) of the chunk, and its output.
    fn time(&self, ctx: &GpuContext, kernel: &AttnPrefill, bound: &Bound) -> (f64, Vec<f32>) {
        let keys = self.cached + self.n_tokens;
        let seconds = median_seconds(ctx, DISPATCHES, |pass| {
            kernel
                .encode(pass, &bound.binding, self.n_tokens, keys)
                .expect("recording the prefill");
        });
        let output =
            fak::gpu::read_back_f32(ctx, &self.o, 0..self.o.size()).expect("reading o back");
        (seconds, output)
    }
}

/// The f16 bit pattern of `x` (|x| ≤ 1, truncated: the bench needs plausible values, not exact
/// ones; below f16's normal range it is zero).
fn f16_bits(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32 - 127 + 15;
    if exp <= 0 {
        return sign;
    }
    sign | ((exp as u16) << 10) | ((bits >> 13) & 0x3ff) as u16
}
