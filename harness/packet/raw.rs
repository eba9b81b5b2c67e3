//! `<arm>-raw.json`: one arm's timed requests exactly as measured.
//!
//! Times are seconds (f64). Token timestamps are seconds since the request was sent, on the same
//! clock as the request's wall time, so TTFT, ITL and every rate can be recomputed from them.

use serde::{Deserialize, Serialize};

/// How an arm runs: `native` for fak, `reference` for the engines it is compared against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    Native,
    Reference,
}

/// The arm name fak's own engine runs under; it alone is [`Runtime::Native`].
pub const NATIVE_ARM: &str = "fak-native";

impl Runtime {
    /// `native` or `reference`, as the packet writes it.
    pub fn label(self) -> &'static str {
        match self {
            Runtime::Native => "native",
            Runtime::Reference => "reference",
        }
    }

    /// The label an arm must carry: `native` for [`NATIVE_ARM`], `reference` for every other.
    pub fn for_arm(arm: &str) -> Runtime {
        if arm == NATIVE_ARM {
            Runtime::Native
        } else {
            Runtime::Reference
        }
    }
}

/// Where an arm stands. `running` is only ever seen in a raw file whose writer died before the
/// arm finished (it keeps the faults seen so far); a packet never carries it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum ArmStatus {
    Running { faults: Vec<Fault>, restarts: u32 },
    Ran,
    Skipped { reason: String },
    Faulted { faults: Vec<Fault>, restarts: u32 },
}

/// One fault of an engine during a run: what happened and at which request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fault {
    /// The request (index into the arm's request sequence) that was in flight, if any.
    pub request_index: Option<usize>,
    /// What happened, in words (exit status, signal, error message).
    pub what: String,
    /// The last lines the engine wrote to stderr, where there were any.
    pub stderr_tail: Option<String>,
}

/// The engine behind an arm, as it reported itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EngineInfo {
    /// e.g. `fak`, `llama.cpp`, `mlx-lm`.
    pub name: String,
    /// The engine's own version string (llama.cpp `build_info`, mlx/mlx-lm versions, fak's).
    pub version: String,
    /// The exact command line or options the engine ran with.
    pub flags: Vec<String>,
    /// Anything else the engine reported about its build (llama-server `/props`), verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<serde_json::Value>,
    /// The flags the harness chose for this engine's workload beyond the shared ones, each with
    /// why (llama-server's prompt cache and checkpoints; the user's `--llama-arg`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tuning: Vec<FlagChoice>,
}

/// A flag (with its value) and why it was set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlagChoice {
    pub flag: String,
    pub why: String,
}

/// Where an arm computed, as far as the harness can tell.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArmDevice {
    /// In words: the wgpu adapter, llama-server's device list, MLX's device.
    pub name: String,
    pub kind: DeviceKind,
    /// True when this is the adapter `harness selftest` checked and measured (the packet's
    /// hardware entry): the bandwidth and peak-throughput bounds of `harness validate` hold
    /// the arm to that device.
    pub selftest_adapter: bool,
}

/// The kind of device an arm ran on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceKind {
    /// A hardware GPU.
    Gpu,
    /// A GPU API implemented on the CPU (Mesa llvmpipe/lavapipe, SwiftShader, WARP).
    SoftwareGpu,
    /// The CPU, natively.
    Cpu,
}

impl DeviceKind {
    /// In words, for the report.
    pub fn label(self) -> &'static str {
        match self {
            DeviceKind::Gpu => "a GPU",
            DeviceKind::SoftwareGpu => "a software GPU on the CPU",
            DeviceKind::Cpu => "the CPU, natively",
        }
    }
}

/// The weights an arm ran.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Weights {
    pub path: String,
    /// sha256 of the file (for a directory: of its files' digests, as the arm states in `format`).
    pub sha256: String,
    /// What they are, e.g. `gguf Q4_K_M`, `mlx 4-bit group 64 (converted from the same f16)`.
    pub format: String,
    /// True when these are the envelope's model file itself (same sha256), so arms claiming it
    /// ran the very same weights and may be held to token parity.
    pub same_as_envelope: bool,
}

/// The envelope as an arm ran it; every arm's must equal the packet's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArmEnvelope {
    pub n_ctx: usize,
    pub n_out: usize,
    pub n_prompts: usize,
    pub prompt_set_sha256: String,
    pub warmup_requests: usize,
}

/// The buckets of one request, in seconds; how each came about is its arm's [`BucketKinds`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Buckets {
    /// Request sent → the engine starts work on it.
    pub queue_s: f64,
    /// Engine-side preparation before the prompt runs (slot/session setup, cache reset).
    pub setup_s: f64,
    /// Prompt processing up to the first output token.
    pub prefill_s: f64,
    /// First output token → last output token.
    pub decode_s: f64,
    /// Checking the output (token ids, lengths) before the request is done.
    pub verification_s: f64,
    /// Restarting a faulted engine and replaying the request.
    pub recovery_s: f64,
    /// Tokenize/detokenize, transport and other I/O.
    pub other_s: f64,
}

impl Buckets {
    pub const NAMES: [&'static str; 7] = [
        "queue",
        "setup",
        "prefill",
        "decode",
        "verification",
        "recovery",
        "other",
    ];

    /// The buckets in [`Self::NAMES`] order.
    pub fn values(&self) -> [f64; 7] {
        [
            self.queue_s,
            self.setup_s,
            self.prefill_s,
            self.decode_s,
            self.verification_s,
            self.recovery_s,
            self.other_s,
        ]
    }

    pub fn from_values(v: [f64; 7]) -> Self {
        Buckets {
            queue_s: v[0],
            setup_s: v[1],
            prefill_s: v[2],
            decode_s: v[3],
            verification_s: v[4],
            recovery_s: v[5],
            other_s: v[6],
        }
    }

    /// The request's total: the sum of its buckets.
    pub fn total(&self) -> f64 {
        self.values().iter().sum()
    }

    /// Time to first token: queue + setup + prefill.
    pub fn ttft(&self) -> f64 {
        self.queue_s + self.setup_s + self.prefill_s
    }
}

/// How each bucket is measured for one engine, in words (which clock, which field, which events).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketMethods {
    pub queue: String,
    pub setup: String,
    pub prefill: String,
    pub decode: String,
    pub verification: String,
    pub recovery: String,
    pub other: String,
    /// What kind of figure each bucket is (absent in packets written before kinds were stated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kinds: Option<BucketKinds>,
}

/// How a bucket's value comes about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BucketKind {
    /// A clock reading between two events, or the engine's own counter (0 when the event did
    /// not happen, e.g. no restart).
    Measured,
    /// Computed from other readings; the method says from which.
    Derived,
    /// Not measured: set to 0 because the engine has no such phase (the method says why).
    Zero,
}

impl BucketKind {
    pub fn label(self) -> &'static str {
        match self {
            BucketKind::Measured => "measured",
            BucketKind::Derived => "derived",
            BucketKind::Zero => "set to 0",
        }
    }
}

/// The kind of each bucket of one engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketKinds {
    pub queue: BucketKind,
    pub setup: BucketKind,
    pub prefill: BucketKind,
    pub decode: BucketKind,
    pub verification: BucketKind,
    pub recovery: BucketKind,
    pub other: BucketKind,
}

impl BucketKinds {
    /// The kinds in [`Buckets::NAMES`] order.
    pub fn values(&self) -> [BucketKind; 7] {
        [
            self.queue,
            self.setup,
            self.prefill,
            self.decode,
            self.verification,
            self.recovery,
            self.other,
        ]
    }
}

/// One timed request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestSample {
    /// Position in the arm's request sequence, warm-up included (0, 1, 2, …).
    pub index: usize,
    /// Which envelope prompt it sent (index into the envelope's prompt list).
    pub prompt_index: usize,
    /// An uncounted warm-up request.
    pub warmup: bool,
    /// [`super::prompt_sha256`] of the ids actually sent.
    pub prompt_sha256: String,
    pub buckets: Buckets,
    /// Request sent → response complete, on the harness's clock.
    pub wall_s: f64,
    /// Per output token: seconds since the request was sent, when the harness received it.
    pub token_times_s: Vec<f64>,
    /// The output token ids, in order; null where the engine sent no id and the arm could not
    /// recover it (llama-server's withheld tokens whose replays disagreed with the stream: the
    /// arm's engine record says which and why).
    pub token_ids: Vec<Option<u32>>,
    /// What the engine itself reported for this request (llama-server `timings`), verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_timings: Option<serde_json::Value>,
}

/// Peak memory of an arm's engine process where the OS tells it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryPeak {
    pub resident_bytes: Option<u64>,
    pub gpu_bytes: Option<u64>,
    /// Where the figures came from (e.g. `/proc/<pid>/status VmHWM`, `nvidia-smi`).
    pub how: String,
}

/// What an arm is, before it runs: everything of `<arm>-raw.json` but the samples and status.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArmHeader {
    /// `fak-native`, `llama.cpp` or `mlx`.
    pub arm: String,
    pub runtime: Runtime,
    pub engine: EngineInfo,
    pub weights: Weights,
    pub envelope: ArmEnvelope,
    pub bucket_methods: BucketMethods,
    /// Where the arm computed (absent in packets written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<ArmDevice>,
}

/// TTFT as a plain client measured it against the arm's own server, in the same run, after the
/// arm's timed requests: the same prompts in the same order, one at a time (llama.cpp).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlainClient {
    /// What the client is and how it measured.
    pub how: String,
    /// One TTFT per counted prompt, in order, in seconds (empty when it did not run).
    pub ttft_s: Vec<f64>,
    /// The server's own prompt time (`timings.prompt_ms`) of each of those requests, seconds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prompt_s: Vec<f64>,
    /// Why it did not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `<arm>-raw.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArmRaw {
    pub schema: String,
    #[serde(flatten)]
    pub header: ArmHeader,
    pub status: ArmStatus,
    pub memory: Option<MemoryPeak>,
    pub requests: Vec<RequestSample>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plain_client: Option<PlainClient>,
}

impl ArmRaw {
    /// The counted (not warm-up) requests.
    pub fn counted(&self) -> impl Iterator<Item = &RequestSample> {
        self.requests.iter().filter(|r| !r.warmup)
    }
}
