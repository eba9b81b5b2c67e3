//! `argmax`: the greedy next token on the GPU, written where the next step's embedding lookup
//! reads it and into the token-history ring (wgsl/argmax.wgsl).

use super::support::{self, View, entry, shape_error, step_wgsl, view_binding, words};
use crate::gpu::buffers::{storage_buffer, uniform};
use crate::gpu::context::GpuContext;
use crate::gpu::error::GpuError;
use crate::gpu::kernel::{
    Kernel, KernelSource, KernelVariant, PipelineSpec, WgslFile, WgslModule, build, wgsl,
};
use crate::gpu::layout::Slot;
use crate::gpu::paths::{Axes, KernelPaths};
use crate::gpu::profile::{OpBytes, Recorded};
use crate::gpu::step::StepBuffer;

const ARGMAX: WgslFile = step_wgsl!("argmax.wgsl");
const ARGMAX_SUBGROUP: WgslFile = step_wgsl!("argmax_subgroup.wgsl");
const ARGMAX_WORKGROUP: WgslFile = step_wgsl!("argmax_workgroup.wgsl");
/// logits, partials, next_token, history, params, step.
const SLOTS: &[Slot] = &[
    Slot::Read,
    Slot::ReadWrite,
    Slot::ReadWrite,
    Slot::ReadWrite,
    Slot::Uniform,
    Slot::Uniform,
];
const WG: u32 = 256;
const PER_INVOCATION: u32 = 16;
/// Logits one workgroup of the first pass covers.
const CHUNK: u32 = WG * PER_INVOCATION;

/// `Params` of wgsl/argmax.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    logits: support::ViewParams,
    vocab: u32,
    n_chunks: u32,
    history_len: u32,
    max_rows: u32,
}

/// Which rows of the logits get a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgmaxRows {
    /// The last row of the step (n_tokens − 1) → `next_token[0]`, `history[out_index]`.
    Last,
    /// Every row r < n_tokens (batched decode, one row per sequence) → `next_token[r]`,
    /// `history[(out_index + r) mod len]`.
    All,
}

/// The logits a binding reads: rows of `vocab` values (at the view's token stride), for up to
/// `max_tokens` tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArgmaxShape {
    pub vocab: u32,
    pub rows: ArgmaxRows,
    pub max_tokens: u32,
}

/// The argmax kernel: the chunk pass and the finishing pass, for each row mode.
pub struct Argmax {
    variant: KernelPaths,
    layout: wgpu::BindGroupLayout,
    /// Index `2·all_rows + (0 chunks | 1 finish)`.
    pipelines: Vec<wgpu::ComputePipeline>,
}

/// Logits bound for [`Argmax::encode`] (its bind group keeps the per-chunk partials alive).
pub struct ArgmaxBinding {
    group: wgpu::BindGroup,
    all_rows: bool,
    n_chunks: u32,
    max_tokens: u32,
    vocab: u32,
}

impl Kernel for Argmax {
    const NAME: &'static str = "argmax";
    const AXES: Axes = Axes {
        subgroup: true,
        ..Axes::NONE
    };

    fn source(variant: KernelPaths) -> KernelSource {
        let best = if variant.subgroup {
            ARGMAX_SUBGROUP
        } else {
            ARGMAX_WORKGROUP
        };
        let module = WgslModule::new(variant)
            .with(wgsl::reduction(variant))
            .with(best)
            .with(wgsl::STEP)
            .with(support::VIEW)
            .with(ARGMAX);
        let pipelines = [false, true]
            .iter()
            .flat_map(|&all_rows| {
                ["chunks", "finish"].map(|entry_point| PipelineSpec {
                    label: format!("argmax {entry_point} all_rows={all_rows}"),
                    entry_point,
                    constants: vec![
                        ("WG", f64::from(WG)),
                        ("PER_INVOCATION", f64::from(PER_INVOCATION)),
                        ("ALL_ROWS", f64::from(all_rows)),
                    ],
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

impl Argmax {
    /// Builds the variant of `paths` (subgroup reduction where allowed).
    pub fn new(ctx: &GpuContext, paths: KernelPaths) -> Result<Self, GpuError> {
        let variant = KernelVariant::of::<Self>(Self::AXES.select(paths));
        let built = build(ctx, &variant)?;
        Ok(Argmax {
            variant: variant.paths,
            layout: built.layout,
            pipelines: built.pipelines,
        })
    }

    pub fn variant(&self) -> KernelPaths {
        self.variant
    }

    /// Binds `logits` (rows of `shape.vocab` at the view's token stride), writing token ids to
    /// `next_token` (u32, one per output row) and to the `history` ring (u32; its length is the
    /// buffer's size in words), with the token count and `out_index` read from `step`.
    pub fn bind(
        &self,
        ctx: &GpuContext,
        shape: ArgmaxShape,
        logits: View<'_>,
        next_token: &wgpu::Buffer,
        history: &wgpu::Buffer,
        step: &StepBuffer,
    ) -> Result<ArgmaxBinding, GpuError> {
        let ArgmaxShape {
            vocab,
            rows,
            max_tokens,
        } = shape;
        if vocab == 0 || max_tokens == 0 {
            return Err(shape_error(
                Self::NAME,
                format!("a vocabulary of {vocab} and {max_tokens} tokens: both must be positive"),
            ));
        }
        let all_rows = rows == ArgmaxRows::All;
        let out_rows = if all_rows { max_tokens } else { 1 };
        let n_chunks = vocab.div_ceil(CHUNK);
        let history_len = history.size() / 4;
        if history_len == 0 || history_len > u64::from(u32::MAX) {
            return Err(shape_error(
                Self::NAME,
                format!("a history ring of {} bytes", history.size()),
            ));
        }
        let partials = storage_buffer(
            ctx,
            "argmax partials",
            u64::from(out_rows) * u64::from(n_chunks) * 8,
        )?;
        let logits_binding =
            view_binding(ctx, Self::NAME, "logits", &logits, max_tokens, 1, vocab)?;
        let next_binding = words(
            ctx,
            Self::NAME,
            "next_token",
            next_token,
            u64::from(out_rows),
        )?;
        let history_binding = words(ctx, Self::NAME, "history", history, history_len)?;
        let params = uniform(
            ctx,
            "argmax params",
            &Params {
                logits: logits.params(),
                vocab,
                n_chunks,
                history_len: history_len as u32,
                max_rows: max_tokens,
            },
        );
        let group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("argmax"),
            layout: &self.layout,
            entries: &[
                entry(0, logits_binding),
                entry(1, partials.as_entire_binding()),
                entry(2, next_binding),
                entry(3, history_binding),
                entry(4, params.as_entire_binding()),
                entry(5, step.buffer.as_entire_binding()),
            ],
        });
        let max_per_dimension = ctx.device.limits().max_compute_workgroups_per_dimension;
        if n_chunks > max_per_dimension || out_rows > max_per_dimension {
            return Err(GpuError::TooLarge {
                what: format!("argmax of {out_rows} rows of {vocab} logits (workgroups)"),
                size: u64::from(n_chunks.max(out_rows)),
                limit: u64::from(max_per_dimension),
                limit_name: "max_compute_workgroups_per_dimension",
            });
        }
        Ok(ArgmaxBinding {
            group,
            all_rows,
            n_chunks,
            max_tokens,
            vocab,
        })
    }

    /// Records the two dispatches for a step of `n_tokens` tokens (at most the binding's
    /// `max_tokens`).
    /// Returns what it recorded: the logits of its rows read.
    pub fn encode(
        &self,
        pass: &mut wgpu::ComputePass,
        binding: &ArgmaxBinding,
        n_tokens: u32,
    ) -> Result<Recorded, GpuError> {
        let rows = if binding.all_rows {
            n_tokens.min(binding.max_tokens)
        } else {
            1
        };
        let first = 2 * usize::from(binding.all_rows);
        pass.set_bind_group(0, &binding.group, &[]);
        pass.set_pipeline(&self.pipelines[first]);
        pass.dispatch_workgroups(binding.n_chunks, rows, 1);
        pass.set_pipeline(&self.pipelines[first + 1]);
        pass.dispatch_workgroups(rows, 1, 1);
        let logits = 4 * u64::from(rows) * u64::from(binding.vocab);
        Ok(Recorded::new(Self::NAME, 2, OpBytes::new(0, logits)))
    }
}
