//! The errors of the GPU layer: each names the adapter, kernel, buffer or limit involved.

use super::paths::KernelPaths;
use crate::quant::GgmlType;

#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("no GPU adapter found on backends {backends} (set WGPU_BACKEND to choose others)")]
    NoAdapter { backends: String },
    #[error("FAK_ADAPTER={wanted:?} matches no adapter; available: {}", available.join("; "))]
    NoMatchingAdapter {
        wanted: String,
        available: Vec<String>,
    },
    #[error("FAK_FORCE: {0}")]
    BadForce(String),
    #[error("requesting a device from adapter {adapter:?}: {source}")]
    RequestDevice {
        adapter: String,
        #[source]
        source: wgpu::RequestDeviceError,
    },
    #[error("kernel {kernel} ({paths}) needs device features {missing} that this device lacks")]
    PathUnavailable {
        kernel: &'static str,
        paths: KernelPaths,
        missing: String,
    },
    #[error("kernel {kernel} ({paths}) failed to build: {message}")]
    Shader {
        kernel: &'static str,
        paths: KernelPaths,
        message: String,
    },
    #[error("{what}: {size} exceeds the device's {limit_name} of {limit}")]
    TooLarge {
        what: String,
        size: u64,
        limit: u64,
        limit_name: &'static str,
    },
    #[error("kernel {kernel}: {message}")]
    Shape {
        kernel: &'static str,
        message: String,
    },
    #[error("kernel {kernel} has no pipeline for type {ty}")]
    UnsupportedType { kernel: &'static str, ty: GgmlType },
    #[error("buffer of {buffer_size} bytes: {op} of bytes {start}..{end} {problem}")]
    BufferRange {
        op: &'static str,
        start: u64,
        end: u64,
        buffer_size: u64,
        problem: &'static str,
    },
    #[error("mapping a readback buffer: {0}")]
    Readback(String),
    #[error("waiting for the GPU: {0}")]
    Poll(#[from] wgpu::PollError),
}
