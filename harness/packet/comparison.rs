//! `packet.json` (`schema: "fak.macbench.comparison.v1"`): the machine, the envelope, what each
//! arm measured (summaries and per-request decomposition), quality summaries, the selftest result
//! and the digests of every raw file. Built by [`super::summary::build_packet`] from the raw files,
//! so `harness validate` can rebuild and compare it.

use super::FileDigest;
use super::metrics::{BootstrapSpec, RateDist, TimeDist, Tolerance};
use super::quality::{Against, QualityRule, QualityStatus, QualitySummary};
use super::raw::{
    ArmDevice, ArmEnvelope, ArmStatus, BucketMethods, Buckets, EngineInfo, MemoryPeak, Runtime,
    Weights,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `packet.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Packet {
    pub schema: String,
    /// When the packet was finalised, UTC, RFC 3339.
    pub created_utc: String,
    pub harness: HarnessInfo,
    pub hardware: Hardware,
    /// Toolchain and library versions: rustc, wgpu, python, mlx, mlx-lm, …
    pub toolchain: BTreeMap<String, String>,
    pub envelope: Envelope,
    pub method: Method,
    pub selftest: Selftest,
    pub arms: Vec<ArmEntry>,
    pub ratios: Ratios,
    pub quality: Vec<QualityEntry>,
    /// A scenario measured beside the envelope (`harness threeway --scenario`); its arms
    /// instead of the envelope's when `arms` is empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scenario: Option<super::scenario::Scenario>,
}

/// The harness that wrote the packet and how it was invoked.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HarnessInfo {
    pub version: String,
    /// The git commit of the harness source, where known.
    pub commit: Option<String>,
    /// The exact command line (argv) that produced the run, for the reproduction section.
    pub command: Vec<String>,
}

/// The machine's catalog entry, read from the OS and the GPU adapter.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hardware {
    pub host: String,
    pub cpu_model: String,
    pub cores: Cores,
    pub memory_bytes: u64,
    /// OS name and version (`uname -srm`, `sw_vers`).
    pub os: String,
    pub gpu: Gpu,
    /// The adapter's read bandwidth as `selftest` measured it.
    pub bandwidth: Option<Bandwidth>,
    /// What a reader of benchmarks expects to know about the machine, as the OS states it
    /// (machine model, chip, core counts, OS build, Metal family; GPU driver, Vulkan and CUDA
    /// versions): key → value, absent keys unknown.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub catalog: BTreeMap<String, String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cores {
    pub logical: u32,
    pub physical: Option<u32>,
    /// Performance and efficiency cores, where the OS says (Apple `hw.perflevel*`).
    pub performance: Option<u32>,
    pub efficiency: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Gpu {
    pub adapter: String,
    /// wgpu backend: `vulkan`, `metal`, `dx12`, `gl`.
    pub backend: String,
    pub driver: String,
    pub driver_info: String,
    /// wgpu device type: `discrete`, `integrated`, `cpu`, …
    pub device_type: String,
    /// GPU cores where known (Apple `gpu-core-count`).
    pub cores: Option<u32>,
}

/// A measured read bandwidth.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Bandwidth {
    pub bytes_per_s: f64,
    /// How it was measured (kernel, buffer size, repetitions).
    pub how: String,
}

/// The matched envelope every arm ran.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    pub model_path: String,
    pub model_sha256: String,
    pub model_bytes: u64,
    /// Weight bytes a decode step reads (`harness inspect`), for the roofline.
    pub decode_step_bytes: Option<u64>,
    pub n_ctx: usize,
    pub n_out: usize,
    pub n_prompts: usize,
    /// How the prompts were built (corpus and seed).
    pub prompt_source: String,
    /// [`super::prompt_sha256`] of each prompt, in order.
    pub prompt_sha256: Vec<String>,
    /// [`super::prompt_set_sha256`] of that list.
    pub prompt_set_sha256: String,
    pub greedy: bool,
    pub ignore_eos: bool,
    pub warmup_requests: usize,
    /// Where the model's weights come from, in words (random synthetic, trained, a user's file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_origin: Option<String>,
    /// FLOPs every prompt token costs at the least: 2 × the elements of the block weights (the
    /// matrices each token multiplies; the embedding lookup, the head and attention left out),
    /// for the compute floor under a TTFT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_flops_per_token: Option<u64>,
}

impl Envelope {
    /// What each arm's raw envelope must say.
    pub fn arm_envelope(&self) -> ArmEnvelope {
        ArmEnvelope {
            n_ctx: self.n_ctx,
            n_out: self.n_out,
            n_prompts: self.n_prompts,
            prompt_set_sha256: self.prompt_set_sha256.clone(),
            warmup_requests: self.warmup_requests,
        }
    }
}

/// How the numbers were computed; the validator holds a packet to the values it states.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Method {
    /// `linear interpolation between order statistics` (Hyndman–Fan type 7).
    pub percentiles: String,
    pub bootstrap: BootstrapSpec,
    /// How far a request's bucket sum (and TTFT, decode) may sit from its clock readings.
    pub tolerance: Tolerance,
    /// The arm every ratio is taken against.
    pub reference_arm: String,
}

/// The percentile method every figure uses.
pub const PERCENTILE_METHOD: &str =
    "linear interpolation between order statistics (Hyndman-Fan type 7, numpy default)";

/// Bucket sum vs wall clock, TTFT vs first-token time, decode vs first-to-last token time:
/// 2 ms plus 2 % of the clock reading. Fixed for v1; a packet stating another is invalid.
pub const TOLERANCE_V1: Tolerance = Tolerance {
    abs_s: 0.002,
    rel: 0.02,
};

/// Fewer resamples than this give an interval that moves from seed to seed.
pub const MIN_BOOTSTRAP_RESAMPLES: usize = 1000;
/// More than this the JSON Schema refuses (`method.bootstrap.resamples`): validation redraws
/// every interval with the packet's own count, and 2^64 − 1 of them would never finish.
pub const MAX_BOOTSTRAP_RESAMPLES: usize = 100_000;

impl Method {
    /// The v1 method: type-7 percentiles, 2000 seeded resamples for 95 % intervals, the v1
    /// tolerance, ratios against `reference_arm` (the harness's default is `llama.cpp`).
    pub fn v1(reference_arm: &str) -> Self {
        Method {
            percentiles: PERCENTILE_METHOD.to_owned(),
            bootstrap: BootstrapSpec {
                resamples: 2000,
                seed: 20_261_203,
                confidence: 0.95,
            },
            tolerance: TOLERANCE_V1,
            reference_arm: reference_arm.to_owned(),
        }
    }
}

/// `harness selftest` on this machine's adapter, run before the arms.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Selftest {
    pub status: SelftestStatus,
    /// Why it was skipped or what failed, in words.
    pub reason: Option<String>,
    pub adapter: String,
    pub checks_run: u64,
    pub checks_failed: u64,
    /// The failing checks by name.
    pub failures: Vec<String>,
    /// The selftest's own output (`selftest.json`), a raw file of the packet: the hardware entry's
    /// adapter and bandwidth are held to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<FileDigest>,
}

/// The selftest's raw file in a run folder.
pub const SELFTEST_FILE: &str = "selftest.json";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SelftestStatus {
    Passed,
    Failed,
    Skipped,
}

/// One arm as the packet reports it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArmEntry {
    pub arm: String,
    pub runtime: Runtime,
    pub engine: EngineInfo,
    pub weights: Weights,
    pub envelope: ArmEnvelope,
    pub status: ArmStatus,
    pub bucket_methods: BucketMethods,
    pub memory: Option<MemoryPeak>,
    pub raw_file: FileDigest,
    /// Absent when the arm has no counted request (skipped, or faulted before one finished).
    pub summary: Option<ArmSummary>,
    /// Every request, warm-up included, decomposed.
    pub requests: Vec<RequestRow>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<ArmDevice>,
    /// The arm's TTFT against a plain client's on the same server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plain_client: Option<PlainClientCheck>,
}

/// The arm's TTFT p50 against the p50 a plain client measured on the same server in the same
/// run ([`super::raw::PlainClient`]): within [`PLAIN_CLIENT_RULE`], the arm's clock adds nothing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlainClientCheck {
    pub how: String,
    pub rule: String,
    /// The plain client's requests.
    pub requests: usize,
    pub plain_ttft_p50_s: Option<f64>,
    pub arm_ttft_p50_s: Option<f64>,
    /// Whether the two p50s are within the rule; None when either is missing.
    pub within: Option<bool>,
    /// p50 of TTFT minus the server's own prompt time, the plain client's and the arm's (its
    /// derived queue): what each client and the server's bookkeeping add, free of the noise in
    /// the prompt's own compute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plain_beyond_prompt_p50_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arm_beyond_prompt_p50_s: Option<f64>,
    /// Why the plain client did not run.
    pub error: Option<String>,
}

/// |arm p50 − plain p50| ≤ max(3 ms, 5 % of the plain p50).
pub const PLAIN_CLIENT_RULE: &str = "the arm's TTFT p50 within 5 % or 3 ms of the plain client's";

impl PlainClientCheck {
    pub fn within(arm_p50: f64, plain_p50: f64) -> bool {
        (arm_p50 - plain_p50).abs() <= (0.05 * plain_p50).max(0.003)
    }
}

/// One request's decomposition and the figures derived from it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestRow {
    pub index: usize,
    pub prompt_index: usize,
    pub warmup: bool,
    pub buckets: Buckets,
    /// Sum of the buckets.
    pub total_s: f64,
    pub wall_s: f64,
    /// queue + setup + prefill.
    pub ttft_s: f64,
    /// n_ctx / prefill.
    pub prefill_tok_s: f64,
    /// (n_out − 1) / decode; absent when n_out < 2.
    pub decode_tok_s: Option<f64>,
}

/// An arm's summary over its counted requests.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArmSummary {
    pub requests: usize,
    pub ttft_s: TimeDist,
    pub prefill_s: TimeDist,
    pub decode_s: TimeDist,
    pub total_s: TimeDist,
    /// Gaps between consecutive output tokens, n_out − 1 per request, pooled; absent when n_out < 2.
    pub itl_s: Option<TimeDist>,
    pub prefill_tok_s: RateDist,
    pub decode_tok_s: Option<RateDist>,
    /// The p50 of each bucket over requests.
    pub buckets_p50: Buckets,
    /// The mean of each bucket over requests.
    pub buckets_mean: Buckets,
}

/// Every arm's p50s divided by the reference arm's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ratios {
    pub reference_arm: String,
    /// Why there are none, when the reference arm has no summary.
    pub note: Option<String>,
    pub by_arm: BTreeMap<String, ArmRatios>,
}

/// arm p50 / reference p50. For times below 1 is faster; for rates above 1 is faster.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArmRatios {
    pub ttft_p50: f64,
    pub prefill_tok_s_p50: f64,
    pub decode_tok_s_p50: Option<f64>,
    pub itl_p50: Option<f64>,
}

/// An arm's quality pass as the packet reports it: the summaries, not the receipts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QualityEntry {
    pub arm: String,
    pub file: FileDigest,
    pub status: QualityStatus,
    pub comparisons: Vec<QualityEntryComparison>,
    /// Why the arm's strict parity against its own-rounding reference was not judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own_rounding_skipped: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QualityEntryComparison {
    pub against: Against,
    pub rule: QualityRule,
    pub top_k: Option<u32>,
    pub summary: QualitySummary,
    /// Positions the engine withheld (the quality file lists them; they have no receipt).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub withheld_positions: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}
