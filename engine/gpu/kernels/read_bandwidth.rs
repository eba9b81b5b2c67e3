//! `read_bandwidth`: the streaming-read probe `harness selftest` times to measure an adapter's
//! read bandwidth (wgsl/read_bandwidth.wgsl), the ceiling a decode step's weight reads meet.

use super::support::{entry, shape_error, step_wgsl};
use crate::gpu::buffers::{Grid, storage_buffer, uniform};
use crate::gpu::context::GpuContext;
use crate::gpu::error::GpuError;
use crate::gpu::kernel::{
    Kernel, KernelSource, KernelVariant, PipelineSpec, WgslFile, WgslModule, build, wgsl,
};
use crate::gpu::layout::Slot;
use crate::gpu::paths::{Axes, KernelPaths};

const READ_BANDWIDTH: WgslFile = step_wgsl!("read_bandwidth.wgsl");
/// src, out, params.
const SLOTS: &[Slot] = &[Slot::Read, Slot::ReadWrite, Slot::Uniform];
const WG: u32 = 256;
/// vec4 words per workgroup (64 KiB).
const PER_WG: u32 = 4096;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n_vec4: u32,
    n_groups: u32,
    pad: [u32; 2],
}

pub struct ReadBandwidth {
    layout: wgpu::BindGroupLayout,
    pipeline: wgpu::ComputePipeline,
}

/// A source buffer bound for [`ReadBandwidth::encode`].
pub struct ReadBinding {
    group: wgpu::BindGroup,
    grid: Grid,
    /// Bytes one dispatch reads.
    pub bytes: u64,
}

impl Kernel for ReadBandwidth {
    const NAME: &'static str = "read_bandwidth";
    const AXES: Axes = Axes::NONE;

    fn source(variant: KernelPaths) -> KernelSource {
        KernelSource {
            module: WgslModule::new(variant)
                .with(wgsl::GRID)
                .with(READ_BANDWIDTH),
            slots: SLOTS,
            pipelines: vec![PipelineSpec {
                label: "read_bandwidth".into(),
                entry_point: "main",
                constants: vec![("WG", f64::from(WG)), ("PER_WG", f64::from(PER_WG))],
            }],
        }
    }
}

impl ReadBandwidth {
    pub fn new(ctx: &GpuContext) -> Result<Self, GpuError> {
        let built = build(ctx, &KernelVariant::of::<Self>(KernelPaths::FALLBACK))?;
        Ok(ReadBandwidth {
            layout: built.layout,
            pipeline: built.pipelines.into_iter().next().expect("one pipeline"),
        })
    }

    /// Binds all of `src` (a whole number of 16-byte words, within one binding).
    pub fn bind(&self, ctx: &GpuContext, src: &wgpu::Buffer) -> Result<ReadBinding, GpuError> {
        let n_vec4 = src.size() / 16;
        let n_groups = n_vec4.div_ceil(u64::from(PER_WG));
        if n_vec4 == 0 || src.size() > ctx.max_binding_size() || n_vec4 > u64::from(u32::MAX) {
            return Err(shape_error(
                Self::NAME,
                format!("a source of {} bytes", src.size()),
            ));
        }
        let out = storage_buffer(ctx, "read_bandwidth out", n_groups * u64::from(WG) * 4)?;
        let params = uniform(
            ctx,
            "read_bandwidth params",
            &Params {
                n_vec4: n_vec4 as u32,
                n_groups: n_groups as u32,
                pad: [0; 2],
            },
        );
        let group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("read_bandwidth"),
            layout: &self.layout,
            entries: &[
                entry(0, src.as_entire_binding()),
                entry(1, out.as_entire_binding()),
                entry(2, params.as_entire_binding()),
            ],
        });
        let grid = Grid::for_workgroups(
            n_groups,
            ctx.device.limits().max_compute_workgroups_per_dimension,
        )?;
        Ok(ReadBinding {
            group,
            grid,
            bytes: n_vec4 * 16,
        })
    }

    pub fn encode(&self, pass: &mut wgpu::ComputePass, binding: &ReadBinding) {
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &binding.group, &[]);
        binding.grid.dispatch(pass);
    }
}
