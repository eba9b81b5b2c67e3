//! The engines `harness threeway` compares, one module per engine behind [`Arm`]: each runs in
//! its own process, started fresh and stopped before the next arm starts.
//!
//! - [`fak_native`]: `harness serve-arm`, a child speaking JSON lines ([`jsonl`]) over stdin and
//!   stdout, on `fak::runtime::Engine`;
//! - [`llama_cpp`]: `llama-server` on loopback, token ids in, streamed tokens out ([`http`]);
//! - [`fak_serve`]: `fak serve` on loopback through the same HTTP client (the multi-agent
//!   scenario's server-to-server comparison);
//! - [`mlx`]: `mlx_driver.py` on `mlx_lm`, the same JSON-lines protocol as fak's child.
//!
//! A timed request reads back nothing but tokens; logits come from a separate untimed call.

pub mod fak_native;
pub mod fak_serve;
pub mod http;
pub mod jsonl;
pub mod llama_cpp;
pub mod mlx;
pub mod process;

use anyhow::Result;
use serde::Serialize;

pub use fak_harness::packet::BucketKind;
pub use process::ExitInfo;

/// A token whose id the engine did not send and the arm did not recover (llama-server's
/// withheld tokens where nothing needs them: `LlamaCpp::replay_withheld` off).
pub const UNNAMED: u32 = u32::MAX;

/// One timed request: what came back and when, on the shared monotonic clock (ns).
#[derive(Clone, Debug, Serialize)]
pub struct Timed {
    /// The answer's ids; [`UNNAMED`] where the engine sent none and the arm did not recover it.
    pub tokens: Vec<u32>,
    /// When each token was known to the harness side of the measurement (for fak and MLX the
    /// engine process's own timestamp, for llama-server the arrival of its streamed chunk).
    pub token_ns: Vec<u64>,
    /// The harness wrote the request.
    pub sent_ns: u64,
    /// The harness had the whole answer.
    pub done_ns: u64,
    pub buckets: Buckets<u64>,
    /// What the engine itself reported (llama-server's `timings`, the children's timestamps).
    pub engine: serde_json::Value,
}

impl Timed {
    /// The answer's ids as a raw file records them: None where the engine sent none and the
    /// arm did not recover it ([`UNNAMED`]).
    pub fn named_ids(&self) -> Vec<Option<u32>> {
        self.tokens
            .iter()
            .map(|&id| (id != UNNAMED).then_some(id))
            .collect()
    }

    /// A request streamed from an HTTP server (llama-server, `fak serve`): tokens as their
    /// chunks arrived, and the server's own `prompt_ms` splitting the wait for the first token
    /// into queue and prefill (docs/METHOD.md "Buckets"); `engine` is what the server reported.
    pub fn streamed(
        who: &str,
        (tokens, token_ns): (Vec<u32>, Vec<u64>),
        (sent_ns, done_ns): (u64, u64),
        prompt_ms: f64,
        engine: serde_json::Value,
    ) -> anyhow::Result<Timed> {
        let (Some(&first), Some(&last)) = (token_ns.first(), token_ns.last()) else {
            anyhow::bail!("{who}: the stream held no tokens");
        };
        let prefill = ((prompt_ms * 1e6) as u64).min(first - sent_ns);
        Ok(Timed {
            tokens,
            token_ns,
            sent_ns,
            done_ns,
            buckets: Buckets {
                queue: first - sent_ns - prefill,
                setup: 0,
                prefill,
                decode: last - first,
                verification: 0,
                recovery: 0,
                other: done_ns - last,
            },
            engine,
        })
    }
}

/// The per-request time buckets (docs/METHOD.md "Buckets"): their sum the request's wall
/// clock; each engine states how each is obtained ([`BucketMethod`]).
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Buckets<T> {
    pub queue: T,
    pub setup: T,
    pub prefill: T,
    pub decode: T,
    pub verification: T,
    pub recovery: T,
    pub other: T,
}

/// How one bucket is obtained for an engine: its kind and, in words, from what.
#[derive(Clone, Copy, Debug)]
pub struct BucketMethod {
    pub kind: BucketKind,
    pub how: &'static str,
}

/// A request of a concurrent scenario, answered: what came back and the prompt tokens the
/// engine computed for it and those it reused from its cache.
#[derive(Clone, Debug)]
pub struct Done {
    /// The id it was submitted with.
    pub id: u64,
    pub timed: Timed,
    /// The prompt as the engine counted it.
    pub prompt_tokens: usize,
    pub computed_tokens: usize,
    pub cached_tokens: usize,
}

/// Logits of a teacher-forced sequence: one row after each id.
pub enum Logits {
    /// Every vocabulary entry (fak, MLX).
    Full(Vec<Vec<f32>>),
    /// Only the top entries, as (id, log-probability) best first (llama-server's `n_probs`);
    /// an empty row is a position the engine withheld.
    TopK(Vec<Vec<(u32, f32)>>),
}

/// What an arm says about itself once started: versions, build, device.
pub type ArmFacts = serde_json::Value;

pub trait Arm {
    /// `fak-native`, `llama.cpp`, `mlx`.
    fn name(&self) -> &'static str;
    /// The flags the engine runs with (recorded in the packet).
    fn flags(&self) -> serde_json::Value;
    /// Flags chosen for this engine's workload beyond the shared ones, with why (recorded in
    /// the packet and the report).
    fn tuning(&self) -> Vec<(String, String)> {
        Vec::new()
    }
    /// How each bucket is obtained for this engine.
    fn bucket_methods(&self) -> Buckets<BucketMethod>;
    /// Starts the engine process and waits until it is ready.
    fn start(&mut self) -> Result<ArmFacts>;
    /// One greedy request of exactly `n_out` tokens, end-of-sequence ignored.
    fn generate(&mut self, prompt: &[u32], n_out: usize) -> Result<Timed>;
    /// Teacher-forced logits after every id of `ids` (untimed).
    fn logits(&mut self, ids: &[u32]) -> Result<Logits>;
    /// Sends one greedy request of exactly `n_out` tokens (end-of-sequence ignored) without
    /// waiting for it: several may be in flight. Its answer comes from [`Arm::next_done`].
    fn submit(&mut self, id: u64, prompt: &[u32], n_out: usize) -> Result<()>;
    /// The next submitted request answered, or None when none finished within `timeout`.
    fn next_done(&mut self, timeout: std::time::Duration) -> Result<Option<Done>>;
    /// TTFT of `prompt` as a plain client measures it against this engine's own server, right
    /// after the arm's own request on it, and the server's own prompt time for that request
    /// (seconds; an engine the harness drives over HTTP); None where there is no such client.
    fn plain_client_ttft(&mut self, _prompt: &[u32], _n_out: usize) -> Option<Result<(f64, f64)>> {
        None
    }
    /// The engine process, while it runs.
    fn pid(&self) -> Option<u32>;
    /// Stops the engine and reaps it.
    fn stop(&mut self) -> ExitInfo;
}

/// Why an arm cannot run on this machine (recorded as skipped, never estimated).
#[derive(Debug)]
pub struct NotInstalled(pub String);
