//! The SwiGLU MLP half of a decoder block ([`Mlp`]).

use super::linear::{FedMatVec, Linear, QuantizedInput};
use super::norm::Norm;
use super::pointwise::Pointwise;
use super::scratch::Act;
use super::{Binder, Kernels, stackable, upload_weights};
use crate::gpu::GpuError;
use crate::gpu::kernels::elementwise::ElementwiseOp;
use crate::gpu::kernels::matmul::{MatmulInput, MatmulNorm, MatmulOutput};
use crate::gpu::kernels::matvec::{
    InputNorm, MatVecBinding, MatVecFusion, MatVecLayout, MatVecShape,
};
use crate::gpu::kernels::rms_norm::NormIo;
use crate::gpu::kernels::support::View;
use crate::gpu::profile::StepMarks;
use crate::gpu::step::StepKind;
use crate::model::ModelError;
use crate::model::tensors::MlpTensors;

/// The activations an MLP reads and writes: the residual stream `x` (`[n, d]`), the normed
/// input `h`, `[n, 2·n_ff]` rows of gate then up values (a prefill's mat-mul output) and `[n,
/// n_ff]` rows of their SwiGLU.
struct MlpBuffers<'a> {
    pub x: &'a wgpu::Buffer,
    pub h: &'a wgpu::Buffer,
    pub gate_up: &'a wgpu::Buffer,
    pub act: &'a wgpu::Buffer,
}

/// `x += W_down(silu(W_gate h) ⊙ W_up h)` with `h = RMSNorm(x)`: the MLP half of a decoder
/// block (model-spec.md §4.g, §5.8). W_gate and W_up are stored back to back as one weight. A
/// decode step is two dispatches: the norm, both products and the SwiGLU in one mat-vec
/// ([`MatVecFusion`]), then `W_down` accumulating into x; a prefill chunk runs the norm, one
/// mat-mul over the gate and up rows, the SwiGLU and `W_down`.
pub struct Mlp {
    norm: Norm,
    gate_up: Linear,
    swiglu: Pointwise,
    /// None where the fusion does not apply to the shape (the prefill path serves decode too).
    folded: Option<MatVecBinding>,
    /// On the int-dot path: RMSNorm(x) quantized for `folded`.
    quantized: Option<QuantizedInput>,
    down: Linear,
    /// On the int-dot path, where W_down takes q8 inputs: `folded` also writes its SwiGLU as q8
    /// blocks (`MatVecFusion::quantize_output`) and this decode mat-vec of W_down reads them, so
    /// the down product needs no quantize dispatch of its own.
    down_fed: Option<FedMatVec>,
}

impl Mlp {
    /// Binds the MLP of tensors `t` over the shared activations.
    pub fn bind(b: &Binder, t: &MlpTensors) -> Result<Mlp, ModelError> {
        let buffers = MlpBuffers {
            x: b.scratch.get(Act::X),
            h: b.scratch.get(Act::H),
            gate_up: b.scratch.get(Act::GateUp),
            act: b.scratch.get(Act::FfnAct),
        };
        let s = &buffers;
        let d = t.norm.n_elements() as usize;
        let n_ff = t.gate.n_rows() as usize;
        if !stackable(&[t.gate, t.up]) {
            return Err(ModelError::Gguf(b.gguf.tensor_error(
                t.up,
                format!(
                    "is {} with rows of {}, {} is {} with rows of {}: the MLP multiplies them as \
                     one weight and needs them alike",
                    t.up.ty,
                    t.up.row_len(),
                    t.gate.name,
                    t.gate.ty,
                    t.gate.row_len()
                ),
            )));
        }
        let w = upload_weights(b.ctx, b.gguf, &[t.gate, t.up])?;
        let stacked = MatVecShape {
            ty: t.gate.ty,
            rows: 2 * n_ff as u64,
            cols: d as u64,
        };
        let mut gate_up = Linear::bind_shape(
            b.k,
            b.ctx,
            stacked,
            &w,
            s.h,
            s.gate_up,
            b.step,
            b.rows,
            MatmulOutput::Store,
        )?;
        let half = |offset| {
            View::rows(s.gate_up, n_ff as u32)
                .strided(2 * n_ff as u32, 0)
                .at(offset)
        };
        let swiglu = ElementwiseOp::SwiGlu {
            gate: half(0),
            up: half(n_ff as u32),
            out: View::rows(s.act, n_ff as u32),
        };
        let norm_weight = b.vector(t.norm)?;
        // The prompt product norms x itself (FAK_PREFILL_FOLD=norm).
        let folded_norm = MatmulInput::Normed(MatmulNorm {
            weight: &norm_weight,
            eps: b.eps,
        });
        b.fold_prefill(&mut gate_up, s.x, folded_norm)?;
        // One reader: the quantization, or the paired mat-vec.
        let input_norm = InputNorm {
            weight: &norm_weight,
            eps: b.eps,
            shared: false,
        };
        let quantized = b.quantized(s.x, d as u64, Some(input_norm), &[t.gate.ty])?;
        let fusion = match &quantized {
            Some(q) => q.fusion(true),
            None => MatVecFusion {
                norm: Some(input_norm),
                swiglu: true,
                ..MatVecFusion::default()
            },
        };
        let paired = MatVecShape {
            rows: n_ff as u64,
            ..stacked
        };
        let io = NormIo::Out {
            x: View::rows(s.x, d as u32),
            y: View::rows(s.h, d as u32),
        };
        // W_down, and its integer decode mat-vec reading the pairing's quantized SwiGLU where
        // both fold.
        let (mut down, fed) = b.linear_fed(t.down, (s.act, s.x), MatmulOutput::Accumulate, true)?;
        // The prompt product reads the gate|up rows and takes their SwiGLU itself
        // (FAK_PREFILL_FOLD=swiglu).
        b.fold_prefill(&mut down, s.gate_up, MatmulInput::SwiGlu)?;
        let quantizing = fed.as_ref().and_then(|fed| {
            let fusion = MatVecFusion {
                quantize_output: Some(fed.vectors()),
                layout: Some(MatVecLayout::QUANTIZING),
                ..fusion
            };
            b.fold(paired, &w, s.x, s.act, fusion).transpose()
        });
        let (folded, down_fed) = match quantizing.transpose()? {
            Some(folded) => (Some(folded), fed),
            None => (b.fold(paired, &w, s.x, s.act, fusion)?, None),
        };
        Ok(Mlp {
            norm: Norm::bind(b.k, b.ctx, io, d, 1, b.eps, &norm_weight, b.step, b.rows)?,
            gate_up,
            swiglu: b.pointwise(1, n_ff, swiglu)?,
            folded,
            quantized,
            down,
            down_fed,
        })
    }

    /// Records the block's ops: `ffn_gate_up` (norm, gate, up and SwiGLU folded) and
    /// `ffn_down` for a decode step; `ffn_norm`, `ffn_gate_up`, `swiglu`, `ffn_down` otherwise.
    pub fn record(
        &self,
        k: &Kernels,
        pass: &mut wgpu::ComputePass,
        n: u32,
        marks: &mut StepMarks,
    ) -> Result<(), GpuError> {
        match &self.folded {
            Some(binding) if marks.kind == StepKind::Decode => {
                let quantized = match &self.quantized {
                    Some(q) => Some(marks.probed("ffn_norm", pass, |p| q.encode(k, p, n))?),
                    None => None,
                };
                let product =
                    marks.probed("ffn_gate_up", pass, |p| k.matvec.encode(p, binding, n))?;
                let recorded = quantized.map_or(product, |q| product.after(q));
                marks.op(pass, "ffn_gate_up", recorded);
                if let Some(down) = &self.down_fed {
                    // act read as the q8 codes and scales the pairing wrote.
                    let recorded = marks.probed("ffn_down", pass, |p| down.encode(k, p, n))?;
                    marks.op(pass, "ffn_down", recorded);
                    return Ok(());
                }
            }
            _ => {
                // With the prefill norm fold the product norms x itself; h is not written.
                if !self.gate_up.folds(marks.kind) {
                    self.norm.record(k, pass, n, marks, "ffn_norm")?;
                }
                self.gate_up.record(k, pass, n, marks, "ffn_gate_up")?;
                // With the prefill SwiGLU fold, W_down's product takes it; act is not written.
                if !self.down.folds(marks.kind) {
                    self.swiglu.record(k, pass, n, marks, "swiglu")?;
                }
            }
        }
        self.down.record(k, pass, n, marks, "ffn_down")
    }
}
