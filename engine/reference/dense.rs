//! The dense decoder (qwen3, qwen2, llama) on the CPU, one token at a time: the oracle the GPU
//! model is tested against, prefill included (the GPU's batched prefill must equal this
//! token-by-token loop). It reads what the architecture's spec reads (its [`Blueprint`]: shapes
//! and tensors, biases and q/k norms where the file has them), so every dense architecture the
//! registry knows runs here.

use super::ops::{Matrix, add_into, gqa_attention, rms_norm, rope, swiglu};
use super::{Activations, AttentionRounding, Reference};
use crate::gguf::Gguf;
use crate::model::ModelError;
use crate::model::blocks::attention::AttentionShape;
use crate::model::decoder::Blueprint;
use crate::model::tensors::Mixer;
use crate::model::vector;

struct Layer<'g> {
    attn_norm: Vec<f32>,
    wq: Matrix<'g>,
    wk: Matrix<'g>,
    wv: Matrix<'g>,
    wo: Matrix<'g>,
    bias: Option<[Vec<f32>; 3]>,
    qk_norm: Option<[Vec<f32>; 2]>,
    ffn_norm: Vec<f32>,
    gate: Matrix<'g>,
    up: Matrix<'g>,
    down: Matrix<'g>,
    /// Cached keys and values, one `kv_dim` vector per position.
    keys: Vec<Vec<f32>>,
    values: Vec<Vec<f32>>,
}

/// The shapes the forward pass reads.
struct Dims {
    n_vocab: usize,
    n_embd: usize,
    eps: f32,
    attention: AttentionShape,
}

pub struct DenseReference<'g> {
    hp: Dims,
    embd: Matrix<'g>,
    output_norm: Vec<f32>,
    output: Matrix<'g>,
    rope_freqs: Option<Vec<f32>>,
    layers: Vec<Layer<'g>>,
    attention: AttentionRounding,
}

impl<'g> DenseReference<'g> {
    pub fn new(gguf: &'g Gguf) -> Result<Self, ModelError> {
        Self::with_activations(gguf, Activations::F32)
    }

    /// The reference with every projection's input rounded as `activations` says (the token
    /// embedding is a row lookup and stays exact).
    pub fn with_activations(gguf: &'g Gguf, activations: Activations) -> Result<Self, ModelError> {
        let Blueprint {
            n_vocab,
            n_embd,
            eps,
            attention,
            tensors: t,
            ..
        } = crate::model::blueprint(gguf)?;
        let hp = Dims {
            n_vocab,
            n_embd,
            eps,
            attention,
        };
        let m = |t| Matrix::with_activations(gguf, t, activations);
        let layers = t
            .layers
            .iter()
            .map(|l| {
                let Mixer::Attention(a) = &l.mixer else {
                    return Err(ModelError::Hparams {
                        path: gguf.path().to_owned(),
                        why: "a dense model of attention layers only".into(),
                    });
                };
                let bias = match a.bias {
                    [Some(q), Some(k), Some(v)] => {
                        Some([vector(gguf, q)?, vector(gguf, k)?, vector(gguf, v)?])
                    }
                    _ => None,
                };
                let qk_norm = match a.qk_norm {
                    Some([q, k]) => Some([vector(gguf, q)?, vector(gguf, k)?]),
                    None => None,
                };
                Ok(Layer {
                    attn_norm: vector(gguf, l.attn_norm)?,
                    wq: m(a.wq)?,
                    wk: m(a.wk)?,
                    wv: m(a.wv)?,
                    wo: m(a.wo)?,
                    bias,
                    qk_norm,
                    ffn_norm: vector(gguf, l.mlp.norm)?,
                    gate: m(l.mlp.gate)?,
                    up: m(l.mlp.up)?,
                    down: m(l.mlp.down)?,
                    keys: Vec::new(),
                    values: Vec::new(),
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        Ok(Self {
            embd: Matrix::new(gguf, t.embd)?,
            output_norm: vector(gguf, t.output_norm)?,
            output: m(t.output)?,
            rope_freqs: t.rope_freqs.map(|r| vector(gguf, r)).transpose()?,
            layers,
            attention: AttentionRounding::F32,
            hp,
        })
    }

    /// Tokens already in the KV cache (the position of the next token).
    pub fn position(&self) -> usize {
        self.layers[0].keys.len()
    }

    /// Forgets the cache: the next token is at position 0.
    pub fn reset(&mut self) {
        for l in &mut self.layers {
            l.keys.clear();
            l.values.clear();
        }
    }
}

impl Reference for DenseReference<'_> {
    fn set_activations(&mut self, activations: Activations) -> Result<(), ModelError> {
        let mut matrices = vec![&mut self.output];
        for l in &mut self.layers {
            matrices.extend([
                &mut l.wq,
                &mut l.wk,
                &mut l.wv,
                &mut l.wo,
                &mut l.gate,
                &mut l.up,
                &mut l.down,
            ]);
        }
        for m in matrices {
            m.set_activations(activations).map_err(ModelError::Input)?;
        }
        Ok(())
    }

    fn set_attention(&mut self, rounding: AttentionRounding) {
        self.attention = rounding;
    }

    fn forward(&mut self, token: u32) -> Result<Vec<f32>, ModelError> {
        let hp = &self.hp;
        super::check_token(token, hp.n_vocab)?;
        let mut x = vec![0f32; hp.n_embd];
        self.embd.row(token as usize, &mut x);
        let pos = self.position();
        for l in &mut self.layers {
            let h = rms_norm(&x, Some(&l.attn_norm), hp.eps);
            let attn = attention(hp, l, &h, pos, self.rope_freqs.as_deref(), self.attention);
            add_into(&mut x, &l.wo.matvec(&attn));
            let h2 = rms_norm(&x, Some(&l.ffn_norm), hp.eps);
            let act = swiglu(&l.gate.matvec(&h2), &l.up.matvec(&h2));
            add_into(&mut x, &l.down.matvec(&act));
        }
        let h = rms_norm(&x, Some(&self.output_norm), hp.eps);
        Ok(self.output.matvec(&h))
    }
}

/// q/k/v projections, q/k norm, RoPE, cache append, causal GQA attention over the cache (both
/// rounded as `rounding` says).
fn attention(
    hp: &Dims,
    l: &mut Layer,
    h: &[f32],
    pos: usize,
    freqs: Option<&[f32]>,
    rounding: AttentionRounding,
) -> Vec<f32> {
    let (mut q, mut k, mut v) = (l.wq.matvec(h), l.wk.matvec(h), l.wv.matvec(h));
    if let Some([bq, bk, bv]) = &l.bias {
        add_into(&mut q, bq);
        add_into(&mut k, bk);
        add_into(&mut v, bv);
    }
    let a = &hp.attention;
    let hd = a.head_dim;
    for (vec, norm) in [(&mut q, 0), (&mut k, 1)] {
        for head in vec.chunks_mut(hd) {
            if let Some(w) = &l.qk_norm {
                let normed = rms_norm(head, Some(&w[norm]), hp.eps);
                head.copy_from_slice(&normed);
            }
            rope(head, pos, a.n_rot, a.rope_base, a.pairing, freqs);
        }
    }
    l.keys.push(rounding.cached(k));
    l.values.push(rounding.cached(v));
    gqa_attention(&q, &l.keys, &l.values, a.n_kv, hd, rounding)
}
