//! `reduce_probe`: a test-only kernel that exercises the shared workgroup reductions
//! (wgsl/reduce_subgroup.wgsl, wgsl/reduce_workgroup.wgsl) through the engine's kernel pattern,
//! so both variants are run and translated before any engine kernel depends on them.

use crate::poisoned_f32;
use fak::gpu::buffers::uniform;
use fak::gpu::{
    Axes, GpuContext, Kernel, KernelPaths, KernelSource, KernelVariant, PipelineSpec, Slot,
    WgslFile, WgslModule, build, read_back_f32, upload, wgsl,
};

const PROBE: WgslFile = WgslFile {
    name: "reduce_probe.wgsl (tests/wgsl)",
    text: include_str!("../wgsl/reduce_probe.wgsl"),
};
/// x, sums, seen, params.
const SLOTS: &[Slot] = &[Slot::Read, Slot::ReadWrite, Slot::ReadWrite, Slot::Uniform];

pub struct ReduceProbe {
    variant: KernelPaths,
    layout: wgpu::BindGroupLayout,
    /// Parallel to [`ReduceProbe::WORKGROUP_SIZES`].
    pipelines: Vec<wgpu::ComputePipeline>,
}

/// What one probe run returns: per row (total, sum of squares), and per row and invocation the
/// total that invocation received.
pub struct ProbeOutput {
    pub sums: Vec<f32>,
    pub seen: Vec<f32>,
}

impl Kernel for ReduceProbe {
    const NAME: &'static str = "reduce_probe";
    const AXES: Axes = Axes {
        subgroup: true,
        ..Axes::NONE
    };

    fn source(variant: KernelPaths) -> KernelSource {
        KernelSource {
            module: WgslModule::new(variant)
                .with(wgsl::reduction(variant))
                .with(PROBE),
            slots: SLOTS,
            pipelines: Self::WORKGROUP_SIZES
                .iter()
                .map(|&wg| PipelineSpec {
                    label: format!("reduce_probe WG={wg}"),
                    entry_point: "main",
                    constants: vec![("WG", f64::from(wg))],
                })
                .collect(),
        }
    }
}

impl ReduceProbe {
    /// Smaller than, equal to and larger than common subgroup sizes (8, 32, 64).
    pub const WORKGROUP_SIZES: [u32; 3] = [32, 64, 256];

    pub fn new(ctx: &GpuContext, paths: KernelPaths) -> Self {
        let variant = KernelVariant::of::<Self>(Self::AXES.select(paths));
        let built = build(ctx, &variant).unwrap_or_else(|e| panic!("building reduce_probe: {e}"));
        ReduceProbe {
            variant: variant.paths,
            layout: built.layout,
            pipelines: built.pipelines,
        }
    }

    pub fn variant(&self) -> KernelPaths {
        self.variant
    }

    /// Reduces each of the `x.len() / n` rows of `x` with workgroups of `wg` invocations.
    pub fn run(&self, ctx: &GpuContext, wg: u32, x: &[f32], n: u32) -> ProbeOutput {
        let index = Self::WORKGROUP_SIZES
            .iter()
            .position(|&w| w == wg)
            .expect("a probe workgroup size");
        let rows = (x.len() / n as usize) as u64;
        let input = upload(ctx, "probe x", bytemuck::cast_slice(x)).unwrap();
        let sums = poisoned_f32(ctx, "probe sums", 2 * rows);
        let seen = poisoned_f32(ctx, "probe seen", rows * u64::from(wg));
        let params = uniform(ctx, "probe params", &[n, 0, 0, 0]);
        let group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("probe"),
            layout: &self.layout,
            entries: &[
                (0, input.as_entire_binding()),
                (1, sums.as_entire_binding()),
                (2, seen.as_entire_binding()),
                (3, params.as_entire_binding()),
            ]
            .map(|(binding, resource)| wgpu::BindGroupEntry { binding, resource }),
        });
        ctx.run_pass("probe", |pass| {
            pass.set_pipeline(&self.pipelines[index]);
            pass.set_bind_group(0, &group, &[]);
            pass.dispatch_workgroups(rows as u32, 1, 1);
        })
        .unwrap();
        ProbeOutput {
            sums: read_back_f32(ctx, &sums, 0..8 * rows).unwrap(),
            seen: read_back_f32(ctx, &seen, 0..4 * rows * u64::from(wg)).unwrap(),
        }
    }
}
