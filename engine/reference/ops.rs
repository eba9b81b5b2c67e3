//! The CPU reference's building blocks: f32 values, f64 accumulation for every sum.
//! Written for clarity, not speed; the only parallelism is over matrix rows.

use super::activations::{Activations, AttentionRounding, attend_ggml_flash_f16};
use crate::gguf::{Gguf, TensorInfo};
use crate::gpu::kernels::rope::RopePairing;
use crate::model::{ModelError, check_dequantizable};
use crate::quant::{self, GgmlType};
use half::f16;
use rayon::prelude::*;

/// A weight matrix in its GGUF block layout, dequantized one row at a time on use, so the
/// reference needs no f32 copy of the weights.
pub struct Matrix<'g> {
    pub ty: GgmlType,
    /// Elements per row (`ne[0]`, the input width of `y = W x`).
    pub cols: usize,
    pub rows: usize,
    bytes: &'g [u8],
    row_bytes: usize,
    /// How [`Matrix::matvec`] rounds its input first.
    activations: Activations,
}

impl<'g> Matrix<'g> {
    /// A matrix whose mat-vecs take their input as computed (f32).
    pub fn new(gguf: &'g Gguf, t: &TensorInfo) -> Result<Self, ModelError> {
        Self::with_activations(gguf, t, Activations::F32)
    }

    /// A matrix whose mat-vecs round their input as `activations` says.
    pub fn with_activations(
        gguf: &'g Gguf,
        t: &TensorInfo,
        activations: Activations,
    ) -> Result<Self, ModelError> {
        check_dequantizable(gguf, t)?;
        activations
            .check(t.ty)
            .map_err(|why| ModelError::TensorType {
                path: gguf.path().to_owned(),
                tensor: t.name.clone(),
                ty: t.ty,
                why,
            })?;
        Ok(Self {
            ty: t.ty,
            cols: t.row_len() as usize,
            rows: t.n_rows() as usize,
            bytes: gguf.tensor_data(t),
            row_bytes: t.row_bytes() as usize,
            activations,
        })
    }

    /// Rounds later mat-vecs' inputs as `activations` says (`Err` names why this matrix's type
    /// cannot be).
    pub fn set_activations(&mut self, activations: Activations) -> Result<(), String> {
        activations.check(self.ty)?;
        self.activations = activations;
        Ok(())
    }

    pub fn row(&self, r: usize, out: &mut [f32]) {
        let bytes = &self.bytes[r * self.row_bytes..(r + 1) * self.row_bytes];
        quant::dequantize_into(self.ty, bytes, out).expect("row geometry checked at load");
    }

    /// `y = W x`, each dot product accumulated in f64 (`x`, and each row of W, rounded first
    /// where the matrix's [`Activations`] say so).
    pub fn matvec(&self, x: &[f32]) -> Vec<f32> {
        assert_eq!(x.len(), self.cols, "matvec input width");
        let x = self.activations.round(self.ty, x);
        let x = x.as_ref();
        (0..self.rows)
            .into_par_iter()
            .map_init(
                || vec![0f32; self.cols],
                |row, r| {
                    self.row(r, row);
                    if self.activations.rounds_weights() {
                        row.iter_mut().for_each(|w| *w = f16::from_f32(*w).to_f32());
                    }
                    dot(row, x) as f32
                },
            )
            .collect()
    }
}

/// A 1-D tensor (norm weight, bias) dequantized whole.
pub fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| f64::from(x) * f64::from(y))
        .sum()
}

/// `w ⊙ x / sqrt(mean(x²) + eps)`; `w = None` for the weightless norm of gated outputs.
pub fn rms_norm(x: &[f32], w: Option<&[f32]>, eps: f32) -> Vec<f32> {
    let mean_sq = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / x.len() as f64;
    let scale = 1.0 / (mean_sq + f64::from(eps)).sqrt();
    x.iter()
        .enumerate()
        .map(|(i, &v)| (f64::from(v) * scale) as f32 * w.map_or(1.0, |w| w[i]))
        .collect()
}

pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// Rotates the first `n_rot` dims of one head in place at position `pos`:
/// θ_i = pos · base^(−2i/n_rot) / freq_factor_i, pairs as `pairing` says.
pub fn rope(
    head: &mut [f32],
    pos: usize,
    n_rot: usize,
    base: f32,
    pairing: RopePairing,
    freq_factors: Option<&[f32]>,
) {
    for i in 0..n_rot / 2 {
        let inv = f64::from(base).powf(-2.0 * i as f64 / n_rot as f64);
        let factor = freq_factors.map_or(1.0, |f| f64::from(f[i]));
        let theta = pos as f64 * inv / factor;
        let (sin, cos) = theta.sin_cos();
        let (a, b) = match pairing {
            RopePairing::Neox => (i, i + n_rot / 2),
            RopePairing::Adjacent => (2 * i, 2 * i + 1),
        };
        let (x, y) = (f64::from(head[a]), f64::from(head[b]));
        head[a] = (x * cos - y * sin) as f32;
        head[b] = (x * sin + y * cos) as f32;
    }
}

/// One query head against `n` cached keys/values of its kv head (`keys[j]`, `values[j]`):
/// softmax(q·k_j · scale) weighted sum of v_j, all sums in f64; the cache's values as
/// `rounding` left them, and summed as it says ([`AttentionRounding`]).
pub fn attend_rounded(
    q: &[f32],
    keys: &[&[f32]],
    values: &[&[f32]],
    scale: f32,
    rounding: AttentionRounding,
) -> Vec<f32> {
    match rounding {
        AttentionRounding::F32 | AttentionRounding::F16Cache => attend(q, keys, values, scale),
        AttentionRounding::GgmlFlashF16 => attend_ggml_flash_f16(q, keys, values, scale),
    }
}

/// One query head against `n` cached keys/values of its kv head (`keys[j]`, `values[j]`):
/// softmax(q·k_j · scale) weighted sum of v_j, all sums in f64.
pub fn attend(q: &[f32], keys: &[&[f32]], values: &[&[f32]], scale: f32) -> Vec<f32> {
    let scores: Vec<f64> = keys.iter().map(|k| dot(q, k) * f64::from(scale)).collect();
    let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
    let total: f64 = weights.iter().sum();
    let mut out = vec![0f64; q.len()];
    for (w, v) in weights.iter().zip(values) {
        for (o, &x) in out.iter_mut().zip(v.iter()) {
            *o += w / total * f64::from(x);
        }
    }
    out.into_iter().map(|x| x as f32).collect()
}

/// Causal GQA attention of every query head against a layer's cache: query head h reads kv
/// head ⌊h / (n_head / n_head_kv)⌋ (contiguous grouping); scale 1/√head_dim; each head as
/// `rounding` says ([`attend_rounded`]).
pub fn gqa_attention(
    q: &[f32],
    keys: &[Vec<f32>],
    values: &[Vec<f32>],
    n_head_kv: usize,
    head_dim: usize,
    rounding: AttentionRounding,
) -> Vec<f32> {
    let n_head = q.len() / head_dim;
    let group = n_head / n_head_kv;
    let scale = 1.0 / (head_dim as f32).sqrt();
    let mut out = Vec::with_capacity(q.len());
    for (hq, qh) in q.chunks(head_dim).enumerate() {
        let g = hq / group;
        let span = g * head_dim..(g + 1) * head_dim;
        let k: Vec<&[f32]> = keys.iter().map(|k| &k[span.clone()]).collect();
        let v: Vec<&[f32]> = values.iter().map(|v| &v[span.clone()]).collect();
        out.extend(attend_rounded(qh, &k, &v, scale, rounding));
    }
    out
}

pub fn add_into(x: &mut [f32], y: &[f32]) {
    x.iter_mut().zip(y).for_each(|(a, &b)| *a += b);
}

/// SwiGLU: `silu(gate) ⊙ up`.
pub fn swiglu(gate: &[f32], up: &[f32]) -> Vec<f32> {
    gate.iter().zip(up).map(|(&g, &u)| silu(g) * u).collect()
}

/// Index of the largest logit; the lowest index wins ties (the GPU argmax does the same).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as u32
}
