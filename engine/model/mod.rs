//! Models: one spec file per architecture (its hyperparameters, tensors and activations) and one
//! registry line ([`registry`]); the blocks every model on the GPU is built from ([`blocks`])
//! and the skeleton that binds and records them ([`decoder`]); the memory plan ([`DevicePlan`]).
//! `qwen3` is the dense family (llama, and `qwen2` in its own spec file, differ from it only by
//! what `qwen3::Dense` says: no q/k norm, q/k/v biases, adjacent rope pairing); `qwen35` is the
//! hybrid GDN family.

pub mod blocks;
pub mod bounds;
pub mod decoder;
mod device_model;
pub mod hparams;
mod plan;
pub mod qwen2;
pub mod qwen3;
pub mod qwen35;
pub mod registry;
pub mod tensors;

pub use decoder::DecodeStepBytes;
pub use device_model::DeviceModel;
pub use plan::{DevicePlan, load_device_model};
pub use registry::{Arch, ArchSpec, REGISTRY, blueprint};

use crate::gguf::{Gguf, GgufError, TensorInfo};
use crate::gpu::GpuError;
use crate::quant::{self, GgmlType};
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error("{}: architecture {arch:?} is not supported (supported: {})", path.display(), Arch::supported().join(", "))]
    UnsupportedArch { path: PathBuf, arch: String },
    #[error("{}: tensor {tensor}: shape {found:?}, expected {expected:?}", path.display())]
    Shape {
        path: PathBuf,
        tensor: String,
        found: Vec<u64>,
        expected: Vec<u64>,
    },
    #[error("{}: tensor {tensor}: type {ty} is not supported here ({why})", path.display())]
    TensorType {
        path: PathBuf,
        tensor: String,
        ty: GgmlType,
        why: String,
    },
    #[error("{}: {why}", path.display())]
    Hparams { path: PathBuf, why: String },
    /// A request the model cannot serve (token id out of range, empty prompt, …).
    #[error("{0}")]
    Input(String),
}

/// A tensor that must exist with exactly `shape` (ne order: row length first).
pub(crate) fn expect_tensor<'g>(
    gguf: &'g Gguf,
    name: &str,
    shape: &[u64],
) -> Result<&'g TensorInfo, ModelError> {
    let t = gguf.require_tensor(name)?;
    check_shape(gguf, t, shape)?;
    Ok(t)
}

/// Like [`expect_tensor`], for tensors a model may or may not have.
pub(crate) fn optional_tensor<'g>(
    gguf: &'g Gguf,
    name: &str,
    shape: &[u64],
) -> Result<Option<&'g TensorInfo>, ModelError> {
    gguf.tensor(name)
        .map(|t| check_shape(gguf, t, shape).map(|_| t))
        .transpose()
}

/// A 1-D tensor (norm weight, bias, conv taps) as f32, whatever type the file stores it in.
pub fn vector(gguf: &Gguf, t: &TensorInfo) -> Result<Vec<f32>, ModelError> {
    check_dequantizable(gguf, t)?;
    Ok(
        quant::dequantize(t.ty, gguf.tensor_data(t), t.n_elements() as usize)
            .expect("geometry checked at load"),
    )
}

/// Refuses a tensor of a type fak has no CPU dequantizer for, naming it.
pub fn check_dequantizable(gguf: &Gguf, t: &TensorInfo) -> Result<(), ModelError> {
    if quant::can_dequantize(t.ty) {
        Ok(())
    } else {
        Err(ModelError::TensorType {
            path: gguf.path().to_owned(),
            tensor: t.name.clone(),
            ty: t.ty,
            why: "no dequantizer for this type".into(),
        })
    }
}

fn check_shape(gguf: &Gguf, t: &TensorInfo, shape: &[u64]) -> Result<(), ModelError> {
    // GGUF writers may or may not keep trailing unit dimensions; compare without them.
    let trim = |s: &[u64]| {
        let n = s.iter().rposition(|&d| d != 1).map_or(0, |i| i + 1);
        s[..n].to_vec()
    };
    if trim(&t.shape) != trim(shape) {
        return Err(ModelError::Shape {
            path: gguf.path().to_owned(),
            tensor: t.name.clone(),
            found: t.shape.clone(),
            expected: shape.to_vec(),
        });
    }
    Ok(())
}
