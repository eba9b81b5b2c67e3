//! `harness serve-arm` (hidden): the fak-native arm's engine process. Loads the model on the GPU
//! with `fak::runtime::Engine` and answers the JSON-lines protocol of `arms::jsonl` on
//! stdin/stdout until stdin closes. Timestamps are CLOCK_MONOTONIC, shared with the harness.
//!
//! `generate` and `logits` run one request start to end. `submit` requests (the multi-agent
//! scenario) may be in flight together: stdin is read on its own thread, so requests that
//! arrive while others decode join between decode steps ([`Engine::start`]: the prefix cache,
//! then a prefill of what it did not hold), and one batched step ([`Engine::step`]) serves every
//! sequence in flight, up to `--max-seqs`; the rest wait in arrival order. Dense and hybrid
//! models alike: a hybrid model's engine keeps a recurrent-state slot per sequence.

use crate::arms::process::now_ns;
use anyhow::{Context, Result, bail};
use fak::runtime::{Engine, EngineOptions, PrefillPhases, SamplingParams, SeqId};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, TryRecvError, channel};

#[derive(clap::Args)]
pub struct Args {
    #[arg(long)]
    pub model: PathBuf,
    #[arg(long, value_parser = crate::run::tokens(1))]
    pub max_context: Option<usize>,
    /// GPU memory for the prefix cache (bytes, or with a K, M or G suffix); 0 turns it off.
    #[arg(long, default_value = "0", value_parser = crate::run::parse_bytes)]
    pub cache_mem: u64,
    /// Sequences one batched decode step serves (`submit` requests).
    #[arg(long, default_value_t = 1, value_parser = crate::run::count(1))]
    pub max_seqs: usize,
    /// Token slots per KV page (the prefix cache shares whole pages); default the engine's.
    #[arg(long)]
    pub page_size: Option<u32>,
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
        "load_s": engine.load_time.as_secs_f64(),
        "max_context": engine.max_context(),
        "max_seqs": engine.options().max_seqs,
        "serving": serving,
        "page_size": config.page_size,
        "cache_mem": engine.options().cache_mem,
    });
    writeln!(stdout, "{}", json!({"ready": true, "facts": facts}))?;
    stdout.flush()?;
    Server {
        engine: &mut engine,
        out: stdout,
        queue: VecDeque::new(),
        active: Vec::new(),
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
    let most = fak::gpu::kernels::matvec::MAX_BATCH as usize;
    options.max_seqs = args.max_seqs.clamp(1, most);
    let serving = format!(
        "batched decode: one step serves up to {} sequences (at most {most} per step), each \
         joining between steps after its own prefill; more queue",
        options.max_seqs
    );
    Ok((Engine::load(&args.model, &options)?, serving))
}

/// Stdin's lines on a thread of their own, each with the time it was read.
fn read_lines() -> Receiver<(String, u64)> {
    let (send, recv) = channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if send.send((line, now_ns())).is_err() {
                break;
            }
        }
    });
    recv
}

/// A `submit` request waiting for a free sequence slot.
struct Pending {
    id: u64,
    prompt: Vec<u32>,
    n_out: usize,
    recv_ns: u64,
}

/// A `submit` request in flight.
struct Active {
    id: u64,
    seq: SeqId,
    n_out: usize,
    prompt_tokens: usize,
    cached_tokens: usize,
    recv_ns: u64,
    start_ns: u64,
    /// Sequences in flight when it started (itself excluded).
    in_flight_at_start: usize,
    /// The most sequences a decode step served while it was in flight.
    largest_step: usize,
    tokens: Vec<u32>,
    token_ns: Vec<u64>,
    phases: PrefillPhases,
}

struct Server<'e, W: Write> {
    engine: &'e mut Engine,
    out: W,
    queue: VecDeque<Pending>,
    active: Vec<Active>,
}

impl<W: Write> Server<'_, W> {
    fn serve(&mut self, lines: Receiver<(String, u64)>) -> Result<()> {
        let mut open = true;
        while open || !self.queue.is_empty() || !self.active.is_empty() {
            // Block for a request only when nothing is in flight.
            if open && self.queue.is_empty() && self.active.is_empty() {
                match lines.recv() {
                    Ok((line, at)) => self.accept(&line, at)?,
                    Err(_) => open = false,
                }
            }
            loop {
                match lines.try_recv() {
                    Ok((line, at)) => self.accept(&line, at)?,
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        open = false;
                        break;
                    }
                }
            }
            self.admit()?;
            if !self.active.is_empty() {
                self.decode_step()?;
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
    fn accept(&mut self, line: &str, recv_ns: u64) -> Result<()> {
        let answer = match serde_json::from_str::<Request>(line).context("parsing the request") {
            Ok(Request::Submit { id, prompt, n_out }) => {
                self.queue.push_back(Pending {
                    id,
                    prompt,
                    n_out,
                    recv_ns,
                });
                return Ok(());
            }
            Ok(_) if !self.active.is_empty() || !self.queue.is_empty() => Err(anyhow::anyhow!(
                "generate and logits run alone: {} submitted requests are in flight",
                self.active.len() + self.queue.len()
            )),
            Ok(request) => serve_one(self.engine, request, recv_ns),
            Err(e) => Err(e),
        };
        let answer = answer.unwrap_or_else(|e| json!({"ok": false, "error": format!("{e:#}")}));
        self.say(&answer)
    }

    /// Starts queued requests while sequence slots are free: each prefills what the prefix
    /// cache does not hold and has its first token.
    fn admit(&mut self) -> Result<()> {
        while self.active.len() < self.engine.options().max_seqs {
            let Some(p) = self.queue.pop_front() else {
                break;
            };
            let start_ns = now_ns();
            let started = self.engine.start(&p.prompt, p.n_out, false);
            let first_ns = now_ns();
            match started {
                Ok(s) => {
                    let active = Active {
                        id: p.id,
                        seq: s.seq,
                        n_out: p.n_out,
                        prompt_tokens: p.prompt.len(),
                        cached_tokens: s.cached_tokens,
                        recv_ns: p.recv_ns,
                        start_ns,
                        in_flight_at_start: self.active.len(),
                        largest_step: 0,
                        tokens: vec![s.first],
                        token_ns: vec![first_ns],
                        phases: s.phases,
                    };
                    self.active.push(active);
                }
                Err(e) => self.say(&json!({"ok": false, "id": p.id, "error": e.to_string()}))?,
            }
        }
        self.finish_done()
    }

    /// One batched decode step over every sequence in flight.
    fn decode_step(&mut self) -> Result<()> {
        let seqs: Vec<SeqId> = self.active.iter().map(|a| a.seq).collect();
        match self.engine.step(&seqs) {
            Ok(tokens) => {
                let at = now_ns();
                for (a, token) in self.active.iter_mut().zip(tokens) {
                    a.tokens.push(token);
                    a.token_ns.push(at);
                    a.largest_step = a.largest_step.max(seqs.len());
                }
                self.finish_done()
            }
            Err(e) => {
                let why = format!("decode step of {} sequences: {e}", seqs.len());
                for a in std::mem::take(&mut self.active) {
                    let _ = self.engine.finish(a.seq);
                    self.say(&json!({"ok": false, "id": a.id, "error": why}))?;
                }
                Ok(())
            }
        }
    }

    /// Answers and ends every sequence that has all its tokens (its pages go to the cache).
    fn finish_done(&mut self) -> Result<()> {
        let (done, active): (Vec<Active>, Vec<Active>) = std::mem::take(&mut self.active)
            .into_iter()
            .partition(|a| a.tokens.len() >= a.n_out);
        self.active = active;
        for a in done {
            let finished = self.engine.finish(a.seq);
            let stats = self.engine.cache_stats();
            let snapshots = self.engine.snapshot_stats();
            let answer = match finished {
                Ok(()) => json!({
                    "ok": true, "id": a.id, "tokens": a.tokens, "recv_ns": a.recv_ns,
                    "start_ns": a.start_ns, "token_ns": a.token_ns, "reply_ns": now_ns(),
                    "prompt_tokens": a.prompt_tokens, "cached_tokens": a.cached_tokens,
                    "computed_tokens": a.prompt_tokens - a.cached_tokens,
                    "in_flight_at_start": a.in_flight_at_start, "largest_step": a.largest_step,
                    "cache_stats": stats, "snapshot_stats": snapshots,
                    "prefill_phases_ns": phases_ns(&a.phases),
                }),
                Err(e) => json!({"ok": false, "id": a.id, "error": e.to_string()}),
            };
            self.say(&answer)?;
        }
        Ok(())
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
