//! Sessions: load a model onto the GPU, prefill, decode (greedy on the GPU, or sampled),
//! stream tokens, read back logits for the untimed quality path.

pub mod engine;
pub mod io;
pub mod sampling;

pub use engine::{Engine, EngineOptions, GenerationStats, StepProfile, StopReason};
pub use io::StepIo;
pub use sampling::{Sampler, SamplingParams};

use crate::gguf::GgufError;
use crate::gpu::GpuError;
use crate::gpu::profile::StepMarks;
use crate::model::ModelError;
use crate::tokenizer::TokenizerError;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error(
        "{model}: needs {} of GPU memory ({what}); the adapter {adapter} has {}",
        gib(*needed), gib(*available)
    )]
    TooLarge {
        model: String,
        adapter: String,
        what: String,
        needed: u64,
        available: u64,
    },
    /// A request the engine cannot serve: empty prompt, prompt past the context, bad token id.
    #[error("{0}")]
    Request(String),
}

fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// A model resident on the GPU, driven one forward step at a time through the shared
/// [`StepIo`] buffers (the runtime writes `io.step` and `io.ids` before each step).
pub trait DeviceModel {
    /// Records one forward step over `n_tokens` tokens (ids in `io.ids`, positions from
    /// `io.step`): embed, every layer, final norm, LM head into `io.logits` for the last row (or
    /// for every row with `all_logits`), and the argmax of the last row into `io.ids[0]` and
    /// `io.history[step.out_index]`. Every op it records is noted in `marks` (name, kernel,
    /// bytes, dispatches; a timestamp after each when `marks` is timed), so the step's dispatch
    /// count and profile come from the code that records them.
    fn encode_step(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        n_tokens: u32,
        all_logits: bool,
        marks: &mut StepMarks,
    ) -> Result<(), GpuError>;

    /// Records whatever a new sequence needs beyond position 0 (hybrid models zero their
    /// recurrent and conv states; attention caches need nothing, positions overwrite them).
    fn encode_reset(&self, encoder: &mut wgpu::CommandEncoder);

    /// The longest sequence the KV cache holds.
    fn max_context(&self) -> usize;

    fn n_vocab(&self) -> usize;
}
