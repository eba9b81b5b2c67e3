//! The blocks every model on the GPU is built from: projections that pick mat-vec or mat-mul by
//! the step's token count ([`linear`], [`projections`]), norms and elementwise ops ([`norm`],
//! [`pointwise`]), the causal attention block over the paged KV cache with its options (biases,
//! per-head q/k norms, an output gate; [`attention`]), the Gated DeltaNet block ([`delta_net`]),
//! the SwiGLU MLP ([`mlp`]), the embedding and the output head ([`embedding`]), and the
//! activations the layers share ([`scratch`]). An architecture's spec file says which blocks
//! its layers are made of; [`super::decoder`] binds and records them.
//!
//! Each block binds everything it touches at load (bind groups built once) and only records
//! dispatches per step; `record` notes each op under its name in the step's `StepMarks` with
//! what the kernels' `encode` returned (`gpu::profile::Recorded`: dispatches, bytes, FLOPs), so
//! a step's dispatches, bytes and FLOPs come from the kernels that recorded them, never from
//! sums written in a model (a prefill's count must not grow with the prompt). Bind groups keep the
//! buffers they bind alive (wgpu reference-counts its resources), so a model holds only what it
//! records with.

pub mod attention;
pub mod delta_net;
pub mod embedding;
pub mod linear;
pub mod mlp;
pub mod norm;
pub mod pointwise;
pub mod projections;
pub mod scratch;

use super::ModelError;
use crate::gguf::{Gguf, TensorInfo};
use crate::gpu::kernels::argmax::Argmax;
use crate::gpu::kernels::elementwise::{Elementwise, ElementwiseOp};
use crate::gpu::kernels::embed::Embed;
use crate::gpu::kernels::matmul::{Matmul, MatmulBuffers, MatmulInput, MatmulOutput, MatmulShape};
use crate::gpu::kernels::matvec::{
    InputNorm, MatVec, MatVecBinding, MatVecFusion, MatVecIo, MatVecShape,
};
use crate::gpu::kernels::quantize_q8::QuantizeQ8;
use crate::gpu::kernels::rms_norm::RmsNorm;
use crate::gpu::kernels::rope_kv::RopeKv;
use crate::gpu::step::{StepBuffer, StepIo};
use crate::gpu::{GpuContext, GpuError, upload};
use crate::quant::GgmlType;
use linear::{FedMatVec, Linear, QuantizedInput, shape_of};
use pointwise::Pointwise;
use scratch::Scratch;

/// The kernels a model records, each built once for the adapter's paths.
pub struct Kernels {
    pub matvec: MatVec,
    /// The quantizer of the integer mat-vec path, where the paths take it (`int_dot`).
    pub quantize: Option<QuantizeQ8>,
    pub matmul: Matmul,
    pub embed: Embed,
    pub rms_norm: RmsNorm,
    pub rope_kv: RopeKv,
    pub elementwise: Elementwise,
    pub argmax: Argmax,
}

impl Kernels {
    pub fn new(ctx: &GpuContext) -> Result<Kernels, GpuError> {
        check_decode_fuse()?;
        let paths = ctx.paths();
        Ok(Kernels {
            matvec: MatVec::new(ctx, paths)?,
            quantize: match paths.int_dot {
                true => Some(QuantizeQ8::new(ctx, paths)?),
                false => None,
            },
            matmul: Matmul::new(ctx, paths)?,
            embed: Embed::new(ctx, paths)?,
            rms_norm: RmsNorm::new(ctx, paths)?,
            rope_kv: RopeKv::new(ctx, paths)?,
            elementwise: Elementwise::new(ctx, paths)?,
            argmax: Argmax::new(ctx, paths)?,
        })
    }
}

/// Whether the prefill fold `part` is on: both parts by default; `FAK_PREFILL_FOLD` set names
/// the parts that are on (comma-separated; `none`, or any name that is no part, turns both off,
/// to time the unfolded form on one binary). Parts:
/// - `norm`: the RMSNorm before a mixer's projections and before the MLP's gate/up folded into
///   the x16 mat-mul's conversion of X to f16 (`MatmulInput::Normed`): one dispatch instead of
///   the norm's and `to_f16`'s, the same bits;
/// - `swiglu`: the MLP's SwiGLU folded into W_down's conversion (`MatmulInput::SwiGlu`): one
///   dispatch instead of the elementwise op's and `to_f16`'s, the same bits.
///
/// The default since 2026-12-07 #18 (H100, experiments/NOTES.md "pf128"): prefill +6.1 % at 128
/// tokens and +2.8 % at 2048 on the Qwen3-8B, +2.3 % and +1.6 % on the Qwen3.5-27B, 108 and 192
/// fewer dispatches a step. Kernels without the x16 conversion (the fallback, the staged coop
/// kernel) keep the ops' dispatches.
pub fn prefill_fold(part: &str) -> bool {
    std::env::var("FAK_PREFILL_FOLD")
        .as_deref()
        .unwrap_or("norm,swiglu")
        .split(',')
        .any(|p| p.trim() == part)
}

/// Whether decode steps take the decode fusions: a GDN layer's conv → prep → delta rule → gated
/// norm as one `gdn_decode`, and a gated attention layer's gate inside `attn_decode`. On unless
/// `FAK_DECODE_FUSION=0`, which binds the separate kernels as before the fusions (to measure them
/// on one binary).
pub fn decode_fusion() -> bool {
    std::env::var("FAK_DECODE_FUSION").as_deref() != Ok("0")
}

/// Whether, on the int-dot path, the decode kernels that produce `gdn_out`'s and `attn_output`'s
/// inputs (`gdn_decode`, `attn_decode`) also write them as q8 blocks, so those mat-vecs need no
/// quantize dispatch ([`linear::FedMatVec`]). A decode fusion: off with `FAK_DECODE_FUSION=0`,
/// and alone with `FAK_DECODE_Q8_FOLD=0` (the quantize dispatches come back, the other fusions
/// stay: to measure this one on one binary). The products are the same bits either way.
pub fn decode_q8_fold() -> bool {
    decode_fusion() && std::env::var("FAK_DECODE_Q8_FOLD").as_deref() != Ok("0")
}

/// The decode fusions on unless `FAK_DECODE_FUSE` removes them (`-rope`).
const DEFAULT_DECODE_FUSIONS: &[&str] = &["rope"];

/// The decode fusions: [`DEFAULT_DECODE_FUSIONS`] plus those `FAK_DECODE_FUSE` names (a comma
/// list), less those it names with a `-` (`-rope`); `FAK_DECODE_FUSION=0` turns every one off.
/// Each computes the same bits as the dispatches it replaces (experiments/NOTES.md, "decfuse",
/// "ropekv"):
/// - `rope` (the default since 2026-12-06 #11: +0.7 % decode on the 27B, +0.6 % on the Qwen3-8B,
///   on an H100, two rounds each): a decode step's `rope_kv` inside `attn_decode` (its rope form,
///   `AttnDecode::build_rope`): every split norms and rotates its own query heads, the split
///   holding the new position norms, rotates and writes its k and v first: one dispatch fewer
///   per attention layer, no read of weights or cache added. Where the adapter cannot hold the
///   form, the rope_kv dispatch stays.
/// - `all`: every fusion above (`rope` alone since the opt-in ones were removed; `-all` turns
///   every one off).
///
/// The opt-in fusions `lastnorm`, `pquant` and `merge` lost on an H100 and were removed
/// (experiments/NOTES.md, "unlastnorm", "prune", "Third prune"): [`check_decode_fuse`] refuses
/// their names.
pub fn decode_fuse(part: &str) -> bool {
    let list = std::env::var("FAK_DECODE_FUSE").unwrap_or_default();
    decode_fusion() && list_fuses(&list, part)
}

/// Whether the `FAK_DECODE_FUSE` comma list `list` leaves fusion `part` on ([`decode_fuse`]).
fn list_fuses(list: &str, part: &str) -> bool {
    let parts: Vec<&str> = list.split(',').map(str::trim).collect();
    let named = parts.iter().any(|&p| p == part || p == "all");
    let removed = parts
        .iter()
        .any(|p| matches!(p.strip_prefix('-'), Some(q) if q == part || q == "all"));
    !removed && (named || DEFAULT_DECODE_FUSIONS.contains(&part))
}

/// The names `FAK_DECODE_FUSE` takes, each also with a leading `-` ([`decode_fuse`]).
const DECODE_FUSE_NAMES: &[&str] = &["rope", "all"];

/// Fusions `FAK_DECODE_FUSE` once took, measured as losing on an H100 and removed (README).
const REMOVED_DECODE_FUSIONS: &[&str] = &["lastnorm", "pquant", "merge"];

/// Refuses a `FAK_DECODE_FUSE` naming what is no decode fusion (a typo, or a removed one:
/// `lastnorm`, `pquant`, `merge`; experiments/NOTES.md "unlastnorm", "prune", "Third prune"), which
/// [`decode_fuse`] would otherwise ignore, so that a run labelled with it measures the default.
pub fn check_decode_fuse() -> Result<(), GpuError> {
    let list = std::env::var("FAK_DECODE_FUSE").unwrap_or_default();
    match unknown_decode_fusion(&list) {
        Some(name) => {
            let removed = REMOVED_DECODE_FUSIONS.contains(&name.trim_start_matches('-'));
            let why = match removed {
                true => " (it lost on an H100 and was removed: README)",
                false => "",
            };
            Err(GpuError::Shape {
                kernel: "decode",
                message: format!(
                    "FAK_DECODE_FUSE={list}: {name:?} is no decode fusion{why}; expected a comma \
                     list of {} (each may take a leading -)",
                    DECODE_FUSE_NAMES.join(", ")
                ),
            })
        }
        None => Ok(()),
    }
}

/// The first name of the comma list `list` that is none of [`DECODE_FUSE_NAMES`] (less a
/// leading `-`); empty names are none.
fn unknown_decode_fusion(list: &str) -> Option<&str> {
    let mut parts = list.split(',').map(str::trim).filter(|p| !p.is_empty());
    parts.find(|p| !DECODE_FUSE_NAMES.contains(&p.trim_start_matches('-')))
}

/// A weight tensor's bytes, exactly as the GGUF stores them, in a buffer of its own (labelled
/// with the tensor's name, so a wgpu error names it).
pub fn upload_weight(
    ctx: &GpuContext,
    gguf: &Gguf,
    t: &TensorInfo,
) -> Result<wgpu::Buffer, ModelError> {
    upload(ctx, &t.name, gguf.tensor_data(t)).map_err(|e| tensor_error(gguf, t, e))
}

/// Weight tensors of one type and row length, back to back in one buffer, so one mat-vec
/// multiplies them all (QKV, gate + up): the rows of `ts[0]`, then those of `ts[1]`, ….
pub fn upload_weights(
    ctx: &GpuContext,
    gguf: &Gguf,
    ts: &[&TensorInfo],
) -> Result<wgpu::Buffer, ModelError> {
    if let [t] = ts {
        return upload_weight(ctx, gguf, t);
    }
    let bytes: Vec<u8> = ts
        .iter()
        .flat_map(|t| gguf.tensor_data(t))
        .copied()
        .collect();
    let label = ts
        .iter()
        .map(|t| t.name.as_str())
        .collect::<Vec<_>>()
        .join("+");
    upload(ctx, &label, &bytes).map_err(|e| tensor_error(gguf, ts[0], e))
}

/// Whether tensors can be stored back to back and multiplied as one: one type, one row length.
pub fn stackable(ts: &[&TensorInfo]) -> bool {
    ts.windows(2)
        .all(|p| p[0].ty == p[1].ty && p[0].row_len() == p[1].row_len())
}

/// A 1-D tensor (norm weight, bias) as f32, whatever type the file stores it in.
pub fn upload_vector(
    ctx: &GpuContext,
    gguf: &Gguf,
    t: &TensorInfo,
) -> Result<wgpu::Buffer, ModelError> {
    let values = super::vector(gguf, t)?;
    upload(ctx, &t.name, bytemuck::cast_slice(&values)).map_err(|e| tensor_error(gguf, t, e))
}

fn tensor_error(gguf: &Gguf, t: &TensorInfo, e: GpuError) -> ModelError {
    ModelError::Gguf(gguf.tensor_error(t, format!("uploading to the GPU: {e}")))
}

/// What binding a layer's pieces needs, gathered so each binding reads as one line: the
/// kernels, the file the weights come from, the step's buffers, the activations every layer
/// shares and the rows (tokens) a step may bring.
pub struct Binder<'a> {
    pub k: &'a Kernels,
    pub ctx: &'a GpuContext,
    pub gguf: &'a Gguf,
    pub io: &'a StepIo,
    pub step: &'a StepBuffer,
    pub scratch: &'a Scratch,
    pub rows: u32,
    /// The model's RMSNorm eps.
    pub eps: f32,
    /// NaN-fill caches and states at load (see `DevicePlan::poison`).
    pub poison: bool,
}

impl<'a> Binder<'a> {
    /// A 1-D tensor uploaded as f32.
    pub fn vector(&self, t: &TensorInfo) -> Result<wgpu::Buffer, ModelError> {
        upload_vector(self.ctx, self.gguf, t)
    }

    /// `y (+)= W x` for weight tensor `t`, uploaded here.
    pub fn linear(
        &self,
        t: &TensorInfo,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
        output: MatmulOutput,
    ) -> Result<Linear, ModelError> {
        let w = upload_weight(self.ctx, self.gguf, t)?;
        let linear = Linear::bind(self.k, self.ctx, t, &w, x, y, self.step, self.rows, output)?;
        Ok(linear)
    }

    /// Where `FAK_PREFILL_FOLD` names `input`'s part ([`prefill_fold`]) and the mat-mul kernel
    /// folds ([`Matmul::folds`]): `linear`'s prompt steps read `x` (the folded op's input: the
    /// norm's, or the gate|up rows of a SwiGLU) and apply the op as they convert it, so its
    /// caller records no such op ([`Linear::folds`]).
    pub fn fold_prefill(
        &self,
        linear: &mut Linear,
        x: &wgpu::Buffer,
        input: MatmulInput<'_>,
    ) -> Result<(), GpuError> {
        let part = match input {
            MatmulInput::Plain => return Ok(()),
            MatmulInput::Normed(_) => "norm",
            MatmulInput::SwiGlu => "swiglu",
        };
        if !prefill_fold(part) || !self.k.matmul.folds() {
            return Ok(());
        }
        let p = &linear.product;
        let shape = MatmulShape {
            ty: p.shape.ty,
            rows: p.shape.rows,
            cols: p.shape.cols,
            max_tokens: self.rows,
            output: p.output,
        };
        let buffers = MatmulBuffers {
            weights: &p.w,
            x,
            y: &p.y,
            step: self.step,
        };
        let binding = self.k.matmul.bind_folded(self.ctx, shape, buffers, input)?;
        linear.fold(binding);
        Ok(())
    }

    /// [`Binder::linear`], and where `fed` (its producer can write x as q8 blocks) and the
    /// int-dot path takes them, the decode mat-vec reading those blocks ([`FedMatVec`]).
    pub fn linear_fed(
        &self,
        t: &TensorInfo,
        (x, y): (&wgpu::Buffer, &wgpu::Buffer),
        output: MatmulOutput,
        fed: bool,
    ) -> Result<(Linear, Option<FedMatVec>), ModelError> {
        let w = upload_weight(self.ctx, self.gguf, t)?;
        let linear = Linear::bind(self.k, self.ctx, t, &w, x, y, self.step, self.rows, output)?;
        let fed = match fed {
            true => FedMatVec::bind(
                self.k,
                self.ctx,
                shape_of(t),
                &w,
                x,
                y,
                self.step,
                self.rows,
                output,
            )?,
            false => None,
        };
        Ok((linear, fed))
    }

    /// `x` (RMS-normed by `norm`) quantized for integer mat-vecs of weight types `types`, where
    /// the int-dot path takes them ([`QuantizedInput::bind`]).
    pub fn quantized(
        &self,
        x: &wgpu::Buffer,
        cols: u64,
        norm: Option<InputNorm<'_>>,
        types: &[GgmlType],
    ) -> Result<Option<QuantizedInput>, GpuError> {
        QuantizedInput::bind(self.k, self.ctx, x, cols, norm, types, self.step, self.rows)
    }

    /// A decode mat-vec with `fusion` folded in, reading the residual stream `x`; None where
    /// the fusion does not fit the shape ([`MatVec::fusion_fits`]: rows not whole vec4s, a
    /// pairing larger than one binding), decided before binding: the caller keeps its unfused
    /// path for those.
    pub fn fold(
        &self,
        shape: MatVecShape,
        w: &wgpu::Buffer,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
        fusion: MatVecFusion<'_>,
    ) -> Result<Option<MatVecBinding>, GpuError> {
        if !MatVec::fusion_fits(self.ctx, shape, &fusion) {
            return Ok(None);
        }
        let io = MatVecIo::contiguous(shape, w, x, y, self.step, false, self.rows);
        self.k
            .matvec
            .bind_fused(self.ctx, shape, &io, fusion)
            .map(Some)
    }

    pub fn pointwise(
        &self,
        heads: usize,
        width: usize,
        op: ElementwiseOp<'_>,
    ) -> Result<Pointwise, ModelError> {
        let op = Pointwise::bind(self.k, self.ctx, heads, width, op, self.step, self.rows)?;
        Ok(op)
    }
}

#[cfg(test)]
mod tests {
    use super::{list_fuses, unknown_decode_fusion};

    #[test]
    fn decode_fuse_refuses_names_that_are_no_fusion_and_takes_the_others() {
        for known in [
            "",
            "rope",
            "rope,-rope",
            " rope , all ",
            "all,-rope",
            "-all",
            "rope,",
        ] {
            assert_eq!(unknown_decode_fusion(known), None, "{known:?}");
        }
        // lastnorm was removed (experiments/NOTES.md "unlastnorm"): refused like a typo.
        assert_eq!(unknown_decode_fusion("lastnorm"), Some("lastnorm"));
        assert_eq!(unknown_decode_fusion("rope,-lastnorm"), Some("-lastnorm"));
        // So were pquant (experiments/NOTES.md "prune") and merge ("Third prune").
        assert_eq!(unknown_decode_fusion("pquant,rope"), Some("pquant"));
        assert_eq!(unknown_decode_fusion("merge"), Some("merge"));
        assert_eq!(unknown_decode_fusion("rope,-merge"), Some("-merge"));
        assert_eq!(unknown_decode_fusion("all,merge"), Some("merge"));
        assert_eq!(unknown_decode_fusion("rope,mrege"), Some("mrege"));
    }

    /// `rope` is on by default, named or under `all`; `-rope` and `-all` turn it off.
    #[test]
    fn decode_fuse_lists_turn_rope_on_and_off() {
        for on in ["", "rope", "all", " all "] {
            assert!(list_fuses(on, "rope"), "{on:?}");
        }
        for off in ["-rope", "-all", "all,-rope", "rope,-all", " -all "] {
            assert!(!list_fuses(off, "rope"), "{off:?}");
        }
    }
}
