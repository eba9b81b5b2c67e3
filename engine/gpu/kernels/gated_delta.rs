//! `gated_delta`: the gated delta rule, recurrent form — decode (one token per sequence) and
//! any batch run token by token (wgsl/gated_delta.wgsl). Lane groups of `ROW_LANES` invocations
//! own one state row each; their dot products are subgroup shuffles or, in the fallback,
//! workgroup-memory sums.

use super::delta_state::{
    DeltaDims, DeltaState, Dispatch, Resource, bind_group, by_entry, check_batch, check_grid,
    check_state, f32_rows, record, wgsl,
};
use crate::gpu::buffers::uniform;
use crate::gpu::context::GpuContext;
use crate::gpu::error::GpuError;
use crate::gpu::kernel::{Kernel, KernelSource, KernelVariant, PipelineSpec, WgslModule, build};
use crate::gpu::layout::Slot;
use crate::gpu::paths::{Axes, KernelPaths};
use crate::gpu::profile::Recorded;
use crate::gpu::step::{SeqBatch, SequenceTable};

/// Invocations per workgroup: a multiple of every subgroup size up to 128.
const WG: u32 = 128;
/// mixed, gates, seqs, state, o, params.
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
    nk: u32,
    nv: u32,
    dv: u32,
    group_div: u32,
    pad: [u32; 3],
}

pub struct GatedDeltaDecode {
    variant: KernelPaths,
    row_lanes: u32,
    dims: DeltaDims,
    layout: wgpu::BindGroupLayout,
    pipelines: Vec<(&'static str, wgpu::ComputePipeline)>,
}

/// The buffers of one GDN layer's recurrent step, for [`GatedDeltaDecode::bind`].
pub struct DecodeIo<'a> {
    /// The conv output after [`DeltaPrep`](super::delta_prep::DeltaPrep), `[max_tokens][conv_dim]`.
    pub mixed: &'a wgpu::Buffer,
    /// `[max_tokens][2·nv]` from DeltaPrep.
    pub gates: &'a wgpu::Buffer,
    pub table: &'a SequenceTable,
    pub state: &'a DeltaState,
    /// Output `[max_tokens][nv·dv]`.
    pub o: &'a wgpu::Buffer,
    pub max_tokens: u32,
}

pub struct DecodeBinding {
    group: wgpu::BindGroup,
    max_tokens: u32,
    max_seqs: u32,
    max_grid: u32,
}

impl Kernel for GatedDeltaDecode {
    const NAME: &'static str = "gated_delta";
    const AXES: Axes = Axes {
        subgroup: true,
        ..Axes::NONE
    };

    fn source(variant: KernelPaths) -> KernelSource {
        let dims = DeltaDims::QWEN35_27B;
        Self::source_for(variant, &dims, preferred_row_lanes(dims.dk))
    }
}

/// Lanes per state row: 8 where dk allows it (16 floats per lane at dk = 128, 3 shuffle steps
/// per dot product), else 4. MLX's packed kernel measured fewer lanes per row (more state per
/// lane, shorter reductions) to be the faster layout.
fn preferred_row_lanes(dk: u32) -> u32 {
    if dk.is_multiple_of(32) { 8 } else { 4 }
}

impl GatedDeltaDecode {
    fn source_for(variant: KernelPaths, dims: &DeltaDims, row_lanes: u32) -> KernelSource {
        let row_sum = if variant.subgroup {
            wgsl::ROW_SUM_SUBGROUP
        } else {
            wgsl::ROW_SUM_WORKGROUP
        };
        KernelSource {
            module: WgslModule::new(variant)
                .with(wgsl::SEQUENCES)
                .with(row_sum)
                .with(wgsl::GATED_DELTA),
            slots: SLOTS,
            pipelines: vec![PipelineSpec {
                label: format!("gated_delta dk={} lanes={row_lanes}", dims.dk),
                entry_point: "decode",
                constants: vec![
                    ("WG", f64::from(WG)),
                    ("ROW_LANES", f64::from(row_lanes)),
                    ("DK", f64::from(dims.dk)),
                ],
            }],
        }
    }

    /// Builds the kernel for `dims` (dk is baked in, so a lane's state stays in registers). The
    /// subgroup variant needs lane groups that fit the adapter's smallest subgroup and
    /// workgroups that hold whole subgroups; where the adapter's sizes rule that out (a
    /// subgroup narrower than 4 or wider than 128), the fallback is built.
    pub fn new(ctx: &GpuContext, paths: KernelPaths, dims: DeltaDims) -> Result<Self, GpuError> {
        dims.validate()?;
        let mut paths = Self::AXES.select(paths);
        let mut row_lanes = preferred_row_lanes(dims.dk);
        if paths.subgroup {
            let facts = ctx.facts();
            let narrowest = facts.subgroup_min_size.min(row_lanes);
            if narrowest < 4 || facts.subgroup_max_size > WG {
                paths.subgroup = false;
            } else {
                row_lanes = narrowest;
            }
        }
        let mut variant = KernelVariant::of::<Self>(paths);
        variant.source = Self::source_for(paths, &dims, row_lanes);
        let built = build(ctx, &variant)?;
        Ok(GatedDeltaDecode {
            variant: paths,
            row_lanes,
            dims,
            layout: built.layout,
            pipelines: by_entry(&variant.source.pipelines, built.pipelines),
        })
    }

    pub fn variant(&self) -> KernelPaths {
        self.variant
    }

    /// Invocations that own one state row.
    pub fn row_lanes(&self) -> u32 {
        self.row_lanes
    }

    pub fn bind(&self, ctx: &GpuContext, io: DecodeIo) -> Result<DecodeBinding, GpuError> {
        let d = self.dims;
        check_state(Self::NAME, d, io.table, io.state)?;
        let params = Params {
            conv_dim: d.conv_dim(),
            nk: d.nk,
            nv: d.nv,
            dv: d.dv,
            group_div: d.group_div(),
            pad: [0; 3],
        };
        let params = uniform(ctx, "gated_delta params", &params);
        let group = bind_group(
            ctx,
            Self::NAME,
            &self.layout,
            &[
                Resource::Storage {
                    name: "mixed (q̂, k̂, v)",
                    buffer: io.mixed,
                    bytes: f32_rows(io.max_tokens, d.conv_dim()),
                },
                Resource::Storage {
                    name: "gates",
                    buffer: io.gates,
                    bytes: f32_rows(io.max_tokens, 2 * d.nv),
                },
                Resource::whole("sequence table", &io.table.buffer),
                Resource::whole("recurrent state", &io.state.recurrent),
                Resource::Storage {
                    name: "o (delta rule output)",
                    buffer: io.o,
                    bytes: f32_rows(io.max_tokens, d.value_dim()),
                },
                Resource::Uniform(&params),
            ],
        )?;
        Ok(DecodeBinding {
            group,
            max_tokens: io.max_tokens,
            max_seqs: io.table.max_seqs(),
            max_grid: ctx.device.limits().max_compute_workgroups_per_dimension,
        })
    }

    /// One dispatch: a workgroup per (block of WG / ROW_LANES state rows, value head, sequence);
    /// each walks its sequence's tokens in order.
    pub fn plan(
        &self,
        binding: &DecodeBinding,
        batch: SeqBatch,
    ) -> Result<Vec<Dispatch>, GpuError> {
        check_batch(Self::NAME, batch, binding.max_tokens, binding.max_seqs)?;
        let rows_per_group = WG / self.row_lanes;
        let grid = [
            self.dims.dv.div_ceil(rows_per_group),
            self.dims.nv,
            batch.count,
        ];
        Ok(vec![check_grid(
            binding.max_grid,
            Self::NAME,
            "decode",
            grid,
        )?])
    }

    pub fn encode(
        &self,
        pass: &mut wgpu::ComputePass,
        binding: &DecodeBinding,
        batch: SeqBatch,
    ) -> Result<Recorded, GpuError> {
        let plan = self.plan(binding, batch)?;
        record(pass, &binding.group, &plan, &self.pipelines);
        let bytes = self.dims.delta_bytes(batch);
        Ok(Recorded::new(Self::NAME, plan.len(), bytes))
    }
}
