//! `rms_norm`: RMSNorm over rows that may sit at a stride inside wider rows, in place or not,
//! with or without a weight (wgsl/rms_norm.wgsl).

use super::support::{self, View, entry, shape_error, step_wgsl, view_binding, words};
use crate::gpu::buffers::uniform;
use crate::gpu::context::GpuContext;
use crate::gpu::error::GpuError;
use crate::gpu::kernel::{
    Kernel, KernelSource, KernelVariant, PipelineSpec, WgslFile, WgslModule, build, wgsl,
};
use crate::gpu::layout::Slot;
use crate::gpu::paths::{Axes, KernelPaths};
use crate::gpu::profile::{OpBytes, Recorded};
use crate::gpu::step::StepBuffer;

const RMS_NORM: WgslFile = step_wgsl!("rms_norm.wgsl");
/// x, y, w, params, step.
const SLOTS: &[Slot] = &[
    Slot::Read,
    Slot::ReadWrite,
    Slot::Read,
    Slot::Uniform,
    Slot::Uniform,
];
/// Workgroup sizes; the small one serves rows of at most `SMALL_ROW` values.
pub const WORKGROUPS: [u32; 2] = [64, 256];
const SMALL_ROW: u32 = 512;

/// The index in [`WORKGROUPS`] of the workgroup size a row of `n` values is normed with. Its
/// lanes' sums and their order follow from it, so a kernel that must reproduce this norm's bits
/// (the mat-mul's prefill norm fold) takes the same size.
pub fn workgroup_index(n: u32) -> usize {
    usize::from(n > SMALL_ROW)
}

/// `Params` of wgsl/rms_norm.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    src: support::ViewParams,
    dst: support::ViewParams,
    n: u32,
    rows_per_token: u32,
    eps: f32,
    has_weight: u32,
}

/// The rows a binding normalises: `rows_per_token` rows of `n` values per token, for up to
/// `max_tokens` tokens.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RmsNormShape {
    pub n: u32,
    pub rows_per_token: u32,
    pub eps: f32,
    pub max_tokens: u32,
}

/// Where the rows are read and written. In a view, each of a token's rows is one head.
#[derive(Clone, Copy, Debug)]
pub enum NormIo<'a> {
    /// `y = norm(x)`; x and y must be different buffers.
    Out { x: View<'a>, y: View<'a> },
    /// `y = norm(y)`.
    InPlace(View<'a>),
}

/// The RMSNorm kernel: pipelines for both workgroup sizes, in place and not.
pub struct RmsNorm {
    variant: KernelPaths,
    layout: wgpu::BindGroupLayout,
    /// Index `2·wg_index + in_place`.
    pipelines: Vec<wgpu::ComputePipeline>,
    placeholder: wgpu::Buffer,
    max_per_dimension: u32,
}

/// Rows bound for [`RmsNorm::encode`].
pub struct RmsNormBinding {
    group: wgpu::BindGroup,
    pipeline: usize,
    rows_per_token: u32,
    max_tokens: u32,
    /// Values per row, and whether a weight is read.
    n: u32,
    weighted: bool,
}

impl Kernel for RmsNorm {
    const NAME: &'static str = "rms_norm";
    const AXES: Axes = Axes {
        subgroup: true,
        ..Axes::NONE
    };

    fn source(variant: KernelPaths) -> KernelSource {
        let module = WgslModule::new(variant)
            .with(wgsl::reduction(variant))
            .with(wgsl::GRID)
            .with(wgsl::STEP)
            .with(support::VIEW)
            .with(wgsl::STRIDED_SQUARES)
            .with(RMS_NORM);
        let pipelines = WORKGROUPS
            .iter()
            .flat_map(|&wg| {
                [false, true].map(|in_place| PipelineSpec {
                    label: format!("rms_norm WG={wg} in_place={in_place}"),
                    entry_point: "main",
                    constants: vec![("WG", f64::from(wg)), ("IN_PLACE", f64::from(in_place))],
                })
            })
            .collect();
        KernelSource {
            module,
            slots: SLOTS,
            pipelines,
        }
    }
}

impl RmsNorm {
    /// Builds the variant of `paths` (subgroup reduction where allowed).
    pub fn new(ctx: &GpuContext, paths: KernelPaths) -> Result<Self, GpuError> {
        let variant = KernelVariant::of::<Self>(Self::AXES.select(paths));
        let built = build(ctx, &variant)?;
        Ok(RmsNorm {
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

    /// Binds rows of `shape` read and written through `io`, scaled by `weight` (`n` f32; None for
    /// the weightless norm), the token count read from `step`. Checks the views and buffer sizes
    /// for `shape.max_tokens` tokens.
    pub fn bind(
        &self,
        ctx: &GpuContext,
        shape: RmsNormShape,
        io: NormIo<'_>,
        weight: Option<&wgpu::Buffer>,
        step: &StepBuffer,
    ) -> Result<RmsNormBinding, GpuError> {
        let RmsNormShape {
            n,
            rows_per_token,
            eps,
            max_tokens,
        } = shape;
        if n == 0 || rows_per_token == 0 {
            return Err(shape_error(
                Self::NAME,
                format!("rows of {n} values, {rows_per_token} per token: both must be positive"),
            ));
        }
        let (x, y, in_place) = match io {
            NormIo::Out { x, y } => {
                if x.buffer == y.buffer {
                    return Err(shape_error(
                        Self::NAME,
                        "x and y are the same buffer: use NormIo::InPlace",
                    ));
                }
                (x, y, false)
            }
            NormIo::InPlace(y) => (y, y, true),
        };
        let y_binding = view_binding(ctx, Self::NAME, "y", &y, max_tokens, rows_per_token, n)?;
        let x_binding = if in_place {
            self.placeholder.as_entire_binding()
        } else {
            view_binding(ctx, Self::NAME, "x", &x, max_tokens, rows_per_token, n)?
        };
        let w_binding = match weight {
            Some(w) => words(ctx, Self::NAME, "the weight", w, u64::from(n))?,
            None => self.placeholder.as_entire_binding(),
        };
        let params = uniform(
            ctx,
            "rms_norm params",
            &Params {
                src: x.params(),
                dst: y.params(),
                n,
                rows_per_token,
                eps,
                has_weight: u32::from(weight.is_some()),
            },
        );
        let group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("rms_norm"),
            layout: &self.layout,
            entries: &[
                entry(0, x_binding),
                entry(1, y_binding),
                entry(2, w_binding),
                entry(3, params.as_entire_binding()),
                entry(4, step.buffer.as_entire_binding()),
            ],
        });
        support::grid(
            u64::from(max_tokens) * u64::from(rows_per_token),
            self.max_per_dimension,
        )?;
        let wg_index = workgroup_index(n);
        Ok(RmsNormBinding {
            group,
            pipeline: 2 * wg_index + usize::from(in_place),
            rows_per_token,
            max_tokens,
            n,
            weighted: weight.is_some(),
        })
    }

    /// Records the dispatch for a step of `n_tokens` tokens (the count the Step holds; at most
    /// the binding's `max_tokens`, beyond which nothing is dispatched).
    /// Returns what it recorded: the weight read, each row read and written.
    pub fn encode(
        &self,
        pass: &mut wgpu::ComputePass,
        binding: &RmsNormBinding,
        n_tokens: u32,
    ) -> Result<Recorded, GpuError> {
        let rows = u64::from(n_tokens.min(binding.max_tokens)) * u64::from(binding.rows_per_token);
        pass.set_pipeline(&self.pipelines[binding.pipeline]);
        pass.set_bind_group(0, &binding.group, &[]);
        support::grid_within_bound(rows, self.max_per_dimension).dispatch(pass);
        let n = u64::from(binding.n);
        let weight = if binding.weighted { 4 * n } else { 0 };
        Ok(Recorded::new(
            Self::NAME,
            1,
            OpBytes::new(weight, 8 * rows * n),
        ))
    }
}
