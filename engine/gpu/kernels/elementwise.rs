//! `elementwise`: SwiGLU, the residual add and the sigmoid output gate over strided views
//! (wgsl/elementwise.wgsl).

use super::support::{self, View, entry, read_binding, shape_error, step_wgsl, view_binding};
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

const ELEMENTWISE: WgslFile = step_wgsl!("elementwise.wgsl");
/// a, b, out, params, step.
const SLOTS: &[Slot] = &[
    Slot::Read,
    Slot::Read,
    Slot::ReadWrite,
    Slot::Uniform,
    Slot::Uniform,
];
const WG: u32 = 256;
/// Entry points, in pipeline order.
const ENTRY_POINTS: [&str; 3] = ["swiglu", "add", "sigmoid_gate"];

/// `Params` of wgsl/elementwise.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    a: support::ViewParams,
    b: support::ViewParams,
    out: support::ViewParams,
    heads: u32,
    width: u32,
    pad: [u32; 2],
}

/// The elements an op covers: `heads` heads of `width` values per token, for up to `max_tokens`
/// tokens (one head of the whole row for plain `[n_tokens, width]` activations).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ElementwiseShape {
    pub heads: u32,
    pub width: u32,
    pub max_tokens: u32,
}

/// One op and its operands. The written operand must not share a buffer with a read one (wgpu
/// forbids a read-only and a read-write binding of one buffer in a dispatch); the read operands
/// may share one (gate and up halves of one fused projection).
#[derive(Clone, Copy, Debug)]
pub enum ElementwiseOp<'a> {
    /// `out = silu(gate) ⊙ up`.
    SwiGlu {
        gate: View<'a>,
        up: View<'a>,
        out: View<'a>,
    },
    /// `x += y` (y may be one token's values that every token adds, token stride 0: a bias).
    Add { x: View<'a>, y: View<'a> },
    /// `o ⊙= σ(gate)`.
    SigmoidGate { o: View<'a>, gate: View<'a> },
}

/// The elementwise kernel: one pipeline per op.
pub struct Elementwise {
    layout: wgpu::BindGroupLayout,
    /// Parallel to `ENTRY_POINTS`.
    pipelines: Vec<wgpu::ComputePipeline>,
    placeholder: wgpu::Buffer,
    max_per_dimension: u32,
}

/// An op bound for [`Elementwise::encode`].
pub struct ElementwiseBinding {
    group: wgpu::BindGroup,
    pipeline: usize,
    per_token: u64,
    max_tokens: u32,
}

impl Kernel for Elementwise {
    const NAME: &'static str = "elementwise";
    const AXES: Axes = Axes::NONE;

    fn source(variant: KernelPaths) -> KernelSource {
        let module = WgslModule::new(variant)
            .with(wgsl::GRID)
            .with(wgsl::STEP)
            .with(support::VIEW)
            .with(ELEMENTWISE);
        let pipelines = ENTRY_POINTS
            .iter()
            .map(|&entry_point| PipelineSpec {
                label: format!("elementwise {entry_point}"),
                entry_point,
                constants: vec![("WG", f64::from(WG))],
            })
            .collect();
        KernelSource {
            module,
            slots: SLOTS,
            pipelines,
        }
    }
}

impl Elementwise {
    /// Builds the kernel (it has one variant, so `paths` only has to be valid for the device).
    pub fn new(ctx: &GpuContext, paths: KernelPaths) -> Result<Self, GpuError> {
        let variant = KernelVariant::of::<Self>(Self::AXES.select(paths));
        let built = build(ctx, &variant)?;
        Ok(Elementwise {
            layout: built.layout,
            pipelines: built.pipelines,
            placeholder: support::placeholder(ctx),
            max_per_dimension: ctx.device.limits().max_compute_workgroups_per_dimension,
        })
    }

    /// Binds `op` over elements of `shape`, the token count read from `step`.
    pub fn bind(
        &self,
        ctx: &GpuContext,
        shape: ElementwiseShape,
        op: ElementwiseOp<'_>,
        step: &StepBuffer,
    ) -> Result<ElementwiseBinding, GpuError> {
        let ElementwiseShape {
            heads,
            width,
            max_tokens,
        } = shape;
        if heads == 0 || width == 0 {
            return Err(shape_error(
                Self::NAME,
                format!("{heads} heads of {width} values: both must be positive"),
            ));
        }
        let (pipeline, a, b, out) = match op {
            ElementwiseOp::SwiGlu { gate, up, out } => (0, ("gate", gate), Some(("up", up)), out),
            ElementwiseOp::Add { x, y } => (1, ("y", y), None, x),
            ElementwiseOp::SigmoidGate { o, gate } => (2, ("gate", gate), None, o),
        };
        for (name, view) in std::iter::once(a).chain(b) {
            if view.buffer == out.buffer {
                return Err(shape_error(
                    Self::NAME,
                    format!(
                        "{} reads {name} from the buffer it writes: give it a separate buffer",
                        ENTRY_POINTS[pipeline]
                    ),
                ));
            }
        }
        let out_binding = view_binding(ctx, Self::NAME, "out", &out, max_tokens, heads, width)?;
        let a_binding = read_binding(ctx, Self::NAME, a.0, &a.1, max_tokens, heads, width)?;
        let b_binding = match b {
            Some((name, view)) => {
                read_binding(ctx, Self::NAME, name, &view, max_tokens, heads, width)?
            }
            None => self.placeholder.as_entire_binding(),
        };
        let params = uniform(
            ctx,
            "elementwise params",
            &Params {
                a: a.1.params(),
                b: b.map_or(a.1, |(_, v)| v).params(),
                out: out.params(),
                heads,
                width,
                pad: [0; 2],
            },
        );
        let group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(ENTRY_POINTS[pipeline]),
            layout: &self.layout,
            entries: &[
                entry(0, a_binding),
                entry(1, b_binding),
                entry(2, out_binding),
                entry(3, params.as_entire_binding()),
                entry(4, step.buffer.as_entire_binding()),
            ],
        });
        let binding = ElementwiseBinding {
            group,
            pipeline,
            per_token: u64::from(heads) * u64::from(width),
            max_tokens,
        };
        support::grid(
            self.workgroups(&binding, max_tokens),
            self.max_per_dimension,
        )?;
        Ok(binding)
    }

    fn workgroups(&self, binding: &ElementwiseBinding, n_tokens: u32) -> u64 {
        (u64::from(n_tokens.min(binding.max_tokens)) * binding.per_token).div_ceil(u64::from(WG))
    }

    /// Records the dispatch for a step of `n_tokens` tokens (at most the binding's
    /// `max_tokens`); returns what it recorded: two operands read and one written per element.
    pub fn encode(
        &self,
        pass: &mut wgpu::ComputePass,
        binding: &ElementwiseBinding,
        n_tokens: u32,
    ) -> Result<Recorded, GpuError> {
        pass.set_pipeline(&self.pipelines[binding.pipeline]);
        pass.set_bind_group(0, &binding.group, &[]);
        support::grid_within_bound(self.workgroups(binding, n_tokens), self.max_per_dimension)
            .dispatch(pass);
        let elements = u64::from(n_tokens.min(binding.max_tokens)) * binding.per_token;
        Ok(Recorded::new(Self::NAME, 1, OpBytes::new(0, 12 * elements)))
    }
}
