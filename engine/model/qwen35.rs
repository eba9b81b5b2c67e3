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
//! Traps this file handles: GGUF norm weights already include the +1 (`ssm_norm` never had
//! one); `ssm_a` is already −exp(A_log); V heads are stored tiled (v-head p reads k-head
//! p mod nk) unless the file says `ssm.v_head_reordered = false`; MTP/NextN blocks after the trunk
//! are skipped.

use super::{Arch, ModelError, expect_tensor};
use crate::gguf::{Gguf, TensorInfo};

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
        let n_blocks = m.usize(&k("block_count"))?;
        let n_mtp = m.opt_usize(&k("nextn_predict_layers"))?.unwrap_or(0);
        let n_layer = n_blocks.checked_sub(n_mtp).filter(|&n| n > 0).ok_or_else(|| {
            m.error(&k("nextn_predict_layers"), format!("{n_mtp} leaves no trunk of the {n_blocks} blocks"))
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
                Some(_) => Err(m.error(&key, "differs between layers, which is not supported").into()),
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
                None => gguf.require_tensor("token_embd.weight")?.shape.get(1).copied().unwrap_or(0) as usize,
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
            ssm_dv: if nv > 0 { inner / nv } else { 0 },
            ssm_nk: m.usize(&k("ssm.group_count"))?,
            ssm_nv: nv,
            head_mapping,
            layer_kinds,
        };
        hp.validate(gguf, inner)?;
        Ok(hp)
    }

    fn validate(&self, gguf: &Gguf, inner: usize) -> Result<(), ModelError> {
        let m = gguf.metadata();
        let bad = |key: &str, why: String| Err(ModelError::from(m.error(&format!("qwen35.{key}"), why)));
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
        if self.n_head % self.n_head_kv != 0 {
            return bad("attention.head_count_kv", format!("{} does not divide head_count {}", self.n_head_kv, self.n_head));
        }
        if inner != self.ssm_dv * self.ssm_nv || self.ssm_dv == 0 {
            return bad("ssm.inner_size", format!("{inner} is not a positive multiple of time_step_rank {}", self.ssm_nv));
        }
        if self.ssm_nv % self.ssm_nk != 0 {
            return bad("ssm.time_step_rank", format!("{} value heads are not a multiple of the {} key heads (ssm.group_count)", self.ssm_nv, self.ssm_nk));
        }
        if !SUPPORTED_CONV_KERNELS.contains(&self.conv_kernel) {
            return bad("ssm.conv_kernel", format!("{} taps; the kernels support {SUPPORTED_CONV_KERNELS:?}", self.conv_kernel));
        }
        if self.n_rot % 2 != 0 || self.n_rot > self.head_dim {
            return bad("rope.dimension_count", format!("{} must be even and at most the head size {}", self.n_rot, self.head_dim));
        }
        if let Some(v) = m.opt_usize("qwen35.attention.value_length")?
            && v != self.head_dim
        {
            return bad("attention.value_length", format!("{v} differs from key_length {}", self.head_dim));
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
fn layer_schedule(gguf: &Gguf, n_blocks: usize, n_layer: usize) -> Result<Vec<LayerKind>, ModelError> {
    let m = gguf.metadata();
    let key = "qwen35.attention.recurrent_layers";
    if m.contains(key) {
        let flags = m.bool_array(key)?;
        if flags.len() != n_blocks {
            return Err(m.error(key, format!("{} entries for {n_blocks} blocks", flags.len())).into());
        }
        return Ok(flags[..n_layer]
            .iter()
            .map(|&r| if r { LayerKind::DeltaNet } else { LayerKind::Attention })
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
                let need = |s: &str, shape: &[u64]| expect_tensor(gguf, &format!("blk.{i}.{s}"), shape);
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
