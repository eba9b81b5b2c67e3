//! Qwen3.5 (GGUF arch `qwen35`): a hybrid of Gated DeltaNet layers and gated full-attention
//! layers, each followed by a dense SwiGLU MLP (model-spec.md §5).
//!
//! Decoder block: `u = x + Mixer(RMSNorm(x; attn_norm))`, `x' = u + MLP(RMSNorm(u; post_attention_norm))`.
//! - GDN mixer: `m = W_qkv h`, causal depthwise conv (K taps, tap 0 the oldest) + SiLU, split
//!   into q, k (nk heads of dk) and v (nv heads of dv); `β = σ(W_β h)`,
//!   `g = ssm_a · softplus(W_α h + dt_bias)`; q̂ = l2norm(q)/√dk, k̂ = l2norm(k); per v-head the
//!   delta rule on a dk×dv state; `y = ssm_norm ⊙ RMSNorm₀(o) ⊙ silu(z)`, `out = W_out y`.
//! - Gated attention: `W_q h` holds per head [q | gate] (hd each); q/k per-head RMSNorm; NeoX RoPE
//!   on the first n_rot dims; causal GQA; `o ⊙ σ(gate)`; `W_o`.
//!
//! On the GPU ([`HybridModel`]) each layer is a short list of kernel calls over activations
//! shared by all layers; the GDN layers keep their conv and recurrent state, one slot per
//! sequence in flight (its page-table row), beside the attention layers' paged KV caches. A step
//! of one token runs the recurrent delta rule, a prefill step the chunked form (two dispatches
//! whatever its length); both continue the same state, so a prefill may be split over steps and
//! decode picks up where it ended. A batched decode step serves one token of each of several
//! sequences: the projections multiply all their rows in one mat-vec (each weight read once),
//! the GDN kernels run each sequence on its own state slot (`io.seqs`), attention on its own
//! pages and position (`io.tokens`).
//!
//! Traps this file handles: GGUF norm weights already include the +1 (`ssm_norm` never had
//! one); `ssm_a` is already −exp(A_log); V heads are stored tiled (v-head p reads k-head
//! p mod nk) unless the file says `ssm.v_head_reordered = false`; MTP/NextN blocks after the trunk
//! are skipped.

use super::bounds::{self, Size};
use super::device::{
    Attention, AttentionDims, AttentionIo, AttentionKernels, Binder, Ends, HeadRows, Kernels,
    Linear, Mlp, MlpBuffers, MlpTensors, Pointwise, Projection, StackedProjections, activation,
    qkv_op_name,
};
use super::{Arch, DevicePlan, ModelError, RopePairing, expect_tensor};
use crate::gguf::{Gguf, TensorInfo};
use crate::gpu::kernels::delta_prep::{DeltaPrep, PrepBinding, PrepIo};
use crate::gpu::kernels::delta_state::{DeltaDims, DeltaState, SeqBatch, SequenceTable, TensorRef};
use crate::gpu::kernels::elementwise::ElementwiseOp;
use crate::gpu::kernels::gated_delta::{DecodeBinding, DecodeIo as RecurrentIo, GatedDeltaDecode};
use crate::gpu::kernels::gated_delta_chunk::{
    ChunkBinding, ChunkIo, ChunkScratch, GatedDeltaChunked,
};
use crate::gpu::kernels::gated_norm::{GatedNorm, NormBinding, NormIo as GatedNormIo};
use crate::gpu::kernels::matmul::MatmulOutput;
use crate::gpu::kernels::rope::RopeTable;
use crate::gpu::kernels::rope_kv::HeadNorms;
use crate::gpu::kernels::ssm_conv::{ConvBinding, ConvIo, SsmConv};
use crate::gpu::kernels::support::View;
use crate::gpu::profile::{OpBytes, StepMarks};
use crate::gpu::step::StepKind;
use crate::gpu::{GpuContext, GpuError, fill_f32};
use crate::quant::GgmlType;
use crate::runtime::{DeviceModel, StepIo};

/// Conv kernel sizes the kernels support (the family uses 4).
pub const SUPPORTED_CONV_KERNELS: [usize; 3] = [2, 3, 4];

/// How a v-head finds the k-head it reads (model-spec.md §5.4.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum HeadMapping {
    /// llama.cpp's qwen35 converter order: v-head p reads k-head p mod nk.
    Tiled,
    /// Hugging Face / qwen3next order: v-head h reads k-head ⌊h / (nv/nk)⌋.
    Grouped,
}

impl HeadMapping {
    pub fn key_head(self, v_head: usize, nk: usize, nv: usize) -> usize {
        match self {
            HeadMapping::Tiled => v_head % nk,
            HeadMapping::Grouped => v_head / (nv / nk),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum LayerKind {
    DeltaNet,
    Attention,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Hparams {
    pub n_embd: usize,
    /// Trunk layers (MTP blocks excluded).
    pub n_layer: usize,
    pub layer_kinds: Vec<LayerKind>,
    pub n_ff: usize,
    pub n_vocab: usize,
    pub n_ctx_train: usize,
    pub rms_eps: f32,
    // Gated attention.
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub n_rot: usize,
    pub rope_base: f32,
    // Gated DeltaNet.
    pub conv_kernel: usize,
    /// dk: key (and query) head size.
    pub ssm_dk: usize,
    /// dv: value head size.
    pub ssm_dv: usize,
    /// nk: key heads.
    pub ssm_nk: usize,
    /// nv: value heads.
    pub ssm_nv: usize,
    pub head_mapping: HeadMapping,
}

impl Hparams {
    pub fn from_gguf(gguf: &Gguf) -> Result<Self, ModelError> {
        let arch = Arch::of(gguf)?;
        if arch != Arch::Qwen35 {
            return Err(ModelError::Hparams {
                path: gguf.path().to_owned(),
                why: format!("{arch:?} is not a qwen35 model"),
            });
        }
        let m = gguf.metadata();
        let k = |s: &str| format!("qwen35.{s}");
        let n_blocks = bounds::block_count(m, &k("block_count"))?;
        let n_mtp = m.opt_usize(&k("nextn_predict_layers"))?.unwrap_or(0);
        let n_layer = n_blocks
            .checked_sub(n_mtp)
            .filter(|&n| n > 0)
            .ok_or_else(|| {
                m.error(
                    &k("nextn_predict_layers"),
                    format!("{n_mtp} leaves no trunk of the {n_blocks} blocks"),
                )
            })?;
        let layer_kinds = layer_schedule(gguf, n_blocks, n_layer)?;
        // Per-layer arrays must agree over the layers they describe (head_count_kv may be 0 on
        // GDN layers in some files, so attention keys are checked on attention layers only).
        let uniform = |key: String, attention_only: bool| -> Result<usize, ModelError> {
            let v = m.usize_per_layer(&key, n_blocks)?;
            let used: Vec<usize> = v[..n_layer]
                .iter()
                .zip(&layer_kinds)
                .filter(|(_, kind)| !attention_only || **kind == LayerKind::Attention)
                .map(|(&x, _)| x)
                .collect();
            match used.first() {
                Some(&x) if used.iter().all(|&y| y == x) => Ok(x),
                Some(_) => Err(m
                    .error(&key, "differs between layers, which is not supported")
                    .into()),
                None => Err(m.error(&key, "describes no layer of the trunk").into()),
            }
        };
        let inner = m.usize(&k("ssm.inner_size"))?;
        let nv = m.usize(&k("ssm.time_step_rank"))?;
        let head_mapping = match m.opt_bool(&k("ssm.v_head_reordered"))? {
            Some(false) => HeadMapping::Grouped,
            _ => HeadMapping::Tiled,
        };
        let n_head = uniform(k("attention.head_count"), true)?;
        let hp = Hparams {
            n_embd: m.usize(&k("embedding_length"))?,
            n_layer,
            n_ff: uniform(k("feed_forward_length"), false)?,
            n_vocab: match m.opt_usize(&k("vocab_size"))? {
                Some(v) => v,
                None => gguf
                    .require_tensor("token_embd.weight")?
                    .shape
                    .get(1)
                    .copied()
                    .unwrap_or(0) as usize,
            },
            n_ctx_train: m.usize(&k("context_length"))?,
            rms_eps: m.f32(&k("attention.layer_norm_rms_epsilon"))?,
            n_head,
            n_head_kv: uniform(k("attention.head_count_kv"), true)?,
            head_dim: m.usize(&k("attention.key_length"))?,
            n_rot: m.usize(&k("rope.dimension_count"))?,
            rope_base: m.opt_f32(&k("rope.freq_base"))?.unwrap_or(10_000.0),
            conv_kernel: m.usize(&k("ssm.conv_kernel"))?,
            ssm_dk: m.usize(&k("ssm.state_size"))?,
            ssm_dv: inner.checked_div(nv).unwrap_or(0),
            ssm_nk: m.usize(&k("ssm.group_count"))?,
            ssm_nv: nv,
            head_mapping,
            layer_kinds,
        };
        bounds::check_settings(
            m,
            "qwen35",
            &[
                ("embedding_length", hp.n_embd, Size::Width),
                ("feed_forward_length", hp.n_ff, Size::Width),
                ("vocab_size", hp.n_vocab, Size::Vocab),
                ("context_length", hp.n_ctx_train, Size::Context),
                ("attention.head_count", hp.n_head, Size::Heads),
                ("attention.head_count_kv", hp.n_head_kv, Size::Heads),
                ("attention.key_length", hp.head_dim, Size::HeadDim),
                ("ssm.conv_kernel", hp.conv_kernel, Size::Taps),
                ("ssm.state_size", hp.ssm_dk, Size::HeadDim),
                ("ssm.group_count", hp.ssm_nk, Size::Heads),
                ("ssm.time_step_rank", hp.ssm_nv, Size::Heads),
                ("ssm.inner_size", inner, Size::Width),
            ],
        )?;
        hp.validate(gguf, inner)?;
        Ok(hp)
    }

    fn validate(&self, gguf: &Gguf, inner: usize) -> Result<(), ModelError> {
        let m = gguf.metadata();
        let bad =
            |key: &str, why: String| Err(ModelError::from(m.error(&format!("qwen35.{key}"), why)));
        let positive = [
            ("embedding_length", self.n_embd),
            ("feed_forward_length", self.n_ff),
            ("attention.head_count", self.n_head),
            ("attention.head_count_kv", self.n_head_kv),
            ("attention.key_length", self.head_dim),
            ("ssm.state_size", self.ssm_dk),
            ("ssm.group_count", self.ssm_nk),
            ("ssm.time_step_rank", self.ssm_nv),
            ("vocab_size", self.n_vocab),
            ("context_length", self.n_ctx_train),
        ];
        for (key, v) in positive {
            if v == 0 {
                return bad(key, "is 0".into());
            }
        }
        if !self.n_head.is_multiple_of(self.n_head_kv) {
            return bad(
                "attention.head_count_kv",
                format!(
                    "{} does not divide head_count {}",
                    self.n_head_kv, self.n_head
                ),
            );
        }
        if inner != self.ssm_dv * self.ssm_nv || self.ssm_dv == 0 {
            return bad(
                "ssm.inner_size",
                format!(
                    "{inner} is not a positive multiple of time_step_rank {}",
                    self.ssm_nv
                ),
            );
        }
        if !self.ssm_nv.is_multiple_of(self.ssm_nk) {
            return bad(
                "ssm.time_step_rank",
                format!(
                    "{} value heads are not a multiple of the {} key heads (ssm.group_count)",
                    self.ssm_nv, self.ssm_nk
                ),
            );
        }
        if !SUPPORTED_CONV_KERNELS.contains(&self.conv_kernel) {
            return bad(
                "ssm.conv_kernel",
                format!(
                    "{} taps; the kernels support {SUPPORTED_CONV_KERNELS:?}",
                    self.conv_kernel
                ),
            );
        }
        if !self.n_rot.is_multiple_of(2) || self.n_rot > self.head_dim {
            return bad(
                "rope.dimension_count",
                format!(
                    "{} must be even and at most the head size {}",
                    self.n_rot, self.head_dim
                ),
            );
        }
        if let Some(v) = m.opt_usize("qwen35.attention.value_length")?
            && v != self.head_dim
        {
            return bad(
                "attention.value_length",
                format!("{v} differs from key_length {}", self.head_dim),
            );
        }
        Ok(())
    }

    pub fn key_dim(&self) -> usize {
        self.ssm_nk * self.ssm_dk
    }

    pub fn value_dim(&self) -> usize {
        self.ssm_nv * self.ssm_dv
    }

    /// Channels of the conv (q, k and v together).
    pub fn conv_dim(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }

    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }

    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }
}

/// Which trunk layers are GDN: the per-block `attention.recurrent_layers` array when present
/// (it includes MTP blocks), else layer ℓ is attention iff (ℓ+1) is a multiple of
/// `full_attention_interval` (default 4).
fn layer_schedule(
    gguf: &Gguf,
    n_blocks: usize,
    n_layer: usize,
) -> Result<Vec<LayerKind>, ModelError> {
    let m = gguf.metadata();
    let key = "qwen35.attention.recurrent_layers";
    if m.contains(key) {
        let flags = m.bool_array(key)?;
        if flags.len() != n_blocks {
            return Err(m
                .error(
                    key,
                    format!("{} entries for {n_blocks} blocks", flags.len()),
                )
                .into());
        }
        return Ok(flags[..n_layer]
            .iter()
            .map(|&r| {
                if r {
                    LayerKind::DeltaNet
                } else {
                    LayerKind::Attention
                }
            })
            .collect());
    }
    let key = "qwen35.full_attention_interval";
    let interval = m.opt_usize(key)?.unwrap_or(4);
    if interval == 0 {
        return Err(m.error(key, "is 0").into());
    }
    Ok((0..n_layer)
        .map(|l| match (l + 1) % interval {
            0 => LayerKind::Attention,
            _ => LayerKind::DeltaNet,
        })
        .collect())
}

pub struct DeltaNetTensors<'g> {
    pub qkv: &'g TensorInfo,
    pub gate: &'g TensorInfo,
    pub beta: &'g TensorInfo,
    pub alpha: &'g TensorInfo,
    pub conv: &'g TensorInfo,
    pub dt_bias: &'g TensorInfo,
    pub a: &'g TensorInfo,
    pub norm: &'g TensorInfo,
    pub out: &'g TensorInfo,
}

pub struct AttentionTensors<'g> {
    /// [q | gate] per head.
    pub wq: &'g TensorInfo,
    pub wk: &'g TensorInfo,
    pub wv: &'g TensorInfo,
    pub wo: &'g TensorInfo,
    pub q_norm: &'g TensorInfo,
    pub k_norm: &'g TensorInfo,
}

pub enum Mixer<'g> {
    DeltaNet(DeltaNetTensors<'g>),
    Attention(AttentionTensors<'g>),
}

pub struct Layer<'g> {
    pub attn_norm: &'g TensorInfo,
    pub mixer: Mixer<'g>,
    pub post_norm: &'g TensorInfo,
    pub gate: &'g TensorInfo,
    pub up: &'g TensorInfo,
    pub down: &'g TensorInfo,
}

pub struct Tensors<'g> {
    pub embd: &'g TensorInfo,
    pub output_norm: &'g TensorInfo,
    pub output: &'g TensorInfo,
    pub tied: bool,
    pub layers: Vec<Layer<'g>>,
}

impl<'g> Tensors<'g> {
    pub fn bind(gguf: &'g Gguf, hp: &Hparams) -> Result<Self, ModelError> {
        let d = hp.n_embd as u64;
        let u = |x: usize| x as u64;
        let embd = expect_tensor(gguf, "token_embd.weight", &[d, u(hp.n_vocab)])?;
        let output = super::optional_tensor(gguf, "output.weight", &[d, u(hp.n_vocab)])?;
        let layers = hp
            .layer_kinds
            .iter()
            .enumerate()
            .map(|(i, kind)| {
                let need =
                    |s: &str, shape: &[u64]| expect_tensor(gguf, &format!("blk.{i}.{s}"), shape);
                let mixer = match kind {
                    LayerKind::DeltaNet => Mixer::DeltaNet(DeltaNetTensors {
                        qkv: need("attn_qkv.weight", &[d, u(hp.conv_dim())])?,
                        gate: need("attn_gate.weight", &[d, u(hp.value_dim())])?,
                        beta: need("ssm_beta.weight", &[d, u(hp.ssm_nv)])?,
                        alpha: need("ssm_alpha.weight", &[d, u(hp.ssm_nv)])?,
                        conv: need("ssm_conv1d.weight", &[u(hp.conv_kernel), u(hp.conv_dim())])?,
                        dt_bias: need("ssm_dt.bias", &[u(hp.ssm_nv)])?,
                        a: need("ssm_a", &[u(hp.ssm_nv)])?,
                        norm: need("ssm_norm.weight", &[u(hp.ssm_dv)])?,
                        out: need("ssm_out.weight", &[u(hp.value_dim()), d])?,
                    }),
                    LayerKind::Attention => Mixer::Attention(AttentionTensors {
                        wq: need("attn_q.weight", &[d, 2 * u(hp.q_dim())])?,
                        wk: need("attn_k.weight", &[d, u(hp.kv_dim())])?,
                        wv: need("attn_v.weight", &[d, u(hp.kv_dim())])?,
                        wo: need("attn_output.weight", &[u(hp.q_dim()), d])?,
                        q_norm: need("attn_q_norm.weight", &[u(hp.head_dim)])?,
                        k_norm: need("attn_k_norm.weight", &[u(hp.head_dim)])?,
                    }),
                };
                Ok(Layer {
                    attn_norm: need("attn_norm.weight", &[d])?,
                    mixer,
                    post_norm: need("post_attention_norm.weight", &[d])?,
                    gate: need("ffn_gate.weight", &[d, u(hp.n_ff)])?,
                    up: need("ffn_up.weight", &[d, u(hp.n_ff)])?,
                    down: need("ffn_down.weight", &[u(hp.n_ff), d])?,
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        Ok(Tensors {
            embd,
            output_norm: expect_tensor(gguf, "output_norm.weight", &[d])?,
            output: output.unwrap_or(embd),
            tied: output.is_none(),
            layers,
        })
    }
}

/// What the model keeps on the device besides weights and the per-token activations.
pub struct Memory {
    /// K and V elements of the attention layers per token of context (the cache's element type
    /// is the adapter's: see `DevicePlan::size_kv_pool`).
    pub kv_elems_per_token: usize,
    /// Conv and recurrent state of the GDN layers (one sequence), whatever the context.
    pub state_bytes: usize,
    /// The chunked prefill's per-chunk intermediates, shared by every layer.
    pub scratch_bytes: u64,
}

impl Hparams {
    fn count(&self, kind: LayerKind) -> usize {
        self.layer_kinds.iter().filter(|&&k| k == kind).count()
    }

    /// The model's fixed and per-token device memory for steps of up to `max_tokens` tokens;
    /// fails, naming the key, on shapes the GDN kernels do not support.
    pub fn memory(&self, max_tokens: u32) -> Result<Memory, ModelError> {
        let dims = DeltaDims::of(self)?;
        let per_slot = dims.conv_state_floats() + dims.recurrent_state_floats();
        Ok(Memory {
            kv_elems_per_token: self.count(LayerKind::Attention) * 2 * self.kv_dim(),
            state_bytes: self.count(LayerKind::DeltaNet) * per_slot as usize * 4,
            scratch_bytes: match max_tokens > 1 {
                true => ChunkScratch::bytes(&dims, max_tokens, 1)?,
                false => 0,
            },
        })
    }

    /// f32 values per token of the activations [`Scratch`] allocates (same order).
    pub fn activation_width(&self) -> usize {
        let (d, q, kv, ff) = (self.n_embd, self.q_dim(), self.kv_dim(), self.n_ff);
        let (conv, vd, nv) = (self.conv_dim(), self.value_dim(), self.ssm_nv);
        [
            2 * d,
            2 * q + 2 * kv,
            2 * kv,
            kv,
            q,
            conv + vd + 2 * nv,
            conv,
            vd + 2 * nv,
            2 * nv,
            nv,
            2 * nv,
            vd,
            vd,
            q,
            2 * ff,
            ff,
        ]
        .iter()
        .sum()
    }
}

/// The hybrid model on the GPU: the weights, one bound layer per trunk block, the GDN state of
/// every sequence slot beside the attention layers' KV caches, and the activations every layer
/// shares (a step of `n` tokens uses their first `n` rows).
pub struct HybridModel {
    n_vocab: usize,
    max_context: usize,
    kernels: Kernels,
    attention: AttentionKernels,
    delta: DeltaNetKernels,
    /// The embedding and the output head around the layers.
    ends: Ends,
    layers: Vec<DeviceLayer>,
}

struct DeviceLayer {
    mixer: DeviceMixer,
    mlp: Mlp,
}

enum DeviceMixer {
    DeltaNet(Box<DeltaNetLayer>),
    Attention(Box<GatedAttention>),
}

/// The activations every layer reads and writes. The projections of h are stacked in runs of
/// one weight type ([`StackedProjections`]): a run writes its outputs side by side per token
/// into the buffer of its first projection, so each of these is as wide as its projection and
/// every one after it.
struct Scratch {
    x: wgpu::Buffer,
    h: wgpu::Buffer,
    /// Gated attention: `W_q h` (per head [q | gate]), then k and v.
    qkv: wgpu::Buffer,
    k: wgpu::Buffer,
    v: wgpu::Buffer,
    o: wgpu::Buffer,
    /// GDN: the raw qkv projection (then z, β, α), and the conv output (q̂, k̂ normalised in
    /// place).
    m: wgpu::Buffer,
    mixed: wgpu::Buffer,
    z: wgpu::Buffer,
    b: wgpu::Buffer,
    a: wgpu::Buffer,
    gates: wgpu::Buffer,
    delta_o: wgpu::Buffer,
    y: wgpu::Buffer,
    /// Gated attention: q normed and rotated, as attention reads it.
    q_rot: wgpu::Buffer,
    gate_up: wgpu::Buffer,
    act: wgpu::Buffer,
}

impl Scratch {
    fn new(ctx: &GpuContext, hp: &Hparams, plan: &DevicePlan) -> Result<Scratch, GpuError> {
        let a =
            |label: &str, width: usize| activation(ctx, plan.poison, label, plan.max_tokens, width);
        let (q, kv, nv) = (hp.q_dim(), hp.kv_dim(), hp.ssm_nv);
        Ok(Scratch {
            x: a("x", hp.n_embd)?,
            h: a("h", hp.n_embd)?,
            qkv: a("q and gate, k, v", 2 * q + 2 * kv)?,
            k: a("k, v", 2 * kv)?,
            v: a("v", kv)?,
            o: a("attention out", q)?,
            m: a(
                "qkv, z, beta, alpha projections",
                hp.conv_dim() + hp.value_dim() + 2 * nv,
            )?,
            mixed: a("conv out", hp.conv_dim())?,
            z: a("z, beta, alpha", hp.value_dim() + 2 * nv)?,
            b: a("beta logits, alpha", 2 * nv)?,
            a: a("alpha", nv)?,
            gates: a("gates", 2 * hp.ssm_nv)?,
            delta_o: a("delta rule out", hp.value_dim())?,
            y: a("gated norm out", hp.value_dim())?,
            q_rot: a("q rotated", hp.q_dim())?,
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

impl HybridModel {
    pub fn load(
        ctx: &GpuContext,
        gguf: &Gguf,
        io: &StepIo,
        plan: &DevicePlan,
    ) -> Result<HybridModel, ModelError> {
        let hp = Hparams::from_gguf(gguf)?;
        let t = Tensors::bind(gguf, &hp)?;
        let kernels = Kernels::new(ctx)?;
        let heads = (hp.n_head, hp.n_head_kv, hp.head_dim);
        let dims = AttentionDims::new(heads, hp.n_rot, RopePairing::Neox, plan);
        let attention = AttentionKernels::new(ctx, &dims)?;
        // Text positions make IMROPE's three streams equal: plain NeoX on the first n_rot dims.
        let rope = RopeTable::new(ctx, hp.n_rot as u32, hp.rope_base, None)?;
        let delta = DeltaNetKernels::new(ctx, DeltaDims::of(&hp)?, plan.max_tokens)?;
        let s = Scratch::new(ctx, &hp, plan)?;
        let loader = LayerLoader {
            b: Binder::new(&kernels, ctx, gguf, io, plan, hp.rms_eps),
            io,
            hp: &hp,
            s: &s,
            delta: &delta,
            attention: &attention,
            dims: &dims,
            rope: &rope,
            poison: plan.poison,
        };
        let ends = (t.embd, t.output_norm);
        let ends = Ends::bind(&loader.b, io, ends, (t.output, t.tied), &s.x, plan.poison)?;
        let layers = t
            .layers
            .iter()
            .map(|l| loader.layer(l))
            .collect::<Result<Vec<_>, ModelError>>()?;
        Ok(HybridModel {
            n_vocab: hp.n_vocab,
            max_context: plan.max_context,
            kernels,
            attention,
            delta,
            ends,
            layers,
        })
    }

    /// The layers over `batch` (one sequence's tokens, or one token of each sequence of a
    /// batched decode step), then the head on `rows` of them.
    fn record(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        batch: SeqBatch,
        rows: HeadRows,
        marks: &mut StepMarks,
    ) -> Result<(), GpuError> {
        let (k, n) = (&self.kernels, batch.count * batch.len);
        let layers = |pass: &mut wgpu::ComputePass, marks: &mut StepMarks| {
            self.record_layers(pass, batch, marks)
        };
        self.ends
            .record(k, encoder, "hybrid layers", n, rows, marks, layers)
    }

    /// The GDN layers' states (a slot per sequence each), in layer order.
    fn states(&self) -> impl Iterator<Item = &DeltaState> {
        self.layers.iter().filter_map(|l| match &l.mixer {
            DeviceMixer::DeltaNet(m) => Some(&m.state),
            DeviceMixer::Attention(_) => None,
        })
    }

    fn record_layers(
        &self,
        pass: &mut wgpu::ComputePass,
        batch: SeqBatch,
        marks: &mut StepMarks,
    ) -> Result<(), GpuError> {
        let (k, n) = (&self.kernels, batch.count * batch.len);
        for l in &self.layers {
            match &l.mixer {
                DeviceMixer::DeltaNet(m) => m.record(k, &self.delta, pass, batch, marks)?,
                DeviceMixer::Attention(m) => m.record(k, &self.attention, pass, n, marks)?,
            }
            l.mlp.record(k, pass, n, marks)?;
        }
        Ok(())
    }
}

/// Binds one block over the shared activations and kernels.
struct LayerLoader<'a> {
    b: Binder<'a>,
    io: &'a StepIo,
    hp: &'a Hparams,
    s: &'a Scratch,
    delta: &'a DeltaNetKernels,
    attention: &'a AttentionKernels,
    dims: &'a AttentionDims,
    rope: &'a RopeTable,
    poison: bool,
}

impl LayerLoader<'_> {
    fn layer(&self, l: &Layer<'_>) -> Result<DeviceLayer, ModelError> {
        let (b, s) = (&self.b, self.s);
        let mixer = match &l.mixer {
            Mixer::DeltaNet(t) => DeviceMixer::DeltaNet(Box::new(DeltaNetLayer::bind(
                b,
                self.delta,
                (l.attn_norm, t),
                s,
                &self.io.seqs,
                self.poison,
            )?)),
            Mixer::Attention(t) => {
                DeviceMixer::Attention(Box::new(GatedAttention::bind(self, l.attn_norm, t)?))
            }
        };
        let mlp = MlpTensors {
            norm: l.post_norm,
            gate: l.gate,
            up: l.up,
            down: l.down,
        };
        Ok(DeviceLayer {
            mixer,
            mlp: Mlp::bind(b, &mlp, &s.mlp())?,
        })
    }
}

/// Gated full attention (model-spec.md §5.3): `W_q h` holds per head [q | gate]; q and k are
/// RMS-normed per head and rotated (NeoX, first n_rot dims) where they sit; causal GQA over the
/// layer's KV cache; `o ⊙= σ(gate)`; `x += W_o o`.
struct GatedAttention {
    /// attn_norm and the q (with its gate), k and v projections of its h, stacked where their
    /// types agree.
    qkv: StackedProjections,
    attention: Attention,
    gate: Pointwise,
    wo: Linear,
}

impl GatedAttention {
    /// Binds the layer's attention on the shared pool's page-table rows (`io.tokens`, `io.pages`).
    fn bind(
        l: &LayerLoader,
        attn_norm: &TensorInfo,
        t: &AttentionTensors,
    ) -> Result<GatedAttention, ModelError> {
        let (b, hp, s) = (&l.b, l.hp, l.s);
        let (n_head, n_kv, hd) = (hp.n_head as u32, hp.n_head_kv as u32, hp.head_dim as u32);
        let parts = [(t.wq, &s.qkv), (t.wk, &s.k), (t.wv, &s.v)]
            .map(|(tensor, y)| Projection { tensor, y });
        let (qkv, outputs) =
            StackedProjections::bind(b, (&s.x, &s.h), attn_norm, &parts, qkv_op_name)?;
        // Head h's q is values [2h·hd, (2h+1)·hd) of W_q's output, its gate the next hd.
        let q = outputs[0].heads(n_head, hd, 2 * hd);
        let gate = q.at(q.offset + hd);
        let k = outputs[1].heads(n_kv, hd, hd);
        let o = View::heads(&s.o, n_head, hd);
        let (q_norm, k_norm) = (b.vector(t.q_norm)?, b.vector(t.k_norm)?);
        let attention = Attention::bind(
            b.k,
            l.attention,
            b.ctx,
            l.dims,
            l.rope,
            AttentionIo {
                q,
                k,
                v: outputs[2].heads(n_kv, hd, hd),
                q_out: View::heads(&s.q_rot, n_head, hd),
                o,
                norms: Some(HeadNorms {
                    q: &q_norm,
                    k: &k_norm,
                    eps: hp.rms_eps,
                }),
            },
            l.io,
        )?;
        let (n_head, hd) = (hp.n_head, hp.head_dim);
        Ok(GatedAttention {
            qkv,
            attention,
            gate: b.pointwise(n_head, hd, ElementwiseOp::SigmoidGate { o, gate })?,
            wo: b.linear(t.wo, &s.o, &s.x, MatmulOutput::Accumulate)?,
        })
    }

    fn record(
        &self,
        k: &Kernels,
        attn: &AttentionKernels,
        pass: &mut wgpu::ComputePass,
        n: u32,
        marks: &mut StepMarks,
    ) -> Result<(), GpuError> {
        self.qkv.record(k, pass, n, marks, "attn_norm")?;
        self.attention.record(k, attn, pass, n, marks);
        self.gate.record(k, pass, n, marks, "attn_gate");
        self.wo.record(k, pass, n, marks, "attn_output")
    }
}

/// The Gated DeltaNet kernels of the model's one layer shape and the chunked prefill's scratch
/// every layer shares (a prefill is one sequence).
struct DeltaNetKernels {
    dims: DeltaDims,
    conv: SsmConv,
    prep: DeltaPrep,
    recurrent: GatedDeltaDecode,
    chunked: GatedDeltaChunked,
    norm: GatedNorm,
    /// None when every step is one token (the recurrent kernel serves them all).
    scratch: Option<ChunkScratch>,
}

impl DeltaNetKernels {
    fn new(ctx: &GpuContext, dims: DeltaDims, max_tokens: u32) -> Result<Self, GpuError> {
        let paths = ctx.paths();
        Ok(DeltaNetKernels {
            dims,
            conv: SsmConv::new(ctx, paths, dims)?,
            prep: DeltaPrep::new(ctx, paths, dims)?,
            recurrent: GatedDeltaDecode::new(ctx, paths, dims)?,
            chunked: GatedDeltaChunked::new(ctx, paths, dims)?,
            norm: GatedNorm::new(ctx, paths, dims)?,
            scratch: (max_tokens > 1)
                .then(|| ChunkScratch::new(ctx, dims, max_tokens, 1))
                .transpose()?,
        })
    }
}

/// One Gated DeltaNet layer (model-spec.md §5.4–5.5): the four projections of `h`, the causal
/// conv and SiLU rolling the conv state, q/k L2 norms and gates, the delta rule (recurrent for
/// one token, chunked for a prefill), the gated RMSNorm, and `x += W_out y`; with its state
/// (one slot per sequence slot of the step table).
struct DeltaNetLayer {
    /// attn_norm and the qkv, z, β and α projections of its h, stacked where their types agree.
    projections: StackedProjections,
    conv: ConvBinding,
    prep: PrepBinding,
    recurrent: DecodeBinding,
    chunked: Option<ChunkBinding>,
    norm: NormBinding,
    out: Linear,
    state: DeltaState,
}

impl DeltaNetLayer {
    fn bind(
        b: &Binder,
        d: &DeltaNetKernels,
        (attn_norm, t): (&TensorInfo, &DeltaNetTensors),
        s: &Scratch,
        table: &SequenceTable,
        poison: bool,
    ) -> Result<DeltaNetLayer, ModelError> {
        let (ctx, rows) = (b.ctx, b.rows);
        let parts = [
            (t.qkv, &s.m),
            (t.gate, &s.z),
            (t.beta, &s.b),
            (t.alpha, &s.a),
        ]
        .map(|(tensor, y)| Projection { tensor, y });
        let (projections, placed) =
            StackedProjections::bind(b, (&s.x, &s.h), attn_norm, &parts, gdn_op_name)?;
        let [m, z, beta, alpha] = [placed[0], placed[1], placed[2], placed[3]];
        let state = DeltaState::new(ctx, d.dims, table.n_slots())?;
        if poison {
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
                y: &s.mixed,
                max_tokens: rows,
            },
        )?;
        let prep = d.prep.bind(
            ctx,
            PrepIo {
                mixed: &s.mixed,
                b: beta.rows(),
                a: alpha.rows(),
                ssm_a: f32_tensor(t.a, &ssm_a),
                dt_bias: f32_tensor(t.dt_bias, &dt_bias),
                gates: &s.gates,
                max_tokens: rows,
            },
        )?;
        let recurrent = d.recurrent.bind(
            ctx,
            RecurrentIo {
                mixed: &s.mixed,
                gates: &s.gates,
                table,
                state: &state,
                o: &s.delta_o,
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
                        mixed: &s.mixed,
                        gates: &s.gates,
                        table,
                        state: &state,
                        scratch,
                        o: &s.delta_o,
                        max_tokens: rows,
                    },
                )
            })
            .transpose()?;
        let norm = d.norm.bind(
            ctx,
            GatedNormIo {
                o: &s.delta_o,
                z: z.heads(d.dims.nv, d.dims.dv, d.dims.dv),
                weight: f32_tensor(t.norm, &norm_w),
                y: &s.y,
                max_tokens: rows,
            },
        )?;
        Ok(DeltaNetLayer {
            projections,
            conv,
            prep,
            recurrent,
            chunked,
            norm,
            out: b.linear(t.out, &s.y, &s.x, MatmulOutput::Accumulate)?,
            state,
        })
    }

    /// Records the layer for `batch`: one sequence of `batch.len` tokens, or one token of each
    /// of `batch.count` sequences. The roofline bytes of the GDN ops are their small weights and
    /// the recurrent state they read (conv state, delta-rule state), read once per sequence
    /// whatever its length.
    fn record(
        &self,
        k: &Kernels,
        d: &DeltaNetKernels,
        pass: &mut wgpu::ComputePass,
        batch: SeqBatch,
        marks: &mut StepMarks,
    ) -> Result<(), GpuError> {
        let n = batch.count * batch.len;
        let bytes = GdnBytes::new(d.dims, batch);
        self.projections.record(k, pass, n, marks, "attn_norm")?;
        d.conv.encode(pass, &self.conv, batch)?;
        let dispatches = d.conv.plan(&self.conv, batch)?.len();
        marks.op(pass, "ssm_conv", "ssm_conv", bytes.conv, dispatches);
        d.prep.encode(pass, &self.prep, n)?;
        let dispatches = d.prep.plan(&self.prep, n)?.len();
        marks.op(pass, "delta_prep", "delta_prep", bytes.prep, dispatches);
        match &self.chunked {
            Some(chunked) if marks.kind == StepKind::Prompt => {
                d.chunked.encode(pass, chunked, batch)?;
                let dispatches = d.chunked.plan(chunked, batch)?.len();
                let kernel = "gated_delta_chunk";
                marks.op(pass, "gated_delta", kernel, bytes.delta, dispatches);
            }
            _ => {
                d.recurrent.encode(pass, &self.recurrent, batch)?;
                let dispatches = d.recurrent.plan(&self.recurrent, batch)?.len();
                marks.op(pass, "gated_delta", "gated_delta", bytes.delta, dispatches);
            }
        }
        d.norm.encode(pass, &self.norm, n)?;
        let dispatches = d.norm.plan(&self.norm, n)?.len();
        marks.op(pass, "gated_norm", "gated_norm", bytes.norm, dispatches);
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

/// What each Gated DeltaNet kernel of a step over `batch` moves: f32 weights and each sequence's
/// state in `weights` (the roofline's bytes), f32 activations read and written in `activations`;
/// state writes count as activations.
struct GdnBytes {
    conv: OpBytes,
    prep: OpBytes,
    delta: OpBytes,
    norm: OpBytes,
}

impl GdnBytes {
    fn new(dims: DeltaDims, batch: SeqBatch) -> GdnBytes {
        let f32s = |floats: u64| 4 * floats;
        let (n, seqs) = (batch.tokens(), u64::from(batch.count));
        let (conv_dim, key_dim) = (u64::from(dims.conv_dim()), u64::from(dims.key_dim()));
        let (value_dim, nv) = (u64::from(dims.value_dim()), u64::from(dims.nv));
        let conv_state = seqs * f32s(dims.conv_state_floats());
        let recurrent_state = seqs * f32s(dims.recurrent_state_floats());
        GdnBytes {
            // Taps and the K−1 raw rows before the step in; the raw rows in, y out, the state out.
            conv: OpBytes::new(
                f32s(conv_dim * u64::from(dims.conv_kernel)) + conv_state,
                f32s(2 * n * conv_dim) + conv_state,
            ),
            // ssm_a and dt_bias; q and k normalised in place, β and α logits in, gates out.
            prep: OpBytes::new(f32s(2 * nv), f32s(n * (4 * key_dim + 4 * nv))),
            // The delta-rule state in (and out); q̂, k̂, v and the gates in, o out.
            delta: OpBytes::new(
                recurrent_state,
                f32s(n * (conv_dim + 2 * nv + value_dim)) + recurrent_state,
            ),
            // ssm_norm; o and z in, y out.
            norm: OpBytes::new(f32s(u64::from(dims.dv)), f32s(3 * n * value_dim)),
        }
    }
}

/// A tensor uploaded as f32 (by [`Binder::vector`]), named for the kernels' errors.
fn f32_tensor<'a>(t: &'a TensorInfo, buffer: &'a wgpu::Buffer) -> TensorRef<'a> {
    TensorRef {
        name: &t.name,
        ty: GgmlType::F32,
        buffer,
    }
}

impl DeviceModel for HybridModel {
    fn encode_step(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        n_tokens: u32,
        all_logits: bool,
        marks: &mut StepMarks,
    ) -> Result<(), GpuError> {
        let tail = if all_logits { n_tokens } else { 1 };
        let batch = SeqBatch {
            count: 1,
            len: n_tokens,
        };
        self.record(encoder, batch, HeadRows::Tail(tail), marks)
    }

    fn encode_batch(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        n_seqs: u32,
        marks: &mut StepMarks,
    ) -> Result<(), GpuError> {
        let batch = SeqBatch {
            count: n_seqs,
            len: 1,
        };
        self.record(encoder, batch, HeadRows::Batch, marks)
    }

    fn encode_reset(&self, encoder: &mut wgpu::CommandEncoder, slot: u32) -> Result<(), GpuError> {
        self.states()
            .try_for_each(|state| state.zero_slot(encoder, slot))
    }

    fn state_bytes(&self) -> u64 {
        self.states().map(DeltaState::snapshot_bytes).sum()
    }

    /// The snapshot is every GDN layer's slot snapshot (conv then recurrent), in layer order.
    fn encode_save_state(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        slot: u32,
        dst: &wgpu::Buffer,
    ) -> Result<(), GpuError> {
        let mut offset = 0;
        for state in self.states() {
            state.save_slot(encoder, slot, dst, offset)?;
            offset += state.snapshot_bytes();
        }
        Ok(())
    }

    fn encode_restore_state(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        src: &wgpu::Buffer,
        slot: u32,
    ) -> Result<(), GpuError> {
        let mut offset = 0;
        for state in self.states() {
            state.restore_slot(encoder, src, offset, slot)?;
            offset += state.snapshot_bytes();
        }
        Ok(())
    }

    fn encode_copy_page(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        src: u32,
        dst: u32,
    ) -> Result<(), GpuError> {
        for l in &self.layers {
            if let DeviceMixer::Attention(m) = &l.mixer {
                m.attention.copy_page(&self.attention, encoder, src, dst)?;
            }
        }
        Ok(())
    }

    fn max_context(&self) -> usize {
        self.max_context
    }

    fn n_vocab(&self) -> usize {
        self.n_vocab
    }
}
