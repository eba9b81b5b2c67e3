//! An RMSNorm bound at load ([`Norm`]).

use super::Kernels;
use crate::gpu::kernels::rms_norm::{NormIo, RmsNormBinding, RmsNormShape};
use crate::gpu::profile::StepMarks;
use crate::gpu::step::StepBuffer;
use crate::gpu::{GpuContext, GpuError};

/// An RMSNorm over `rows_per_token` rows of `width` per token.
pub struct Norm {
    binding: RmsNormBinding,
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
        Ok(Norm { binding })
    }

    /// Records the norm of `n` tokens' rows as op `name`.
    pub fn record(
        &self,
        k: &Kernels,
        pass: &mut wgpu::ComputePass,
        n: u32,
        marks: &mut StepMarks,
        name: &'static str,
    ) -> Result<(), GpuError> {
        let recorded = marks.probed(name, pass, |p| k.rms_norm.encode(p, &self.binding, n))?;
        marks.op(pass, name, recorded);
        Ok(())
    }
}
