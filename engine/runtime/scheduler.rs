//! Continuous batching over the engine's sequence API ([`Engine::begin`] /
//! [`Engine::prefill_together`] / [`Engine::step`] / [`Engine::finish`]): requests join and leave
//! between decode steps, one batched step serves every sequence decoding (up to the engine's
//! `max_seqs` in flight), and the rest wait first come, first served. What `fak serve` and the
//! benchmark's engine child (`harness serve-arm`) both drive.
//!
//! Each [`Scheduler::tick`] ends the sequences whose clients went away (decoding, prefilling or
//! waiting), admits waiting requests while a sequence is free (each takes a row and its pages,
//! reusing what the prefix cache holds, and joins the prefilling sequences; nothing is computed
//! yet), spends a budget of prompt tokens on the prefilling sequences in arrival order (several
//! prompts prefilled together in one step, the weights read once for all of them; a long prompt
//! a part at a time: it takes several ticks), and runs one decode step over the sequences whose
//! prefill is done. So the sequences already decoding wait about one budget's prefill between
//! two tokens, however long a new prompt is (at most half a budget more: a prompt that would be
//! cut but ends within half a budget past it runs whole, [`Scheduler::step_room`]). A request
//! whose KV pages do not fit while others hold pages waits at the head of the queue until they
//! finish; alone, it fails.
//!
//! A server's requests reach the scheduler between ticks ([`Scheduler::submit`]) and, through
//! [`Scheduler::tick_with`], between a tick's prefill steps: while the tick has budget left
//! after a step, the requests that arrived during it are submitted, admitted where a sequence is
//! free, and prefilled with the budget left, in this tick rather than after its decode step
//! (the same budget, so the same bound on the decoding sequences' wait). A tick that prefills
//! has taken the decode step in flight first, so nothing a step reads changes under it.
//!
//! Tokens are the GPU's greedy argmax unless a request samples, applies penalties or wants
//! log-probabilities: then the step reads its logits back and the request's [`Sampler`] chooses
//! (the engine is told the choice, which the next step feeds).

use super::engine::{PrefillPhases, SeqId, Started, StopReason};
use super::sampling::{Sampler, SamplingParams, TokenLogprobs, logprobs};
use super::trace::{TickCounts, TraceLine};
use super::{Engine, RuntimeError};
use crate::cache::{CacheError, common_prefix};
use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::time::Instant;

/// A request that reached the server at `arrived`, and where its events go: what
/// [`Scheduler::submit`] takes, from a source [`Scheduler::tick_with`] asks between steps.
pub struct Arrival<C> {
    pub request: Request,
    pub client: C,
    pub arrived: Instant,
}

/// One generation request.
#[derive(Clone, Debug)]
pub struct Request {
    pub prompt: Vec<u32>,
    /// Most tokens to generate (at least 1).
    pub max_new: usize,
    pub sampling: SamplingParams,
    /// Keep generating past end-of-generation tokens.
    pub ignore_eos: bool,
    /// Log-probabilities of each chosen token and of this many alternatives (None: none).
    pub logprobs: Option<usize>,
}

impl Request {
    /// Greedy, exactly `max_new` tokens (end-of-generation ignored): the benchmark's request.
    pub fn greedy(prompt: Vec<u32>, max_new: usize) -> Self {
        Request {
            prompt,
            max_new,
            sampling: SamplingParams::greedy(),
            ignore_eos: true,
            logprobs: None,
        }
    }

    /// Whether its tokens need the logits on the host.
    fn needs_logits(&self) -> bool {
        !self.sampling.is_greedy() || self.logprobs.is_some()
    }
}

/// What a request's client hears, in order: `Admitted`, `Started`, one `Token` per token, then
/// `Finished`; or `Failed` at any point, and nothing after.
#[derive(Debug)]
pub enum Event {
    /// It holds a sequence now; its prefill begins (a part per tick, between decode steps).
    Admitted,
    /// Prefilled; its first token follows.
    Started {
        /// The scheduler's id of the request (its order of arrival; the step trace names it).
        request: u64,
        /// Prompt tokens whose KV came from the prefix cache.
        cached_tokens: usize,
        /// Other sequences in flight (decoding or prefilling) when it started.
        in_flight: usize,
        phases: PrefillPhases,
    },
    Token {
        id: u32,
        logprobs: Option<TokenLogprobs>,
        /// Sequences the step that made it served (1 for the prefill's token).
        batch: usize,
    },
    Finished(StopReason),
    Failed(RuntimeError),
}

/// Where a request's events go.
pub trait Client {
    /// Delivers an event; false when nobody listens any more (the sequence then ends before the
    /// next step).
    fn send(&mut self, event: Event) -> bool;

    /// Whether the client went away (asked before every step, so a disconnect mid-prefill or
    /// mid-decode frees the sequence at the next one).
    fn gone(&self) -> bool {
        false
    }
}

struct Waiting<C> {
    id: u64,
    request: Request,
    client: C,
}

/// A request whose sequence holds a row and pages, its prompt not all prefilled yet.
struct Prefilling<C> {
    id: u64,
    seq: SeqId,
    request: Request,
    client: C,
}

struct Running<C> {
    id: u64,
    seq: SeqId,
    request: Request,
    sampler: Option<Sampler>,
    produced: usize,
    client: C,
}

impl<C> Running<C> {
    /// Whether the token just produced ends the request.
    fn stop(&self, engine: &Engine, token: u32) -> Option<StopReason> {
        if !self.request.ignore_eos && engine.tokenizer.is_eog(token) {
            Some(StopReason::EndOfGeneration)
        } else if self.produced >= self.request.max_new {
            Some(StopReason::Length)
        } else {
            None
        }
    }
}

pub struct Scheduler<C> {
    queue: VecDeque<Waiting<C>>,
    /// In arrival order: the head's prompt is prefilled first.
    prefilling: VecDeque<Prefilling<C>>,
    /// Decoding.
    running: Vec<Running<C>>,
    /// The decode step left in flight at the end of a tick, when one is.
    in_flight: Option<InFlight>,
    /// Prompt tokens prefilled per tick (at least one step of the oldest prefilling sequence).
    prefill_budget: usize,
    /// Requests submitted so far (the next one's id).
    submitted: u64,
    trace: Option<StepTrace>,
}

/// A decode step submitted and not yet taken ([`Engine::submit_decode`]): while only decode
/// steps of the same greedy sequences follow each other, each is recorded while the one before
/// it runs on the GPU, and its tokens are taken right after the next is submitted.
struct InFlight {
    /// Its sequences, in order.
    seqs: Vec<SeqId>,
    /// Those of them whose requests ended at a token taken after it was submitted: its token
    /// for them is dropped, and they finish once it is taken.
    ended: Vec<SeqId>,
}

/// Where the step trace goes ([`super::trace`]), and what it knows between ticks.
struct StepTrace {
    out: Box<dyn Write + Send>,
    epoch: Instant,
    ticks: u64,
    /// The tick's counts, after admission.
    counts: TickCounts,
    steps: u64,
    /// The request holding each sequence (by row), from its admission.
    holders: HashMap<u32, u64>,
    /// Lines not written yet (written once per tick).
    pending: Vec<TraceLine>,
}

impl StepTrace {
    fn ns(&self) -> u64 {
        self.ns_at(Instant::now())
    }

    fn ns_at(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.epoch).as_nanos() as u64
    }

    fn note(&mut self, line: impl FnOnce(u64) -> TraceLine) {
        let now = self.ns();
        self.pending.push(line(now));
    }

    fn begin_tick(&mut self, counts: TickCounts) {
        self.ticks += 1;
        self.counts = counts;
    }

    /// The steps the engine ran since the last call, as lines (each portion given its
    /// request): called before any other line is noted after them, so lines stay in time order
    /// (but for a submit line, stamped with its arrival).
    fn collect(&mut self, engine: &mut Engine) {
        for mut record in engine.take_logged_steps() {
            for p in &mut record.portions {
                p.request = self.holders.get(&p.seq).copied();
            }
            self.steps += 1;
            self.pending.push(TraceLine::Step {
                step: self.steps,
                tick: self.ticks,
                counts: self.counts,
                record,
            });
        }
    }

    /// The tick's last steps after its other lines, written and flushed.
    fn end_tick(&mut self, engine: &mut Engine) -> std::io::Result<()> {
        self.collect(engine);
        let mut text = Vec::new();
        for line in self.pending.drain(..) {
            serde_json::to_writer(&mut text, &line)?;
            text.push(b'\n');
        }
        if !text.is_empty() {
            self.out.write_all(&text)?;
            self.out.flush()?;
        }
        Ok(())
    }
}

impl<C: Client> Scheduler<C> {
    /// A scheduler prefilling about `prefill_budget` prompt tokens between two decode steps.
    pub fn new(prefill_budget: usize) -> Self {
        Scheduler {
            queue: VecDeque::new(),
            prefilling: VecDeque::new(),
            running: Vec::new(),
            in_flight: None,
            prefill_budget,
            submitted: 0,
            trace: None,
        }
    }

    /// Writes the step trace ([`super::trace`]) to `out` from now on, one JSON line per forward
    /// step (and per request submitted, admitted, started), flushed at the end of every tick;
    /// timestamps from `epoch`. A write that fails ends the trace (with one line on stderr), not
    /// the serving.
    pub fn trace_steps(&mut self, engine: &mut Engine, out: Box<dyn Write + Send>, epoch: Instant) {
        engine.log_steps(epoch);
        self.trace = Some(StepTrace {
            out,
            epoch,
            ticks: 0,
            counts: TickCounts::default(),
            steps: 0,
            holders: HashMap::new(),
            pending: Vec::new(),
        });
    }

    /// Queues a request that reached the server at `arrived`; it is admitted (and checked) at a
    /// later tick. Returns its id (the order of arrival, from 0), which its `Started` event and
    /// the step trace carry. The trace's submit time is `arrived`, not now: a server takes
    /// requests from its channel only between ticks and between a tick's prefill steps
    /// ([`Self::tick_with`]), so a request that came during a step waited for that step before
    /// it got here, and that wait is part of its time to first token.
    pub fn submit(&mut self, request: Request, client: C, arrived: Instant) -> u64 {
        let id = self.submitted;
        self.submitted += 1;
        let prompt_tokens = request.prompt.len();
        if let Some(trace) = &mut self.trace {
            let t_ns = trace.ns_at(arrived);
            trace.pending.push(TraceLine::Submit {
                request: id,
                t_ns,
                prompt_tokens,
            });
        }
        self.queue.push_back(Waiting {
            id,
            request,
            client,
        });
        id
    }

    pub fn is_idle(&self) -> bool {
        self.queue.is_empty()
            && self.running.is_empty()
            && self.prefilling.is_empty()
            && self.in_flight.is_none()
    }

    /// Requests waiting for a sequence.
    pub fn waiting(&self) -> usize {
        self.queue.len()
    }

    /// Sequences in flight: prefilling or decoding.
    pub fn running(&self) -> usize {
        self.running.len() + self.prefilling.len()
    }

    /// Ends gone clients' sequences, admits what fits, prefills a budget's worth, runs one
    /// decode step. An error is the engine's own failure (a request's failure goes to its
    /// client).
    pub fn tick(&mut self, engine: &mut Engine) -> Result<(), RuntimeError> {
        self.tick_with(engine, &mut || None)
    }

    /// [`Self::tick`], taking the requests that reach the server during its prefill steps
    /// from `arrivals` (each call the next one, None when none is there now): asked after each
    /// prefill step that leaves budget, what it gives is submitted, admitted where a sequence
    /// is free, and prefilled with the budget left before the tick's decode step.
    pub fn tick_with(
        &mut self,
        engine: &mut Engine,
        arrivals: &mut impl FnMut() -> Option<Arrival<C>>,
    ) -> Result<(), RuntimeError> {
        if self.in_flight.is_some() && self.must_settle(engine) {
            self.settle(engine)?;
        }
        self.drop_gone(engine)?;
        self.admit(engine)?;
        let counts = self.counts();
        if let Some(trace) = &mut self.trace {
            trace.begin_tick(counts);
        }
        self.prefill(engine, arrivals)?;
        match self.running.is_empty() {
            false => self.decode_step(engine)?,
            true => self.settle(engine)?,
        }
        if let Some(trace) = &mut self.trace
            && let Err(e) = trace.end_tick(engine)
        {
            eprintln!("the step trace stops: writing it failed: {e}");
            self.trace = None;
        }
        Ok(())
    }

    /// The requests and sequences as the trace counts them.
    fn counts(&self) -> TickCounts {
        TickCounts {
            waiting: self.queue.len(),
            prefilling: self.prefilling.len(),
            decoding: self.running.len(),
        }
    }

    /// Whether this tick does what a decode step in flight must be taken before: a client to
    /// drop, a request to admit, a prompt to prefill (each writes the inputs or the sequences
    /// that step reads). So a tick that prefills has none in flight from its first prefill
    /// step on, and may admit between its steps ([`Self::take_arrivals`]).
    fn must_settle(&self, engine: &Engine) -> bool {
        !self.prefilling.is_empty()
            || (!self.queue.is_empty() && self.running() < engine.options().max_seqs)
            || self.running.iter().any(|r| r.client.gone())
    }

    /// Takes the decode step in flight, if any: its tokens go to their requests, and the
    /// sequences whose requests ended (at this step or, for those it computed past their end,
    /// before it) finish.
    fn settle(&mut self, engine: &mut Engine) -> Result<(), RuntimeError> {
        match self.in_flight.take() {
            Some(step) => self.take_decoded(engine, step, None),
            None => Ok(()),
        }
    }

    /// Forgets the waiting requests whose clients went away and ends their sequences in
    /// flight, prefilling or decoding (what they computed goes to the prefix cache).
    fn drop_gone(&mut self, engine: &mut Engine) -> Result<(), RuntimeError> {
        self.queue.retain(|w| !w.client.gone());
        let mut gone = Vec::new();
        let mut live = |seq: SeqId, client: &C| match client.gone() {
            true => {
                gone.push(seq);
                false
            }
            false => true,
        };
        self.prefilling.retain(|p| live(p.seq, &p.client));
        self.running.retain(|r| live(r.seq, &r.client));
        for seq in gone {
            engine.finish(seq)?;
        }
        Ok(())
    }

    /// Opens a sequence for each waiting request while one is free (nothing computed: it joins
    /// the prefilling ones, and hears `Admitted`), oldest first. A request that would reuse
    /// pages a prefilling prompt is computing waits for them ([`Self::awaits_prefix`]); the
    /// requests behind it may go first.
    fn admit(&mut self, engine: &mut Engine) -> Result<(), RuntimeError> {
        let mut at = 0;
        while self.running() < engine.options().max_seqs && at < self.queue.len() {
            if self.awaits_prefix(engine, &self.queue[at].request.prompt)? {
                at += 1;
                continue;
            }
            let Some(mut w) = self.queue.remove(at) else {
                break;
            };
            let request = &w.request;
            match engine.begin(&request.prompt, request.max_new, request.needs_logits()) {
                Ok(seq) => match w.client.send(Event::Admitted) {
                    true => {
                        self.trace_admit(engine, w.id, seq)?;
                        self.prefilling.push_back(Prefilling {
                            id: w.id,
                            seq,
                            request: w.request,
                            client: w.client,
                        })
                    }
                    false => engine.finish(seq)?,
                },
                Err(RuntimeError::Cache(CacheError::OutOfPages { .. })) if self.running() > 0 => {
                    // Its pages come free as the sequences in flight finish.
                    self.queue.insert(at, w);
                    break;
                }
                Err(e) => {
                    w.client.send(Event::Failed(e));
                }
            }
        }
        Ok(())
    }

    /// The trace's note of request `id` taking sequence `seq`.
    fn trace_admit(&mut self, engine: &Engine, id: u64, seq: SeqId) -> Result<(), RuntimeError> {
        if let Some(trace) = &mut self.trace {
            let cached_tokens = engine.cached_tokens(seq)?;
            trace.holders.insert(seq.row(), id);
            trace.note(|t_ns| TraceLine::Admit {
                request: id,
                t_ns,
                seq: seq.row(),
                cached_tokens,
            });
        }
        Ok(())
    }

    /// Whether `prompt` shares at least one whole KV page, past what the cache gave it, with the
    /// prompt of a sequence still prefilling: agents arriving together with a common preamble
    /// then compute it once — the first prefills it, the others take its pages from the prefix
    /// cache when it is done — instead of each computing it in the same step. The shared part's
    /// bits are the same either way (a prompt's logits do not depend on its steps).
    fn awaits_prefix(&self, engine: &Engine, prompt: &[u32]) -> Result<bool, RuntimeError> {
        let config = engine.cache_config();
        if config.budget == 0 {
            // The cache is off: nothing would be reused, so nothing waits.
            return Ok(false);
        }
        let page = config.page_size;
        for p in &self.prefilling {
            let shared = common_prefix(prompt, &p.request.prompt) / page * page;
            if shared > engine.cached_tokens(p.seq)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Spends the tick's prompt budget on the prefilling sequences, oldest first, in steps that
    /// each prefill as many of their prompts together as the budget left ([`Self::step_room`])
    /// and one prefill chunk hold ([`Engine::prefill_together`]): the oldest gets at least one
    /// step's worth, the next ones what the budget has left; a prompt cut by the prefill chunk
    /// (not the budget) goes on in the next step. A sequence whose prompt is done hears
    /// `Started` and its first token, and decodes from the next step on. After a step, while a
    /// step's grain of budget is left, the requests that arrived meanwhile join
    /// ([`Self::take_arrivals`]) and the budget left goes on them too.
    fn prefill(
        &mut self,
        engine: &mut Engine,
        arrivals: &mut impl FnMut() -> Option<Arrival<C>>,
    ) -> Result<(), RuntimeError> {
        let mut budget = self.prefill_budget;
        while !self.prefilling.is_empty() && budget > 0 {
            let seqs: Vec<SeqId> = self.prefilling.iter().map(|p| p.seq).collect();
            let room = self.step_room(engine, budget)?;
            let parts = match engine.prefill_together(&seqs, room) {
                Ok(parts) => parts,
                Err(e) => {
                    self.fail_closed(engine, e);
                    break;
                }
            };
            let unfinished = parts.iter().any(|p| p.started.is_none());
            for part in &parts {
                budget = budget.saturating_sub(part.tokens);
            }
            // A prompt left unfinished with less than a step's grain of budget left: spent.
            let spent = unfinished && budget < engine.prompt_grain();
            if parts.is_empty() {
                break;
            }
            for part in parts {
                let Some(started) = part.started else {
                    continue;
                };
                let at = self.prefilling.iter().position(|p| p.seq == part.seq);
                let p = at
                    .and_then(|at| self.prefilling.remove(at))
                    .expect("the engine prefilled one of the prefilling sequences");
                self.start_running(engine, p, started)?;
            }
            if spent {
                // The rest of the prompt goes on next tick.
                break;
            }
            if budget >= engine.prompt_grain() {
                self.take_arrivals(engine, arrivals)?;
            }
        }
        Ok(())
    }

    /// Between two prefill steps of a tick: submits the requests `arrivals` has now, and if any
    /// came, ends gone clients' sequences and admits what fits, as a tick begins. No decode
    /// step is in flight (the tick took it before its first prefill step, [`Self::must_settle`]),
    /// so opening and ending sequences here changes nothing a step on the GPU reads.
    fn take_arrivals(
        &mut self,
        engine: &mut Engine,
        arrivals: &mut impl FnMut() -> Option<Arrival<C>>,
    ) -> Result<(), RuntimeError> {
        debug_assert!(
            self.in_flight.is_none(),
            "a tick that prefills takes the decode step in flight first"
        );
        let came: Vec<Arrival<C>> = std::iter::from_fn(arrivals).collect();
        if came.is_empty() {
            return Ok(());
        }
        if let Some(trace) = &mut self.trace {
            // The steps so far come before the new requests' lines.
            trace.collect(engine);
        }
        for a in came {
            self.submit(a.request, a.client, a.arrived);
        }
        self.drop_gone(engine)?;
        self.admit(engine)?;
        let counts = self.counts();
        if let Some(trace) = &mut self.trace {
            // The tick's later steps run these counts.
            trace.counts = counts;
        }
        Ok(())
    }

    /// The prompt tokens the next step may run with `budget` left of the tick's: the budget,
    /// or past it the prompts up to and including the one it would cut, where that one ends
    /// within half a tick's budget past it. Cut, the prompt's rest would wait a decode step and
    /// the next tick for a step that holds it anyway (a later turn of 160 tokens behind three
    /// others of a 512-token budget: its TTFT doubled); run whole, it makes the sequences
    /// decoding wait at most half a budget longer. Prompts in the order the step takes them.
    fn step_room(&self, engine: &Engine, budget: usize) -> Result<usize, RuntimeError> {
        let mut whole = 0;
        for p in &self.prefilling {
            whole += engine.prompt_left(p.seq)?;
            if whole > budget {
                let ends_soon = whole - budget <= self.prefill_budget / 2;
                return Ok(if ends_soon { whole } else { budget });
            }
        }
        Ok(budget)
    }

    /// After a failed prefill step (the engine closed its sequences): tells their clients.
    fn fail_closed(&mut self, engine: &Engine, e: RuntimeError) {
        let why = format!("a prefill step of several requests failed: {e}");
        let mut error = Some(e);
        for mut p in std::mem::take(&mut self.prefilling) {
            if engine.prompt_left(p.seq).is_ok() {
                self.prefilling.push_back(p);
                continue;
            }
            let e = error
                .take()
                .unwrap_or_else(|| RuntimeError::StepFailed(why.clone()));
            p.client.send(Event::Failed(e));
        }
    }

    /// Tells a prefilled request's client it started, with its first token, and makes it
    /// decode (unless it stops there, or nobody listens).
    fn start_running(
        &mut self,
        engine: &mut Engine,
        p: Prefilling<C>,
        started: Started,
    ) -> Result<(), RuntimeError> {
        let sampler = (!p.request.sampling.is_greedy())
            .then(|| Sampler::for_prompt(p.request.sampling.clone(), &p.request.prompt));
        let mut r = Running {
            id: p.id,
            seq: started.seq,
            request: p.request,
            sampler,
            produced: 0,
            client: p.client,
        };
        if let Some(trace) = &mut self.trace {
            trace.collect(engine);
            trace.note(|t_ns| TraceLine::Started {
                request: r.id,
                t_ns,
            });
        }
        let live = r.client.send(Event::Started {
            request: r.id,
            cached_tokens: started.cached_tokens,
            in_flight: self.running(),
            phases: started.phases,
        });
        if !live {
            // The client left during the prefill.
            return engine.finish(r.seq);
        }
        let logits = started.logits.as_deref();
        match emit(&mut r, engine, started.first, logits, 1)? {
            true => self.running.push(r),
            false => engine.finish(r.seq)?,
        }
        Ok(())
    }

    /// One batched decode step over every decoding sequence. Greedy sequences' steps are left
    /// in flight: with the step before still in flight for the same sequences (none ended, each
    /// with room for a token past it), this one is fed that step's tokens on the GPU and
    /// submitted before that step's tokens are taken, so the host records a step while the GPU
    /// runs the one before ([`Engine::submit_decode`]); the same kernels, the same bits. A
    /// request that needs its logits (sampling, log-probabilities) steps one at a time.
    fn decode_step(&mut self, engine: &mut Engine) -> Result<(), RuntimeError> {
        let seqs: Vec<SeqId> = self.running.iter().map(|r| r.seq).collect();
        let with_logits = self.running.iter().any(|r| r.request.needs_logits());
        if let Some(step) = self.in_flight.take() {
            let room = (self.running.iter()).all(|r| r.produced + 1 < r.request.max_new);
            if !with_logits && room && step.ended.is_empty() && step.seqs == seqs {
                if let Err(e) = engine.submit_decode(&seqs) {
                    return self.fail_decoding(engine, e, (1, step.ended));
                }
                return self.take_decoded(engine, step, Some(seqs));
            }
            self.take_decoded(engine, step, None)?;
            if self.running.is_empty() {
                return Ok(());
            }
            return self.decode_step(engine);
        }
        if !with_logits {
            return match engine.submit_decode(&seqs) {
                Ok(()) => {
                    let ended = Vec::new();
                    self.in_flight = Some(InFlight { seqs, ended });
                    Ok(())
                }
                Err(e) => self.fail_decoding(engine, e, (0, Vec::new())),
            };
        }
        let (tokens, rows) = match engine.step_with_logits(&seqs) {
            Ok(out) => out,
            Err(e) => return self.fail_decoding(engine, e, (0, Vec::new())),
        };
        let batch = seqs.len();
        for (i, mut r) in std::mem::take(&mut self.running).into_iter().enumerate() {
            match emit(&mut r, engine, tokens[i], Some(&rows[i]), batch)? {
                true => self.running.push(r),
                false => engine.finish(r.seq)?,
            }
        }
        Ok(())
    }

    /// Takes decode step `step` (the oldest in flight) and sends each decoding request its
    /// token. With `next` (the sequences of a step submitted after it, still in flight), the
    /// requests that end here keep their sequences open until that step is taken; else they
    /// finish now, with those `step` computed past their end.
    fn take_decoded(
        &mut self,
        engine: &mut Engine,
        step: InFlight,
        next: Option<Vec<SeqId>>,
    ) -> Result<(), RuntimeError> {
        let tokens = match engine.take_decode() {
            Ok(tokens) => tokens,
            Err(e) => {
                let left = usize::from(next.is_some());
                return self.fail_decoding(engine, e, (left, step.ended));
            }
        };
        let batch = step.seqs.len();
        let mut ended = Vec::new();
        for mut r in std::mem::take(&mut self.running) {
            let at = step.seqs.iter().position(|&s| s == r.seq);
            let token = tokens[at.expect("a decoding sequence is in its step")];
            match emit(&mut r, engine, token, None, batch)? {
                true => self.running.push(r),
                false => ended.push(r.seq),
            }
        }
        match next {
            Some(seqs) => self.in_flight = Some(InFlight { seqs, ended }),
            None => {
                for seq in step.ended.into_iter().chain(ended) {
                    engine.finish(seq)?;
                }
            }
        }
        Ok(())
    }

    /// After a decode step failed: takes the `left` steps still in flight (their results
    /// discarded), finishes the sequences of requests that had `ended`, then fails every
    /// decoding request and finishes its sequence.
    fn fail_decoding(
        &mut self,
        engine: &mut Engine,
        e: RuntimeError,
        (left, ended): (usize, Vec<SeqId>),
    ) -> Result<(), RuntimeError> {
        for _ in 0..left {
            let _ = engine.take_decode();
        }
        for seq in ended {
            engine.finish(seq)?;
        }
        let why = format!("decode step of {} sequences: {e}", self.running.len());
        for mut r in std::mem::take(&mut self.running) {
            engine.finish(r.seq)?;
            r.client
                .send(Event::Failed(RuntimeError::StepFailed(why.clone())));
        }
        Ok(())
    }
}

/// Chooses the token a step produced for `r` (the GPU's argmax, or its sampler's choice from
/// `logits`, which the engine is then told) and sends it, with `Finished` when it ends the
/// request. Returns whether the request goes on: false when it ended or nobody listens (the
/// caller then finishes its sequence).
fn emit<C: Client>(
    r: &mut Running<C>,
    engine: &mut Engine,
    argmax: u32,
    logits: Option<&[f32]>,
    batch: usize,
) -> Result<bool, RuntimeError> {
    let token = match (&mut r.sampler, logits) {
        (Some(sampler), Some(logits)) => {
            let token = sampler.sample(logits);
            if token != argmax {
                engine.set_last_token(r.seq, token)?;
            }
            token
        }
        _ => argmax,
    };
    let lp = r
        .request
        .logprobs
        .zip(logits)
        .map(|(top, logits)| logprobs(logits, token, top));
    r.produced += 1;
    let stop = r.stop(engine, token);
    let live = r.client.send(Event::Token {
        id: token,
        logprobs: lp,
        batch,
    });
    match (live, stop) {
        (true, None) => Ok(true),
        (live, stop) => {
            if let (true, Some(reason)) = (live, stop) {
                r.client.send(Event::Finished(reason));
            }
            Ok(false)
        }
    }
}
