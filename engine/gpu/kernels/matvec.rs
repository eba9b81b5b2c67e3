//! `matvec`: `y = W x` or `y += W x` for up to [`MAX_BATCH`] input vectors, reading the GGUF
//! blocks of W in place (wgsl/matvec.wgsl).
//!
//! # Use
//!
//! At load time: [`MatVec::new`] once per model, then [`MatVec::bind`] once per weight tensor
//! and use (it checks every shape and buffer size, splits a tensor larger than one binding into
//! row ranges and builds their bind groups). Per step: [`MatVec::encode`] records the dispatches.
//!
//! # Where the batch size comes from
//!
//! The kernel reads B, the number of input vectors, from the shared [`Step`](crate::gpu::Step)
//! uniform (`n_tokens`), so bind groups never change. `encode`'s `n_tokens` must be the same
//! number: it picks the pipeline compiled for at most 1, 2, 4 or 8 vectors (the accumulators are
//! unrolled for that capacity) and leaves the grid alone, which depends on the rows only. A Step
//! asking for more vectors than the chosen pipeline holds computes only as many as it holds.
//!
//! # Fusions
//!
//! [`MatVec::bind_fused`] takes a [`MatVecFusion`]: an RMSNorm of x folded into the product (the
//! pre-norm of QKV and of the MLP: x is then the residual stream) and the gate/up pairing that
//! writes `silu(gate)·up` (W holds the gate rows followed by the up rows). Each saves the
//! dependent dispatches of the ops it folds in; the math is in wgsl/matvec.wgsl.
//!
//! # The integer path
//!
//! On int-dot variants ([`KernelPaths::int_dot`]), [`MatVecFusion::q8`] makes a binding read x
//! as the 8-bit blocks [`QuantizeQ8`](super::quantize_q8::QuantizeQ8) wrote (the norm, if any,
//! folded into that quantization) and multiply with integer dot products (wgsl/matvec_q8.wgsl),
//! for the types of [`MatVec::Q8_TYPES`]. Same grid, rows, pairing and accumulation as the f32
//! path; the result is W·x̂ with x̂ the quantized x.

use super::quantize_q8::{Q8_BLOCK, Q8Vectors};
use super::tensors::{bind_group, checked_row_bytes};
use crate::gpu::activations::Activations;
use crate::gpu::buffers::{Grid, Window, split_rows, storage_buffer, uniform};
use crate::gpu::context::GpuContext;
use crate::gpu::error::GpuError;
use crate::gpu::kernel::{
    Kernel, KernelSource, KernelVariant, PipelineSpec, WgslModule, build, wgsl,
};
use crate::gpu::layout::Slot;
use crate::gpu::paths::{Axes, KernelPaths};
use crate::gpu::step::StepBuffer;
use crate::quant::GgmlType;
use std::sync::OnceLock;

/// Most input vectors one dispatch multiplies.
pub const MAX_BATCH: u32 = 8;
/// The batch capacities pipelines are compiled for; `encode` takes the smallest that holds the
/// step's vectors.
pub const BATCH_CAPACITIES: [u32; 4] = [1, 2, 4, 8];
/// Invocations per workgroup (`override WG`).
const WG: u32 = 64;
/// Output rows per workgroup (`const ROWS` of the WGSL).
const ROWS_PER_WORKGROUP: u64 = 4;
/// w, x, y, params, step, w and x again as 16-byte words (`w16`, `x16`), the norm weight (`nw`),
/// the q8 codes and scales of the integer path (`xq`, `xd`).
const SLOTS: &[Slot] = &[
    Slot::Read,
    Slot::Read,
    Slot::ReadWrite,
    Slot::Uniform,
    Slot::Uniform,
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::Read,
];
/// `Params::wide` bits (WIDE_X, WIDE_W of the WGSL).
const WIDE_X: u32 = 1;
const WIDE_W: u32 = 2;

/// `Params` of wgsl/matvec.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    cols: u32,
    units: u32,
    row_bytes: u32,
    w_byte: u32,
    x_index: u32,
    x_stride: u32,
    y_index: u32,
    y_stride: u32,
    accumulate: u32,
    wide: u32,
    eps: f32,
    pair_byte: u32,
    pad: [u32; 3],
}

/// How a row is cut into units (the part of a block one invocation decodes):
/// (elements per unit, units per block, elements per block, bytes per block).
fn unit_geometry(ty: GgmlType) -> (u64, u64, u64, u64) {
    let (elems, bytes) = ty.block_geometry();
    match ty {
        // One unit is 4 consecutive elements, treated as a "block" of 4.
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => (4, 1, 4, 4 * bytes),
        GgmlType::Q4_K | GgmlType::Q5_K => (32, 8, elems, bytes),
        GgmlType::Q6_K => (16, 16, elems, bytes),
        // Q8_0 and the 32-element legacy blocks.
        _ => (8, 4, elems, bytes),
    }
}

/// `window` grown to whole 16-byte words, for a `array<vec4<_>>` view of the same bytes; None when
/// the buffer or the binding limit has no room for the growth.
fn wide_window(window: Window, buffer: &wgpu::Buffer, max_binding: u64) -> Option<Window> {
    let size = window.size.next_multiple_of(16);
    (window.offset + size <= buffer.size() && size <= max_binding)
        .then_some(Window { size, ..window })
}

/// The weight tensor of a [`MatVecBinding`]: `rows` rows (outputs) of `cols` elements (inputs) of
/// type `ty`, stored as GGUF stores them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct MatVecShape {
    pub ty: GgmlType,
    pub rows: u64,
    pub cols: u64,
}

/// What a mat-vec binding reads and writes.
#[derive(Clone, Copy)]
pub struct MatVecIo<'a> {
    /// The buffer holding W, whose first row starts at byte `weights_offset`, a multiple of 4
    /// (GGUF aligns tensor data to 32): several tensors may share one buffer, and tensors of one
    /// type and width stored back to back can be bound as one (a fused gate+up projection).
    pub weights: &'a wgpu::Buffer,
    pub weights_offset: u64,
    /// `[B, cols]` inputs; must not be the buffer `y` is in (wgpu rejects a buffer bound
    /// read-only and read-write in one dispatch).
    pub x: Activations<'a>,
    /// `[B, rows]` outputs.
    pub y: Activations<'a>,
    /// The model's step uniform; its `n_tokens` is B.
    pub step: &'a StepBuffer,
    /// `y += W x` (a residual add fused into the product) instead of `y = W x`.
    pub accumulate: bool,
    /// The largest B this binding will be encoded with (≤ [`MAX_BATCH`]): x and y are checked
    /// for this many rows.
    pub max_batch: u32,
}

/// An RMSNorm folded into a mat-vec: x is normed (`x / sqrt(mean x² + eps) · weight`) inside
/// the product.
#[derive(Clone, Copy)]
pub struct InputNorm<'a> {
    /// `cols` f32 values.
    pub weight: &'a wgpu::Buffer,
    pub eps: f32,
}

/// What [`MatVec::bind_fused`] folds into the product.
#[derive(Clone, Copy, Default)]
pub struct MatVecFusion<'a> {
    /// Norm x first (`cols` must be a multiple of 4).
    pub norm: Option<InputNorm<'a>>,
    /// W holds `2·rows` rows, the gate rows then the up rows, and `y = silu(W_gate x) ⊙ W_up x`
    /// (`rows` outputs). Refused with `accumulate`, or when W does not fit one binding.
    pub swiglu: bool,
    /// Multiply the 8-bit quantization of x held here (written by `QuantizeQ8` before the
    /// mat-vec runs; the vectors of `cols` columns) instead of x: the integer path. Needs an
    /// int-dot variant, a type of [`MatVec::Q8_TYPES`] and no `norm` (fold it into the
    /// quantization). `MatVecIo::x` is still checked but not read.
    pub q8: Option<&'a Q8Vectors>,
}

/// The mat-vec kernel: one pipeline per (type, batch capacity, folded norm).
pub struct MatVec {
    variant: KernelPaths,
    layout: wgpu::BindGroupLayout,
    /// Bound as `w16`/`x16` where the data is not 16-byte aligned (the kernel then reads w, x).
    placeholder: wgpu::Buffer,
    /// `[type index][capacity index]`, flattened: parallel to TYPES × BATCH_CAPACITIES.
    pipelines: Vec<wgpu::ComputePipeline>,
    /// Per type, the NORM pipelines by capacity, once a binding has asked for them.
    norm_pipelines: Vec<OnceLock<Vec<wgpu::ComputePipeline>>>,
    /// Per type of Q8_TYPES, the integer pipelines by capacity, once a binding has asked.
    q8_pipelines: Vec<OnceLock<Vec<wgpu::ComputePipeline>>>,
}

/// Which pipeline family a binding runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Input {
    F32,
    /// x RMS-normed inside the product.
    Normed,
    /// x as q8 blocks; the index in `MatVec::Q8_TYPES`.
    Q8(usize),
}

/// One weight tensor bound for [`MatVec::encode`]: a bind group and grid per row range.
pub struct MatVecBinding {
    type_index: usize,
    input: Input,
    max_batch: u32,
    ranges: Vec<(wgpu::BindGroup, Grid)>,
}

impl MatVecBinding {
    /// The grid of each dispatch, one per row range (several when W exceeds a binding).
    pub fn grids(&self) -> impl Iterator<Item = Grid> + '_ {
        self.ranges.iter().map(|(_, grid)| *grid)
    }
}

/// The pipelines of one type and input (f32, normed f32 or q8), one per batch capacity.
fn specs(ty: GgmlType, input: Input) -> Vec<PipelineSpec> {
    let (_, lanes, block_elems, block_bytes) = unit_geometry(ty);
    let norm = input == Input::Normed;
    let (entry_point, what) = match input {
        Input::Q8(_) => ("matvec_q8", "q8"),
        Input::Normed => ("matvec", "normed f32"),
        Input::F32 => ("matvec", "f32"),
    };
    BATCH_CAPACITIES
        .into_iter()
        .map(|capacity| PipelineSpec {
            label: format!("matvec {ty} batch {capacity} x {what}"),
            entry_point,
            constants: vec![
                ("WG", f64::from(WG)),
                ("MAX_B", f64::from(capacity)),
                ("NORM", f64::from(u8::from(norm))),
                ("GGML_TYPE", f64::from(ty.id())),
                ("UNIT_LANES", lanes as f64),
                ("BLOCK_ELEMS", block_elems as f64),
                ("BLOCK_BYTES", block_bytes as f64),
            ],
        })
        .collect()
}

impl Kernel for MatVec {
    const NAME: &'static str = "matvec";
    const AXES: Axes = Axes {
        subgroup: true,
        int_dot: true,
        ..Axes::NONE
    };

    fn source(variant: KernelPaths) -> KernelSource {
        let mut module = WgslModule::new(variant)
            .with(wgsl::BYTES)
            .with(wgsl::BLOCKS)
            .with(wgsl::BYTE_FLOATS)
            .with(wgsl::GRID)
            .with(wgsl::STEP)
            .with(wgsl::reduction(variant))
            .with(wgsl::row_reduction(variant))
            .with(wgsl::MATVEC);
        // Every pipeline, for translation; `new` builds the plain ones, `bind_fused` each type's
        // NORM and q8 ones when a model first asks for them.
        let mut pipelines: Vec<PipelineSpec> = [Input::F32, Input::Normed]
            .into_iter()
            .flat_map(|input| Self::TYPES.into_iter().flat_map(move |ty| specs(ty, input)))
            .collect();
        if variant.int_dot {
            module = module.with(wgsl::MATVEC_Q8);
            pipelines.extend(
                Self::Q8_TYPES
                    .into_iter()
                    .enumerate()
                    .flat_map(|(i, ty)| specs(ty, Input::Q8(i))),
            );
        }
        KernelSource {
            module,
            slots: SLOTS,
            pipelines,
        }
    }
}

impl MatVec {
    /// The weight types the kernel multiplies.
    pub const TYPES: [GgmlType; 11] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ];

    /// The weight types the integer path multiplies (their blocks split into groups of 32, 16
    /// or 8 elements inside one 32-element block of x).
    pub const Q8_TYPES: [GgmlType; 4] = [
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ];

    /// Builds the variant `paths` selects (subgroup reduction or the workgroup-memory tree; with
    /// the integer path or without).
    pub fn new(ctx: &GpuContext, paths: KernelPaths) -> Result<Self, GpuError> {
        let mut variant = KernelVariant::of::<Self>(Self::AXES.select(paths));
        variant.source.pipelines = Self::TYPES
            .into_iter()
            .flat_map(|ty| specs(ty, Input::F32))
            .collect();
        let built = build(ctx, &variant)?;
        Ok(MatVec {
            variant: variant.paths,
            layout: built.layout,
            placeholder: storage_buffer(ctx, "matvec wide placeholder", 16)?,
            pipelines: built.pipelines,
            norm_pipelines: Self::TYPES.map(|_| OnceLock::new()).to_vec(),
            q8_pipelines: Self::Q8_TYPES.map(|_| OnceLock::new()).to_vec(),
        })
    }

    /// The pipelines of a NORM or q8 binding of the type at `type_index`, built on first use (a
    /// model needs them for a few types, and every pipeline costs build time: seconds on
    /// lavapipe).
    fn lazy_pipelines(
        &self,
        ctx: &GpuContext,
        type_index: usize,
        input: Input,
    ) -> Result<&[wgpu::ComputePipeline], GpuError> {
        let (slot, ty) = match input {
            Input::Q8(i) => (&self.q8_pipelines[i], Self::Q8_TYPES[i]),
            _ => (&self.norm_pipelines[type_index], Self::TYPES[type_index]),
        };
        if slot.get().is_none() {
            let mut variant = KernelVariant::of::<Self>(self.variant);
            variant.source.pipelines = specs(ty, input);
            // Two threads racing here build the same pipelines; either result serves.
            let _ = slot.set(build(ctx, &variant)?.pipelines);
        }
        Ok(slot.get().expect("set above"))
    }

    /// The variant that was built.
    pub fn variant(&self) -> KernelPaths {
        self.variant
    }

    /// Binds one weight tensor with its inputs and outputs, checking every shape and size first.
    pub fn bind(
        &self,
        ctx: &GpuContext,
        shape: MatVecShape,
        io: &MatVecIo<'_>,
    ) -> Result<MatVecBinding, GpuError> {
        self.bind_within(ctx, shape, io, ctx.max_binding_size())
    }

    /// [`MatVec::bind`] with bindings of at most `max_binding` bytes (at most the device's
    /// limit), so a test splits W into row ranges the same way on every device.
    pub fn bind_within(
        &self,
        ctx: &GpuContext,
        shape: MatVecShape,
        io: &MatVecIo<'_>,
        max_binding: u64,
    ) -> Result<MatVecBinding, GpuError> {
        self.bind_fused_within(ctx, shape, io, MatVecFusion::default(), max_binding)
    }

    /// [`MatVec::bind`] with the ops `fusion` folds into the product.
    pub fn bind_fused(
        &self,
        ctx: &GpuContext,
        shape: MatVecShape,
        io: &MatVecIo<'_>,
        fusion: MatVecFusion<'_>,
    ) -> Result<MatVecBinding, GpuError> {
        self.bind_fused_within(ctx, shape, io, fusion, ctx.max_binding_size())
    }

    /// [`MatVec::bind_fused`] with bindings of at most `max_binding` bytes.
    pub fn bind_fused_within(
        &self,
        ctx: &GpuContext,
        shape: MatVecShape,
        io: &MatVecIo<'_>,
        fusion: MatVecFusion<'_>,
        max_binding: u64,
    ) -> Result<MatVecBinding, GpuError> {
        let MatVecShape { ty, rows, cols } = shape;
        let max_binding = max_binding.min(ctx.max_binding_size());
        let type_index =
            Self::TYPES
                .iter()
                .position(|&t| t == ty)
                .ok_or(GpuError::UnsupportedType {
                    kernel: Self::NAME,
                    ty,
                })?;
        let shape_error = |message: String| GpuError::Shape {
            kernel: Self::NAME,
            message,
        };
        if io.max_batch == 0 || io.max_batch > MAX_BATCH {
            return Err(shape_error(format!(
                "a batch of up to {} vectors (expected 1..={MAX_BATCH})",
                io.max_batch
            )));
        }
        if rows == 0 {
            return Err(shape_error("a weight tensor of 0 rows".into()));
        }
        if !io.weights_offset.is_multiple_of(4) {
            return Err(shape_error(format!(
                "W starts at byte {}, not a multiple of 4",
                io.weights_offset
            )));
        }
        if fusion.swiglu && io.accumulate {
            return Err(shape_error(
                "a gate/up pairing cannot accumulate into y".into(),
            ));
        }
        let w_rows = if fusion.swiglu { 2 * rows } else { rows };
        let row_bytes = checked_row_bytes(
            Self::NAME,
            "W",
            ty,
            w_rows,
            cols,
            io.weights,
            io.weights_offset,
        )?;
        let input = match (fusion.norm, fusion.q8) {
            (None, None) => Input::F32,
            (Some(_), None) => Input::Normed,
            (None, Some(q8)) => {
                if !self.variant.int_dot {
                    return Err(shape_error(format!(
                        "q8 inputs need an int-dot variant, not {}",
                        self.variant
                    )));
                }
                let index = Self::Q8_TYPES.iter().position(|&t| t == ty).ok_or(
                    GpuError::UnsupportedType {
                        kernel: "matvec_q8",
                        ty,
                    },
                )?;
                q8.check(Self::NAME, cols, io.max_batch)?;
                Input::Q8(index)
            }
            (Some(_), Some(_)) => {
                return Err(shape_error(
                    "a norm is folded into the quantization of q8 inputs, not the product".into(),
                ));
            }
        };
        if input != Input::F32 {
            self.lazy_pipelines(ctx, type_index, input)?;
        }
        let norm = fusion
            .norm
            .map(|norm| {
                if !cols.is_multiple_of(4) {
                    return Err(shape_error(format!(
                        "a folded norm needs rows of a multiple of 4 elements, not {cols}"
                    )));
                }
                let bytes = 4 * cols;
                if norm.weight.size() < bytes || bytes > max_binding {
                    return Err(shape_error(format!(
                        "the norm weight needs {bytes} bytes in one binding; its buffer has {}",
                        norm.weight.size()
                    )));
                }
                Ok((
                    norm,
                    Window {
                        offset: 0,
                        size: bytes,
                        skip: 0,
                    },
                ))
            })
            .transpose()?;
        let align = ctx.binding_alignment();
        let batch = u64::from(io.max_batch);
        let x =
            io.x.bind(Self::NAME, "x", batch, cols, max_binding, align)?;
        let y =
            io.y.bind(Self::NAME, "y", batch, rows, max_binding, align)?;
        let step = io.step.buffer.as_entire_binding();
        // x16: the x window again, whole 16-byte words, when every row starts on one.
        let x_wide = (x.window.offset.is_multiple_of(16)
            && x.index.is_multiple_of(4)
            && (io.max_batch == 1 || x.stride.is_multiple_of(4)))
        .then(|| wide_window(x.window, io.x.buffer, max_binding))
        .flatten();
        let (unit_elems, ..) = unit_geometry(ty);
        let units = cols.div_ceil(unit_elems);
        let max_per_dimension = ctx.device.limits().max_compute_workgroups_per_dimension;
        let ranges = split_rows("a matvec weight", w_rows, &[row_bytes], max_binding, align)?;
        if fusion.swiglu && ranges.len() > 1 {
            return Err(GpuError::TooLarge {
                what: "a gate/up pairing's weights (bytes)".into(),
                size: w_rows * row_bytes,
                limit: max_binding,
                limit_name: "max_storage_buffer_binding_size",
            });
        }
        // A pairing's single range holds the gate and the up rows; it writes `rows` outputs.
        let (pair_byte, outputs_per_workgroup) = match fusion.swiglu {
            true => (rows * row_bytes, ROWS_PER_WORKGROUP / 2),
            false => (0, ROWS_PER_WORKGROUP),
        };
        let ranges = ranges
            .into_iter()
            .map(|range| {
                let range = match fusion.swiglu {
                    true => 0..rows,
                    false => range,
                };
                let len = range.end - range.start;
                let w = Window::around(
                    io.weights_offset + range.start * row_bytes,
                    pair_byte + len * row_bytes,
                    align,
                );
                // w16: only Q4_K reads it, and only when every block starts on 16 bytes.
                let w_wide = (ty == GgmlType::Q4_K
                    && w.offset.is_multiple_of(16)
                    && w.skip.is_multiple_of(16)
                    && row_bytes.is_multiple_of(16))
                .then(|| wide_window(w, io.weights, max_binding))
                .flatten();
                let wide =
                    u32::from(x_wide.is_some()) * WIDE_X + u32::from(w_wide.is_some()) * WIDE_W;
                let placeholder = self.placeholder.as_entire_binding();
                // xq, xd: the whole q8 vectors of a q8 binding (vector b at b·cols/4, b·cols/32).
                let batch = u64::from(io.max_batch);
                let (xq, xd) = match fusion.q8 {
                    Some(q8) => (
                        Window::around(0, batch * cols, align).binding(&q8.codes),
                        Window::around(0, 4 * batch * cols / Q8_BLOCK, align).binding(&q8.scales),
                    ),
                    None => (placeholder.clone(), placeholder.clone()),
                };
                // split_rows keeps each range inside one binding (< 2^31 bytes): these fit u32.
                let params = Params {
                    rows: len as u32,
                    cols: cols as u32,
                    units: units as u32,
                    row_bytes: row_bytes as u32,
                    w_byte: w.skip as u32,
                    x_index: x.index,
                    x_stride: x.stride,
                    y_index: y.index + range.start as u32,
                    y_stride: y.stride,
                    accumulate: u32::from(io.accumulate),
                    wide,
                    eps: norm.map_or(0.0, |(n, _)| n.eps),
                    pair_byte: pair_byte as u32,
                    pad: [0; 3],
                };
                let params = uniform(ctx, "matvec params", &params);
                let group = bind_group(
                    ctx,
                    "matvec",
                    &self.layout,
                    vec![
                        w.binding(io.weights),
                        x.window.binding(io.x.buffer),
                        y.window.binding(io.y.buffer),
                        params.as_entire_binding(),
                        step.clone(),
                        w_wide.map_or(placeholder.clone(), |w| w.binding(io.weights)),
                        x_wide.map_or(placeholder.clone(), |x| x.binding(io.x.buffer)),
                        norm.map_or(placeholder, |(n, window)| window.binding(n.weight)),
                        xq,
                        xd,
                    ],
                );
                let workgroups = len.div_ceil(outputs_per_workgroup);
                Ok((group, Grid::for_workgroups(workgroups, max_per_dimension)?))
            })
            .collect::<Result<_, GpuError>>()?;
        Ok(MatVecBinding {
            type_index,
            input,
            max_batch: io.max_batch,
            ranges,
        })
    }

    /// Records the dispatches of `binding` for a step of `n_tokens` input vectors (the Step's
    /// `n_tokens`): the pipeline of the smallest capacity that holds them, one dispatch per row
    /// range. Refuses more vectors than the binding was checked for.
    pub fn encode(
        &self,
        pass: &mut wgpu::ComputePass,
        binding: &MatVecBinding,
        n_tokens: u32,
    ) -> Result<(), GpuError> {
        if n_tokens > binding.max_batch {
            return Err(GpuError::Shape {
                kernel: Self::NAME,
                message: format!(
                    "a step of {n_tokens} vectors on a binding checked for at most {}",
                    binding.max_batch
                ),
            });
        }
        let capacity = BATCH_CAPACITIES
            .iter()
            .position(|&c| c >= n_tokens)
            .expect("n_tokens ≤ max_batch ≤ MAX_BATCH");
        let pipeline = match binding.input {
            Input::F32 => &self.pipelines[binding.type_index * BATCH_CAPACITIES.len() + capacity],
            Input::Normed => &self.norm_pipelines[binding.type_index]
                .get()
                .expect("bind_fused built the NORM pipelines")[capacity],
            Input::Q8(i) => &self.q8_pipelines[i]
                .get()
                .expect("bind_fused built the q8 pipelines")[capacity],
        };
        pass.set_pipeline(pipeline);
        for (group, grid) in &binding.ranges {
            pass.set_bind_group(0, group, &[]);
            grid.dispatch(pass);
        }
        Ok(())
    }
}
