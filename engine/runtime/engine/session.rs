//! Sequences in flight: each owns a page-table row whose pages are a cached prefix (shared,
//! locked in the prefix cache) followed by pages of its own — the first of them a copy of a
//! cached partly used page when the prompt reuses some of its tokens (copy-on-write); it
//! prefills only what the cache did not hold, and its computed pages (the last one partly
//! filled, as a tail) go to the cache when it ends.
//!
//! Two ways to drive them: [`Engine::generate`] runs one request start to end (GPU-resident
//! greedy loop with steps in flight), and [`Engine::start`] / [`Engine::step`] /
//! [`Engine::finish`] serve several at once, one batched decode step per call, sequences joining
//! and leaving between steps. [`Engine::start`] is [`Engine::begin`] (a row, nothing computed)
//! and [`Engine::prefill_part`] without a budget; a scheduler that calls `prefill_part` with a
//! budget between decode steps prefills a long prompt a part at a time, so the sequences already
//! decoding wait about one part between two tokens, not the whole prompt. A prompt's bits do not
//! depend on where it is cut (a hybrid model's steps stay on the delta rule's chunk grid). A
//! hybrid model's recurrent state has a slot per row: a sequence's slot is zeroed, or restored
//! from its cached prefix's snapshot, when it takes the row.

use super::{Engine, PrefillPhases, RuntimeError, StepProfile, timed};
use crate::cache::{NodeId, Snapshot};
use crate::gpu::Step;
use crate::gpu::kernels::gated_delta_chunk::CHUNK;
use crate::gpu::profile::StepMarks;
use crate::gpu::step::{HISTORY_LEN, MidSave, StepKind, TokenSlot};
use crate::runtime::trace::{PortionRecord, StepRole};
use std::time::Instant;

/// A sequence in flight: its page-table row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SeqId(u32);

impl SeqId {
    /// Its page-table row (and recurrent-state slot), reused by later sequences.
    pub fn row(self) -> u32 {
        self.0
    }
}

/// A started sequence and its first token.
#[derive(Clone, Debug)]
pub struct Started {
    pub seq: SeqId,
    /// The greedy first token, from logits this request computed.
    pub first: u32,
    /// Prompt tokens whose KV came from the prefix cache.
    pub cached_tokens: usize,
    /// The logits the first token came from, when asked for.
    pub logits: Option<Vec<f32>>,
    /// Where the host time until the first token went.
    pub phases: PrefillPhases,
}

pub(super) struct Sequence {
    /// The prompt, then every output token known on the host.
    pub(super) tokens: Vec<u32>,
    pub(super) prompt_len: usize,
    /// Prompt tokens reused from the prefix cache.
    pub(super) cached_tokens: usize,
    /// Positions whose K and V are written (or submitted): the next token goes here.
    pub(super) pos: usize,
    /// Tokens the recurrent state (hybrid models) has taken in; past `pos` when steps ran
    /// beyond a stop, and then no snapshot is taken at the end.
    pub(super) state_pos: usize,
    /// Positions it may write: the prompt and `n_out − 1` fed outputs (its pages cover them).
    capacity: usize,
    /// The row's pages; `owned[i]` when page i is the sequence's own, not the tree's.
    pages: Vec<u32>,
    owned: Vec<bool>,
    /// Prefix-cache nodes this sequence holds.
    locks: Vec<NodeId>,
    /// Where the prompt's prefill stops to snapshot recurrent state (hybrid models), ascending,
    /// each rounded down to [`Engine::state_grid`]: the branch point the tree knows, every
    /// `snapshot_every` tokens, and the prompt's end.
    pub(super) snapshot_at: Vec<usize>,
    /// Recurrent states its prefill took at `snapshot_at` so far (position, snapshot), for the
    /// prefix cache once the prompt is done or the sequence closes.
    pub(super) snapshots: Vec<(usize, wgpu::Buffer)>,
    /// Whether its prefill's last step reads its logits back ([`Engine::begin`]).
    pub(super) logits: bool,
    /// Whether its pages may be shared through the prefix cache.
    cached: bool,
    /// Host time of its request's phases so far (`wait` is set by whoever waits).
    pub(super) phases: PrefillPhases,
}

/// A batched decode step submitted and not yet read back ([`Engine::submit_decode`]).
pub(super) struct StepInFlight {
    seqs: Vec<SeqId>,
    /// Which of the engine's batch readback slots its tokens are copied to.
    slot: usize,
    started: Instant,
    /// Each sequence's share, for the step trace.
    portions: Vec<PortionRecord>,
}

/// A sequence's position and recurrent state at one moment ([`Engine::checkpoint`]).
pub(super) struct Checkpoint {
    pos: usize,
    state_pos: usize,
    state: Option<wgpu::Buffer>,
}

impl Engine {
    /// Where a hybrid model's recurrent state may be snapshot: page boundaries that are also
    /// boundaries of the chunked delta rule's chunks ([`CHUNK`] tokens of absolute positions).
    /// The delta rule computes each chunk from the state at its start, so a state taken or a
    /// step ended inside a chunk is one the whole prompt never computes, and what follows would
    /// round differently; on the grid, a prompt resumed from a snapshot or cut into steps gives
    /// the same bits as the whole prompt at once. 1 for attention-only models.
    pub(super) fn state_grid(&self) -> usize {
        match self.model.state_bytes() > 0 {
            true => lcm(self.cache.config().page_size, CHUNK as usize),
            false => 1,
        }
    }

    /// The most prompt tokens one prefill step takes, given room for `most`: for a hybrid
    /// model rounded down to whole delta-rule chunks (where the room holds one) so that every
    /// step of a prompt starts and ends on the chunk grid (see [`Engine::state_grid`]).
    pub(super) fn prompt_step(&self, most: u32) -> usize {
        let (most, chunk) = (most as usize, CHUNK as usize);
        match self.model.state_bytes() > 0 && most >= chunk {
            true => most / chunk * chunk,
            false => most,
        }
    }

    /// Where a prefill step from `pos` of at most `most` tokens ends short of its prompt's end:
    /// for a hybrid model on the absolute chunk grid where it reaches one, so that a prompt
    /// resumed off the grid (a finished conversation's cached end) is cut where every other cut
    /// of it is, whatever the budget (see [`Engine::state_grid`]).
    fn step_end(&self, pos: usize, most: usize) -> usize {
        match grid_cut(pos, most, CHUNK as usize) {
            cut if cut > 0 && self.model.state_bytes() > 0 => pos + cut,
            _ => pos + most,
        }
    }

    /// The fewest tokens a prefill step takes short of the prompt's end: one delta-rule chunk
    /// for a hybrid model (fewer only where a whole prefill chunk is smaller), so that a part's
    /// budget never cuts a step off the chunk grid; one token otherwise.
    pub fn prompt_grain(&self) -> usize {
        match self.model.state_bytes() > 0 {
            true => (CHUNK as usize).min(self.io.max_tokens as usize),
            false => 1,
        }
    }

    /// The most tokens the next prefill step takes with `room` tokens of its part's budget
    /// left and `left` tokens of its prompt: a whole prefill chunk cut to the room, never below
    /// [`Engine::prompt_grain`]; the prompt's rest where the room and one chunk hold it (its
    /// end need not be on the delta rule's grid: it is not a cut).
    fn part_step(&self, room: usize, left: usize) -> usize {
        let most = room
            .max(self.prompt_grain())
            .min(self.io.max_tokens as usize);
        match left <= most {
            true => left,
            false => self.prompt_step(most as u32),
        }
    }

    pub(super) fn seq(&self, id: SeqId) -> Result<&Sequence, RuntimeError> {
        self.seqs
            .get(id.0 as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| unknown(id))
    }

    pub(super) fn seq_mut(&mut self, id: SeqId) -> Result<&mut Sequence, RuntimeError> {
        self.seqs
            .get_mut(id.0 as usize)
            .and_then(Option::as_mut)
            .ok_or_else(|| unknown(id))
    }

    /// Takes a free row for `prompt` (already checked), reuses the longest cached prefix when
    /// `use_cache`, gives the row pages for the rest and for `n_out` more tokens, and sets the
    /// recurrent state (restored from the prefix's snapshot, or zero). Nothing is computed yet.
    pub(super) fn open(
        &mut self,
        prompt: &[u32],
        n_out: usize,
        use_cache: bool,
    ) -> Result<SeqId, RuntimeError> {
        self.settled()?;
        let started = Instant::now();
        let row = self.seqs.iter().position(Option::is_none).ok_or_else(|| {
            RuntimeError::Request(format!(
                "{} sequences are in flight, the most this engine was loaded for",
                self.seqs.len()
            ))
        })?;
        let hybrid = self.model.state_bytes() > 0;
        let found = match use_cache {
            true => self.cache.lookup(prompt, prompt.len() - 1, hybrid),
            false => self.cache.cold(),
        };
        // The row's state slot: restored from the prefix's snapshot, or zeroed. Recorded before
        // the allocation below, which may evict the page a hybrid match resumes inside, and the
        // tail state with it (the recorded copy keeps the snapshot's buffer alive until it has
        // run).
        let mut encoder = self.encoder("sequence state");
        match self.cache.resume_state(&found, prompt) {
            Some(state) if hybrid && found.tokens > 0 => {
                self.model
                    .encode_restore_state(&mut encoder, state, row as u32)?
            }
            _ => self.model.encode_reset(&mut encoder, row as u32)?,
        }
        let page = self.cache.config().page_size;
        let capacity = prompt.len() + n_out.saturating_sub(1);
        let need = capacity.div_ceil(page) - found.pages.len();
        let own = match self.cache.alloc_pages(need) {
            Ok(own) => own,
            Err(e) => {
                self.cache.release(found.node)?;
                return Err(e.into());
            }
        };
        let pages = [found.pages.as_slice(), &own].concat();
        self.io.pages.write_row(&self.ctx, row as u32, &pages)?;
        if let Some(partial) = found.partial
            && partial.page != own[0]
        {
            // Copy-on-write: the cached page's first tokens become the start of the sequence's
            // own next page, which its prefill then fills on. (The same page when this
            // allocation evicted it: its contents are already there.)
            self.model
                .encode_copy_page(&mut encoder, partial.page, own[0])?;
        }
        self.ctx.queue.submit([encoder.finish()]);
        self.reclaim_snapshots(Vec::new())?;
        let mut snapshot_at = Vec::new();
        if hybrid && use_cache && self.cache.enabled() {
            let grid = self.state_grid();
            let last_boundary = prompt.len() / grid * grid;
            let every = self.options.snapshot_every / grid * grid;
            let checkpoints = (every > 0)
                .then(|| (every..last_boundary).step_by(every))
                .into_iter()
                .flatten();
            snapshot_at = [found.matched / grid * grid, last_boundary]
                .into_iter()
                .chain(checkpoints)
                .filter(|&b| b > found.tokens)
                .collect();
            snapshot_at.sort_unstable();
            snapshot_at.dedup();
        }
        self.seqs[row] = Some(Sequence {
            tokens: prompt.to_vec(),
            prompt_len: prompt.len(),
            cached_tokens: found.tokens,
            pos: found.tokens,
            state_pos: found.tokens,
            capacity,
            owned: (0..pages.len()).map(|i| i >= found.pages.len()).collect(),
            pages,
            locks: vec![found.node],
            snapshot_at,
            snapshots: Vec::new(),
            logits: false,
            cached: use_cache,
            phases: PrefillPhases {
                open: started.elapsed(),
                ..PrefillPhases::default()
            },
        });
        Ok(SeqId(row as u32))
    }

    /// Prefills the prompt from the sequence's position, a step at a time, until about `budget`
    /// tokens ran (at least one step; `usize::MAX`: the whole prompt) or the prompt is done, and
    /// returns whether it is. Steps are whole prefill chunks cut to what the budget has left
    /// ([`Engine::part_step`]); the last one's argmax goes to readback slot 0, with its logits
    /// when `logits`. Where a snapshot is due (hybrid models) a step ends there, or, for the first
    /// due inside a step, the step writes that state to a spare slot as it passes (one pass
    /// over the weights instead of two: a cached prompt resuming at a periodic snapshot before its
    /// branch point computes both in one step); the snapshots wait in the sequence. When the
    /// prompt is done, its whole pages and the snapshots go to the prefix cache.
    pub(super) fn prefill(
        &mut self,
        seq: SeqId,
        budget: usize,
        logits: bool,
    ) -> Result<bool, RuntimeError> {
        let (prompt_len, mut phases) = {
            let s = self.seq(seq)?;
            (s.prompt_len, s.phases)
        };
        let mut ran = 0;
        let done = loop {
            let room = budget.saturating_sub(ran);
            if ran > 0 && room < self.prompt_grain() {
                break false;
            }
            let most = self.part_step(room, self.prompt_left(seq)?);
            let (pos, end) = self.prefill_step(seq, most, logits, &mut phases)?;
            ran += end - pos;
            if end == prompt_len {
                break true;
            }
        };
        if done {
            timed(&mut phases.insert, || self.cache_prompt(seq))?;
        }
        self.seq_mut(seq)?.phases = phases;
        Ok(done)
    }

    /// [`Engine::prefill`] of the whole prompt.
    pub(super) fn prefill_all(&mut self, seq: SeqId, logits: bool) -> Result<(), RuntimeError> {
        self.prefill(seq, usize::MAX, logits).map(drop)
    }

    /// One prefill step of at most `most` tokens from the sequence's position (ending early at
    /// a snapshot stop), its snapshots taken into the sequence; returns where it began and ended.
    fn prefill_step(
        &mut self,
        seq: SeqId,
        most: usize,
        logits: bool,
        phases: &mut PrefillPhases,
    ) -> Result<(usize, usize), RuntimeError> {
        let started = Instant::now();
        let s = self.seq(seq)?;
        let (pos, prompt_len) = (s.pos, s.prompt_len);
        let limit = match prompt_len.saturating_sub(pos) <= most {
            true => prompt_len,
            false => self.step_end(pos, most),
        };
        let stops = &s.snapshot_at;
        let mut due = stops.iter().copied().filter(|&b| b > pos && b <= limit);
        let (mid, end) = match due.next() {
            Some(b) if b < limit => (Some(b), due.next().unwrap_or(limit)),
            _ => (None, limit),
        };
        let stop_at_end = stops.contains(&end);
        let ids = s.tokens[pos..end].to_vec();
        // A step of one prompt: the first spare.
        let spare = self.io.spare_slot(0);
        let save = mid.map(|b| MidSave {
            rows: (b - pos) as u32,
            slot: spare,
        });
        let last = end == prompt_len;
        timed(&mut phases.steps, || {
            self.io.set_ids(&self.ctx, &ids);
            let (encoder, step) =
                self.begin_saving_step(seq, (end - pos) as u32, StepKind::Prompt, false, save)?;
            self.submit_step(encoder, step, last.then_some(0), u32::from(last && logits));
            Ok::<_, RuntimeError>(())
        })?;
        timed(&mut phases.snapshots, || {
            self.take_step_snapshots(seq, mid.map(|b| (b, spare)), stop_at_end.then_some(end))
        })?;
        // Not waited for here: a prompt's last step is, in `first_token`.
        self.log_step(StepRole::Prefill, started, false, |_| {
            vec![PortionRecord {
                seq: seq.row(),
                request: None,
                pos,
                len: end - pos,
                snapshots: mid.into_iter().chain(stop_at_end.then_some(end)).collect(),
            }]
        });
        Ok((pos, end))
    }

    /// Keeps in `seq` the recurrent states a prompt step of it left for the prefix cache: the
    /// mid-step one (`mid`: its position and the spare slot it went to) and its own state at
    /// `end`, each where due.
    pub(super) fn take_step_snapshots(
        &mut self,
        seq: SeqId,
        mid: Option<(usize, u32)>,
        end: Option<usize>,
    ) -> Result<(), RuntimeError> {
        let mut taken = Vec::new();
        if let Some((b, spare)) = mid {
            taken.push((b, self.save_slot_state(spare)?));
        }
        if let Some(e) = end {
            taken.push((e, self.save_slot_state(seq.row())?));
        }
        self.seq_mut(seq)?.snapshots.extend(taken);
        Ok(())
    }

    /// A prefilled prompt into the prefix cache: its whole pages (the sequence writes on into
    /// its last one) with the snapshots its steps took.
    pub(super) fn cache_prompt(&mut self, seq: SeqId) -> Result<(), RuntimeError> {
        let page = self.cache.config().page_size;
        let prompt_len = self.seq(seq)?.prompt_len;
        let snapshots = std::mem::take(&mut self.seq_mut(seq)?.snapshots);
        self.cache_prefix(seq, prompt_len / page * page, snapshots)?;
        self.reclaim_snapshots(Vec::new())
    }

    /// The phases of `seq`'s request, waiting included: from `prefilled` (its prefill's last
    /// submit) until `known` (its first token known on the host).
    pub(super) fn waited_phases(
        &self,
        seq: SeqId,
        prefilled: Instant,
        known: Instant,
    ) -> Result<PrefillPhases, RuntimeError> {
        Ok(PrefillPhases {
            wait: known.saturating_duration_since(prefilled),
            ..self.seq(seq)?.phases
        })
    }

    /// A snapshot of the recurrent state in `slot` (a sequence's row, or the spare a mid-step
    /// snapshot went to), in a buffer of the snapshot pool.
    pub(super) fn save_slot_state(&mut self, slot: u32) -> Result<wgpu::Buffer, RuntimeError> {
        let buffer = self.snapshots.take(&self.ctx)?;
        let mut encoder = self.encoder("state snapshot");
        self.model.encode_save_state(&mut encoder, slot, &buffer)?;
        self.ctx.queue.submit([encoder.finish()]);
        Ok(buffer)
    }

    /// Returns the snapshot buffers the prefix cache let go, and `more`, to the pool, which
    /// keeps what fits the budget beside the bytes the cache holds. Called after the work that
    /// may still use them was submitted.
    pub(super) fn reclaim_snapshots(
        &mut self,
        more: Vec<wgpu::Buffer>,
    ) -> Result<(), RuntimeError> {
        let mut buffers = self.cache.take_released();
        buffers.extend(more);
        let room = self
            .cache
            .config()
            .budget
            .saturating_sub(self.cache.cached_bytes());
        Ok(self.snapshots.give_back(&self.ctx, buffers, room)?)
    }

    /// Where `seq` stands now (position, and for a hybrid model a copy of its recurrent state),
    /// for [`Engine::rewind`] to put it back after steps that must leave no trace (profiling).
    pub(super) fn checkpoint(&mut self, seq: SeqId) -> Result<Checkpoint, RuntimeError> {
        let (pos, state_pos) = {
            let s = self.seq(seq)?;
            (s.pos, s.state_pos)
        };
        let state = match self.model.state_bytes() > 0 {
            true => Some(self.save_slot_state(seq.row())?),
            false => None,
        };
        Ok(Checkpoint {
            pos,
            state_pos,
            state,
        })
    }

    /// Puts `seq` back where `checkpoint` found it. The KV rows written since need nothing: they
    /// lie at or past its position, where its next step writes before anything attends to them.
    pub(super) fn rewind(
        &mut self,
        seq: SeqId,
        checkpoint: Checkpoint,
    ) -> Result<(), RuntimeError> {
        if let Some(state) = checkpoint.state {
            let mut encoder = self.encoder("state rewind");
            self.model
                .encode_restore_state(&mut encoder, &state, seq.row())?;
            self.ctx.queue.submit([encoder.finish()]);
            self.reclaim_snapshots(vec![state])?;
        }
        let s = self.seq_mut(seq)?;
        s.pos = checkpoint.pos;
        s.state_pos = checkpoint.state_pos;
        Ok(())
    }

    /// Inserts the first `computed` tokens into the prefix cache, their last page as a tail
    /// when partly filled (the sequence holds the node their whole pages end at), and attaches
    /// `snapshots` (position, state).
    pub(super) fn cache_prefix(
        &mut self,
        seq: SeqId,
        computed: usize,
        snapshots: Vec<(usize, wgpu::Buffer)>,
    ) -> Result<(), RuntimeError> {
        let page = self.cache.config().page_size;
        let s = self.seqs[seq.0 as usize]
            .as_mut()
            .ok_or_else(|| unknown(seq))?;
        if !s.cached || !self.cache.enabled() {
            return Ok(());
        }
        let n_pages = computed.div_ceil(page);
        let inserted = self
            .cache
            .insert(&s.tokens[..computed], &s.pages[..n_pages])?;
        s.locks.push(inserted.node);
        for (owned, page) in s.owned[..n_pages].iter_mut().zip(&s.pages) {
            *owned &= inserted.unused_pages.contains(page);
        }
        let bytes = self.model.state_bytes();
        for (at, state) in snapshots {
            let prefix = &s.tokens[..at];
            self.cache
                .attach_snapshot(prefix, Snapshot { state, bytes })?;
        }
        Ok(())
    }

    /// Ends a sequence: with `keep`, its computed tokens go to the prefix cache (a partly filled
    /// last page as a tail) with the snapshots its prefill took and, for a hybrid model whose
    /// state stopped exactly there, a snapshot of it, so a later prompt extending them resumes at
    /// their end (a client that left mid-prefill and asks again resumes where it was); without,
    /// the snapshots' buffers go back to the pool. Its own pages go back to the pool and its
    /// locks are dropped (evicting down to the budget).
    pub(super) fn close(&mut self, seq: SeqId, keep: bool) -> Result<(), RuntimeError> {
        self.settled()?;
        let mut snapshots = std::mem::take(&mut self.seq_mut(seq)?.snapshots);
        if keep {
            let (computed, snapshot_due) = {
                let s = self.seq(seq)?;
                let computed = s.pos.min(s.tokens.len());
                let hybrid = self.model.state_bytes() > 0;
                let due = hybrid && s.cached && self.cache.enabled() && s.state_pos == computed;
                let taken = snapshots.iter().any(|&(at, _)| at == computed);
                (computed, due && computed > 0 && !taken)
            };
            if snapshot_due {
                snapshots.push((computed, self.save_slot_state(seq.row())?));
            }
            self.cache_prefix(seq, computed, std::mem::take(&mut snapshots))?;
        }
        let s = self.seqs[seq.0 as usize]
            .take()
            .ok_or_else(|| unknown(seq))?;
        let own: Vec<u32> = s
            .pages
            .iter()
            .zip(&s.owned)
            .filter_map(|(&p, &owned)| owned.then_some(p))
            .collect();
        self.cache.free_pages_of_sequence(&own)?;
        for node in s.locks {
            self.cache.release(node)?;
        }
        self.reclaim_snapshots(snapshots.into_iter().map(|(_, state)| state).collect())?;
        Ok(())
    }

    /// Opens a sequence for `prompt` that will decode in batches: checks the request, takes a
    /// free row, reuses the longest cached prefix and reserves pages for the rest and up to
    /// `max_new` output tokens. Nothing is computed: [`Engine::prefill_part`] prefills it, and
    /// its first token comes with its logits too when `logits`.
    pub fn begin(
        &mut self,
        prompt: &[u32],
        max_new: usize,
        logits: bool,
    ) -> Result<SeqId, RuntimeError> {
        self.check_request(prompt, max_new.max(1))?;
        let seq = self.open(prompt, max_new.max(1), true)?;
        self.seq_mut(seq)?.logits = logits;
        Ok(seq)
    }

    /// Prefills part of a sequence [`Engine::begin`] opened: whole prompt steps from where it
    /// stands until about `budget` tokens ran (at least one step; a hybrid model's in whole
    /// 64-token delta-rule chunks, so a part is the budget rounded down to them, at least one,
    /// unless it holds the prompt's rest: then the part ends the prompt).
    /// When the prompt's last step ran, its prefix goes to the cache and the greedy first token
    /// (from logits computed here) comes back: `Some(Started)`, and the sequence decodes with
    /// [`Engine::step`]. A prompt's logits are the same bits however it is cut into parts. On an
    /// error the sequence is closed.
    pub fn prefill_part(
        &mut self,
        seq: SeqId,
        budget: usize,
    ) -> Result<Option<Started>, RuntimeError> {
        let logits = {
            let s = self.seq(seq)?;
            if s.tokens.len() > s.prompt_len {
                return Err(RuntimeError::Request(format!(
                    "{seq:?} is prefilled already"
                )));
            }
            s.logits
        };
        let part = self
            .prefill(seq, budget, logits)
            .and_then(|done| match done {
                true => self.first_token(seq).map(Some),
                false => Ok(None),
            });
        if part.is_err() {
            self.close(seq, false)?;
        }
        part
    }

    /// Waits for the first token of `seq`, whose prefill's last step was just submitted, and
    /// makes it the sequence's last token.
    fn first_token(&mut self, seq: SeqId) -> Result<Started, RuntimeError> {
        let prefilled = Instant::now();
        let first = self.wait_token(0)?;
        self.log_waited();
        let logits = match self.seq(seq)?.logits {
            true => Some(self.read_logits(1)?),
            false => None,
        };
        let phases = self.waited_phases(seq, prefilled, Instant::now())?;
        let s = self.seq_mut(seq)?;
        s.tokens.push(first);
        Ok(Started {
            seq,
            first,
            cached_tokens: s.cached_tokens,
            logits,
            phases,
        })
    }

    /// Prompt tokens `seq` took from the prefix cache when it was opened.
    pub fn cached_tokens(&self, seq: SeqId) -> Result<usize, RuntimeError> {
        Ok(self.seq(seq)?.cached_tokens)
    }

    /// Prompt tokens of `seq` not prefilled yet (neither cached nor computed; 0 once started).
    pub fn prompt_left(&self, seq: SeqId) -> Result<usize, RuntimeError> {
        let s = self.seq(seq)?;
        Ok(s.prompt_len.saturating_sub(s.pos))
    }

    /// Starts a sequence that will decode in batches: reuses the longest cached prefix of
    /// `prompt`, prefills the rest, and returns the greedy first token (from logits computed
    /// here; with `logits`, those too). Pages are reserved for up to `max_new` output tokens.
    /// [`Engine::begin`], then [`Engine::prefill_part`] of the whole prompt.
    pub fn start(
        &mut self,
        prompt: &[u32],
        max_new: usize,
        logits: bool,
    ) -> Result<Started, RuntimeError> {
        let seq = self.begin(prompt, max_new, logits)?;
        // A part without a budget is the whole prompt: this loops once.
        loop {
            if let Some(started) = self.prefill_part(seq, usize::MAX)? {
                return Ok(started);
            }
        }
    }

    /// One decode step serving every sequence of `seqs` (distinct, started, with room left): each
    /// is fed its last token at its own position on its own pages (and, for hybrid models, its
    /// own recurrent-state slot), and its greedy next token comes back, in order. The weights
    /// are read once for the whole batch.
    pub fn step(&mut self, seqs: &[SeqId]) -> Result<Vec<u32>, RuntimeError> {
        self.settled()?;
        self.submit_decode(seqs)?;
        self.take_decode()
    }

    /// Submits a decode step serving `seqs` as [`Engine::step`] does, without waiting for it:
    /// [`Engine::take_decode`] reads its tokens. While the step before it, of the same sequences
    /// in the same order, is still in flight, this one is fed that step's greedy tokens where its
    /// argmax left them on the GPU (the next step's inputs), so the host records a step while
    /// the GPU runs the one before — on the Qwen3-8B a batched step's recording is ~1.3 ms of an
    /// ~11.6 ms step of 8 sequences, which [`Engine::step`] makes the GPU wait for. At most two
    /// steps are in flight; nothing else may run on the engine until both are taken.
    /// A caller that stops a sequence at a token it takes while a later step is in flight takes
    /// that later step too before finishing the sequence, and drops its token: the sequence
    /// then also holds the stop token's K, V (and recurrent state), which a later prompt
    /// extending it reuses from the prefix cache.
    pub fn submit_decode(&mut self, seqs: &[SeqId]) -> Result<(), RuntimeError> {
        self.submit_batch(seqs, false)
    }

    /// [`Engine::submit_decode`], also copying the step's logits to the logits readback slot
    /// when `logits` (its caller then has nothing in flight: one slot holds them).
    fn submit_batch(&mut self, seqs: &[SeqId], logits: bool) -> Result<(), RuntimeError> {
        let started = Instant::now();
        let chained = match self.in_flight.back() {
            None => false,
            Some(last) if self.in_flight.len() == 1 && last.seqs == seqs => true,
            Some(_) => {
                return Err(RuntimeError::Request(format!(
                    "a decode step of {} sequences: {} steps of other sequences are in flight \
                     (take them first)",
                    seqs.len(),
                    self.in_flight.len()
                )));
            }
        };
        let (_, kv_len) = self.set_batch_inputs(seqs, chained)?;
        let n = seqs.len();
        let mut marks =
            StepMarks::counting(kv_len, StepKind::Decode).probing(&self.options.decode_probe);
        let mut encoder = self.record_batch_step("batched decode step", n as u32, &mut marks)?;
        let slot = self.in_flight.back().map_or(0, |last| 1 - last.slot);
        let bytes = 4 * n as u64;
        self.batch_slots[slot].record_copy(&mut encoder, &self.io.ids, 0, bytes);
        let logit_rows = if logits { n as u32 } else { 0 };
        let index = self.submit_commands(encoder, logit_rows);
        self.batch_slots[slot].submitted(index, bytes);
        let mut portions = Vec::with_capacity(n);
        for &id in seqs {
            let s = self.seq_mut(id)?;
            portions.push(PortionRecord {
                seq: id.row(),
                request: None,
                pos: s.pos,
                len: 1,
                snapshots: Vec::new(),
            });
            s.pos += 1;
            s.state_pos += 1;
        }
        self.in_flight.push_back(StepInFlight {
            seqs: seqs.to_vec(),
            slot,
            started,
            portions,
        });
        Ok(())
    }

    /// Waits for the oldest decode step [`Engine::submit_decode`] submitted and returns its
    /// greedy tokens, one per sequence in order, each made its sequence's last token.
    pub fn take_decode(&mut self) -> Result<Vec<u32>, RuntimeError> {
        let step = self.in_flight.pop_front().ok_or_else(|| {
            RuntimeError::Request("no decode step is in flight to take".to_string())
        })?;
        let bytes = 4 * step.seqs.len() as u64;
        let out: Vec<u32> =
            bytemuck::pod_collect_to_vec(&self.batch_slots[step.slot].wait(&self.ctx, bytes)?);
        let portions = step.portions;
        self.log_step(StepRole::Decode, step.started, true, |_| portions);
        for (&id, &token) in step.seqs.iter().zip(&out) {
            self.seq_mut(id)?.tokens.push(token);
        }
        Ok(out)
    }

    /// [`Engine::step`], with the logits each sequence's token came from (in order).
    pub fn step_with_logits(
        &mut self,
        seqs: &[SeqId],
    ) -> Result<(Vec<u32>, Vec<Vec<f32>>), RuntimeError> {
        self.settled()?;
        self.submit_batch(seqs, true)?;
        let tokens = self.take_decode()?;
        let rows = self
            .read_logits(seqs.len() as u32)?
            .chunks(self.io.n_vocab as usize)
            .map(<[f32]>::to_vec)
            .collect();
        Ok((tokens, rows))
    }

    /// An error while a decode step is in flight: what would run now would write the inputs or
    /// the sequences a submitted step reads.
    pub(super) fn settled(&self) -> Result<(), RuntimeError> {
        match self.in_flight.len() {
            0 => Ok(()),
            n => Err(RuntimeError::Request(format!(
                "{n} decode steps are in flight: take them (Engine::take_decode) first"
            ))),
        }
    }

    /// Runs one decode step serving `seqs` as [`Engine::step`] does, with a timestamp after
    /// every op where the device can write them inside a pass, and waits for it: a step of
    /// several sequences timed op by op, as [`Engine::profile_step`] times a step of one. Every
    /// sequence is left as it was (positions and recurrent states put back), so repeated calls
    /// measure the same step and decoding on is unchanged.
    pub fn profile_batch_step(&mut self, seqs: &[SeqId]) -> Result<StepProfile, RuntimeError> {
        let (step, kv_len) = self.set_batch_inputs(seqs, false)?;
        let mut checkpoints = Vec::with_capacity(seqs.len());
        for &seq in seqs {
            checkpoints.push(self.checkpoint(seq)?);
        }
        let n = step.n_tokens;
        let profile = self.profiled(n, kv_len, StepKind::Decode, |engine, marks| {
            let encoder = engine.record_batch_step("profiled batched decode step", n, marks)?;
            Ok((encoder, step))
        });
        for (&seq, checkpoint) in seqs.iter().zip(checkpoints) {
            self.rewind(seq, checkpoint)?;
        }
        profile
    }

    /// Checks a batched decode step's sequences and writes its inputs: each sequence's last
    /// token (unless `chained`: the step in flight's argmax leaves them in place), position and
    /// page row, the step uniforms. Returns the step and the positions it attends over, summed.
    fn set_batch_inputs(
        &mut self,
        seqs: &[SeqId],
        chained: bool,
    ) -> Result<(Step, u32), RuntimeError> {
        if !chained {
            self.settled()?;
        }
        let n = seqs.len();
        if n == 0 || n > self.seqs.len() {
            return Err(RuntimeError::Request(format!(
                "a decode step of {n} sequences: this engine serves 1..={}",
                self.seqs.len()
            )));
        }
        let mut ids = Vec::with_capacity(n);
        let mut slots = Vec::with_capacity(n);
        let rows: Vec<u32> = seqs.iter().map(|s| s.row()).collect();
        for (i, &id) in seqs.iter().enumerate() {
            if seqs[..i].contains(&id) {
                return Err(RuntimeError::Request(format!(
                    "{id:?} appears twice in a step"
                )));
            }
            let pos = match chained {
                true => self.next_position(id)?,
                false => {
                    let (pos, last) = self.next_input(id)?;
                    ids.push(last);
                    pos
                }
            };
            slots.push(TokenSlot {
                pos: pos as u32,
                page_row: id.row(),
            });
        }
        if !chained {
            self.io.set_ids(&self.ctx, &ids);
        }
        self.io.set_tokens(&self.ctx, &slots);
        self.io.seqs.write(&self.ctx, 1, &rows)?;
        let step = Step::new(0, n as u32, self.steps % HISTORY_LEN);
        self.io.step.set(&self.ctx, step);
        self.io.tail_step.set(&self.ctx, step);
        let kv_len: usize = slots.iter().map(|t| t.pos as usize + 1).sum();
        Ok((step, kv_len as u32))
    }

    /// Records a batched decode step of `n` sequences (their inputs written) into a new encoder,
    /// its ops noted in `marks`, and counts it: the step [`Engine::step`] and
    /// [`Engine::profile_batch_step`] submit.
    fn record_batch_step(
        &mut self,
        label: &str,
        n: u32,
        marks: &mut StepMarks,
    ) -> Result<wgpu::CommandEncoder, RuntimeError> {
        let started = Instant::now();
        let mut encoder = self.encoder(label);
        self.model.encode_batch(&mut encoder, n, marks)?;
        self.encode_time += started.elapsed();
        self.last_dispatches = marks.dispatches();
        self.steps += 1;
        Ok(encoder)
    }

    /// The position and last token of a started sequence with room for one more token: the
    /// next decode step's input.
    pub(super) fn next_input(&self, id: SeqId) -> Result<(usize, u32), RuntimeError> {
        let pos = self.next_position(id)?;
        let s = self.seq(id)?;
        Ok((
            pos,
            *s.tokens.last().expect("a started sequence has tokens"),
        ))
    }

    /// The position a started sequence with room for one more token feeds its next token at.
    fn next_position(&self, id: SeqId) -> Result<usize, RuntimeError> {
        let s = self.seq(id)?;
        if s.pos >= s.capacity || s.tokens.len() <= s.prompt_len {
            return Err(RuntimeError::Request(format!(
                "{id:?} has no room for another token (or was not started)"
            )));
        }
        Ok(s.pos)
    }

    /// Replaces the last token of a started sequence, the one its next decode step is fed (the
    /// greedy choice [`Engine::start`] or [`Engine::step`] returned), by the caller's own choice
    /// (a sampled token).
    pub fn set_last_token(&mut self, seq: SeqId, token: u32) -> Result<(), RuntimeError> {
        self.settled()?;
        if self.seq(seq)?.tokens.len() <= self.seq(seq)?.prompt_len {
            return Err(RuntimeError::Request(format!("{seq:?} was not started")));
        }
        if token as usize >= self.model.n_vocab() {
            return Err(RuntimeError::Request(format!(
                "token id {token} is outside the vocabulary of {}",
                self.model.n_vocab()
            )));
        }
        let last = self.seq_mut(seq)?.tokens.last_mut();
        *last.expect("a started sequence has tokens") = token;
        Ok(())
    }

    /// Ends a sequence opened with [`Engine::begin`] (or [`Engine::start`]), started or still
    /// mid-prefill: its computed pages go to the prefix cache.
    pub fn finish(&mut self, seq: SeqId) -> Result<(), RuntimeError> {
        self.close(seq, true)
    }

    /// The tokens of a sequence in flight: its prompt, then its outputs so far.
    pub fn tokens(&self, seq: SeqId) -> Result<&[u32], RuntimeError> {
        Ok(&self.seq(seq)?.tokens)
    }
}

fn unknown(id: SeqId) -> RuntimeError {
    RuntimeError::Request(format!("{id:?} is not a sequence in flight"))
}

fn lcm(a: usize, b: usize) -> usize {
    let gcd = |mut a: usize, mut b: usize| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    a / gcd(a, b) * b
}

/// Tokens from position `pos` to the last multiple of `grain` within `pos + space` (0 if there
/// is none): a hybrid model's prompt step or portion cut short of its prompt's end ends on the
/// absolute chunk grid, so its chunks are the ones every other cut of the prompt computes.
pub(super) fn grid_cut(pos: usize, space: usize, grain: usize) -> usize {
    ((pos + space) / grain * grain).saturating_sub(pos)
}
