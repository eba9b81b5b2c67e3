//! `attn_prefill`: causal flash attention of a step's tokens against the paged KV cache, GQA,
//! continuing whatever the cache already holds.
//!
//! Variants ([`AttnPrefill::variants`]):
//! - fallback (f32 cache) and `f16` (f16 cache): f32 tiles in workgroup memory, f32 FMAs
//!   (wgsl/attn_prefill.wgsl);
//! - `subgroup+f16+coop16x16` (Vulkan) / `subgroup+f16+coop8x8` (Metal): S = Q·Kᵀ and P·V on
//!   cooperative matrices, f16 inputs and f32 accumulation (wgsl/attn_prefill_coop.wgsl). Not
//!   selected yet ([`AttnPrefill::select`]): on the H200 it is correct but no faster than the
//!   f32-tile kernel (experiments/NOTES.md, attn-prefill-coop); built by
//!   [`AttnPrefill::with_tile`] for its tests and the bench.
//!
//! Both share the bindings and row addressing (wgsl/attn_prefill_rows.wgsl), so a binding is the
//! same for every variant; only the rows per workgroup differ ([`AttnPrefill::rows_per_tile`]).

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
use crate::gpu::paths::{Axes, CoopShape, KernelPaths};
use crate::gpu::step::StepBuffer;

const ATTN_PREFILL_ROWS: WgslFile = step_wgsl!("attn_prefill_rows.wgsl");
const ATTN_PREFILL: WgslFile = step_wgsl!("attn_prefill.wgsl");
const ATTN_PREFILL_COOP: WgslFile = step_wgsl!("attn_prefill_coop.wgsl");
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
/// (token, query head) rows per workgroup of the f32-tile kernel (`BM`).
const SCALAR_ROWS: u32 = 32;
/// The widest head the kernels' accumulators hold (the f32-tile kernel: 4 invocations per row,
/// 64 each).
pub const MAX_HEAD_DIM: u32 = 256;
/// Row blocks (`ROW_BLOCKS`, 16 rows each on Vulkan) the cooperative-matrix kernel may take,
/// most first; [`CoopTile::fitting`] takes the first whose workgroup memory fits.
pub const COOP_ROW_BLOCKS: [u32; 3] = [4, 2, 1];

/// The workgroup geometry of the cooperative-matrix kernel (the consts of
/// wgsl/attn_prefill_coop.wgsl): `row_blocks` × 2 subgroups of 32, `row_blocks`·COOP rows.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct CoopTile {
    pub coop: CoopShape,
    pub row_blocks: u32,
    /// Dim tiles of COOP covering the head (the head padded with zeros), an even number (the
    /// workgroup's two subgroup columns split them).
    pub head_tiles: u32,
}

impl CoopTile {
    pub fn new(coop: CoopShape, row_blocks: u32, head_dim: u32) -> Self {
        CoopTile {
            coop,
            row_blocks,
            head_tiles: 2 * head_dim.div_ceil(2 * coop.size()),
        }
    }

    /// The tile with the most row blocks whose workgroup memory fits `limit` bytes.
    pub fn fitting(coop: CoopShape, head_dim: u32, limit: u32) -> Option<CoopTile> {
        COOP_ROW_BLOCKS
            .into_iter()
            .map(|blocks| CoopTile::new(coop, blocks, head_dim))
            .find(|tile| tile.workgroup_bytes() <= limit)
    }

    pub fn rows(self) -> u32 {
        self.row_blocks * self.coop.size()
    }

    /// Bytes of workgroup memory the kernel declares (its `var<workgroup>` arrays).
    pub fn workgroup_bytes(self) -> u32 {
        let n = self.coop.size();
        let (rows, keys) = (self.rows(), 2 * n);
        let dims = self.head_tiles * n;
        let invocations = self.row_blocks * 2 * 32;
        let halves = (rows + keys) * (dims + 8) + rows * (keys + 8);
        let words = rows * keys + rows * (dims + 4) + keys + 2 * invocations + rows;
        2 * halves + 4 * words
    }
}

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
    tile: Option<CoopTile>,
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
        subgroup: true,
        f16: true,
        coop_matrix: true,
        ..Axes::NONE
    };

    fn source(variant: KernelPaths) -> KernelSource {
        let shape = AttnShape::EXAMPLE;
        let tile = variant
            .coop_matrix
            .map(|coop| CoopTile::new(coop, COOP_ROW_BLOCKS[1], shape.head_dim));
        Self::source_for(variant, shape, tile).expect("the example shape is supported")
    }

    /// Fallback, f16 cache, and the cooperative-matrix shapes (which alone use subgroups: their
    /// workgroups split into subgroups by `subgroup_id`).
    fn variants() -> Vec<KernelPaths> {
        Self::AXES
            .variants()
            .into_iter()
            .filter(|v| v.subgroup == v.coop_matrix.is_some())
            .collect()
    }

    /// The f32-tile kernel on the cache type `allowed` gives, also where cooperative matrices
    /// are allowed: the H200 measured the coop kernel at the f32-tile kernel's speed
    /// (experiments/NOTES.md, attn-prefill-coop), so it is built only on request
    /// ([`AttnPrefill::with_tile`]).
    fn select(allowed: KernelPaths) -> KernelPaths {
        KernelPaths {
            subgroup: false,
            coop_matrix: None,
            ..Self::AXES.select(allowed)
        }
    }
}

impl AttnPrefill {
    /// The module and pipelines of `variant` specialised for `shape`; `tile` is the workgroup of
    /// a cooperative-matrix variant (None for the others).
    pub fn source_for(
        variant: KernelPaths,
        shape: AttnShape,
        tile: Option<CoopTile>,
    ) -> Result<KernelSource, GpuError> {
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
            .with(ATTN_PREFILL_ROWS);
        let module = match (variant.coop_matrix, tile) {
            (None, None) => module.with(ATTN_PREFILL),
            (Some(coop), Some(tile)) if tile.coop == coop => module
                .with_const("ROW_BLOCKS", tile.row_blocks)
                .with_const("HEAD_TILES", tile.head_tiles)
                .with(match coop {
                    CoopShape::M8x8 => wgsl::MATMUL_COOP8,
                    CoopShape::M16x16 => wgsl::MATMUL_COOP16,
                })
                .with(ATTN_PREFILL_COOP),
            _ => {
                return Err(shape_error(
                    Self::NAME,
                    format!("variant {variant} with tile {tile:?}"),
                ));
            }
        };
        let pipelines = [false, true]
            .map(|table| PipelineSpec {
                label: format!("attn_prefill {shape:?} {tile:?} token_table={table}"),
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

    /// Builds the variant `paths` selects ([`AttnPrefill::select`]) for `shape`.
    pub fn new(ctx: &GpuContext, paths: KernelPaths, shape: AttnShape) -> Result<Self, GpuError> {
        Self::with_tile(ctx, Self::select(paths), shape, None)
    }

    /// Builds `variant` (one of [`AttnPrefill::variants`]) with the cooperative-matrix workgroup
    /// `tile` (None for the other variants).
    pub fn with_tile(
        ctx: &GpuContext,
        variant: KernelPaths,
        shape: AttnShape,
        tile: Option<CoopTile>,
    ) -> Result<Self, GpuError> {
        if let Some(tile) = tile {
            let limit = ctx.device.limits().max_compute_workgroup_storage_size;
            if tile.workgroup_bytes() > limit {
                return Err(shape_error(
                    Self::NAME,
                    format!("{tile:?} needs more than {limit} bytes of workgroup memory"),
                ));
            }
        }
        let built = build(
            ctx,
            &KernelVariant {
                kernel: Self::NAME,
                paths: variant,
                source: Self::source_for(variant, shape, tile)?,
            },
        )?;
        Ok(AttnPrefill {
            variant,
            shape,
            tile,
            layout: built.layout,
            pipelines: built.pipelines,
            placeholder: support::placeholder(ctx),
        })
    }

    pub fn variant(&self) -> KernelPaths {
        self.variant
    }

    /// The cooperative-matrix workgroup (None for the f32-tile kernel).
    pub fn tile(&self) -> Option<CoopTile> {
        self.tile
    }

    /// (token, query head) rows per workgroup.
    pub fn rows_per_tile(&self) -> u32 {
        self.tile.map_or(SCALAR_ROWS, CoopTile::rows)
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
        (u64::from(n_tokens) * u64::from(self.shape.group()))
            .div_ceil(u64::from(self.rows_per_tile()))
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
