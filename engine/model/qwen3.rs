//! Qwen3 — and the dense family it belongs to (llama, qwen2) — as hyperparameters and tensors.
//!
//! Per layer (model-spec.md §4): `h = RMSNorm(x)`, `q,k,v = W h (+b)`, per-head q/k RMSNorm
//! (qwen3), RoPE, causal GQA attention, `x += W_o o`; then `x += W_down(silu(W_gate h2) ⊙ W_up h2)`
//! with `h2 = RMSNorm(x)`. Logits `= W_out RMSNorm(x)`, `W_out` tied to the embedding when the
//! file has no `output.weight`.

use super::bounds::{self, Size};
use super::device::{
    Attention, AttentionDims, AttentionIo, AttentionKernels, Binder, Ends, HeadRows, Kernels,
    Linear, Mlp, MlpBuffers, MlpTensors, Pointwise, Projection, StackedProjections, activation,
    qkv_op_name,
};
use super::{Arch, DevicePlan, ModelError, RopePairing, expect_tensor, optional_tensor};
use crate::gguf::{Gguf, TensorInfo};
use crate::gpu::kernels::elementwise::ElementwiseOp;
use crate::gpu::kernels::matmul::MatmulOutput;
use crate::gpu::kernels::rope::RopeTable;
use crate::gpu::kernels::rope_kv::HeadNorms;
use crate::gpu::kernels::support::View;
use crate::gpu::profile::StepMarks;
use crate::gpu::{GpuContext, GpuError};
use crate::reference::ops::vector;
use crate::runtime::{DeviceModel, StepIo};

/// Hyperparameters of a dense decoder, read from `{arch}.*` metadata.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Hparams {
    pub arch: Arch,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    /// Per-head width of q and k (`attention.key_length`, else n_embd / n_head).
    pub head_dim: usize,
    pub n_ff: usize,
    pub n_vocab: usize,
    pub n_ctx_train: usize,
    pub rms_eps: f32,
    pub rope_base: f32,
    /// Rotated dims per head (`rope.dimension_count`, else head_dim).
    pub n_rot: usize,
    pub rope_pairing: RopePairing,
    pub qk_norm: bool,
    pub qkv_bias: bool,
}

impl Hparams {
    pub fn from_gguf(gguf: &Gguf) -> Result<Self, ModelError> {
        let arch = Arch::of(gguf)?;
        if arch == Arch::Qwen35 {
            return Err(ModelError::Hparams {
                path: gguf.path().to_owned(),
                why: "qwen35 is a hybrid (Gated DeltaNet) model, not a dense one".into(),
            });
        }
        let m = gguf.metadata();
        let k = |s: &str| format!("{}.{s}", arch.key_prefix());
        let n_layer = bounds::block_count(m, &k("block_count"))?;
        let uniform = |key: String| -> Result<usize, ModelError> {
            let per_layer = m.usize_per_layer(&key, n_layer)?;
            match per_layer.first() {
                Some(&v) if per_layer.iter().all(|&x| x == v) => Ok(v),
                Some(_) => Err(m
                    .error(
                        &key,
                        "differs between layers, which dense models here do not support",
                    )
                    .into()),
                None => Err(m.error(&k("block_count"), "is 0").into()),
            }
        };
        let n_embd = m.usize(&k("embedding_length"))?;
        let n_head = uniform(k("attention.head_count"))?;
        let n_head_kv = match m.contains(&k("attention.head_count_kv")) {
            true => uniform(k("attention.head_count_kv"))?,
            false => n_head,
        };
        let head_dim = match m.opt_usize(&k("attention.key_length"))? {
            Some(d) => d,
            None if n_head > 0 => n_embd / n_head,
            None => 0,
        };
        if let Some(v) = m.opt_usize(&k("attention.value_length"))?
            && v != head_dim
        {
            return Err(m
                .error(
                    &k("attention.value_length"),
                    format!("{v} differs from key_length {head_dim}"),
                )
                .into());
        }
        let n_vocab = match m.opt_usize(&k("vocab_size"))? {
            Some(v) => v,
            None => gguf
                .require_tensor("token_embd.weight")?
                .shape
                .get(1)
                .copied()
                .unwrap_or(0) as usize,
        };
        if let Some(kind) = m.opt_str(&k("rope.scaling.type"))?
            && kind != "none"
        {
            return Err(m
                .error(
                    &k("rope.scaling.type"),
                    format!("{kind:?} rope scaling is not supported"),
                )
                .into());
        }
        let hp = Hparams {
            arch,
            n_embd,
            n_layer,
            n_head,
            n_head_kv,
            head_dim,
            n_ff: uniform(k("feed_forward_length"))?,
            n_vocab,
            n_ctx_train: m.usize(&k("context_length"))?,
            rms_eps: m.f32(&k("attention.layer_norm_rms_epsilon"))?,
            rope_base: m.opt_f32(&k("rope.freq_base"))?.unwrap_or(10_000.0),
            n_rot: m.opt_usize(&k("rope.dimension_count"))?.unwrap_or(head_dim),
            rope_pairing: match arch {
                Arch::Llama => RopePairing::Adjacent,
                Arch::Qwen2 | Arch::Qwen3 | Arch::Qwen35 => RopePairing::Neox,
            },
            qk_norm: arch == Arch::Qwen3,
            qkv_bias: arch == Arch::Qwen2,
        };
        bounds::check_settings(
            m,
            arch.key_prefix(),
            &[
                ("embedding_length", hp.n_embd, Size::Width),
                ("attention.head_count", hp.n_head, Size::Heads),
                ("attention.head_count_kv", hp.n_head_kv, Size::Heads),
                ("attention.key_length", hp.head_dim, Size::HeadDim),
                ("feed_forward_length", hp.n_ff, Size::Width),
                ("vocab_size", hp.n_vocab, Size::Vocab),
                ("context_length", hp.n_ctx_train, Size::Context),
            ],
        )?;
        hp.validate(gguf)?;
        Ok(hp)
    }

    fn validate(&self, gguf: &Gguf) -> Result<(), ModelError> {
        let bad = |why: String| {
            Err(ModelError::Hparams {
                path: gguf.path().to_owned(),
                why,
            })
        };
        let positive = [
            ("embedding_length", self.n_embd),
            ("block_count", self.n_layer),
            ("attention.head_count", self.n_head),
            ("attention.head_count_kv", self.n_head_kv),
            ("attention.key_length", self.head_dim),
            ("feed_forward_length", self.n_ff),
            ("vocab_size", self.n_vocab),
            ("context_length", self.n_ctx_train),
        ];
        for (key, v) in positive {
            if v == 0 {
                return bad(format!("{}.{key} is 0", self.arch.key_prefix()));
            }
        }
        if !self.n_head.is_multiple_of(self.n_head_kv) {
            return bad(format!(
                "head_count {} is not a multiple of head_count_kv {}",
                self.n_head, self.n_head_kv
            ));
        }
        if !self.n_rot.is_multiple_of(2) || self.n_rot > self.head_dim {
            return bad(format!(
                "rope.dimension_count {} must be even and at most the head size {}",
                self.n_rot, self.head_dim
            ));
        }
        if !(self.rms_eps > 0.0 && self.rope_base > 0.0) {
            return bad(format!(
                "layer_norm_rms_epsilon {} and rope.freq_base {} must be positive",
                self.rms_eps, self.rope_base
            ));
        }
        Ok(())
    }

    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }

    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }
}

/// The tensors of one layer, shape-checked against the hyperparameters.
pub struct Layer<'g> {
    pub attn_norm: &'g TensorInfo,
    pub wq: &'g TensorInfo,
    pub wk: &'g TensorInfo,
    pub wv: &'g TensorInfo,
    pub wo: &'g TensorInfo,
    pub bq: Option<&'g TensorInfo>,
    pub bk: Option<&'g TensorInfo>,
    pub bv: Option<&'g TensorInfo>,
    pub q_norm: Option<&'g TensorInfo>,
    pub k_norm: Option<&'g TensorInfo>,
    pub ffn_norm: &'g TensorInfo,
    pub gate: &'g TensorInfo,
    pub up: &'g TensorInfo,
    pub down: &'g TensorInfo,
}

/// Every tensor the forward pass reads.
pub struct Tensors<'g> {
    pub embd: &'g TensorInfo,
    pub output_norm: &'g TensorInfo,
    /// `output.weight`, or the embedding table when tied.
    pub output: &'g TensorInfo,
    pub tied: bool,
    /// Llama-3 per-frequency divisors (`rope_freqs.weight`, [n_rot/2]).
    pub rope_freqs: Option<&'g TensorInfo>,
    pub layers: Vec<Layer<'g>>,
}

impl<'g> Tensors<'g> {
    pub fn bind(gguf: &'g Gguf, hp: &Hparams) -> Result<Self, ModelError> {
        let (d, q, kv, ff, v) = (
            hp.n_embd as u64,
            hp.q_dim() as u64,
            hp.kv_dim() as u64,
            hp.n_ff as u64,
            hp.n_vocab as u64,
        );
        let hd = hp.head_dim as u64;
        let embd = expect_tensor(gguf, "token_embd.weight", &[d, v])?;
        let output = optional_tensor(gguf, "output.weight", &[d, v])?;
        let layers = (0..hp.n_layer)
            .map(|i| {
                let name = |s: &str| format!("blk.{i}.{s}");
                let need = |s: &str, shape: &[u64]| expect_tensor(gguf, &name(s), shape);
                let bias = |s: &str, n: u64| match hp.qkv_bias {
                    true => need(s, &[n]).map(Some),
                    false => optional_tensor(gguf, &name(s), &[n]),
                };
                let norm = |s: &str| match hp.qk_norm {
                    true => need(s, &[hd]).map(Some),
                    false => Ok(None),
                };
                Ok(Layer {
                    attn_norm: need("attn_norm.weight", &[d])?,
                    wq: need("attn_q.weight", &[d, q])?,
                    wk: need("attn_k.weight", &[d, kv])?,
                    wv: need("attn_v.weight", &[d, kv])?,
                    wo: need("attn_output.weight", &[q, d])?,
                    bq: bias("attn_q.bias", q)?,
                    bk: bias("attn_k.bias", kv)?,
                    bv: bias("attn_v.bias", kv)?,
                    q_norm: norm("attn_q_norm.weight")?,
                    k_norm: norm("attn_k_norm.weight")?,
                    ffn_norm: need("ffn_norm.weight", &[d])?,
                    gate: need("ffn_gate.weight", &[d, ff])?,
                    up: need("ffn_up.weight", &[d, ff])?,
                    down: need("ffn_down.weight", &[ff, d])?,
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        Ok(Tensors {
            embd,
            output_norm: expect_tensor(gguf, "output_norm.weight", &[d])?,
            output: output.unwrap_or(embd),
            tied: output.is_none(),
            rope_freqs: optional_tensor(gguf, "rope_freqs.weight", &[hp.n_rot as u64 / 2])?,
            layers,
        })
    }
}

/// The dense decoder on the GPU: the weights, one bound layer per block, and the activations
/// every layer shares (a step of `n` tokens uses their first `n` rows).
pub struct DenseModel {
    hp: Hparams,
    max_context: usize,
    kernels: Kernels,
    attention: AttentionKernels,
    /// The embedding and the output head around the layers.
    ends: Ends,
    layers: Vec<DeviceLayer>,
}

/// One block's bindings.
struct DeviceLayer {
    /// attn_norm folded into the q, k, v products, stacked into as few weights as their types
    /// allow (ops `attn_qkv`, or `attn_qk` + `attn_v`, …).
    qkv: StackedProjections,
    bias: Vec<Pointwise>,
    attention: Attention,
    wo: Linear,
    mlp: Mlp,
}

/// The activations every layer reads and writes.
struct Scratch {
    x: wgpu::Buffer,
    h: wgpu::Buffer,
    /// The q, k, v projections: a run of stacked weights writes its outputs side by side per
    /// token into the buffer of its first tensor (q: up to q+k+v wide, k: up to k+v, v).
    qkv: wgpu::Buffer,
    k: wgpu::Buffer,
    v: wgpu::Buffer,
    /// q normed and rotated, as attention reads it.
    q_rot: wgpu::Buffer,
    o: wgpu::Buffer,
    gate_up: wgpu::Buffer,
    act: wgpu::Buffer,
}

impl Scratch {
    fn new(ctx: &GpuContext, hp: &Hparams, plan: &DevicePlan) -> Result<Scratch, GpuError> {
        let a =
            |label: &str, width: usize| activation(ctx, plan.poison, label, plan.max_tokens, width);
        Ok(Scratch {
            x: a("x", hp.n_embd)?,
            h: a("h", hp.n_embd)?,
            qkv: a("qkv", hp.q_dim() + 2 * hp.kv_dim())?,
            k: a("k", 2 * hp.kv_dim())?,
            v: a("v", hp.kv_dim())?,
            q_rot: a("q rotated", hp.q_dim())?,
            o: a("attention out", hp.q_dim())?,
            gate_up: a("ffn gate and up", 2 * hp.n_ff)?,
            act: a("ffn act", hp.n_ff)?,
        })
    }

    fn mlp(&self) -> MlpBuffers<'_> {
        MlpBuffers {
            x: &self.x,
            h: &self.h,
            gate_up: &self.gate_up,
            act: &self.act,
        }
    }
}

impl DenseModel {
    pub fn load(
        ctx: &GpuContext,
        gguf: &Gguf,
        io: &StepIo,
        plan: &DevicePlan,
    ) -> Result<DenseModel, ModelError> {
        let hp = Hparams::from_gguf(gguf)?;
        let t = Tensors::bind(gguf, &hp)?;
        let kernels = Kernels::new(ctx)?;
        let heads = (hp.n_head, hp.n_head_kv, hp.head_dim);
        let dims = AttentionDims::new(heads, hp.n_rot, hp.rope_pairing, plan);
        let attention = AttentionKernels::new(ctx, &dims)?;
        let freqs = t.rope_freqs.map(|r| vector(gguf, r)).transpose()?;
        let rope = RopeTable::new(ctx, hp.n_rot as u32, hp.rope_base, freqs.as_deref())?;
        let s = Scratch::new(ctx, &hp, plan)?;
        let loader = LayerLoader {
            b: Binder::new(&kernels, ctx, gguf, io, plan, hp.rms_eps),
            hp: &hp,
            s: &s,
            io,
        };
        let ends = (t.embd, t.output_norm);
        let ends = Ends::bind(&loader.b, io, ends, (t.output, t.tied), &s.x, plan.poison)?;
        let layers = t
            .layers
            .iter()
            .map(|l| loader.layer(l, &attention, &dims, &rope))
            .collect::<Result<Vec<_>, ModelError>>()?;
        Ok(DenseModel {
            max_context: plan.max_context,
            kernels,
            attention,
            ends,
            layers,
            hp,
        })
    }

    fn record_layers(
        &self,
        pass: &mut wgpu::ComputePass,
        n: u32,
        marks: &mut StepMarks,
    ) -> Result<(), GpuError> {
        let k = &self.kernels;
        for l in &self.layers {
            l.qkv.record(k, pass, n, marks, "attn_norm")?;
            for op in &l.bias {
                op.record(k, pass, n, marks, "qkv_bias");
            }
            l.attention.record(k, &self.attention, pass, n, marks);
            l.wo.record(k, pass, n, marks, "attn_output")?;
            l.mlp.record(k, pass, n, marks)?;
        }
        Ok(())
    }
}

/// Binds one layer over the shared activations.
struct LayerLoader<'a> {
    b: Binder<'a>,
    hp: &'a Hparams,
    s: &'a Scratch,
    io: &'a StepIo,
}

impl LayerLoader<'_> {
    fn layer(
        &self,
        l: &Layer<'_>,
        attention: &AttentionKernels,
        dims: &AttentionDims,
        rope: &RopeTable,
    ) -> Result<DeviceLayer, ModelError> {
        let (b, hp, s) = (&self.b, self.hp, self.s);
        let (hd, n_head, n_kv) = (hp.head_dim as u32, hp.n_head as u32, hp.n_head_kv as u32);
        let (q_dim, kv_dim) = (n_head * hd, n_kv * hd);
        // q, k, v in runs of weights that can be stored back to back (one mat-vec each): all
        // three when they share a type, q+k when only v differs (Q4_K_M's Q6_K v layers), ….
        // A run's outputs go to the buffer of its first tensor, side by side per token.
        let parts = [(l.wq, &s.qkv), (l.wk, &s.k), (l.wv, &s.v)]
            .map(|(tensor, y)| Projection { tensor, y });
        let (qkv, outputs) =
            StackedProjections::bind(b, (&s.x, &s.h), l.attn_norm, &parts, qkv_op_name)?;
        let q = outputs[0].heads(n_head, hd, hd);
        let k = outputs[1].heads(n_kv, hd, hd);
        let v = outputs[2].heads(n_kv, hd, hd);
        let mut bias = Vec::new();
        for (t, out, width) in [
            (l.bq, outputs[0], q_dim),
            (l.bk, outputs[1], kv_dim),
            (l.bv, outputs[2], kv_dim),
        ] {
            if let Some(t) = t {
                let y = b.vector(t)?;
                let op = ElementwiseOp::Add {
                    x: out.rows(),
                    y: View::rows(&y, width).strided(0, 0),
                };
                bias.push(b.pointwise(1, width as usize, op)?);
            }
        }
        let norms = match (l.q_norm, l.k_norm) {
            (Some(qn), Some(kn)) => Some((b.vector(qn)?, b.vector(kn)?)),
            _ => None,
        };
        let attention = Attention::bind(
            b.k,
            attention,
            b.ctx,
            dims,
            rope,
            AttentionIo {
                q,
                k,
                v,
                q_out: View::heads(&s.q_rot, n_head, hd),
                o: View::heads(&s.o, n_head, hd),
                norms: norms.as_ref().map(|(q, k)| HeadNorms {
                    q,
                    k,
                    eps: hp.rms_eps,
                }),
            },
            self.io,
        )?;
        let mlp = MlpTensors {
            norm: l.ffn_norm,
            gate: l.gate,
            up: l.up,
            down: l.down,
        };
        Ok(DeviceLayer {
            qkv,
            bias,
            attention,
            wo: b.linear(l.wo, &s.o, &s.x, MatmulOutput::Accumulate)?,
            mlp: Mlp::bind(b, &mlp, &s.mlp())?,
        })
    }
}

impl DenseModel {
    /// The layers over `n` rows (one sequence's tokens, or one token of each sequence of a
    /// batch), then the head on `rows` of them.
    fn record(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        n: u32,
        rows: HeadRows,
        marks: &mut StepMarks,
    ) -> Result<(), GpuError> {
        let layers = |pass: &mut wgpu::ComputePass, marks: &mut StepMarks| {
            self.record_layers(pass, n, marks)
        };
        self.ends.record(
            &self.kernels,
            encoder,
            "dense layers",
            n,
            rows,
            marks,
            layers,
        )
    }
}

impl DeviceModel for DenseModel {
    fn encode_step(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        n_tokens: u32,
        all_logits: bool,
        marks: &mut StepMarks,
    ) -> Result<(), GpuError> {
        let tail = if all_logits { n_tokens } else { 1 };
        self.record(encoder, n_tokens, HeadRows::Tail(tail), marks)
    }

    fn encode_batch(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        n_seqs: u32,
        marks: &mut StepMarks,
    ) -> Result<(), GpuError> {
        self.record(encoder, n_seqs, HeadRows::Batch, marks)
    }

    fn encode_reset(
        &self,
        _encoder: &mut wgpu::CommandEncoder,
        _slot: u32,
    ) -> Result<(), GpuError> {
        Ok(())
    }

    fn encode_copy_page(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        src: u32,
        dst: u32,
    ) -> Result<(), GpuError> {
        for l in &self.layers {
            l.attention.copy_page(&self.attention, encoder, src, dst)?;
        }
        Ok(())
    }

    fn max_context(&self) -> usize {
        self.max_context
    }

    fn n_vocab(&self) -> usize {
        self.hp.n_vocab
    }
}
