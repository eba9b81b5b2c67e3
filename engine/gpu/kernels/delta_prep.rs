//! `delta_prep`: q̂ = l2norm(q)/√dk and k̂ = l2norm(k) in place in the conv output, and the gates
//! β = σ(b), g = ssm_a · softplus(a + dt_bias), in one dispatch (wgsl/delta_prep.wgsl).

use super::delta_state::{
    DeltaDims, Dispatch, Resource, TensorRef, bind_group, by_entry, check_f32_weight, check_grid,
    check_tokens, f32_rows, record, wgsl,
};
use super::support::{self, View, ViewParams};
use crate::gpu::buffers::uniform;
use crate::gpu::context::GpuContext;
use crate::gpu::error::GpuError;
use crate::gpu::kernel::{
    Kernel, KernelSource, KernelVariant, PipelineSpec, WgslModule, build, wgsl as shared,
};
use crate::gpu::layout::Slot;
use crate::gpu::paths::{Axes, KernelPaths};
use crate::gpu::profile::Recorded;

/// Invocations per workgroup: a 128-wide head is two values each.
const WG: u32 = 64;
/// mixed, b, a, ssm_a, dt_bias, gates, params.
const SLOTS: &[Slot] = &[
    Slot::ReadWrite,
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::ReadWrite,
    Slot::Uniform,
];

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    conv_dim: u32,
    nk: u32,
    nv: u32,
    dk: u32,
    eps: f32,
    q_scale: f32,
    pad: [u32; 2],
    b: ViewParams,
    a: ViewParams,
}

pub struct DeltaPrep {
    variant: KernelPaths,
    dims: DeltaDims,
    layout: wgpu::BindGroupLayout,
    pipelines: Vec<(&'static str, wgpu::ComputePipeline)>,
}

/// The buffers of one GDN layer's prep, for [`DeltaPrep::bind`].
pub struct PrepIo<'a> {
    /// The conv output `[max_tokens][conv_dim]`; its q and k channels are normalised in place.
    pub mixed: &'a wgpu::Buffer,
    /// β logits `W_β h`: `max_tokens` rows of `nv` (one head), possibly inside wider rows.
    pub b: View<'a>,
    /// α `W_α h`, likewise.
    pub a: View<'a>,
    /// `blk.N.ssm_a` (F32 `[nv]`, already −exp(A_log)).
    pub ssm_a: TensorRef<'a>,
    /// `blk.N.ssm_dt.bias` (F32 `[nv]`).
    pub dt_bias: TensorRef<'a>,
    /// Output `[max_tokens][2·nv]`: per token the nv β, then the nv g.
    pub gates: &'a wgpu::Buffer,
    pub max_tokens: u32,
}

pub struct PrepBinding {
    group: wgpu::BindGroup,
    max_tokens: u32,
    max_grid: u32,
}

impl Kernel for DeltaPrep {
    const NAME: &'static str = "delta_prep";
    const AXES: Axes = Axes {
        subgroup: true,
        ..Axes::NONE
    };

    fn source(variant: KernelPaths) -> KernelSource {
        KernelSource {
            module: WgslModule::new(variant)
                .with(shared::reduction(variant))
                .with(support::VIEW)
                .with(wgsl::GDN_MATH)
                .with(wgsl::DELTA_PREP),
            slots: SLOTS,
            pipelines: vec![PipelineSpec {
                label: "delta_prep".into(),
                entry_point: "prep",
                constants: vec![("WG", f64::from(WG))],
            }],
        }
    }
}

impl DeltaPrep {
    pub fn new(ctx: &GpuContext, paths: KernelPaths, dims: DeltaDims) -> Result<Self, GpuError> {
        dims.validate()?;
        let variant = KernelVariant::of::<Self>(Self::AXES.select(paths));
        let built = build(ctx, &variant)?;
        Ok(DeltaPrep {
            variant: variant.paths,
            dims,
            layout: built.layout,
            pipelines: by_entry(&variant.source.pipelines, built.pipelines),
        })
    }

    pub fn variant(&self) -> KernelPaths {
        self.variant
    }

    pub fn bind<'a>(&self, ctx: &GpuContext, io: PrepIo<'a>) -> Result<PrepBinding, GpuError> {
        let d = self.dims;
        for w in [&io.ssm_a, &io.dt_bias] {
            check_f32_weight(Self::NAME, w, u64::from(d.nv))?;
        }
        let params = Params {
            conv_dim: d.conv_dim(),
            nk: d.nk,
            nv: d.nv,
            dk: d.dk,
            eps: d.eps,
            q_scale: 1.0 / (d.dk as f32).sqrt(),
            pad: [0; 2],
            b: io.b.params(),
            a: io.a.params(),
        };
        let params = uniform(ctx, "delta_prep params", &params);
        let per_head = f32_rows(io.max_tokens, d.nv);
        let view = |what, view: &View<'a>| {
            support::view_binding(ctx, Self::NAME, what, view, io.max_tokens, 1, d.nv)
        };
        let group = bind_group(
            ctx,
            Self::NAME,
            &self.layout,
            &[
                Resource::Storage {
                    name: "mixed (conv output)",
                    buffer: io.mixed,
                    bytes: f32_rows(io.max_tokens, d.conv_dim()),
                },
                Resource::Checked(view("b (beta logits)", &io.b)?),
                Resource::Checked(view("a (alpha)", &io.a)?),
                Resource::Storage {
                    name: io.ssm_a.name,
                    buffer: io.ssm_a.buffer,
                    bytes: 4 * u64::from(d.nv),
                },
                Resource::Storage {
                    name: io.dt_bias.name,
                    buffer: io.dt_bias.buffer,
                    bytes: 4 * u64::from(d.nv),
                },
                Resource::Storage {
                    name: "gates",
                    buffer: io.gates,
                    bytes: 2 * per_head,
                },
                Resource::Uniform(&params),
            ],
        )?;
        Ok(PrepBinding {
            group,
            max_tokens: io.max_tokens,
            max_grid: ctx.device.limits().max_compute_workgroups_per_dimension,
        })
    }

    /// One dispatch: a workgroup per (q/k head, token).
    pub fn plan(&self, binding: &PrepBinding, n_tokens: u32) -> Result<Vec<Dispatch>, GpuError> {
        check_tokens(Self::NAME, u64::from(n_tokens), binding.max_tokens)?;
        let grid = [2 * self.dims.nk, n_tokens, 1];
        Ok(vec![check_grid(
            binding.max_grid,
            Self::NAME,
            "prep",
            grid,
        )?])
    }

    pub fn encode(
        &self,
        pass: &mut wgpu::ComputePass,
        binding: &PrepBinding,
        n_tokens: u32,
    ) -> Result<Recorded, GpuError> {
        let plan = self.plan(binding, n_tokens)?;
        record(pass, &binding.group, &plan, &self.pipelines);
        let bytes = self.dims.prep_bytes(n_tokens);
        Ok(Recorded::new(Self::NAME, plan.len(), bytes))
    }
}
