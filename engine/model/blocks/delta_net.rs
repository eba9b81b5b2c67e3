//! The Gated DeltaNet half of a hybrid decoder block ([`DeltaNetBlock`], model-spec.md
//! §5.4–5.5) and the kernels its layers share ([`DeltaNetKernels`]).

use super::linear::{FedMatVec, Linear};
use super::projections::{Projection, StackedProjections};
use super::scratch::Act;
use super::{Binder, Kernels};
use crate::gguf::TensorInfo;
use crate::gpu::kernels::delta_prep::{DeltaPrep, PrepBinding, PrepIo};
use crate::gpu::kernels::delta_state::{DeltaDims, DeltaState, TensorRef};
use crate::gpu::kernels::gated_delta::{DecodeBinding, DecodeIo as RecurrentIo, GatedDeltaDecode};
use crate::gpu::kernels::gated_delta_chunk::{
    ChunkBinding, ChunkEntry, ChunkIo, ChunkScratch, GatedDeltaChunked, entries_profiled,
};
use crate::gpu::kernels::gated_norm::{GatedNorm, NormBinding, NormIo as GatedNormIo};
use crate::gpu::kernels::gdn_decode::{GdnDecode, GdnDecodeBinding, GdnDecodeIo, Split};
use crate::gpu::kernels::matmul::MatmulOutput;
use crate::gpu::kernels::ssm_conv::{ConvBinding, ConvIo, SsmConv};
use crate::gpu::profile::StepMarks;
use crate::gpu::step::{MAX_BATCH, SeqBatch, StepKind};
use crate::gpu::{GpuContext, GpuError, fill_f32};
use crate::model::ModelError;
use crate::model::tensors::DeltaNetTensors;
use crate::quant::GgmlType;

/// The Gated DeltaNet kernels of the model's one layer shape and the chunked prefill's scratch
/// every layer shares (a prefill is one sequence).
pub struct DeltaNetKernels {
    dims: DeltaDims,
    conv: SsmConv,
    prep: DeltaPrep,
    recurrent: GatedDeltaDecode,
    chunked: GatedDeltaChunked,
    norm: GatedNorm,
    /// The four kernels in one dispatch for decode steps, split as `FAK_GDN_DECODE` says; None
    /// where the adapter's limits do not hold it or `FAK_DECODE_FUSION=0` (decode then runs the
    /// four).
    fused: Option<GdnDecode>,
    /// None when every step is one token (the recurrent kernel serves them all).
    scratch: Option<ChunkScratch>,
    /// Whether a prompt step notes the chunked kernel's two dispatches as two ops
    /// (`FAK_GDN_PROFILE=entries`, [`entries_profiled`]).
    entries_profiled: bool,
}

impl DeltaNetKernels {
    pub fn new(ctx: &GpuContext, dims: DeltaDims, max_tokens: u32) -> Result<Self, GpuError> {
        let paths = ctx.paths();
        let chunked = GatedDeltaChunked::new(ctx, paths, dims)?;
        Ok(DeltaNetKernels {
            dims,
            conv: SsmConv::new(ctx, paths, dims)?,
            prep: DeltaPrep::new(ctx, paths, dims)?,
            recurrent: GatedDeltaDecode::new(ctx, paths, dims)?,
            fused: (super::decode_fusion() && GdnDecode::fits(ctx, &dims, Split::from_env()?))
                .then(|| GdnDecode::new(ctx, paths, dims))
                .transpose()?,
            scratch: (max_tokens > 1)
                .then(|| ChunkScratch::new(ctx, &chunked, max_tokens, MAX_BATCH))
                .transpose()?,
            chunked,
            norm: GatedNorm::new(ctx, paths, dims)?,
            entries_profiled: entries_profiled()?,
        })
    }

    /// Bytes of the chunked prefill's scratch.
    pub fn scratch_bytes(&self) -> u64 {
        self.scratch
            .as_ref()
            .map_or(0, ChunkScratch::allocated_bytes)
    }
}

/// One Gated DeltaNet layer (model-spec.md §5.4–5.5): the four projections of `h`, the causal
/// conv and SiLU rolling the conv state, q/k L2 norms and gates, the delta rule (recurrent for
/// one token, chunked for a prefill), the gated RMSNorm, and `x += W_out y`; with its state
/// (one slot per sequence slot of the step table). A decode step runs conv through gated norm
/// as one kernel (`gdn_decode`).
pub struct DeltaNetBlock {
    /// attn_norm and the qkv, z, β and α projections of its h, stacked where their types agree.
    projections: StackedProjections,
    conv: ConvBinding,
    prep: PrepBinding,
    recurrent: DecodeBinding,
    chunked: Option<ChunkBinding>,
    norm: NormBinding,
    fused: Option<GdnDecodeBinding>,
    out: Linear,
    /// On the int-dot path with the fused decode: W_out's decode mat-vec reading the q8 blocks
    /// of y that gdn_decode writes (no quantize dispatch).
    out_fed: Option<FedMatVec>,
    pub state: DeltaState,
}

impl DeltaNetBlock {
    /// Binds the layer (tensors `t`, its input norm `attn_norm`) over the shared activations,
    /// its state slots those of the step's sequence table (`io.seqs`).
    pub fn bind(
        b: &Binder,
        d: &DeltaNetKernels,
        attn_norm: &TensorInfo,
        t: &DeltaNetTensors,
    ) -> Result<DeltaNetBlock, ModelError> {
        let (ctx, rows, s, table) = (b.ctx, b.rows, b.scratch, &b.io.seqs);
        let parts = [
            (t.qkv, Act::GdnM),
            (t.gate, Act::GdnZ),
            (t.beta, Act::GdnBeta),
            (t.alpha, Act::GdnAlpha),
        ]
        .map(|(tensor, act)| Projection {
            tensor,
            y: s.get(act),
        });
        let x_h = (s.get(Act::X), s.get(Act::H));
        let (projections, placed) =
            StackedProjections::bind(b, x_h, attn_norm, &parts, gdn_op_name)?;
        let [m, z, beta, alpha] = [placed[0], placed[1], placed[2], placed[3]];
        let state = DeltaState::new(ctx, d.dims, table.n_slots())?;
        if b.poison {
            // Only a reset makes the state usable: a missed one shows as NaN.
            fill_f32(ctx, &state.conv, f32::NAN)?;
            fill_f32(ctx, &state.recurrent, f32::NAN)?;
        }
        // The small tensors go up as f32 whatever the file stores (the converter keeps them F32).
        let (conv_w, ssm_a, dt_bias, norm_w) = (
            b.vector(t.conv)?,
            b.vector(t.a)?,
            b.vector(t.dt_bias)?,
            b.vector(t.norm)?,
        );
        let conv = d.conv.bind(
            ctx,
            ConvIo {
                m: m.rows(),
                weight: f32_tensor(t.conv, &conv_w),
                table,
                state: &state,
                y: s.get(Act::GdnMixed),
                max_tokens: rows,
            },
        )?;
        let prep = d.prep.bind(
            ctx,
            PrepIo {
                mixed: s.get(Act::GdnMixed),
                b: beta.rows(),
                a: alpha.rows(),
                ssm_a: f32_tensor(t.a, &ssm_a),
                dt_bias: f32_tensor(t.dt_bias, &dt_bias),
                gates: s.get(Act::GdnGates),
                max_tokens: rows,
            },
        )?;
        let recurrent = d.recurrent.bind(
            ctx,
            RecurrentIo {
                mixed: s.get(Act::GdnMixed),
                gates: s.get(Act::GdnGates),
                table,
                state: &state,
                o: s.get(Act::GdnDeltaO),
                max_tokens: rows,
            },
        )?;
        let chunked = d
            .scratch
            .as_ref()
            .map(|scratch| {
                d.chunked.bind(
                    ctx,
                    ChunkIo {
                        mixed: s.get(Act::GdnMixed),
                        gates: s.get(Act::GdnGates),
                        table,
                        state: &state,
                        scratch,
                        o: s.get(Act::GdnDeltaO),
                        max_tokens: rows,
                    },
                )
            })
            .transpose()?;
        let norm = d.norm.bind(
            ctx,
            GatedNormIo {
                o: s.get(Act::GdnDeltaO),
                z: z.heads(d.dims.nv, d.dims.dv, d.dims.dv),
                weight: f32_tensor(t.norm, &norm_w),
                y: s.get(Act::GdnY),
                max_tokens: rows,
            },
        )?;
        let fold = d.fused.is_some() && GdnDecode::quantizes(&d.dims) && super::decode_q8_fold();
        let (out, out_fed) = b.linear_fed(
            t.out,
            (s.get(Act::GdnY), s.get(Act::X)),
            MatmulOutput::Accumulate,
            fold,
        )?;
        let fused = d
            .fused
            .as_ref()
            .map(|fused| {
                fused.bind(
                    ctx,
                    GdnDecodeIo {
                        m: m.rows(),
                        z: z.heads(d.dims.nv, d.dims.dv, d.dims.dv),
                        b: beta.rows(),
                        a: alpha.rows(),
                        conv_weight: f32_tensor(t.conv, &conv_w),
                        ssm_a: f32_tensor(t.a, &ssm_a),
                        dt_bias: f32_tensor(t.dt_bias, &dt_bias),
                        norm_weight: f32_tensor(t.norm, &norm_w),
                        table,
                        state: &state,
                        y: s.get(Act::GdnY),
                        y_q8: out_fed.as_ref().map(FedMatVec::vectors),
                        max_tokens: rows,
                    },
                )
            })
            .transpose()?;
        Ok(DeltaNetBlock {
            projections,
            conv,
            prep,
            recurrent,
            chunked,
            norm,
            fused,
            out,
            out_fed,
            state,
        })
    }

    /// Records the layer for `batch`: one sequence of `batch.len` tokens, one token of each of
    /// `batch.count` sequences, or several prompts' rows (over the step's `batch.rows` rows).
    pub fn record(
        &self,
        k: &Kernels,
        d: &DeltaNetKernels,
        pass: &mut wgpu::ComputePass,
        batch: SeqBatch,
        marks: &mut StepMarks,
    ) -> Result<(), GpuError> {
        let n = batch.rows;
        self.projections.record(k, pass, n, marks, "attn_norm")?;
        // A decode token takes the fused kernel whatever else the step holds, so its result
        // does not depend on the batch.
        if let (Some(kernel), Some(fused)) = (&d.fused, &self.fused)
            && marks.kind == StepKind::Decode
        {
            let decoded = marks.probed("gdn_decode", pass, |p| kernel.encode(p, fused, batch))?;
            marks.op(pass, "gdn_decode", decoded);
            if let Some(out) = &self.out_fed {
                // y read as the q8 blocks gdn_decode wrote.
                let recorded = marks.probed("gdn_out", pass, |p| out.encode(k, p, n))?;
                marks.op(pass, "gdn_out", recorded);
                return Ok(());
            }
            return self.out.record(k, pass, n, marks, "gdn_out");
        }
        let conv = d.conv.encode(pass, &self.conv, batch)?;
        marks.op(pass, "ssm_conv", conv);
        let prep = d.prep.encode(pass, &self.prep, n)?;
        marks.op(pass, "delta_prep", prep);
        let delta = match &self.chunked {
            Some(chunked) if marks.kind == StepKind::Prompt && d.entries_profiled => {
                let prepare = d
                    .chunked
                    .encode_entry(pass, chunked, batch, ChunkEntry::Prepare)?;
                marks.op(pass, "gated_delta_prepare", prepare);
                d.chunked
                    .encode_entry(pass, chunked, batch, ChunkEntry::Scan)?
            }
            Some(chunked) if marks.kind == StepKind::Prompt => {
                d.chunked.encode(pass, chunked, batch)?
            }
            _ => d.recurrent.encode(pass, &self.recurrent, batch)?,
        };
        marks.op(pass, "gated_delta", delta);
        let norm = d.norm.encode(pass, &self.norm, n)?;
        marks.op(pass, "gated_norm", norm);
        self.out.record(k, pass, n, marks, "gdn_out")
    }
}

/// The op name of a run of a GDN layer's projections (`run` indexes [qkv, z, β, α]): `gdn_`
/// and the letters of the projections it stacks (qkv, z, b for β, a for α).
fn gdn_op_name(run: std::ops::Range<usize>) -> &'static str {
    const NAMES: [[&str; 4]; 4] = [
        ["gdn_qkv", "gdn_qkvz", "gdn_qkvzb", "gdn_qkvzba"],
        ["gdn_z", "gdn_zb", "gdn_zba", ""],
        ["gdn_b", "gdn_ba", "", ""],
        ["gdn_a", "", "", ""],
    ];
    NAMES[run.start][run.len() - 1]
}

/// A tensor uploaded as f32 (by [`Binder::vector`]), named for the kernels' errors.
fn f32_tensor<'a>(t: &'a TensorInfo, buffer: &'a wgpu::Buffer) -> TensorRef<'a> {
    TensorRef {
        name: &t.name,
        ty: GgmlType::F32,
        buffer,
    }
}
