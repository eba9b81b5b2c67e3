//! The MLX form of a synthetic model: what `mlx_lm.convert -q` (affine mode, 4 bits, group 64)
//! makes of the Hugging Face export, written directly from the same float weights.
//!
//! MLX quantizes every layer that has a quantized form (Linear, Embedding) whose rows are whole
//! groups; norms and anything else stay float (here F32, the export's `torch_dtype`). Per group
//! of 64 values (mlx `quantize`, affine mode): `scale = max((max − min) / 15, 1e-7)`, negated
//! unless |min| > |max|; the edge (min or max, the larger magnitude) is rounded to a whole step
//! `q0 = rint(edge / scale)` and, when q0 ≠ 0, `scale = edge / q0` and `bias = edge`, so the edge
//! value is exact; each value becomes `clamp(rint((w − bias) / scale), 0, 15)`, eight to a u32,
//! the first in the lowest bits. `weight` is u32 `[rows, row_len / 8]`; `scales` and `biases`
//! are `[rows, row_len / 64]`; `config.json` gains `quantization` (and its Hugging Face alias
//! `quantization_config`) = `{group_size: 64, bits: 4, mode: "affine"}`.

use super::{ModelPlan, TensorPlan, hf, weights};
use anyhow::{Context, Result};
use indicatif::ProgressBar;
use safetensors::{Dtype, View};
use serde_json::json;
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

pub const GROUP: usize = 64;
pub const BITS: u32 = 4;
const LEVELS: f32 = ((1 << BITS) - 1) as f32;
const VALUES_PER_WORD: usize = 32 / BITS as usize;

pub fn write(dir: &Path, plan: &ModelPlan, seed: u64, bar: &ProgressBar) -> Result<()> {
    let quantization = json!({"group_size": GROUP, "bits": BITS, "mode": "affine"});
    let mut config = plan.hf_config.clone();
    config["quantization"] = quantization.clone();
    config["quantization_config"] = quantization;
    hf::write_metadata(dir, plan, &config)?;

    let mut views = Vec::new();
    for t in &plan.tensors {
        if quantized(t) {
            for part in [Part::Weight, Part::Scales, Part::Biases] {
                let name = t.hf_name.replace(".weight", part.suffix());
                views.push((name, MlxTensor::new(t, part, seed, bar)));
            }
        } else {
            views.push((t.hf_name.clone(), MlxTensor::new(t, Part::Float, seed, bar)));
        }
    }
    let info = HashMap::from([("format".to_string(), "mlx".to_string())]);
    let path = dir.join("model.safetensors");
    safetensors::serialize_to_file(views, Some(info), &path)
        .with_context(|| format!("writing {}", path.display()))?;
    hf::match_permissions(dir, &path)
}

/// MLX's default predicate: a matrix (Linear or Embedding weight) whose rows are whole groups.
fn quantized(t: &TensorPlan) -> bool {
    t.shape.len() == 2 && (t.row_len() as usize).is_multiple_of(GROUP)
}

#[derive(Clone, Copy, PartialEq)]
enum Part {
    Weight,
    Scales,
    Biases,
    Float,
}

impl Part {
    fn suffix(self) -> &'static str {
        match self {
            Part::Weight | Part::Float => ".weight",
            Part::Scales => ".scales",
            Part::Biases => ".biases",
        }
    }
}

/// One output tensor, generated (and quantized) only when the writer asks for its bytes.
struct MlxTensor<'a> {
    plan: &'a TensorPlan,
    part: Part,
    seed: u64,
    shape: Vec<usize>,
    bar: &'a ProgressBar,
}

impl<'a> MlxTensor<'a> {
    fn new(plan: &'a TensorPlan, part: Part, seed: u64, bar: &'a ProgressBar) -> Self {
        let (rows, row_len) = (plan.n_rows() as usize, plan.row_len() as usize);
        let shape = match part {
            Part::Float => plan.shape.iter().rev().map(|&d| d as usize).collect(),
            Part::Weight => vec![rows, row_len / VALUES_PER_WORD],
            Part::Scales | Part::Biases => vec![rows, row_len / GROUP],
        };
        MlxTensor {
            plan,
            part,
            seed,
            shape,
            bar,
        }
    }
}

impl View for MlxTensor<'_> {
    fn dtype(&self) -> Dtype {
        match self.part {
            Part::Weight => Dtype::U32,
            _ => Dtype::F32,
        }
    }

    fn shape(&self) -> &[usize] {
        &self.shape
    }

    fn data(&self) -> Cow<'_, [u8]> {
        let t = self.plan;
        let row_len = t.row_len() as usize;
        let mut row = vec![0f32; row_len];
        let mut bytes = Vec::with_capacity(self.data_len());
        for r in 0..t.n_rows() {
            weights::fill_rows(t.init, self.seed, &t.name, r, row_len, &mut row);
            if self.part == Part::Float {
                bytes.extend_from_slice(bytemuck::cast_slice(&row));
                continue;
            }
            let q = quantize_row(&row);
            match self.part {
                Part::Weight => bytes.extend_from_slice(bytemuck::cast_slice(&q.words)),
                Part::Scales => bytes.extend_from_slice(bytemuck::cast_slice(&q.scales)),
                _ => bytes.extend_from_slice(bytemuck::cast_slice(&q.biases)),
            }
        }
        if self.part != Part::Scales && self.part != Part::Biases {
            self.bar.inc(4 * t.n_elements());
        }
        Cow::Owned(bytes)
    }

    fn data_len(&self) -> usize {
        4 * self.shape.iter().product::<usize>()
    }
}

/// One row in MLX's affine 4-bit form.
pub struct QuantizedRow {
    pub words: Vec<u32>,
    pub scales: Vec<f32>,
    pub biases: Vec<f32>,
}

/// Quantizes a row (a whole number of groups) as mlx's `quantize(w, 64, 4)` does.
pub fn quantize_row(row: &[f32]) -> QuantizedRow {
    let groups = row.len() / GROUP;
    let mut out = QuantizedRow {
        words: Vec::with_capacity(row.len() / VALUES_PER_WORD),
        scales: Vec::with_capacity(groups),
        biases: Vec::with_capacity(groups),
    };
    for group in row.chunks_exact(GROUP) {
        let max = group.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let min = group.iter().copied().fold(f32::INFINITY, f32::min);
        let min_is_edge = min.abs() > max.abs();
        let step = ((max - min) / LEVELS).max(1e-7);
        let mut scale = if min_is_edge { step } else { -step };
        let edge = if min_is_edge { min } else { max };
        let q0 = (edge / scale).round_ties_even();
        let mut bias = 0.0;
        if q0 != 0.0 {
            scale = edge / q0;
            bias = edge;
        }
        for values in group.chunks_exact(VALUES_PER_WORD) {
            let word = values.iter().enumerate().fold(0u32, |word, (k, &w)| {
                let q = ((w - bias) / scale).round_ties_even().clamp(0.0, LEVELS);
                word | (q as u32) << (k as u32 * BITS)
            });
            out.words.push(word);
        }
        out.scales.push(scale);
        out.biases.push(bias);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dequantized values lie within half a step of the input, and the edge is exact.
    #[test]
    fn a_row_round_trips_within_half_a_step() {
        let row: Vec<f32> = (0..128)
            .map(|i| ((i * 7919) % 257) as f32 / 64.0 - 1.7)
            .collect();
        let q = quantize_row(&row);
        assert_eq!((q.words.len(), q.scales.len()), (16, 2));
        for (g, group) in row.chunks(GROUP).enumerate() {
            let (scale, bias) = (q.scales[g], q.biases[g]);
            for (i, &w) in group.iter().enumerate() {
                let word = q.words[g * 8 + i / 8];
                let level = (word >> (4 * (i % 8) as u32)) & 15;
                let back = bias + scale * level as f32;
                assert!((back - w).abs() <= scale.abs() * 0.5 + 1e-6, "{w} → {back}");
            }
        }
    }
}
