//! What every model on the GPU shares: the kernels built once per model, weights uploaded as the
//! GGUF stores them, projections that pick mat-vec or mat-mul by the step's token count, the
//! causal attention block over a paged KV cache, and the output head.
//!
//! Each piece binds everything it touches at load (bind groups built once) and only records
//! dispatches per step; `record` notes each op it recorded (name, dispatches, bytes moved) in
//! the step's `StepMarks`, so a model reports the dispatches and bytes of a step from the code
//! that records them (a prefill's count must not grow with the prompt). Bind groups keep the buffers they bind alive (wgpu reference-counts its
//! resources), so a model holds only what it records with.

use super::{DevicePlan, ModelError};
use crate::gguf::{Gguf, TensorInfo};
use crate::gpu::kernels::argmax::{Argmax, ArgmaxBinding, ArgmaxRows, ArgmaxShape};
use crate::gpu::kernels::attn_decode::{AttnDecode, AttnShape, DecodeBinding, DecodeIo};
use crate::gpu::kernels::attn_prefill::{AttnPrefill, PrefillBinding, PrefillIo};
use crate::gpu::kernels::elementwise::{
    Elementwise, ElementwiseBinding, ElementwiseOp, ElementwiseShape,
};
use crate::gpu::kernels::embed::{Embed, EmbedBinding, EmbedIo, EmbedShape};
use crate::gpu::kernels::kv_cache::{KvCache, KvDtype, KvLayout};
use crate::gpu::kernels::matmul::{
    Matmul, MatmulBinding, MatmulBuffers, MatmulOutput, MatmulShape,
};
use crate::gpu::kernels::matvec::{
    InputNorm, MAX_BATCH, MatVec, MatVecBinding, MatVecFusion, MatVecIo, MatVecLayout, MatVecShape,
};
use crate::gpu::kernels::quantize_q8::{Q8_BLOCK, Q8Vectors, QuantizeQ8, QuantizeQ8Binding};
use crate::gpu::kernels::rms_norm::{NormIo, RmsNorm, RmsNormBinding, RmsNormShape};
use crate::gpu::kernels::rope::RopeTable;
use crate::gpu::kernels::rope_kv::{HeadNorms, RopeKv, RopeKvBinding, RopeKvIo};
use crate::gpu::kernels::support::{Positions, View};
use crate::gpu::profile::{OpBytes, StepMarks};
use crate::gpu::step::StepKind;
use crate::gpu::{Activations, GpuContext, GpuError, StepBuffer, fill_f32, storage_buffer, upload};
use crate::model::RopePairing;
use crate::quant::GgmlType;
use crate::runtime::StepIo;

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
    let values = crate::reference::ops::vector(gguf, t)?;
    upload(ctx, &t.name, bytemuck::cast_slice(&values)).map_err(|e| tensor_error(gguf, t, e))
}

fn tensor_error(gguf: &Gguf, t: &TensorInfo, e: GpuError) -> ModelError {
    ModelError::Gguf(gguf.tensor_error(t, format!("uploading to the GPU: {e}")))
}

/// An f32 activation buffer of `rows` rows of `width`, NaN-filled when `poison`.
pub fn activation(
    ctx: &GpuContext,
    poison: bool,
    label: &str,
    rows: u32,
    width: usize,
) -> Result<wgpu::Buffer, GpuError> {
    let buffer = storage_buffer(ctx, label, u64::from(rows) * width as u64 * 4)?;
    if poison {
        fill_f32(ctx, &buffer, f32::NAN)?;
    }
    Ok(buffer)
}

/// A decode step's input quantized to 8-bit blocks (RMS-normed first where asked) for the
/// integer mat-vecs that read it: the vectors and the dispatch that writes them. Exists only on
/// the int-dot path, for weights of [`MatVec::Q8_TYPES`].
pub struct QuantizedInput {
    vectors: Q8Vectors,
    binding: QuantizeQ8Binding,
    /// f32 bytes of one input vector.
    x_bytes: u64,
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
        Ok(Some(QuantizedInput {
            vectors,
            binding,
            x_bytes: 4 * cols,
        }))
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

    /// Records the quantization of `n` vectors; returns what it moved (x read, codes and scales
    /// written), for the op that records it.
    fn record(&self, k: &Kernels, pass: &mut wgpu::ComputePass, n: u32) -> Result<u64, GpuError> {
        let quantize = k.quantize.as_ref().expect("bound on the int-dot path");
        quantize.encode(pass, &self.binding, n)?;
        let cols = self.x_bytes / 4;
        Ok(u64::from(n) * (self.x_bytes + cols + 4 * cols / Q8_BLOCK))
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
    rows: u64,
    cols: u64,
    weight_bytes: u64,
    accumulate: bool,
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
        let shape = MatVecShape {
            ty: t.ty,
            rows: t.n_rows(),
            cols: t.row_len(),
        };
        Self::bind_shape(k, ctx, shape, w, x, y, step, max_tokens, output)
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
            &MatVecIo {
                weights: w,
                weights_offset: 0,
                x: Activations::contiguous(x, cols),
                y: Activations::contiguous(y, rows),
                step,
                accumulate: output == MatmulOutput::Accumulate,
                max_batch: max_tokens.min(MAX_BATCH),
            },
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
            rows,
            cols,
            weight_bytes: rows * ty.row_bytes(cols).unwrap_or(0),
            accumulate: output == MatmulOutput::Accumulate,
        })
    }

    /// What the product of `n` tokens moves: the whole weight once, x once, y once (twice when
    /// accumulating); and its FLOPs.
    fn bytes(&self, n: u32) -> OpBytes {
        let y_passes = if self.accumulate { 2 } else { 1 };
        let activations = 4 * u64::from(n) * (self.cols + y_passes * self.rows);
        OpBytes::new(self.weight_bytes, activations).product(self.rows, self.cols, n)
    }

    /// Records the product for `n` tokens as op `name`: the whole weight tensor is read once,
    /// x once, y once (twice when accumulating).
    pub fn record(
        &self,
        k: &Kernels,
        pass: &mut wgpu::ComputePass,
        n: u32,
        marks: &mut StepMarks,
        name: &'static str,
    ) -> Result<(), GpuError> {
        if marks.kind == StepKind::Prompt {
            let dispatches = k.matmul.encode(pass, &self.matmul, n)?;
            marks.op(pass, name, "matmul", self.bytes(n), dispatches);
            return Ok(());
        }
        let mut bytes = self.bytes(n);
        let mut dispatches = self.matvec.grids().count();
        if let Some(q) = &self.quantized {
            bytes.activations += q.record(k, pass, n)?;
            dispatches += 1;
        }
        k.matvec.encode(pass, &self.matvec, n)?;
        let kernel = match self.quantized {
            Some(_) => "matvec_q8",
            None => "matvec",
        };
        marks.op(pass, name, kernel, bytes, dispatches);
        Ok(())
    }
}

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
        x: &wgpu::Buffer,
        h: &wgpu::Buffer,
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
        };
        let types: Vec<GgmlType> = parts.iter().map(|p| p.shape.ty).collect();
        let quantized = b.quantized(x, width as u64, Some(input_norm), &types)?;
        let parts = parts
            .iter()
            .map(|p| {
                let linear = Linear::bind_shape(
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
                let fusion = match &quantized {
                    Some(q) if QuantizedInput::takes(p.shape.ty) => q.fusion(false),
                    _ => MatVecFusion {
                        norm: Some(input_norm),
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
            parts,
        })
    }

    /// Records the products for `n` tokens, part i as op `names[i]`: mat-vecs with the norm
    /// folded in when every part has one and the step decodes, else the norm
    /// (`norm_name`) and then each product.
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
                // The quantization (the norm folded in) is recorded with the first part.
                let quantized = match &self.quantized {
                    Some(q) => Some(q.record(k, pass, n)?),
                    None => None,
                };
                let kernel = if quantized.is_some() {
                    "matvec_q8"
                } else {
                    "matvec"
                };
                for (i, ((linear, _), binding)) in self.parts.iter().zip(bindings).enumerate() {
                    k.matvec.encode(pass, binding, n)?;
                    // The norm's weight is read with the first part (the roofline counts it once).
                    let mut bytes = linear.bytes(n);
                    let mut dispatches = binding.grids().count();
                    if i == 0 {
                        bytes.weights += self.norm.weight_bytes();
                        bytes.activations += quantized.unwrap_or(0);
                        dispatches += usize::from(quantized.is_some());
                    }
                    marks.op(pass, names[i], kernel, bytes, dispatches);
                }
            }
            None => {
                self.norm.record(k, pass, n, marks, norm_name);
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

/// The op name of a run of an attention layer's q, k, v projections (`run` indexes [q, k, v]).
pub fn qkv_op_name(run: std::ops::Range<usize>) -> &'static str {
    match (run.start, run.len()) {
        (0, 3) => "attn_qkv",
        (0, 2) => "attn_qk",
        (0, _) => "attn_q",
        (1, 2) => "attn_kv",
        (1, _) => "attn_k",
        _ => "attn_v",
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
        let linears = NormedLinears::bind(b, x, h, norm, &stacked)?;
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

/// The token embedding lookup: `x[t] = table[ids[t]]` from any weight type.
pub struct Embedding {
    binding: EmbedBinding,
    /// Bytes of one table row, and f32 bytes of one output row.
    row_bytes: u64,
    out_bytes: u64,
}

impl Embedding {
    pub fn bind(
        k: &Kernels,
        ctx: &GpuContext,
        t: &TensorInfo,
        table: &wgpu::Buffer,
        io: &StepIo,
        x: &wgpu::Buffer,
    ) -> Result<Embedding, GpuError> {
        let binding = k.embed.bind(
            ctx,
            EmbedShape {
                ty: t.ty,
                rows: t.n_rows(),
                cols: t.row_len(),
            },
            &EmbedIo {
                table,
                table_offset: 0,
                ids: &io.ids,
                ids_offset: 0,
                out: Activations::contiguous(x, t.row_len()),
                step: &io.step,
                max_tokens: io.max_tokens,
            },
        )?;
        Ok(Embedding {
            binding,
            row_bytes: t.row_bytes(),
            out_bytes: t.row_len() * 4,
        })
    }

    /// Records the lookup of `n` tokens (one table row each).
    pub fn record(
        &self,
        k: &Kernels,
        pass: &mut wgpu::ComputePass,
        n: u32,
        marks: &mut StepMarks,
    ) -> Result<(), GpuError> {
        k.embed.encode(pass, &self.binding, n)?;
        let n = u64::from(n);
        let bytes = OpBytes::new(n * self.row_bytes, n * (self.out_bytes + 4));
        marks.op(pass, "embed", "embed", bytes, self.binding.range_count());
        Ok(())
    }
}

/// An RMSNorm over `rows_per_token` rows of `width` per token.
pub struct Norm {
    binding: RmsNormBinding,
    /// Elements normed per token.
    width: u64,
    weight_width: u64,
}

impl Norm {
    #[allow(clippy::too_many_arguments)]
    pub fn bind(
        k: &Kernels,
        ctx: &GpuContext,
        io: NormIo<'_>,
        width: usize,
        rows_per_token: usize,
        eps: f32,
        weight: &wgpu::Buffer,
        step: &StepBuffer,
        max_tokens: u32,
    ) -> Result<Norm, GpuError> {
        let shape = RmsNormShape {
            n: width as u32,
            rows_per_token: rows_per_token as u32,
            eps,
            max_tokens,
        };
        let binding = k.rms_norm.bind(ctx, shape, io, Some(weight), step)?;
        Ok(Norm {
            binding,
            width: (width * rows_per_token) as u64,
            weight_width: width as u64,
        })
    }

    /// Bytes of the norm's weight (read once per step).
    pub fn weight_bytes(&self) -> u64 {
        4 * self.weight_width
    }

    /// Records the norm of `n` tokens' rows as op `name` (each read once, written once).
    pub fn record(
        &self,
        k: &Kernels,
        pass: &mut wgpu::ComputePass,
        n: u32,
        marks: &mut StepMarks,
        name: &'static str,
    ) {
        k.rms_norm.encode(pass, &self.binding, n);
        let bytes = OpBytes::new(4 * self.weight_width, 8 * u64::from(n) * self.width);
        marks.op(pass, name, "rms_norm", bytes, 1);
    }
}

/// One elementwise op bound at load.
pub struct Pointwise {
    binding: ElementwiseBinding,
    /// Elements written per token.
    width: u64,
}

impl Pointwise {
    pub fn bind(
        k: &Kernels,
        ctx: &GpuContext,
        heads: usize,
        width: usize,
        op: ElementwiseOp<'_>,
        step: &StepBuffer,
        max_tokens: u32,
    ) -> Result<Pointwise, GpuError> {
        let shape = ElementwiseShape {
            heads: heads as u32,
            width: width as u32,
            max_tokens,
        };
        let binding = k.elementwise.bind(ctx, shape, op, step)?;
        Ok(Pointwise {
            binding,
            width: (heads * width) as u64,
        })
    }

    /// Records the op over `n` tokens as `name` (two operands read, one written per element).
    pub fn record(
        &self,
        k: &Kernels,
        pass: &mut wgpu::ComputePass,
        n: u32,
        marks: &mut StepMarks,
        name: &'static str,
    ) {
        k.elementwise.encode(pass, &self.binding, n);
        let bytes = OpBytes::new(0, 12 * u64::from(n) * self.width);
        marks.op(pass, name, "elementwise", bytes, 1);
    }
}

/// What binding a layer's pieces needs, gathered so each binding reads as one line: the
/// kernels, the file the weights come from, the step uniform and the rows (tokens) a step may
/// bring.
pub struct Binder<'a> {
    pub k: &'a Kernels,
    pub ctx: &'a GpuContext,
    pub gguf: &'a Gguf,
    pub step: &'a StepBuffer,
    pub rows: u32,
    /// The model's RMSNorm eps.
    pub eps: f32,
}

impl<'a> Binder<'a> {
    /// The binder of a model loaded for `plan` (steps of up to `plan.max_tokens` tokens on
    /// `io.step`), its norms' eps `eps`.
    pub fn new(
        k: &'a Kernels,
        ctx: &'a GpuContext,
        gguf: &'a Gguf,
        io: &'a StepIo,
        plan: &DevicePlan,
        eps: f32,
    ) -> Binder<'a> {
        Binder {
            k,
            ctx,
            gguf,
            step: &io.step,
            rows: plan.max_tokens,
            eps,
        }
    }

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
    /// the kernel refuses the fusion for its shape (rows not whole vec4s, a pairing larger than
    /// one binding): the caller keeps its unfused path for those. Other errors are errors.
    pub fn fold(
        &self,
        shape: MatVecShape,
        w: &wgpu::Buffer,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
        fusion: MatVecFusion<'_>,
    ) -> Result<Option<MatVecBinding>, GpuError> {
        let io = MatVecIo {
            weights: w,
            weights_offset: 0,
            x: Activations::contiguous(x, shape.cols),
            y: Activations::contiguous(y, shape.rows),
            step: self.step,
            accumulate: false,
            max_batch: self.rows.min(MAX_BATCH),
        };
        match self.k.matvec.bind_fused(self.ctx, shape, &io, fusion) {
            Ok(binding) => Ok(Some(binding)),
            Err(GpuError::Shape { .. } | GpuError::TooLarge { .. }) => Ok(None),
            Err(e) => Err(e),
        }
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

/// The tensors of a dense SwiGLU MLP with its pre-norm.
pub struct MlpTensors<'g> {
    pub norm: &'g TensorInfo,
    pub gate: &'g TensorInfo,
    pub up: &'g TensorInfo,
    pub down: &'g TensorInfo,
}

/// The activations an MLP reads and writes: the residual stream `x` (`[n, d]`), the normed
/// input `h`, `[n, 2·n_ff]` rows of gate then up values (a prefill's mat-mul output) and `[n,
/// n_ff]` rows of their SwiGLU.
pub struct MlpBuffers<'a> {
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
    down_q8: Option<(Q8Vectors, MatVecBinding)>,
}

impl Mlp {
    pub fn bind(b: &Binder, t: &MlpTensors, s: &MlpBuffers) -> Result<Mlp, ModelError> {
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
        let gate_up = Linear::bind_shape(
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
        let input_norm = InputNorm {
            weight: &norm_weight,
            eps: b.eps,
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
        let down_w = upload_weight(b.ctx, b.gguf, t.down)?;
        let down = Linear::bind(
            b.k,
            b.ctx,
            t.down,
            &down_w,
            s.act,
            s.x,
            b.step,
            b.rows,
            MatmulOutput::Accumulate,
        )?;
        // The integer down product reading the pairing's quantized SwiGLU, where both fold.
        let act_q8 = (b.k.quantize.is_some()
            && QuantizedInput::takes(t.down.ty)
            && (n_ff as u64).is_multiple_of(Q8_BLOCK))
        .then(|| Q8Vectors::new(b.ctx, "ffn_down input", n_ff as u64, b.rows.min(MAX_BATCH)))
        .transpose()?;
        let quantizing = act_q8.as_ref().and_then(|q8| {
            let fusion = MatVecFusion {
                quantize_output: Some(q8),
                layout: Some(MatVecLayout::QUANTIZING),
                ..fusion
            };
            b.fold(paired, &w, s.x, s.act, fusion).transpose()
        });
        let (folded, down_q8) = match (quantizing.transpose()?, act_q8) {
            (Some(folded), Some(q8)) => {
                let down_q8 = Self::bind_down_q8(b, t.down, &down_w, s, &q8)?;
                (Some(folded), Some((q8, down_q8)))
            }
            _ => (b.fold(paired, &w, s.x, s.act, fusion)?, None),
        };
        Ok(Mlp {
            norm: Norm::bind(b.k, b.ctx, io, d, 1, b.eps, &norm_weight, b.step, b.rows)?,
            gate_up,
            swiglu: b.pointwise(1, n_ff, swiglu)?,
            folded,
            quantized,
            down,
            down_q8,
        })
    }

    /// The decode mat-vec `x += W_down act` reading act as the q8 vectors `q8`.
    fn bind_down_q8(
        b: &Binder,
        down: &TensorInfo,
        w: &wgpu::Buffer,
        s: &MlpBuffers,
        q8: &Q8Vectors,
    ) -> Result<MatVecBinding, GpuError> {
        let shape = MatVecShape {
            ty: down.ty,
            rows: down.n_rows(),
            cols: down.row_len(),
        };
        let io = MatVecIo {
            weights: w,
            weights_offset: 0,
            x: Activations::contiguous(s.act, shape.cols),
            y: Activations::contiguous(s.x, shape.rows),
            step: b.step,
            accumulate: true,
            max_batch: b.rows.min(MAX_BATCH),
        };
        let fusion = MatVecFusion {
            q8: Some(q8),
            ..MatVecFusion::default()
        };
        b.k.matvec.bind_fused(b.ctx, shape, &io, fusion)
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
                    Some(q) => Some(q.record(k, pass, n)?),
                    None => None,
                };
                k.matvec.encode(pass, binding, n)?;
                // x read, the norm and both weights read once, the SwiGLU written (and the
                // quantization's traffic on the integer path).
                let bytes = OpBytes::new(
                    self.gate_up.weight_bytes + self.norm.weight_bytes(),
                    4 * u64::from(n) * (self.gate_up.cols + self.gate_up.rows / 2)
                        + quantized.unwrap_or(0),
                )
                .product(self.gate_up.rows, self.gate_up.cols, n);
                let kernel = if quantized.is_some() {
                    "matvec_q8"
                } else {
                    "matvec"
                };
                let dispatches = binding.grids().count() + usize::from(quantized.is_some());
                marks.op(pass, "ffn_gate_up", kernel, bytes, dispatches);
                if let Some((_, down)) = &self.down_q8 {
                    k.matvec.encode(pass, down, n)?;
                    // x read as q8 codes and scales instead of f32.
                    let mut bytes = self.down.bytes(n);
                    let cols = self.down.cols;
                    bytes.activations -= 4 * u64::from(n) * cols;
                    bytes.activations += u64::from(n) * (cols + 4 * cols / Q8_BLOCK);
                    marks.op(pass, "ffn_down", "matvec_q8", bytes, down.grids().count());
                    return Ok(());
                }
            }
            _ => {
                self.norm.record(k, pass, n, marks, "ffn_norm");
                self.gate_up.record(k, pass, n, marks, "ffn_gate_up")?;
                self.swiglu.record(k, pass, n, marks, "swiglu");
            }
        }
        self.down.record(k, pass, n, marks, "ffn_down")
    }
}

/// Shapes of one causal attention block.
#[derive(Clone, Copy, Debug)]
pub struct AttentionDims {
    pub n_head: usize,
    pub n_kv: usize,
    pub head_dim: usize,
    pub n_rot: usize,
    pub pairing: RopePairing,
    pub max_context: usize,
    pub max_tokens: u32,
    /// Token slots per KV page, and physical pages in the pool every sequence draws from.
    pub page_size: u32,
    pub kv_pages: u32,
    /// Most sequences one decode step serves.
    pub max_seqs: u32,
    /// NaN-fill the caches at load (see `DevicePlan::poison`).
    pub poison: bool,
}

impl AttentionDims {
    /// The attention layers of a model of `n_head` query and `n_kv` KV heads of `head_dim`, the
    /// first `n_rot` dims of each rotated by `pairing`, loaded for `plan`.
    pub fn new(
        (n_head, n_kv, head_dim): (usize, usize, usize),
        n_rot: usize,
        pairing: RopePairing,
        plan: &DevicePlan,
    ) -> AttentionDims {
        AttentionDims {
            n_head,
            n_kv,
            head_dim,
            n_rot,
            pairing,
            max_context: plan.max_context,
            max_tokens: plan.max_tokens,
            page_size: plan.page_size,
            kv_pages: plan.kv_pages,
            max_seqs: plan.max_seqs,
            poison: plan.poison,
        }
    }
}

/// The attention kernels of one head shape (every attention layer of a model shares them), the
/// split-K scratch their decode and split prefill passes share (a step runs one layer's
/// attention after another), and the buffer a KV page copy goes through.
pub struct AttentionKernels {
    decode: AttnDecode,
    prefill: AttnPrefill,
    scratch: wgpu::Buffer,
    n_split: u32,
    page_bounce: wgpu::Buffer,
}

impl AttentionKernels {
    pub fn new(ctx: &GpuContext, dims: &AttentionDims) -> Result<AttentionKernels, GpuError> {
        let shape = AttnShape {
            n_head: dims.n_head as u32,
            n_kv: dims.n_kv as u32,
            head_dim: dims.head_dim as u32,
        };
        let decode = AttnDecode::new(ctx, ctx.paths(), shape)?;
        let prefill = AttnPrefill::new(ctx, ctx.paths(), shape)?;
        let n_split = AttnDecode::default_splits(dims.max_context as u32);
        // Prefill steps split only as far as one binding of it reaches.
        let prefill_bytes = prefill
            .scratch_bytes(dims.max_tokens, dims.max_context as u32)
            .min(ctx.max_binding_size());
        let scratch = storage_buffer(
            ctx,
            "attention split-K scratch",
            decode
                .scratch_bytes(dims.max_seqs, n_split)
                .max(prefill_bytes),
        )?;
        // One page of one layer's K (or V), at the larger (f32) element size.
        let page_bounce = storage_buffer(
            ctx,
            "kv page bounce",
            4 * (dims.n_kv * dims.head_dim) as u64 * u64::from(dims.page_size),
        )?;
        Ok(AttentionKernels {
            prefill,
            decode,
            scratch,
            n_split,
            page_bounce,
        })
    }

    /// The shared pool: `kv_pages` pages, rows long enough for `max_context` tokens.
    fn layout(&self, dims: &AttentionDims, dtype: KvDtype) -> KvLayout {
        KvLayout {
            n_kv: dims.n_kv as u32,
            head_dim: dims.head_dim as u32,
            page_size: dims.page_size,
            n_pages: dims.kv_pages,
            pages_per_row: (dims.max_context as u32).div_ceil(dims.page_size),
            dtype,
        }
    }
}

/// Per-head q/k norm, rotary embedding, cache write and causal attention of one layer, over q,
/// k, v rows already projected: `o[t] = softmax(q[t] K^T / sqrt(d)) V` over positions 0..=pos(t).
/// Every kernel reads each token's position and page-table row from `io.tokens` (the runtime
/// writes it per step), so one binding serves a prefill chunk of one sequence and a decode step
/// of several, each sequence on its own pages of the shared pool.
pub struct Attention {
    cache: KvCache,
    prepare: RopeKvBinding,
    decode: DecodeBinding,
    prefill: PrefillBinding,
    /// f32 bytes of one token's q (and o), and of its k (and v).
    q_bytes: u64,
    kv_bytes: u64,
    /// Bytes of one position's k (and v) in the cache, and of the q and k norm weights.
    cached_bytes: u64,
    norm_bytes: u64,
}

/// Where one layer's attention reads its q, k, v (read-only: they may share a buffer), puts the
/// normed and rotated q (`q_out`, another buffer) and writes o.
pub struct AttentionIo<'a> {
    pub q: View<'a>,
    pub k: View<'a>,
    pub v: View<'a>,
    pub q_out: View<'a>,
    pub o: View<'a>,
    /// The per-head q and k norms (qwen3, qwen35), or none.
    pub norms: Option<HeadNorms<'a>>,
}

impl Attention {
    pub fn bind(
        k: &Kernels,
        attn: &AttentionKernels,
        ctx: &GpuContext,
        dims: &AttentionDims,
        rope: &RopeTable,
        io: AttentionIo<'_>,
        step_io: &StepIo,
    ) -> Result<Attention, GpuError> {
        let step = &step_io.step;
        let pages = &step_io.pages;
        let positions = Positions::Table(&step_io.tokens);
        let cache = KvCache::new(ctx, attn.layout(dims, k.rope_kv.dtype()))?;
        if dims.poison {
            // An f16 cache reads the pair of NaN halves as NaN too.
            fill_f32(ctx, &cache.k, f32::NAN)?;
            fill_f32(ctx, &cache.v, f32::NAN)?;
        }
        let prepare = k.rope_kv.bind(
            ctx,
            &RopeKvIo {
                q: io.q,
                k: io.k,
                v: io.v,
                q_out: io.q_out,
                n_head: dims.n_head as u32,
                norms: io.norms,
                pairing: dims.pairing,
                table: rope,
                cache: &cache,
                pages,
                positions,
                step,
                max_tokens: dims.max_tokens,
            },
        )?;
        let decode = attn.decode.bind(
            ctx,
            DecodeIo {
                q: io.q_out,
                o: io.o,
                cache: &cache,
                pages,
                positions,
                step,
                n_split: attn.n_split,
                scratch: (attn.n_split > 1).then_some(&attn.scratch),
                max_seqs: dims.max_seqs,
            },
        )?;
        let prefill = attn.prefill.bind(
            ctx,
            PrefillIo {
                q: io.q_out,
                o: io.o,
                cache: &cache,
                pages,
                positions,
                step,
                max_tokens: dims.max_tokens,
                scratch: Some(&attn.scratch),
            },
        )?;
        let kv_width = (dims.n_kv * dims.head_dim) as u64;
        Ok(Attention {
            cache,
            prepare,
            decode,
            prefill,
            q_bytes: (dims.n_head * dims.head_dim) as u64 * 4,
            kv_bytes: kv_width * 4,
            cached_bytes: kv_width * k.rope_kv.dtype().bytes(),
            norm_bytes: io.norms.map_or(0, |_| 2 * 4 * dims.head_dim as u64),
        })
    }

    /// Records copying physical page `src` of this layer's K and V into page `dst`.
    pub fn copy_page(
        &self,
        attn: &AttentionKernels,
        encoder: &mut wgpu::CommandEncoder,
        src: u32,
        dst: u32,
    ) -> Result<(), GpuError> {
        self.cache.copy_page(encoder, src, dst, &attn.page_bounce)
    }

    /// Norms and rotates q and k, writes k and v into the cache (one `rope_kv` dispatch) and
    /// attends: the split-K decode kernel for a decode step's token of each of `n` sequences,
    /// the tiled causal kernel for prompt tokens (however few). The attention op reads k and v of
    /// every cached position once (`marks.kv_len` of them, summed over a batch's sequences).
    pub fn record(
        &self,
        k: &Kernels,
        attn: &AttentionKernels,
        pass: &mut wgpu::ComputePass,
        n: u32,
        marks: &mut StepMarks,
    ) {
        let tokens = u64::from(n);
        k.rope_kv.encode(pass, &self.prepare, n);
        // q read and written; k and v read, then written to the cache.
        let moved = tokens * (2 * self.q_bytes + 2 * (self.kv_bytes + self.cached_bytes));
        marks.op(
            pass,
            "rope_kv",
            "rope_kv",
            OpBytes::new(self.norm_bytes, moved),
            1,
        );
        let cache = 2 * u64::from(marks.kv_len) * self.cached_bytes;
        let io = 2 * tokens * self.q_bytes;
        if marks.kind == StepKind::Decode {
            attn.decode.encode(pass, &self.decode, n);
            let dispatches = 1 + usize::from(attn.n_split > 1);
            marks.op(
                pass,
                "attention",
                "attn_decode",
                OpBytes::new(cache, io),
                dispatches,
            );
        } else {
            // A prefill step is one sequence: its last token sees marks.kv_len keys.
            let dispatches = attn.prefill.encode(pass, &self.prefill, n, marks.kv_len);
            marks.op(
                pass,
                "attention",
                "attn_prefill",
                OpBytes::new(cache, io),
                dispatches,
            );
        }
    }
}

/// What every model puts its layers between: the token embedding writing the residual stream
/// `x`, and the output head reading it.
pub struct Ends {
    embedding: Embedding,
    head: OutputHead,
    x: wgpu::Buffer,
}

impl Ends {
    /// Binds the embedding `embd` into `x`, and the head over it: the final norm, then
    /// `output` (the embedding table where `tied`: its buffer is uploaded once).
    pub fn bind(
        b: &Binder,
        io: &StepIo,
        (embd, output_norm): (&TensorInfo, &TensorInfo),
        (output, tied): (&TensorInfo, bool),
        x: &wgpu::Buffer,
        poison: bool,
    ) -> Result<Ends, ModelError> {
        let table = upload_weight(b.ctx, b.gguf, embd)?;
        let embedding = Embedding::bind(b.k, b.ctx, embd, &table, io, x)?;
        let output_weights = match tied {
            true => table,
            false => upload_weight(b.ctx, b.gguf, output)?,
        };
        let norm = b.vector(output_norm)?;
        let head = OutputHead::bind(
            b.k,
            b.ctx,
            io,
            (&norm, b.eps),
            (output, &output_weights),
            poison,
        )?;
        Ok(Ends {
            embedding,
            head,
            x: x.clone(),
        })
    }

    /// Records a step over `n` rows: the embedding, then `layers`, in one compute pass named
    /// `label`; then the head on `rows` of them.
    #[allow(clippy::too_many_arguments)]
    pub fn record(
        &self,
        k: &Kernels,
        encoder: &mut wgpu::CommandEncoder,
        label: &str,
        n: u32,
        rows: HeadRows,
        marks: &mut StepMarks,
        layers: impl FnOnce(&mut wgpu::ComputePass, &mut StepMarks) -> Result<(), GpuError>,
    ) -> Result<(), GpuError> {
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some(label),
                timestamp_writes: None,
            });
            marks.begin(&mut pass);
            self.embedding.record(k, &mut pass, n, marks)?;
            layers(&mut pass, marks)?;
        }
        self.head.record(k, encoder, &self.x, n, rows, marks)
    }
}

/// Which rows of a step the output head turns into logits and tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadRows {
    /// The last `tail` rows of one sequence's step; the argmax of the last goes to the history.
    Tail(u32),
    /// Every row of a batched decode step, one per sequence; row r's argmax to `io.ids[r]`.
    Batch,
}

/// After the last layer: the last row (or every row, for the quality path and batched decode)
/// of the residual stream is copied out, normed, projected to logits (`io.logits`), and the
/// argmax of its last row written to `io.ids[0]` (the next decode step's input) and
/// `io.history` — or, for a batched decode step, the argmax of every row r to `io.ids[r]`.
/// Bound to `io.tail_step`, whose `n_tokens` is the number of rows kept.
pub struct OutputHead {
    tail_x: wgpu::Buffer,
    norm: Norm,
    lm_head: Linear,
    argmax: ArgmaxBinding,
    argmax_rows: ArgmaxBinding,
    row_bytes: u64,
    vocab: u64,
}

impl OutputHead {
    pub fn bind(
        k: &Kernels,
        ctx: &GpuContext,
        io: &StepIo,
        (norm_weight, eps): (&wgpu::Buffer, f32),
        (output, output_weights): (&TensorInfo, &wgpu::Buffer),
        poison: bool,
    ) -> Result<OutputHead, GpuError> {
        let (d, vocab) = (output.row_len() as usize, output.n_rows() as usize);
        let rows = io.logit_rows;
        let tail_x = activation(ctx, poison, "tail x", rows, d)?;
        let tail_h = activation(ctx, poison, "tail h", rows, d)?;
        let step = &io.tail_step;
        let norm = Norm::bind(
            k,
            ctx,
            NormIo::Out {
                x: View::rows(&tail_x, d as u32),
                y: View::rows(&tail_h, d as u32),
            },
            d,
            1,
            eps,
            norm_weight,
            step,
            rows,
        )?;
        let lm_head = Linear::bind(
            k,
            ctx,
            output,
            output_weights,
            &tail_h,
            &io.logits,
            step,
            rows,
            MatmulOutput::Store,
        )?;
        let argmax = |rows_mode: ArgmaxRows| {
            k.argmax.bind(
                ctx,
                ArgmaxShape {
                    vocab: vocab as u32,
                    rows: rows_mode,
                    max_tokens: rows,
                },
                View::rows(&io.logits, vocab as u32),
                &io.ids,
                &io.history,
                step,
            )
        };
        Ok(OutputHead {
            tail_x,
            norm,
            lm_head,
            argmax: argmax(ArgmaxRows::Last)?,
            argmax_rows: argmax(ArgmaxRows::All)?,
            row_bytes: d as u64 * 4,
            vocab: vocab as u64,
        })
    }

    /// Records the head after the layers' pass has ended, over the `rows` of the `n` rows of
    /// the residual stream `x`.
    pub fn record(
        &self,
        k: &Kernels,
        encoder: &mut wgpu::CommandEncoder,
        x: &wgpu::Buffer,
        n: u32,
        rows: HeadRows,
        marks: &mut StepMarks,
    ) -> Result<(), GpuError> {
        let (tail, argmax) = match rows {
            HeadRows::Tail(tail) => (tail, &self.argmax),
            HeadRows::Batch => (n, &self.argmax_rows),
        };
        let skip = u64::from(n - tail) * self.row_bytes;
        encoder.copy_buffer_to_buffer(x, skip, &self.tail_x, 0, u64::from(tail) * self.row_bytes);
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("output head"),
            timestamp_writes: None,
        });
        marks.begin(&mut pass);
        self.norm.record(k, &mut pass, tail, marks, "output_norm");
        self.lm_head.record(k, &mut pass, tail, marks, "output")?;
        k.argmax.encode(&mut pass, argmax, tail);
        // argmax is two dispatches (per-chunk maxima, then the winner).
        let logits = OpBytes::new(0, 4 * u64::from(tail) * self.vocab);
        marks.op(&mut pass, "argmax", "argmax", logits, 2);
        Ok(())
    }
}
