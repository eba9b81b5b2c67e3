//! The fak-serve arm: `fak serve` (this binary started again as the hidden `harness fak-serve`,
//! the same code as the `fak` binary's) on 127.0.0.1, driven over HTTP like the llama-server arm
//! through the same client ([`http`]): each request streams `/v1/completions` with a token-id
//! prompt, greedy, exactly n_out tokens (end-of-sequence ignored), token ids in each chunk
//! (`return_token_ids`) and the usage at the end (`cached_tokens`, and the server's `timings`:
//! queue and prefill). So the multi-agent scenario compares two servers like for like;
//! fak-native keeps its JSON-lines child.

use super::http::{self, Event};
use super::process::{EngineProcess, ExitInfo, Interrupted, interrupted, now_ns};
use super::{Arm, ArmFacts, BucketKind, BucketMethod, Buckets, Done, Logits, Timed};
use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::Command;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

const LOAD_TIMEOUT: Duration = Duration::from_secs(900);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(900);
/// The name the server is started with and every request gives.
const MODEL_NAME: &str = "fak";

pub struct FakServe {
    pub model: PathBuf,
    pub max_context: usize,
    pub scratch: PathBuf,
    /// `fak-serve-cache` or `fak-serve-nocache`.
    pub label: &'static str,
    /// Prefix-cache budget in bytes; 0 turns it off.
    pub cache_mem: u64,
    /// Sequences one batched decode step serves.
    pub max_seqs: usize,
    pub page_size: Option<u32>,
    /// Where the server writes its step trace (`--trace-steps`), if anywhere.
    pub trace_steps: Option<PathBuf>,
    process: Option<EngineProcess>,
    port: u16,
    /// Answers of submitted requests, from their stream threads.
    answers: http::Answers<Streamed>,
}

/// A streamed answer and the prompt counts its usage gave.
struct Streamed {
    timed: Timed,
    prompt_tokens: usize,
    cached_tokens: usize,
}

impl FakServe {
    pub fn new(label: &'static str, model: PathBuf, max_context: usize, scratch: PathBuf) -> Self {
        FakServe {
            model,
            max_context,
            scratch,
            label,
            cache_mem: 0,
            max_seqs: 1,
            page_size: None,
            trace_steps: None,
            process: None,
            port: 0,
            answers: http::Answers::new(),
        }
    }

    fn args(&self) -> Vec<String> {
        let mut args = vec![
            "fak-serve".to_string(),
            "--model".into(),
            self.model.display().to_string(),
        ];
        for (flag, value) in [
            ("--model-name", MODEL_NAME.to_string()),
            ("--port", self.port.to_string()),
            ("--max-context", self.max_context.to_string()),
            ("--max-seqs", self.max_seqs.to_string()),
            ("--cache-mem", self.cache_mem.to_string()),
        ] {
            args.push(flag.into());
            args.push(value);
        }
        if let Some(page) = self.page_size {
            args.extend(["--page-size".into(), page.to_string()]);
        }
        if let Some(trace) = &self.trace_steps {
            args.extend(["--trace-steps".into(), trace.display().to_string()]);
        }
        args
    }

    fn process(&mut self) -> Result<&mut EngineProcess> {
        self.process.as_mut().context("fak-serve: not started")
    }

    /// The streaming request body: greedy, exactly `n_out` tokens.
    fn body(prompt: &[u32], n_out: usize) -> Value {
        json!({
            "model": MODEL_NAME, "prompt": prompt, "max_tokens": n_out, "ignore_eos": true,
            "temperature": 0.0, "stream": true, "stream_options": {"include_usage": true},
            "return_token_ids": true,
        })
    }

    fn wait_ready(&mut self) -> Result<Value> {
        let port = self.port;
        let start = Instant::now();
        loop {
            if interrupted() {
                return Err(Interrupted.into());
            }
            let process = self.process()?;
            if process.exited() {
                return Err(process.died("exited while loading the model"));
            }
            match http::request(port, "GET", "/health", None, Duration::from_secs(5)) {
                Ok(r) if r.status == 200 => return r.json(),
                _ if start.elapsed() > LOAD_TIMEOUT => {
                    let secs = LOAD_TIMEOUT.as_secs();
                    return Err(self.process()?.died(&format!("not ready after {secs} s")));
                }
                _ => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }
}

/// Reads one streamed answer to its end: token ids as their chunks arrive, then the usage (with
/// the server's timings) of the last chunk.
fn read_stream(events: &Receiver<Event>, sent_ns: u64) -> Result<Streamed> {
    let mut tokens = Vec::new();
    let mut token_ns = Vec::new();
    let mut usage = Value::Null;
    let mut status = 0;
    // An error answer is plain JSON, not SSE: its lines are kept for the error message.
    let mut error_body = String::new();
    let done_ns = loop {
        if interrupted() {
            return Err(Interrupted.into());
        }
        let event = match events.recv_timeout(Duration::from_millis(100)) {
            Ok(event) => event,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(_) => bail!("fak-serve: the stream reader stopped"),
        };
        match event {
            Event::Status(s) => status = s,
            Event::Line(line, at) => {
                let Some(data) = line.strip_prefix("data: ") else {
                    if !(200..300).contains(&status) && error_body.len() < 1000 {
                        error_body.push_str(&line);
                    }
                    continue;
                };
                if data == "[DONE]" {
                    continue;
                }
                let chunk: Value = serde_json::from_str(data).with_context(|| {
                    format!("fak-serve: a stream chunk is not JSON: {data:.200}")
                })?;
                if let Some(err) = chunk.get("error") {
                    bail!("fak-serve: HTTP {status}: {err}");
                }
                let ids = chunk["choices"][0]["token_ids"].as_array();
                for id in ids.into_iter().flatten() {
                    let id = id
                        .as_u64()
                        .context("fak-serve: a token id is not a number")?;
                    tokens.push(id as u32);
                    token_ns.push(at);
                }
                if !chunk["usage"].is_null() {
                    usage = chunk["usage"].clone();
                }
            }
            Event::End(Ok(())) => break now_ns(),
            Event::End(Err(e)) => bail!("fak-serve: the stream broke: {e:#}"),
        }
    };
    if !(200..300).contains(&status) {
        bail!("fak-serve: /v1/completions answered HTTP {status}: {error_body:.500}");
    }
    let count = |key: &str, v: &Value| {
        v.as_f64()
            .with_context(|| format!("fak-serve: no {key} in the usage {usage}"))
    };
    let prompt_ms = count("timings.prompt_ms", &usage["timings"]["prompt_ms"])?;
    let prompt_tokens = count("prompt_tokens", &usage["prompt_tokens"])? as usize;
    let cached_tokens = count(
        "prompt_tokens_details.cached_tokens",
        &usage["prompt_tokens_details"]["cached_tokens"],
    )? as usize;
    let timed = Timed::streamed(
        "fak-serve",
        (tokens, token_ns),
        (sent_ns, done_ns),
        prompt_ms,
        json!({"usage": usage}),
    )?;
    Ok(Streamed {
        timed,
        prompt_tokens,
        cached_tokens,
    })
}

impl Arm for FakServe {
    fn name(&self) -> &'static str {
        self.label
    }

    fn flags(&self) -> Value {
        json!({
            "args": self.args(), "stream": true, "endpoint": "/v1/completions",
            "cache_mem": self.cache_mem, "max_seqs": self.max_seqs, "page_size": self.page_size,
            "fak_env": super::fak_native::fak_env(),
        })
    }

    fn bucket_methods(&self) -> Buckets<BucketMethod> {
        use BucketKind::{Derived, Measured, Zero};
        let m = |kind, how| BucketMethod { kind, how };
        Buckets {
            queue: m(
                Derived,
                "derived: the first streamed token's arrival − request sent (client clock) − the server's timings.prompt_ms; waiting for a sequence plus HTTP and loopback",
            ),
            setup: m(
                Zero,
                "not measured, set to 0: ids need no tokenization, admission falls in queue",
            ),
            prefill: m(
                Measured,
                "the server's timings.prompt_ms (admitted → first token known)",
            ),
            decode: m(
                Measured,
                "arrival of the first streamed token → arrival of the last (client clock)",
            ),
            verification: m(
                Zero,
                "not measured, set to 0: no speculative decoding, nothing to verify",
            ),
            recovery: m(
                Measured,
                "server restarts after a crash, charged to the request that was lost (0: none happened)",
            ),
            other: m(
                Measured,
                "last token's arrival → the stream's end (finish and usage chunks)",
            ),
        }
    }

    fn start(&mut self) -> Result<ArmFacts> {
        self.port = http::free_port()?;
        let exe = std::env::current_exe().context("the harness executable")?;
        let mut command = Command::new(exe);
        command.args(self.args());
        let log = self.scratch.join(format!("{}.log", self.label));
        self.process = Some(EngineProcess::spawn("fak-serve", command, &log, false)?);
        let health = self.wait_ready()?;
        Ok(json!({
            "engine": "fak-serve",
            "version": health["version"],
            "adapter": health["adapter"],
            "max_seqs": health["max_seqs"],
            "health": health,
        }))
    }

    fn generate(&mut self, prompt: &[u32], n_out: usize) -> Result<Timed> {
        self.submit(0, prompt, n_out)?;
        let done = self
            .next_done(REQUEST_TIMEOUT)?
            .context("fak-serve: no answer in time")?;
        Ok(done.timed)
    }

    fn logits(&mut self, _ids: &[u32]) -> Result<Logits> {
        bail!("fak-serve: no logits over HTTP (the quality pass runs on fak-native)")
    }

    fn submit(&mut self, id: u64, prompt: &[u32], n_out: usize) -> Result<()> {
        let body = Self::body(prompt, n_out);
        let (sent_ns, events) =
            http::post_streaming(self.port, "/v1/completions", &body, REQUEST_TIMEOUT)?;
        self.answers
            .spawn(id, move || read_stream(&events, sent_ns));
        Ok(())
    }

    fn next_done(&mut self, timeout: Duration) -> Result<Option<Done>> {
        let process = self.process.as_mut().context("fak-serve: not started")?;
        let mut alive = || match process.exited() {
            true => Err(process.died("exited during a request")),
            false => Ok(()),
        };
        let Some((id, streamed)) = self.answers.next(timeout, &mut alive)? else {
            return Ok(None);
        };
        let s = streamed.with_context(|| format!("fak-serve: request {id}"))?;
        Ok(Some(Done {
            id,
            prompt_tokens: s.prompt_tokens,
            computed_tokens: s.prompt_tokens - s.cached_tokens,
            cached_tokens: s.cached_tokens,
            timed: s.timed,
        }))
    }

    fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(EngineProcess::pid)
    }

    fn stop(&mut self) -> ExitInfo {
        match self.process.take() {
            // SIGTERM: the server drains (nothing is in flight by now) and exits.
            Some(mut p) => p.stop(Duration::from_secs(1)),
            None => ExitInfo::default(),
        }
    }
}
