//! One elementwise op bound at load ([`Pointwise`]): a bias add, the SwiGLU of a prefill, an
//! output gate.

use super::Kernels;
use crate::gpu::kernels::elementwise::{ElementwiseBinding, ElementwiseOp, ElementwiseShape};
use crate::gpu::profile::StepMarks;
use crate::gpu::step::StepBuffer;
use crate::gpu::{GpuContext, GpuError};

/// One elementwise op bound at load.
pub struct Pointwise {
    binding: ElementwiseBinding,
}

impl Pointwise {
    pub fn bind(
        k: &Kernels,
        ctx: &GpuContext,
        heads: usize,
        width: usize,
        op: ElementwiseOp<'_>,
        step: &StepBuffer,
        max_tokens: u32,
    ) -> Result<Pointwise, GpuError> {
        let shape = ElementwiseShape {
            heads: heads as u32,
            width: width as u32,
            max_tokens,
        };
        let binding = k.elementwise.bind(ctx, shape, op, step)?;
        Ok(Pointwise { binding })
    }

    /// Records the op over `n` tokens as `name`.
    pub fn record(
        &self,
        k: &Kernels,
        pass: &mut wgpu::ComputePass,
        n: u32,
        marks: &mut StepMarks,
        name: &'static str,
    ) -> Result<(), GpuError> {
        let recorded = k.elementwise.encode(pass, &self.binding, n)?;
        marks.op(pass, name, recorded);
        Ok(())
    }
}
