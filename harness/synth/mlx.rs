//! The MLX form of a synthetic model: what `mlx_lm.convert -q` (affine mode, 4 bits, group 64)
//! makes of the Hugging Face export, written directly from the same float weights. With
//! `--fast-random` the GGUF's weights are random quantized blocks, not floats; a tensor written
//! that way is taken here as its blocks dequantized (the values llama.cpp and fak compute with)
//! and quantized again in MLX's form: MLX runs the GGUF's weights up to its own 4-bit rounding.
//!
//! mlx_lm keeps the checkpoint's values after its `sanitize` (qwen35: value heads in grouped
//! order, `A_log`), except that zero-centred norm gains carry the +1 and a depthwise conv weight
//! is `[C, K, 1]` ([`hf::to_mlx_values`], `mlx_float_shape`); that is what `mlx_lm.convert`
//! saves and what mlx_lm loads back without sanitizing it again.
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

use super::{ModelPlan, Source, TensorPlan, hf};
use anyhow::{Context, Result};
use fak::quant::GgmlType;
use indicatif::ProgressBar;
use rayon::prelude::*;
use safetensors::{Dtype, View};
use serde_json::json;
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

pub const GROUP: usize = 64;
pub const BITS: u32 = 4;
const LEVELS: f32 = ((1 << BITS) - 1) as f32;
const VALUES_PER_WORD: usize = 32 / BITS as usize;

/// Writes the MLX directory of `plan`'s weights, each tensor's values as the GGUF storing it
/// as `types[i]` means them ([`Source::fill_rows`]: the seeded floats, or `--fast-random`'s
/// blocks dequantized).
pub fn write(
    dir: &Path,
    plan: &ModelPlan,
    types: &[GgmlType],
    source: Source,
    bar: &ProgressBar,
) -> Result<()> {
    let quantization = json!({"group_size": GROUP, "bits": BITS, "mode": "affine"});
    let mut config = plan.hf_config.clone();
    config["quantization"] = quantization.clone();
    config["quantization_config"] = quantization;
    hf::write_metadata(dir, plan, &config)?;

    let parts = Parts::default();
    let mut views = Vec::new();
    for (t, &ty) in plan.tensors.iter().zip(types) {
        let tensor = |part| MlxTensor::new(t, ty, part, source, bar, &parts);
        if quantized(t) {
            for part in [Part::Weight, Part::Scales, Part::Biases] {
                let name = t.hf_name.replace(".weight", part.suffix());
                views.push((name, tensor(part)));
            }
        } else {
            views.push((t.hf_name.clone(), tensor(Part::Float)));
        }
    }
    let info = HashMap::from([("format".to_string(), "mlx".to_string())]);
    let path = dir.join("model.safetensors");
    safetensors::serialize_to_file(views, Some(info), &path)
        .with_context(|| format!("writing {}", path.display()))?;
    hf::match_permissions(dir, &path)
}

/// The shape mlx_lm keeps a float tensor in: the checkpoint's, except a depthwise conv weight
/// (the checkpoint's `[C, 1, K]`), which its `sanitize` turns into MLX's `[C, K, 1]` (the same
/// bytes). A directory holding `[C, 1, K]`, or the GGUF's squeezed `[C, K]`, is taken for an
/// unconverted checkpoint, and mlx_lm fails on the 2-D one.
fn mlx_float_shape(t: &TensorPlan) -> Vec<usize> {
    let hf: Vec<usize> = t.hf_shape.iter().map(|&d| d as usize).collect();
    match hf.as_slice() {
        &[channels, 1, taps] => vec![channels, taps, 1],
        _ => hf,
    }
}

/// MLX's default predicate: a matrix (Linear or Embedding weight) whose rows are whole groups.
fn quantized(t: &TensorPlan) -> bool {
    t.shape.len() == 2 && (t.row_len() as usize).is_multiple_of(GROUP)
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
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

/// The parts of quantized tensors computed but not yet asked for, by (tensor, part). The
/// writer asks for every F32 tensor (scales, biases) before any U32 one (the packed weights),
/// so a tensor is quantized once, when its biases are asked for, and its weight waits here:
/// memory holds the packed weights (half a byte per parameter) until they are written.
type Parts = Mutex<HashMap<(String, Part), Vec<u8>>>;

/// One output tensor, generated (and quantized) only when the writer asks for its bytes.
struct MlxTensor<'a> {
    plan: &'a TensorPlan,
    gguf_type: GgmlType,
    part: Part,
    source: Source,
    shape: Vec<usize>,
    bar: &'a ProgressBar,
    parts: &'a Parts,
}

impl<'a> MlxTensor<'a> {
    fn new(
        plan: &'a TensorPlan,
        gguf_type: GgmlType,
        part: Part,
        source: Source,
        bar: &'a ProgressBar,
        parts: &'a Parts,
    ) -> Self {
        let (rows, row_len) = (plan.n_rows() as usize, plan.row_len() as usize);
        let shape = match part {
            Part::Float => mlx_float_shape(plan),
            Part::Weight => vec![rows, row_len / VALUES_PER_WORD],
            Part::Scales | Part::Biases => vec![rows, row_len / GROUP],
        };
        MlxTensor {
            plan,
            gguf_type,
            part,
            source,
            shape,
            bar,
            parts,
        }
    }

    /// The tensor's values as mlx_lm holds them ([`hf::to_mlx_values`]), chunk of rows by
    /// chunk, each handed to `each` with its first row. A tensor whose heads move or whose
    /// values are mapped (qwen35's grouped value heads, `A_log`) comes as one chunk.
    fn for_each_chunk(&self, mut each: impl FnMut(u64, &[f32])) {
        let t = self.plan;
        let whole = hf::mlx_transforms(t);
        let mut gguf = Vec::new();
        self.source
            .for_each_chunk(t, self.gguf_type, |first, chunk| {
                if whole {
                    gguf.extend_from_slice(chunk);
                } else {
                    each(first, chunk);
                }
                self.bar.inc(4 * chunk.len() as u64);
                Ok(())
            })
            // The GGUF was written from the same source first, so this cannot fail here.
            .unwrap_or_else(|e| panic!("{}: {e}", t.name));
        if whole {
            each(0, &hf::to_mlx_values(t, gguf));
        }
    }

    /// Quantizes the whole tensor (rows in parallel): weight, scales and biases bytes.
    fn quantize(&self) -> [Vec<u8>; 3] {
        let t = self.plan;
        let row_len = t.row_len() as usize;
        let n = t.n_elements() as usize;
        let mut words = vec![0u32; n / VALUES_PER_WORD];
        let mut scales = vec![0f32; n / GROUP];
        let mut biases = vec![0f32; n / GROUP];
        let (wpr, gpr) = (row_len / VALUES_PER_WORD, row_len / GROUP);
        self.for_each_chunk(|first, chunk| {
            let (first, rows) = (first as usize, chunk.len() / row_len);
            chunk
                .par_chunks(row_len)
                .zip(words[first * wpr..(first + rows) * wpr].par_chunks_mut(wpr))
                .zip(scales[first * gpr..(first + rows) * gpr].par_chunks_mut(gpr))
                .zip(biases[first * gpr..(first + rows) * gpr].par_chunks_mut(gpr))
                .for_each(|(((row, w), s), b)| quantize_row_into(row, w, s, b));
        });
        [
            bytemuck::cast_slice(&words).to_vec(),
            bytemuck::cast_slice(&scales).to_vec(),
            bytemuck::cast_slice(&biases).to_vec(),
        ]
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
        if self.part == Part::Float {
            let mut bytes = Vec::with_capacity(self.data_len());
            self.for_each_chunk(|_, chunk| bytes.extend_from_slice(bytemuck::cast_slice(chunk)));
            return Cow::Owned(bytes);
        }
        let name = &self.plan.name;
        let mut parts = self.parts.lock().expect("no writer thread panicked");
        if let Some(bytes) = parts.remove(&(name.clone(), self.part)) {
            return Cow::Owned(bytes);
        }
        drop(parts);
        let [words, scales, biases] = self.quantize();
        let mut parts = self.parts.lock().expect("no writer thread panicked");
        let mut mine = Vec::new();
        for (part, bytes) in [
            (Part::Weight, words),
            (Part::Scales, scales),
            (Part::Biases, biases),
        ] {
            if part == self.part {
                mine = bytes;
            } else {
                parts.insert((name.clone(), part), bytes);
            }
        }
        Cow::Owned(mine)
    }

    fn data_len(&self) -> usize {
        4 * self.shape.iter().product::<usize>()
    }
}

/// One row in MLX's affine 4-bit form.
#[cfg(test)]
pub struct QuantizedRow {
    pub words: Vec<u32>,
    pub scales: Vec<f32>,
    pub biases: Vec<f32>,
}

/// Quantizes a row (a whole number of groups) as mlx's `quantize(w, 64, 4)` does.
#[cfg(test)]
pub fn quantize_row(row: &[f32]) -> QuantizedRow {
    let groups = row.len() / GROUP;
    let mut out = QuantizedRow {
        words: vec![0; row.len() / VALUES_PER_WORD],
        scales: vec![0.0; groups],
        biases: vec![0.0; groups],
    };
    quantize_row_into(row, &mut out.words, &mut out.scales, &mut out.biases);
    out
}

/// Quantizes a row (a whole number of groups) as mlx's `quantize(w, 64, 4)` does, into the
/// row's slices of the tensor's words, scales and biases.
fn quantize_row_into(row: &[f32], words: &mut [u32], scales: &mut [f32], biases: &mut [f32]) {
    let groups = row
        .chunks_exact(GROUP)
        .zip(words.chunks_exact_mut(GROUP / VALUES_PER_WORD))
        .zip(scales.iter_mut().zip(biases.iter_mut()));
    for ((group, words), (scale_out, bias_out)) in groups {
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
        for (values, word_out) in group.chunks_exact(VALUES_PER_WORD).zip(words.iter_mut()) {
            *word_out = values.iter().enumerate().fold(0u32, |word, (k, &w)| {
                let q = round_level(((w - bias) / scale).clamp(0.0, LEVELS));
                word | (q as u32) << (k as u32 * BITS)
            });
        }
        *scale_out = scale;
        *bias_out = bias;
    }
}

/// `x.round_ties_even()` for x in [0, 15] (or NaN), without the libm call baseline x86-64
/// makes of it: adding and subtracting 1.5·2²³ leaves the nearest integer, ties to even, for
/// any |x| < 2²² in the default rounding mode. Rounding the clamped value equals clamping the
/// rounded one (both ends are integers), so levels are mlx's to the bit.
fn round_level(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    (x + MAGIC) - MAGIC
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn level_rounding_is_ties_to_even() {
        for i in 0..=15 * 64 {
            let x = i as f32 / 64.0;
            assert_eq!(round_level(x), x.round_ties_even(), "{x}");
        }
        for x in [0.5f32, 1.5, 2.5, 14.5, 7.499_999, 7.500_001, 15.0] {
            assert_eq!(round_level(x), x.round_ties_even(), "{x}");
        }
    }

    /// The edge (the larger magnitude) comes back exactly; every value within one step: rounding
    /// costs half a step, and snapping the edge to a whole step shifts the grid so the far end
    /// may clamp by up to another half.
    #[test]
    fn a_row_round_trips_within_half_a_step() {
        let row: Vec<f32> = (0..128)
            .map(|i| ((i * 7919) % 257) as f32 / 64.0 - 1.7)
            .collect();
        let q = quantize_row(&row);
        assert_eq!((q.words.len(), q.scales.len()), (16, 2));
        for (g, group) in row.chunks(GROUP).enumerate() {
            let (scale, bias) = (q.scales[g], q.biases[g]);
            let edge = group
                .iter()
                .copied()
                .fold(0f32, |e, w| if w.abs() > e.abs() { w } else { e });
            assert_eq!(bias, edge, "the edge is the bias, level 0");
            for (i, &w) in group.iter().enumerate() {
                let word = q.words[g * 8 + i / 8];
                let level = (word >> (4 * (i % 8) as u32)) & 15;
                let back = bias + scale * level as f32;
                assert!((back - w).abs() <= scale.abs() + 1e-6, "{w} → {back}");
            }
        }
    }
}
