//! What every model on the GPU shares: the kernels built once per model, weights uploaded as the
//! GGUF stores them, projections that pick mat-vec or mat-mul by the step's token count, the
//! causal attention block over a paged KV cache, and the output head.
//!
//! Each piece binds everything it touches at load (bind groups built once) and only records
//! dispatches per step; `record` notes each op it recorded (name, dispatches, bytes moved) in
//! the step's `StepMarks`, so a model reports the dispatches and bytes of a step from the code
//! that records them (a prefill's count must not grow with the prompt). Bind groups keep the buffers they bind alive (wgpu reference-counts its
//! resources), so a model holds only what it records with.

use super::ModelError;
use crate::gguf::{Gguf, TensorInfo};
use crate::gpu::kernels::argmax::{Argmax, ArgmaxBinding, ArgmaxRows, ArgmaxShape};
use crate::gpu::kernels::attn_decode::{AttnDecode, AttnShape, DecodeBinding, DecodeIo};
use crate::gpu::kernels::attn_prefill::{AttnPrefill, PrefillBinding, PrefillIo};
use crate::gpu::kernels::elementwise::{
    Elementwise, ElementwiseBinding, ElementwiseOp, ElementwiseShape,
};
use crate::gpu::kernels::embed::{Embed, EmbedBinding, EmbedIo, EmbedShape};
use crate::gpu::kernels::kv_cache::{KvCache, KvDtype, KvLayout, KvWrite, KvWriteBinding};
use crate::gpu::kernels::matmul::{
    Matmul, MatmulBinding, MatmulBuffers, MatmulOutput, MatmulShape,
};
use crate::gpu::kernels::matvec::{MAX_BATCH, MatVec, MatVecBinding, MatVecIo, MatVecShape};
use crate::gpu::kernels::rms_norm::{NormIo, RmsNorm, RmsNormBinding, RmsNormShape};
use crate::gpu::kernels::rope::{Rope, RopeBinding, RopeShape, RopeTable};
use crate::gpu::kernels::support::{Positions, View};
use crate::gpu::profile::{OpBytes, StepMarks};
use crate::gpu::{Activations, GpuContext, GpuError, StepBuffer, fill_f32, storage_buffer, upload};
use crate::model::RopePairing;
use crate::runtime::{StepIo, StepKind};

/// The kernels a model records, each built once for the adapter's paths.
pub struct Kernels {
    pub matvec: MatVec,
    pub matmul: Matmul,
    pub embed: Embed,
    pub rms_norm: RmsNorm,
    pub rope: Rope,
    pub kv_write: KvWrite,
    pub elementwise: Elementwise,
    pub argmax: Argmax,
}

impl Kernels {
    pub fn new(ctx: &GpuContext) -> Result<Kernels, GpuError> {
        let paths = ctx.paths();
        Ok(Kernels {
            matvec: MatVec::new(ctx, paths)?,
            matmul: Matmul::new(ctx, paths)?,
            embed: Embed::new(ctx, paths)?,
            rms_norm: RmsNorm::new(ctx, paths)?,
            rope: Rope::new(ctx, paths)?,
            kv_write: KvWrite::new(ctx, paths)?,
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

/// `y (+)= W x` for one weight tensor: mat-vec for steps of up to [`MAX_BATCH`] tokens (decode),
/// the tiled mat-mul above (prefill). Both are bound at load over the same weight buffer.
pub struct Linear {
    matvec: MatVecBinding,
    matmul: Option<MatmulBinding>,
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
        let (rows, cols) = (t.n_rows(), t.row_len());
        let matvec = k.matvec.bind(
            ctx,
            MatVecShape {
                ty: t.ty,
                rows,
                cols,
            },
            &MatVecIo {
                weights: w,
                weights_offset: 0,
                x: Activations::contiguous(x, cols),
                y: Activations::contiguous(y, rows),
                step,
                accumulate: output == MatmulOutput::Accumulate,
                max_batch: max_tokens.min(MAX_BATCH),
            },
        )?;
        let matmul = (max_tokens > MAX_BATCH)
            .then(|| {
                k.matmul.bind(
                    ctx,
                    MatmulShape {
                        ty: t.ty,
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
                )
            })
            .transpose()?;
        Ok(Linear {
            matvec,
            matmul,
            rows,
            cols,
            weight_bytes: t.n_rows() * t.row_bytes(),
            accumulate: output == MatmulOutput::Accumulate,
        })
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
        let (kernel, dispatches) = match &self.matmul {
            Some(binding) if n > MAX_BATCH => {
                k.matmul.encode(pass, binding, n)?;
                ("matmul", binding.ranges())
            }
            _ => {
                k.matvec.encode(pass, &self.matvec, n)?;
                ("matvec", self.matvec.grids().count())
            }
        };
        let y_passes = if self.accumulate { 2 } else { 1 };
        let activations = 4 * u64::from(n) * (self.cols + y_passes * self.rows);
        let bytes = OpBytes::new(self.weight_bytes, activations);
        marks.op(pass, name, kernel, bytes, dispatches);
        Ok(())
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

impl Binder<'_> {
    /// A 1-D tensor uploaded as f32.
    pub fn vector(&self, t: &TensorInfo) -> Result<wgpu::Buffer, ModelError> {
        upload_vector(self.ctx, self.gguf, t)
    }

    /// `y = RMSNorm(x; w)` over rows of `width`.
    pub fn norm(
        &self,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
        width: usize,
        w: &TensorInfo,
    ) -> Result<Norm, ModelError> {
        let io = NormIo::Out {
            x: View::rows(x, width as u32),
            y: View::rows(y, width as u32),
        };
        let w = self.vector(w)?;
        let norm = Norm::bind(
            self.k, self.ctx, io, width, 1, self.eps, &w, self.step, self.rows,
        )?;
        Ok(norm)
    }

    /// RMSNorm in place over each of `heads` heads of `view` (per-head q/k norm).
    pub fn head_norm(
        &self,
        view: View<'_>,
        heads: usize,
        width: usize,
        w: &TensorInfo,
    ) -> Result<Norm, ModelError> {
        let w = self.vector(w)?;
        let io = NormIo::InPlace(view);
        let norm = Norm::bind(
            self.k, self.ctx, io, width, heads, self.eps, &w, self.step, self.rows,
        )?;
        Ok(norm)
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
/// input `h`, and `[n, n_ff]` rows for gate, up and their product.
pub struct MlpBuffers<'a> {
    pub x: &'a wgpu::Buffer,
    pub h: &'a wgpu::Buffer,
    pub gate: &'a wgpu::Buffer,
    pub up: &'a wgpu::Buffer,
    pub act: &'a wgpu::Buffer,
}

/// `x += W_down(silu(W_gate h) ⊙ W_up h)` with `h = RMSNorm(x)`: the MLP half of a decoder
/// block (model-spec.md §4.g, §5.8).
pub struct Mlp {
    norm: Norm,
    gate: Linear,
    up: Linear,
    swiglu: Pointwise,
    down: Linear,
}

impl Mlp {
    pub fn bind(b: &Binder, t: &MlpTensors, s: &MlpBuffers) -> Result<Mlp, ModelError> {
        let d = t.norm.n_elements() as usize;
        let n_ff = t.gate.n_rows() as usize;
        let rows = |buffer| View::rows(buffer, n_ff as u32);
        let swiglu = ElementwiseOp::SwiGlu {
            gate: rows(s.gate),
            up: rows(s.up),
            out: rows(s.act),
        };
        Ok(Mlp {
            norm: b.norm(s.x, s.h, d, t.norm)?,
            gate: b.linear(t.gate, s.h, s.gate, MatmulOutput::Store)?,
            up: b.linear(t.up, s.h, s.up, MatmulOutput::Store)?,
            swiglu: b.pointwise(1, n_ff, swiglu)?,
            down: b.linear(t.down, s.act, s.x, MatmulOutput::Accumulate)?,
        })
    }

    /// Records the block's ops (`ffn_norm`, `ffn_gate`, `ffn_up`, `swiglu`, `ffn_down`).
    pub fn record(
        &self,
        k: &Kernels,
        pass: &mut wgpu::ComputePass,
        n: u32,
        marks: &mut StepMarks,
    ) -> Result<(), GpuError> {
        self.norm.record(k, pass, n, marks, "ffn_norm");
        self.gate.record(k, pass, n, marks, "ffn_gate")?;
        self.up.record(k, pass, n, marks, "ffn_up")?;
        self.swiglu.record(k, pass, n, marks, "swiglu");
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

/// The attention kernels of one head shape (every attention layer of a model shares them) and
/// the split-K scratch their decode passes share.
pub struct AttentionKernels {
    decode: AttnDecode,
    prefill: AttnPrefill,
    scratch: wgpu::Buffer,
    n_split: u32,
}

impl AttentionKernels {
    pub fn new(ctx: &GpuContext, dims: &AttentionDims) -> Result<AttentionKernels, GpuError> {
        let shape = AttnShape {
            n_head: dims.n_head as u32,
            n_kv: dims.n_kv as u32,
            head_dim: dims.head_dim as u32,
        };
        let decode = AttnDecode::new(ctx, ctx.paths(), shape)?;
        let n_split = AttnDecode::default_splits(dims.max_context as u32);
        let scratch = storage_buffer(
            ctx,
            "attention split-K scratch",
            decode.scratch_bytes(dims.max_seqs, n_split),
        )?;
        Ok(AttentionKernels {
            prefill: AttnPrefill::new(ctx, ctx.paths(), shape)?,
            decode,
            scratch,
            n_split,
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

/// Rotary embedding, cache write and causal attention of one layer, over q, k, v rows already
/// projected (and normed): `o[t] = softmax(q[t] K^T / sqrt(d)) V` over positions 0..=pos(t).
/// Every kernel reads each token's position and page-table row from `io.tokens` (the runtime
/// writes it per step), so one binding serves a prefill chunk of one sequence and a decode step
/// of several, each sequence on its own pages of the shared pool.
pub struct Attention {
    rope_q: RopeBinding,
    rope_k: RopeBinding,
    write: KvWriteBinding,
    decode: DecodeBinding,
    prefill: PrefillBinding,
    /// f32 bytes of one token's q (and o), and of its k (and v).
    q_bytes: u64,
    kv_bytes: u64,
    /// Bytes of one position's k (and v) in the cache.
    cached_bytes: u64,
}

/// Where one layer's attention reads its q, k, v and writes o.
pub struct AttentionIo<'a> {
    pub q: View<'a>,
    pub k: View<'a>,
    pub v: View<'a>,
    pub o: View<'a>,
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
        let cache = KvCache::new(ctx, attn.layout(dims, k.kv_write.dtype()))?;
        if dims.poison {
            // An f16 cache reads the pair of NaN halves as NaN too.
            fill_f32(ctx, &cache.k, f32::NAN)?;
            fill_f32(ctx, &cache.v, f32::NAN)?;
        }
        let rope_shape = |n_heads: usize| RopeShape {
            n_heads: n_heads as u32,
            head_dim: dims.head_dim as u32,
            pairing: dims.pairing,
            max_tokens: dims.max_tokens,
        };
        let rope_q = k
            .rope
            .bind(ctx, rope_shape(dims.n_head), io.q, rope, positions, step)?;
        let rope_k = k
            .rope
            .bind(ctx, rope_shape(dims.n_kv), io.k, rope, positions, step)?;
        let write = k.kv_write.bind(
            ctx,
            io.k,
            io.v,
            &cache,
            pages,
            positions,
            step,
            dims.max_tokens,
        )?;
        let decode = attn.decode.bind(
            ctx,
            DecodeIo {
                q: io.q,
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
                q: io.q,
                o: io.o,
                cache: &cache,
                pages,
                positions,
                step,
                max_tokens: dims.max_tokens,
            },
        )?;
        let kv_width = (dims.n_kv * dims.head_dim) as u64;
        Ok(Attention {
            rope_q,
            rope_k,
            write,
            decode,
            prefill,
            q_bytes: (dims.n_head * dims.head_dim) as u64 * 4,
            kv_bytes: kv_width * 4,
            cached_bytes: kv_width * k.kv_write.dtype().bytes(),
        })
    }

    /// Rotates q and k, writes k and v into the cache and attends: the split-K decode kernel
    /// for one token of each of `n` sequences (or a single token), the tiled causal kernel for a
    /// prefill chunk. The attention op reads k and v of every cached position once
    /// (`marks.kv_len` of them, summed over a batch's sequences).
    pub fn record(
        &self,
        k: &Kernels,
        attn: &AttentionKernels,
        pass: &mut wgpu::ComputePass,
        n: u32,
        kind: StepKind,
        marks: &mut StepMarks,
    ) {
        let tokens = u64::from(n);
        k.rope.encode(pass, &self.rope_q, n);
        marks.op(
            pass,
            "rope_q",
            "rope",
            OpBytes::new(0, 2 * tokens * self.q_bytes),
            1,
        );
        k.rope.encode(pass, &self.rope_k, n);
        marks.op(
            pass,
            "rope_k",
            "rope",
            OpBytes::new(0, 2 * tokens * self.kv_bytes),
            1,
        );
        k.kv_write.encode(pass, &self.write, n);
        let written = 2 * tokens * (self.kv_bytes + self.cached_bytes);
        marks.op(pass, "kv_write", "kv_write", OpBytes::new(0, written), 1);
        let cache = 2 * u64::from(marks.kv_len) * self.cached_bytes;
        let io = 2 * tokens * self.q_bytes;
        if n == 1 || kind == StepKind::Batch {
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
            attn.prefill.encode(pass, &self.prefill, n);
            marks.op(
                pass,
                "attention",
                "attn_prefill",
                OpBytes::new(cache, io),
                1,
            );
        }
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
