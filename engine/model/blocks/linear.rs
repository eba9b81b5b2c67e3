//! `y (+)= W x` for one weight ([`Linear`]): the mat-vec for decode steps, the mat-mul for
//! prompt steps, and on the integer path the quantization of its input ([`QuantizedInput`]).

use super::Kernels;
use crate::gguf::TensorInfo;
use crate::gpu::kernels::matmul::{MatmulBinding, MatmulBuffers, MatmulOutput, MatmulShape};
use crate::gpu::kernels::matvec::{
    InputNorm, MatVec, MatVecBinding, MatVecFusion, MatVecIo, MatVecShape,
};
use crate::gpu::kernels::quantize_q8::{Q8_BLOCK, Q8Vectors, QuantizeQ8Binding};
use crate::gpu::profile::{Recorded, StepMarks};
use crate::gpu::step::{MAX_BATCH, StepBuffer, StepKind};
use crate::gpu::{Activations, GpuContext, GpuError};
use crate::quant::GgmlType;

/// The mat-vec shape of tensor `t` as GGUF stores it.
pub fn shape_of(t: &TensorInfo) -> MatVecShape {
    MatVecShape {
        ty: t.ty,
        rows: t.n_rows(),
        cols: t.row_len(),
    }
}

/// A decode step's input quantized to 8-bit blocks (RMS-normed first where asked) for the
/// integer mat-vecs that read it: the vectors and the dispatch that writes them. Exists only on
/// the int-dot path, for weights of [`MatVec::Q8_TYPES`].
pub struct QuantizedInput {
    vectors: Q8Vectors,
    binding: QuantizeQ8Binding,
}

impl QuantizedInput {
    /// The quantization of up to `max_tokens` (capped at [`MAX_BATCH`]) rows of `cols` of `x`
    /// for mat-vecs of weight types `types`; None unless the int-dot path is on, `cols` is whole
    /// q8 blocks and some type takes q8 inputs ([`QuantizedInput::takes`] says which).
    #[allow(clippy::too_many_arguments)]
    pub fn bind(
        k: &Kernels,
        ctx: &GpuContext,
        x: &wgpu::Buffer,
        cols: u64,
        norm: Option<InputNorm<'_>>,
        types: &[GgmlType],
        step: &StepBuffer,
        max_tokens: u32,
    ) -> Result<Option<QuantizedInput>, GpuError> {
        let Some(quantize) = &k.quantize else {
            return Ok(None);
        };
        if !cols.is_multiple_of(Q8_BLOCK) || !types.iter().any(|&t| Self::takes(t)) {
            return Ok(None);
        }
        let max_batch = max_tokens.min(MAX_BATCH);
        let vectors = Q8Vectors::new(ctx, "decode input", cols, max_batch)?;
        let x = Activations::contiguous(x, cols);
        let binding = quantize.bind(ctx, x, cols, norm, &vectors, step, max_batch)?;
        Ok(Some(QuantizedInput { vectors, binding }))
    }

    /// Whether mat-vecs of weight type `ty` read quantized inputs on the int-dot path (the
    /// others keep f32 inputs, as the reference's `Activations::Q8Blocks` rounds only theirs):
    /// the types of [`MatVec::Q8_TYPES`] that `FAK_INT_DOT_TYPES` names (comma-separated ggml
    /// names, e.g. `q4_k,q6_k`: for measuring where the integer kernel wins per type; the
    /// reference then rounds more inputs than the GPU), all of them when it is unset.
    pub fn takes(ty: GgmlType) -> bool {
        static CHOSEN: std::sync::OnceLock<Vec<GgmlType>> = std::sync::OnceLock::new();
        let chosen = CHOSEN.get_or_init(|| match std::env::var("FAK_INT_DOT_TYPES") {
            Ok(names) => names
                .split(',')
                .map(str::trim)
                .filter_map(GgmlType::from_name)
                .collect(),
            Err(_) => MatVec::Q8_TYPES.to_vec(),
        });
        MatVec::Q8_TYPES.contains(&ty) && chosen.contains(&ty)
    }

    /// The fusion that makes a mat-vec read these vectors.
    pub fn fusion(&self, swiglu: bool) -> MatVecFusion<'_> {
        MatVecFusion {
            swiglu,
            q8: Some(&self.vectors),
            ..MatVecFusion::default()
        }
    }

    /// Records the quantization of `n` vectors; returns what it recorded, for the op whose
    /// product reads them.
    pub fn encode(
        &self,
        k: &Kernels,
        pass: &mut wgpu::ComputePass,
        n: u32,
    ) -> Result<Recorded, GpuError> {
        let quantize = k.quantize.as_ref().expect("bound on the int-dot path");
        quantize.encode(pass, &self.binding, n)
    }
}

/// A decode mat-vec on the integer path whose input the kernel that produces it also writes as
/// q8 blocks (the gate/up pairing's SwiGLU, `gdn_decode`'s y, `attn_decode`'s o), so the
/// product needs no quantize dispatch: the vectors that kernel writes and the mat-vec reading
/// them. The producer's blocks are quantize_q8's rounding of the same f32 values, so the product
/// is bit for bit the one after a quantize dispatch.
pub struct FedMatVec {
    vectors: Q8Vectors,
    matvec: MatVecBinding,
}

impl FedMatVec {
    /// Room for up to `max_tokens` (capped at [`MAX_BATCH`]) q8 vectors of x and the mat-vec
    /// `y (+)= W x̂` of `shape` reading them; None off the int-dot path, where `shape.ty` takes no
    /// q8 inputs ([`QuantizedInput::takes`]) or x is not whole blocks.
    #[allow(clippy::too_many_arguments)]
    pub fn bind(
        k: &Kernels,
        ctx: &GpuContext,
        shape: MatVecShape,
        w: &wgpu::Buffer,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
        step: &StepBuffer,
        max_tokens: u32,
        output: MatmulOutput,
    ) -> Result<Option<FedMatVec>, GpuError> {
        let cols = shape.cols;
        if k.quantize.is_none()
            || !QuantizedInput::takes(shape.ty)
            || !cols.is_multiple_of(Q8_BLOCK)
        {
            return Ok(None);
        }
        let max_batch = max_tokens.min(MAX_BATCH);
        let vectors = Q8Vectors::new(ctx, "fed input", cols, max_batch)?;
        let accumulate = output == MatmulOutput::Accumulate;
        let io = MatVecIo::contiguous(shape, w, x, y, step, accumulate, max_tokens);
        let fusion = MatVecFusion {
            q8: Some(&vectors),
            ..MatVecFusion::default()
        };
        let matvec = k.matvec.bind_fused(ctx, shape, &io, fusion)?;
        Ok(Some(FedMatVec { vectors, matvec }))
    }

    /// The vectors the producer writes.
    pub fn vectors(&self) -> &Q8Vectors {
        &self.vectors
    }

    /// Records the product of `n` vectors (written earlier in the pass).
    pub fn encode(
        &self,
        k: &Kernels,
        pass: &mut wgpu::ComputePass,
        n: u32,
    ) -> Result<Recorded, GpuError> {
        k.matvec.encode(pass, &self.matvec, n)
    }
}

/// `y (+)= W x` for one weight tensor: the mat-vec for decode steps, the tiled mat-mul for prompt
/// tokens however few (a prompt's rows come out the same whichever steps it was cut into). Both
/// are bound at load over the same weight buffer.
pub struct Linear {
    matvec: MatVecBinding,
    /// x quantized for `matvec`, recorded before it (the int-dot path, a type that takes q8
    /// inputs).
    quantized: Option<QuantizedInput>,
    matmul: MatmulBinding,
    /// With a prefill fold (`FAK_PREFILL_FOLD`, [`super::Binder::fold_prefill`]): the mat-mul
    /// over the folded op's input (the norm's, the SwiGLU's), which prompt steps take instead
    /// of `matmul` (the caller then records no such op).
    folded: Option<MatmulBinding>,
    /// What a fold binds again: the weight, Y, the shape and what the product does with Y.
    pub(super) product: LinearProduct,
}

/// The parts of a [`Linear`]'s product that do not depend on its input.
pub(super) struct LinearProduct {
    pub w: wgpu::Buffer,
    pub y: wgpu::Buffer,
    pub shape: MatVecShape,
    pub output: MatmulOutput,
}

impl Linear {
    /// Binds `w` (the bytes of tensor `t`) reading `[n, t.row_len]` rows of `x` and writing
    /// `[n, t.n_rows]` rows of `y`, both contiguous from offset 0, for steps of up to
    /// `max_tokens` tokens.
    #[allow(clippy::too_many_arguments)]
    pub fn bind(
        k: &Kernels,
        ctx: &GpuContext,
        t: &TensorInfo,
        w: &wgpu::Buffer,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
        step: &StepBuffer,
        max_tokens: u32,
        output: MatmulOutput,
    ) -> Result<Linear, GpuError> {
        Self::bind_shape(k, ctx, shape_of(t), w, x, y, step, max_tokens, output)
    }

    /// [`Linear::bind`] for a weight of `shape` (several tensors stored back to back).
    #[allow(clippy::too_many_arguments)]
    pub fn bind_shape(
        k: &Kernels,
        ctx: &GpuContext,
        shape: MatVecShape,
        w: &wgpu::Buffer,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
        step: &StepBuffer,
        max_tokens: u32,
        output: MatmulOutput,
    ) -> Result<Linear, GpuError> {
        let MatVecShape { ty, rows, cols } = shape;
        let quantized = QuantizedInput::bind(k, ctx, x, cols, None, &[ty], step, max_tokens)?;
        let matvec = k.matvec.bind_fused(
            ctx,
            shape,
            &MatVecIo::contiguous(
                shape,
                w,
                x,
                y,
                step,
                output == MatmulOutput::Accumulate,
                max_tokens,
            ),
            quantized
                .as_ref()
                .map_or_else(MatVecFusion::default, |q| q.fusion(false)),
        )?;
        let matmul = k.matmul.bind(
            ctx,
            MatmulShape {
                ty,
                rows,
                cols,
                max_tokens,
                output,
            },
            MatmulBuffers {
                weights: w,
                x,
                y,
                step,
            },
        )?;
        Ok(Linear {
            matvec,
            quantized,
            matmul,
            folded: None,
            product: LinearProduct {
                w: w.clone(),
                y: y.clone(),
                shape,
                output,
            },
        })
    }

    /// Makes prompt steps take `folded` (the mat-mul with its input's producer folded in).
    pub fn fold(&mut self, folded: MatmulBinding) {
        self.folded = Some(folded);
    }

    /// Whether a step of `kind` takes the product with its input's producer (a norm, a SwiGLU)
    /// folded in: that op is then not to be recorded.
    pub fn folds(&self, kind: StepKind) -> bool {
        kind == StepKind::Prompt && self.folded.is_some()
    }

    /// Records the product for `n` tokens of a step of `kind` (the mat-mul for prompt tokens,
    /// else x's quantization where bound and the mat-vec); returns what it recorded.
    pub fn encode(
        &self,
        k: &Kernels,
        pass: &mut wgpu::ComputePass,
        n: u32,
        kind: StepKind,
    ) -> Result<Recorded, GpuError> {
        if kind == StepKind::Prompt {
            let matmul = self.folded.as_ref().unwrap_or(&self.matmul);
            return k.matmul.encode(pass, matmul, n);
        }
        let quantized = match &self.quantized {
            Some(q) => Some(q.encode(k, pass, n)?),
            None => None,
        };
        let product = k.matvec.encode(pass, &self.matvec, n)?;
        Ok(quantized.map_or(product, |q| product.after(q)))
    }

    /// Records the product for `n` tokens as op `name`.
    pub fn record(
        &self,
        k: &Kernels,
        pass: &mut wgpu::ComputePass,
        n: u32,
        marks: &mut StepMarks,
        name: &'static str,
    ) -> Result<(), GpuError> {
        let kind = marks.kind;
        let recorded = marks.probed(name, pass, |p| self.encode(k, p, n, kind))?;
        marks.op(pass, name, recorded);
        Ok(())
    }
}
