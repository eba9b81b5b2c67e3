//! The interface the runtime drives a model on the GPU through, one forward step at a time.

use crate::gpu::GpuError;
use crate::gpu::profile::StepMarks;

/// A model resident on the GPU, driven one forward step at a time through the shared
/// [`StepIo`](crate::gpu::step::StepIo) buffers (the runtime writes `io.step` and `io.ids` before each step).
pub trait DeviceModel {
    /// Records one forward step over `n_tokens` tokens of one sequence, prompt tokens or one
    /// generated token as `marks.kind` says (ids in `io.ids`, positions and page-table row in `io.tokens`, its state slot in `io.seqs`): embed, every
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

    /// Records one step over the prompt tokens of several sequences (`batch.rows` rows as
    /// `io.seqs` was written with `write_ragged`: ids in `io.ids`, each token's position and
    /// page-table row in `io.tokens`, each sequence's rows starting on a multiple of
    /// [`DeviceModel::prompt_alignment`] with padding tokens between, see `StepIo::pad_row`):
    /// every layer in the prompt role over all of them (the weights read once), then the head
    /// over `last_rows` (each sequence's last row), row i's logits into row i of `io.logits`
    /// and its argmax into `io.ids[i]` (`io.tail_step.n_tokens` must be `last_rows.len()`).
    /// Each row's results are those of its prompt run alone.
    fn encode_prompts(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        batch: crate::gpu::step::SeqBatch,
        last_rows: &[u32],
        marks: &mut StepMarks,
    ) -> Result<(), GpuError>;

    /// The tokens each sequence's rows start on a multiple of in [`DeviceModel::encode_prompts`]
    /// (the prefill attention's; a hybrid model's also on the delta rule's chunk, so that its
    /// chunks in all fit the scratch of one prefill chunk).
    fn prompt_alignment(&self) -> u32;

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

    /// Bytes of the activations the model allocated (its scratch table and the chunked delta
    /// rule's scratch; the logits are `StepIo`'s): what `DevicePlan::scratch_bytes` plans
    /// besides the logits.
    fn activation_bytes(&self) -> u64;
}

pub(crate) fn no_state() -> GpuError {
    GpuError::Shape {
        kernel: "state snapshot",
        message: "this model keeps no recurrent state".into(),
    }
}

//END
