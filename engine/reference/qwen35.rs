//! Qwen3.5 on the CPU, one token at a time (GDN layers in the recurrent form): the oracle for
//! the GPU hybrid model, its chunked prefill included.

use super::gated_delta::gated_delta_step;
use super::ops::{Matrix, add_into, gqa_attention, rms_norm, rope, sigmoid, silu, swiglu};
use super::{Activations, AttentionRounding, Reference};
use crate::gguf::Gguf;
use crate::gpu::kernels::rope::RopePairing;
use crate::model::ModelError;
use crate::model::qwen35::Hparams;
use crate::model::tensors::Mixer;
use crate::model::vector;

struct DeltaNet<'g> {
    qkv: Matrix<'g>,
    gate: Matrix<'g>,
    beta: Matrix<'g>,
    alpha: Matrix<'g>,
    /// conv_dim rows of K taps, tap 0 the oldest input.
    conv: Vec<f32>,
    dt_bias: Vec<f32>,
    a: Vec<f32>,
    norm: Vec<f32>,
    out: Matrix<'g>,
    /// The last K−1 raw (pre-conv) qkv vectors, oldest first.
    conv_state: Vec<Vec<f32>>,
    /// One dk×dv state per value head.
    state: Vec<Vec<f32>>,
}

struct Attention<'g> {
    wq: Matrix<'g>,
    wk: Matrix<'g>,
    wv: Matrix<'g>,
    wo: Matrix<'g>,
    q_norm: Vec<f32>,
    k_norm: Vec<f32>,
    keys: Vec<Vec<f32>>,
    values: Vec<Vec<f32>>,
}

enum MixerState<'g> {
    DeltaNet(DeltaNet<'g>),
    Attention(Attention<'g>),
}

struct Layer<'g> {
    attn_norm: Vec<f32>,
    mixer: MixerState<'g>,
    post_norm: Vec<f32>,
    gate: Matrix<'g>,
    up: Matrix<'g>,
    down: Matrix<'g>,
}

pub struct Qwen35Reference<'g> {
    pub hp: Hparams,
    embd: Matrix<'g>,
    output_norm: Vec<f32>,
    output: Matrix<'g>,
    layers: Vec<Layer<'g>>,
    pos: usize,
    attention: AttentionRounding,
}

impl<'g> Qwen35Reference<'g> {
    pub fn new(gguf: &'g Gguf) -> Result<Self, ModelError> {
        Self::with_activations(gguf, Activations::F32)
    }

    /// The reference with every projection's input rounded as `activations` says (the token
    /// embedding is a row lookup and stays exact).
    pub fn with_activations(gguf: &'g Gguf, activations: Activations) -> Result<Self, ModelError> {
        let hp = Hparams::from_gguf(gguf)?;
        let t = hp.tensors(gguf)?;
        let m = |t| Matrix::with_activations(gguf, t, activations);
        let v = |t| vector(gguf, t);
        let mut layers = Vec::new();
        for l in &t.layers {
            let mixer = match &l.mixer {
                Mixer::DeltaNet(d) => MixerState::DeltaNet(DeltaNet {
                    qkv: m(d.qkv)?,
                    gate: m(d.gate)?,
                    beta: m(d.beta)?,
                    alpha: m(d.alpha)?,
                    conv: v(d.conv)?,
                    dt_bias: v(d.dt_bias)?,
                    a: v(d.a)?,
                    norm: v(d.norm)?,
                    out: m(d.out)?,
                    conv_state: vec![vec![0.0; hp.conv_dim()]; hp.conv_kernel - 1],
                    state: vec![vec![0.0; hp.ssm_dk * hp.ssm_dv]; hp.ssm_nv],
                }),
                Mixer::Attention(a) => {
                    let Some([q_norm, k_norm]) = a.qk_norm else {
                        return Err(ModelError::Hparams {
                            path: gguf.path().to_owned(),
                            why: "qwen35 attention layers have q and k norms".into(),
                        });
                    };
                    MixerState::Attention(Attention {
                        wq: m(a.wq)?,
                        wk: m(a.wk)?,
                        wv: m(a.wv)?,
                        wo: m(a.wo)?,
                        q_norm: v(q_norm)?,
                        k_norm: v(k_norm)?,
                        keys: Vec::new(),
                        values: Vec::new(),
                    })
                }
            };
            layers.push(Layer {
                attn_norm: v(l.attn_norm)?,
                mixer,
                post_norm: v(l.mlp.norm)?,
                gate: m(l.mlp.gate)?,
                up: m(l.mlp.up)?,
                down: m(l.mlp.down)?,
            });
        }
        Ok(Self {
            embd: Matrix::new(gguf, t.embd)?,
            output_norm: v(t.output_norm)?,
            output: m(t.output)?,
            layers,
            pos: 0,
            attention: AttentionRounding::F32,
            hp,
        })
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    /// A new sequence: KV caches, conv states and recurrent states back to zero.
    pub fn reset(&mut self) {
        self.pos = 0;
        for l in &mut self.layers {
            match &mut l.mixer {
                MixerState::DeltaNet(d) => {
                    d.conv_state.iter_mut().for_each(|s| s.fill(0.0));
                    d.state.iter_mut().for_each(|s| s.fill(0.0));
                }
                MixerState::Attention(a) => {
                    a.keys.clear();
                    a.values.clear();
                }
            }
        }
    }
}

impl Reference for Qwen35Reference<'_> {
    fn set_activations(&mut self, activations: Activations) -> Result<(), ModelError> {
        let mut matrices = vec![&mut self.output];
        for l in &mut self.layers {
            match &mut l.mixer {
                MixerState::DeltaNet(d) => matrices.extend([
                    &mut d.qkv,
                    &mut d.gate,
                    &mut d.beta,
                    &mut d.alpha,
                    &mut d.out,
                ]),
                MixerState::Attention(a) => {
                    matrices.extend([&mut a.wq, &mut a.wk, &mut a.wv, &mut a.wo])
                }
            }
            matrices.extend([&mut l.gate, &mut l.up, &mut l.down]);
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
        for l in &mut self.layers {
            let h = rms_norm(&x, Some(&l.attn_norm), hp.rms_eps);
            let mixed = match &mut l.mixer {
                MixerState::DeltaNet(d) => delta_net(hp, d, &h),
                MixerState::Attention(a) => gated_attention(hp, a, &h, self.pos, self.attention),
            };
            add_into(&mut x, &mixed);
            let h2 = rms_norm(&x, Some(&l.post_norm), hp.rms_eps);
            let act = swiglu(&l.gate.matvec(&h2), &l.up.matvec(&h2));
            add_into(&mut x, &l.down.matvec(&act));
        }
        self.pos += 1;
        let h = rms_norm(&x, Some(&self.output_norm), hp.rms_eps);
        Ok(self.output.matvec(&h))
    }
}

/// `x / sqrt(Σx² + eps)`, the l2 norm llama.cpp's qwen35 graph uses (eps = rms eps).
pub fn l2_norm(x: &[f32], eps: f32) -> Vec<f32> {
    let sum: f64 = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
    let scale = 1.0 / (sum + f64::from(eps)).sqrt();
    x.iter().map(|&v| (f64::from(v) * scale) as f32).collect()
}

/// softplus with PyTorch's threshold of 20 (linear above it).
pub fn softplus(x: f32) -> f32 {
    if x > 20.0 { x } else { x.exp().ln_1p() }
}

/// Depthwise causal conv over `window` (K vectors, oldest first) with `weights` (channel-major
/// rows of K taps), then SiLU.
pub fn causal_conv_silu(window: &[&[f32]], weights: &[f32]) -> Vec<f32> {
    let k = window.len();
    (0..window[0].len())
        .map(|c| {
            let taps = &weights[c * k..(c + 1) * k];
            let acc: f64 = window
                .iter()
                .zip(taps)
                .map(|(w, &t)| f64::from(w[c]) * f64::from(t))
                .sum();
            silu(acc as f32)
        })
        .collect()
}

fn delta_net(hp: &Hparams, d: &mut DeltaNet, h: &[f32]) -> Vec<f32> {
    let (dk, dv, nk, nv) = (hp.ssm_dk, hp.ssm_dv, hp.ssm_nk, hp.ssm_nv);
    let m = d.qkv.matvec(h);
    let z = d.gate.matvec(h);
    let b = d.beta.matvec(h);
    let a = d.alpha.matvec(h);
    let mut window: Vec<&[f32]> = d.conv_state.iter().map(|v| v.as_slice()).collect();
    window.push(&m);
    let mixed = causal_conv_silu(&window, &d.conv);
    d.conv_state.remove(0);
    d.conv_state.push(m);

    let key_dim = hp.key_dim();
    let q_scale = 1.0 / (dk as f32).sqrt();
    let heads = |base: usize, n: usize, w: usize, scale: f32| -> Vec<Vec<f32>> {
        (0..n)
            .map(|i| {
                let normed = l2_norm(&mixed[base + i * w..base + (i + 1) * w], hp.rms_eps);
                normed.into_iter().map(|x| x * scale).collect()
            })
            .collect()
    };
    let q = heads(0, nk, dk, q_scale);
    let k = heads(key_dim, nk, dk, 1.0);
    let v = &mixed[2 * key_dim..];
    let mut y = Vec::with_capacity(nv * dv);
    for hv in 0..nv {
        let kh = hp.head_mapping.key_head(hv, nk, nv);
        let beta = sigmoid(b[hv]);
        let g = d.a[hv] * softplus(a[hv] + d.dt_bias[hv]);
        let o = gated_delta_step(
            &mut d.state[hv],
            &q[kh],
            &k[kh],
            &v[hv * dv..(hv + 1) * dv],
            beta,
            g,
        );
        let normed = rms_norm(&o, Some(&d.norm), hp.rms_eps);
        let zh = &z[hv * dv..(hv + 1) * dv];
        y.extend(normed.iter().zip(zh).map(|(&o, &z)| o * silu(z)));
    }
    d.out.matvec(&y)
}

fn gated_attention(
    hp: &Hparams,
    a: &mut Attention,
    h: &[f32],
    pos: usize,
    rounding: AttentionRounding,
) -> Vec<f32> {
    let hd = hp.head_dim;
    let qg = a.wq.matvec(h);
    let mut k = a.wk.matvec(h);
    let v = a.wv.matvec(h);
    let mut q = Vec::with_capacity(hp.q_dim());
    let mut gate = Vec::with_capacity(hp.q_dim());
    for head in qg.chunks(2 * hd) {
        let mut qh = rms_norm(&head[..hd], Some(&a.q_norm), hp.rms_eps);
        rope(
            &mut qh,
            pos,
            hp.n_rot,
            hp.rope_base,
            RopePairing::Neox,
            None,
        );
        q.extend(qh);
        gate.extend_from_slice(&head[hd..]);
    }
    for head in k.chunks_mut(hd) {
        let normed = rms_norm(head, Some(&a.k_norm), hp.rms_eps);
        head.copy_from_slice(&normed);
        rope(head, pos, hp.n_rot, hp.rope_base, RopePairing::Neox, None);
    }
    a.keys.push(rounding.cached(k));
    a.values.push(rounding.cached(v));
    let mut o = gqa_attention(&q, &a.keys, &a.values, hp.n_head_kv, hd, rounding);
    for (x, &gv) in o.iter_mut().zip(&gate) {
        *x *= sigmoid(gv);
    }
    a.wo.matvec(&o)
}
