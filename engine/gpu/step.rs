//! The per-step uniform (`wgsl/step.wgsl`): token count, position and cache length of a
//! forward step. Bind groups hold the buffer; the host rewrites its 16 bytes before each
//! step's submit (queue writes are ordered with submits, so steps may be in flight while the next
//! one is written).

use super::context::GpuContext;

/// The role of a step's tokens. Every kernel choice of a step follows it, never the number of
/// tokens, so a token's result does not depend on how its prompt was cut into steps or on what
/// else its step holds (a server's answers are the same under load).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepKind {
    /// Consecutive prompt tokens of one sequence, however few: the mat-mul, the prefill
    /// attention, the chunked delta rule.
    Prompt,
    /// One generated token of each of the step's sequences (one or a batch): the mat-vec, the
    /// decode attention, the recurrent delta rule.
    Decode,
}

/// `struct Step` of wgsl/step.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Step {
    pub n_tokens: u32,
    pub pos: u32,
    pub kv_len: u32,
    pub out_index: u32,
}

impl Step {
    /// `n_tokens` tokens starting at absolute position `pos`.
    pub fn new(pos: u32, n_tokens: u32, out_index: u32) -> Step {
        Step {
            n_tokens,
            pos,
            kv_len: pos + n_tokens,
            out_index,
        }
    }
}

/// The uniform buffer a model's kernels read their [`Step`] from.
pub struct StepBuffer {
    pub buffer: wgpu::Buffer,
}

impl StepBuffer {
    pub fn new(ctx: &GpuContext) -> StepBuffer {
        let buffer = ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("step"),
            size: std::mem::size_of::<Step>() as u64,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        StepBuffer { buffer }
    }

    /// Queues the write; it lands before the next submit's commands.
    pub fn set(&self, ctx: &GpuContext, step: Step) {
        ctx.queue
            .write_buffer(&self.buffer, 0, bytemuck::bytes_of(&step));
    }
}
