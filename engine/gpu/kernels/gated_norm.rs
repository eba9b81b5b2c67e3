//! `gated_norm`: `y_h = ssm_norm ⊙ RMSNorm₀(o_h) ⊙ silu(z_h)` per value head
//! (wgsl/gated_norm.wgsl).

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

const WG: u32 = 64;
/// o, z, w, y, params.
const SLOTS: &[Slot] = &[
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::ReadWrite,
    Slot::Uniform,
];

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    nv: u32,
    dv: u32,
    eps: f32,
    pad: u32,
    z: ViewParams,
}

pub struct GatedNorm {
    variant: KernelPaths,
    dims: DeltaDims,
    layout: wgpu::BindGroupLayout,
    pipelines: Vec<(&'static str, wgpu::ComputePipeline)>,
}

/// The buffers of one GDN layer's output norm, for [`GatedNorm::bind`]; o and y are
/// `[max_tokens][nv·dv]`.
pub struct NormIo<'a> {
    /// The delta rule's output.
    pub o: &'a wgpu::Buffer,
    /// The gate projection `W_gate h`: `max_tokens` × nv heads of dv, possibly inside wider rows.
    pub z: View<'a>,
    /// `blk.N.ssm_norm.weight` (F32 `[dv]`).
    pub weight: TensorRef<'a>,
    pub y: &'a wgpu::Buffer,
    pub max_tokens: u32,
}

pub struct NormBinding {
    group: wgpu::BindGroup,
    max_tokens: u32,
    max_grid: u32,
}

impl Kernel for GatedNorm {
    const NAME: &'static str = "gated_norm";
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
                .with(wgsl::GATED_NORM),
            slots: SLOTS,
            pipelines: vec![PipelineSpec {
                label: "gated_norm".into(),
                entry_point: "gated_norm",
                constants: vec![("WG", f64::from(WG))],
            }],
        }
    }
}

impl GatedNorm {
    pub fn new(ctx: &GpuContext, paths: KernelPaths, dims: DeltaDims) -> Result<Self, GpuError> {
        dims.validate()?;
        let variant = KernelVariant::of::<Self>(Self::AXES.select(paths));
        let built = build(ctx, &variant)?;
        Ok(GatedNorm {
            variant: variant.paths,
            dims,
            layout: built.layout,
            pipelines: by_entry(&variant.source.pipelines, built.pipelines),
        })
    }

    pub fn variant(&self) -> KernelPaths {
        self.variant
    }

    pub fn bind(&self, ctx: &GpuContext, io: NormIo) -> Result<NormBinding, GpuError> {
        let d = self.dims;
        check_f32_weight(Self::NAME, &io.weight, u64::from(d.dv))?;
        let params = Params {
            nv: d.nv,
            dv: d.dv,
            eps: d.eps,
            pad: 0,
            z: io.z.params(),
        };
        let params = uniform(ctx, "gated_norm params", &params);
        let rows = f32_rows(io.max_tokens, d.value_dim());
        let group = bind_group(
            ctx,
            Self::NAME,
            &self.layout,
            &[
                Resource::Storage {
                    name: "o (delta rule output)",
                    buffer: io.o,
                    bytes: rows,
                },
                Resource::Checked(support::view_binding(
                    ctx,
                    Self::NAME,
                    "z (gate projection)",
                    &io.z,
                    io.max_tokens,
                    d.nv,
                    d.dv,
                )?),
                Resource::Storage {
                    name: io.weight.name,
                    buffer: io.weight.buffer,
                    bytes: 4 * u64::from(d.dv),
                },
                Resource::Storage {
                    name: "y (gated norm output)",
                    buffer: io.y,
                    bytes: rows,
                },
                Resource::Uniform(&params),
            ],
        )?;
        Ok(NormBinding {
            group,
            max_tokens: io.max_tokens,
            max_grid: ctx.device.limits().max_compute_workgroups_per_dimension,
        })
    }

    /// One dispatch: a workgroup per (value head, token).
    pub fn plan(&self, binding: &NormBinding, n_tokens: u32) -> Result<Vec<Dispatch>, GpuError> {
        check_tokens(Self::NAME, u64::from(n_tokens), binding.max_tokens)?;
        let grid = [self.dims.nv, n_tokens, 1];
        Ok(vec![check_grid(
            binding.max_grid,
            Self::NAME,
            "gated_norm",
            grid,
        )?])
    }

    pub fn encode(
        &self,
        pass: &mut wgpu::ComputePass,
        binding: &NormBinding,
        n_tokens: u32,
    ) -> Result<Recorded, GpuError> {
        let plan = self.plan(binding, n_tokens)?;
        record(pass, &binding.group, &plan, &self.pipelines);
        let bytes = self.dims.norm_bytes(n_tokens);
        Ok(Recorded::new(Self::NAME, plan.len(), bytes))
    }
}
