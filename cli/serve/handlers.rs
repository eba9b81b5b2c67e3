//! The endpoints. `/v1/chat/completions` renders the conversation through the GGUF's chat
//! template, `/v1/completions` takes text or token ids; both answer whole or stream server-sent
//! events (`data: {chunk}` … `data: [DONE]`), with `usage` counting the prompt tokens the prefix
//! cache supplied (`prompt_tokens_details.cached_tokens`).

use super::api::{self, ChatFields, Common, CompletionFields, Prompt};
use super::error::ApiError;
use super::generate::{App, Delta, Finish, Generation, Outcome};
use super::metrics;
use super::text::{Part, Reasoning, ToolCall, ToolCalls};
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{StatusCode, header};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use fak::runtime::TokenLogprobs;
use fak::runtime::scheduler::Request;
use fak::tokenizer::Tokenizer;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

type Body = Result<Bytes, BytesRejection>;

/// Counts the answer in the metrics by endpoint and status.
fn answered(app: &App, endpoint: &str, result: Result<Response, ApiError>) -> Response {
    let response = result.unwrap_or_else(IntoResponse::into_response);
    app.metrics
        .count_request(endpoint, response.status().as_u16());
    response
}

fn body_bytes(body: Body) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| {
        let status = rejection.status();
        let message = match status {
            StatusCode::PAYLOAD_TOO_LARGE => format!(
                "the body is over this server's limit ({})",
                rejection.body_text()
            ),
            _ => rejection.body_text(),
        };
        ApiError::invalid(None, message).with_status(status)
    })
}

pub async fn models(State(app): State<Arc<App>>) -> Response {
    let body = json!({"object": "list", "data": [{
        "id": app.model_name, "object": "model", "created": app.created, "owned_by": "fak",
        "max_model_len": app.loaded.max_context,
    }]});
    answered(&app, "models", Ok(axum::Json(body).into_response()))
}

pub async fn health(State(app): State<Arc<App>>) -> Response {
    let failed = app.metrics.engine_failed.get() != 0;
    let draining = app.draining.load(Ordering::SeqCst);
    let (status, state) = match (failed, draining) {
        (true, _) => (StatusCode::SERVICE_UNAVAILABLE, "engine failed"),
        (false, true) => (StatusCode::SERVICE_UNAVAILABLE, "draining"),
        (false, false) => (StatusCode::OK, "ok"),
    };
    let l = &app.loaded;
    let body = json!({
        "status": state, "model": app.model_name, "version": env!("CARGO_PKG_VERSION"),
        "adapter": l.adapter, "max_context": l.max_context, "max_seqs": l.max_seqs,
        "kv_pages": l.kv_pages, "page_size": l.page_size,
    });
    (status, axum::Json(body)).into_response()
}

pub async fn metrics(State(app): State<Arc<App>>) -> Response {
    (
        [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
        app.metrics.encode(),
    )
        .into_response()
}

/// A request that found no route.
pub async fn not_found(State(app): State<Arc<App>>, uri: axum::http::Uri) -> Response {
    let error = ApiError::invalid(None, format!("no endpoint {}", uri.path()))
        .with_status(StatusCode::NOT_FOUND);
    answered(&app, "unknown", Err(error))
}

/// What both endpoints read from a body before they differ.
struct Parsed<T> {
    common: Common,
    own: T,
}

fn parse<T: serde::de::DeserializeOwned>(app: &App, body: Body) -> Result<Parsed<T>, ApiError> {
    let body = api::parse_body(&body_bytes(body)?)?;
    let common: Common = api::fields(&body)?;
    let own: T = api::fields(&body)?;
    app.check_model(common.model.as_deref())?;
    common.check_supported()?;
    Ok(Parsed { common, own })
}

/// The engine request for a checked prompt.
fn engine_request(
    app: &App,
    common: &Common,
    (prompt_param, prompt): (&str, Vec<u32>),
    max_tokens: Option<u64>,
    default_max: Option<usize>,
    logprobs: Option<usize>,
) -> Result<Request, ApiError> {
    let sampling = common.sampling(app.next_id())?;
    let max_new = app.check_lengths(prompt_param, &prompt, max_tokens, default_max)?;
    Ok(Request {
        prompt,
        max_new,
        sampling,
        ignore_eos: common.ignore_eos,
        logprobs,
    })
}

/// OpenAI's `usage`, with the server's `timings` (an extension: queue and prefill time).
fn usage(g: &Generation, completion: usize) -> Value {
    json!({
        "prompt_tokens": g.prompt_tokens, "completion_tokens": completion,
        "total_tokens": g.prompt_tokens + completion,
        "prompt_tokens_details": {"cached_tokens": g.cached_tokens},
        "timings": g.timings(),
    })
}

/// `usage` (from [`usage`]) with the completion's token count.
fn with_completion(usage: &Value, completion: usize) -> Value {
    let mut usage = usage.clone();
    let prompt = usage["prompt_tokens"].as_u64().unwrap_or(0) as usize;
    usage["completion_tokens"] = json!(completion);
    usage["total_tokens"] = json!(prompt + completion);
    usage
}

fn sse_data(value: &Value) -> SseEvent {
    SseEvent::default().data(value.to_string())
}

/// An SSE response fed by a task through `events`.
fn sse_response(events: tokio::sync::mpsc::UnboundedReceiver<SseEvent>) -> Response {
    let stream = futures_util::stream::unfold(events, |mut rx| async move {
        rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx))
    });
    Sse::new(stream).into_response()
}

/// A token's text for logprobs (a token inside a multi-byte character shows as U+FFFD).
fn token_text(tokenizer: &Tokenizer, id: u32) -> String {
    tokenizer.decode(&[id], false).unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// /v1/completions

pub async fn completions(State(app): State<Arc<App>>, body: Body) -> Response {
    let received = Instant::now();
    let result = completions_inner(&app, body, received).await;
    answered(&app, "completions", result)
}

async fn completions_inner(
    app: &Arc<App>,
    body: Body,
    received: Instant,
) -> Result<Response, ApiError> {
    let Parsed { common, own, .. } = parse::<CompletionFields>(app, body)?;
    own.check_supported()?;
    let tokenizer = app.loaded.tokenizer.clone();
    let prompt = match own.prompt()? {
        Prompt::Tokens(ids) => ids,
        Prompt::Text(text) => tokenizer.encode(&text, true),
    };
    let logprobs = own.logprobs.map(|n| n as usize);
    // OpenAI's default for completions is 16 tokens.
    let request = engine_request(
        app,
        &common,
        ("prompt", prompt),
        common.max_tokens,
        Some(16),
        logprobs,
    )?;
    let stops = common.stops()?;
    let generation = Generation::start(app, request, stops, received).await?;
    let id = format!("cmpl-{}", app.next_id());
    let answer = Completion {
        id,
        model: app.model_name.clone(),
        created: app.created,
        return_ids: common.return_token_ids,
        logprobs: logprobs.is_some(),
    };
    let counts = usage(&generation, 0);
    if common.stream {
        let (tx, rx) = unbounded_channel();
        let include_usage = common.include_usage();
        tokio::spawn(async move {
            let send = |v: &Value| tx.send(sse_data(v)).is_ok();
            let result = generation
                .pump(&tokenizer, tx.closed(), |d| {
                    let chunk = answer.chunk(&tokenizer, &[d], None);
                    send(&chunk)
                })
                .await;
            match result {
                Ok(outcome) => {
                    send(&answer.chunk(&tokenizer, &[], Some(outcome.finish)));
                    if include_usage {
                        let mut last = answer.chunk(&tokenizer, &[], None);
                        last["choices"] = json!([]);
                        last["usage"] = with_completion(&counts, outcome.completion_tokens);
                        send(&last);
                    }
                    let _ = tx.send(SseEvent::default().data("[DONE]"));
                }
                Err(Some(e)) => {
                    send(&e.body());
                }
                Err(None) => {}
            }
        });
        return Ok(sse_response(rx));
    }
    let mut deltas = Vec::new();
    let outcome = generation
        .pump(&tokenizer, std::future::pending(), |d| {
            deltas.push(d);
            true
        })
        .await
        .map_err(|e| e.unwrap_or_else(|| ApiError::server("the request ended early")))?;
    let mut body = answer.chunk(&tokenizer, &deltas, Some(outcome.finish));
    body["object"] = json!("text_completion");
    body["usage"] = with_completion(&counts, outcome.completion_tokens);
    Ok(axum::Json(body).into_response())
}

/// How a completion answer is written.
struct Completion {
    id: String,
    model: String,
    created: u64,
    return_ids: bool,
    logprobs: bool,
}

impl Completion {
    /// A `text_completion` object over `deltas` (one streamed chunk, or the whole answer).
    fn chunk(&self, tokenizer: &Tokenizer, deltas: &[Delta], finish: Option<Finish>) -> Value {
        let text: String = deltas.iter().map(|d| d.text.as_str()).collect();
        let tokens: Vec<&(u32, Option<TokenLogprobs>)> =
            deltas.iter().filter_map(|d| d.token.as_ref()).collect();
        let mut choice = json!({
            "index": 0, "text": text, "logprobs": null,
            "finish_reason": finish.map(Finish::name),
        });
        if self.return_ids {
            choice["token_ids"] = json!(tokens.iter().map(|t| t.0).collect::<Vec<_>>());
        }
        if self.logprobs && !tokens.is_empty() {
            let (mut texts, mut lps, mut tops, mut offsets) = (vec![], vec![], vec![], vec![]);
            let mut offset = 0;
            for (id, lp) in &tokens {
                let piece = token_text(tokenizer, *id);
                offsets.push(offset);
                offset += piece.len();
                texts.push(piece);
                lps.push(lp.as_ref().map(|l| l.logprob));
                tops.push(lp.as_ref().map(|l| {
                    l.top
                        .iter()
                        .map(|&(t, p)| (token_text(tokenizer, t), json!(p)))
                        .collect::<serde_json::Map<_, _>>()
                }));
            }
            choice["logprobs"] = json!({
                "tokens": texts, "token_logprobs": lps, "top_logprobs": tops,
                "text_offset": offsets,
            });
        }
        json!({
            "id": self.id, "object": "text_completion", "created": self.created,
            "model": self.model, "choices": [choice],
        })
    }
}

// ---------------------------------------------------------------------------------------------
// /v1/chat/completions

pub async fn chat(State(app): State<Arc<App>>, body: Body) -> Response {
    let received = Instant::now();
    let result = chat_inner(&app, body, received).await;
    answered(&app, "chat_completions", result)
}

async fn chat_inner(app: &Arc<App>, body: Body, received: Instant) -> Result<Response, ApiError> {
    let Parsed { common, own } = parse::<ChatFields>(app, body)?;
    own.check_supported()?;
    let tokenizer = app.loaded.tokenizer.clone();
    let messages = own.messages_json()?;
    let tools = own.tools_json()?;
    let rendered = tokenizer
        .chat_template()
        .render_json(&messages, tools.as_deref(), true, own.enable_thinking())
        .map_err(|e| ApiError::invalid(Some("messages"), e.to_string()))?;
    let prompt = tokenizer.encode(&rendered, true);
    let max_tokens = own.max_completion_tokens.or(common.max_tokens);
    let param = match own.max_completion_tokens {
        Some(_) => "max_completion_tokens",
        None => "max_tokens",
    };
    let request = engine_request(
        app,
        &common,
        ("messages", prompt),
        max_tokens,
        None,
        own.top_logprobs(),
    )
    .map_err(|mut e| {
        if e.param.as_deref() == Some("max_tokens") {
            e.param = Some(param.into());
        }
        e
    })?;
    let stops = common.stops()?;
    let generation = Generation::start(app, request, stops, received).await?;
    let mut answer = ChatAnswer {
        id: format!("chatcmpl-{}", app.next_id()),
        model: app.model_name.clone(),
        created: app.created,
        return_ids: common.return_token_ids,
        logprobs: own.logprobs,
        reasoning: app
            .thinks
            .then(|| Reasoning::new(Reasoning::prompt_opens_think(&rendered))),
        tool_calls: own.tools_active().then(ToolCalls::new),
    };
    let counts = usage(&generation, 0);
    if common.stream {
        let (tx, rx) = unbounded_channel();
        let include_usage = common.include_usage();
        tokio::spawn(async move {
            let usage = include_usage.then_some(counts);
            stream_chat(generation, &mut answer, &tokenizer, &tx, usage).await
        });
        return Ok(sse_response(rx));
    }
    let mut parts = Answer::default();
    let outcome = generation
        .pump(&tokenizer, std::future::pending(), |d| {
            parts.add(answer.split(&tokenizer, d));
            true
        })
        .await
        .map_err(|e| e.unwrap_or_else(|| ApiError::server("the request ended early")))?;
    parts.add(answer.flush());
    let (calls, rest, finish) = answer.finish_calls(outcome.finish);
    parts.content.push_str(&rest);
    let mut message = json!({"role": "assistant", "content": parts.content});
    if answer.reasoning.is_some() {
        message["reasoning_content"] = json!(parts.reasoning);
    }
    if !calls.is_empty() {
        message["tool_calls"] = json!(answer.calls_json(&calls));
    }
    let mut choice = json!({
        "index": 0, "message": message, "finish_reason": finish,
        "logprobs": answer.logprobs.then(|| json!({"content": parts.logprobs})),
    });
    if answer.return_ids {
        choice["token_ids"] = json!(parts.ids);
    }
    Ok(axum::Json(json!({
        "id": answer.id, "object": "chat.completion", "created": answer.created,
        "model": answer.model, "choices": [choice],
        "usage": with_completion(&counts, outcome.completion_tokens),
    }))
    .into_response())
}

async fn stream_chat(
    generation: Generation,
    answer: &mut ChatAnswer,
    tokenizer: &Tokenizer,
    tx: &UnboundedSender<SseEvent>,
    usage: Option<Value>,
) {
    let send = |v: &Value| tx.send(sse_data(v)).is_ok();
    send(&answer.chunk(json!({"role": "assistant", "content": ""}), None, None));
    let result = generation
        .pump(tokenizer, tx.closed(), |d| {
            let parts = answer.split(tokenizer, d);
            answer.send_parts(&send, parts)
        })
        .await;
    let outcome: Outcome = match result {
        Ok(outcome) => outcome,
        Err(Some(e)) => {
            send(&e.body());
            return;
        }
        Err(None) => return,
    };
    let mut parts = answer.flush();
    let (calls, rest, finish) = answer.finish_calls(outcome.finish);
    parts.content.push_str(&rest);
    answer.send_parts(&send, parts);
    if !calls.is_empty() {
        let calls = answer.calls_json(&calls);
        send(&answer.chunk(json!({"tool_calls": calls}), None, None));
    }
    send(&answer.chunk(json!({}), None, Some(finish)));
    if let Some(counts) = usage {
        let mut last = answer.chunk(json!({}), None, None);
        last["choices"] = json!([]);
        last["usage"] = with_completion(&counts, outcome.completion_tokens);
        send(&last);
    }
    let _ = tx.send(SseEvent::default().data("[DONE]"));
}

/// A chat answer in the making: the reasoning split and tool-call holder it runs text through.
struct ChatAnswer {
    id: String,
    model: String,
    created: u64,
    return_ids: bool,
    logprobs: bool,
    reasoning: Option<Reasoning>,
    tool_calls: Option<ToolCalls>,
}

/// Pieces of a chat answer: reasoning, content, the tokens' logprobs entries and ids.
#[derive(Default)]
struct Answer {
    reasoning: String,
    content: String,
    logprobs: Vec<Value>,
    ids: Vec<u32>,
}

impl Answer {
    fn add(&mut self, other: Answer) {
        self.reasoning.push_str(&other.reasoning);
        self.content.push_str(&other.content);
        self.logprobs.extend(other.logprobs);
        self.ids.extend(other.ids);
    }

    fn is_empty(&self) -> bool {
        self.reasoning.is_empty()
            && self.content.is_empty()
            && self.logprobs.is_empty()
            && self.ids.is_empty()
    }
}

impl ChatAnswer {
    /// The text of `d` through the reasoning split and the tool-call holder.
    fn split(&mut self, tokenizer: &Tokenizer, d: Delta) -> Answer {
        let mut out = Answer::default();
        let parts = match &mut self.reasoning {
            Some(r) => r.push(&d.text),
            None => vec![(Part::Content, d.text)],
        };
        self.route(&mut out, parts);
        if let Some((id, lp)) = d.token {
            out.ids.push(id);
            if self.logprobs {
                out.logprobs.push(chat_logprob(tokenizer, id, lp.as_ref()));
            }
        }
        out
    }

    fn route(&mut self, out: &mut Answer, parts: Vec<(Part, String)>) {
        for (part, text) in parts {
            match part {
                Part::Reasoning => out.reasoning.push_str(&text),
                Part::Content => match &mut self.tool_calls {
                    Some(calls) => out.content.push_str(&calls.push(&text)),
                    None => out.content.push_str(&text),
                },
            }
        }
    }

    /// What the reasoning split still holds at the end.
    fn flush(&mut self) -> Answer {
        let mut out = Answer::default();
        let parts = self.reasoning.as_mut().map(Reasoning::finish);
        self.route(&mut out, parts.unwrap_or_default());
        out
    }

    /// The calls the held text parses into, the held text that was content after all, and the
    /// finish reason (`tool_calls` when there are calls).
    fn finish_calls(&mut self, finish: Finish) -> (Vec<ToolCall>, String, &'static str) {
        let Some(holder) = &mut self.tool_calls else {
            return (Vec::new(), String::new(), finish.name());
        };
        let (calls, rest) = holder.finish();
        let name = match calls.is_empty() {
            true => finish.name(),
            false => "tool_calls",
        };
        (calls, rest, name)
    }

    fn calls_json(&self, calls: &[ToolCall]) -> Vec<Value> {
        calls
            .iter()
            .enumerate()
            .map(|(i, c)| c.to_json(&self.id, i))
            .collect()
    }

    /// Sends `parts` as one delta chunk when there is anything in it.
    fn send_parts(&self, send: &impl Fn(&Value) -> bool, parts: Answer) -> bool {
        if parts.is_empty() {
            return true;
        }
        let mut delta = json!({});
        if !parts.reasoning.is_empty() {
            delta["reasoning_content"] = json!(parts.reasoning);
        }
        if !parts.content.is_empty() {
            delta["content"] = json!(parts.content);
        }
        let logprobs = self.logprobs.then(|| json!({"content": parts.logprobs}));
        let mut chunk = self.chunk(delta, logprobs, None);
        if self.return_ids {
            chunk["choices"][0]["token_ids"] = json!(parts.ids);
        }
        send(&chunk)
    }

    fn chunk(&self, delta: Value, logprobs: Option<Value>, finish: Option<&str>) -> Value {
        json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}],
        })
    }
}

/// One entry of a chat answer's `logprobs.content`.
fn chat_logprob(tokenizer: &Tokenizer, id: u32, lp: Option<&TokenLogprobs>) -> Value {
    let entry = |id: u32, logprob: f32| {
        let text = token_text(tokenizer, id);
        json!({"token": text, "logprob": logprob, "bytes": text.as_bytes()})
    };
    let Some(lp) = lp else {
        return json!({"token": token_text(tokenizer, id), "logprob": null, "bytes": null,
                      "top_logprobs": []});
    };
    let mut out = entry(id, lp.logprob);
    out["top_logprobs"] = json!(lp.top.iter().map(|&(t, p)| entry(t, p)).collect::<Vec<_>>());
    out
}
