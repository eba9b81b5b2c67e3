//! What every kernel of a forward step shares with the runtime that drives it, in one place:
//! the per-step uniform (`wgsl/step.wgsl`: token count, position and cache length), each token's
//! position and page-table row ([`TokenSlot`]), the page table ([`PageTable`]), the sequences of
//! recurrent models ([`SequenceTable`]), the batch limit ([`MAX_BATCH`]), and the buffers a
//! step reads its input from and writes its output to ([`StepIo`]).
//!
//! Bind groups hold these buffers; the host rewrites them before each step's submit (queue
//! writes are ordered with submits, so steps may be in flight while the next one is written).
//!
//! # The step's buffers ([`StepIo`], shared by every model)
//!
//! - `ids`: the step's token ids. Prefill uploads the prompt chunk there; the argmax of every step
//!   writes the greedy next token into `ids[0]`, where the next decode step's embedding lookup
//!   reads it, so greedy decode never waits for the CPU.
//! - `history`: a ring the argmax also writes (`history[step.out_index]`); the host copies a run
//!   of it back in one readback, however many steps ran ahead.
//! - `logits`: the last row's logits (or every row's, for the untimed quality path).
//! - `step`: the per-step uniform (`gpu::Step`).
//! - `tail_step`: the same positions with `n_tokens` = the rows the output head runs on (1, or
//!   every row for the quality path and batched decode). Kernels after the last layer (final
//!   norm, LM head, argmax) are bound to it, so a prefill step computes logits for its last token
//!   only.
//! - `tokens`: each token's position and page-table row (`TokenSlot`), written every step: the
//!   consecutive positions of a prefill chunk, one slot per sequence of a batched decode, or
//!   several prompts' chunks one after another with padding tokens between them.
//! - `pages`: the page table, one row per sequence slot, mapping a sequence's logical pages to
//!   physical pages of the shared KV pool (shared prefix pages from the prefix cache, then its
//!   own), and a last row ([`StepIo::pad_row`]) whose every page is the pool's padding page: a
//!   step of several prompts puts padding tokens between them (see [`StepIo::pad_row`]) and
//!   their K and V land there.
//! - `seqs`: the sequences of a step for models with recurrent state (`SequenceTable`): one
//!   prompt of `n` tokens, one token of each sequence of a batched decode, or several prompts'
//!   rows, each reading and writing the state slot of its page-table row. Written every step,
//!   like `tokens`. After the rows' slots, a spare per prompt a step can hold
//!   ([`state_slots`], [`StepIo::spare_slot`]): a prefill step writes the state of a branch
//!   point inside each of its prompts to that prompt's spare, for the prefix cache to copy out,
//!   so no prompt of the step is cut at its snapshot for want of one.

mod pages;
mod sequences;

pub use pages::PageTable;
pub use sequences::{MidSave, SeqBatch, SeqRows, SequenceTable};

use super::buffers::storage_buffer;
use super::context::GpuContext;
use super::error::GpuError;

/// Most tokens a decode step carries (the rows of a batched decode, the input vectors one
/// mat-vec dispatch multiplies); prompt steps run their products as mat-muls at any size.
pub const MAX_BATCH: u32 = 8;

/// State slots a model with recurrent state keeps for `max_seqs` sequences: one per sequence
/// (its page-table row), and a spare per prompt one step can hold (at most `MAX_BATCH`, one per
/// sequence), where that prompt's mid-step snapshot goes ([`StepIo::spare_slot`]).
pub fn state_slots(max_seqs: u32) -> u32 {
    max_seqs.saturating_add(max_seqs.min(MAX_BATCH))
}

/// The role of a step's tokens. Every kernel choice of a step follows it, never the number of
/// tokens, so a token's result does not depend on how its prompt was cut into steps or on what
/// else its step holds (a server's answers are the same under load).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepKind {
    /// Prompt tokens, however few, of one sequence or of several (each sequence's consecutive
    /// tokens on rows of their own): the mat-mul, the prefill attention, the chunked delta
    /// rule.
    Prompt,
    /// One generated token of each of the step's sequences (one or a batch): the mat-vec, the
    /// decode attention, the recurrent delta rule.
    Decode,
}

/// `struct TokenSlot` of wgsl/positions.wgsl: where token t of a step sits, written by the host
/// before the step when the kernels were bound with
/// [`Positions::Table`](crate::gpu::kernels::support::Positions::Table).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct TokenSlot {
    /// Absolute position of the token in its sequence.
    pub pos: u32,
    /// The sequence's row of the page table.
    pub page_row: u32,
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

/// Slots of the token-history ring (a power of two; any run-ahead shorter than it is safe).
pub const HISTORY_LEN: u32 = 1024;

/// The buffers a forward step reads its input from and writes its output to (see the module
/// doc).
pub struct StepIo {
    pub step: StepBuffer,
    pub tail_step: StepBuffer,
    pub ids: wgpu::Buffer,
    pub history: wgpu::Buffer,
    pub logits: wgpu::Buffer,
    pub tokens: wgpu::Buffer,
    pub pages: PageTable,
    pub seqs: SequenceTable,
    /// Most tokens one step processes (the prefill chunk).
    pub max_tokens: u32,
    /// Rows `logits` holds (`max_tokens` when every row's logits can be kept, else 1).
    pub logit_rows: u32,
    pub n_vocab: u32,
}

impl StepIo {
    /// The state slot no sequence uses where the mid-step snapshot of a step's `i`-th prompt is
    /// written (past the slots for `i` ≥ the spares: the table refuses it).
    pub fn spare_slot(&self, i: usize) -> u32 {
        let i = u32::try_from(i).unwrap_or(u32::MAX);
        self.seqs.max_seqs().saturating_add(i)
    }

    /// The page-table row of padding tokens. A step of several sequences' prompt tokens starts
    /// each sequence's rows on a multiple of the prefill attention's row tile (in tokens), so
    /// that no tile holds two sequences: a tile reads the keys of its first token's page-table
    /// row up to its last token's position, and each row then sums exactly what it sums when
    /// its prompt runs alone. The rows between sequences are padding tokens on this row, at the
    /// position of the last token before them (the tile's key limit stays that token's); their
    /// K and V go to the padding page, and nothing reads their outputs.
    pub fn pad_row(&self) -> u32 {
        self.pages.rows - 1
    }

    /// Buffers for steps of up to `max_tokens` tokens, `logit_rows` rows of logits, and a page
    /// table of `page_rows` rows of `pages_per_row` pages (a row and a state slot per sequence)
    /// and the padding row, every page of which is `pad_page`.
    pub fn new(
        ctx: &GpuContext,
        max_tokens: u32,
        logit_rows: u32,
        n_vocab: u32,
        (page_rows, pages_per_row, pad_page): (u32, u32, u32),
    ) -> Result<StepIo, GpuError> {
        let usage = wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
        let with = |label: &str, bytes: u64| -> Result<wgpu::Buffer, GpuError> {
            let b = storage_buffer(ctx, label, bytes)?;
            debug_assert!(b.usage().contains(usage));
            Ok(b)
        };
        let mut page_rows_and_pad = vec![Vec::new(); page_rows as usize];
        page_rows_and_pad.push(vec![pad_page; pages_per_row as usize]);
        Ok(StepIo {
            step: StepBuffer::new(ctx),
            tail_step: StepBuffer::new(ctx),
            ids: with("ids", u64::from(max_tokens) * 4)?,
            history: with("history", u64::from(HISTORY_LEN) * 4)?,
            logits: with("logits", u64::from(logit_rows) * u64::from(n_vocab) * 4)?,
            tokens: with(
                "token slots",
                u64::from(max_tokens) * std::mem::size_of::<TokenSlot>() as u64,
            )?,
            pages: PageTable::from_rows(ctx, pages_per_row, &page_rows_and_pad)?,
            // One slot per page-table row, and the spares mid-step snapshots go to.
            seqs: SequenceTable::new(ctx, page_rows, state_slots(page_rows))?,
            max_tokens,
            logit_rows,
            n_vocab,
        })
    }

    /// Uploads prompt ids for the next step (queued before its submit).
    pub fn set_ids(&self, ctx: &GpuContext, ids: &[u32]) {
        ctx.queue
            .write_buffer(&self.ids, 0, bytemuck::cast_slice(ids));
    }

    /// Queues each token's position and page-table row for the next step.
    pub fn set_tokens(&self, ctx: &GpuContext, slots: &[TokenSlot]) {
        ctx.queue
            .write_buffer(&self.tokens, 0, bytemuck::cast_slice(slots));
    }
}
