//! `attn_prefill`: causal flash attention of a step's tokens against the paged KV cache, GQA,
//! continuing whatever the cache already holds (wgsl/attn_prefill.wgsl).

use super::attn_decode::AttnShape;
use super::kv_cache::{KvCache, KvDtype, PageTable, check_dtype};
use super::support::{
    self, Positions, View, entry, positions_binding, shape_error, step_wgsl, view_binding, words,
};
use crate::gpu::buffers::uniform;
use crate::gpu::context::GpuContext;
use crate::gpu::error::GpuError;
use crate::gpu::kernel::{
    Kernel, KernelSource, KernelVariant, PipelineSpec, WgslFile, WgslModule, build, wgsl,
};
use crate::gpu::layout::Slot;
use crate::gpu::paths::{Axes, KernelPaths};
use crate::gpu::step::StepBuffer;

const ATTN_PREFILL: WgslFile = step_wgsl!("attn_prefill.wgsl");
/// q, k_cache, v_cache, page_table, token_slots, o, params, step.
const SLOTS: &[Slot] = &[
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::ReadWrite,
    Slot::Uniform,
    Slot::Uniform,
];
/// (token, query head) rows per workgroup (`BM`).
pub const ROWS_PER_TILE: u32 = 32;
/// The widest head the kernel's accumulators hold (4 invocations per row, 64 each).
pub const MAX_HEAD_DIM: u32 = 256;

/// `Params` of wgsl/attn_prefill.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    kv: super::kv_cache::KvGeometry,
    q: support::ViewParams,
    o: support::ViewParams,
    scale: f32,
    max_tokens: u32,
    pad: [u32; 2],
}

/// What a prefill binding reads and writes.
#[derive(Clone, Copy)]
pub struct PrefillIo<'a> {
    /// The queries: n_head heads of head_dim per token.
    pub q: View<'a>,
    /// The output, n_head heads of head_dim per token.
    pub o: View<'a>,
    /// The cache, already holding this step's k and v (written by `rope_kv` before).
    pub cache: &'a KvCache,
    pub pages: &'a PageTable,
    /// The tokens' positions (ascending, one sequence) and page-table row.
    pub positions: Positions<'a>,
    pub step: &'a StepBuffer,
    /// The most tokens one step has.
    pub max_tokens: u32,
}

/// The prefill-attention kernel, specialised for one [`AttnShape`].
pub struct AttnPrefill {
    variant: KernelPaths,
    shape: AttnShape,
    layout: wgpu::BindGroupLayout,
    /// Index: `TOKEN_TABLE`.
    pipelines: Vec<wgpu::ComputePipeline>,
    placeholder: wgpu::Buffer,
}

/// A layer's queries and cache bound for [`AttnPrefill::encode`].
pub struct PrefillBinding {
    group: wgpu::BindGroup,
    table: bool,
    max_tokens: u32,
}

impl Kernel for AttnPrefill {
    const NAME: &'static str = "attn_prefill";
    const AXES: Axes = Axes {
        f16: true,
        ..Axes::NONE
    };

    fn source(variant: KernelPaths) -> KernelSource {
        Self::source_for(variant, AttnShape::EXAMPLE).expect("the example shape is supported")
    }
}

impl AttnPrefill {
    /// The module and pipelines of `variant` specialised for `shape`.
    pub fn source_for(variant: KernelPaths, shape: AttnShape) -> Result<KernelSource, GpuError> {
        shape.check(Self::NAME)?;
        if shape.head_dim > MAX_HEAD_DIM {
            return Err(shape_error(
                Self::NAME,
                format!("{shape:?}: head_dim above {MAX_HEAD_DIM} is not supported"),
            ));
        }
        let module = WgslModule::new(variant)
            .with(support::kv_scalar(variant.f16))
            .with(support::KV_PAGED)
            .with(wgsl::STEP)
            .with(support::VIEW)
            .with(support::POSITIONS)
            .with(ATTN_PREFILL);
        let pipelines = [false, true]
            .map(|table| PipelineSpec {
                label: format!("attn_prefill {shape:?} token_table={table}"),
                entry_point: "main",
                constants: vec![
                    ("HEAD_DIM", f64::from(shape.head_dim)),
                    ("GROUP", f64::from(shape.group())),
                    ("TOKEN_TABLE", f64::from(table)),
                ],
            })
            .to_vec();
        Ok(KernelSource {
            module,
            slots: SLOTS,
            pipelines,
        })
    }

    /// Builds the variant of `paths` (f16 cache where allowed) for `shape`.
    pub fn new(ctx: &GpuContext, paths: KernelPaths, shape: AttnShape) -> Result<Self, GpuError> {
        let variant = Self::AXES.select(paths);
        let built = build(
            ctx,
            &KernelVariant {
                kernel: Self::NAME,
                paths: variant,
                source: Self::source_for(variant, shape)?,
            },
        )?;
        Ok(AttnPrefill {
            variant,
            shape,
            layout: built.layout,
            pipelines: built.pipelines,
            placeholder: support::placeholder(ctx),
        })
    }

    pub fn variant(&self) -> KernelPaths {
        self.variant
    }

    /// The cache type this kernel reads.
    pub fn dtype(&self) -> KvDtype {
        KvDtype::of(self.variant)
    }

    /// Binds one layer's prefill attention (see [`PrefillIo`]).
    pub fn bind(&self, ctx: &GpuContext, io: PrefillIo<'_>) -> Result<PrefillBinding, GpuError> {
        let PrefillIo {
            q,
            o,
            cache,
            pages,
            positions,
            step,
            max_tokens,
        } = io;
        let shape = self.shape;
        let layout = cache.layout;
        layout.check(Self::NAME)?;
        check_dtype(Self::NAME, &layout, self.dtype())?;
        if (layout.n_kv, layout.head_dim) != (shape.n_kv, shape.head_dim) {
            return Err(shape_error(
                Self::NAME,
                format!(
                    "the cache has {} kv heads of {}, the kernel was built for {shape:?}",
                    layout.n_kv, layout.head_dim
                ),
            ));
        }
        if q.buffer == o.buffer {
            return Err(shape_error(Self::NAME, "q and o must be different buffers"));
        }
        let (n_head, hd) = (shape.n_head, shape.head_dim);
        let q_binding = view_binding(ctx, Self::NAME, "q", &q, max_tokens, n_head, hd)?;
        let o_binding = view_binding(ctx, Self::NAME, "o", &o, max_tokens, n_head, hd)?;
        let cache_words = layout.cache_bytes().div_ceil(4);
        let k_cache = words(ctx, Self::NAME, "the k cache", &cache.k, cache_words)?;
        let v_cache = words(ctx, Self::NAME, "the v cache", &cache.v, cache_words)?;
        let table = pages.binding(ctx, Self::NAME, &layout)?;
        let slots = positions_binding(ctx, Self::NAME, positions, &self.placeholder, max_tokens)?;
        let tiles = self.tiles(max_tokens);
        let limit = ctx.device.limits().max_compute_workgroups_per_dimension;
        if tiles > u64::from(limit) {
            return Err(GpuError::TooLarge {
                what: format!("prefill attention over {max_tokens} tokens (row tiles)"),
                size: tiles,
                limit: u64::from(limit),
                limit_name: "max_compute_workgroups_per_dimension",
            });
        }
        let params = uniform(
            ctx,
            "attn_prefill params",
            &Params {
                kv: layout.geometry(),
                q: q.params(),
                o: o.params(),
                scale: shape.scale(),
                max_tokens,
                pad: [0; 2],
            },
        );
        let group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("attn_prefill"),
            layout: &self.layout,
            entries: &[
                entry(0, q_binding),
                entry(1, k_cache),
                entry(2, v_cache),
                entry(3, table),
                entry(4, slots),
                entry(5, o_binding),
                entry(6, params.as_entire_binding()),
                entry(7, step.buffer.as_entire_binding()),
            ],
        });
        Ok(PrefillBinding {
            group,
            table: positions.is_table(),
            max_tokens,
        })
    }

    /// Row tiles (workgroups per kv head) for `n_tokens` tokens.
    fn tiles(&self, n_tokens: u32) -> u64 {
        (u64::from(n_tokens) * u64::from(self.shape.group())).div_ceil(u64::from(ROWS_PER_TILE))
    }

    /// Records the dispatch for a step of `n_tokens` tokens (at most the binding's `max_tokens`).
    pub fn encode(&self, pass: &mut wgpu::ComputePass, binding: &PrefillBinding, n_tokens: u32) {
        let tiles = self.tiles(n_tokens.min(binding.max_tokens));
        pass.set_pipeline(&self.pipelines[usize::from(binding.table)]);
        pass.set_bind_group(0, &binding.group, &[]);
        // bind() checked the tiles of max_tokens against the per-dimension limit.
        pass.dispatch_workgroups(tiles as u32, self.shape.n_kv, 1);
    }
}
