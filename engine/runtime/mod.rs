//! Sessions: load a model onto the GPU, prefill, decode (greedy on the GPU, or sampled),
//! stream tokens, read back logits for the untimed quality path.

pub mod engine;
pub mod io;
pub mod rounding;
pub mod sampling;
pub mod scheduler;
pub mod trace;

pub use engine::{
    Engine, EngineOptions, GenerationStats, PrefillPhases, SeqId, SnapshotStats, Started,
    StepProfile, StopReason,
};
pub use sampling::{Sampler, SamplingError, SamplingParams, TokenLogprobs, logprobs};

use crate::cache::CacheError;
use crate::gguf::GgufError;
use crate::gpu::GpuError;
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
    /// The prefix cache refused (no free KV pages while sequences hold them, misuse).
    #[error(transparent)]
    Cache(#[from] CacheError),
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
    /// A step this request was part of failed for another's or the engine's reason (the
    /// request itself may be fine): the server's error, not the client's.
    #[error("{0}")]
    StepFailed(String),
}

fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
}
