//! Projections of one normed input: [`StackedProjections`] stores consecutive weights of one
//! type back to back and multiplies each run as one weight, with the norm folded into the
//! decode mat-vecs ([`NormedLinears`]).

use super::linear::{Linear, QuantizedInput};
use super::norm::Norm;
use super::{Binder, Kernels, stackable, upload_weights};
use crate::gguf::TensorInfo;
use crate::gpu::GpuError;
use crate::gpu::kernels::matmul::{MatmulInput, MatmulNorm, MatmulOutput};
use crate::gpu::kernels::matvec::{InputNorm, MatVecBinding, MatVecFusion, MatVecShape};
use crate::gpu::kernels::rms_norm::NormIo;
use crate::gpu::kernels::support::View;
use crate::gpu::profile::StepMarks;
use crate::gpu::step::StepKind;
use crate::model::ModelError;
use crate::quant::GgmlType;

/// `y_i = W_i RMSNorm(x)` for weights that read the same normed input (q, k, v). A decode step
/// folds the norm into each mat-vec (no norm dispatch; [`MatVecFusion`]); a prefill chunk norms x
/// into `h` once and runs the mat-muls. Tensors that can be stored back to back are bound as one
/// weight by the caller, so each part here is one dispatch.
struct NormedLinears {
    norm: Norm,
    /// On the int-dot path: RMSNorm(x) quantized once for every folded part.
    quantized: Option<QuantizedInput>,
    /// Each part's product over h, and (decode) over x with the norm folded in; the latter is
    /// None when the norm cannot fold (rows not a multiple of 4).
    parts: Vec<(Linear, Option<MatVecBinding>)>,
}

/// One weight of [`NormedLinears`]: its shape, bytes, and where its outputs go.
struct NormedPart<'a> {
    shape: MatVecShape,
    weights: &'a wgpu::Buffer,
    y: &'a wgpu::Buffer,
}

impl NormedLinears {
    /// Binds `parts` over the residual stream `x` (normed by `norm_weight` into `h` for the
    /// mat-muls).
    fn bind(
        b: &Binder,
        (x, h): (&wgpu::Buffer, &wgpu::Buffer),
        norm_weight: &TensorInfo,
        parts: &[NormedPart<'_>],
    ) -> Result<NormedLinears, ModelError> {
        let width = norm_weight.n_elements() as usize;
        let weight = b.vector(norm_weight)?;
        let io = NormIo::Out {
            x: View::rows(x, width as u32),
            y: View::rows(h, width as u32),
        };
        let norm = Norm::bind(b.k, b.ctx, io, width, 1, b.eps, &weight, b.step, b.rows)?;
        let input_norm = InputNorm {
            weight: &weight,
            eps: b.eps,
            shared: false,
        };
        let types: Vec<GgmlType> = parts.iter().map(|p| p.shape.ty).collect();
        let quantized = b.quantized(x, width as u64, Some(input_norm), &types)?;
        // The norm's weight is one tensor: the first dispatch that folds it in (the
        // quantization, else the first f32 product) reads it, the later ones share it.
        let mut norm_read = quantized.is_some();
        let bound = parts
            .iter()
            .map(|p| {
                let mut linear = Linear::bind_shape(
                    b.k,
                    b.ctx,
                    p.shape,
                    p.weights,
                    h,
                    p.y,
                    b.step,
                    b.rows,
                    MatmulOutput::Store,
                )?;
                // Each part's prompt product norms x itself (FAK_PREFILL_FOLD=norm).
                let folded_norm = MatmulInput::Normed(MatmulNorm {
                    weight: &weight,
                    eps: b.eps,
                });
                b.fold_prefill(&mut linear, x, folded_norm)?;
                let fusion = match &quantized {
                    Some(q) if QuantizedInput::takes(p.shape.ty) => q.fusion(false),
                    _ => MatVecFusion {
                        norm: Some(InputNorm {
                            shared: std::mem::replace(&mut norm_read, true),
                            ..input_norm
                        }),
                        ..MatVecFusion::default()
                    },
                };
                let folded = b.fold(p.shape, p.weights, x, p.y, fusion)?;
                Ok((linear, folded))
            })
            .collect::<Result<Vec<_>, GpuError>>()?;
        Ok(NormedLinears {
            norm,
            quantized,
            parts: bound,
        })
    }

    /// Records the products for `n` tokens, part i as op `names[i]`: mat-vecs with the norm
    /// folded in (on the int-dot path, into the quantize dispatch before them) when every part
    /// has one and the step decodes, else the norm (`norm_name`) and then each product.
    fn record(
        &self,
        k: &Kernels,
        pass: &mut wgpu::ComputePass,
        n: u32,
        marks: &mut StepMarks,
        (norm_name, names): (&'static str, &[&'static str]),
    ) -> Result<(), GpuError> {
        let folded: Option<Vec<&MatVecBinding>> = match marks.kind {
            StepKind::Decode => self.parts.iter().map(|(_, f)| f.as_ref()).collect(),
            StepKind::Prompt => None,
        };
        match folded {
            Some(bindings) => {
                // The quantization (the norm folded in) is noted with the first part.
                let mut quantized = match &self.quantized {
                    Some(q) => Some(marks.probed(norm_name, pass, |p| q.encode(k, p, n))?),
                    None => None,
                };
                for (binding, name) in bindings.into_iter().zip(names) {
                    let product = marks.probed(name, pass, |p| k.matvec.encode(p, binding, n))?;
                    let recorded = quantized.take().map_or(product, |q| product.after(q));
                    marks.op(pass, name, recorded);
                }
            }
            None => {
                // With the prefill norm fold every part norms x itself; h is not written.
                if !self.parts.iter().all(|(l, _)| l.folds(marks.kind)) {
                    self.norm.record(k, pass, n, marks, norm_name)?;
                }
                for ((linear, _), name) in self.parts.iter().zip(names) {
                    linear.record(k, pass, n, marks, name)?;
                }
            }
        }
        Ok(())
    }
}

/// One projection of a [`StackedProjections`]: its weight tensor, and the buffer its run writes
/// when it leads one (sized for the widths of it and every projection after it).
pub struct Projection<'t, 'b> {
    pub tensor: &'t TensorInfo,
    pub y: &'b wgpu::Buffer,
}

/// Where a projection of a [`StackedProjections`] put its outputs: values `[first, first +
/// width)` of each token's row of `stride` values in `buffer` (the row holds its whole run).
#[derive(Clone, Copy, Debug)]
pub struct Placed<'b> {
    pub buffer: &'b wgpu::Buffer,
    pub first: u32,
    pub stride: u32,
}

impl<'b> Placed<'b> {
    /// The outputs as `n_heads` heads of `head_dim` per token, `head_stride` apart.
    pub fn heads(self, n_heads: u32, head_dim: u32, head_stride: u32) -> View<'b> {
        View::heads(self.buffer, n_heads, head_dim)
            .strided(self.stride, head_stride)
            .at(self.first)
    }

    /// The outputs as one row per token.
    pub fn rows(self) -> View<'b> {
        View::rows(self.buffer, self.stride).at(self.first)
    }
}

/// `y_i = W_i RMSNorm(x)` for projections of one normed input (q, k, v; a GDN layer's qkv, z, β,
/// α), consecutive weights of one type and row length stored back to back as one weight, so a
/// decode step is one mat-vec per run with the norm folded in ([`NormedLinears`]). A run writes
/// its projections side by side per token into the buffer of its first one.
pub struct StackedProjections {
    linears: NormedLinears,
    /// The op name of each run.
    names: Vec<&'static str>,
}

impl StackedProjections {
    /// Binds `parts` (in order) over the residual stream `x`, normed by `norm` (into `h` for a
    /// prefill's mat-muls); `name` names the op of a run of parts. Returns where each part's
    /// outputs sit.
    pub fn bind<'b>(
        b: &Binder,
        (x, h): (&wgpu::Buffer, &wgpu::Buffer),
        norm: &TensorInfo,
        parts: &[Projection<'_, 'b>],
        name: impl Fn(std::ops::Range<usize>) -> &'static str,
    ) -> Result<(StackedProjections, Vec<Placed<'b>>), ModelError> {
        let mut runs: Vec<std::ops::Range<usize>> = Vec::new();
        for (i, part) in parts.iter().enumerate() {
            match runs.last_mut() {
                Some(run) if stackable(&[parts[run.start].tensor, part.tensor]) => run.end = i + 1,
                _ => runs.push(i..i + 1),
            }
        }
        let width = |i: usize| parts[i].tensor.n_rows() as u32;
        let weights = runs
            .iter()
            .map(|run| {
                let ts: Vec<&TensorInfo> = parts[run.clone()].iter().map(|p| p.tensor).collect();
                upload_weights(b.ctx, b.gguf, &ts)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut placed = Vec::with_capacity(parts.len());
        let mut stacked = Vec::with_capacity(runs.len());
        for (run, w) in runs.iter().zip(&weights) {
            let stride: u32 = run.clone().map(width).sum();
            let y = parts[run.start].y;
            let mut first = 0;
            for i in run.clone() {
                placed.push(Placed {
                    buffer: y,
                    first,
                    stride,
                });
                first += width(i);
            }
            let t = parts[run.start].tensor;
            stacked.push(NormedPart {
                shape: MatVecShape {
                    ty: t.ty,
                    rows: u64::from(stride),
                    cols: t.row_len(),
                },
                weights: w,
                y,
            });
        }
        let linears = NormedLinears::bind(b, (x, h), norm, &stacked)?;
        let names = runs.into_iter().map(name).collect();
        Ok((StackedProjections { linears, names }, placed))
    }

    /// Records the projections of `n` tokens (the norm as op `norm_name` where it does not fold).
    pub fn record(
        &self,
        k: &Kernels,
        pass: &mut wgpu::ComputePass,
        n: u32,
        marks: &mut StepMarks,
        norm_name: &'static str,
    ) -> Result<(), GpuError> {
        self.linears
            .record(k, pass, n, marks, (norm_name, &self.names))
    }
}
