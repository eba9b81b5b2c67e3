//! The sequences of a step for models with recurrent state: [`SequenceTable`] (the
//! `struct Sequences` of wgsl/sequences.wgsl the Gated DeltaNet kernels read), the batch it
//! describes ([`SeqBatch`]) and the mid-step snapshot ([`MidSave`]).
//!
//! `count` sequences, each on its own state slot and rows: equal lengths one after another
//! ([`SequenceTable::write`]: decode is `len = 1` with one entry per sequence in flight; a
//! prefill one prompt, `count = 1`), or several prompts' rows with padding between
//! ([`SequenceTable::write_ragged`]). Its own table, not the shared `Step` uniform, because a
//! batch needs a slot and rows per sequence.

use crate::gpu::buffers::storage_buffer;
use crate::gpu::context::GpuContext;
use crate::gpu::error::GpuError;
use crate::gpu::kernels::gated_delta_chunk::CHUNK;

/// The batch of one step: `count` sequences of at most `len` tokens each, over the step's
/// first `rows` rows, `tokens` tokens in all, their chunked delta rule in `chunks` scratch
/// blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeqBatch {
    pub count: u32,
    pub len: u32,
    pub rows: u32,
    pub chunks: u32,
    tokens: u32,
}

impl SeqBatch {
    /// `count` sequences of `len` tokens, one after another.
    pub fn uniform(count: u32, len: u32) -> SeqBatch {
        SeqBatch {
            count,
            len,
            rows: count * len,
            chunks: count * len.div_ceil(CHUNK),
            tokens: count * len,
        }
    }

    /// The sequences' tokens (padding rows between them not counted).
    pub fn tokens(&self) -> u64 {
        u64::from(self.tokens)
    }
}

/// A snapshot taken partway through a prefill step (wgsl/sequences.wgsl): the state after the
/// step's (or, in a step of several prompts, one sequence's) first `rows` rows is also written
/// to slot `slot`, so the prefix cache gets the state at a branch point inside the step without
/// the step stopping there (which would cost another pass over every weight).
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
            4 * (HEADER_WORDS as u64 + ENTRY_WORDS as u64 * u64::from(max_seqs)),
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
        self.check(len, slots)?;
        let count = slots.len() as u32;
        let entries: Vec<(u32, u32, u32)> = (0..count)
            .map(|s| (slots[s as usize], s * len, len))
            .collect();
        self.put(ctx, [0; HEADER_WORDS - 1], &entries);
        Ok(SeqBatch::uniform(count, len))
    }

    /// Checks a batch of sequences of up to `len` tokens on `slots`.
    fn check(&self, len: u32, slots: &[u32]) -> Result<(), GpuError> {
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
        Ok(())
    }

    /// Queues a batch of sequences of any lengths at any rows: `(slot, first row, tokens)` per
    /// sequence, in row order, not overlapping, each of at least one token (distinct slots).
    /// With `save` = (i, save), the state of sequence i after `save.rows` of its tokens (a
    /// multiple of the delta rule's chunk, inside them) is also written to slot `save.slot`.
    pub fn write_ragged(
        &self,
        ctx: &GpuContext,
        seqs: &[(u32, u32, u32)],
        save: Option<(usize, MidSave)>,
    ) -> Result<SeqBatch, GpuError> {
        let slots: Vec<u32> = seqs.iter().map(|&(slot, _, _)| slot).collect();
        let lens = seqs.iter().map(|&(_, _, len)| len);
        let len = lens.clone().max().unwrap_or(0);
        self.check(len.max(1), &slots)?;
        let mut end = 0;
        for (i, &(_, start, len)) in seqs.iter().enumerate() {
            if len == 0 || start < end {
                return Err(table_error(format!(
                    "sequence {i} of {len} tokens from row {start}: sequences need a token and \
                     rows of their own, in order (the one before ends at row {end})"
                )));
            }
            end = start + len;
        }
        let mut header = [0; HEADER_WORDS - 1];
        if let Some((i, save)) = save {
            let Some(&(slot, _, len)) = seqs.get(i) else {
                return Err(table_error(format!(
                    "a snapshot of sequence {i} of {}",
                    seqs.len()
                )));
            };
            let inside = save.rows > 0 && save.rows < len && save.rows % CHUNK == 0;
            if !inside || save.slot >= self.n_slots || slots.contains(&save.slot) {
                return Err(table_error(format!(
                    "a snapshot after {} of the {len} rows of sequence {i} (slot {slot}) into \
                     slot {}: it must fall inside the sequence on the chunk grid, into a slot \
                     no sequence of the batch uses",
                    save.rows, save.slot
                )));
            }
            header = [0, save.rows, save.slot, i as u32, 0, 0, 0];
        }
        self.put(ctx, header, seqs);
        Ok(SeqBatch {
            count: seqs.len() as u32,
            len,
            rows: end,
            chunks: lens.clone().map(|l| l.div_ceil(CHUNK)).sum(),
            tokens: lens.sum(),
        })
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
        self.put(
            ctx,
            [lead, save.rows, save.slot, 0, 0, 0, 0],
            &[(slot, 0, len)],
        );
        Ok(SeqBatch::uniform(1, len))
    }

    /// Writes the header (count, then `header`: lead, save_rows, save_slot, save_seq, padding)
    /// and an entry per
    /// sequence (slot, start, len, then its first chunk block: the chunks before it).
    fn put(&self, ctx: &GpuContext, header: [u32; HEADER_WORDS - 1], seqs: &[(u32, u32, u32)]) {
        let mut words = vec![seqs.len() as u32];
        words.extend_from_slice(&header);
        let mut chunk0 = 0;
        for &(slot, start, len) in seqs {
            words.extend_from_slice(&[slot, start, len, chunk0]);
            chunk0 += len.div_ceil(CHUNK);
        }
        ctx.queue
            .write_buffer(&self.buffer, 0, bytemuck::cast_slice(&words));
    }
}

/// Words of `struct Sequences` before its entries, and of each entry.
const HEADER_WORDS: usize = 8;
const ENTRY_WORDS: usize = 4;

fn table_error(message: String) -> GpuError {
    GpuError::Shape {
        kernel: "sequence table",
        message,
    }
}
