//! Sessions: load a model onto the GPU, prefill, decode (greedy on the GPU, or sampled),
//! stream tokens, read back logits for the untimed quality path.

pub mod engine;
pub mod io;
pub mod rounding;
pub mod sampling;
pub mod scheduler;

pub use engine::{
    Engine, EngineOptions, GenerationStats, PrefillPhases, SeqId, SnapshotStats, Started,
    StepProfile, StopReason,
};
pub use io::StepIo;
pub use sampling::{Sampler, SamplingError, SamplingParams, TokenLogprobs, logprobs};

use crate::cache::CacheError;
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
}

fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// A model resident on the GPU, driven one forward step at a time through the shared
/// [`StepIo`] buffers (the runtime writes `io.step` and `io.ids` before each step).
pub trait DeviceModel {
    /// Records one forward step over `n_tokens` tokens of one sequence, prompt tokens or one
    /// generated token as `marks.kind` says (ids in `io.ids`,
    /// positions and page-table row in `io.tokens`, its state slot in `io.seqs`): embed, every
    /// layer, final norm, LM head into `io.logits` for the last row (or for every row with
    /// `all_logits`), and the argmax of the last row into `io.ids[0]` and
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

    /// Records one decode step over one token of each of `n_seqs` sequences (ids in `io.ids`,
    /// position and page-table row of each in `io.tokens`, state slots in `io.seqs`): logits for
    /// every row, the argmax of row r into `io.ids[r]`. Every weight is read once for the whole
    /// batch. Its ops (and dispatches) are noted in `marks`.
    fn encode_batch(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        n_seqs: u32,
        marks: &mut StepMarks,
    ) -> Result<(), GpuError>;

    /// Records whatever a new sequence on state slot `slot` (its page-table row) needs beyond
    /// position 0 (hybrid models zero the slot's recurrent and conv states; attention caches
    /// need nothing, positions overwrite them).
    fn encode_reset(&self, encoder: &mut wgpu::CommandEncoder, slot: u32) -> Result<(), GpuError>;

    /// Bytes of one sequence's recurrent (DeltaNet + conv) state; 0 for attention-only models,
    /// whose cached prefixes need no snapshot.
    fn state_bytes(&self) -> u64 {
        0
    }

    /// Records copying the recurrent state of slot `slot` into `dst` from offset 0
    /// ([`DeviceModel::state_bytes`] bytes): a prefix-cache snapshot.
    fn encode_save_state(
        &self,
        _encoder: &mut wgpu::CommandEncoder,
        _slot: u32,
        _dst: &wgpu::Buffer,
    ) -> Result<(), GpuError> {
        Err(no_state())
    }

    /// Records replacing the recurrent state of slot `slot` by a snapshot saved in `src`.
    fn encode_restore_state(
        &self,
        _encoder: &mut wgpu::CommandEncoder,
        _src: &wgpu::Buffer,
        _slot: u32,
    ) -> Result<(), GpuError> {
        Err(no_state())
    }

    /// Records copying physical KV page `src` of every attention layer into page `dst`
    /// (copy-on-write of a cached page a sequence extends; `src` ≠ `dst`).
    fn encode_copy_page(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        src: u32,
        dst: u32,
    ) -> Result<(), GpuError>;

    /// The longest sequence the KV cache holds.
    fn max_context(&self) -> usize;

    fn n_vocab(&self) -> usize;
}

fn no_state() -> GpuError {
    GpuError::Shape {
        kernel: "state snapshot",
        message: "this model keeps no recurrent state".into(),
    }
}
