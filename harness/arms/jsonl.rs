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
//! - any failure → `{"ok": false, "error": "..."}`. EOF on stdin stops the child.

use super::process::{EngineProcess, now_ns};
use super::{ArmFacts, Buckets, Logits, Timed};
use anyhow::{Context, Result, anyhow, bail};
use serde::Deserialize;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a loading engine may take before it is declared stuck.
const LOAD_TIMEOUT: Duration = Duration::from_secs(900);
/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(900);

/// How the buckets are measured for a JSON-lines child.
pub const BUCKET_METHODS: Buckets<&str> = Buckets {
    queue: "harness wrote the request line → the child had read it (both CLOCK_MONOTONIC)",
    setup: "the child had read the request → it called the generation loop (parse, ids to the engine's array)",
    prefill: "generation loop called → first token known in the child",
    decode: "first token → last token known in the child",
    verification: "none: no speculative decoding, nothing to verify (0)",
    recovery: "engine restarts after a crash, charged to the request that was lost (0 otherwise)",
    other: "last token known in the child → the harness had its answer line (loop exit, JSON, pipe)",
};

/// A started child.
pub struct JsonlEngine {
    pub process: EngineProcess,
    /// Where logits files go (one at a time, deleted after reading).
    scratch: PathBuf,
}

#[derive(Deserialize)]
struct Generated {
    tokens: Vec<u32>,
    recv_ns: u64,
    start_ns: u64,
    token_ns: Vec<u64>,
    reply_ns: u64,
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
        let g: Generated = serde_json::from_value(msg.clone())
            .with_context(|| format!("{}: malformed answer {msg}", self.process.name))?;
        let (Some(&first), Some(&last)) = (g.token_ns.first(), g.token_ns.last()) else {
            bail!("{}: the answer holds no tokens", self.process.name);
        };
        let ordered = [sent_ns, g.recv_ns, g.start_ns, first, last, done_ns];
        if ordered.windows(2).any(|w| w[0] > w[1]) || g.token_ns.len() != g.tokens.len() {
            bail!(
                "{}: timestamps out of order or uneven (sent, received, started, first, last, done = {ordered:?})",
                self.process.name
            );
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
            engine: json!({"recv_ns": g.recv_ns, "start_ns": g.start_ns, "reply_ns": g.reply_ns}),
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
