//! What every model puts its layers between: the token embedding ([`Embedding`]) and the output
//! head ([`OutputHead`]), bound together as [`Ends`].

use super::linear::{Linear, shape_of};
use super::norm::Norm;
use super::scratch::Act;
use super::{Binder, Kernels, upload_weight};
use crate::gguf::TensorInfo;
use crate::gpu::kernels::argmax::{ArgmaxBinding, ArgmaxRows, ArgmaxShape};
use crate::gpu::kernels::embed::{EmbedBinding, EmbedIo, EmbedShape};
use crate::gpu::kernels::matmul::MatmulOutput;
use crate::gpu::kernels::matvec::{MatVecBinding, MatVecFusion, MatVecIo};
use crate::gpu::kernels::rms_norm::NormIo;
use crate::gpu::kernels::support::View;
use crate::gpu::profile::StepMarks;
use crate::gpu::step::{MAX_BATCH, StepIo, StepKind};
use crate::gpu::{Activations, GpuContext, GpuError};
use crate::model::ModelError;
use crate::model::tensors::Tensors;

/// The token embedding lookup: `x[t] = table[ids[t]]` from any weight type.
pub struct Embedding {
    binding: EmbedBinding,
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
        Ok(Embedding { binding })
    }

    /// Records the lookup of `n` tokens (one table row each).
    pub fn record(
        &self,
        k: &Kernels,
        pass: &mut wgpu::ComputePass,
        n: u32,
        marks: &mut StepMarks,
    ) -> Result<(), GpuError> {
        let recorded = k.embed.encode(pass, &self.binding, n)?;
        marks.op(pass, "embed", recorded);
        Ok(())
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
    /// Binds the embedding `t.embd` into the residual stream, and the head over it: the final
    /// norm, then `t.output` (the embedding table where tied: its buffer is uploaded once).
    pub fn bind(b: &Binder, t: &Tensors) -> Result<Ends, ModelError> {
        let (io, x) = (b.io, b.scratch.get(Act::X));
        let table = upload_weight(b.ctx, b.gguf, t.embd)?;
        let embedding = Embedding::bind(b.k, b.ctx, t.embd, &table, io, x)?;
        let output_weights = match t.tied {
            true => table,
            false => upload_weight(b.ctx, b.gguf, t.output)?,
        };
        let norm = b.vector(t.output_norm)?;
        let tail = (b.scratch.get(Act::TailX), b.scratch.get(Act::TailH));
        let head = OutputHead::bind(
            b.k,
            b.ctx,
            io,
            (&norm, b.eps),
            (t.output, &output_weights),
            tail,
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
        rows: HeadRows<'_>,
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
pub enum HeadRows<'a> {
    /// The last row of one sequence's step (its next token); its argmax goes to the history.
    Last,
    /// Every one of the `n` rows of one sequence's step (the quality path's logits); the argmax
    /// of the last goes to the history.
    Every(u32),
    /// Every row of a batched decode step, one per sequence; row r's argmax to `io.ids[r]`.
    Batch,
    /// The given rows of a step of several prompts (each sequence's last row), in order: the
    /// i-th one's logits are row i of `io.logits`, its argmax goes to `io.ids[i]`.
    Rows(&'a [u32]),
}

/// After the last layer: the last row (or every row, for the quality path and batched decode)
/// of the residual stream is copied out, normed, projected to logits (`io.logits`), and the
/// argmax of its last row written to `io.ids[0]` (the next decode step's input) and
/// `io.history` — or, for a batched decode step, the argmax of every row r to `io.ids[r]`.
/// Bound to `io.tail_step`, whose `n_tokens` is the number of rows kept.
///
/// A prompt step keeps a row per sequence (up to [`MAX_BATCH`]: the ragged packer's cap), so
/// its head is a mat-vec on f32 inputs (`prompt_rows`), not the mat-mul its layers use: a
/// 128-row mat-mul tile for one row read the weights at ~230 GB/s on an H200 (8 % of the 8B's
/// 128-token prefill, experiments/NOTES.md, session 2026-12-05 #5). Only the quality path's
/// every-row logits take the mat-mul.
pub struct OutputHead {
    tail_x: wgpu::Buffer,
    norm: Norm,
    lm_head: Linear,
    prompt_rows: MatVecBinding,
    argmax: ArgmaxBinding,
    argmax_rows: ArgmaxBinding,
    /// f32 bytes of one row of the residual stream.
    row_bytes: u64,
}

impl OutputHead {
    /// Binds the head over `tail_x` (the rows of the residual stream it reads) normed into
    /// `tail_h`, `io.logit_rows` rows of each.
    pub fn bind(
        k: &Kernels,
        ctx: &GpuContext,
        io: &StepIo,
        (norm_weight, eps): (&wgpu::Buffer, f32),
        (output, output_weights): (&TensorInfo, &wgpu::Buffer),
        (tail_x, tail_h): (&wgpu::Buffer, &wgpu::Buffer),
    ) -> Result<OutputHead, GpuError> {
        let (d, vocab) = (output.row_len() as usize, output.n_rows() as usize);
        let rows = io.logit_rows;
        let step = &io.tail_step;
        let norm = Norm::bind(
            k,
            ctx,
            NormIo::Out {
                x: View::rows(tail_x, d as u32),
                y: View::rows(tail_h, d as u32),
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
            tail_h,
            &io.logits,
            step,
            rows,
            MatmulOutput::Store,
        )?;
        let shape = shape_of(output);
        let io_f32 =
            MatVecIo::contiguous(shape, output_weights, tail_h, &io.logits, step, false, rows);
        let prompt_rows = k
            .matvec
            .bind_fused(ctx, shape, &io_f32, MatVecFusion::default())?;
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
            tail_x: tail_x.clone(),
            norm,
            lm_head,
            prompt_rows,
            argmax: argmax(ArgmaxRows::Last)?,
            argmax_rows: argmax(ArgmaxRows::All)?,
            row_bytes: d as u64 * 4,
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
        rows: HeadRows<'_>,
        marks: &mut StepMarks,
    ) -> Result<(), GpuError> {
        let (tail, argmax) = match rows {
            HeadRows::Last => (1, &self.argmax),
            HeadRows::Every(n) => (n, &self.argmax),
            HeadRows::Batch => (n, &self.argmax_rows),
            HeadRows::Rows(picked) => (picked.len() as u32, &self.argmax_rows),
        };
        match rows {
            HeadRows::Rows(picked) => {
                for (i, &r) in picked.iter().enumerate() {
                    if r >= n {
                        return Err(GpuError::Shape {
                            kernel: "output head",
                            message: format!("row {r} of a step of {n} rows"),
                        });
                    }
                    let (from, to) = (u64::from(r), i as u64);
                    let bytes = self.row_bytes;
                    encoder.copy_buffer_to_buffer(x, from * bytes, &self.tail_x, to * bytes, bytes);
                }
            }
            _ => {
                let skip = u64::from(n - tail) * self.row_bytes;
                let bytes = u64::from(tail) * self.row_bytes;
                encoder.copy_buffer_to_buffer(x, skip, &self.tail_x, 0, bytes);
            }
        }
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("output head"),
            timestamp_writes: None,
        });
        marks.begin(&mut pass);
        self.norm.record(k, &mut pass, tail, marks, "output_norm")?;
        // A sequence's next-token row takes the mat-vec however the prompt was cut into steps;
        // the quality path's every-row logits take the mat-mul whatever their count, so a
        // prompt's rows come out the same in any steps.
        let next_tokens = matches!(rows, HeadRows::Last | HeadRows::Rows(_));
        if marks.kind == StepKind::Prompt && next_tokens && tail <= MAX_BATCH {
            let recorded = k.matvec.encode(&mut pass, &self.prompt_rows, tail)?;
            marks.op(&mut pass, "output", recorded);
        } else {
            self.lm_head.record(k, &mut pass, tail, marks, "output")?;
        }
        let recorded = marks.probed("argmax", &mut pass, |p| k.argmax.encode(p, argmax, tail))?;
        marks.op(&mut pass, "argmax", recorded);
        Ok(())
    }
}
