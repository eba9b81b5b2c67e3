//! The activations every layer of a model shares, declared once per architecture as a table
//! ([`ScratchTable`]) that both the memory plan (`DevicePlan`) and the allocation ([`Scratch`])
//! read, so what is planned is what is allocated.

use crate::gpu::{GpuContext, GpuError, fill_f32, storage_buffer};

/// An activation buffer a block reads or writes. Blocks name the buffers they use; an
/// architecture's table says how wide each is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    /// The residual stream.
    X,
    /// The residual stream normed (a prefill's mat-mul input).
    H,
    /// An attention layer's q projection (and whatever is stacked after it: k, v).
    Qkv,
    /// Its k projection (and v, when stacked after it).
    K,
    V,
    /// q normed per head and rotated, as attention reads it.
    QRot,
    /// Attention's output.
    O,
    /// A GDN layer's qkv projection (and z, β, α stacked after it).
    GdnM,
    /// Its conv output (q̂, k̂ normalised in place).
    GdnMixed,
    GdnZ,
    GdnBeta,
    GdnAlpha,
    /// β and the decay g.
    GdnGates,
    /// The delta rule's output.
    GdnDeltaO,
    /// The gated norm's output.
    GdnY,
    /// The MLP's gate then up values (a prefill's mat-mul output).
    GateUp,
    /// Their SwiGLU.
    FfnAct,
    /// The rows of the residual stream the output head reads, and them normed.
    TailX,
    TailH,
}

/// How many rows of a [`ScratchRow`] there are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rows {
    /// One per token of a step (the prefill chunk).
    Token,
    /// One per row of logits a step keeps.
    Logit,
}

/// One activation: `width` f32 per row, `rows` rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScratchRow {
    pub act: Act,
    pub label: &'static str,
    pub width: usize,
    pub rows: Rows,
}

/// Every activation an architecture allocates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScratchTable {
    pub rows: Vec<ScratchRow>,
}

impl ScratchTable {
    /// The per-token activations `per_token` (act, label, width), then the output head's rows
    /// of the residual stream of width `n_embd`, per logit row.
    pub fn new(per_token: &[(Act, &'static str, usize)], n_embd: usize) -> ScratchTable {
        let token = per_token.iter().map(|&(act, label, width)| ScratchRow {
            act,
            label,
            width,
            rows: Rows::Token,
        });
        let head =
            [(Act::TailX, "tail x"), (Act::TailH, "tail h")].map(|(act, label)| ScratchRow {
                act,
                label,
                width: n_embd,
                rows: Rows::Logit,
            });
        ScratchTable {
            rows: token.chain(head).collect(),
        }
    }

    /// f32 values per token.
    pub fn floats_per_token(&self) -> usize {
        self.width_of(Rows::Token)
    }

    /// f32 values per token of the widest per-token activation.
    pub fn widest_per_token(&self) -> usize {
        self.rows
            .iter()
            .filter(|r| r.rows == Rows::Token)
            .map(|r| r.width)
            .max()
            .unwrap_or(0)
    }

    fn width_of(&self, rows: Rows) -> usize {
        self.rows
            .iter()
            .filter(|r| r.rows == rows)
            .map(|r| r.width)
            .sum()
    }

    /// Bytes of the table for steps of up to `max_tokens` tokens keeping `logit_rows` rows of
    /// logits.
    pub fn bytes(&self, max_tokens: u32, logit_rows: u32) -> u64 {
        self.rows
            .iter()
            .map(|r| row_bytes(r, max_tokens, logit_rows))
            .sum()
    }
}

fn row_bytes(r: &ScratchRow, max_tokens: u32, logit_rows: u32) -> u64 {
    let rows = match r.rows {
        Rows::Token => max_tokens,
        Rows::Logit => logit_rows,
    };
    4 * u64::from(rows) * r.width as u64
}

/// The buffers of a [`ScratchTable`].
pub struct Scratch {
    buffers: Vec<(Act, wgpu::Buffer)>,
}

impl Scratch {
    /// Allocates every activation of `table` (NaN-filled when `poison`).
    pub fn new(
        ctx: &GpuContext,
        table: &ScratchTable,
        max_tokens: u32,
        logit_rows: u32,
        poison: bool,
    ) -> Result<Scratch, GpuError> {
        let buffers = table
            .rows
            .iter()
            .map(|r| {
                let buffer = storage_buffer(ctx, r.label, row_bytes(r, max_tokens, logit_rows))?;
                if poison {
                    fill_f32(ctx, &buffer, f32::NAN)?;
                }
                Ok((r.act, buffer))
            })
            .collect::<Result<_, GpuError>>()?;
        Ok(Scratch { buffers })
    }

    /// The buffer of `act`. A block asking for an activation its architecture's table does not
    /// declare is a bug in that table, caught the first time the model loads.
    pub fn get(&self, act: Act) -> &wgpu::Buffer {
        match self.buffers.iter().find(|(a, _)| *a == act) {
            Some((_, buffer)) => buffer,
            None => panic!("the architecture's scratch table declares no {act:?}"),
        }
    }

    /// Bytes allocated.
    pub fn bytes(&self) -> u64 {
        self.buffers.iter().map(|(_, b)| b.size()).sum()
    }
}
