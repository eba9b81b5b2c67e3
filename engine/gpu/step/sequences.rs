//! The sequences of a step for models with recurrent state: [`SequenceTable`] (the
//! `struct Sequences` of wgsl/sequences.wgsl the Gated DeltaNet kernels read), the batch it
//! describes ([`SeqBatch`]) and the mid-step snapshot ([`MidSave`]).
//!
//! `count` sequences of `len` tokens (rows `s·len + t`), sequence `s` on state slot `slot[s]`.
//! Decode is `len = 1` with one entry per sequence in flight; prefill is one prompt
//! (`count = 1`). Its own table, not the shared `Step` uniform, because a batch needs one slot
//! per sequence.

use crate::gpu::buffers::storage_buffer;
use crate::gpu::context::GpuContext;
use crate::gpu::error::GpuError;
use crate::gpu::kernels::gated_delta_chunk::CHUNK;

/// The batch of one step: `count` sequences of `len` tokens each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeqBatch {
    pub count: u32,
    pub len: u32,
}

impl SeqBatch {
    pub fn tokens(&self) -> u64 {
        u64::from(self.count) * u64::from(self.len)
    }
}

/// A snapshot taken partway through a one-sequence prefill step (wgsl/sequences.wgsl): the
/// state after the step's first `rows` rows is also written to slot `slot`, so the prefix cache
/// gets the state at a branch point inside the step without the step stopping there (which
/// would cost another pass over every weight).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct MidSave {
    pub rows: u32,
    pub slot: u32,
}

/// The GPU buffer `struct Sequences` of wgsl/sequences.wgsl lives in: a 32-byte header
/// (count, len, the mid-step snapshot's lead, rows and slot) and one state slot per sequence.
pub struct SequenceTable {
    pub buffer: wgpu::Buffer,
    max_seqs: u32,
    n_slots: u32,
}

impl SequenceTable {
    /// A table for batches of up to `max_seqs` sequences over state slots `0..n_slots`.
    pub fn new(ctx: &GpuContext, max_seqs: u32, n_slots: u32) -> Result<Self, GpuError> {
        if max_seqs == 0 || n_slots == 0 {
            return Err(table_error(format!(
                "a table needs at least one sequence and one slot (got {max_seqs} and {n_slots})"
            )));
        }
        let buffer = storage_buffer(
            ctx,
            "sequences",
            4 * (HEADER_WORDS as u64 + u64::from(max_seqs)),
        )?;
        Ok(SequenceTable {
            buffer,
            max_seqs,
            n_slots,
        })
    }

    pub fn max_seqs(&self) -> u32 {
        self.max_seqs
    }

    pub fn n_slots(&self) -> u32 {
        self.n_slots
    }

    /// Queues the batch of the next step: one sequence per entry of `slots` (distinct slots),
    /// each `len` tokens. Returns the batch to pass to the kernels' `encode`. Like the `Step`
    /// uniform, the write lands before the next submit, so one submit runs one batch: steps
    /// with different batches go in separate submits (or use separate tables).
    pub fn write(&self, ctx: &GpuContext, len: u32, slots: &[u32]) -> Result<SeqBatch, GpuError> {
        let count = u32::try_from(slots.len()).unwrap_or(u32::MAX);
        if count == 0 || count > self.max_seqs || len == 0 {
            return Err(table_error(format!(
                "a batch of {count} sequences of {len} tokens: need 1..={} sequences of at least \
                 one token",
                self.max_seqs
            )));
        }
        for (i, &slot) in slots.iter().enumerate() {
            if slot >= self.n_slots {
                return Err(table_error(format!(
                    "sequence {i} uses slot {slot}, past the {} slots",
                    self.n_slots
                )));
            }
            if slots[..i].contains(&slot) {
                return Err(table_error(format!(
                    "slot {slot} appears twice in one batch (two sequences would race on its state)"
                )));
            }
        }
        self.put(ctx, [count, len, 0, 0, 0, 0, 0, 0], slots);
        Ok(SeqBatch { count, len })
    }

    /// [`SequenceTable::write`] for one sequence of `len` tokens on `slot`, with the state after
    /// `save.rows` of them also written to `save.slot` (a slot no sequence uses: the host's
    /// spare). The chunked prefill then runs `lead` zero rows first so that a chunk boundary
    /// falls on `save.rows`; its plan leaves room for that in every one-sequence step.
    pub fn write_prefill(
        &self,
        ctx: &GpuContext,
        len: u32,
        slot: u32,
        save: Option<MidSave>,
    ) -> Result<SeqBatch, GpuError> {
        let Some(save) = save else {
            return self.write(ctx, len, &[slot]);
        };
        if save.rows == 0 || save.rows >= len {
            return Err(table_error(format!(
                "a snapshot after {} of a step's {len} rows: it must fall inside the step",
                save.rows
            )));
        }
        if save.slot >= self.n_slots || save.slot == slot {
            return Err(table_error(format!(
                "a snapshot into slot {} for a sequence on slot {slot}: need another of the {} \
                 slots",
                save.slot, self.n_slots
            )));
        }
        if slot >= self.n_slots {
            return Err(table_error(format!(
                "sequence 0 uses slot {slot}, past the {} slots",
                self.n_slots
            )));
        }
        let lead = (CHUNK - save.rows % CHUNK) % CHUNK;
        self.put(ctx, [1, len, lead, save.rows, save.slot, 0, 0, 0], &[slot]);
        Ok(SeqBatch { count: 1, len })
    }

    fn put(&self, ctx: &GpuContext, header: [u32; HEADER_WORDS], slots: &[u32]) {
        let mut words = header.to_vec();
        words.extend_from_slice(slots);
        ctx.queue
            .write_buffer(&self.buffer, 0, bytemuck::cast_slice(&words));
    }
}

/// Words of `struct Sequences` before its slots.
const HEADER_WORDS: usize = 8;

fn table_error(message: String) -> GpuError {
    GpuError::Shape {
        kernel: "sequence table",
        message,
    }
}
