//! The sequences of a step for models with recurrent state: [`SequenceTable`] (the
//! `struct Sequences` of wgsl/sequences.wgsl the Gated DeltaNet kernels read), the batch it
//! describes ([`SeqBatch`]) and the mid-step snapshots ([`MidSave`], one per sequence at most).
//!
//! `count` sequences, each on its own state slot and rows: equal lengths one after another
//! ([`SequenceTable::write`]: decode is `len = 1` with one entry per sequence in flight; a
//! prefill one prompt, `count = 1`), or several prompts' rows with padding between
//! ([`SequenceTable::write_ragged`]). Its own table, not the shared `Step` uniform, because a
//! batch needs a slot and rows per sequence. A prompt's chunks for the chunked delta rule are
//! those of the absolute chunk grid of positions (each entry's `lead`: its first position
//! modulo the chunk), so a sequence's bits do not depend on the step it runs in.

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
    /// `count` sequences of `len` tokens, one after another, from position 0.
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

/// A snapshot taken partway through a prefill step (wgsl/sequences.wgsl): the state after a
/// sequence's first `rows` rows of the step is also written to slot `slot`, so the prefix cache
/// gets the state at a branch point inside the step without the step stopping there (which
/// would cost another pass over every weight). Every sequence of a step may take one, each into
/// a slot of its own.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct MidSave {
    pub rows: u32,
    pub slot: u32,
}

/// One sequence of a prompt step of several ([`SequenceTable::write_ragged`]): its state slot,
/// its first row in the step, its tokens, the position of its first token (whose remainder
/// modulo the chunk is its lead: wgsl/sequences.wgsl), and the snapshot it takes partway
/// through, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeqRows {
    pub slot: u32,
    pub row: u32,
    pub len: u32,
    pub pos: u32,
    pub save: Option<MidSave>,
}

impl SeqRows {
    /// Zero rows the chunked delta rule runs before the sequence's first, so that its chunks
    /// are those of the absolute grid.
    fn lead(&self) -> u32 {
        self.pos % CHUNK
    }

    /// Chunks of the delta rule it takes, its lead rows included.
    fn chunks(&self) -> u32 {
        (self.lead() + self.len).div_ceil(CHUNK)
    }
}

/// The GPU buffer `struct Sequences` of wgsl/sequences.wgsl lives in: a 16-byte header (the
/// count) and an entry per sequence (its mid-step snapshot's rows and slot among its fields).
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
        let entries: Vec<SeqRows> = (0..count)
            .map(|s| SeqRows {
                slot: slots[s as usize],
                row: s * len,
                len,
                pos: 0,
                save: None,
            })
            .collect();
        self.put(ctx, &entries);
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

    /// Queues a batch of sequences of any lengths at any rows ([`SeqRows`]), in row order, not
    /// overlapping, each of at least one token (distinct slots). Where a sequence has a `save`,
    /// its state after `save.rows` of its tokens (inside them, at a position on the delta
    /// rule's chunk grid) is also written to slot `save.slot` (one no other sequence of the
    /// batch uses, nor another's save).
    pub fn write_ragged(&self, ctx: &GpuContext, seqs: &[SeqRows]) -> Result<SeqBatch, GpuError> {
        let slots: Vec<u32> = seqs.iter().map(|s| s.slot).collect();
        let len = seqs.iter().map(|s| s.len).max().unwrap_or(0);
        self.check(len.max(1), &slots)?;
        let mut end = 0;
        for (i, s) in seqs.iter().enumerate() {
            if s.len == 0 || s.row < end {
                return Err(table_error(format!(
                    "sequence {i} of {} tokens from row {}: sequences need a token and rows of \
                     their own, in order (the one before ends at row {end})",
                    s.len, s.row
                )));
            }
            end = s.row + s.len;
        }
        self.check_saves(seqs, &slots)?;
        self.put(ctx, seqs);
        Ok(SeqBatch {
            count: seqs.len() as u32,
            len,
            rows: end,
            chunks: seqs.iter().map(SeqRows::chunks).sum(),
            tokens: seqs.iter().map(|s| s.len).sum(),
        })
    }

    /// [`SequenceTable::write`] for one prompt step of `len` tokens on `slot` from position
    /// `pos` (its chunks on the absolute grid), with the state after `save.rows` of them also
    /// written to `save.slot` (a slot no sequence uses: the host's spare; a position on the
    /// chunk grid). The chunked prefill's plan leaves room for the lead rows in every step.
    pub fn write_prefill(
        &self,
        ctx: &GpuContext,
        len: u32,
        slot: u32,
        pos: u32,
        save: Option<MidSave>,
    ) -> Result<SeqBatch, GpuError> {
        self.check(len, &[slot])?;
        let seq = SeqRows {
            slot,
            row: 0,
            len,
            pos,
            save,
        };
        self.check_saves(&[seq], &[slot])?;
        self.put(ctx, &[seq]);
        Ok(SeqBatch {
            chunks: seq.chunks(),
            ..SeqBatch::uniform(1, len)
        })
    }

    /// Checks the batch's mid-step snapshots: each inside its sequence's rows, on the chunk
    /// grid of positions, into a slot of its own that no sequence of the batch uses (two
    /// writers of one slot would race).
    fn check_saves(&self, seqs: &[SeqRows], slots: &[u32]) -> Result<(), GpuError> {
        let saves: Vec<(&SeqRows, MidSave)> =
            seqs.iter().filter_map(|s| Some((s, s.save?))).collect();
        for (i, &(seq, save)) in saves.iter().enumerate() {
            let inside = save.rows > 0 && save.rows < seq.len;
            let on_grid = (seq.lead() + save.rows).is_multiple_of(CHUNK);
            let shared = slots.contains(&save.slot)
                || saves[..i].iter().any(|(_, other)| other.slot == save.slot);
            if !inside || !on_grid || save.slot >= self.n_slots || shared {
                return Err(table_error(format!(
                    "a snapshot after {} of the {} rows of the sequence on slot {} from position \
                     {} into slot {}: it must fall inside the sequence at a position on the \
                     {CHUNK}-row chunk grid, into a slot of the {} that no sequence of the batch \
                     and no other snapshot uses",
                    save.rows, seq.len, seq.slot, seq.pos, save.slot, self.n_slots
                )));
            }
        }
        Ok(())
    }

    /// Writes the header (count, padding) and an entry per sequence (slot, start, len, its
    /// first chunk block: the chunks before it, its lead, its snapshot's rows (0: none) and
    /// slot, padding).
    fn put(&self, ctx: &GpuContext, seqs: &[SeqRows]) {
        let mut words = vec![0u32; HEADER_WORDS];
        words[0] = seqs.len() as u32;
        let mut chunk0 = 0;
        for s in seqs {
            let save = s.save.unwrap_or(MidSave { rows: 0, slot: 0 });
            let entry: [u32; ENTRY_WORDS] = [
                s.slot,
                s.row,
                s.len,
                chunk0,
                s.lead(),
                save.rows,
                save.slot,
                0,
            ];
            words.extend_from_slice(&entry);
            chunk0 += s.chunks();
        }
        ctx.queue
            .write_buffer(&self.buffer, 0, bytemuck::cast_slice(&words));
    }
}

/// Words of `struct Sequences` before its entries, and of each entry.
const HEADER_WORDS: usize = 4;
const ENTRY_WORDS: usize = 8;

fn table_error(message: String) -> GpuError {
    GpuError::Shape {
        kernel: "sequence table",
        message,
    }
}
