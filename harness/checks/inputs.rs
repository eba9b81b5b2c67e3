//! Inputs for the kernels of a forward step: seeded random f32 data on the device, and a Step
//! uniform set for one run.

use fak::gpu::{GpuContext, Step, StepBuffer, upload};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// `n` values uniform in `lo..hi`.
pub fn uniform_f32(rng: &mut ChaCha8Rng, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(lo..hi)).collect()
}

/// A storage buffer holding `data`.
pub fn upload_f32(ctx: &GpuContext, label: &str, data: &[f32]) -> wgpu::Buffer {
    upload(ctx, label, bytemuck::cast_slice(data)).expect("uploading test data")
}

/// A storage buffer holding `data` (token tables, page tables).
pub fn upload_u32(ctx: &GpuContext, label: &str, data: &[u32]) -> wgpu::Buffer {
    upload(ctx, label, bytemuck::cast_slice(data)).expect("uploading test data")
}

/// A Step uniform holding `step`, written before the next submit.
pub fn step_buffer(ctx: &GpuContext, step: Step) -> StepBuffer {
    let buffer = StepBuffer::new(ctx);
    buffer.set(ctx, step);
    buffer
}
