//! `harness serve-arm` (hidden): the fak-native arm's engine process. Loads the model on the GPU
//! with `fak::runtime::Engine` and answers the JSON-lines protocol of `arms::jsonl` on
//! stdin/stdout until stdin closes. Timestamps are CLOCK_MONOTONIC, shared with the harness.
//!
//! `generate` and `logits` run one request start to end. `submit` requests (the multi-agent
//! scenario) may be in flight together: stdin is read on its own thread, so requests that
//! arrive while others decode join between decode steps, or between the prefill steps of the
//! tick they arrive in (the prefix cache, then a prefill of what it did not hold, whole: the
//! scheduler's prompt budget is unbounded here), and one batched step ([`Engine::step`])
//! serves every sequence in flight, up to `--max-seqs`; the rest wait in arrival order. Dense
//! and hybrid models alike: a hybrid model's engine keeps a recurrent-state slot per sequence.

use crate::arms::process::now_ns;
use anyhow::{Context, Result, bail};
use fak::runtime::scheduler::{self, Arrival, Client, Event, Scheduler};
use fak::runtime::{Engine, EngineOptions, PrefillPhases, SamplingParams};
use serde::Deserialize;
use serde_json::{Value, json};
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, Sender, TryRecvError, channel};
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long)]
    pub model: PathBuf,
    #[arg(long, value_parser = crate::flag_values::tokens(1))]
    pub max_context: Option<usize>,
    /// GPU memory for the prefix cache (bytes, or with a K, M or G suffix); 0 turns it off.
    #[arg(long, default_value = "0", value_parser = crate::flag_values::parse_bytes)]
    pub cache_mem: u64,
    /// Sequences one batched decode step serves (`submit` requests).
    #[arg(long, default_value_t = 1, value_parser = crate::flag_values::count(1))]
    pub max_seqs: usize,
    /// Token slots per KV page (the prefix cache shares whole pages); default the engine's.
    #[arg(long)]
    pub page_size: Option<u32>,
    /// Write the scheduler's step trace to this file (`submit` requests; as `fak serve
    /// --trace-steps`: one JSON line per forward step, `fak::runtime::trace`).
    #[arg(long)]
    pub trace_steps: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Request {
    Generate {
        prompt: Vec<u32>,
        n_out: usize,
    },
    Logits {
        ids: Vec<u32>,
        out: PathBuf,
    },
    Submit {
        id: u64,
        prompt: Vec<u32>,
        n_out: usize,
    },
}

pub fn run(args: Args) -> Result<()> {
    let started = Instant::now();
    let trace = match &args.trace_steps {
        Some(path) => Some(fak_cli::serve::StepTraceFile::create(path, started)?),
        None => None,
    };
    let mut stdout = std::io::stdout().lock();
    let (mut engine, serving) = match load(&args) {
        Ok(loaded) => loaded,
        Err(e) => {
            let msg = json!({"ready": false, "error": format!("{e:#}")});
            writeln!(stdout, "{msg}")?;
            return Err(e);
        }
    };
    let config = engine.cache_config();
    let facts = json!({
        "engine": "fak",
        "version": env!("CARGO_PKG_VERSION"),
        "adapter": engine.ctx.facts(),
        "kernel_paths": engine.ctx.paths().name(),
        "teacher_forced_rounding": engine.teacher_forced_rounding(),
        "load_s": engine.load_time.as_secs_f64(),
        "max_context": engine.max_context(),
        "prefill_step_tokens": engine.max_step_tokens(),
        "max_seqs": engine.options().max_seqs,
        "serving": serving,
        "page_size": config.page_size,
        "cache_mem": engine.options().cache_mem,
    });
    writeln!(stdout, "{}", json!({"ready": true, "facts": facts}))?;
    stdout.flush()?;
    // Every request that fits is admitted at once, as before the scheduler was shared.
    let mut scheduler = Scheduler::new(usize::MAX);
    if let Some(trace) = trace {
        trace.start(&mut scheduler, &mut engine);
    }
    Server {
        engine: &mut engine,
        out: stdout,
        scheduler,
        answers: channel(),
    }
    .serve(read_lines())
}

/// The engine with `max_seqs` sequences (within the mat-vec batch), and how it serves requests
/// that arrive together, in words.
fn load(args: &Args) -> Result<(Engine, String)> {
    let mut options = EngineOptions::from_env()?;
    options.max_context = args.max_context;
    options.cache_mem = args.cache_mem;
    if let Some(page) = args.page_size {
        options.page_size = page;
    }
    let most = fak::gpu::step::MAX_BATCH as usize;
    options.max_seqs = args.max_seqs.clamp(1, most);
    let serving = format!(
        "batched decode: one step serves up to {} sequences (at most {most} per step), each \
         joining between steps after its own prefill; more queue",
        options.max_seqs
    );
    Ok((Engine::load(&args.model, &options)?, serving))
}

/// A line of stdin and when it was read.
struct Line {
    text: String,
    /// CLOCK_MONOTONIC, as the client's timestamps (`now_ns`).
    recv_ns: u64,
    /// The same moment for the step trace (its submit time).
    arrived: Instant,
}

/// Stdin's lines on a thread of their own, each with the time it was read.
fn read_lines() -> Receiver<Line> {
    let (send, recv) = channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            let read = Line {
                text: line,
                recv_ns: now_ns(),
                arrived: Instant::now(),
            };
            if send.send(read).is_err() {
                break;
            }
        }
    });
    recv
}

/// A `submit` request's client: its tokens and their timestamps, answered with one line when
/// it finishes (or fails).
struct Submitted {
    id: u64,
    prompt_tokens: usize,
    recv_ns: u64,
    start_ns: u64,
    cached_tokens: usize,
    /// Sequences in flight when it started (itself excluded).
    in_flight_at_start: usize,
    /// The most sequences a decode step served while it was in flight.
    largest_step: usize,
    tokens: Vec<u32>,
    token_ns: Vec<u64>,
    phases: PrefillPhases,
    /// Where its finished (or failed) state goes for the answer.
    out: Sender<Answered>,
}

/// A `submit` request that finished (or failed, with why).
type Answered = (Submitted, Result<(), String>);

impl Client for Submitted {
    fn send(&mut self, event: Event) -> bool {
        match event {
            Event::Admitted => self.start_ns = now_ns(),
            Event::Started {
                cached_tokens,
                in_flight,
                phases,
                ..
            } => {
                self.cached_tokens = cached_tokens;
                self.in_flight_at_start = in_flight;
                self.phases = phases;
            }
            Event::Token { id, batch, .. } => {
                self.tokens.push(id);
                self.token_ns.push(now_ns());
                // The prefill's token counts no step: `largest_step` is decode steps only.
                if self.tokens.len() > 1 {
                    self.largest_step = self.largest_step.max(batch);
                }
            }
            Event::Finished(_) => self.answer(Ok(())),
            Event::Failed(e) => self.answer(Err(e.to_string())),
        }
        true
    }
}

impl Submitted {
    fn answer(&mut self, result: Result<(), String>) {
        let done = Submitted {
            tokens: std::mem::take(&mut self.tokens),
            token_ns: std::mem::take(&mut self.token_ns),
            out: self.out.clone(),
            ..*self
        };
        let _ = self.out.send((done, result));
    }
}

struct Server<'e, W: Write> {
    engine: &'e mut Engine,
    out: W,
    scheduler: Scheduler<Submitted>,
    answers: (Sender<Answered>, Receiver<Answered>),
}

/// A line of stdin read: a `submit` request for the scheduler, or a line the server answers
/// itself (a request that runs alone, or why the line is no request) with when it came. One
/// at a time, moved once: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
enum Read {
    Submit(Arrival<Submitted>),
    Alone(Result<Request>, u64),
}

impl Read {
    /// `line`, a `submit` request's answer to go to `answers`.
    fn new(line: Line, answers: &Sender<Answered>) -> Read {
        let Line {
            text,
            recv_ns,
            arrived,
        } = line;
        match serde_json::from_str::<Request>(&text).context("parsing the request") {
            Ok(Request::Submit { id, prompt, n_out }) => {
                let client = Submitted {
                    id,
                    prompt_tokens: prompt.len(),
                    recv_ns,
                    start_ns: 0,
                    cached_tokens: 0,
                    in_flight_at_start: 0,
                    largest_step: 0,
                    tokens: Vec::with_capacity(n_out),
                    token_ns: Vec::with_capacity(n_out),
                    phases: PrefillPhases::default(),
                    out: answers.clone(),
                };
                Read::Submit(Arrival {
                    request: scheduler::Request::greedy(prompt, n_out),
                    client,
                    arrived,
                })
            }
            other => Read::Alone(other, recv_ns),
        }
    }
}

/// The lines a tick takes between its prefill steps: `submit` lines, up to the first other one,
/// which is held for the tick's end (it runs alone), the lines behind it waiting with it.
struct MidTick<'a> {
    lines: &'a Receiver<Line>,
    answers: &'a Sender<Answered>,
    held: Option<Read>,
}

impl MidTick<'_> {
    /// The next `submit` request read, if one is there now and no line is held. A closed stdin
    /// is left for the loop between ticks to see.
    fn next(&mut self) -> Option<Arrival<Submitted>> {
        if self.held.is_some() {
            return None;
        }
        match Read::new(self.lines.try_recv().ok()?, self.answers) {
            Read::Submit(a) => Some(a),
            alone => {
                self.held = Some(alone);
                None
            }
        }
    }
}

impl<W: Write> Server<'_, W> {
    fn serve(&mut self, lines: Receiver<Line>) -> Result<()> {
        let mut open = true;
        while open || !self.scheduler.is_idle() {
            // Block for a request only when nothing is in flight.
            if open && self.scheduler.is_idle() {
                match lines.recv() {
                    Ok(line) => self.accept(Read::new(line, &self.answers.0))?,
                    Err(_) => open = false,
                }
            }
            loop {
                match lines.try_recv() {
                    Ok(line) => self.accept(Read::new(line, &self.answers.0))?,
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        open = false;
                        break;
                    }
                }
            }
            let mut mid_tick = MidTick {
                lines: &lines,
                answers: &self.answers.0,
                held: None,
            };
            self.scheduler
                .tick_with(self.engine, &mut || mid_tick.next())?;
            let held = mid_tick.held;
            while let Ok((done, result)) = self.answers.1.try_recv() {
                let answer = self.answer(done, result);
                self.say(&answer)?;
            }
            if let Some(read) = held {
                self.accept(read)?;
            }
        }
        Ok(())
    }

    fn say(&mut self, msg: &Value) -> Result<()> {
        writeln!(self.out, "{msg}")?;
        self.out.flush()?;
        Ok(())
    }

    /// A request line: `submit` queues; the others run now, when nothing is in flight.
    fn accept(&mut self, read: Read) -> Result<()> {
        let (request, recv_ns) = match read {
            Read::Submit(a) => {
                self.scheduler.submit(a.request, a.client, a.arrived);
                return Ok(());
            }
            Read::Alone(request, recv_ns) => (request, recv_ns),
        };
        let answer = match request {
            Ok(_) if !self.scheduler.is_idle() => Err(anyhow::anyhow!(
                "generate and logits run alone: {} submitted requests are in flight",
                self.scheduler.running() + self.scheduler.waiting()
            )),
            Ok(request) => serve_one(self.engine, request, recv_ns),
            Err(e) => Err(e),
        };
        let answer = answer.unwrap_or_else(|e| json!({"ok": false, "error": format!("{e:#}")}));
        self.say(&answer)
    }

    /// The answer line of a finished (or failed) `submit` request.
    fn answer(&self, a: Submitted, result: Result<(), String>) -> Value {
        if let Err(e) = result {
            return json!({"ok": false, "id": a.id, "error": e});
        }
        json!({
            "ok": true, "id": a.id, "tokens": a.tokens, "recv_ns": a.recv_ns,
            "start_ns": a.start_ns, "token_ns": a.token_ns, "reply_ns": now_ns(),
            "prompt_tokens": a.prompt_tokens, "cached_tokens": a.cached_tokens,
            "computed_tokens": a.prompt_tokens - a.cached_tokens,
            "in_flight_at_start": a.in_flight_at_start, "largest_step": a.largest_step,
            "cache_stats": self.engine.cache_stats(),
            "snapshot_stats": self.engine.snapshot_stats(),
            "prefill_phases_ns": phases_ns(&a.phases),
        })
    }
}

fn serve_one(engine: &mut Engine, request: Request, recv_ns: u64) -> Result<Value> {
    match request {
        Request::Generate { prompt, n_out } => {
            let mut token_ns = Vec::with_capacity(n_out);
            let start_ns = now_ns();
            let stats =
                engine.generate(&prompt, n_out, &SamplingParams::greedy(), true, &mut |_| {
                    token_ns.push(now_ns())
                })?;
            let reply_ns = now_ns();
            Ok(json!({
                "ok": true, "tokens": stats.tokens, "recv_ns": recv_ns, "start_ns": start_ns,
                "token_ns": token_ns, "reply_ns": reply_ns,
                "prefill_phases_ns": phases_ns(&stats.prefill_phases),
            }))
        }
        Request::Logits { ids, out } => {
            let rows = engine.teacher_forced_logits(&ids)?;
            let n_vocab = rows.first().map_or(0, Vec::len);
            if rows.len() != ids.len() {
                bail!("{} rows of logits for {} ids", rows.len(), ids.len());
            }
            let mut file = std::io::BufWriter::new(
                std::fs::File::create(&out)
                    .with_context(|| format!("creating {}", out.display()))?,
            );
            for row in &rows {
                file.write_all(bytemuck::cast_slice(row))?;
            }
            file.flush()?;
            Ok(json!({"ok": true, "rows": rows.len(), "n_vocab": n_vocab}))
        }
        Request::Submit { .. } => bail!("submit requests queue; they are not served alone"),
    }
}

/// A request's prefill phases in nanoseconds (host timestamps, `fak::runtime::PrefillPhases`).
fn phases_ns(p: &PrefillPhases) -> Value {
    let ns = |d: std::time::Duration| d.as_nanos() as u64;
    json!({
        "open": ns(p.open), "steps": ns(p.steps), "snapshots": ns(p.snapshots),
        "insert": ns(p.insert), "wait": ns(p.wait),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(text: &str) -> Line {
        Line {
            text: text.into(),
            recv_ns: now_ns(),
            arrived: Instant::now(),
        }
    }

    /// Between prefill steps a tick takes `submit` lines, and stops at the first other line (a
    /// `generate` here): it is held for after the tick, and the `submit` behind it stays on the
    /// channel, so lines are still answered in their order.
    #[test]
    fn a_tick_takes_submit_lines_up_to_the_first_other_line() {
        let (send, lines) = channel();
        let (answers, _) = channel();
        for text in [
            r#"{"op": "submit", "id": 7, "prompt": [1, 2, 3], "n_out": 4}"#,
            r#"{"op": "generate", "prompt": [1, 2], "n_out": 2}"#,
            r#"{"op": "submit", "id": 8, "prompt": [4], "n_out": 1}"#,
        ] {
            send.send(line(text)).unwrap();
        }
        let mut mid_tick = MidTick {
            lines: &lines,
            answers: &answers,
            held: None,
        };
        let first = mid_tick.next().expect("the first submit line");
        assert_eq!((first.client.id, first.request.prompt), (7, vec![1, 2, 3]));
        assert!(mid_tick.next().is_none(), "the generate line is held");
        assert!(mid_tick.next().is_none(), "the lines behind it wait");
        assert!(matches!(
            mid_tick.held,
            Some(Read::Alone(Ok(Request::Generate { .. }), _))
        ));
        let behind = lines
            .try_recv()
            .expect("the second submit line, still on the channel");
        assert!(behind.text.contains(r#""id": 8"#));
    }
}
