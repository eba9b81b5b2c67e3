//! The buffers a forward step reads its input from and writes its output to, shared by every
//! model, and the readback of tokens and logits.
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
//!   consecutive positions of a prefill chunk, or one slot per sequence of a batched decode.
//! - `pages`: the page table, one row per sequence slot, mapping a sequence's logical pages to
//!   physical pages of the shared KV pool (shared prefix pages from the prefix cache, then its
//!   own).
//! - `seqs`: the sequences of a step for models with recurrent state (`SequenceTable`): one
//!   prompt of `n` tokens, or one token of each sequence of a batched decode, each reading and
//!   writing the state slot of its page-table row. Written every step, like `tokens`. One more
//!   slot than rows: the spare ([`StepIo::spare_slot`]) a prefill step writes the state of a
//!   branch point inside it to, for the prefix cache to copy out.

use crate::gpu::kernels::delta_state::SequenceTable;
use crate::gpu::kernels::kv_cache::PageTable;
use crate::gpu::kernels::support::TokenSlot;
use crate::gpu::{GpuContext, GpuError, StepBuffer, storage_buffer};

/// Slots of the token-history ring (a power of two; any run-ahead shorter than it is safe).
pub const HISTORY_LEN: u32 = 1024;

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
    /// The state slot no sequence uses: where a mid-step snapshot is written.
    pub fn spare_slot(&self) -> u32 {
        self.seqs.n_slots() - 1
    }

    /// Buffers for steps of up to `max_tokens` tokens, `logit_rows` rows of logits, and a page
    /// table of `page_rows` rows of `pages_per_row` pages (a row and a state slot per sequence).
    pub fn new(
        ctx: &GpuContext,
        max_tokens: u32,
        logit_rows: u32,
        n_vocab: u32,
        (page_rows, pages_per_row): (u32, u32),
    ) -> Result<StepIo, GpuError> {
        let usage = wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
        let with = |label: &str, bytes: u64| -> Result<wgpu::Buffer, GpuError> {
            let b = storage_buffer(ctx, label, bytes)?;
            debug_assert!(b.usage().contains(usage));
            Ok(b)
        };
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
            pages: PageTable::from_rows(ctx, pages_per_row, &vec![Vec::new(); page_rows as usize])?,
            // One slot per page-table row, and the spare a mid-step snapshot goes to.
            seqs: SequenceTable::new(ctx, page_rows, page_rows + 1)?,
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

/// A reusable mappable buffer for reading small results back without allocating per step.
pub struct Staging {
    buffer: wgpu::Buffer,
    pending: Option<Pending>,
}

struct Pending {
    index: wgpu::SubmissionIndex,
    mapped: std::sync::mpsc::Receiver<Result<(), wgpu::BufferAsyncError>>,
}

impl Staging {
    pub fn new(ctx: &GpuContext, label: &str, bytes: u64) -> Staging {
        let buffer = ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes.max(4),
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        Staging {
            buffer,
            pending: None,
        }
    }

    /// Records a copy of `src[offset..offset + bytes]` into this buffer.
    pub fn record_copy(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        src: &wgpu::Buffer,
        offset: u64,
        bytes: u64,
    ) {
        encoder.copy_buffer_to_buffer(src, offset, &self.buffer, 0, bytes);
    }

    /// Marks the copy as submitted in `index` and asks for the mapping.
    pub fn submitted(&mut self, index: wgpu::SubmissionIndex, bytes: u64) {
        let (sender, mapped) = std::sync::mpsc::channel();
        self.buffer
            .slice(..bytes)
            .map_async(wgpu::MapMode::Read, move |result| {
                let _ = sender.send(result);
            });
        self.pending = Some(Pending { index, mapped });
    }

    /// Waits for the submitted copy and returns its bytes.
    pub fn wait(&mut self, ctx: &GpuContext, bytes: u64) -> Result<Vec<u8>, GpuError> {
        let Pending { index, mapped } = self
            .pending
            .take()
            .ok_or_else(|| GpuError::Readback("no copy was submitted".into()))?;
        ctx.device.poll(wgpu::PollType::Wait {
            submission_index: Some(index),
            timeout: None,
        })?;
        // The map callback runs inside poll; once the submission is done it has been called.
        mapped
            .recv()
            .map_err(|e| e.to_string())
            .and_then(|r| r.map_err(|e| e.to_string()))
            .map_err(GpuError::Readback)?;
        let slice = self.buffer.slice(..bytes);
        let out = slice
            .get_mapped_range()
            .map_err(|e| GpuError::Readback(e.to_string()))?
            .to_vec();
        self.buffer.unmap();
        Ok(out)
    }
}
