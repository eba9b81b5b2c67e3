//! Qwen3 — and the dense family it belongs to (llama, qwen2) — as hyperparameters and tensors.
//!
//! Per layer (model-spec.md §4): `h = RMSNorm(x)`, `q,k,v = W h (+b)`, per-head q/k RMSNorm
//! (qwen3), RoPE, causal GQA attention, `x += W_o o`; then `x += W_down(silu(W_gate h2) ⊙ W_up h2)`
//! with `h2 = RMSNorm(x)`. Logits `= W_out RMSNorm(x)`, `W_out` tied to the embedding when the
//! file has no `output.weight`.

use super::{Arch, ModelError, RopePairing, expect_tensor, optional_tensor};
use crate::gguf::{Gguf, TensorInfo};

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
        let n_layer = m.usize(&k("block_count"))?;
        let uniform = |key: String| -> Result<usize, ModelError> {
            let per_layer = m.usize_per_layer(&key, n_layer)?;
            match per_layer.first() {
                Some(&v) if per_layer.iter().all(|&x| x == v) => Ok(v),
                Some(_) => Err(m.error(&key, "differs between layers, which dense models here do not support").into()),
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
            return Err(m.error(&k("attention.value_length"), format!("{v} differs from key_length {head_dim}")).into());
        }
        let n_vocab = match m.opt_usize(&k("vocab_size"))? {
            Some(v) => v,
            None => gguf.require_tensor("token_embd.weight")?.shape.get(1).copied().unwrap_or(0) as usize,
        };
        if let Some(kind) = m.opt_str(&k("rope.scaling.type"))?
            && kind != "none"
        {
            return Err(m.error(&k("rope.scaling.type"), format!("{kind:?} rope scaling is not supported")).into());
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
        if self.n_head % self.n_head_kv != 0 {
            return bad(format!(
                "head_count {} is not a multiple of head_count_kv {}",
                self.n_head, self.n_head_kv
            ));
        }
        if self.n_rot % 2 != 0 || self.n_rot > self.head_dim {
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
