//! An RMSNorm bound at load ([`Norm`]).

use super::Kernels;
use crate::gpu::kernels::rms_norm::{NormIo, RmsNormBinding, RmsNormShape};
use crate::gpu::profile::{OpBytes, StepMarks};
use crate::gpu::step::StepBuffer;
use crate::gpu::{GpuContext, GpuError};

/// An RMSNorm over `rows_per_token` rows of `width` per token.
pub struct Norm {
    binding: RmsNormBinding,
    /// Elements normed per token.
    width: u64,
    weight_width: u64,
}

impl Norm {
    #[allow(clippy::too_many_arguments)]
    pub fn bind(
        k: &Kernels,
        ctx: &GpuContext,
        io: NormIo<'_>,
        width: usize,
        rows_per_token: usize,
        eps: f32,
        weight: &wgpu::Buffer,
        step: &StepBuffer,
        max_tokens: u32,
    ) -> Result<Norm, GpuError> {
        let shape = RmsNormShape {
            n: width as u32,
            rows_per_token: rows_per_token as u32,
            eps,
            max_tokens,
        };
        let binding = k.rms_norm.bind(ctx, shape, io, Some(weight), step)?;
        Ok(Norm {
            binding,
            width: (width * rows_per_token) as u64,
            weight_width: width as u64,
        })
    }

    /// Bytes of the norm's weight (read once per step).
    pub fn weight_bytes(&self) -> u64 {
        4 * self.weight_width
    }

    /// Records the norm of `n` tokens' rows as op `name` (each read once, written once).
    pub fn record(
        &self,
        k: &Kernels,
        pass: &mut wgpu::ComputePass,
        n: u32,
        marks: &mut StepMarks,
        name: &'static str,
    ) {
        k.rms_norm.encode(pass, &self.binding, n);
        let bytes = OpBytes::new(4 * self.weight_width, 8 * u64::from(n) * self.width);
        marks.op(pass, name, "rms_norm", bytes, 1);
    }
}
