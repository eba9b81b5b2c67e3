//! Synthetic runs for the packet's tests: raw samples made from a seeded generator with the
//! timing structure of a real run (no GPU, no engine), written through [`PacketWriter`].

use super::comparison::*;
use super::metrics::SplitMix64;
use super::quality::*;
use super::raw::*;
use super::scenario::*;
use super::summary::PacketMeta;
use super::{PacketWriter, prompt_set_sha256, prompt_sha256, sha256_hex};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A scratch folder under the system temp dir, removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "fak-packet-{}-{}-{name}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("creating a scratch folder");
        Scratch(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub const N_CTX: usize = 16;
pub const N_OUT: usize = 8;
pub const N_PROMPTS: usize = 6;

pub fn model_sha() -> String {
    sha256_hex(b"synthetic gguf")
}

pub fn prompts() -> Vec<Vec<u32>> {
    (0..N_PROMPTS)
        .map(|p| (0..N_CTX as u32).map(|i| 1 + p as u32 * 100 + i).collect())
        .collect()
}

pub fn envelope() -> Envelope {
    let digests: Vec<String> = prompts().iter().map(|p| prompt_sha256(p)).collect();
    Envelope {
        model_path: "/models/tiny-q4_k_m.gguf".into(),
        model_sha256: model_sha(),
        model_bytes: 1_000_000,
        decode_step_bytes: Some(900_000),
        n_ctx: N_CTX,
        n_out: N_OUT,
        n_prompts: N_PROMPTS,
        prompt_source: "synthetic test prompts".into(),
        prompt_set_sha256: prompt_set_sha256(&digests),
        prompt_sha256: digests,
        greedy: true,
        ignore_eos: true,
        warmup_requests: 1,
        model_origin: None,
        prefill_flops_per_token: None,
    }
}

pub fn header(arm: &str) -> ArmHeader {
    let same = arm != "mlx";
    ArmHeader {
        arm: arm.into(),
        runtime: Runtime::for_arm(arm),
        engine: EngineInfo {
            name: arm.into(),
            version: "test 1.0".into(),
            flags: vec!["--greedy".into()],
            build: (arm == NATIVE_ARM).then(fak_build),
            tuning: vec![],
        },
        weights: Weights {
            path: if same {
                "/models/tiny-q4_k_m.gguf".into()
            } else {
                "/models/tiny-mlx-4bit".into()
            },
            sha256: if same {
                model_sha()
            } else {
                sha256_hex(b"mlx dir")
            },
            format: if same {
                "gguf Q4_K_M".into()
            } else {
                "mlx 4-bit group 64".into()
            },
            same_as_envelope: same,
        },
        envelope: envelope().arm_envelope(),
        bucket_methods: BucketMethods {
            queue: "send to engine start".into(),
            setup: "engine setup".into(),
            prefill: "to first token".into(),
            decode: "first to last token".into(),
            verification: "id checks".into(),
            recovery: "restart time".into(),
            other: "transport".into(),
            kinds: Some(BucketKinds {
                queue: BucketKind::Measured,
                setup: BucketKind::Measured,
                prefill: BucketKind::Measured,
                decode: BucketKind::Measured,
                verification: BucketKind::Measured,
                recovery: BucketKind::Measured,
                other: BucketKind::Measured,
            }),
        },
        device: None,
    }
}

/// What fak-native reports of itself: its kernel paths and how its teacher-forced logits round.
fn fak_build() -> serde_json::Value {
    serde_json::json!({
        "kernel_paths": "subgroup+f16",
        "teacher_forced_rounding": {
            "step_tokens": 21, "mat_vec_max_tokens": 8, "mat_vec": "f32",
            "mat_mul": "f32", "attention": "f16-cache"
        }
    })
}

/// A request whose buckets, timestamps and wall clock agree: prefill at `prefill_tok_s`, gaps
/// around `itl_s` (±20 %, seeded), the wall clock 0.1 ms over the bucket sum.
pub fn sample(
    index: usize,
    prompt_index: usize,
    warmup: bool,
    prefill_tok_s: f64,
    itl_s: f64,
    rng: &mut SplitMix64,
) -> RequestSample {
    let mut jitter = || 0.8 + 0.4 * (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    let prefill_s = N_CTX as f64 / prefill_tok_s * jitter();
    let queue_s = 0.0005 * jitter();
    let setup_s = 0.001 * jitter();
    let mut t = queue_s + setup_s + prefill_s;
    let mut token_times_s = vec![t];
    for _ in 1..N_OUT {
        t += itl_s * jitter();
        token_times_s.push(t);
    }
    let buckets = Buckets {
        queue_s,
        setup_s,
        prefill_s,
        decode_s: token_times_s[N_OUT - 1] - token_times_s[0],
        verification_s: 0.0001,
        recovery_s: 0.0,
        other_s: 0.0003,
    };
    RequestSample {
        index,
        prompt_index,
        warmup,
        prompt_sha256: prompt_sha256(&prompts()[prompt_index]),
        wall_s: buckets.total() + 0.0001,
        buckets,
        token_times_s,
        token_ids: (0..N_OUT as u32).map(|i| Some(1000 + i)).collect(),
        engine_timings: None,
    }
}

/// One warm-up on prompt 0, then every prompt once.
pub fn samples(prefill_tok_s: f64, itl_s: f64, seed: u64) -> Vec<RequestSample> {
    let mut rng = SplitMix64::new(seed);
    let mut out = vec![sample(0, 0, true, prefill_tok_s, itl_s, &mut rng)];
    for p in 0..N_PROMPTS {
        out.push(sample(p + 1, p, false, prefill_tok_s, itl_s, &mut rng));
    }
    out
}

pub fn meta() -> PacketMeta {
    PacketMeta {
        created_utc: "2026-12-03T08:00:00Z".into(),
        harness: HarnessInfo {
            version: "0.1.0".into(),
            commit: None,
            command: vec!["harness".into(), "threeway".into()],
        },
        hardware: Hardware {
            host: "testhost".into(),
            cpu_model: "Test CPU".into(),
            cores: Cores {
                logical: 8,
                physical: Some(8),
                performance: Some(6),
                efficiency: Some(2),
            },
            memory_bytes: 1 << 34,
            os: "TestOS 1".into(),
            gpu: Gpu {
                adapter: "Test GPU".into(),
                backend: "vulkan".into(),
                driver: "test".into(),
                driver_info: "1.0".into(),
                device_type: "integrated".into(),
                cores: Some(18),
            },
            bandwidth: Some(Bandwidth {
                bytes_per_s: 150e9,
                how: "test probe".into(),
            }),
            catalog: BTreeMap::new(),
        },
        toolchain: BTreeMap::from([("rustc".to_string(), "1.95.0".to_string())]),
        envelope: envelope(),
        method: Method::v1("llama.cpp"),
        selftest: Selftest {
            status: SelftestStatus::Passed,
            reason: None,
            adapter: "Test GPU".into(),
            checks_run: 42,
            checks_failed: 0,
            failures: vec![],
            file: None,
        },
    }
}

fn receipts(cosine: f64, flip_margin: Option<f64>) -> Vec<PositionReceipt> {
    (0..N_CTX + 4)
        .map(|position| PositionReceipt {
            prompt_index: 0,
            position,
            cosine: cosine + position as f64 * 1e-7,
            greedy_reference: 10,
            greedy_arm: if position == 3 && flip_margin.is_some() {
                11
            } else {
                10
            },
            reference_top2_margin: if position == 3 {
                flip_margin.unwrap_or(2.0)
            } else {
                2.0
            },
            rounding_budget: None,
        })
        .collect()
}

/// fak-native against the CPU reference (quantization cost) and against llama.cpp (parity,
/// one near-tie flip).
pub fn fak_quality() -> ArmQuality {
    ArmQuality::new(
        NATIVE_ARM,
        QualityStatus::Ran,
        vec![0],
        4,
        vec![
            QualityComparison::new(
                Against::Reference {
                    engine: ReferenceEngine::CpuReference,
                    weights: "f32".into(),
                    weights_sha256: sha256_hex(b"f32 weights"),
                    label: None,
                },
                QualityRule::QuantizationCost,
                None,
                receipts(0.995, Some(1.5)),
            ),
            QualityComparison::new(
                Against::Arm {
                    arm: "llama.cpp".into(),
                },
                QualityRule::parity_v1(),
                Some(20),
                receipts(0.99995, Some(0.05)),
            ),
            own_rounding_comparison(),
        ],
    )
}

/// fak-native against its own-rounding reference, as `harness threeway` writes it.
pub fn own_rounding_comparison() -> QualityComparison {
    let h = header(NATIVE_ARM);
    let plan = super::rounding::own_rounding(&h.arm, &h.engine, None, N_CTX + 4)
        .expect("fak-native's build reports its rounding");
    QualityComparison::new(
        Against::OwnRounding {
            engine: ReferenceEngine::CpuReference,
            weights_sha256: model_sha(),
            rounds_as: NATIVE_ARM.into(),
            rounding: plan.rules(),
            why: plan.why,
        },
        QualityRule::own_rounding_v1(),
        None,
        receipts(0.999995, None),
    )
}

/// A complete run of three arms in `dir`: fak-native, llama.cpp (the reference arm) and mlx
/// (other weights), fak's quality file; returns the packet written.
pub fn write_run(dir: &Path) -> Packet {
    write_run_with(dir, 4000.0, 0.010)
}

/// [`write_run`] with fak-native's prefill rate and ITL given.
pub fn write_run_with(dir: &Path, fak_prefill_tok_s: f64, fak_itl_s: f64) -> Packet {
    let mut writer = PacketWriter::create(dir).unwrap();
    for (arm, prefill, itl, seed) in [
        (NATIVE_ARM, fak_prefill_tok_s, fak_itl_s, 1),
        ("llama.cpp", 3000.0, 0.012, 2),
        ("mlx", 3500.0, 0.011, 3),
    ] {
        let mut rec = writer.begin_arm(header(arm)).unwrap();
        for s in samples(prefill, itl, seed) {
            rec.record(s).unwrap();
        }
        rec.finish().unwrap();
    }
    writer.write_quality(fak_quality()).unwrap();
    writer.finish(meta()).unwrap()
}

/// The selftest output of a physical run: an H200 whose probe read `best_bytes_per_s`.
pub fn selftest_output(best_bytes_per_s: f64) -> serde_json::Value {
    serde_json::json!({
        "schema": "fak.selftest.v1",
        "pass": true,
        "adapter": {"name": "NVIDIA H200", "backend": "vulkan", "driver": "NVIDIA",
                    "driver_info": "580.159.04", "device_type": "discrete"},
        "bandwidth": {"method": "timestamp queries", "bytes_per_pass": 1u64 << 30, "passes": 7,
                      "best_bytes_per_s": best_bytes_per_s,
                      "median_bytes_per_s": best_bytes_per_s * 0.97},
        "checks": [{"model": "tiny", "paths": "default", "check": "logits", "pass": true}],
        "kernels": [{"kernel": "matvec", "variant": "subgroup", "case": "q4_k", "pass": true}],
    })
}

/// A run on an H200 with every physical bound applicable: a 16 GB decode step (at 4.8 TB/s one
/// sequence decodes at most 300 tok/s), 5.4e10 FLOPs a prompt token (16 tokens take at least
/// 0.44 ms at 1,979 TFLOPS), fak and llama.cpp on the GPU, MLX on the CPU, the selftest's output
/// a file of the run with the hardware entry built from it.
pub fn write_physical_run(
    dir: &Path,
    fak_prefill_tok_s: f64,
    fak_itl_s: f64,
    best_bytes_per_s: f64,
) -> Packet {
    let mut writer = PacketWriter::create(dir).unwrap();
    for (arm, prefill, itl, seed, kind) in [
        (NATIVE_ARM, fak_prefill_tok_s, fak_itl_s, 1, DeviceKind::Gpu),
        ("llama.cpp", 3000.0, 0.012, 2, DeviceKind::Gpu),
        ("mlx", 3500.0, 0.011, 3, DeviceKind::Cpu),
    ] {
        let mut h = header(arm);
        h.device = Some(ArmDevice {
            name: "NVIDIA H200".into(),
            kind,
            selftest_adapter: kind == DeviceKind::Gpu,
        });
        let mut rec = writer.begin_arm(h).unwrap();
        for s in samples(prefill, itl, seed) {
            rec.record(s).unwrap();
        }
        rec.finish().unwrap();
    }
    writer.write_quality(fak_quality()).unwrap();
    let output = selftest_output(best_bytes_per_s);
    let file = writer
        .write_file(SELFTEST_FILE, &serde_json::to_vec_pretty(&output).unwrap())
        .unwrap();
    let mut meta = meta();
    meta.hardware.gpu = super::selftest_raw::gpu_entry(&output["adapter"]);
    meta.hardware.bandwidth = super::selftest_raw::bandwidth_entry(&output["bandwidth"]);
    meta.selftest = super::selftest_raw::summary(&output, Some(file));
    meta.envelope.decode_step_bytes = Some(16_000_000_000);
    meta.envelope.prefill_flops_per_token = Some(54_000_000_000);
    writer.finish(meta).unwrap()
}

/// The synthetic multi-agent scenario: 2 agents, preamble 16, suffix 4, 2 turns, n_out 8 (the
/// envelope's, so turn 1's prompt is 20 tokens), with scripted replies: every arm is sent
/// [`scenario_prompt`]s.
pub fn scenario_spec() -> ScenarioSpec {
    let spec = scenario_shape();
    let prompt_sha256 = (1..=spec.agents)
        .map(|a| {
            (1..=spec.turns)
                .map(|t| prompt_sha256(&scenario_prompt(a, t)))
                .collect()
        })
        .collect();
    ScenarioSpec {
        replies: Replies::Scripted {
            source: "synthetic".into(),
            prompt_sha256,
        },
        ..spec
    }
}

/// The scenario's counts, replies not yet scripted.
fn scenario_shape() -> ScenarioSpec {
    ScenarioSpec {
        kind: MULTI_AGENT.into(),
        agents: 2,
        preamble_tokens: 16,
        suffix_tokens: 4,
        turns: 2,
        n_out: N_OUT,
        arrival: Arrival::Together,
        think_s: 0.0,
        preamble_sha256: sha256_hex(b"preamble"),
        prompt_source: "synthetic".into(),
        replies: Replies::Own,
    }
}

/// Turn t's prompt of agent a: a shared preamble, then ids that tell the agents apart.
pub fn scenario_prompt(agent: usize, turn: usize) -> Vec<u32> {
    let len = scenario_shape().prompt_tokens(turn);
    (0..len as u32)
        .map(|i| {
            if i < 16 {
                1 + i
            } else {
                100 * agent as u32 + i
            }
        })
        .collect()
}

fn scenario_header(arm: &str, cache: bool) -> ScenarioArmHeader {
    let base = header(NATIVE_ARM);
    ScenarioArmHeader {
        arm: arm.into(),
        engine: base.engine,
        weights: base.weights,
        prefix_cache: cache,
        cache_how: if cache { "radix tree" } else { "off" }.into(),
        serving: Serving {
            concurrent: 2,
            how: "batched decode of up to 2 sequences".into(),
        },
        prefill_counted_by: "the engine's cached_tokens".into(),
    }
}

/// Agent a's turn t: sent when its previous turn ended, first token after `ttft_s`; the cache
/// arm reuses all but the last `computed` tokens from turn 2 on.
fn turn_sample(agent: usize, turn: usize, sent_s: f64, ttft_s: f64, cache: bool) -> TurnSample {
    let prompt = scenario_prompt(agent, turn);
    let computed = if cache && turn > 1 { 6 } else { prompt.len() };
    let token_times_s: Vec<f64> = (0..N_OUT).map(|i| ttft_s + 0.01 * i as f64).collect();
    TurnSample {
        agent,
        turn,
        prompt_tokens: prompt.len(),
        prompt_sha256: prompt_sha256(&prompt),
        sent_s,
        ttft_s,
        wall_s: token_times_s[N_OUT - 1] + 0.001,
        token_times_s,
        token_ids: (0..N_OUT as u32).map(|i| Some(500 + i)).collect(),
        prefill_computed: computed,
        cached_tokens: prompt.len() - computed,
        engine_report: None,
    }
}

/// A scenario run in `dir`: `fak-native-cache` (later turns mostly reused),
/// `fak-native-nocache`, and a skipped `mlx-cache`; the envelope's prompts are the turn-1
/// prompts. Returns the packet written.
pub fn write_scenario_run(dir: &Path) -> Packet {
    write_scenario_run_with(dir, 0.01)
}

/// [`write_scenario_run`] with the cache arm's later-turn TTFT given (on an H200 whose decode
/// step reads 16 GB: at least 3.3 ms a step).
pub fn write_scenario_run_with(dir: &Path, cache_later_ttft_s: f64) -> Packet {
    let spec = scenario_spec();
    let mut writer = PacketWriter::create(dir).unwrap();
    writer.set_scenario(spec.clone());
    for (arm, cache, later_ttft) in [
        ("fak-native-cache", true, cache_later_ttft_s),
        ("fak-native-nocache", false, 0.05),
    ] {
        let mut rec = writer
            .begin_scenario_arm(scenario_header(arm, cache))
            .unwrap();
        for agent in 1..=spec.agents {
            let first = turn_sample(agent, 1, 0.0, 0.04 + 0.01 * agent as f64, cache);
            let next_sent = first.sent_s + first.wall_s + 0.0005;
            rec.record(first).unwrap();
            rec.record(turn_sample(agent, 2, next_sent, later_ttft, cache))
                .unwrap();
        }
        rec.finish().unwrap();
    }
    writer
        .skip_scenario_arm(scenario_header("mlx-cache", true), "no mlx_lm here")
        .unwrap();
    let digests: Vec<String> = (1..=spec.agents)
        .map(|a| prompt_sha256(&scenario_prompt(a, 1)))
        .collect();
    let mut meta = meta();
    // An H200 and a 16 GB step: one decode step takes at least 3.3 ms.
    meta.hardware.gpu.adapter = "NVIDIA H200".into();
    meta.envelope.decode_step_bytes = Some(16_000_000_000);
    meta.envelope.n_ctx = spec.prompt_tokens(1);
    meta.envelope.n_prompts = spec.agents;
    meta.envelope.prompt_set_sha256 = prompt_set_sha256(&digests);
    meta.envelope.prompt_sha256 = digests;
    meta.method = Method::v1("fak-native-nocache");
    writer.finish(meta).unwrap()
}

/// A turn as a skipped arm should never hold.
pub fn write_scenario_turn() -> TurnSample {
    turn_sample(1, 1, 0.0, 0.05, false)
}
