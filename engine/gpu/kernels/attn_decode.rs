//! `attn_decode`: one query token per sequence against its paged KV cache, GQA, split across
//! workgroups along the keys with a combining pass (wgsl/attn_decode.wgsl).

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

const ATTN_DECODE: WgslFile = step_wgsl!("attn_decode.wgsl");
const SCORES_SUBGROUP: WgslFile = step_wgsl!("attn_scores_subgroup.wgsl");
const SCORES_WORKGROUP: WgslFile = step_wgsl!("attn_scores_workgroup.wgsl");
/// q, k_cache, v_cache, page_table, token_slots, partials, o, params, step.
const SLOTS: &[Slot] = &[
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::ReadWrite,
    Slot::ReadWrite,
    Slot::Uniform,
    Slot::Uniform,
];
/// Keys per tile (`KEY_TILE`); splits cover whole tiles.
pub const KEY_TILE: u32 = 32;
/// Bounds of the kernel's per-invocation arrays (`MAX_GROUP`, `MAX_ACC`).
const MAX_GROUP: u32 = 32;
const MAX_ACC: u32 = 64;

/// The attention shape of a model: query heads, kv heads and their width. Kernels are
/// specialised for it (loop bounds and workgroup arrays become constants).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AttnShape {
    pub n_head: u32,
    pub n_kv: u32,
    pub head_dim: u32,
}

impl AttnShape {
    /// The shape the registry's variants are specialised for (portability translation): GQA
    /// group 6 as in qwen35, head_dim 128.
    pub const EXAMPLE: AttnShape = AttnShape {
        n_head: 12,
        n_kv: 2,
        head_dim: 128,
    };

    /// Query heads per kv head.
    pub fn group(&self) -> u32 {
        self.n_head / self.n_kv.max(1)
    }

    /// `1/sqrt(head_dim)`.
    pub fn scale(&self) -> f32 {
        (1.0 / f64::from(self.head_dim).sqrt()) as f32
    }

    /// Checks n_head a positive multiple of n_kv and a positive head_dim.
    pub(crate) fn check(&self, kernel: &'static str) -> Result<(), GpuError> {
        let AttnShape {
            n_head,
            n_kv,
            head_dim,
        } = *self;
        if n_kv == 0 || head_dim == 0 || n_head == 0 || !n_head.is_multiple_of(n_kv) {
            return Err(shape_error(
                kernel,
                format!("{self:?}: n_head must be a positive multiple of n_kv, head_dim positive"),
            ));
        }
        Ok(())
    }
}

/// The workgroup size for a shape: the smallest whose invocations each hold at most MAX_ACC
/// accumulators (GROUP query heads × their share of the head dims).
fn workgroup_size(shape: AttnShape) -> Result<u32, GpuError> {
    shape.check(AttnDecode::NAME)?;
    let group = shape.group();
    if group > MAX_GROUP {
        return Err(shape_error(
            AttnDecode::NAME,
            format!("{shape:?}: {group} query heads per kv head, at most {MAX_GROUP} supported"),
        ));
    }
    [64, 128, 256]
        .into_iter()
        .find(|&wg| group * shape.head_dim.div_ceil(wg) <= MAX_ACC)
        .ok_or_else(|| {
            shape_error(
                AttnDecode::NAME,
                format!(
                    "{shape:?}: {group}·{} accumulators per invocation even at 256 invocations",
                    shape.head_dim.div_ceil(256)
                ),
            )
        })
}

/// `Params` of wgsl/attn_decode.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    kv: super::kv_cache::KvGeometry,
    q: support::ViewParams,
    o: support::ViewParams,
    n_head: u32,
    n_split: u32,
    scale: f32,
    pad: u32,
}

/// What a decode binding reads and writes.
#[derive(Clone, Copy)]
pub struct DecodeIo<'a> {
    /// The queries: n_head heads of head_dim per sequence (row b = sequence b of the step).
    pub q: View<'a>,
    /// The output, n_head heads of head_dim per sequence.
    pub o: View<'a>,
    pub cache: &'a KvCache,
    pub pages: &'a PageTable,
    /// Each sequence's position (it attends to positions 0..=pos) and page-table row.
    pub positions: Positions<'a>,
    pub step: &'a StepBuffer,
    /// Workgroups per (sequence, kv head) along the keys; 1 writes `o` directly, more need a
    /// `scratch` of [`AttnDecode::scratch_bytes`].
    pub n_split: u32,
    pub scratch: Option<&'a wgpu::Buffer>,
    /// The most sequences (query rows) one step has.
    pub max_seqs: u32,
}

/// The decode-attention kernel, specialised for one [`AttnShape`].
pub struct AttnDecode {
    variant: KernelPaths,
    shape: AttnShape,
    layout: wgpu::BindGroupLayout,
    /// decode (Step positions), decode (token table), combine.
    pipelines: Vec<wgpu::ComputePipeline>,
    /// Stands in for the token table (read-only) and, separately, the scratch (read-write) when
    /// a binding has none: one buffer cannot be bound both ways in a dispatch.
    placeholder: wgpu::Buffer,
    scratch_placeholder: wgpu::Buffer,
}

/// A layer's queries and cache bound for [`AttnDecode::encode`].
pub struct DecodeBinding {
    group: wgpu::BindGroup,
    table: bool,
    n_split: u32,
    max_seqs: u32,
}

impl Kernel for AttnDecode {
    const NAME: &'static str = "attn_decode";
    const AXES: Axes = Axes {
        subgroup: true,
        f16: true,
        ..Axes::NONE
    };

    fn source(variant: KernelPaths) -> KernelSource {
        Self::source_for(variant, AttnShape::EXAMPLE).expect("the example shape is supported")
    }
}

impl AttnDecode {
    /// The module and pipelines of `variant` specialised for `shape`.
    pub fn source_for(variant: KernelPaths, shape: AttnShape) -> Result<KernelSource, GpuError> {
        let wg = workgroup_size(shape)?;
        let scores = if variant.subgroup {
            SCORES_SUBGROUP
        } else {
            SCORES_WORKGROUP
        };
        let module = WgslModule::new(variant)
            .with(wgsl::reduction(variant))
            .with(support::kv_scalar(variant.f16))
            .with(support::KV_PAGED)
            .with(wgsl::STEP)
            .with(support::VIEW)
            .with(support::POSITIONS)
            .with(scores)
            .with(ATTN_DECODE);
        let group = shape.group();
        let constants = |table: bool| {
            vec![
                ("WG", f64::from(wg)),
                ("HEAD_DIM", f64::from(shape.head_dim)),
                ("GROUP", f64::from(group)),
                ("Q_LEN", f64::from(group * shape.head_dim)),
                ("S_LEN", f64::from(group * KEY_TILE)),
                ("KEY_TILE", f64::from(KEY_TILE)),
                ("TOKEN_TABLE", f64::from(table)),
            ]
        };
        let label = |what: &str| format!("attn_decode {what} {shape:?}");
        let pipelines = vec![
            PipelineSpec {
                label: label("decode"),
                entry_point: "decode",
                constants: constants(false),
            },
            PipelineSpec {
                label: label("decode token_table"),
                entry_point: "decode",
                constants: constants(true),
            },
            PipelineSpec {
                label: label("combine"),
                entry_point: "combine",
                constants: constants(false),
            },
        ];
        Ok(KernelSource {
            module,
            slots: SLOTS,
            pipelines,
        })
    }

    /// Bytes of workgroup memory a workgroup of `shape` uses: the query heads of its group, the
    /// tile's scores, key offsets and per-head scalars, and the reduction helper's scratch.
    pub fn workgroup_bytes(shape: AttnShape) -> Result<u64, GpuError> {
        let wg = workgroup_size(shape)?;
        let group = shape.group();
        let floats = group * shape.head_dim + group * KEY_TILE + KEY_TILE + MAX_GROUP + wg;
        Ok(u64::from(floats) * 4)
    }

    /// Builds the variant of `paths` (subgroup scores, f16 cache where allowed) for `shape`.
    pub fn new(ctx: &GpuContext, paths: KernelPaths, shape: AttnShape) -> Result<Self, GpuError> {
        let bytes = Self::workgroup_bytes(shape)?;
        let limit = ctx.device.limits().max_compute_workgroup_storage_size;
        if bytes > u64::from(limit) {
            return Err(GpuError::TooLarge {
                what: format!("decode attention for {shape:?} (workgroup memory bytes)"),
                size: bytes,
                limit: u64::from(limit),
                limit_name: "max_compute_workgroup_storage_size",
            });
        }
        let variant = Self::AXES.select(paths);
        let built = build(
            ctx,
            &KernelVariant {
                kernel: Self::NAME,
                paths: variant,
                source: Self::source_for(variant, shape)?,
            },
        )?;
        Ok(AttnDecode {
            variant,
            shape,
            layout: built.layout,
            pipelines: built.pipelines,
            placeholder: support::placeholder(ctx),
            scratch_placeholder: support::placeholder(ctx),
        })
    }

    pub fn variant(&self) -> KernelPaths {
        self.variant
    }

    /// The cache type this kernel reads.
    pub fn dtype(&self) -> KvDtype {
        KvDtype::of(self.variant)
    }

    /// Bytes of the scratch a binding with `n_split` > 1 needs for `max_seqs` sequences (one
    /// scratch can serve every layer: their decode passes run one after another).
    pub fn scratch_bytes(&self, max_seqs: u32, n_split: u32) -> u64 {
        u64::from(max_seqs)
            * u64::from(self.shape.n_head)
            * u64::from(n_split)
            * u64::from(self.shape.head_dim + 2)
            * 4
    }

    /// A split count for sequences of up to `max_positions` tokens: one split per 128 keys (four
    /// key tiles), at most 64. A workgroup owns one (kv head, split), so with 8 kv heads, 512
    /// keys per split gave an H200 (132 SMs) only 64 workgroups per layer at depth 2048 and
    /// decode ran at half the speed it had at depth 128 (experiments/NOTES.md, "H200 runs");
    /// splits past the current length hold no tiles and cost only their share of the combine.
    pub fn default_splits(max_positions: u32) -> u32 {
        max_positions.div_ceil(128).clamp(1, 64)
    }

    /// Binds one layer's decode attention (see [`DecodeIo`]).
    pub fn bind(&self, ctx: &GpuContext, io: DecodeIo<'_>) -> Result<DecodeBinding, GpuError> {
        let DecodeIo {
            q,
            o,
            cache,
            pages,
            positions,
            step,
            n_split,
            scratch,
            max_seqs,
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
        if n_split == 0 || max_seqs == 0 {
            return Err(shape_error(
                Self::NAME,
                format!("{n_split} splits, {max_seqs} sequences: both must be positive"),
            ));
        }
        let (n_head, hd) = (shape.n_head, shape.head_dim);
        let q_binding = view_binding(ctx, Self::NAME, "q", &q, max_seqs, n_head, hd)?;
        let o_binding = view_binding(ctx, Self::NAME, "o", &o, max_seqs, n_head, hd)?;
        if q.buffer == o.buffer {
            return Err(shape_error(Self::NAME, "q and o must be different buffers"));
        }
        let cache_words = layout.cache_bytes().div_ceil(4);
        let k_cache = words(ctx, Self::NAME, "the k cache", &cache.k, cache_words)?;
        let v_cache = words(ctx, Self::NAME, "the v cache", &cache.v, cache_words)?;
        let table = pages.binding(ctx, Self::NAME, &layout)?;
        let slots = positions_binding(ctx, Self::NAME, positions, &self.placeholder, max_seqs)?;
        let partials = match (n_split, scratch) {
            (1, _) => self.scratch_placeholder.as_entire_binding(),
            (_, Some(buffer)) => words(
                ctx,
                Self::NAME,
                &format!("the scratch for {n_split} splits of {max_seqs} sequences"),
                buffer,
                self.scratch_bytes(max_seqs, n_split) / 4,
            )?,
            (_, None) => {
                return Err(shape_error(
                    Self::NAME,
                    format!("{n_split} splits need a scratch buffer"),
                ));
            }
        };
        let limit = ctx.device.limits().max_compute_workgroups_per_dimension;
        if n_split > limit || max_seqs > limit {
            return Err(GpuError::TooLarge {
                what: format!(
                    "decode attention over {max_seqs} sequences in {n_split} splits (workgroups)"
                ),
                size: u64::from(n_split.max(max_seqs)),
                limit: u64::from(limit),
                limit_name: "max_compute_workgroups_per_dimension",
            });
        }
        let params = uniform(
            ctx,
            "attn_decode params",
            &Params {
                kv: layout.geometry(),
                q: q.params(),
                o: o.params(),
                n_head,
                n_split,
                scale: shape.scale(),
                pad: 0,
            },
        );
        let group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("attn_decode"),
            layout: &self.layout,
            entries: &[
                entry(0, q_binding),
                entry(1, k_cache),
                entry(2, v_cache),
                entry(3, table),
                entry(4, slots),
                entry(5, partials),
                entry(6, o_binding),
                entry(7, params.as_entire_binding()),
                entry(8, step.buffer.as_entire_binding()),
            ],
        });
        Ok(DecodeBinding {
            group,
            table: positions.is_table(),
            n_split,
            max_seqs,
        })
    }

    /// Records the dispatches for a step of `n_seqs` sequences (at most the binding's
    /// `max_seqs`): the split pass, and the combining pass when there are several splits.
    pub fn encode(&self, pass: &mut wgpu::ComputePass, binding: &DecodeBinding, n_seqs: u32) {
        let n = n_seqs.min(binding.max_seqs);
        pass.set_bind_group(0, &binding.group, &[]);
        pass.set_pipeline(&self.pipelines[usize::from(binding.table)]);
        pass.dispatch_workgroups(binding.n_split, self.shape.n_kv, n);
        if binding.n_split > 1 {
            pass.set_pipeline(&self.pipelines[2]);
            pass.dispatch_workgroups(self.shape.n_head, n, 1);
        }
    }
}
