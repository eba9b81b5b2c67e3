//! Continuous batching over the engine's sequence API ([`Engine::start`] / [`Engine::step`] /
//! [`Engine::finish`]): requests join and leave between decode steps, one batched step serves
//! every sequence in flight (up to the engine's `max_seqs`), and the rest wait first come, first
//! served. What `fak serve` and the benchmark's engine child (`harness serve-arm`) both drive.
//!
//! Each [`Scheduler::tick`] ends the sequences whose clients went away, admits waiting requests
//! (each prefilled alone: the prefix cache, then what it did not hold) up to a budget of prompt
//! tokens per tick, so a burst of arrivals cannot stall the sequences already decoding for more
//! than about one budget's prefill, then runs one decode step. A request whose KV pages do not fit
//! while others hold pages waits at the head of the queue until they finish; alone, it fails.
//!
//! Tokens are the GPU's greedy argmax unless a request samples, applies penalties or wants
//! log-probabilities: then the step reads its logits back and the request's [`Sampler`] chooses
//! (the engine is told the choice, which the next step feeds).

use super::engine::{PrefillPhases, SeqId, StopReason};
use super::sampling::{Sampler, SamplingParams, TokenLogprobs, logprobs};
use super::{Engine, RuntimeError};
use crate::cache::CacheError;
use std::collections::VecDeque;

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
    /// Its prefill begins now.
    Admitted,
    /// Prefilled; its first token follows.
    Started {
        /// Prompt tokens whose KV came from the prefix cache.
        cached_tokens: usize,
        /// Other sequences in flight when it started.
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
    request: Request,
    client: C,
}

struct Running<C> {
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
    running: Vec<Running<C>>,
    /// Prompt tokens admitted per tick beyond the first request (which is always admitted).
    prefill_budget: usize,
}

impl<C: Client> Scheduler<C> {
    /// A scheduler admitting about `prefill_budget` prompt tokens between two decode steps.
    pub fn new(prefill_budget: usize) -> Self {
        Scheduler {
            queue: VecDeque::new(),
            running: Vec::new(),
            prefill_budget,
        }
    }

    /// Queues a request; it is admitted (and checked) at a later tick.
    pub fn submit(&mut self, request: Request, client: C) {
        self.queue.push_back(Waiting { request, client });
    }

    pub fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.running.is_empty()
    }

    /// Requests waiting for a sequence.
    pub fn waiting(&self) -> usize {
        self.queue.len()
    }

    /// Sequences in flight.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Ends gone clients' sequences, admits what fits, runs one decode step. An error is the
    /// engine's own failure (a request's failure goes to its client).
    pub fn tick(&mut self, engine: &mut Engine) -> Result<(), RuntimeError> {
        self.queue.retain(|w| !w.client.gone());
        let (gone, running): (Vec<_>, Vec<_>) = std::mem::take(&mut self.running)
            .into_iter()
            .partition(|r| r.client.gone());
        self.running = running;
        for r in gone {
            engine.finish(r.seq)?;
        }
        self.admit(engine)?;
        if !self.running.is_empty() {
            self.decode_step(engine)?;
        }
        Ok(())
    }

    /// Starts waiting requests while a sequence is free and the tick's prompt budget lasts.
    fn admit(&mut self, engine: &mut Engine) -> Result<(), RuntimeError> {
        let mut budget = self.prefill_budget;
        let mut admitted = 0;
        while self.running.len() < engine.options().max_seqs {
            let Some(mut w) = self.queue.pop_front() else {
                break;
            };
            if admitted > 0 && w.request.prompt.len() > budget {
                self.queue.push_front(w);
                break;
            }
            budget = budget.saturating_sub(w.request.prompt.len());
            admitted += 1;
            if !w.client.send(Event::Admitted) {
                continue;
            }
            let request = &w.request;
            match engine.start(&request.prompt, request.max_new, request.needs_logits()) {
                Ok(started) => {
                    let in_flight = self.running.len();
                    let sampler = (!request.sampling.is_greedy())
                        .then(|| Sampler::for_prompt(request.sampling.clone(), &request.prompt));
                    let mut r = Running {
                        seq: started.seq,
                        request: w.request,
                        sampler,
                        produced: 0,
                        client: w.client,
                    };
                    let live = r.client.send(Event::Started {
                        cached_tokens: started.cached_tokens,
                        in_flight,
                        phases: started.phases,
                    });
                    if !live {
                        // The client left during the prefill.
                        engine.finish(r.seq)?;
                        continue;
                    }
                    let logits = started.logits.as_deref();
                    if emit(engine, &mut r, started.first, logits, 1)? {
                        self.running.push(r);
                    }
                }
                Err(RuntimeError::Cache(CacheError::OutOfPages { .. }))
                    if !self.running.is_empty() =>
                {
                    // Its pages come free as the sequences in flight finish.
                    self.queue.push_front(w);
                    break;
                }
                Err(e) => {
                    w.client.send(Event::Failed(e));
                }
            }
        }
        Ok(())
    }

    /// One batched decode step over every sequence in flight.
    fn decode_step(&mut self, engine: &mut Engine) -> Result<(), RuntimeError> {
        let seqs: Vec<SeqId> = self.running.iter().map(|r| r.seq).collect();
        let with_logits = self.running.iter().any(|r| r.request.needs_logits());
        let stepped = match with_logits {
            true => engine.step_with_logits(&seqs),
            false => engine.step(&seqs).map(|tokens| (tokens, Vec::new())),
        };
        let (tokens, rows) = match stepped {
            Ok(out) => out,
            Err(e) => {
                let why = format!("decode step of {} sequences: {e}", seqs.len());
                for mut r in std::mem::take(&mut self.running) {
                    engine.finish(r.seq)?;
                    r.client
                        .send(Event::Failed(RuntimeError::Request(why.clone())));
                }
                return Ok(());
            }
        };
        let batch = seqs.len();
        let running = std::mem::take(&mut self.running);
        for (i, mut r) in running.into_iter().enumerate() {
            let logits = rows.get(i).map(Vec::as_slice);
            if emit(engine, &mut r, tokens[i], logits, batch)? {
                self.running.push(r);
            }
        }
        Ok(())
    }
}

/// Chooses the token a step produced for `r` (the GPU's argmax, or its sampler's choice from
/// `logits`, which the engine is then told), sends it, and ends the sequence when it stops or
/// nobody listens. Returns whether it goes on.
fn emit<C: Client>(
    engine: &mut Engine,
    r: &mut Running<C>,
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
            engine.finish(r.seq)?;
            if let (true, Some(reason)) = (live, stop) {
                r.client.send(Event::Finished(reason));
            }
            Ok(false)
        }
    }
}
