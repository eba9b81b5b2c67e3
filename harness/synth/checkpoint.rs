//! Trained weights in place of the seeded ones (`synth --weights`): a Hugging Face checkpoint
//! (`model.safetensors`, what `transformers` saves) or a GGUF of the same plan, read whole into
//! memory as each tensor's GGUF values. A checkpoint goes through the converter's transforms
//! ([`hf::to_gguf_values`]), so synth is then llama.cpp's converter for its architectures; a GGUF
//! is dequantized. Meant for small models: every value is held as f32.

use super::{ModelPlan, TensorPlan, hf};
use anyhow::{Context, Result, bail, ensure};
use fak::gguf::Gguf;
use safetensors::{Dtype, SafeTensors};
use std::collections::HashMap;
use std::path::Path;

/// Each plan tensor's values in GGUF order and meaning, by GGUF name.
pub struct Checkpoint {
    tensors: HashMap<String, Vec<f32>>,
}

impl Checkpoint {
    /// Reads `path` (`.gguf`, else safetensors) for every tensor of `plan`: each must be there
    /// with the plan's shape, and the file must hold nothing else.
    pub fn load(path: &Path, plan: &ModelPlan) -> Result<Self> {
        let is_gguf = path.extension().is_some_and(|e| e == "gguf");
        let tensors = if is_gguf {
            from_gguf(path, &plan.tensors)
        } else {
            from_safetensors(path, &plan.tensors)
        }
        .with_context(|| format!("--weights {}", path.display()))?;
        Ok(Self { tensors })
    }

    /// Rows `first..` of `t` into `out` (whole rows).
    pub fn rows(&self, t: &TensorPlan, first: u64, out: &mut [f32]) {
        let values = &self.tensors[&t.name];
        let start = (first * t.row_len()) as usize;
        out.copy_from_slice(&values[start..start + out.len()]);
    }
}

fn from_safetensors(path: &Path, plan: &[TensorPlan]) -> Result<HashMap<String, Vec<f32>>> {
    let bytes = std::fs::read(path)?;
    let file = SafeTensors::deserialize(&bytes)?;
    let wanted: Vec<&str> = plan.iter().map(|t| t.hf_name.as_str()).collect();
    let extra: Vec<&str> = file
        .names()
        .into_iter()
        .filter(|n| !wanted.contains(n))
        .collect();
    ensure!(
        extra.is_empty(),
        "tensors the model has no place for: {}",
        extra.join(", ")
    );
    plan.iter()
        .map(|t| {
            let view = file
                .tensor(&t.hf_name)
                .with_context(|| format!("tensor {} missing", t.hf_name))?;
            let shape: Vec<u64> = view.shape().iter().map(|&d| d as u64).collect();
            ensure!(
                shape == t.hf_shape,
                "tensor {}: shape {shape:?}, the model needs {:?}",
                t.hf_name,
                t.hf_shape
            );
            let values = floats(view.dtype(), view.data())
                .with_context(|| format!("tensor {}", t.hf_name))?;
            Ok((t.name.clone(), hf::to_gguf_values(t, values)))
        })
        .collect()
}

/// Little-endian F32, F16 or BF16 bytes as f32.
fn floats(dtype: Dtype, data: &[u8]) -> Result<Vec<f32>> {
    let half = |f: fn(u16) -> f32| {
        data.chunks_exact(2)
            .map(|b| f(u16::from_le_bytes([b[0], b[1]])))
            .collect()
    };
    Ok(match dtype {
        Dtype::F32 => data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        Dtype::F16 => half(|b| half::f16::from_bits(b).to_f32()),
        Dtype::BF16 => half(|b| half::bf16::from_bits(b).to_f32()),
        other => bail!("dtype {other:?}: expected F32, F16 or BF16"),
    })
}

fn from_gguf(path: &Path, plan: &[TensorPlan]) -> Result<HashMap<String, Vec<f32>>> {
    let gguf = Gguf::open(path)?;
    let wanted: Vec<&str> = plan.iter().map(|t| t.name.as_str()).collect();
    if let Some(extra) = gguf
        .tensors()
        .iter()
        .find(|t| !wanted.contains(&t.name.as_str()))
    {
        bail!("tensor {} has no place in the model", extra.name);
    }
    plan.iter()
        .map(|t| {
            let info = gguf.require_tensor(&t.name)?;
            ensure!(
                info.shape == t.shape,
                "tensor {}: shape {:?}, the model needs {:?}",
                t.name,
                info.shape,
                t.shape
            );
            let values =
                fak::quant::dequantize(info.ty, gguf.tensor_data(info), t.n_elements() as usize)
                    .map_err(|e| gguf.tensor_error(info, e.to_string()))?;
            Ok((t.name.clone(), values))
        })
        .collect()
}
