//! `harness threeway`: the matched envelope — the same prompt ids, greedy, end-of-sequence
//! ignored, exactly `n_out` tokens — run on fak-native, llama.cpp and MLX one after another,
//! each in a fresh process of its own, then an untimed quality pass against a reference on the
//! unquantized weights; raw samples, quality receipts and the packet go into one folder.

mod catalog;
mod device;
mod envelope;
mod meta;
pub mod multi_agent;
pub mod quality;
mod runner;

use crate::arms::fak_native::FakNative;
use crate::arms::jsonl::JsonlArm;
use crate::arms::llama_cpp::{self, LlamaCpp};
use crate::arms::mlx::{self, Mlx};
use crate::arms::process::{EngineProcess, install_interrupt_handler, interrupted};
use crate::arms::{Arm, NotInstalled};
use crate::models::{Models, sha256_of};
use crate::selftest;
use anyhow::{Context, Result, bail};
use envelope::Prompts;
use fak_harness::packet::rounding::own_rounding;
use fak_harness::packet::summary::PacketMeta;
use fak_harness::packet::{
    self, Against, ArmHeader, ArmQuality, BucketKinds, BucketMethods, EngineInfo, Envelope,
    FlagChoice, HarnessInfo, Method, PacketWriter, QualityComparison, QualityRule, QualityStatus,
    ReferenceEngine, Runtime, Weights,
};
use quality::{ArmRows, ReferenceInfo, ReferenceRows};
use runner::{Outcome, OwnReference, Plan};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub const ARM_NAMES: [&str; 3] = ["fak-native", "llama.cpp", "mlx"];
/// Arms only the multi-agent scenario runs (a server compared with llama-server).
pub const SCENARIO_ONLY_ARMS: [&str; 1] = ["fak-serve"];

#[derive(clap::Args)]
pub struct Args {
    /// The GGUF both fak-native and llama.cpp run (default: the trained tiny Qwen3 in Q4_K_M,
    /// its f16 weights the reference, written into ${FAK_CACHE:-~/.cache/fak}/threeway on first
    /// use).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// The unquantized (f32/f16, or Q8_0 where disk forbids) GGUF of the same weights, for the
    /// quality reference (synthesized along with the default model).
    #[arg(long, requires = "model")]
    pub reference_model: Option<PathBuf>,
    /// MLX's own model directory of the same float weights (e.g. `mlx_lm.convert -q`).
    #[arg(long)]
    pub mlx_model: Option<PathBuf>,
    /// Prompt tokens per request.
    #[arg(long, default_value_t = 128, value_parser = crate::flag_values::tokens(1))]
    pub n_ctx: usize,
    /// Output tokens per request (end-of-sequence ignored).
    #[arg(long, default_value_t = 64, value_parser = crate::flag_values::tokens(1))]
    pub n_out: usize,
    /// Timed requests per arm (distinct prompts).
    #[arg(long, default_value_t = 20, value_parser = crate::flag_values::count(1))]
    pub prompts: usize,
    /// Seed of the prompt offsets into the corpus.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The arms, in the order they run.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "fak-native,llama.cpp,mlx"
    )]
    pub arms: Vec<String>,
    /// The run's folder (default experiments/benchmark/runs/by-machine/<host>/<UTC>-threeway).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The llama-server binary (default: PATH, then the CI peer under ~/.cache/fak).
    #[arg(long)]
    pub llama_server: Option<PathBuf>,
    /// llama-server's flash attention (`-fa`): on, off or auto.
    #[arg(long, default_value = "auto")]
    pub flash_attn: String,
    /// More llama-server arguments, after the arm's own (repeatable; each value is split on
    /// whitespace: `--llama-arg "--threads 8"`); recorded in the packet and the report.
    #[arg(long = "llama-arg", allow_hyphen_values = true)]
    pub llama_args: Vec<String>,
    /// Where the --model's weights come from, in words ("trained on …", "random: harness synth
    /// --fast-random"), for the packet and the report (the default model states its own).
    #[arg(long)]
    pub model_origin: Option<String>,
    /// The Python that imports mlx_lm (default: $FAK_PYTHON, then python3).
    #[arg(long)]
    pub python: Option<String>,
    /// The arm ratios are taken against.
    #[arg(long, default_value = "llama.cpp")]
    pub reference_arm: String,
    /// Prompts in the quality pass.
    #[arg(long, default_value_t = 4, value_parser = crate::flag_values::count(0))]
    pub quality_prompts: usize,
    /// Output positions teacher-forced after each quality prompt.
    #[arg(long, default_value_t = 16, value_parser = crate::flag_values::tokens(0))]
    pub quality_tail: usize,
    /// Do not run `harness selftest` first (the packet then says it was skipped).
    #[arg(long)]
    pub no_selftest: bool,
    /// Take the selftest's result from this file (`harness selftest --json --out FILE`, run
    /// earlier on this machine by this harness) instead of running it again: a device call that
    /// writes several packets checks its paths once. Its failed fast paths are switched off as
    /// after a selftest run here, and the packet carries the file.
    #[arg(long, conflicts_with = "no_selftest")]
    pub selftest_json: Option<PathBuf>,
    /// Run a scenario instead of the matched envelope: `multi-agent` (agents sharing a
    /// preamble, each engine with its prefix cache on and off; see docs/METHOD.md).
    #[arg(long, value_enum)]
    pub scenario: Option<multi_agent::ScenarioKind>,
    /// Multi-agent: agents running concurrently.
    #[arg(long, default_value_t = 4, value_parser = crate::flag_values::count(1))]
    pub agents: usize,
    /// Multi-agent: tokens of the preamble every agent's conversation starts with.
    #[arg(long, default_value_t = 512, value_parser = crate::flag_values::tokens(1))]
    pub preamble: usize,
    /// Multi-agent: new tokens each turn appends.
    #[arg(long, default_value_t = 32, value_parser = crate::flag_values::tokens(0))]
    pub suffix: usize,
    /// Multi-agent: turns per agent.
    #[arg(long, default_value_t = 3, value_parser = crate::flag_values::count(1))]
    pub turns: usize,
    /// Multi-agent: every turn 1 sent at once, or staggered by --stagger-ms.
    #[arg(long, value_enum, default_value = "together")]
    pub arrival: multi_agent::ArrivalMode,
    /// Multi-agent: milliseconds between agents' first turns with --arrival staggered.
    #[arg(long, default_value_t = 100)]
    pub stagger_ms: u64,
    /// Multi-agent: what a later turn carries as the agent's earlier replies: replies scripted
    /// from the corpus, the same for every arm (every arm sent the same prompts), or each
    /// engine's own answer (docs/METHOD.md, "The multi-agent scenario").
    #[arg(long, value_enum, default_value = "scripted")]
    pub replies: multi_agent::RepliesMode,
    /// Multi-agent: milliseconds an agent thinks between an answer and its next turn (an idle
    /// GPU may drop its clock meanwhile; each turn's packet entry shows it).
    #[arg(long, default_value_t = 0)]
    pub think_ms: u64,
    /// Multi-agent: fak's KV page size in tokens (default the engine's, 64); the prefix cache
    /// shares whole pages.
    #[arg(long)]
    pub page_size: Option<u32>,
    /// Multi-agent: fak's prefix-cache budget (bytes, or K/M/G); default enough for every
    /// agent's whole conversation.
    #[arg(long, value_parser = crate::flag_values::parse_bytes)]
    pub cache_mem: Option<u64>,
}

/// Multiply-accumulates the CPU reference may spend on the quality pass before fak's f32 GPU
/// path is used instead (≈ a minute or two on a laptop core pair).
const CPU_REFERENCE_BUDGET_MACS: f64 = 5e10;

/// The most prompt and output tokens one envelope may ask for (its prompts are held in memory):
/// 2^26, beyond any benchmark run (20 prompts of a 128k context are 2.6 M).
pub(crate) const MAX_ENVELOPE_TOKENS: usize = 1 << 26;

pub fn run(args: Args) -> Result<()> {
    install_interrupt_handler();
    for arm in &args.arms {
        let scenario_only = SCENARIO_ONLY_ARMS.contains(&arm.as_str());
        if scenario_only && args.scenario.is_none() {
            bail!("arm {arm:?} runs only in a scenario (--scenario multi-agent)");
        }
        if !ARM_NAMES.contains(&arm.as_str()) && !scenario_only {
            bail!(
                "unknown arm {arm:?}: expected some of {},{}",
                ARM_NAMES.join(","),
                SCENARIO_ONLY_ARMS.join(",")
            );
        }
    }
    if !["on", "off", "auto"].contains(&args.flash_attn.as_str()) {
        bail!(
            "--flash-attn must be on, off or auto (got {:?})",
            args.flash_attn
        );
    }
    let models = match &args.model {
        Some(gguf) => Models::user(
            gguf,
            args.reference_model.as_deref(),
            args.mlx_model.as_deref(),
        )?,
        None => Models::trained()?,
    };
    let out = match &args.out {
        Some(dir) => dir.clone(),
        None => PathBuf::from("experiments/benchmark/runs/by-machine")
            .join(meta::host_name())
            .join(format!("{}-threeway", meta::utc_stamp())),
    };
    let scratch = out.join("logs");
    std::fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
    eprintln!("threeway: writing into {}", out.display());
    if args.scenario.is_some() {
        return multi_agent::run(&args, &models, &out);
    }

    // Each flag is bounded; their product sizes the prompt set held in memory.
    let total = args.prompts * (args.n_ctx + args.n_out);
    anyhow::ensure!(
        total <= MAX_ENVELOPE_TOKENS,
        "--prompts {} × (--n-ctx {} + --n-out {}) is {total} tokens; a run holds at most \
         {MAX_ENVELOPE_TOKENS}",
        args.prompts,
        args.n_ctx,
        args.n_out
    );
    let gguf = fak::gguf::Gguf::open(&models.gguf)?;
    let tokenizer = fak::tokenizer::Tokenizer::from_gguf(&gguf)?;
    let prompts = Prompts::build(&tokenizer, args.n_ctx, args.prompts, args.seed)?;
    let n_params: u64 = gguf.tensors().iter().map(|t| t.n_elements()).sum();
    let (decode_step_bytes, prefill_flops_per_token) = spec_floors(&gguf);
    drop(gguf);
    let context = args.n_ctx + args.n_out.max(args.quality_tail) + 1;

    let selftest = selftest_or_skip(&args, &scratch)?;
    let quality_prompts = &prompts.timed[..args.quality_prompts.min(prompts.timed.len())];
    let (reference_info, reference) =
        reference(&args, &models, quality_prompts, n_params, context, &scratch)?;

    let digests: Vec<String> = prompts
        .timed
        .iter()
        .map(|p| packet::prompt_sha256(p))
        .collect();
    let envelope = Envelope {
        model_path: models.gguf.display().to_string(),
        model_sha256: sha256_of(&models.gguf)?,
        model_bytes: std::fs::metadata(&models.gguf)?.len(),
        decode_step_bytes,
        n_ctx: args.n_ctx,
        n_out: args.n_out,
        n_prompts: args.prompts,
        prompt_source: format!(
            "{} consecutive ids of harness/threeway/corpus.txt (tokenized by the model) from ChaCha8 offsets, seed {}",
            args.n_ctx, prompts.seed
        ),
        prompt_set_sha256: packet::prompt_set_sha256(&digests),
        prompt_sha256: digests,
        greedy: true,
        ignore_eos: true,
        warmup_requests: 1,
        model_origin: model_origin(&args),
        prefill_flops_per_token,
    };
    let mut writer = PacketWriter::create(&out)?;
    let mut runs = Vec::new();
    let mut adapter = selftest["adapter"].clone();
    for name in &args.arms {
        if interrupted() {
            break;
        }
        let ctx = ArmContext {
            args: &args,
            models: &models,
            envelope: &envelope,
            prompts: &prompts,
            reference: reference.as_deref(),
            cpu_reference: matches!(
                reference_info.against,
                Against::Reference {
                    engine: ReferenceEngine::CpuReference,
                    ..
                }
            ),
            context,
            scratch: &scratch,
            adapter: selftest["adapter"]["name"].as_str(),
        };
        let run = run_one(name, &ctx, &mut writer)?;
        if name == "fak-native" && adapter.is_null() {
            adapter = run.facts["adapter"].clone();
        }
        runs.push(run);
    }

    write_quality(
        &mut writer,
        &runs,
        &reference_info,
        &envelope.model_sha256,
        quality_prompts.len(),
        args.quality_tail,
    )?;
    finish_packet(writer, &args, &adapter, &selftest, envelope, &out)?;
    if runs.iter().any(|r| r.outcome.interrupted) || interrupted() {
        eprintln!(
            "threeway: interrupted; what was measured is in {}",
            out.display()
        );
        std::process::exit(130);
    }
    let failed: Vec<&str> = runs
        .iter()
        .filter(|r| r.outcome.failed.is_some())
        .map(|r| r.name.as_str())
        .collect();
    if !failed.is_empty() {
        bail!(
            "arm(s) {} failed (see the packet and {})",
            failed.join(", "),
            scratch.display()
        );
    }
    Ok(())
}

/// Writes the run's own files beside the raw ones (the selftest's output, `command.txt`), then
/// `packet.json` and the manifest, then `validation.json`: what `harness validate` says of it.
fn finish_packet(
    mut writer: PacketWriter,
    args: &Args,
    adapter: &Value,
    selftest: &Value,
    envelope: Envelope,
    out: &Path,
) -> Result<()> {
    let selftest_file = match selftest.get("skipped") {
        Some(_) => None,
        None => {
            Some(writer.write_file(packet::SELFTEST_FILE, &serde_json::to_vec_pretty(selftest)?)?)
        }
    };
    let command: Vec<String> = std::env::args().collect();
    writer.write_file(COMMAND_FILE, command_text(&command).as_bytes())?;
    let meta = PacketMeta {
        created_utc: meta::utc_now(),
        harness: HarnessInfo {
            version: env!("CARGO_PKG_VERSION").into(),
            commit: std::env::var("FAK_COMMIT").ok(),
            command,
        },
        hardware: meta::hardware(adapter, &selftest["bandwidth"]),
        toolchain: meta::toolchain(),
        envelope,
        method: Method::v1(&args.reference_arm),
        selftest: packet::selftest_raw::summary(selftest, selftest_file),
    };
    writer.finish(meta)?;
    let packet_path = out.join(packet::PACKET_FILE);
    let validation = packet::validate::validate(&packet_path);
    let path = out.join(VALIDATION_FILE);
    std::fs::write(&path, serde_json::to_vec_pretty(&validation)?)
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!(
        "threeway: packet {} ({})",
        packet_path.display(),
        if validation.valid {
            "valid".to_string()
        } else {
            format!("NOT VALID: {}", validation.errors.join("; "))
        }
    );
    Ok(())
}

/// `command.txt`: the command that made the run, one line a shell can run again.
const COMMAND_FILE: &str = "command.txt";
/// `validation.json`: `harness validate`'s answer on the finished run (outside the manifest,
/// which it checks).
const VALIDATION_FILE: &str = "validation.json";

fn command_text(argv: &[String]) -> String {
    let words: Vec<String> = argv.iter().map(|a| shell_quote(a)).collect();
    words.join(" ") + "\n"
}

/// `arg` as one shell word.
pub fn shell_quote(arg: &str) -> String {
    if !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

/// The envelope's statement of where the weights come from: the user's, or the default tiny
/// model's own.
fn model_origin(args: &Args) -> Option<String> {
    match (&args.model, &args.model_origin) {
        (_, Some(origin)) => Some(origin.clone()),
        (None, None) => Some(
            "trained: the tiny Qwen3 of experiments/trained-tiny (transformers' Qwen3 trained on \
             the project's generated text; 4096-token cut Qwen vocabulary, d 256, 2 layers); its \
             f16 GGUF is the true unquantized weights and the quality reference, the Q4_K_M file \
             is `harness quantize`'s, MLX runs its own 4-bit conversion of the same weights"
                .into(),
        ),
        (Some(_), None) => None,
    }
}

/// The roofline's numbers as the model's architecture spec gives them (None for an
/// architecture fak does not run): the weight bytes of a decode step and the FLOPs a prompt
/// token costs at the least.
fn spec_floors(gguf: &fak::gguf::Gguf) -> (Option<u64>, Option<u64>) {
    match fak::model::blueprint(gguf) {
        Ok(b) => (
            Some(b.decode_step_bytes().bytes),
            Some(b.prefill_flops_per_token()),
        ),
        Err(_) => (None, None),
    }
}

/// What every arm's run shares.
struct ArmContext<'a> {
    args: &'a Args,
    models: &'a Models,
    envelope: &'a Envelope,
    prompts: &'a Prompts,
    reference: Option<&'a [ReferenceRows]>,
    /// The reference rows came from the CPU reference (within its budget).
    cpu_reference: bool,
    context: usize,
    scratch: &'a Path,
    /// The selftest's adapter (the hardware entry's GPU), when the selftest ran.
    adapter: Option<&'a str>,
}

/// One arm's run as the rest of the command needs it.
struct ArmRun {
    name: String,
    facts: Value,
    outcome: Outcome,
}

fn make_arm(name: &str, ctx: &ArmContext) -> Result<Box<dyn Arm>, NotInstalled> {
    let (args, models, scratch) = (ctx.args, ctx.models, ctx.scratch.to_path_buf());
    match name {
        "fak-native" => Ok(Box::new(JsonlArm::new(FakNative::new(
            "fak-native",
            models.gguf.clone(),
            ctx.context,
            scratch,
        )))),
        "llama.cpp" => {
            let server = llama_cpp::find_server(args.llama_server.as_deref())?;
            let mut arm = LlamaCpp::new(
                server,
                models.gguf.clone(),
                ctx.context,
                args.flash_attn.clone(),
                quality::N_PROBS,
                scratch,
            );
            arm.extra_args = llama_args(args);
            arm.python = Some(plain_client_python(args));
            Ok(Box::new(arm))
        }
        _ => {
            let Some(dir) = &models.mlx else {
                return Err(NotInstalled(
                    "no MLX model directory: pass --mlx-model (e.g. from mlx_lm.convert -q)".into(),
                ));
            };
            let python = mlx::find_python(args.python.as_deref())?;
            Ok(Box::new(JsonlArm::new(Mlx::new(
                python,
                dir.clone(),
                scratch,
            ))))
        }
    }
}

/// `--llama-arg` values, each split into words.
pub fn llama_args(args: &Args) -> Vec<String> {
    args.llama_args
        .iter()
        .flat_map(|a| a.split_whitespace().map(str::to_string))
        .collect()
}

/// The Python that runs llama.cpp's plain-client check: `--python`, `$FAK_PYTHON`, `python3`
/// (it needs nothing beyond the standard library).
fn plain_client_python(args: &Args) -> String {
    args.python
        .clone()
        .or_else(|| std::env::var("FAK_PYTHON").ok())
        .unwrap_or_else(|| "python3".into())
}

fn run_one(name: &str, ctx: &ArmContext, writer: &mut PacketWriter) -> Result<ArmRun> {
    let mut arm = match make_arm(name, ctx) {
        Ok(arm) => arm,
        Err(NotInstalled(reason)) => {
            eprintln!("threeway: {name} skipped: {reason}");
            writer.skip_arm(header(name, None, &Value::Null, ctx)?, &reason)?;
            let outcome = Outcome::default();
            return Ok(ArmRun {
                name: name.into(),
                facts: Value::Null,
                outcome,
            });
        }
    };
    let started = arm.start();
    let facts = started.as_ref().ok().cloned().unwrap_or(Value::Null);
    let arm_header = header(name, Some(arm.as_ref()), &facts, ctx)?;
    let own = own_reference(&arm_header, ctx);
    let mut rec = writer.begin_arm(arm_header)?;
    let outcome = match started {
        Ok(_) => {
            eprintln!("threeway: {name} started (pid {})", arm.pid().unwrap_or(0));
            let plan = Plan {
                prompts: &ctx.prompts.timed,
                n_out: ctx.args.n_out,
                reference: ctx.reference,
                own,
            };
            runner::run_arm(arm.as_mut(), &plan, &mut rec)?
        }
        Err(e) => {
            arm.stop();
            let interrupted = e
                .downcast_ref::<crate::arms::process::Interrupted>()
                .is_some();
            let text = format!("{e:#}");
            eprintln!("threeway: {name} failed to start: {text}");
            rec.fault(runner::fault_record(None, &text))?;
            Outcome {
                failed: (!interrupted).then_some(text),
                interrupted,
                quality: None,
            }
        }
    };
    rec.finish()?;
    Ok(ArmRun {
        name: name.into(),
        facts,
        outcome,
    })
}

/// The arm's own-rounding reference for the quality pass (`fak_harness::packet::rounding`), or
/// why it has none; `None` without a CPU reference (no quality pass, or one beyond the CPU
/// budget: the own-rounding reference costs as much again).
fn own_reference<'a>(header: &ArmHeader, ctx: &ArmContext<'a>) -> Option<OwnReference<'a>> {
    if ctx.reference.is_none() || !ctx.cpu_reference || !header.weights.same_as_envelope {
        return None;
    }
    let max_ids = ctx.args.n_ctx + ctx.args.quality_tail;
    let plan = own_rounding(&header.arm, &header.engine, header.device.as_ref(), max_ids);
    if let Err(why) = &plan {
        eprintln!("threeway: {}: no own-rounding reference: {why}", header.arm);
    }
    Some(OwnReference {
        plan,
        weights: &ctx.models.gguf,
    })
}

/// The raw file's header: the engine as it reported itself, its weights, the envelope.
fn header(name: &str, arm: Option<&dyn Arm>, facts: &Value, ctx: &ArmContext) -> Result<ArmHeader> {
    Ok(ArmHeader {
        arm: name.into(),
        runtime: Runtime::for_arm(name),
        engine: engine_info(name, arm, facts),
        weights: weights(name, ctx.models, ctx.envelope)?,
        envelope: ctx.envelope.arm_envelope(),
        bucket_methods: bucket_methods(arm),
        device: device::of(name, facts, ctx.adapter),
    })
}

/// How the arm obtains each bucket, with its kind; for an arm that never ran, that it did not.
pub fn bucket_methods(arm: Option<&dyn Arm>) -> BucketMethods {
    let Some(m) = arm.map(|a| a.bucket_methods()) else {
        let none = || "not measured: the arm did not run".to_string();
        return BucketMethods {
            queue: none(),
            setup: none(),
            prefill: none(),
            decode: none(),
            verification: none(),
            recovery: none(),
            other: none(),
            kinds: None,
        };
    };
    BucketMethods {
        queue: m.queue.how.into(),
        setup: m.setup.how.into(),
        prefill: m.prefill.how.into(),
        decode: m.decode.how.into(),
        verification: m.verification.how.into(),
        recovery: m.recovery.how.into(),
        other: m.other.how.into(),
        kinds: Some(BucketKinds {
            queue: m.queue.kind,
            setup: m.setup.kind,
            prefill: m.prefill.kind,
            decode: m.decode.kind,
            verification: m.verification.kind,
            recovery: m.recovery.kind,
            other: m.other.kind,
        }),
    }
}

/// The engine `name` (`fak-native`, `llama.cpp`, `mlx`) as it reported itself and its flags.
fn engine_info(name: &str, arm: Option<&dyn Arm>, facts: &Value) -> EngineInfo {
    let version = match name {
        "fak-native" => facts["version"].as_str().map(|v| format!("fak {v}")),
        "fak-serve" => facts["version"]
            .as_str()
            .map(|v| format!("fak {v} (fak serve)")),
        "llama.cpp" => facts["build_info"].as_str().map(str::to_string),
        _ => facts["mlx_lm"].as_str().map(|v| {
            let text = |k: &str| facts[k].as_str().unwrap_or("?").to_string();
            format!("mlx {} mlx-lm {v} ({})", text("mlx"), text("device"))
        }),
    }
    .unwrap_or_else(|| "unknown (the engine did not report)".into());
    let flags = arm.map(|a| a.flags()).unwrap_or(Value::Null);
    EngineInfo {
        name: name.into(),
        version,
        flags: flags_list(&flags),
        build: (!facts.is_null()).then(|| facts.clone()),
        tuning: arm
            .map(|a| a.tuning())
            .unwrap_or_default()
            .into_iter()
            .map(|(flag, why)| FlagChoice { flag, why })
            .collect(),
    }
}

/// The weights engine `name` runs: MLX its own folder, the others the envelope's GGUF.
fn weights(name: &str, models: &Models, envelope: &Envelope) -> Result<Weights> {
    Ok(match (name, &models.mlx) {
        ("mlx", Some(dir)) => Weights {
            path: dir.display().to_string(),
            sha256: sha256_of(dir)?,
            format: "mlx affine 4-bit group 64, its own conversion of the same float weights (sha256 over the folder's files)".into(),
            same_as_envelope: false,
        },
        ("mlx", None) => Weights {
            path: "none".into(),
            sha256: "none".into(),
            format: "none: no MLX model directory".into(),
            same_as_envelope: false,
        },
        _ => Weights {
            path: envelope.model_path.clone(),
            sha256: envelope.model_sha256.clone(),
            format: "gguf (the envelope's file)".into(),
            same_as_envelope: true,
        },
    })
}

/// Flags as `key=value` words.
fn flags_list(flags: &Value) -> Vec<String> {
    match flags {
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => format!("{k}={s}"),
                other => format!("{k}={other}"),
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// `<arm>-quality.json` for every arm that started: each against the reference (what its
/// weights cost); each arm on the envelope's GGUF against its own-rounding reference under
/// own-rounding-parity v1 (the same model computed as that engine rounds); and llama.cpp
/// against fak-native (same GGUF) within the two references' rounding budget
/// (cross-engine-within-rounding v1), or under strict-token-parity v1 where either has no
/// own-rounding reference.
fn write_quality(
    writer: &mut PacketWriter,
    runs: &[ArmRun],
    reference: &ReferenceInfo,
    envelope_sha256: &str,
    n_prompts: usize,
    tail: usize,
) -> Result<()> {
    let rows = |name: &str| {
        runs.iter()
            .find(|r| r.name == name)
            .and_then(|r| r.outcome.quality.as_ref())
            .and_then(|q| q.as_ref().ok())
    };
    for run in runs {
        let status = match &run.outcome.quality {
            Some(Ok(_)) => QualityStatus::Ran,
            Some(Err(why)) => QualityStatus::Skipped {
                reason: why.clone(),
            },
            None if run.facts.is_null()
                || run.outcome.failed.is_some()
                || run.outcome.interrupted =>
            {
                continue;
            }
            None => QualityStatus::Skipped {
                reason: reference.why.clone(),
            },
        };
        let mut comparisons = Vec::new();
        let mut own_rounding_skipped = None;
        if let Some(Ok(arm_rows)) = &run.outcome.quality {
            let top_k = arm_rows.top_k.then_some(quality::TOP_K as u32);
            let r = quality::reference_receipts(&arm_rows.prompts);
            comparisons.push(
                QualityComparison::new(
                    reference.against.clone(),
                    QualityRule::QuantizationCost,
                    top_k,
                    r.receipts,
                )
                .with_withheld(r.withheld),
            );
            match &arm_rows.own {
                Some(Ok(own)) => {
                    let r = quality::own_receipts(&own.prompts);
                    comparisons.push(
                        QualityComparison::new(
                            Against::OwnRounding {
                                engine: ReferenceEngine::CpuReference,
                                weights_sha256: envelope_sha256.to_string(),
                                rounds_as: run.name.clone(),
                                rounding: own.plan.rules(),
                                why: own.plan.why.clone(),
                            },
                            QualityRule::own_rounding_v1(),
                            Some(quality::TOP_K as u32),
                            r.receipts,
                        )
                        .with_withheld(r.withheld),
                    );
                }
                Some(Err(why)) => own_rounding_skipped = Some(why.clone()),
                None => {}
            }
            if run.name == "llama.cpp"
                && let Some(fak) = rows("fak-native")
            {
                let (rule, r) = match (own_rows(fak), own_rows(arm_rows)) {
                    (Some(a), Some(b)) => (
                        QualityRule::cross_engine_v1(),
                        quality::budgeted_parity_receipts(fak, arm_rows, a, b),
                    ),
                    _ => (
                        QualityRule::parity_v1(),
                        quality::parity_receipts(fak, arm_rows),
                    ),
                };
                comparisons.push(
                    QualityComparison::new(
                        Against::Arm {
                            arm: "fak-native".into(),
                        },
                        rule,
                        Some(quality::TOP_K as u32),
                        r.receipts,
                    )
                    .with_withheld(r.withheld),
                );
            }
        }
        writer.write_quality(ArmQuality {
            schema: String::new(),
            arm: run.name.clone(),
            status,
            prompt_indices: (0..n_prompts).collect(),
            output_positions: tail,
            comparisons,
            own_rounding_skipped,
        })?;
    }
    Ok(())
}

/// The arm's rows against its own-rounding reference, where it has one.
fn own_rows(rows: &ArmRows) -> Option<&quality::OwnRows> {
    rows.own.as_ref().and_then(|o| o.as_ref().ok())
}

/// The reference rows for the quality pass: the CPU reference where it finishes in minutes,
/// else fak's f32 GPU path, on the unquantized weights; none without such weights.
fn reference(
    args: &Args,
    models: &Models,
    prompts: &[Vec<u32>],
    n_params: u64,
    context: usize,
    scratch: &Path,
) -> Result<(ReferenceInfo, Option<Vec<ReferenceRows>>)> {
    let Some(weights) = &models.reference else {
        let info = ReferenceInfo {
            against: Against::Reference {
                engine: ReferenceEngine::CpuReference,
                weights: "none".into(),
                weights_sha256: String::new(),
                label: None,
            },
            why: "no unquantized weights (--reference-model): the comparison against the reference is skipped".into(),
        };
        return Ok((info, None));
    };
    let rows_total = prompts
        .iter()
        .map(|p| p.len() + args.quality_tail)
        .sum::<usize>();
    let macs = n_params as f64 * rows_total as f64;
    let cpu = macs <= CPU_REFERENCE_BUDGET_MACS;
    eprintln!(
        "threeway: quality reference on {} ({})",
        weights.display(),
        if cpu {
            "CPU reference"
        } else {
            "fak f32 GPU path"
        }
    );
    let rows = if cpu {
        quality::cpu_reference(weights, prompts, args.quality_tail)?
    } else {
        let mut arm = JsonlArm::new(FakNative::new(
            "fak-reference",
            weights.clone(),
            context,
            scratch.to_path_buf(),
        ));
        arm.start()?;
        let rows = quality::arm_reference(&mut arm, prompts, args.quality_tail);
        arm.stop();
        rows?
    };
    let info = ReferenceInfo {
        against: Against::Reference {
            engine: if cpu {
                ReferenceEngine::CpuReference
            } else {
                ReferenceEngine::FakF32Gpu
            },
            weights: reference_weights_type(weights)?,
            weights_sha256: sha256_of(weights)?,
            label: model_origin(args).map(|o| format!("the unquantized weights of {o}")),
        },
        why: format!(
            "{:.2e} multiply-accumulates ({} parameters × {rows_total} rows) {} the CPU budget of {:.0e}",
            macs,
            n_params,
            if cpu { "within" } else { "beyond" },
            CPU_REFERENCE_BUDGET_MACS
        ),
    };
    Ok((info, Some(rows)))
}

/// The selftest's result, or why it was skipped; fast paths it failed are switched off for the
/// fak processes the run starts.
fn selftest_or_skip(args: &Args, scratch: &Path) -> Result<Value> {
    if args.no_selftest {
        return Ok(json!({"skipped": "--no-selftest"}));
    }
    let selftest = match &args.selftest_json {
        Some(path) => {
            eprintln!("threeway: the selftest's result from {}", path.display());
            read_selftest(path)?
        }
        None => run_selftest(scratch)?,
    };
    force_off_failed_fast_paths(&selftest);
    Ok(selftest)
}

/// A `harness selftest --json` result written to `path`; a failed selftest is a result too
/// (the packet records it), anything else is an error.
fn read_selftest(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the selftest result {}", path.display()))?;
    let result: Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    anyhow::ensure!(
        result["schema"] == json!(selftest::SCHEMA),
        "{} is not a `harness selftest --json` result (schema {}, not {})",
        path.display(),
        result["schema"],
        selftest::SCHEMA
    );
    if result["pass"] != json!(true) {
        eprintln!("threeway: selftest FAILED on this adapter (recorded in the packet)");
    }
    Ok(result)
}

/// Switches off, for every fak process this run starts (they inherit `FAK_FORCE`), each fast
/// path selftest failed on this adapter (its `force`), so fak runs only paths proven here.
fn force_off_failed_fast_paths(selftest: &Value) {
    let force = selftest["force"].as_str().unwrap_or("");
    if force.is_empty() {
        return;
    }
    let merged = match std::env::var("FAK_FORCE") {
        Ok(given) if !given.is_empty() => format!("{given},{force}"),
        _ => force.to_string(),
    };
    eprintln!("threeway: selftest failed a fast path here; fak runs with FAK_FORCE={merged}");
    // SAFETY: no other thread reads or writes the environment here: the selftest child has
    // exited, no arm has started, and the only other threads are rayon's idle workers.
    unsafe { std::env::set_var("FAK_FORCE", &merged) };
}

/// `harness selftest --json` in a child process (the harness itself never holds the GPU).
fn run_selftest(scratch: &Path) -> Result<Value> {
    eprintln!("threeway: selftest on this machine's adapter");
    let exe = std::env::current_exe().context("locating the harness binary")?;
    let mut command = Command::new(exe);
    let log = scratch.join("selftest.log");
    let out_path = scratch.join("selftest.json");
    command.args(["selftest", "--json", "--out"]).arg(&out_path);
    let mut process = EngineProcess::spawn("selftest", command, &log, false)?;
    loop {
        if interrupted() {
            process.kill();
            return Err(crate::arms::process::Interrupted.into());
        }
        if process.exited() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let exit = process.stop(Duration::from_secs(1));
    if !out_path.exists() {
        return Err(process.died(&format!(
            "wrote no result {}; {}",
            out_path.display(),
            exit.status
        )));
    }
    read_selftest(&out_path)
}

/// `f32`, `f16` or `q8_0`: the reference file's `general.file_type`.
fn reference_weights_type(path: &Path) -> Result<String> {
    let gguf = fak::gguf::Gguf::open(path)?;
    let file_type = gguf.metadata().u32("general.file_type").unwrap_or(u32::MAX);
    Ok(match file_type {
        0 => "f32",
        1 => "f16",
        7 => "q8_0",
        _ => bail!(
            "--reference-model {}: general.file_type {file_type} is neither unquantized (f32, f16) nor q8_0",
            path.display()
        ),
    }
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("fak-threeway-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// `--selftest-json` takes a selftest result, passed or failed, and nothing else: another
    /// JSON file, a file that is not JSON or no file at all is an error naming the file.
    #[test]
    fn a_selftest_result_is_read_back_and_anything_else_refused() {
        let failed = json!({"schema": selftest::SCHEMA, "pass": false, "force": "no-coop-matrix"});
        let path = written("failed.json", &failed.to_string());
        assert_eq!(read_selftest(&path).unwrap(), failed);
        for (name, text) in [
            ("packet.json", r#"{"schema": "fak.macbench.comparison.v1"}"#),
            ("truncated.json", r#"{"schema": "fak.selftest.v1", "pass""#),
        ] {
            let path = written(name, text);
            let err = format!("{:#}", read_selftest(&path).unwrap_err());
            assert!(err.contains(name), "{err}");
        }
        let err = format!(
            "{:#}",
            read_selftest(Path::new("/nonexistent/st.json")).unwrap_err()
        );
        assert!(err.contains("/nonexistent/st.json"), "{err}");
    }
}
