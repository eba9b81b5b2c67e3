//! `rope_kv`: one step's q and k normed per head (optional), rotated, q written where attention
//! reads it and k, v written into the paged KV cache, in one dispatch (wgsl/rope_kv.wgsl): the
//! only writer of the cache.

use super::kv_cache::{KvCache, KvDtype, check_dtype};
use super::rope::{ROPE_ANGLE, RopePairing, RopeTable};
use super::support::{
    self, Positions, View, entry, positions_binding, shape_error, step_wgsl, view_binding, words,
};
use crate::gpu::buffers::uniform;
use crate::gpu::context::GpuContext;
use crate::gpu::error::GpuError;
use crate::gpu::kernel::{
    Kernel, KernelSource, KernelVariant, PipelineSpec, WgslFile, WgslModule, build, wgsl,
};
use crate::gpu::kernels::kv_cache::KvGeometry;
use crate::gpu::layout::Slot;
use crate::gpu::paths::{Axes, KernelPaths};
use crate::gpu::profile::{OpBytes, Recorded};
use crate::gpu::step::PageTable;
use crate::gpu::step::StepBuffer;

const ROPE_KV: WgslFile = step_wgsl!("rope_kv.wgsl");
/// q, k, v, q_norm, k_norm, table, q_out, k_cache, v_cache, page_table, token_slots, params, step.
const SLOTS: &[Slot] = &[
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::ReadWrite,
    Slot::ReadWrite,
    Slot::ReadWrite,
    Slot::Read,
    Slot::Read,
    Slot::Uniform,
    Slot::Uniform,
];
/// Invocations per workgroup (`WG`): the attention's rope form sums a head's squares over as
/// many, in this order, for the same bits.
pub(crate) const WG: u32 = 64;

/// `Params` of wgsl/rope_kv.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    kv: KvGeometry,
    q: support::ViewParams,
    k: support::ViewParams,
    v: support::ViewParams,
    q_out: support::ViewParams,
    n_head: u32,
    half_rot: u32,
    neox: u32,
    has_norm: u32,
    eps: f32,
    n_pages: u32,
    pad: [u32; 2],
}

/// The per-head RMSNorm weights of q and k (head_dim f32 each) and its eps.
#[derive(Clone, Copy)]
pub struct HeadNorms<'a> {
    pub q: &'a wgpu::Buffer,
    pub k: &'a wgpu::Buffer,
    pub eps: f32,
}

/// What a binding reads and writes: `n_head` q heads and the cache's n_kv heads of k and v per
/// token (head_dim from the cache), for up to `max_tokens` tokens.
pub struct RopeKvIo<'a> {
    pub q: View<'a>,
    pub k: View<'a>,
    pub v: View<'a>,
    /// Where the rotated q goes (attention reads it there): not a buffer q, k or v are in.
    pub q_out: View<'a>,
    pub n_head: u32,
    pub norms: Option<HeadNorms<'a>>,
    pub pairing: RopePairing,
    pub table: &'a RopeTable,
    pub cache: &'a KvCache,
    pub pages: &'a PageTable,
    pub positions: Positions<'a>,
    pub step: &'a StepBuffer,
    pub max_tokens: u32,
}

/// The fused kernel of one variant: one pipeline per position source.
pub struct RopeKv {
    variant: KernelPaths,
    layout: wgpu::BindGroupLayout,
    /// Index: `TOKEN_TABLE`.
    pipelines: Vec<wgpu::ComputePipeline>,
    placeholder: wgpu::Buffer,
    max_per_dimension: u32,
}

/// A layer's q, k, v and cache bound for [`RopeKv::encode`].
pub struct RopeKvBinding {
    group: wgpu::BindGroup,
    pipeline: usize,
    heads: u64,
    max_tokens: u32,
    /// Bytes one token moves (q read and written; k and v read, then written to the cache), and
    /// the norm weights read.
    token_bytes: u64,
    norm_bytes: u64,
}

impl Kernel for RopeKv {
    const NAME: &'static str = "rope_kv";
    const AXES: Axes = Axes {
        subgroup: true,
        f16: true,
        ..Axes::NONE
    };

    fn source(variant: KernelPaths) -> KernelSource {
        let module = WgslModule::new(variant)
            .with(wgsl::reduction(variant))
            .with(support::kv_scalar(variant.f16))
            .with(support::KV_PAGED)
            .with(wgsl::GRID)
            .with(wgsl::STEP)
            .with(support::VIEW)
            .with(support::POSITIONS)
            .with(ROPE_ANGLE)
            .with(ROPE_KV);
        let pipelines = [false, true]
            .map(|table| PipelineSpec {
                label: format!("rope_kv token_table={table}"),
                entry_point: "main",
                constants: vec![("WG", f64::from(WG)), ("TOKEN_TABLE", f64::from(table))],
            })
            .to_vec();
        KernelSource {
            module,
            slots: SLOTS,
            pipelines,
        }
    }
}

impl RopeKv {
    /// Builds the variant of `paths`: subgroup reduction and an f16 cache where allowed.
    pub fn new(ctx: &GpuContext, paths: KernelPaths) -> Result<Self, GpuError> {
        let variant = KernelVariant::of::<Self>(Self::AXES.select(paths));
        let built = build(ctx, &variant)?;
        Ok(RopeKv {
            variant: variant.paths,
            layout: built.layout,
            pipelines: built.pipelines,
            placeholder: support::placeholder(ctx),
            max_per_dimension: ctx.device.limits().max_compute_workgroups_per_dimension,
        })
    }

    pub fn variant(&self) -> KernelPaths {
        self.variant
    }

    /// The cache type this kernel writes.
    pub fn dtype(&self) -> KvDtype {
        KvDtype::of(self.variant)
    }

    /// Binds one layer's step inputs, checking every view, the cache and the table first.
    pub fn bind(&self, ctx: &GpuContext, io: &RopeKvIo<'_>) -> Result<RopeKvBinding, GpuError> {
        let layout = io.cache.layout;
        layout.check(Self::NAME)?;
        check_dtype(Self::NAME, &layout, self.dtype())?;
        let (n_kv, hd, n_head, tokens) = (layout.n_kv, layout.head_dim, io.n_head, io.max_tokens);
        let n_rot = io.table.n_rot();
        if n_head == 0 || n_rot > hd {
            return Err(shape_error(
                Self::NAME,
                format!(
                    "{n_head} q heads of {hd} with n_rot = {n_rot}: need heads and n_rot ≤ head_dim"
                ),
            ));
        }
        if [io.q.buffer, io.k.buffer, io.v.buffer].contains(&io.q_out.buffer) {
            return Err(shape_error(
                Self::NAME,
                "q_out shares a buffer with q, k or v (a buffer is bound read-only or read-write, not both)",
            ));
        }
        let q = view_binding(ctx, Self::NAME, "q", &io.q, tokens, n_head, hd)?;
        let k = view_binding(ctx, Self::NAME, "k", &io.k, tokens, n_kv, hd)?;
        let v = view_binding(ctx, Self::NAME, "v", &io.v, tokens, n_kv, hd)?;
        let q_out = view_binding(ctx, Self::NAME, "q_out", &io.q_out, tokens, n_head, hd)?;
        let (q_norm, k_norm) = match io.norms {
            Some(n) => (
                words(ctx, Self::NAME, "the q norm weight", n.q, u64::from(hd))?,
                words(ctx, Self::NAME, "the k norm weight", n.k, u64::from(hd))?,
            ),
            None => (
                self.placeholder.as_entire_binding(),
                self.placeholder.as_entire_binding(),
            ),
        };
        let cache_words = layout.cache_bytes().div_ceil(4);
        let k_cache = words(ctx, Self::NAME, "the k cache", &io.cache.k, cache_words)?;
        let v_cache = words(ctx, Self::NAME, "the v cache", &io.cache.v, cache_words)?;
        let table = io.pages.binding(ctx, Self::NAME, &layout)?;
        let slots = positions_binding(ctx, Self::NAME, io.positions, &self.placeholder, tokens)?;
        let params = uniform(
            ctx,
            "rope_kv params",
            &Params {
                kv: layout.geometry(),
                q: io.q.params(),
                k: io.k.params(),
                v: io.v.params(),
                q_out: io.q_out.params(),
                n_head,
                half_rot: n_rot / 2,
                neox: u32::from(io.pairing == RopePairing::Neox),
                has_norm: u32::from(io.norms.is_some()),
                eps: io.norms.map_or(0.0, |n| n.eps),
                n_pages: layout.n_pages,
                pad: [0; 2],
            },
        );
        let group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("rope_kv"),
            layout: &self.layout,
            entries: &[
                entry(0, q),
                entry(1, k),
                entry(2, v),
                entry(3, q_norm),
                entry(4, k_norm),
                entry(5, io.table.binding(ctx, Self::NAME)?),
                entry(6, q_out),
                entry(7, k_cache),
                entry(8, v_cache),
                entry(9, table),
                entry(10, slots),
                entry(11, params.as_entire_binding()),
                entry(12, io.step.buffer.as_entire_binding()),
            ],
        });
        let heads = u64::from(n_head + n_kv);
        support::grid(u64::from(tokens) * heads, self.max_per_dimension)?;
        let (q_width, kv_width) = (u64::from(n_head * hd), u64::from(n_kv * hd));
        let cached = kv_width * self.dtype().bytes();
        Ok(RopeKvBinding {
            group,
            pipeline: usize::from(io.positions.is_table()),
            heads,
            max_tokens: tokens,
            token_bytes: 2 * 4 * q_width + 2 * (4 * kv_width + cached),
            norm_bytes: io.norms.map_or(0, |_| 2 * 4 * u64::from(hd)),
        })
    }

    /// Records the dispatch for a step of `n_tokens` tokens (at most the binding's `max_tokens`).
    pub fn encode(
        &self,
        pass: &mut wgpu::ComputePass,
        binding: &RopeKvBinding,
        n_tokens: u32,
    ) -> Result<Recorded, GpuError> {
        let tokens = n_tokens.min(binding.max_tokens);
        let workgroups = u64::from(tokens) * binding.heads;
        pass.set_pipeline(&self.pipelines[binding.pipeline]);
        pass.set_bind_group(0, &binding.group, &[]);
        support::grid_within_bound(workgroups, self.max_per_dimension).dispatch(pass);
        let moved = u64::from(tokens) * binding.token_bytes;
        Ok(Recorded::new(
            Self::NAME,
            1,
            OpBytes::new(binding.norm_bytes, moved),
        ))
    }
}
