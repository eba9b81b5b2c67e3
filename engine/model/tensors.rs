//! The tensors of a decoder, in one table every architecture fills ([`Tensors`]): the embedding
//! and output head around a stack of layers, each an input norm, a mixer (attention or Gated
//! DeltaNet) and a SwiGLU MLP. The spec file of an architecture binds its file's tensors into
//! it (names and shapes checked against its hyperparameters); the GPU model and the CPU
//! reference read it.

use super::{ModelError, expect_tensor, optional_tensor};
use crate::gguf::{Gguf, TensorInfo};

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

/// One decoder block: `x += Mixer(RMSNorm(x; attn_norm))`, then `x += MLP(x)`.
pub struct Layer<'g> {
    pub attn_norm: &'g TensorInfo,
    pub mixer: Mixer<'g>,
    pub mlp: MlpTensors<'g>,
}

pub enum Mixer<'g> {
    Attention(AttentionTensors<'g>),
    DeltaNet(DeltaNetTensors<'g>),
}

/// An attention layer's projections and its options.
pub struct AttentionTensors<'g> {
    /// `[d, q]`, or `[d, 2q]` holding per head [q | gate] with `output_gate`.
    pub wq: &'g TensorInfo,
    pub wk: &'g TensorInfo,
    pub wv: &'g TensorInfo,
    pub wo: &'g TensorInfo,
    /// q, k and v biases, where the file has them.
    pub bias: [Option<&'g TensorInfo>; 3],
    /// Per-head RMSNorm weights of q and k.
    pub qk_norm: Option<[&'g TensorInfo; 2]>,
    /// W_q's rows hold an output gate per head: `o ⊙= σ(gate)` before W_o.
    pub output_gate: bool,
}

/// A Gated DeltaNet layer's tensors (model-spec.md §5.4).
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

/// The tensors of a dense SwiGLU MLP with its pre-norm.
pub struct MlpTensors<'g> {
    pub norm: &'g TensorInfo,
    pub gate: &'g TensorInfo,
    pub up: &'g TensorInfo,
    pub down: &'g TensorInfo,
}

/// Whether a layer's tensor must be in the file, may be, or is not read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    Required,
    Optional,
    Absent,
}

/// What an architecture's attention layers hold: the head widths and which options they have.
#[derive(Clone, Copy, Debug)]
pub struct AttentionLayout {
    pub n_embd: u64,
    pub q_dim: u64,
    pub kv_dim: u64,
    pub head_dim: u64,
    pub bias: Presence,
    pub qk_norm: Presence,
    pub output_gate: bool,
}

/// The tensors of block `i` of `gguf`, named `blk.{i}.{name}`.
pub struct Block<'g> {
    gguf: &'g Gguf,
    i: usize,
}

impl<'g> Block<'g> {
    pub fn new(gguf: &'g Gguf, i: usize) -> Self {
        Block { gguf, i }
    }

    fn name(&self, s: &str) -> String {
        format!("blk.{}.{s}", self.i)
    }

    /// Tensor `s`, which must exist with `shape`.
    pub fn need(&self, s: &str, shape: &[u64]) -> Result<&'g TensorInfo, ModelError> {
        expect_tensor(self.gguf, &self.name(s), shape)
    }

    /// Tensor `s` as `presence` says (with `shape` where it exists).
    pub fn maybe(
        &self,
        s: &str,
        shape: &[u64],
        presence: Presence,
    ) -> Result<Option<&'g TensorInfo>, ModelError> {
        match presence {
            Presence::Required => self.need(s, shape).map(Some),
            Presence::Optional => optional_tensor(self.gguf, &self.name(s), shape),
            Presence::Absent => Ok(None),
        }
    }

    /// The attention projections of `layout`.
    pub fn attention(&self, l: &AttentionLayout) -> Result<AttentionTensors<'g>, ModelError> {
        let (d, q, kv) = (l.n_embd, l.q_dim, l.kv_dim);
        let q_rows = if l.output_gate { 2 * q } else { q };
        let bias = |s: &str, n: u64| self.maybe(s, &[n], l.bias);
        let norm = |s: &str| self.maybe(s, &[l.head_dim], l.qk_norm);
        let (wq, wk, wv, wo) = (
            self.need("attn_q.weight", &[d, q_rows])?,
            self.need("attn_k.weight", &[d, kv])?,
            self.need("attn_v.weight", &[d, kv])?,
            self.need("attn_output.weight", &[q, d])?,
        );
        let bias = [
            bias("attn_q.bias", q)?,
            bias("attn_k.bias", kv)?,
            bias("attn_v.bias", kv)?,
        ];
        let qk_norm = match (norm("attn_q_norm.weight")?, norm("attn_k_norm.weight")?) {
            (Some(q), Some(k)) => Some([q, k]),
            _ => None,
        };
        Ok(AttentionTensors {
            wq,
            wk,
            wv,
            wo,
            bias,
            qk_norm,
            output_gate: l.output_gate,
        })
    }

    /// The SwiGLU MLP of width `n_ff` over `n_embd`, its pre-norm named `norm`.
    pub fn mlp(&self, norm: &str, n_embd: u64, n_ff: u64) -> Result<MlpTensors<'g>, ModelError> {
        Ok(MlpTensors {
            norm: self.need(norm, &[n_embd])?,
            gate: self.need("ffn_gate.weight", &[n_embd, n_ff])?,
            up: self.need("ffn_up.weight", &[n_embd, n_ff])?,
            down: self.need("ffn_down.weight", &[n_ff, n_embd])?,
        })
    }
}

impl<'g> Tensors<'g> {
    /// The embedding, final norm and output head (tied to the embedding when the file has no
    /// `output.weight`) of a model of width `n_embd` and `n_vocab` tokens around the layers
    /// `layers` binds, and the rope divisors of `rope_freqs` values where the architecture
    /// reads them. Checked in file order: the embedding, the layers, the head.
    pub fn bind(
        gguf: &'g Gguf,
        (n_embd, n_vocab): (u64, u64),
        layers: impl FnOnce() -> Result<Vec<Layer<'g>>, ModelError>,
        rope_freqs: Option<u64>,
    ) -> Result<Self, ModelError> {
        let embd = expect_tensor(gguf, "token_embd.weight", &[n_embd, n_vocab])?;
        let output = optional_tensor(gguf, "output.weight", &[n_embd, n_vocab])?;
        let layers = layers()?;
        Ok(Tensors {
            embd,
            output_norm: expect_tensor(gguf, "output_norm.weight", &[n_embd])?,
            output: output.unwrap_or(embd),
            tied: output.is_none(),
            rope_freqs: rope_freqs
                .map(|n| optional_tensor(gguf, "rope_freqs.weight", &[n]))
                .transpose()?
                .flatten(),
            layers,
        })
    }

    /// The tensors a forward step reads whole, in layer order: every layer's, then the final
    /// norm and the output head (the embedding is read a row per token, the rope divisors on
    /// the host at load).
    pub fn read_per_step(&self) -> Vec<&'g TensorInfo> {
        let mut out = Vec::new();
        for l in &self.layers {
            out.push(l.attn_norm);
            match &l.mixer {
                Mixer::Attention(a) => {
                    out.extend([a.wq, a.wk, a.wv, a.wo]);
                    out.extend(a.bias.iter().flatten());
                    out.extend(a.qk_norm.iter().flatten());
                }
                Mixer::DeltaNet(d) => out.extend([
                    d.qkv, d.gate, d.beta, d.alpha, d.conv, d.dt_bias, d.a, d.norm, d.out,
                ]),
            }
            let m = &l.mlp;
            out.extend([m.norm, m.gate, m.up, m.down]);
        }
        out.extend([self.output_norm, self.output]);
        out
    }

    /// Layers of each mixer kind.
    pub fn count(&self, attention: bool) -> usize {
        self.layers
            .iter()
            .filter(|l| matches!(l.mixer, Mixer::Attention(_)) == attention)
            .count()
    }
}
