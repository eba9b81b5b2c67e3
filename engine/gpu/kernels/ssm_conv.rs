//! `ssm_conv`: causal depthwise conv1d + SiLU over the qkv projection, rolling the conv state
//! (wgsl/ssm_conv.wgsl). One dispatch for decode and prefill alike.

use super::delta_state::{
    DeltaDims, DeltaState, Dispatch, Resource, TensorRef, bind_group, by_entry, check_batch,
    check_f32_weight, check_grid, check_state, f32_rows, record, wgsl,
};
use super::support::{self, View, ViewParams};
use crate::gpu::buffers::uniform;
use crate::gpu::context::GpuContext;
use crate::gpu::error::GpuError;
use crate::gpu::kernel::{Kernel, KernelSource, KernelVariant, PipelineSpec, WgslModule, build};
use crate::gpu::layout::Slot;
use crate::gpu::paths::{Axes, KernelPaths};
use crate::gpu::profile::Recorded;
use crate::gpu::step::{SeqBatch, SequenceTable};

/// Conv kernel sizes (taps) the kernel supports (the Qwen3.5 family uses 4).
pub const SUPPORTED_CONV_KERNELS: [usize; 3] = [2, 3, 4];

/// Invocations per workgroup (channels).
const WG: u32 = 64;
/// Tokens per invocation (at least K − 1, so only tile 0 touches the state).
const TILE: u32 = 8;
/// m, w, seqs, state, y, params.
const SLOTS: &[Slot] = &[
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::ReadWrite,
    Slot::ReadWrite,
    Slot::Uniform,
];

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    conv_dim: u32,
    pad: [u32; 3],
    m: ViewParams,
}

pub struct SsmConv {
    variant: KernelPaths,
    dims: DeltaDims,
    layout: wgpu::BindGroupLayout,
    pipelines: Vec<(&'static str, wgpu::ComputePipeline)>,
}

/// The buffers of one GDN layer's conv, for [`SsmConv::bind`].
pub struct ConvIo<'a> {
    /// Raw qkv projection: `max_tokens` rows of `conv_dim` (one head), possibly inside wider
    /// rows.
    pub m: View<'a>,
    /// `blk.N.ssm_conv1d.weight`: F32, `ne = [K, conv_dim]`.
    pub weight: TensorRef<'a>,
    pub table: &'a SequenceTable,
    pub state: &'a DeltaState,
    /// Output `[max_tokens][conv_dim]`: silu(conv(m)), the `mixed` rows the later kernels read.
    pub y: &'a wgpu::Buffer,
    /// The most tokens (count · len) one step may bring.
    pub max_tokens: u32,
}

pub struct ConvBinding {
    group: wgpu::BindGroup,
    max_tokens: u32,
    max_seqs: u32,
    max_grid: u32,
}

impl Kernel for SsmConv {
    const NAME: &'static str = "ssm_conv";
    const AXES: Axes = Axes::NONE;

    fn source(variant: KernelPaths) -> KernelSource {
        Self::source_for(variant, &DeltaDims::QWEN35_27B)
    }
}

impl SsmConv {
    fn source_for(variant: KernelPaths, dims: &DeltaDims) -> KernelSource {
        KernelSource {
            module: WgslModule::new(variant)
                .with(wgsl::SEQUENCES)
                .with(support::VIEW)
                .with(wgsl::GDN_MATH)
                .with(wgsl::SSM_CONV),
            slots: SLOTS,
            pipelines: vec![PipelineSpec {
                label: format!("ssm_conv K={}", dims.conv_kernel),
                entry_point: "conv_silu",
                constants: vec![
                    ("WG", f64::from(WG)),
                    ("K", f64::from(dims.conv_kernel)),
                    ("TILE", f64::from(TILE)),
                ],
            }],
        }
    }

    /// Builds the kernel for a layer of shape `dims` (its conv kernel size is baked in).
    pub fn new(ctx: &GpuContext, paths: KernelPaths, dims: DeltaDims) -> Result<Self, GpuError> {
        dims.validate()?;
        let mut variant = KernelVariant::of::<Self>(Self::AXES.select(paths));
        variant.source = Self::source_for(variant.paths, &dims);
        let built = build(ctx, &variant)?;
        Ok(SsmConv {
            variant: variant.paths,
            dims,
            layout: built.layout,
            pipelines: by_entry(&variant.source.pipelines, built.pipelines),
        })
    }

    pub fn variant(&self) -> KernelPaths {
        self.variant
    }

    /// Checks the buffers against the shapes and builds the bind group (once, at load time).
    pub fn bind(&self, ctx: &GpuContext, io: ConvIo) -> Result<ConvBinding, GpuError> {
        let dims = self.dims;
        let conv_dim = dims.conv_dim();
        check_f32_weight(
            Self::NAME,
            &io.weight,
            u64::from(dims.conv_kernel) * u64::from(conv_dim),
        )?;
        check_state(Self::NAME, dims, io.table, io.state)?;
        let params = uniform(
            ctx,
            "ssm_conv params",
            &Params {
                conv_dim,
                pad: [0; 3],
                m: io.m.params(),
            },
        );
        let rows = f32_rows(io.max_tokens, conv_dim);
        let m = support::view_binding(
            ctx,
            Self::NAME,
            "m (qkv projection)",
            &io.m,
            io.max_tokens,
            1,
            conv_dim,
        )?;
        let group = bind_group(
            ctx,
            Self::NAME,
            &self.layout,
            &[
                Resource::Checked(m),
                Resource::Storage {
                    name: io.weight.name,
                    buffer: io.weight.buffer,
                    bytes: 4 * u64::from(dims.conv_kernel) * u64::from(conv_dim),
                },
                Resource::whole("sequence table", &io.table.buffer),
                Resource::whole("conv state", &io.state.conv),
                Resource::Storage {
                    name: "conv output",
                    buffer: io.y,
                    bytes: rows,
                },
                Resource::Uniform(&params),
            ],
        )?;
        Ok(ConvBinding {
            group,
            max_tokens: io.max_tokens,
            max_seqs: io.table.max_seqs(),
            max_grid: ctx.device.limits().max_compute_workgroups_per_dimension,
        })
    }

    /// The dispatch `encode` records for `batch`: always one.
    pub fn plan(&self, binding: &ConvBinding, batch: SeqBatch) -> Result<Vec<Dispatch>, GpuError> {
        check_batch(Self::NAME, batch, binding.max_tokens, binding.max_seqs)?;
        let grid = [
            self.dims.conv_dim().div_ceil(WG),
            batch.len.div_ceil(TILE),
            batch.count,
        ];
        Ok(vec![check_grid(
            binding.max_grid,
            Self::NAME,
            "conv_silu",
            grid,
        )?])
    }

    /// Records the conv of `batch` (the batch the sequence table was last written with).
    pub fn encode(
        &self,
        pass: &mut wgpu::ComputePass,
        binding: &ConvBinding,
        batch: SeqBatch,
    ) -> Result<Recorded, GpuError> {
        let plan = self.plan(binding, batch)?;
        record(pass, &binding.group, &plan, &self.pipelines);
        let bytes = self.dims.conv_bytes(batch);
        Ok(Recorded::new(Self::NAME, plan.len(), bytes))
    }
}
