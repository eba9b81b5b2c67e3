//! `quantize_q8`: f32 vectors (RMS-normed first where asked) to the 8-bit blocks of 32 the
//! integer mat-vec reads (wgsl/quantize_q8.wgsl, wgsl/matvec_q8.wgsl).
//!
//! # Use
//!
//! At load time: [`Q8Vectors::new`] for each distinct input a step quantizes (or one scratch
//! sized for the widest, since vectors of fewer columns use a prefix of it), [`QuantizeQ8::bind`]
//! for each producer, and [`super::matvec::MatVecFusion::q8`] for each mat-vec that reads it.
//! Per step: [`QuantizeQ8::encode`] before the mat-vecs; wgpu orders the write before their reads.

use super::matvec::InputNorm;
use super::support::{entry, shape_error, words};
use crate::gpu::activations::Activations;
use crate::gpu::buffers::{read_back, storage_buffer, uniform};
use crate::gpu::context::GpuContext;
use crate::gpu::error::GpuError;
use crate::gpu::kernel::{
    Kernel, KernelSource, KernelVariant, PipelineSpec, WgslModule, build, wgsl,
};
use crate::gpu::layout::Slot;
use crate::gpu::paths::{Axes, KernelPaths};
use crate::gpu::profile::{OpBytes, Recorded};
use crate::gpu::step::MAX_BATCH;
use crate::gpu::step::StepBuffer;

/// Elements per q8 block (one f32 scale each).
pub const Q8_BLOCK: u64 = 32;
/// Invocations per workgroup (`override WG`): one block each.
const WG: u32 = 64;

/// x, codes, scales, params, step, the norm weight.
const SLOTS: &[Slot] = &[
    Slot::Read,
    Slot::ReadWrite,
    Slot::ReadWrite,
    Slot::Uniform,
    Slot::Uniform,
    Slot::Read,
];

/// `Params` of wgsl/quantize_q8.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    cols: u32,
    x_index: u32,
    x_stride: u32,
    eps: f32,
}

/// One vector's codes and block scales, as read back.
pub type CodesAndScales = (Vec<i8>, Vec<f32>);

/// Up to `max_batch` vectors of up to `cols` elements as 8-bit blocks: vector b of c columns has
/// its codes (4 per u32, i8 each) at word b·c/4 of `codes` and its block scales at b·c/32 of
/// `scales` (wgsl/quantize_q8.wgsl).
pub struct Q8Vectors {
    pub codes: wgpu::Buffer,
    pub scales: wgpu::Buffer,
    pub cols: u64,
    pub max_batch: u32,
}

impl Q8Vectors {
    /// Room for `max_batch` vectors of `cols` (a multiple of 32) columns.
    pub fn new(
        ctx: &GpuContext,
        label: &str,
        cols: u64,
        max_batch: u32,
    ) -> Result<Q8Vectors, GpuError> {
        if cols == 0 || !cols.is_multiple_of(Q8_BLOCK) || max_batch == 0 {
            return Err(shape_error(
                QuantizeQ8::NAME,
                format!("{max_batch} vectors of {cols} columns (need whole blocks of 32)"),
            ));
        }
        let n = u64::from(max_batch) * cols;
        Ok(Q8Vectors {
            codes: storage_buffer(ctx, &format!("{label} q8 codes"), n)?,
            scales: storage_buffer(ctx, &format!("{label} q8 scales"), 4 * n / Q8_BLOCK)?,
            cols,
            max_batch,
        })
    }

    /// Bytes of one vector of `cols` columns: its codes and its blocks' scales.
    pub fn bytes_per_vector(cols: u64) -> u64 {
        cols + 4 * cols / Q8_BLOCK
    }

    /// Checks that `n` vectors of `cols` columns fit.
    pub(crate) fn check(&self, kernel: &'static str, cols: u64, n: u32) -> Result<(), GpuError> {
        if !cols.is_multiple_of(Q8_BLOCK) || cols > self.cols || n > self.max_batch {
            return Err(shape_error(
                kernel,
                format!(
                    "{n} q8 vectors of {cols} columns in room for {} of {} (whole blocks of 32)",
                    self.max_batch, self.cols
                ),
            ));
        }
        Ok(())
    }

    /// The first `n` vectors of `cols` columns as (codes, scales) per vector, for tests.
    pub fn read_back(
        &self,
        ctx: &GpuContext,
        cols: u64,
        n: u32,
    ) -> Result<Vec<CodesAndScales>, GpuError> {
        self.check(QuantizeQ8::NAME, cols, n)?;
        let n = u64::from(n);
        let codes = read_back(ctx, &self.codes, 0..n * cols)?;
        let scales = read_back(ctx, &self.scales, 0..4 * n * cols / Q8_BLOCK)?;
        let scales: &[f32] = bytemuck::cast_slice(&scales);
        let blocks = (cols / Q8_BLOCK) as usize;
        Ok((0..n as usize)
            .map(|b| {
                let q = codes[b * cols as usize..(b + 1) * cols as usize]
                    .iter()
                    .map(|&c| c as i8)
                    .collect();
                (q, scales[b * blocks..(b + 1) * blocks].to_vec())
            })
            .collect())
    }
}

/// The quantize kernel: plain and RMS-normed pipelines.
pub struct QuantizeQ8 {
    variant: KernelPaths,
    layout: wgpu::BindGroupLayout,
    /// No norm, the norm.
    pipelines: Vec<wgpu::ComputePipeline>,
    placeholder: wgpu::Buffer,
}

/// One producer bound for [`QuantizeQ8::encode`].
pub struct QuantizeQ8Binding {
    group: wgpu::BindGroup,
    norm: bool,
    max_batch: u32,
    workgroups: u32,
    /// Values per vector.
    cols: u64,
}

impl Kernel for QuantizeQ8 {
    const NAME: &'static str = "quantize_q8";
    const AXES: Axes = Axes {
        subgroup: true,
        ..Axes::NONE
    };

    fn source(variant: KernelPaths) -> KernelSource {
        let module = WgslModule::new(variant)
            .with(wgsl::reduction(variant))
            .with(wgsl::STEP)
            .with(wgsl::Q8_BLOCK)
            .with(wgsl::STRIDED_SQUARES)
            .with(wgsl::QUANTIZE_Q8);
        // Pipelines: no norm, the norm (indexed by `norm`).
        let pipelines = [false, true]
            .map(|norm| PipelineSpec {
                label: format!("quantize_q8 norm {norm}"),
                entry_point: "quantize_q8",
                constants: vec![("WG", f64::from(WG)), ("NORM", f64::from(u8::from(norm)))],
            })
            .to_vec();
        KernelSource {
            module,
            slots: SLOTS,
            pipelines,
        }
    }
}

impl QuantizeQ8 {
    /// Builds the variant of `paths` (the subgroup reduction of the norm where allowed).
    pub fn new(ctx: &GpuContext, paths: KernelPaths) -> Result<Self, GpuError> {
        let variant = KernelVariant::of::<Self>(Self::AXES.select(paths));
        let built = build(ctx, &variant)?;
        Ok(QuantizeQ8 {
            variant: variant.paths,
            layout: built.layout,
            pipelines: built.pipelines,
            placeholder: super::support::placeholder(ctx),
        })
    }

    pub fn variant(&self) -> KernelPaths {
        self.variant
    }

    /// Binds the quantization of up to `max_batch` vectors of `cols` columns of `x` (RMS-normed
    /// by `norm` first) into `out`, the token count read from `step`.
    #[allow(clippy::too_many_arguments)]
    pub fn bind(
        &self,
        ctx: &GpuContext,
        x: Activations<'_>,
        cols: u64,
        norm: Option<InputNorm<'_>>,
        out: &Q8Vectors,
        step: &StepBuffer,
        max_batch: u32,
    ) -> Result<QuantizeQ8Binding, GpuError> {
        if max_batch == 0 || max_batch > MAX_BATCH {
            return Err(shape_error(
                Self::NAME,
                format!("a batch of up to {max_batch} vectors (expected 1..={MAX_BATCH})"),
            ));
        }
        out.check(Self::NAME, cols, max_batch)?;
        let max_binding = ctx.max_binding_size();
        let source = x.buffer;
        let x = x.bind(
            Self::NAME,
            "x",
            u64::from(max_batch),
            cols,
            max_binding,
            ctx.binding_alignment(),
        )?;
        let elements = u64::from(max_batch) * cols;
        let nw = match norm {
            Some(n) => words(ctx, Self::NAME, "the norm weight", n.weight, cols)?,
            None => self.placeholder.as_entire_binding(),
        };
        let params = uniform(
            ctx,
            "quantize_q8 params",
            &Params {
                cols: cols as u32,
                x_index: x.index,
                x_stride: x.stride,
                eps: norm.map_or(0.0, |n| n.eps),
            },
        );
        let group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("quantize_q8"),
            layout: &self.layout,
            entries: &[
                entry(0, x.window.binding(source)),
                entry(
                    1,
                    words(ctx, Self::NAME, "the codes", &out.codes, elements / 4)?,
                ),
                entry(
                    2,
                    words(
                        ctx,
                        Self::NAME,
                        "the scales",
                        &out.scales,
                        elements / Q8_BLOCK,
                    )?,
                ),
                entry(3, params.as_entire_binding()),
                entry(4, step.buffer.as_entire_binding()),
                entry(5, nw),
            ],
        });
        Ok(QuantizeQ8Binding {
            group,
            norm: norm.is_some(),
            max_batch,
            workgroups: (cols / Q8_BLOCK).div_ceil(u64::from(WG)) as u32,
            cols,
        })
    }

    /// Records the quantization of a step of `n_tokens` vectors (the Step's count; refused past
    /// the binding's batch); returns what it recorded: the norm weight (where folded) and the f32
    /// vectors read, their codes and scales written.
    pub fn encode(
        &self,
        pass: &mut wgpu::ComputePass,
        binding: &QuantizeQ8Binding,
        n_tokens: u32,
    ) -> Result<Recorded, GpuError> {
        if n_tokens > binding.max_batch {
            return Err(shape_error(
                Self::NAME,
                format!(
                    "a step of {n_tokens} vectors on a binding checked for at most {}",
                    binding.max_batch
                ),
            ));
        }
        pass.set_pipeline(&self.pipelines[usize::from(binding.norm)]);
        pass.set_bind_group(0, &binding.group, &[]);
        pass.dispatch_workgroups(binding.workgroups, n_tokens, 1);
        let cols = binding.cols;
        let norm = if binding.norm { 4 * cols } else { 0 };
        let moved = u64::from(n_tokens) * (4 * cols + Q8Vectors::bytes_per_vector(cols));
        Ok(Recorded::new(Self::NAME, 1, OpBytes::new(norm, moved)))
    }
}
