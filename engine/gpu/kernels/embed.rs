//! `embed`: the embedding lookup (get_rows), `out[t, :] = dequant(E[ids[t], :])` for the step's
//! tokens, from the GGUF blocks of E in place (wgsl/embed.wgsl).
//!
//! The token count is the Step's `n_tokens`; `encode` takes the same number to size the grid (one
//! workgroup row per token), so the number of dispatches never depends on it. The ids are read on
//! the GPU from a `u32` buffer at an offset: prefill uploads the prompt there, and during decode
//! the argmax kernel writes the next token there. An id ≥ the table's row count gives a row of
//! zeros; nothing is read out of bounds (the host validates prompt ids first).

use super::tensors::{bind_group, checked_row_bytes};
use super::type_constants;
use crate::gpu::activations::Activations;
use crate::gpu::buffers::{Window, split_rows, uniform};
use crate::gpu::context::GpuContext;
use crate::gpu::error::GpuError;
use crate::gpu::kernel::{
    Kernel, KernelSource, KernelVariant, PipelineSpec, WgslModule, build, wgsl,
};
use crate::gpu::layout::Slot;
use crate::gpu::paths::{Axes, KernelPaths};
use crate::gpu::profile::{OpBytes, Recorded};
use crate::gpu::step::StepBuffer;
use crate::quant::GgmlType;

/// Invocations per workgroup (`override WG`).
const WG: u32 = 64;
/// Elements each invocation writes.
const PER_INVOCATION: u64 = 4;
/// e, ids, out, params, step.
const SLOTS: &[Slot] = &[
    Slot::Read,
    Slot::Read,
    Slot::ReadWrite,
    Slot::Uniform,
    Slot::Uniform,
];

/// `Params` of wgsl/embed.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    vocab: u32,
    first_row: u32,
    cols: u32,
    row_bytes: u32,
    e_byte: u32,
    ids_index: u32,
    out_index: u32,
    out_stride: u32,
    zero_invalid: u32,
    pad: [u32; 2],
}

/// The embedding table of an [`EmbedBinding`]: `rows` token rows of `cols` elements of `ty`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct EmbedShape {
    pub ty: GgmlType,
    pub rows: u64,
    pub cols: u64,
}

/// What an embedding binding reads and writes.
#[derive(Clone, Copy)]
pub struct EmbedIo<'a> {
    /// The buffer holding the table, whose first row starts at byte `table_offset` (a multiple
    /// of 4).
    pub table: &'a wgpu::Buffer,
    pub table_offset: u64,
    /// The token ids, `u32`, token 0's at element `ids_offset`.
    pub ids: &'a wgpu::Buffer,
    pub ids_offset: u64,
    /// `[n_tokens, cols]` outputs.
    pub out: Activations<'a>,
    /// The model's step uniform; its `n_tokens` is the number of ids looked up.
    pub step: &'a StepBuffer,
    /// The most tokens a step will look up: ids and out are checked for this many.
    pub max_tokens: u32,
}

/// The embedding kernel: one pipeline per type.
pub struct Embed {
    layout: wgpu::BindGroupLayout,
    /// Parallel to [`Embed::TYPES`].
    pipelines: Vec<wgpu::ComputePipeline>,
}

/// A table bound for [`Embed::encode`]: one bind group per row range that fits a binding.
pub struct EmbedBinding {
    type_index: usize,
    max_tokens: u32,
    /// Workgroups along a row (`cols / (4·WG)`, rounded up).
    chunks: u32,
    ranges: Vec<wgpu::BindGroup>,
    /// Bytes of one table row, and f32 values of one output row.
    row_bytes: u64,
    cols: u64,
}

impl EmbedBinding {
    /// How many row ranges (dispatches per step) the table was split into.
    pub fn range_count(&self) -> usize {
        self.ranges.len()
    }
}

impl Kernel for Embed {
    const NAME: &'static str = "embed";
    const AXES: Axes = Axes::NONE;

    fn source(variant: KernelPaths) -> KernelSource {
        let module = WgslModule::new(variant)
            .with(wgsl::BYTES)
            .with(wgsl::BLOCKS)
            .with(wgsl::DEQUANT_TYPE)
            .with(wgsl::STEP)
            .with(wgsl::EMBED);
        let pipelines = Self::TYPES
            .iter()
            .map(|&ty| {
                let mut constants = vec![("WG", f64::from(WG))];
                constants.extend(type_constants(ty));
                PipelineSpec {
                    label: format!("embed {ty}"),
                    entry_point: "embed",
                    constants,
                }
            })
            .collect();
        KernelSource {
            module,
            slots: SLOTS,
            pipelines,
        }
    }
}

impl Embed {
    /// The table types the kernel decodes.
    pub const TYPES: [GgmlType; 11] = super::matvec::MatVec::TYPES;

    /// Builds the kernel (it has one variant, so `paths` only has to be valid for the device).
    pub fn new(ctx: &GpuContext, paths: KernelPaths) -> Result<Self, GpuError> {
        let variant = KernelVariant::of::<Self>(Self::AXES.select(paths));
        let built = build(ctx, &variant)?;
        Ok(Embed {
            layout: built.layout,
            pipelines: built.pipelines,
        })
    }

    /// Binds a table with its ids and outputs, checking every shape and size first.
    pub fn bind(
        &self,
        ctx: &GpuContext,
        shape: EmbedShape,
        io: &EmbedIo<'_>,
    ) -> Result<EmbedBinding, GpuError> {
        self.bind_within(ctx, shape, io, ctx.max_binding_size())
    }

    /// [`Embed::bind`] with bindings of at most `max_binding` bytes (at most the device's limit).
    pub fn bind_within(
        &self,
        ctx: &GpuContext,
        shape: EmbedShape,
        io: &EmbedIo<'_>,
        max_binding: u64,
    ) -> Result<EmbedBinding, GpuError> {
        let EmbedShape { ty, rows, cols } = shape;
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
        let limits = ctx.device.limits();
        let max_per_dimension = limits.max_compute_workgroups_per_dimension;
        if io.max_tokens == 0 || io.max_tokens > max_per_dimension {
            return Err(shape_error(format!(
                "steps of up to {} tokens (expected 1..={max_per_dimension}, one workgroup row each)",
                io.max_tokens
            )));
        }
        if rows == 0 || rows > u64::from(u32::MAX) {
            return Err(shape_error(format!("a table of {rows} rows (ids are u32)")));
        }
        if !io.table_offset.is_multiple_of(4) {
            return Err(shape_error(format!(
                "the table starts at byte {}, not a multiple of 4",
                io.table_offset
            )));
        }
        let row_bytes =
            checked_row_bytes(Self::NAME, "E", ty, rows, cols, io.table, io.table_offset)?;
        let chunks = cols.div_ceil(PER_INVOCATION * u64::from(WG));
        if chunks > u64::from(max_per_dimension) {
            return Err(GpuError::TooLarge {
                what: format!(
                    "kernel {}: rows of {cols} elements (workgroups)",
                    Self::NAME
                ),
                size: chunks,
                limit: u64::from(max_per_dimension),
                limit_name: "max_compute_workgroups_per_dimension",
            });
        }
        let align = ctx.binding_alignment();
        let tokens = u64::from(io.max_tokens);
        let out = io
            .out
            .bind(Self::NAME, "out", tokens, cols, max_binding, align)?;
        // The ids are 4-byte words like f32 activations: one "row" of max_tokens of them.
        let ids = Activations {
            buffer: io.ids,
            offset: io.ids_offset,
            stride: tokens,
        }
        .bind(Self::NAME, "ids", 1, tokens, max_binding, align)?;
        let ranges = split_rows("an embedding table", rows, &[row_bytes], max_binding, align)?;
        let groups = ranges
            .iter()
            .enumerate()
            .map(|(i, range)| {
                let len = range.end - range.start;
                let e = Window::around(
                    io.table_offset + range.start * row_bytes,
                    len * row_bytes,
                    align,
                );
                // Ranges fit one binding and rows ≤ u32::MAX: these fit u32.
                let params = Params {
                    rows: len as u32,
                    vocab: rows as u32,
                    first_row: range.start as u32,
                    cols: cols as u32,
                    row_bytes: row_bytes as u32,
                    e_byte: e.skip as u32,
                    ids_index: ids.index,
                    out_index: out.index,
                    out_stride: out.stride,
                    zero_invalid: u32::from(i == 0),
                    pad: [0; 2],
                };
                let params = uniform(ctx, "embed params", &params);
                bind_group(
                    ctx,
                    "embed",
                    &self.layout,
                    vec![
                        e.binding(io.table),
                        ids.window.binding(io.ids),
                        out.window.binding(io.out.buffer),
                        params.as_entire_binding(),
                        io.step.buffer.as_entire_binding(),
                    ],
                )
            })
            .collect();
        Ok(EmbedBinding {
            type_index,
            max_tokens: io.max_tokens,
            chunks: chunks as u32,
            ranges: groups,
            row_bytes,
            cols,
        })
    }

    /// Records the lookups of a step of `n_tokens` tokens (the Step's `n_tokens`): one dispatch
    /// per row range of the table, each over (chunks of a row, tokens); returns what it recorded.
    pub fn encode(
        &self,
        pass: &mut wgpu::ComputePass,
        binding: &EmbedBinding,
        n_tokens: u32,
    ) -> Result<Recorded, GpuError> {
        if n_tokens > binding.max_tokens {
            return Err(GpuError::Shape {
                kernel: Self::NAME,
                message: format!(
                    "a step of {n_tokens} tokens on a binding checked for at most {}",
                    binding.max_tokens
                ),
            });
        }
        pass.set_pipeline(&self.pipelines[binding.type_index]);
        for group in &binding.ranges {
            pass.set_bind_group(0, group, &[]);
            pass.dispatch_workgroups(binding.chunks, n_tokens, 1);
        }
        // A table row read per token; its id read and its f32 row written.
        let n = u64::from(n_tokens);
        let bytes = OpBytes::new(n * binding.row_bytes, n * (4 * binding.cols + 4));
        Ok(Recorded::new(Self::NAME, binding.ranges.len(), bytes))
    }
}
