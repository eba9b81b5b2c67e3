//! Several sequences' prompts in one forward step: the weights are read once for all of them.
//!
//! [`Engine::prefill_together`] takes prompt tokens from sequences [`Engine::begin`] opened,
//! oldest first, as far as a budget and one step hold, and runs them together. The
//! step's rows are the sequences' tokens one after another, each sequence's first row on a
//! multiple of [`DeviceModel::prompt_alignment`](crate::model::DeviceModel::prompt_alignment)
//! with padding tokens between (`StepIo::pad_row`), so that every kernel computes each row as
//! the sequence's own step does: the mat-mul's rows are independent of each other (its K slices
//! are fixed by the weight's shape), the prefill attention's tiles each hold one sequence, and
//! the head runs over each sequence's last row. A prompt's logits are therefore the same bits
//! alone, cut into parts, or prefilled together with others.
//!
//! On a hybrid model the causal conv and the chunked delta rule run each sequence over its own
//! rows and state slot (`SequenceTable::write_ragged`); each sequence's rows start on a multiple
//! of the delta rule's 64-token chunk as well, its chunks are those of the absolute grid of
//! positions (lead rows where it resumes off that grid: a finished conversation's cached end),
//! and a portion cut short of its prompt's end ends on that grid, as in its own steps; the
//! snapshots of its state the prefix cache wants (all on the grid) are taken as in its own
//! steps: the first due inside a portion as the step passes it, into a spare slot of the
//! portion's own (`StepIo::spare_slot`: every portion of a step has one, so none is cut at its
//! snapshot for want of it), a second where the portion ends.

use super::session::{SeqId, Started, grid_cut};
use super::{Engine, RuntimeError, timed};
use crate::gpu::Step;
use crate::gpu::kernels::gated_delta_chunk::CHUNK;
use crate::gpu::profile::StepMarks;
use crate::gpu::step::{HISTORY_LEN, MAX_BATCH, MidSave, SeqRows, StepKind, TokenSlot};
use crate::runtime::trace::{PortionRecord, StepRole};
use std::time::{Duration, Instant};

/// One sequence's share of a step of several prompts.
#[derive(Clone, Copy, Debug)]
struct Portion {
    seq: SeqId,
    /// The step row its first token sits on.
    row: usize,
    /// Its first token's position, and how many tokens it runs.
    pos: usize,
    len: usize,
    /// A position inside it where the step also snapshots its recurrent state (into the spare
    /// slot of the portion's place in the step).
    mid: Option<usize>,
}

impl Portion {
    fn end_row(&self) -> usize {
        self.row + self.len
    }
}

/// What one sequence's prompt got from [`Engine::prefill_together`].
#[derive(Debug)]
pub struct PromptPart {
    pub seq: SeqId,
    /// Prompt tokens it ran.
    pub tokens: usize,
    /// Its first token, when its prompt is done.
    pub started: Option<Started>,
}

impl Engine {
    /// One step of prompt tokens of several sequences: from the front of `seqs`
    /// ([`Engine::begin`] opened them; oldest first; those already prefilled are passed over),
    /// as much of each prompt as `budget` (at least one token) and one prefill chunk hold: a
    /// prompt that fits passes the rest of the step to the next sequence's, one that does not
    /// is cut there, in whole delta-rule chunks on a hybrid model. Where only one sequence
    /// takes part this is [`Engine::prefill_part`] (which may run several steps of it). Returns
    /// what each sequence that took part ran, in order, and its first token (from logits
    /// computed here) when its prompt is done; nothing when every prompt is done. A sequence's
    /// logits are the same bits as from [`Engine::start`] alone. On an error every sequence of
    /// the step is closed.
    pub fn prefill_together(
        &mut self,
        seqs: &[SeqId],
        budget: usize,
    ) -> Result<Vec<PromptPart>, RuntimeError> {
        let portions = self.pack(seqs, budget.max(1))?;
        match portions.as_slice() {
            [] => Ok(Vec::new()),
            [one] => {
                let started = self.prefill_part(one.seq, budget)?;
                Ok(vec![PromptPart {
                    seq: one.seq,
                    tokens: self.seq(one.seq)?.pos - one.pos,
                    started,
                }])
            }
            _ => {
                let started = self.run_prompts(&portions);
                if started.is_err() {
                    for p in &portions {
                        self.close(p.seq, false)?;
                    }
                }
                let parts = portions.iter().zip(started?);
                Ok(parts
                    .map(|(p, started)| PromptPart {
                        seq: p.seq,
                        tokens: p.len,
                        started,
                    })
                    .collect())
            }
        }
    }

    /// The next step's portions: from the front of `seqs`, each sequence's prompt tokens left
    /// as far as `room` and the prefill chunk (after alignment) hold, stopping after one cut
    /// short of its prompt's end for want of space. On a hybrid model a portion cut for space
    /// ends on the absolute chunk grid (none: it is left out); where snapshots of its recurrent
    /// state are due inside it, the step takes the first as it passes (each portion into a
    /// spare slot of its own, as a sequence's own step does) and the portion ends at the next
    /// one due.
    fn pack(&self, seqs: &[SeqId], room: usize) -> Result<Vec<Portion>, RuntimeError> {
        let align = self.model.prompt_alignment().max(1) as usize;
        let max_rows = self.io.max_tokens as usize;
        let hybrid = self.model.state_bytes() > 0;
        let grain = self.prompt_grain();
        let mut portions: Vec<Portion> = Vec::new();
        let mut taken = 0;
        for &seq in seqs {
            // At most MAX_BATCH prompts a step: the head's mat-vec takes that many rows.
            if portions.len() == MAX_BATCH as usize {
                break;
            }
            let row = portions
                .last()
                .map_or(0, |p| p.end_row().next_multiple_of(align));
            let space = room.saturating_sub(taken).min(max_rows.saturating_sub(row));
            let s = self.seq(seq)?;
            let left = s.prompt_len.saturating_sub(s.pos);
            if s.tokens.len() > s.prompt_len || portions.iter().any(|p| p.seq == seq) {
                // Prefilled (by an earlier step of this call, or before), or named twice.
                continue;
            }
            let fits = left <= space;
            let mut len = match (fits, hybrid) {
                (true, _) => left,
                (false, false) => space,
                // The first portion reaches the next grid point at least, as `prefill_part` does.
                (false, true) if portions.is_empty() => grid_cut(s.pos, space, grain)
                    .max(grain - s.pos % grain)
                    .min(left),
                (false, true) => grid_cut(s.pos, space, grain),
            };
            // Snapshots due inside the portion: the step takes the first into the portion's
            // spare (every due one is on the chunk grid, where the portion's chunks end), and
            // the next due ends the portion, whose end state is then that snapshot (one spare
            // a portion, as a sequence's own step has). One off the grid ends the portion too.
            let mut due = s.snapshot_at.iter().copied().filter(|&b| b > s.pos);
            let mut mid = None;
            if let Some(b) = due.next().filter(|&b| b < s.pos + len) {
                match b.is_multiple_of(CHUNK as usize) {
                    true => {
                        mid = Some(b);
                        if let Some(next) = due.next() {
                            len = len.min(next - s.pos);
                        }
                    }
                    false => len = b - s.pos,
                }
            }
            if len == 0 {
                break;
            }
            portions.push(Portion {
                seq,
                row,
                pos: s.pos,
                len,
                mid,
            });
            taken += len;
            if !fits {
                break;
            }
        }
        Ok(portions)
    }

    /// How the step trace shows `p` (before the step moves its sequence on): its snapshots are
    /// the mid-step one and its end where a snapshot is due there, as `run_prompts` takes them.
    fn portion_record(&self, p: &Portion) -> PortionRecord {
        let end = p.pos + p.len;
        let stop = self.seq(p.seq).is_ok_and(|s| s.snapshot_at.contains(&end));
        PortionRecord {
            seq: p.seq.row(),
            request: None,
            pos: p.pos,
            len: p.len,
            snapshots: p.mid.into_iter().chain(stop.then_some(end)).collect(),
        }
    }

    /// Runs `portions` (two or more, of distinct sequences) as one prompt step; returns each
    /// one's first token where its prompt is done.
    fn run_prompts(&mut self, portions: &[Portion]) -> Result<Vec<Option<Started>>, RuntimeError> {
        self.settled()?;
        let started_at = Instant::now();
        let n = portions.last().map_or(0, Portion::end_row);
        let pad_row = self.io.pad_row();
        let mut ids = vec![0u32; n];
        let mut slots = vec![
            TokenSlot {
                pos: 0,
                page_row: pad_row
            };
            n
        ];
        let mut last_rows = Vec::with_capacity(portions.len());
        let mut wants_logits = false;
        for (i, p) in portions.iter().enumerate() {
            let s = self.seq(p.seq)?;
            wants_logits |= s.logits;
            ids[p.row..p.end_row()].copy_from_slice(&s.tokens[p.pos..p.pos + p.len]);
            for t in 0..p.len {
                slots[p.row + t] = TokenSlot {
                    pos: (p.pos + t) as u32,
                    page_row: p.seq.row(),
                };
            }
            // Padding up to the next sequence: at this one's last position (the key limit of
            // a tile it shares stays that token's), on the padding row.
            let pad_end = portions.get(i + 1).map_or(p.end_row(), |q| q.row);
            let last = p.end_row() - 1;
            for r in p.end_row()..pad_end {
                ids[r] = ids[last];
                slots[r] = TokenSlot {
                    pos: slots[last].pos,
                    page_row: pad_row,
                };
            }
            last_rows.push(last as u32);
        }
        let k = last_rows.len() as u32;
        self.io.set_ids(&self.ctx, &ids);
        self.io.set_tokens(&self.ctx, &slots);
        let table: Vec<SeqRows> = portions
            .iter()
            .enumerate()
            .map(|(i, p)| SeqRows {
                slot: p.seq.row(),
                row: p.row as u32,
                len: p.len as u32,
                pos: p.pos as u32,
                save: p.mid.map(|b| MidSave {
                    rows: (b - p.pos) as u32,
                    slot: self.io.spare_slot(i),
                }),
            })
            .collect();
        let batch = self.io.seqs.write_ragged(&self.ctx, &table)?;
        let kv_len = portions.iter().map(|p| p.pos + p.len).max().unwrap_or(0) as u32;
        let step = Step {
            n_tokens: n as u32,
            pos: 0,
            kv_len,
            out_index: self.steps % HISTORY_LEN,
        };
        self.io.step.set(&self.ctx, step);
        self.io.tail_step.set(
            &self.ctx,
            Step {
                n_tokens: k,
                ..step
            },
        );
        // The attention reads each sequence's keys: the bytes of all of them.
        let keys: usize = portions.iter().map(|p| p.pos + p.len).sum();
        let mut marks = StepMarks::counting(keys as u32, StepKind::Prompt);
        let encoding = Instant::now();
        let mut encoder = self.encoder("prompts step");
        self.model
            .encode_prompts(&mut encoder, batch, &last_rows, &mut marks)?;
        self.encode_time += encoding.elapsed();
        self.last_dispatches = marks.dispatches();
        self.steps += 1;
        let id_bytes = 4 * u64::from(k);
        self.batch_slots[0].record_copy(&mut encoder, &self.io.ids, 0, id_bytes);
        let index = self.submit_commands(encoder, if wants_logits { k } else { 0 });
        self.batch_slots[0].submitted(index, id_bytes);
        let submitted = Instant::now();
        let steps = submitted - started_at;
        let firsts: Vec<u32> =
            bytemuck::pod_collect_to_vec(&self.batch_slots[0].wait(&self.ctx, id_bytes)?);
        let logits = match wants_logits {
            true => self.read_logits(k)?,
            false => Vec::new(),
        };
        let known = Instant::now();
        self.log_step(StepRole::Prefill, started_at, true, |engine| {
            portions.iter().map(|p| engine.portion_record(p)).collect()
        });
        let vocab = self.io.n_vocab as usize;
        let mut out = Vec::with_capacity(portions.len());
        for (i, p) in portions.iter().enumerate() {
            let end = p.pos + p.len;
            let (done, stop) = {
                let s = self.seq_mut(p.seq)?;
                s.pos += p.len;
                s.state_pos += p.len;
                s.phases.steps += steps;
                (s.pos == s.prompt_len, s.snapshot_at.contains(&end))
            };
            let mid = p.mid.map(|b| (b, self.io.spare_slot(i)));
            let mut took = Duration::ZERO;
            timed(&mut took, || {
                self.take_step_snapshots(p.seq, mid, stop.then_some(end))
            })?;
            self.seq_mut(p.seq)?.phases.snapshots += took;
            if !done {
                out.push(None);
                continue;
            }
            let mut insert = Duration::ZERO;
            timed(&mut insert, || self.cache_prompt(p.seq))?;
            let s = self.seq_mut(p.seq)?;
            s.phases.insert += insert;
            s.tokens.push(firsts[i]);
            let phases = self.waited_phases(p.seq, submitted, known)?;
            let s = self.seq(p.seq)?;
            out.push(Some(Started {
                seq: p.seq,
                first: firsts[i],
                cached_tokens: s.cached_tokens,
                logits: s
                    .logits
                    .then(|| logits[i * vocab..(i + 1) * vocab].to_vec()),
                phases,
            }));
        }
        Ok(out)
    }
}
