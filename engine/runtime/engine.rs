//! [`Engine`]: a loaded model and its generation loop.
//!
//! Greedy decode is GPU-resident: each step's argmax writes the next token where the next
//! step's embedding reads it, so the host only writes the 16-byte step uniform and submits.
//! `lookahead` steps are kept in flight; each token is read back (4 bytes, a persistent
//! mappable buffer) while the next steps already run, and handed to the caller the moment it is
//! known. Sampled decode reads the last row's logits back every step and samples on the CPU.

mod prompts;
mod session;
mod snapshots;

pub use prompts::PromptPart;
use session::StepInFlight;
pub use session::{SeqId, Started};
pub use snapshots::SnapshotStats;

use super::RuntimeError;
use super::io::Staging;
use super::rounding::TeacherForcedRounding;
use super::sampling::{Sampler, SamplingParams};
use super::trace::{PortionRecord, StepLog, StepRecord, StepRole};
use crate::cache::{CacheConfig, CacheStats, PrefixCache};
use crate::gguf::Gguf;
use crate::gpu::kernels::kv_cache::KvDtype;
use crate::gpu::profile::{DecodeProbe, OpRecord, Profiler, StepMarks};
use crate::gpu::step::{HISTORY_LEN, MAX_BATCH, MidSave, StepIo, StepKind, TokenSlot};
use crate::gpu::{ContextOptions, GpuContext, Step};
use crate::model::{DeviceModel, DevicePlan};
use crate::tokenizer::Tokenizer;
use session::Sequence;
use snapshots::SnapshotPool;
use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct EngineOptions {
    /// KV-cache length; default min(the model's training context, 4096).
    pub max_context: Option<usize>,
    /// Most prompt tokens one prefill step processes (longer prompts take several steps).
    /// Default 2048: against 512, a 2048-token prompt prefills 10 % faster on the Qwen3-8B shape
    /// and 13 % on the Qwen3.5-27B (H100, experiments/NOTES.md 2026-12-06 #14: the narrow
    /// products' grids fill the GPU, each layer's weights are read a quarter as often). The
    /// engine halves it, down to 512, where the activations would not fit the adapter.
    pub prefill_chunk: u32,
    /// Decode steps kept in flight ahead of the token being read back.
    pub lookahead: usize,
    /// Memory to plan against instead of what the adapter reports (tests use a small one).
    pub memory_limit: Option<u64>,
    /// NaN-fill activations, logits and caches at load (`FAK_POISON=1`; tests).
    pub poison: bool,
    /// GPU memory the prefix cache keeps finished prompts' KV pages (and, for hybrid models,
    /// recurrent-state snapshots) in, on top of what sequences in flight use; 0 turns it off.
    pub cache_mem: u64,
    /// Sequences in flight at once (one batched decode step serves them all), at most
    /// [`MAX_BATCH`].
    pub max_seqs: usize,
    /// Token slots per KV page, a power of two: the prefix cache shares whole pages.
    pub page_size: u32,
    /// Hybrid models: besides the end of each cached prompt and known branch points, snapshot
    /// the recurrent state every this many prompt tokens (rounded down to the state grid: whole
    /// pages and delta-rule chunks; 0: never)
    /// while prefilling, so a prompt that branches off a cached one later, where no branch was
    /// known yet, still resumes close to the branch (the second agent sharing a preamble).
    pub snapshot_every: usize,
    pub context: ContextOptions,
    /// How many times a decode step records each named op (`FAK_DECODE_PROBE`; a measurement,
    /// not a form: [`DecodeProbe`]). Empty by default.
    pub decode_probe: DecodeProbe,
}

impl EngineOptions {
    /// Defaults, with the adapter and kernel-path choice from the environment
    /// (`FAK_ADAPTER`, `WGPU_BACKEND`, `FAK_FORCE`, `FAK_COOP_MATRIX`).
    pub fn from_env() -> Result<Self, RuntimeError> {
        Ok(EngineOptions {
            max_context: None,
            prefill_chunk: 2048,
            lookahead: 2,
            memory_limit: None,
            poison: std::env::var("FAK_POISON").is_ok_and(|v| v == "1"),
            cache_mem: 0,
            max_seqs: 1,
            page_size: DevicePlan::PAGE_SIZE,
            snapshot_every: 1024,
            context: ContextOptions::from_env()?,
            decode_probe: DecodeProbe::from_env()
                .map_err(|e| RuntimeError::Request(format!("FAK_DECODE_PROBE: {e}")))?,
        })
    }
}

/// Why generation stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// `n_out` tokens were produced.
    Length,
    /// An end-of-generation token was produced (and not ignored).
    EndOfGeneration,
}

/// Host time of a request's phases up to its first token, from host timestamps only (nothing is
/// waited for to take them): what the request path costs beside the forward pass. The GPU runs
/// what the first four phases submit while the host goes on; `wait` is the host then waiting
/// for the first token.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct PrefillPhases {
    /// Prefix-cache lookup; recording and submitting the recurrent-state restore (or reset) and
    /// the copy-on-write page copy; page allocation and the page-table row.
    pub open: Duration,
    /// Recording and submitting the prefill steps.
    pub steps: Duration,
    /// Taking snapshot buffers (from the pool, or new) and recording and submitting the state
    /// copies into them (hybrid models with the prefix cache on).
    pub snapshots: Duration,
    /// Inserting the prompt's pages and snapshots into the prefix cache.
    pub insert: Duration,
    /// The phases above done → the first token known on the host: the GPU's work still
    /// running, and for `generate` its first decode steps recorded meanwhile.
    pub wait: Duration,
}

/// Runs `f`, adding the host time it took to `total`.
fn timed<T>(total: &mut Duration, f: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let out = f();
    *total += started.elapsed();
    out
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct GenerationStats {
    pub prompt_tokens: usize,
    /// Prompt tokens whose KV came from the prefix cache (not computed by this request).
    pub cached_tokens: usize,
    pub tokens: Vec<u32>,
    pub stop: StopReason,
    /// Request start → first token known on the host (prefill, including its readback).
    pub prefill: Duration,
    /// Where the host time of `prefill` went.
    pub prefill_phases: PrefillPhases,
    /// First token → last token known on the host.
    pub decode: Duration,
    /// Dispatches the (last) prefill step recorded; constant in the prompt length.
    pub prefill_step_dispatches: usize,
    /// Dispatches one decode step recorded (0 when no decode step ran).
    pub decode_step_dispatches: usize,
    /// Host time spent recording and finishing the decode steps' command buffers (what a
    /// step costs the CPU; it overlaps the GPU's work on the steps in flight).
    pub decode_encode: Duration,
    /// Decode steps run and queue submits they took.
    pub decode_steps: usize,
    pub decode_submits: usize,
}

impl GenerationStats {
    pub fn prefill_tokens_per_second(&self) -> f64 {
        self.prompt_tokens as f64 / self.prefill.as_secs_f64()
    }

    /// (n − 1) / decode, as DESIGN.md defines it: the first token comes from the prefill.
    pub fn decode_tokens_per_second(&self) -> Option<f64> {
        (self.tokens.len() > 1 && !self.decode.is_zero())
            .then(|| (self.tokens.len() - 1) as f64 / self.decode.as_secs_f64())
    }
}

pub struct Engine {
    pub ctx: GpuContext,
    /// Shared, so a caller can stream-decode while the engine generates.
    pub tokenizer: Arc<Tokenizer>,
    gguf: Gguf,
    model: Box<dyn DeviceModel>,
    io: StepIo,
    options: EngineOptions,
    /// Token readback slots, one per step in flight.
    token_slots: Vec<Staging>,
    logits_slot: Staging,
    /// The batched decode steps' tokens (one per sequence): two, so that a step can be
    /// submitted while the one before it is still read back ([`Engine::submit_decode`]); prompt
    /// steps use the first.
    batch_slots: [Staging; 2],
    /// Batched decode steps submitted and not yet read back, oldest first (at most two).
    in_flight: VecDeque<StepInFlight>,
    /// Which prompts' KV pages are kept, and the page pool.
    cache: PrefixCache<wgpu::Buffer>,
    /// Buffers for recurrent-state snapshots (hybrid models), reused.
    snapshots: SnapshotPool,
    /// Sequences in flight, by page-table row.
    seqs: Vec<Option<Sequence>>,
    /// Steps submitted since load (indexes the history ring).
    steps: u32,
    last_dispatches: usize,
    /// Host time recording and finishing forward steps, and submits made, since load.
    encode_time: Duration,
    submits: usize,
    /// Timestamps inside passes, where the device has them (`profile_step`, `profile_prefill`).
    profiler: Option<Profiler>,
    /// The steps of the sequence API since the scheduler last took them, while a step trace is
    /// on ([`Engine::log_steps`]).
    step_log: Option<StepLog>,
    pub load_time: Duration,
}

/// One forward step timed op by op (`Engine::profile_step`, `Engine::profile_prefill`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct StepProfile {
    /// Tokens the step ran: 1 for a decode step, a chunk's length for a prefill step, the
    /// sequences of a batched decode step ([`Engine::profile_batch_step`]).
    pub tokens: u32,
    /// Positions the step attended over (summed over a batched step's sequences).
    pub kv_len: u32,
    /// Every op the model recorded, in order.
    pub ops: Vec<OpRecord>,
    /// GPU nanoseconds of each op (parallel to `ops`); None without in-pass timestamps.
    pub op_ns: Vec<Option<f64>>,
    /// Host time recording and finishing the step's command buffer.
    pub encode: Duration,
    /// Host time from submit until the device reported the step done.
    pub wall: Duration,
    pub submits: usize,
}

impl Engine {
    pub fn load(path: &Path, options: &EngineOptions) -> Result<Engine, RuntimeError> {
        let start = Instant::now();
        let gguf = Gguf::open(path)?;
        let tokenizer = Arc::new(Tokenizer::from_gguf(&gguf)?);
        // The plan checks the model's metadata and tensors: a bad file fails before any GPU work.
        let plan = DevicePlan::of(&gguf, options.max_context, options.prefill_chunk)?;
        check_pool_options(options, &plan)?;
        let ctx = GpuContext::new(&options.context)?;
        let available = options.memory_limit.or(ctx.facts().memory_bytes);
        let plan = fitted_plan(&gguf, options, &ctx, plan, available)?;
        if let Some(available) = available
            && plan.total_bytes() > available
        {
            return Err(RuntimeError::TooLarge {
                model: path.display().to_string(),
                adapter: ctx.facts().name.clone(),
                what: plan.describe(),
                needed: plan.total_bytes(),
                available,
            });
        }
        let io = StepIo::new(
            &ctx,
            plan.max_tokens,
            plan.logit_rows,
            plan.n_vocab as u32,
            (plan.max_seqs, plan.pages_per_row(), plan.pad_page()),
        )?;
        let cache = PrefixCache::new(CacheConfig {
            page_size: plan.page_size as usize,
            page_bytes: plan.kv_page_bytes(),
            n_pages: plan.shared_pages(),
            budget: options.cache_mem,
        })?;
        if plan.poison {
            crate::gpu::fill_f32(&ctx, &io.logits, f32::NAN)?;
        }
        let model = crate::model::load_device_model(&ctx, &gguf, &io, &plan)?;
        let snapshots = SnapshotPool::new(model.state_bytes(), plan.poison);
        let lookahead = options.lookahead.max(1);
        let token_slots = (0..lookahead + 1)
            .map(|_| Staging::new(&ctx, "token readback", 4))
            .collect();
        let logits_slot = Staging::new(
            &ctx,
            "logits readback",
            u64::from(plan.logit_rows) * plan.n_vocab as u64 * 4,
        );
        let batch_slots =
            [0, 1].map(|_| Staging::new(&ctx, "batch readback", u64::from(plan.max_seqs) * 4));
        ctx.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(crate::gpu::GpuError::from)?;
        let profiler = Profiler::new(&ctx);
        Ok(Engine {
            ctx,
            tokenizer,
            gguf,
            model,
            io,
            options: options.clone(),
            token_slots,
            logits_slot,
            batch_slots,
            in_flight: VecDeque::new(),
            cache,
            snapshots,
            seqs: (0..plan.max_seqs).map(|_| None).collect(),
            steps: 0,
            last_dispatches: 0,
            encode_time: Duration::ZERO,
            submits: 0,
            profiler,
            step_log: None,
            load_time: start.elapsed(),
        })
    }

    pub fn gguf(&self) -> &Gguf {
        &self.gguf
    }

    pub fn max_context(&self) -> usize {
        self.model.max_context()
    }

    /// Rows of the model's output head: token ids must be below it.
    /// Most tokens one step processes: the options' prefill chunk within the context, halved
    /// where its activations would not fit the adapter.
    pub fn max_step_tokens(&self) -> usize {
        self.io.max_tokens as usize
    }

    pub fn n_vocab(&self) -> usize {
        self.model.n_vocab()
    }

    /// Dispatches the last submitted forward step recorded (a prefill chunk or a decode step).
    pub fn last_step_dispatches(&self) -> usize {
        self.last_dispatches
    }

    /// Forward steps (prefill chunks and decode steps) submitted since load.
    pub fn forward_steps(&self) -> u32 {
        self.steps
    }

    /// Notes every step of the sequence API from now on (prefill parts, steps of several
    /// prompts, batched decode steps; see [`super::trace`]), timestamps from `epoch`.
    pub fn log_steps(&mut self, epoch: Instant) {
        self.step_log = Some(StepLog::new(epoch));
    }

    /// The steps noted since the last call (none while no trace is on).
    pub fn take_logged_steps(&mut self) -> Vec<StepRecord> {
        self.step_log
            .as_mut()
            .map(|log| std::mem::take(&mut log.steps))
            .unwrap_or_default()
    }

    /// Notes a step that began at `started` and ends now (`waited`: after the wait for its
    /// result), when a trace is on; `portions` is only called then.
    fn log_step(
        &mut self,
        kind: StepRole,
        started: Instant,
        waited: bool,
        portions: impl FnOnce(&Self) -> Vec<PortionRecord>,
    ) {
        if self.step_log.is_none() {
            return;
        }
        let portions = portions(self);
        let Some(log) = self.step_log.as_mut() else {
            return;
        };
        let record = StepRecord {
            kind,
            start_ns: log.ns(started),
            end_ns: log.ns(Instant::now()),
            waited,
            portions,
        };
        log.steps.push(record);
    }

    /// Moves the last noted step's end to now: the host just waited for its result.
    fn log_waited(&mut self) {
        if let Some(log) = self.step_log.as_mut() {
            let now = log.ns(Instant::now());
            if let Some(last) = log.steps.last_mut() {
                last.end_ns = now;
                last.waited = true;
            }
        }
    }

    /// Checks a request before any GPU work.
    fn check_request(&self, prompt: &[u32], n_out: usize) -> Result<(), RuntimeError> {
        if prompt.is_empty() {
            return Err(RuntimeError::Request("the prompt is empty".into()));
        }
        let n_vocab = self.model.n_vocab();
        if let Some(bad) = prompt.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(RuntimeError::Request(format!(
                "token id {bad} is outside the vocabulary of {n_vocab}"
            )));
        }
        let need = prompt.len().saturating_add(n_out);
        if need > self.max_context() {
            return Err(RuntimeError::Request(format!(
                "prompt of {} tokens plus {n_out} to generate exceeds the context of {} tokens",
                prompt.len(),
                self.max_context()
            )));
        }
        Ok(())
    }

    fn encoder(&self, label: &str) -> wgpu::CommandEncoder {
        self.ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some(label) })
    }

    /// Writes the step uniform and the token table and records one forward step of `n`
    /// consecutive tokens of `seq` from its current position, in the role `kind`.
    fn begin_step(
        &mut self,
        seq: SeqId,
        n: u32,
        kind: StepKind,
        all_logits: bool,
    ) -> Result<(wgpu::CommandEncoder, Step), RuntimeError> {
        self.settled()?;
        self.begin_saving_step(seq, n, kind, all_logits, None)
    }

    /// [`Engine::begin_step`] that also writes the recurrent state after `save.rows` of the
    /// step's tokens to slot `save.slot` (hybrid models; a branch point inside a prefill step).
    fn begin_saving_step(
        &mut self,
        seq: SeqId,
        n: u32,
        kind: StepKind,
        all_logits: bool,
        save: Option<MidSave>,
    ) -> Result<(wgpu::CommandEncoder, Step), RuntimeError> {
        let kv_len = (self.seq(seq)?.pos + n as usize) as u32;
        let mut marks = StepMarks::counting(kv_len, kind).probing(&self.options.decode_probe);
        self.begin_marked_step(seq, n, all_logits, save, &mut marks)
    }

    /// [`Engine::begin_saving_step`], noting the step's ops in `marks`.
    fn begin_marked_step(
        &mut self,
        seq: SeqId,
        n: u32,
        all_logits: bool,
        save: Option<MidSave>,
        marks: &mut StepMarks,
    ) -> Result<(wgpu::CommandEncoder, Step), RuntimeError> {
        let (pos, row) = {
            let s = self.seq(seq)?;
            (s.pos as u32, seq.row())
        };
        let slots: Vec<TokenSlot> = (0..n)
            .map(|t| TokenSlot {
                pos: pos + t,
                page_row: row,
            })
            .collect();
        self.io.set_tokens(&self.ctx, &slots);
        self.io.seqs.write_prefill(&self.ctx, n, row, pos, save)?;
        let step = Step::new(pos, n, self.steps % HISTORY_LEN);
        self.io.step.set(&self.ctx, step);
        let tail = if all_logits { n } else { 1 };
        self.io.tail_step.set(
            &self.ctx,
            Step {
                n_tokens: tail,
                ..step
            },
        );
        let started = Instant::now();
        let mut encoder = self.encoder("forward step");
        self.model.encode_step(&mut encoder, n, all_logits, marks)?;
        self.encode_time += started.elapsed();
        self.last_dispatches = marks.dispatches();
        let s = self.seq_mut(seq)?;
        s.pos += n as usize;
        s.state_pos += n as usize;
        self.steps += 1;
        Ok((encoder, step))
    }

    /// Submits a step, copying its argmax token into readback slot `token_slot` and the first
    /// `logit_rows` rows of its logits into the logits slot.
    fn submit_step(
        &mut self,
        mut encoder: wgpu::CommandEncoder,
        step: Step,
        token_slot: Option<usize>,
        logit_rows: u32,
    ) {
        if let Some(slot) = token_slot {
            let offset = u64::from(step.out_index) * 4;
            self.token_slots[slot].record_copy(&mut encoder, &self.io.history, offset, 4);
        }
        let index = self.submit_commands(encoder, logit_rows);
        if let Some(slot) = token_slot {
            self.token_slots[slot].submitted(index, 4);
        }
    }

    /// Finishes a step's `encoder`, with its first `logit_rows` rows of logits copied into the
    /// logits slot, and submits it.
    fn submit_commands(
        &mut self,
        mut encoder: wgpu::CommandEncoder,
        logit_rows: u32,
    ) -> wgpu::SubmissionIndex {
        let logit_bytes = self.logits_bytes(logit_rows);
        if logit_rows > 0 {
            self.logits_slot
                .record_copy(&mut encoder, &self.io.logits, 0, logit_bytes);
        }
        let started = Instant::now();
        let commands = encoder.finish();
        self.encode_time += started.elapsed();
        let index = self.ctx.queue.submit([commands]);
        self.submits += 1;
        if logit_rows > 0 {
            self.logits_slot.submitted(index.clone(), logit_bytes);
        }
        index
    }

    fn wait_token(&mut self, slot: usize) -> Result<u32, RuntimeError> {
        let bytes = self.token_slots[slot].wait(&self.ctx, 4)?;
        Ok(u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes")))
    }

    fn logits_bytes(&self, rows: u32) -> u64 {
        u64::from(rows) * u64::from(self.io.n_vocab) * 4
    }

    fn read_logits(&mut self, rows: u32) -> Result<Vec<f32>, RuntimeError> {
        let bytes = self.logits_slot.wait(&self.ctx, self.logits_bytes(rows))?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }

    /// Generates up to `n_out` tokens after `prompt`, calling `on_token` for each as soon as the
    /// host knows it. Stops early on an end-of-generation token unless `ignore_eos`.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        n_out: usize,
        sampling: &SamplingParams,
        ignore_eos: bool,
        on_token: &mut dyn FnMut(u32),
    ) -> Result<GenerationStats, RuntimeError> {
        self.check_request(prompt, n_out)?;
        let start = Instant::now();
        let seq = self.open(prompt, n_out, true)?;
        let result = self.generate_in(seq, start, n_out, sampling, ignore_eos, on_token);
        match &result {
            Ok(stats) => self.seq_mut(seq)?.tokens.extend(&stats.tokens),
            Err(_) => self.seq_mut(seq)?.tokens.truncate(prompt.len()),
        }
        self.close(seq, result.is_ok())?;
        result
    }

    fn generate_in(
        &mut self,
        seq: SeqId,
        start: Instant,
        n_out: usize,
        sampling: &SamplingParams,
        ignore_eos: bool,
        on_token: &mut dyn FnMut(u32),
    ) -> Result<GenerationStats, RuntimeError> {
        let prompt_tokens = self.seq(seq)?.prompt_len;
        let mut stats = GenerationStats {
            prompt_tokens,
            cached_tokens: self.seq(seq)?.cached_tokens,
            tokens: Vec::with_capacity(n_out),
            stop: StopReason::Length,
            prefill: Duration::ZERO,
            prefill_phases: PrefillPhases::default(),
            decode: Duration::ZERO,
            prefill_step_dispatches: 0,
            decode_step_dispatches: 0,
            decode_encode: Duration::ZERO,
            decode_steps: 0,
            decode_submits: 0,
        };
        if n_out == 0 {
            self.prefill_all(seq, false)?;
            let prefilled = Instant::now();
            stats.prefill_step_dispatches = self.last_dispatches;
            self.wait_token(0)?;
            let known = Instant::now();
            stats.prefill = known - start;
            stats.prefill_phases = self.waited_phases(seq, prefilled, known)?;
            return Ok(stats);
        }
        let mut accept = |engine: &Engine, stats: &mut GenerationStats, token: u32| -> bool {
            stats.tokens.push(token);
            on_token(token);
            let eog = !ignore_eos && engine.tokenizer.is_eog(token);
            if eog {
                stats.stop = StopReason::EndOfGeneration;
            }
            !eog && stats.tokens.len() < n_out
        };
        let (first_known, prefilled);
        let (encode_before, submits_before, steps_before);
        if sampling.is_greedy() {
            self.prefill_all(seq, false)?;
            prefilled = Instant::now();
            stats.prefill_step_dispatches = self.last_dispatches;
            (encode_before, submits_before, steps_before) =
                (self.encode_time, self.submits, self.steps);
            first_known = self.greedy_loop(seq, n_out, start, &mut stats, &mut accept)?;
        } else {
            let prompt = self.seq(seq)?.tokens[..prompt_tokens].to_vec();
            let mut sampler = Sampler::for_prompt(sampling.clone(), &prompt);
            self.prefill_all(seq, true)?;
            prefilled = Instant::now();
            stats.prefill_step_dispatches = self.last_dispatches;
            (encode_before, submits_before, steps_before) =
                (self.encode_time, self.submits, self.steps);
            self.wait_token(0)?;
            let mut logits = self.read_logits(1)?;
            first_known = Instant::now();
            stats.prefill = first_known - start;
            loop {
                let token = sampler.sample(&logits);
                if !accept(self, &mut stats, token) {
                    break;
                }
                logits = self.step_logits(seq, token)?;
            }
        }
        stats.prefill_phases = self.waited_phases(seq, prefilled, first_known)?;
        stats.decode = first_known.elapsed();
        stats.decode_encode = self.encode_time - encode_before;
        stats.decode_submits = self.submits - submits_before;
        stats.decode_steps = (self.steps - steps_before) as usize;
        if stats.tokens.len() > 1 {
            stats.decode_step_dispatches = self.last_dispatches;
        }
        Ok(stats)
    }

    /// Greedy decode with `lookahead` steps in flight; returns when the first token was known.
    fn greedy_loop(
        &mut self,
        seq: SeqId,
        n_out: usize,
        start: Instant,
        stats: &mut GenerationStats,
        accept: &mut dyn FnMut(&Engine, &mut GenerationStats, u32) -> bool,
    ) -> Result<Instant, RuntimeError> {
        let slots = self.token_slots.len();
        let mut submitted = 1; // the prefill's token sits in slot 0
        let mut first_known = None;
        for produced in 0..n_out {
            // Keep the GPU fed: steps up to `lookahead` ahead of the token being read.
            while submitted < n_out && submitted < produced + slots {
                let (encoder, step) = self.begin_step(seq, 1, StepKind::Decode, false)?;
                self.submit_step(encoder, step, Some(submitted % slots), 0);
                submitted += 1;
            }
            let token = self.wait_token(produced % slots)?;
            if first_known.is_none() {
                let now = Instant::now();
                stats.prefill = now - start;
                first_known = Some(now);
            }
            if !accept(self, stats, token) {
                // Drain steps already in flight so their readback slots are free again.
                for k in produced + 1..submitted {
                    self.wait_token(k % slots)?;
                }
                // Tokens past the stop were computed but are not part of the sequence.
                self.seq_mut(seq)?.pos -= submitted - produced - 1;
                break;
            }
        }
        Ok(first_known.expect("n_out > 0"))
    }

    /// One decode step on `token`, returning its logits (the sampled and quality paths).
    fn step_logits(&mut self, seq: SeqId, token: u32) -> Result<Vec<f32>, RuntimeError> {
        self.io.set_ids(&self.ctx, &[token]);
        let (encoder, step) = self.begin_step(seq, 1, StepKind::Decode, false)?;
        self.submit_step(encoder, step, None, 1);
        self.read_logits(1)
    }

    /// The untimed quality path: logits after each of `ids` (teacher forcing), prefilled in
    /// chunks that keep every row's logits.
    /// It never uses the prefix cache: every position is computed.
    pub fn teacher_forced_logits(&mut self, ids: &[u32]) -> Result<Vec<Vec<f32>>, RuntimeError> {
        self.forced_logits(ids, ids.len())
    }

    /// Logits after each of `ids`: the first `prompt` of them prefilled as a prompt (as
    /// [`Engine::teacher_forced_logits`] does), then each of the rest fed as a decode step, the
    /// kernels generation runs (a forced continuation). Never uses the prefix cache.
    pub fn forced_logits(
        &mut self,
        ids: &[u32],
        prompt: usize,
    ) -> Result<Vec<Vec<f32>>, RuntimeError> {
        self.check_request(ids, 0)?;
        let prompt = prompt.min(ids.len());
        let seq = self.open(ids, 0, false)?;
        let result = self
            .teacher_forced_in(seq, &ids[..prompt])
            .and_then(|mut rows| {
                for &id in &ids[prompt..] {
                    rows.push(self.step_logits(seq, id)?);
                }
                Ok(rows)
            });
        self.close(seq, false)?;
        result
    }

    fn teacher_forced_in(
        &mut self,
        seq: SeqId,
        ids: &[u32],
    ) -> Result<Vec<Vec<f32>>, RuntimeError> {
        let n_vocab = self.io.n_vocab as usize;
        let mut out = Vec::with_capacity(ids.len());
        for part in ids.chunks(self.teacher_forced_rounding().step_tokens) {
            self.io.set_ids(&self.ctx, part);
            let rows = part.len() as u32;
            let (encoder, step) = self.begin_step(seq, rows, StepKind::Prompt, true)?;
            self.submit_step(encoder, step, None, rows);
            let flat = self.read_logits(rows)?;
            out.extend(flat.chunks(n_vocab).map(<[f32]>::to_vec));
        }
        Ok(out)
    }

    /// How [`Engine::teacher_forced_logits`] rounds: its steps (as many ids as one step's
    /// logits hold, in whole delta-rule chunks for a hybrid model) on this engine's kernel paths;
    /// every step is a prompt step, so none multiplies as a mat-vec.
    pub fn teacher_forced_rounding(&self) -> TeacherForcedRounding {
        TeacherForcedRounding::of(self.ctx.paths(), self.prompt_step(self.io.logit_rows), 0)
    }

    /// What the prefix cache has done since load.
    pub fn cache_stats(&self) -> CacheStats {
        self.cache.stats()
    }

    /// Bytes the prefix cache holds now (pages and snapshots).
    pub fn cached_bytes(&self) -> u64 {
        self.cache.cached_bytes()
    }

    /// KV pages held now, by sequences in flight and by the prefix cache, of
    /// [`CacheConfig::n_pages`].
    pub fn kv_pages_in_use(&self) -> usize {
        self.cache.config().n_pages as usize - self.cache.free_pages()
    }

    /// What the snapshot buffer pool has done since load (hybrid models).
    pub fn snapshot_stats(&self) -> SnapshotStats {
        self.snapshots.stats()
    }

    /// The prefix cache's page size, page bytes, pool and budget.
    pub fn cache_config(&self) -> CacheConfig {
        self.cache.config()
    }

    /// Runs one decode step of `seq` (started with [`Engine::start`], with room for one more
    /// token) on its last token, with a timestamp after every op where the device can write them
    /// inside a pass, and waits for it. The sequence is left as it was: its position, and for a
    /// hybrid model its recurrent state, are put back (the step's cache row is rewritten by the
    /// next step), so repeated calls measure the same depth and decoding on is unchanged.
    pub fn profile_step(&mut self, seq: SeqId) -> Result<StepProfile, RuntimeError> {
        let (_, last) = self.next_input(seq)?;
        let checkpoint = self.checkpoint(seq)?;
        let profile = self.run_profiled(seq, &[last], StepKind::Decode);
        self.rewind(seq, checkpoint)?;
        profile
    }

    /// Prefills `prompt` in chunks as a request without the prefix cache does, each chunk one
    /// step timed op by op like [`Engine::profile_step`], on a sequence of its own that is
    /// closed after: no sequence in flight and nothing cached changes. Needs a free sequence.
    /// The chunks are cut at position `from` and returned as those before it and those from it
    /// on, so one prefill of a prompt and a suffix profiles both the prompt and what a
    /// prefix-cache hit on the prompt computes (the suffix's steps, attending to the whole
    /// prefix).
    pub fn profile_prefill(
        &mut self,
        prompt: &[u32],
        from: usize,
    ) -> Result<(Vec<StepProfile>, Vec<StepProfile>), RuntimeError> {
        self.check_request(prompt, 0)?;
        if from >= prompt.len() {
            return Err(RuntimeError::Request(format!(
                "profiling a prefill from position {from} of a {}-token prompt",
                prompt.len()
            )));
        }
        let seq = self.open(prompt, 0, false)?;
        let chunk = self.io.max_tokens as usize;
        let (before, after) = prompt.split_at(from);
        let mut profile = |part: &[u32]| -> Result<Vec<StepProfile>, RuntimeError> {
            part.chunks(chunk)
                .map(|ids| self.run_profiled(seq, ids, StepKind::Prompt))
                .collect()
        };
        let profiles = profile(before).and_then(|b| Ok((b, profile(after)?)));
        self.close(seq, false)?;
        profiles
    }

    /// Runs one forward step of `seq` over `ids` from its position (advancing it, as any step
    /// does), with a timestamp after every op where the device has them, and waits for it.
    fn run_profiled(
        &mut self,
        seq: SeqId,
        ids: &[u32],
        kind: StepKind,
    ) -> Result<StepProfile, RuntimeError> {
        self.io.set_ids(&self.ctx, ids);
        let tokens = ids.len() as u32;
        let kv_len = self.seq(seq)?.pos as u32 + tokens;
        self.profiled(tokens, kv_len, kind, |engine, marks| {
            engine.begin_marked_step(seq, tokens, false, None, marks)
        })
    }

    /// Records a step through `record` (which notes its ops in the marks it is given) with a
    /// timestamp after every op where the device has them, submits it and waits for it:
    /// [`Engine::run_profiled`]'s one-sequence steps and [`Engine::profile_batch_step`]'s
    /// batched decode step.
    fn profiled(
        &mut self,
        tokens: u32,
        kv_len: u32,
        kind: StepKind,
        record: impl FnOnce(
            &mut Engine,
            &mut StepMarks,
        ) -> Result<(wgpu::CommandEncoder, Step), RuntimeError>,
    ) -> Result<StepProfile, RuntimeError> {
        let profiler = self.profiler.take();
        let mut marks = match &profiler {
            Some(p) => StepMarks::timed(&p.queries, kv_len, kind),
            None => StepMarks::counting(kv_len, kind),
        }
        .probing(&self.options.decode_probe);
        let (encode_before, submits_before) = (self.encode_time, self.submits);
        let result = record(self, &mut marks);
        let marks_written = marks.marks();
        let ops = std::mem::take(&mut marks.ops);
        drop(marks);
        self.profiler = profiler;
        let (mut encoder, step) = result?;
        if let Some(p) = &self.profiler {
            p.resolve(&mut encoder, marks_written);
        }
        let submitted = Instant::now();
        self.submit_step(encoder, step, None, 0);
        self.ctx
            .device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(crate::gpu::GpuError::from)?;
        let wall = submitted.elapsed();
        let op_ns = match &self.profiler {
            Some(p) => p.op_times(&self.ctx, marks_written, &ops)?,
            None => vec![None; ops.len()],
        };
        Ok(StepProfile {
            tokens,
            kv_len,
            ops,
            op_ns,
            encode: self.encode_time - encode_before,
            wall,
            submits: self.submits - submits_before,
        })
    }

    /// Whether [`Engine::profile_step`] and [`Engine::profile_prefill`] time each op on the GPU (else only whole steps on the
    /// host).
    pub fn times_ops(&self) -> bool {
        self.profiler.is_some()
    }

    /// Sets how many times later decode steps record each named op (`harness bench --probe`
    /// times several probes on one loaded model).
    pub fn set_decode_probe(&mut self, probe: DecodeProbe) {
        self.options.decode_probe = probe;
    }

    pub fn options(&self) -> &EngineOptions {
        &self.options
    }
}

/// Steps of fewer tokens than this are never chosen to make a model fit: below it a prefill
/// slows for little memory (the default step was 512 until 2026-12-06).
const LEAST_FITTED_STEP: u32 = 512;

/// `plan` with its KV pool sized for `options` on `ctx`, its step (the prefill chunk) halved,
/// down to [`LEAST_FITTED_STEP`], while the plan needs more than `available` bytes or its widest
/// activation more than one binding: the default step of 2048 tokens is the fastest prefill
/// (experiments/NOTES.md, 2026-12-06 #14), not a requirement.
fn fitted_plan(
    gguf: &Gguf,
    options: &EngineOptions,
    ctx: &GpuContext,
    mut plan: DevicePlan,
    available: Option<u64>,
) -> Result<DevicePlan, RuntimeError> {
    let max_binding = ctx.max_binding_size();
    loop {
        plan.poison = options.poison;
        plan.size_kv_pool(
            options.page_size,
            options.max_seqs as u32,
            options.cache_mem,
            KvDtype::of(ctx.paths()).bytes(),
        );
        let fits = available.is_none_or(|a| plan.total_bytes() <= a)
            && plan.widest_activation_bytes <= max_binding;
        if fits || plan.max_tokens / 2 < LEAST_FITTED_STEP {
            return Ok(plan);
        }
        plan = DevicePlan::of(gguf, options.max_context, plan.max_tokens / 2)?;
    }
}

/// Refuses pool options the kernels cannot serve, before anything is allocated.
fn check_pool_options(options: &EngineOptions, plan: &DevicePlan) -> Result<(), RuntimeError> {
    let bad = |why: String| Err(RuntimeError::Request(why));
    if !options.page_size.is_power_of_two() {
        return bad(format!(
            "KV page size {} is not a power of two",
            options.page_size
        ));
    }
    let most = (MAX_BATCH as usize)
        .min(plan.max_tokens as usize)
        .min(plan.logit_rows as usize);
    if options.max_seqs == 0 || options.max_seqs > most {
        return bad(format!(
            "{} sequences at once: this engine decodes 1..={most} per step (mat-vec batch {}, \
             prefill chunk {}, logit rows {})",
            options.max_seqs, MAX_BATCH, plan.max_tokens, plan.logit_rows
        ));
    }
    Ok(())
}
