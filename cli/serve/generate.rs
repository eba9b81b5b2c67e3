//! One generation request on the HTTP side: admission (the queue limit, draining), submission to
//! the engine thread, and the events turned into text pieces — detokenized as they come, cut at
//! stop strings — with the metrics each one feeds. Both endpoints, streaming or not, go through
//! [`Generation`].

use super::engine::{Loaded, Submission};
use super::error::ApiError;
use super::metrics::Metrics;
use super::text::StopStrings;
use axum::http::StatusCode;
use fak::cache::CacheError;
use fak::runtime::scheduler::{Event, Request};
use fak::runtime::{RuntimeError, StopReason, TokenLogprobs};
use fak::tokenizer::Tokenizer;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

/// What every handler shares.
pub struct App {
    pub commands: std::sync::mpsc::Sender<Submission>,
    pub loaded: Loaded,
    /// The name `/v1/models` lists and requests may give.
    pub model_name: String,
    pub metrics: Arc<Metrics>,
    /// Generation requests admitted and not yet answered.
    outstanding: AtomicUsize,
    /// The most that may be: sequences in flight plus the queue.
    max_outstanding: usize,
    /// Set on SIGTERM: new requests are refused while those in flight finish.
    pub draining: AtomicBool,
    next_id: AtomicU64,
    /// Unix seconds when the server started (`created` of the model).
    pub created: u64,
    /// The chat template writes `<think>` blocks (Qwen3): answers are split into reasoning and
    /// content.
    pub thinks: bool,
}

impl App {
    pub fn new(
        commands: std::sync::mpsc::Sender<Submission>,
        loaded: Loaded,
        model_name: String,
        metrics: Arc<Metrics>,
        max_queue: usize,
    ) -> App {
        let thinks = loaded
            .tokenizer
            .chat_template()
            .source()
            .contains("<think>");
        let max_outstanding = loaded.max_seqs + max_queue;
        App {
            commands,
            loaded,
            model_name,
            metrics,
            outstanding: AtomicUsize::new(0),
            max_outstanding,
            draining: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
            created: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            thinks,
        }
    }

    /// A fresh request number (ids, and the seed of a request that gives none).
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// 404 unless `model` is absent or the name this server serves.
    pub fn check_model(&self, model: Option<&str>) -> Result<(), ApiError> {
        match model {
            Some(name) if name != self.model_name => Err(ApiError::invalid(
                Some("model"),
                format!(
                    "the model {name:?} does not exist: this server serves {:?}",
                    self.model_name
                ),
            )
            .with_status(StatusCode::NOT_FOUND)
            .with_code("model_not_found")),
            _ => Ok(()),
        }
    }

    /// Checks a prompt against the vocabulary and the context, and resolves `max_tokens`
    /// (`default_max` when absent; None: the rest of the context).
    pub fn check_lengths(
        &self,
        prompt_param: &str,
        prompt: &[u32],
        max_tokens: Option<u64>,
        default_max: Option<usize>,
    ) -> Result<usize, ApiError> {
        let context = self.loaded.max_context;
        if prompt.is_empty() {
            return Err(ApiError::invalid(Some(prompt_param), "the prompt is empty"));
        }
        if let Some(bad) = prompt.iter().find(|&&t| t as usize >= self.loaded.n_vocab) {
            return Err(ApiError::invalid(
                Some(prompt_param),
                format!(
                    "token id {bad} is outside the vocabulary of {}",
                    self.loaded.n_vocab
                ),
            ));
        }
        if prompt.len() >= context {
            return Err(ApiError::invalid(
                Some(prompt_param),
                format!(
                    "the prompt has {} tokens; this server's context holds {context}, with room \
                     for at least one generated token",
                    prompt.len()
                ),
            )
            .with_code("context_length_exceeded"));
        }
        let room = context - prompt.len();
        match max_tokens {
            Some(n) if n as usize > room => Err(ApiError::invalid(
                Some("max_tokens"),
                format!(
                    "max_tokens {n} with a prompt of {} tokens exceeds the context of {context} \
                     tokens (at most {room})",
                    prompt.len()
                ),
            )
            .with_code("context_length_exceeded")),
            Some(n) => Ok(n as usize),
            None => Ok(default_max.map_or(room, |d| d.min(room))),
        }
    }
}

/// A place among the requests the server holds; given back when dropped.
struct Slot(Arc<App>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.outstanding.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A piece of the answer: text that is certain now, and the token that produced it (none for
/// text flushed at the end).
pub struct Delta {
    pub text: String,
    pub token: Option<(u32, Option<TokenLogprobs>)>,
}

/// Why the answer ended, as OpenAI names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    Stop,
    Length,
}

impl Finish {
    pub fn name(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
        }
    }
}

pub struct Outcome {
    pub finish: Finish,
    pub completion_tokens: usize,
}

/// A request the engine has started: its prompt is prefilled and its tokens are coming.
pub struct Generation {
    app: Arc<App>,
    events: UnboundedReceiver<Event>,
    _slot: Slot,
    received: Instant,
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    /// The engine's id of the request (what the step trace names it by).
    pub request: u64,
    /// Received → its prefill began (waiting for a sequence), and the prefill up to its first
    /// token (the server's clock).
    pub queue: Duration,
    pub prefill: Duration,
    stops: StopStrings,
}

impl Generation {
    /// Admits `request` (429 when the queue is full, 503 while draining), hands it to the engine
    /// and waits until its prefill is done, so a request the engine refuses gets its 4xx before
    /// any answer starts. Dropping the future (the client left) withdraws the request.
    pub async fn start(
        app: &Arc<App>,
        request: Request,
        stops: Vec<String>,
        received: Instant,
    ) -> Result<Generation, ApiError> {
        if app.draining.load(Ordering::SeqCst) {
            return Err(ApiError::unavailable(
                StatusCode::SERVICE_UNAVAILABLE,
                "the server is shutting down",
                5,
            ));
        }
        let held = app.outstanding.fetch_add(1, Ordering::SeqCst);
        let slot = Slot(app.clone());
        if held >= app.max_outstanding {
            return Err(ApiError::unavailable(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "the server holds {held} requests, its most ({} in flight, the rest queued): \
                     retry later",
                    app.max_outstanding
                ),
                1,
            ));
        }
        let prompt_tokens = request.prompt.len();
        let (events, mut rx) = unbounded_channel();
        app.commands
            .send(Submission {
                request,
                events,
                arrived: received,
            })
            .map_err(|_| engine_stopped())?;
        let mut admitted = received;
        let (request, cached_tokens) = loop {
            match rx.recv().await {
                Some(Event::Admitted) => admitted = Instant::now(),
                Some(Event::Started {
                    request,
                    cached_tokens,
                    ..
                }) => break (request, cached_tokens),
                Some(Event::Failed(e)) => return Err(refused(e)),
                Some(other) => {
                    return Err(ApiError::server(format!(
                        "the engine sent {other:?} before the request started"
                    )));
                }
                None => return Err(engine_stopped()),
            }
        };
        app.metrics.prompt_tokens.inc_by(prompt_tokens as u64);
        app.metrics
            .prefix_cache_hit_tokens
            .inc_by(cached_tokens as u64);
        Ok(Generation {
            app: app.clone(),
            events: rx,
            _slot: slot,
            received,
            prompt_tokens,
            cached_tokens,
            request,
            queue: admitted - received,
            prefill: admitted.elapsed(),
            stops: StopStrings::new(stops),
        })
    }

    /// `queue_ms` and `prompt_ms` (as llama-server names its prefill time) for the `timings`
    /// the final usage carries, and the request's id in the step trace (`request`).
    pub fn timings(&self) -> serde_json::Value {
        serde_json::json!({
            "queue_ms": self.queue.as_secs_f64() * 1e3,
            "prompt_ms": self.prefill.as_secs_f64() * 1e3,
            "request": self.request,
        })
    }

    /// Hands each piece of the answer to `sink` until the request ends, a stop string ends it,
    /// `gone` completes, or `sink` says nobody listens (Err(None) for the last two). Returning
    /// drops the request's channel: the engine ends its sequence before its next step.
    pub async fn pump(
        mut self,
        tokenizer: &Tokenizer,
        gone: impl Future<Output = ()>,
        mut sink: impl FnMut(Delta) -> bool,
    ) -> Result<Outcome, Option<ApiError>> {
        let mut decoder = tokenizer.stream_decoder(false);
        let mut last: Option<Instant> = None;
        let mut produced = 0;
        tokio::pin!(gone);
        loop {
            let event = tokio::select! {
                event = self.events.recv() => event,
                () = &mut gone => return Err(None),
            };
            match event {
                Some(Event::Token { id, logprobs, .. }) => {
                    let now = Instant::now();
                    let metrics = &self.app.metrics;
                    match last {
                        None => metrics
                            .time_to_first_token
                            .observe((now - self.received).as_secs_f64()),
                        Some(before) => metrics
                            .inter_token_latency
                            .observe((now - before).as_secs_f64()),
                    }
                    last = Some(now);
                    produced += 1;
                    metrics.generation_tokens.inc();
                    let piece = decoder
                        .push(id)
                        .map_err(|e| Some(ApiError::server(e.to_string())))?
                        .unwrap_or_default();
                    let (text, stopped) = self.stops.push(&piece);
                    if !sink(Delta {
                        text,
                        token: Some((id, logprobs)),
                    }) {
                        return Err(None);
                    }
                    if stopped {
                        return Ok(Outcome {
                            finish: Finish::Stop,
                            completion_tokens: produced,
                        });
                    }
                }
                Some(Event::Finished(reason)) => {
                    let (mut text, stopped) = self.stops.push(&decoder.finish());
                    if !stopped {
                        text.push_str(&self.stops.finish());
                    }
                    if !text.is_empty() && !sink(Delta { text, token: None }) {
                        return Err(None);
                    }
                    let finish = match (stopped, reason) {
                        (false, StopReason::Length) => Finish::Length,
                        _ => Finish::Stop,
                    };
                    return Ok(Outcome {
                        finish,
                        completion_tokens: produced,
                    });
                }
                Some(Event::Failed(e)) => return Err(Some(refused(e))),
                Some(Event::Admitted | Event::Started { .. }) => {}
                None => return Err(Some(engine_stopped())),
            }
        }
    }
}

fn engine_stopped() -> ApiError {
    ApiError::unavailable(
        StatusCode::SERVICE_UNAVAILABLE,
        "the engine stopped: no request can be served",
        30,
    )
}

/// The engine's refusal as an API error: a request it cannot serve is the client's (400), a
/// request whose KV pages the whole pool cannot hold too, anything else the server's.
fn refused(e: RuntimeError) -> ApiError {
    match e {
        RuntimeError::Request(why) => ApiError::invalid(None, why),
        RuntimeError::Cache(e @ CacheError::OutOfPages { .. }) => ApiError::invalid(
            Some("max_tokens"),
            format!("the request needs more KV memory than the server has: {e}"),
        ),
        other => ApiError::server(other.to_string()),
    }
}
