//! The engine's own thread: it loads the model, owns the [`Engine`] and every wgpu object, and
//! drives the shared [`Scheduler`] (continuous batching) over requests that arrive on a channel.
//! Each request's events go back on a channel of its own; a request whose receiver was dropped
//! (the client went away, or a stop string ended it) is ended before the next step.

use super::metrics::Metrics;
use anyhow::{Context, Result};
use fak::runtime::scheduler::{Arrival, Client, Event, Request, Scheduler};
use fak::runtime::{Engine, EngineOptions};
use fak::tokenizer::Tokenizer;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, TryRecvError, channel};
use std::thread::JoinHandle;
use std::time::Instant;
use tokio::sync::mpsc::UnboundedSender;

/// A request for the engine thread and where its events go.
pub struct Submission {
    pub request: Request,
    pub events: UnboundedSender<Event>,
    /// When the HTTP handler had the request (the step trace's submit time).
    pub arrived: Instant,
}

struct Sink(UnboundedSender<Event>);

impl Client for Sink {
    fn send(&mut self, event: Event) -> bool {
        self.0.send(event).is_ok()
    }

    fn gone(&self) -> bool {
        self.0.is_closed()
    }
}

/// Where the scheduler's step trace goes (`--trace-steps`), opened before the model loads so a
/// bad path fails at once; timestamps count from `epoch` (the server's start).
pub struct StepTraceFile {
    file: std::fs::File,
    epoch: Instant,
}

impl StepTraceFile {
    pub fn create(path: &Path, epoch: Instant) -> Result<StepTraceFile> {
        let file = std::fs::File::create(path)
            .with_context(|| format!("creating the step trace {}", path.display()))?;
        Ok(StepTraceFile { file, epoch })
    }

    /// Turns the trace on for `scheduler`'s steps on `engine`.
    pub fn start<C: Client>(self, scheduler: &mut Scheduler<C>, engine: &mut Engine) {
        let out = Box::new(BufWriter::new(self.file));
        scheduler.trace_steps(engine, out, self.epoch);
    }
}

/// What the HTTP side knows of the loaded model.
pub struct Loaded {
    pub tokenizer: Arc<Tokenizer>,
    pub max_context: usize,
    pub n_vocab: usize,
    pub max_seqs: usize,
    pub kv_pages: usize,
    pub page_size: usize,
    pub adapter: String,
}

pub struct EngineThread {
    pub commands: Sender<Submission>,
    thread: JoinHandle<()>,
}

impl EngineThread {
    /// Loads `model` on a new thread and returns once it is ready (or failed to load). The
    /// scheduler prefills `prefill_budget` prompt tokens a tick, and writes its step trace where
    /// one is given.
    pub fn spawn(
        model: PathBuf,
        options: EngineOptions,
        prefill_budget: usize,
        trace: Option<StepTraceFile>,
        metrics: Arc<Metrics>,
    ) -> Result<(EngineThread, Loaded)> {
        let (commands, requests) = channel();
        let (ready, loaded) = channel();
        let thread = std::thread::Builder::new()
            .name("fak-engine".into())
            .spawn(move || {
                let mut engine = match Engine::load(&model, &options) {
                    Ok(engine) => engine,
                    Err(e) => {
                        let _ = ready
                            .send(Err(anyhow::Error::from(e)
                                .context(format!("loading {}", model.display()))));
                        return;
                    }
                };
                let config = engine.cache_config();
                let loaded = Loaded {
                    tokenizer: engine.tokenizer.clone(),
                    max_context: engine.max_context(),
                    n_vocab: engine.n_vocab(),
                    max_seqs: engine.options().max_seqs,
                    kv_pages: config.n_pages as usize,
                    page_size: config.page_size,
                    adapter: engine.ctx.facts().name.clone(),
                };
                metrics.kv_pages_total.set(loaded.kv_pages as i64);
                if ready.send(Ok(loaded)).is_ok() {
                    let mut scheduler = Scheduler::new(prefill_budget);
                    if let Some(trace) = trace {
                        trace.start(&mut scheduler, &mut engine);
                    }
                    serve(&mut engine, scheduler, requests, &metrics);
                }
            })
            .context("starting the engine thread")?;
        let loaded = loaded
            .recv()
            .context("the engine thread ended while loading")??;
        Ok((EngineThread { commands, thread }, loaded))
    }

    /// Waits for the engine thread to end (every sender of requests dropped, in-flight requests
    /// done).
    pub fn join(self) {
        drop(self.commands);
        let _ = self.thread.join();
    }
}

/// Runs requests until every sender is gone and nothing is in flight. An engine failure (not a
/// request's) ends the thread: the requests in flight see their channels close. Requests that
/// arrive during a tick's prefill steps join that tick ([`Scheduler::tick_with`]).
fn serve(
    engine: &mut Engine,
    mut scheduler: Scheduler<Sink>,
    requests: Receiver<Submission>,
    metrics: &Metrics,
) {
    let mut open = true;
    while open || !scheduler.is_idle() {
        if open && scheduler.is_idle() {
            match requests.recv() {
                Ok(s) => {
                    let a = arrival(s);
                    scheduler.submit(a.request, a.client, a.arrived);
                }
                Err(_) => break,
            }
        }
        while let Some(a) = next_arrival(&requests, &mut open) {
            scheduler.submit(a.request, a.client, a.arrived);
        }
        let mut arrivals = || next_arrival(&requests, &mut open);
        if let Err(e) = scheduler.tick_with(engine, &mut arrivals) {
            eprintln!("fak serve: the engine failed, no more requests are served: {e}");
            metrics.engine_failed.set(1);
            return;
        }
        metrics.waiting.set(scheduler.waiting() as i64);
        metrics.running.set(scheduler.running() as i64);
        metrics.kv_pages_in_use.set(engine.kv_pages_in_use() as i64);
    }
}

/// The next request on the channel, if one is there now; `open` turns false once every sender
/// is gone.
fn next_arrival(requests: &Receiver<Submission>, open: &mut bool) -> Option<Arrival<Sink>> {
    match requests.try_recv() {
        Ok(s) => Some(arrival(s)),
        Err(TryRecvError::Empty) => None,
        Err(TryRecvError::Disconnected) => {
            *open = false;
            None
        }
    }
}

fn arrival(s: Submission) -> Arrival<Sink> {
    Arrival {
        request: s.request,
        client: Sink(s.events),
        arrived: s.arrived,
    }
}
