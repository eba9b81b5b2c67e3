//! The JSON-lines protocol of the engine children (fak's `harness serve-arm` and the MLX
//! driver). One request per line on stdin, one answer per line on stdout:
//!
//! - on start, `{"ready": true, "facts": {...}}` once the model is loaded, or
//!   `{"ready": false, "error": "..."}` and exit;
//! - `{"op": "generate", "prompt": [ids], "n_out": n}` →
//!   `{"ok": true, "tokens": [...], "recv_ns", "start_ns", "token_ns": [...], "reply_ns"}`:
//!   the child's CLOCK_MONOTONIC when it had read the request, when it called the engine's
//!   generation loop, when each token was known, and when it began writing the answer;
//! - `{"op": "logits", "ids": [ids], "out": path}` → `{"ok": true, "rows", "n_vocab"}` with
//!   the logits after each id written to `path` as little-endian f32 `[rows, n_vocab]`;
//! - `{"op": "submit", "id": k, "prompt": [ids], "n_out": n}` (the multi-agent scenario):
//!   several may be in flight; each is answered, in whatever order they finish, like
//!   `generate` plus `"id": k` and the prompt tokens the engine computed and reused
//!   (`"prompt_tokens"`, `"computed_tokens"`, `"cached_tokens"`);
//! - fak's answers also say where the host time until the first token went
//!   (`"prefill_phases_ns"`: open, steps, snapshots, insert, wait) and, for `submit`, what its
//!   prefix cache and snapshot pool have done (`"cache_stats"`, `"snapshot_stats"`); like every
//!   field besides the tokens, they land in the raw file's engine report;
//! - any failure → `{"ok": false, "error": "..."}` (with the `id` of a submitted request). EOF
//!   on stdin stops the child.

use super::process::{EngineProcess, ExitInfo, now_ns};
use super::{Arm, ArmFacts, BucketKind, BucketMethod, Buckets, Done, Logits, Timed};
use anyhow::{Context, Result, anyhow, bail};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// How long a loading engine may take before it is declared stuck.
const LOAD_TIMEOUT: Duration = Duration::from_secs(900);
/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(900);

/// How the buckets are measured for a JSON-lines child.
pub const BUCKET_METHODS: Buckets<BucketMethod> = Buckets {
    queue: measured(
        "harness wrote the request line → the child had read it (both CLOCK_MONOTONIC)",
    ),
    setup: measured(
        "the child had read the request → it called the generation loop (parse, ids to the engine's array)",
    ),
    prefill: measured("generation loop called → first token known in the child"),
    decode: measured("first token → last token known in the child"),
    verification: BucketMethod {
        kind: BucketKind::Zero,
        how: "not measured, set to 0: no speculative decoding, nothing to verify",
    },
    recovery: measured(
        "engine restarts after a crash, charged to the request that was lost (0: none happened)",
    ),
    other: measured(
        "last token known in the child → the harness had its answer line (loop exit, JSON, pipe)",
    ),
};

const fn measured(how: &'static str) -> BucketMethod {
    BucketMethod {
        kind: BucketKind::Measured,
        how,
    }
}

/// What sets one JSON-lines engine apart from the other: its name, flags and the command that
/// starts it. [`JsonlArm`] is the [`Arm`] of any of them.
pub trait JsonlChild {
    /// The arm's name (`fak-native`, `mlx`, or a scenario arm's label).
    fn name(&self) -> &'static str;
    /// The flags the engine runs with (recorded in the packet).
    fn flags(&self) -> Value;
    /// The command that starts the child, its model already named.
    fn command(&self) -> Result<Command>;
    /// Where the child's stderr log and logits files go.
    fn scratch(&self) -> &Path;
    /// The log file's name (`<log_name>.log`).
    fn log_name(&self) -> &str {
        self.name()
    }
}

/// A JSON-lines child as an [`Arm`]: `child` says how to start it; requests go over
/// [`JsonlEngine`].
pub struct JsonlArm<C> {
    pub child: C,
    engine: Option<JsonlEngine>,
}

impl<C: JsonlChild> JsonlArm<C> {
    pub fn new(child: C) -> Self {
        JsonlArm {
            child,
            engine: None,
        }
    }

    fn engine(&mut self) -> Result<&mut JsonlEngine> {
        let name = self.child.name();
        self.engine
            .as_mut()
            .with_context(|| format!("{name}: not started"))
    }
}

impl<C: JsonlChild> Arm for JsonlArm<C> {
    fn name(&self) -> &'static str {
        self.child.name()
    }

    fn flags(&self) -> Value {
        self.child.flags()
    }

    fn bucket_methods(&self) -> Buckets<BucketMethod> {
        BUCKET_METHODS
    }

    fn start(&mut self) -> Result<ArmFacts> {
        let command = self.child.command()?;
        let scratch = self.child.scratch();
        let log = scratch.join(format!("{}.log", self.child.log_name()));
        let process = EngineProcess::spawn(self.child.name(), command, &log, true)?;
        let (engine, facts) = JsonlEngine::start(process, scratch)?;
        self.engine = Some(engine);
        Ok(facts)
    }

    fn generate(&mut self, prompt: &[u32], n_out: usize) -> Result<Timed> {
        self.engine()?.generate(prompt, n_out)
    }

    fn logits(&mut self, ids: &[u32]) -> Result<Logits> {
        self.engine()?.logits(ids)
    }

    fn submit(&mut self, id: u64, prompt: &[u32], n_out: usize) -> Result<()> {
        self.engine()?.submit(id, prompt, n_out)
    }

    fn next_done(&mut self, timeout: Duration) -> Result<Option<Done>> {
        self.engine()?.next_done(timeout)
    }

    fn pid(&self) -> Option<u32> {
        self.engine.as_ref().map(|e| e.process.pid())
    }

    fn stop(&mut self) -> ExitInfo {
        match self.engine.take() {
            Some(mut e) => e.process.stop(Duration::from_secs(10)),
            None => ExitInfo::default(),
        }
    }
}

/// A started child.
pub struct JsonlEngine {
    pub process: EngineProcess,
    /// Where logits files go (one at a time, deleted after reading).
    scratch: PathBuf,
    /// Submitted requests in flight: id → when the harness wrote it.
    in_flight: BTreeMap<u64, u64>,
}

#[derive(Deserialize)]
struct Generated {
    tokens: Vec<u32>,
    recv_ns: u64,
    start_ns: u64,
    token_ns: Vec<u64>,
}

/// What a `submit` answer adds to `generate`'s.
#[derive(Deserialize)]
struct Counted {
    id: u64,
    prompt_tokens: usize,
    computed_tokens: usize,
    cached_tokens: usize,
}

#[derive(Deserialize)]
struct LogitsShape {
    rows: usize,
    n_vocab: usize,
}

impl JsonlEngine {
    /// Waits for the child's ready line.
    pub fn start(mut process: EngineProcess, scratch: &Path) -> Result<(Self, ArmFacts)> {
        let line = process.recv_line(LOAD_TIMEOUT).map_err(|e| match e
            .downcast::<super::process::Interrupted>()
        {
            Ok(i) => i.into(),
            Err(e) => process.died(&format!("loading failed: {e:#}")),
        })?;
        let msg: Value = parse(&mut process, &line)?;
        if msg["ready"] != json!(true) {
            let why = msg["error"]
                .as_str()
                .unwrap_or("no reason given")
                .to_string();
            return Err(process.died(&format!("could not load the model: {why}")));
        }
        let engine = JsonlEngine {
            process,
            scratch: scratch.to_path_buf(),
            in_flight: BTreeMap::new(),
        };
        Ok((engine, msg["facts"].clone()))
    }

    fn call(&mut self, request: &Value) -> Result<(Value, u64, u64)> {
        let sent_ns = now_ns();
        self.process.send_line(&request.to_string())?;
        let line = self.process.recv_line(REQUEST_TIMEOUT)?;
        let done_ns = now_ns();
        let msg: Value = parse(&mut self.process, &line)?;
        if msg["ok"] != json!(true) {
            let why = msg["error"].as_str().unwrap_or("no reason given");
            bail!("{}: {why}", self.process.name);
        }
        Ok((msg, sent_ns, done_ns))
    }

    pub fn generate(&mut self, prompt: &[u32], n_out: usize) -> Result<Timed> {
        let request = json!({"op": "generate", "prompt": prompt, "n_out": n_out});
        let (msg, sent_ns, done_ns) = self.call(&request)?;
        self.timed(msg, sent_ns, done_ns)
    }

    /// Writes a `submit` request and returns; its answer comes from [`Self::next_done`].
    pub fn submit(&mut self, id: u64, prompt: &[u32], n_out: usize) -> Result<()> {
        let request = json!({"op": "submit", "id": id, "prompt": prompt, "n_out": n_out});
        let sent_ns = now_ns();
        self.process.send_line(&request.to_string())?;
        self.in_flight.insert(id, sent_ns);
        Ok(())
    }

    /// The next answered `submit` request, or None when none finished within `timeout`.
    pub fn next_done(&mut self, timeout: Duration) -> Result<Option<Done>> {
        let Some(line) = self.process.try_recv_line(timeout)? else {
            return Ok(None);
        };
        let done_ns = now_ns();
        let msg: Value = parse(&mut self.process, &line)?;
        let name = &self.process.name;
        if msg["ok"] != json!(true) {
            let why = msg["error"].as_str().unwrap_or("no reason given");
            bail!("{name}: request {}: {why}", msg["id"]);
        }
        let counted: Counted = serde_json::from_value(msg.clone())
            .with_context(|| format!("{name}: malformed answer {msg:.300}"))?;
        let Some(sent_ns) = self.in_flight.remove(&counted.id) else {
            bail!(
                "{name}: answered request {}, which is not in flight",
                counted.id
            );
        };
        Ok(Some(Done {
            id: counted.id,
            prompt_tokens: counted.prompt_tokens,
            computed_tokens: counted.computed_tokens,
            cached_tokens: counted.cached_tokens,
            timed: self.timed(msg, sent_ns, done_ns)?,
        }))
    }

    /// A generation answer as a [`Timed`]: the child's clock readings in order, one per token.
    fn timed(&self, msg: Value, sent_ns: u64, done_ns: u64) -> Result<Timed> {
        let name = &self.process.name;
        let g: Generated = serde_json::from_value(msg.clone())
            .with_context(|| format!("{name}: malformed answer {msg:.300}"))?;
        let (Some(&first), Some(&last)) = (g.token_ns.first(), g.token_ns.last()) else {
            bail!("{name}: the answer holds no tokens");
        };
        let ordered = [sent_ns, g.recv_ns, g.start_ns, first, last, done_ns];
        if ordered.windows(2).any(|w| w[0] > w[1]) || g.token_ns.len() != g.tokens.len() {
            bail!(
                "{name}: timestamps out of order or uneven (sent, received, started, first, last, done = {ordered:?})"
            );
        }
        let mut engine = msg;
        if let Some(fields) = engine.as_object_mut() {
            for bulky in ["ok", "tokens", "token_ns"] {
                fields.remove(bulky);
            }
        }
        Ok(Timed {
            tokens: g.tokens,
            token_ns: g.token_ns.clone(),
            sent_ns,
            done_ns,
            buckets: Buckets {
                queue: g.recv_ns - sent_ns,
                setup: g.start_ns - g.recv_ns,
                prefill: first - g.start_ns,
                decode: last - first,
                verification: 0,
                recovery: 0,
                other: done_ns - last,
            },
            engine,
        })
    }

    pub fn logits(&mut self, ids: &[u32]) -> Result<Logits> {
        let path = self
            .scratch
            .join(format!("{}-logits.f32", self.process.pid()));
        let request = json!({"op": "logits", "ids": ids, "out": path});
        let (msg, _, _) = self.call(&request)?;
        let shape: LogitsShape = serde_json::from_value(msg.clone())
            .with_context(|| format!("{}: malformed answer {msg}", self.process.name))?;
        let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        let _ = std::fs::remove_file(&path);
        if shape.rows != ids.len() || bytes.len() != shape.rows * shape.n_vocab * 4 {
            return Err(anyhow!(
                "{}: logits file {} holds {} bytes, expected {} rows × {} × 4",
                self.process.name,
                path.display(),
                bytes.len(),
                ids.len(),
                shape.n_vocab
            ));
        }
        let flat: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
            .collect();
        Ok(Logits::Full(
            flat.chunks(shape.n_vocab).map(<[f32]>::to_vec).collect(),
        ))
    }
}

fn parse(process: &mut EngineProcess, line: &str) -> Result<Value> {
    serde_json::from_str(line).map_err(|e| {
        process.died(&format!(
            "printed a line that is not JSON ({e}): {line:.200}"
        ))
    })
}
