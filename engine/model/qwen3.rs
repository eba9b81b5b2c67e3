//! Qwen3 — and the dense family it belongs to — as hyperparameters, tensors and activations:
//! the spec the GPU model ([`super::decoder`]) and the CPU reference read. The members of the
//! family differ only by what [`Dense`] says: each declares its own in its spec file ([`QWEN3`]
//! and [`LLAMA`] here, `super::qwen2::QWEN2`) and reads the rest through [`Hparams::read`].
//!
//! Per layer: `h = RMSNorm(x)`, `q,k,v = W h (+b)`, per-head q/k RMSNorm (qwen3), RoPE, causal
//! GQA attention, `x += W_o o`; then `x += W_down(silu(W_gate h2) ⊙ W_up h2)` with
//! `h2 = RMSNorm(x)`. Logits `= W_out RMSNorm(x)`, `W_out` tied to the embedding when the file
//! has no `output.weight`. On the GPU each layer is an attention block (biases and q/k norms as
//! the spec says) and an MLP block.

use super::blocks::attention::AttentionShape;
use super::blocks::scratch::{Act, ScratchTable};
use super::bounds::Size;
use super::decoder::Blueprint;
use super::hparams::Keys;
use super::tensors::{AttentionLayout, Block, Layer, Mixer, Presence, Tensors};
use super::{Arch, ModelError};
use crate::gguf::Gguf;
use crate::gpu::kernels::rope::RopePairing;

/// How one member of the dense family differs from the others.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Dense {
    pub rope_pairing: RopePairing,
    /// Per-head RMSNorm of q and k before RoPE (`attn_q_norm`, `attn_k_norm`).
    pub qk_norm: bool,
    /// Biases on the q, k and v projections (`attn_{q,k,v}.bias`).
    pub qkv_bias: bool,
}

/// Qwen3: q/k norms, no biases, NEOX pairing.
pub const QWEN3: Dense = Dense {
    rope_pairing: RopePairing::Neox,
    qk_norm: true,
    qkv_bias: false,
};

/// Llama: neither, adjacent pairing (biases read where a file has them).
pub const LLAMA: Dense = Dense {
    rope_pairing: RopePairing::Adjacent,
    qk_norm: false,
    qkv_bias: false,
};

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
    /// The hyperparameters of `gguf`, a member of the dense family that differs as `dense` says.
    pub fn read(gguf: &Gguf, dense: Dense) -> Result<Self, ModelError> {
        let arch = Arch::of(gguf)?;
        let k = Keys::new(gguf, arch.key_prefix());
        let n_layer = k.block_count()?;
        let uniform = |name: &str| {
            let differs = "differs between layers, which dense models here do not support";
            k.uniform(name, n_layer, |_| true, differs)
        };
        let n_embd = k.usize("embedding_length")?;
        let n_head = uniform("attention.head_count")?;
        let n_head_kv = match k.contains("attention.head_count_kv") {
            true => uniform("attention.head_count_kv")?,
            false => n_head,
        };
        let head_dim = match k.opt_usize("attention.key_length")? {
            Some(d) => d,
            None if n_head > 0 => n_embd / n_head,
            None => 0,
        };
        if let Some(kind) = k.opt_str("rope.scaling.type")?
            && kind != "none"
        {
            return Err(k.error(
                "rope.scaling.type",
                format!("{kind:?} rope scaling is not supported"),
            ));
        }
        let hp = Hparams {
            arch,
            n_embd,
            n_layer,
            n_head,
            n_head_kv,
            head_dim,
            n_ff: uniform("feed_forward_length")?,
            n_vocab: k.n_vocab()?,
            n_ctx_train: k.usize("context_length")?,
            rms_eps: k.f32("attention.layer_norm_rms_epsilon")?,
            rope_base: k.opt_f32("rope.freq_base")?.unwrap_or(10_000.0),
            n_rot: k.opt_usize("rope.dimension_count")?.unwrap_or(head_dim),
            rope_pairing: dense.rope_pairing,
            qk_norm: dense.qk_norm,
            qkv_bias: dense.qkv_bias,
        };
        k.bounded(&[
            ("embedding_length", hp.n_embd, Size::Width),
            ("attention.head_count", hp.n_head, Size::Heads),
            ("attention.head_count_kv", hp.n_head_kv, Size::Heads),
            ("attention.key_length", hp.head_dim, Size::HeadDim),
            ("feed_forward_length", hp.n_ff, Size::Width),
            ("vocab_size", hp.n_vocab, Size::Vocab),
            ("context_length", hp.n_ctx_train, Size::Context),
        ])?;
        k.check_attention(
            (hp.n_head, hp.n_head_kv, hp.head_dim),
            hp.n_rot,
            (hp.rms_eps, hp.rope_base),
        )?;
        Ok(hp)
    }

    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }

    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }

    /// Every tensor the forward pass reads, shape-checked against these hyperparameters.
    pub fn tensors<'g>(&self, gguf: &'g Gguf) -> Result<Tensors<'g>, ModelError> {
        let d = self.n_embd as u64;
        let presence = |flag| match flag {
            true => Presence::Required,
            false => Presence::Optional,
        };
        let attention = AttentionLayout {
            n_embd: d,
            q_dim: self.q_dim() as u64,
            kv_dim: self.kv_dim() as u64,
            head_dim: self.head_dim as u64,
            bias: presence(self.qkv_bias),
            qk_norm: match self.qk_norm {
                true => Presence::Required,
                false => Presence::Absent,
            },
            output_gate: false,
        };
        let layers = || {
            (0..self.n_layer)
                .map(|i| {
                    let b = Block::new(gguf, i);
                    Ok(Layer {
                        attn_norm: b.need("attn_norm.weight", &[d])?,
                        mixer: Mixer::Attention(b.attention(&attention)?),
                        mlp: b.mlp("ffn_norm.weight", d, self.n_ff as u64)?,
                    })
                })
                .collect()
        };
        let rope_freqs = Some(self.n_rot as u64 / 2);
        Tensors::bind(gguf, (d, self.n_vocab as u64), layers, rope_freqs)
    }

    /// The activations the model allocates: the residual stream and its norm, the q, k, v
    /// projections (a run of stacked weights writes its outputs side by side per token into
    /// the buffer of its first tensor: q up to q+k+v wide, k up to k+v, v), q normed and rotated
    /// as attention reads it, attention's output, the MLP's gate and up values and their SwiGLU.
    pub fn scratch(&self) -> ScratchTable {
        let (d, q, kv, ff) = (self.n_embd, self.q_dim(), self.kv_dim(), self.n_ff);
        let table = [
            (Act::X, "x", d),
            (Act::H, "h", d),
            (Act::Qkv, "qkv", q + 2 * kv),
            (Act::K, "k", 2 * kv),
            (Act::V, "v", kv),
            (Act::QRot, "q rotated", q),
            (Act::O, "attention out", q),
            (Act::GateUp, "ffn gate and up", 2 * ff),
            (Act::FfnAct, "ffn act", ff),
        ];
        ScratchTable::new(&table, d)
    }
}

/// The Qwen3 decoder of `gguf` as the GPU model, the memory plan and the CPU reference read it.
pub fn blueprint(gguf: &Gguf) -> Result<Blueprint<'_>, ModelError> {
    dense_blueprint(gguf, QWEN3)
}

/// The same for Llama.
pub fn llama_blueprint(gguf: &Gguf) -> Result<Blueprint<'_>, ModelError> {
    dense_blueprint(gguf, LLAMA)
}

/// A dense decoder that differs as `dense` says, as the GPU model, the memory plan and the CPU
/// reference read it.
pub fn dense_blueprint(gguf: &Gguf, dense: Dense) -> Result<Blueprint<'_>, ModelError> {
    let hp = Hparams::read(gguf, dense)?;
    Ok(Blueprint {
        label: "dense layers",
        n_embd: hp.n_embd,
        n_vocab: hp.n_vocab,
        n_ctx_train: hp.n_ctx_train,
        eps: hp.rms_eps,
        attention: AttentionShape {
            n_head: hp.n_head,
            n_kv: hp.n_head_kv,
            head_dim: hp.head_dim,
            n_rot: hp.n_rot,
            pairing: hp.rope_pairing,
            rope_base: hp.rope_base,
        },
        delta: None,
        scratch: hp.scratch(),
        n_blocks: hp.n_layer,
        tensors: hp.tensors(gguf)?,
    })
}
