//! `harness threeway`: the matched envelope — the same prompt ids, greedy, end-of-sequence
//! ignored, exactly `n_out` tokens — run on fak-native, llama.cpp and MLX one after another,
//! each in a fresh process of its own, then an untimed quality pass against a reference on the
//! unquantized weights; raw samples, quality receipts and the packet go into one folder.

mod envelope;
pub mod models;
pub mod quality;
mod runner;

use crate::arms::fak_native::FakNative;
use crate::arms::llama_cpp::{self, LlamaCpp};
use crate::arms::mlx::{self, Mlx};
use crate::arms::process::{EngineProcess, install_interrupt_handler, interrupted};
use crate::arms::{Arm, NotInstalled};
use anyhow::{Context, Result, bail};
use envelope::Prompts;
use models::{Models, sha256_of};
use quality::{ReferenceInfo, ReferenceRows};
use runner::{ArmRecord, Plan, RawFile, Status};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub const ARM_NAMES: [&str; 3] = ["fak-native", "llama.cpp", "mlx"];

#[derive(clap::Args)]
pub struct Args {
    /// The GGUF both fak-native and llama.cpp run (default: the tiny synthetic Qwen3, written
    /// into ${FAK_CACHE:-~/.cache/fak}/threeway on first use).
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
    #[arg(long, default_value_t = 128)]
    pub n_ctx: usize,
    /// Output tokens per request (end-of-sequence ignored).
    #[arg(long, default_value_t = 64)]
    pub n_out: usize,
    /// Timed requests per arm (distinct prompts).
    #[arg(long, default_value_t = 20)]
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
    /// The Python that imports mlx_lm (default: $FAK_PYTHON, then python3).
    #[arg(long)]
    pub python: Option<String>,
    /// The arm ratios are taken against.
    #[arg(long, default_value = "llama.cpp")]
    pub reference_arm: String,
    /// Prompts in the quality pass.
    #[arg(long, default_value_t = 4)]
    pub quality_prompts: usize,
    /// Output positions teacher-forced after each quality prompt.
    #[arg(long, default_value_t = 16)]
    pub quality_tail: usize,
    /// Reference top-2 logit margin under which a token difference counts as a near-tie.
    #[arg(long, default_value_t = 0.01)]
    pub tie_margin: f32,
    /// Do not run `harness selftest` first (the packet then says it was skipped).
    #[arg(long)]
    pub no_selftest: bool,
}

/// Multiply-accumulates the CPU reference may spend on the quality pass before fak's f32 GPU
/// path is used instead (≈ a minute or two on a laptop core pair).
const CPU_REFERENCE_BUDGET_MACS: f64 = 5e10;

pub fn run(args: Args) -> Result<()> {
    install_interrupt_handler();
    for arm in &args.arms {
        if !ARM_NAMES.contains(&arm.as_str()) {
            bail!(
                "unknown arm {arm:?}: expected some of {}",
                ARM_NAMES.join(",")
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
        None => Models::synthetic()?,
    };
    let out = match &args.out {
        Some(dir) => dir.clone(),
        None => PathBuf::from("experiments/benchmark/runs/by-machine")
            .join(models::host_name())
            .join(format!("{}-threeway", models::utc_stamp())),
    };
    let scratch = out.join("logs");
    std::fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
    eprintln!("threeway: writing into {}", out.display());

    let gguf = fak::gguf::Gguf::open(&models.gguf)?;
    let tokenizer = fak::tokenizer::Tokenizer::from_gguf(&gguf)?;
    let prompts = Prompts::build(&tokenizer, args.n_ctx, args.prompts, args.seed)?;
    let n_params: u64 = gguf.tensors().iter().map(|t| t.n_elements()).sum();
    drop(gguf);
    let context = args.n_ctx + args.n_out.max(args.quality_tail) + 1;

    let selftest = if args.no_selftest {
        json!({"skipped": "--no-selftest"})
    } else {
        run_selftest(&scratch)?
    };
    force_off_failed_fast_paths(&selftest);
    let quality_prompts = &prompts.timed[..args.quality_prompts.min(prompts.timed.len())];
    let (reference_info, reference) =
        reference(&args, &models, quality_prompts, n_params, context, &scratch)?;

    let mut records = Vec::new();
    for name in &args.arms {
        if interrupted() {
            break;
        }
        let record = run_one(
            name,
            &args,
            &models,
            &prompts,
            reference.as_deref(),
            context,
            &scratch,
            &out,
        )?;
        records.push(record);
    }

    let parity = parity(&records, args.tie_margin);
    let packet = packet::assemble(
        &args,
        &models,
        &prompts,
        &reference_info,
        &records,
        &parity,
        &selftest,
        &out,
    )?;
    let interrupted_run = records.iter().any(|r| r.status == Status::Interrupted) || interrupted();
    eprintln!("threeway: packet {}", packet.display());
    if interrupted_run {
        eprintln!(
            "threeway: interrupted; what was measured is in {}",
            out.display()
        );
        std::process::exit(130);
    }
    let failed: Vec<&str> = records
        .iter()
        .filter(|r| r.status == Status::Failed)
        .map(|r| r.arm.as_str())
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

#[allow(clippy::too_many_arguments)]
fn run_one(
    name: &str,
    args: &Args,
    models: &Models,
    prompts: &Prompts,
    reference: Option<&[ReferenceRows]>,
    context: usize,
    scratch: &Path,
    out: &Path,
) -> Result<ArmRecord> {
    let raw = RawFile {
        path: out.join(format!("{name}-raw.json")),
    };
    let arm: Result<Box<dyn Arm>, NotInstalled> = match name {
        "fak-native" => Ok(Box::new(FakNative::new(
            "fak-native",
            models.gguf.clone(),
            context,
            scratch.to_path_buf(),
        ))),
        "llama.cpp" => llama_cpp::find_server(args.llama_server.as_deref()).map(|server| {
            Box::new(LlamaCpp::new(
                server,
                models.gguf.clone(),
                context,
                args.flash_attn.clone(),
                quality::N_PROBS,
                scratch.to_path_buf(),
            )) as Box<dyn Arm>
        }),
        _ => match &models.mlx {
            None => Err(NotInstalled(
                "no MLX model directory: pass --mlx-model (e.g. from mlx_lm.convert -q)".into(),
            )),
            Some(dir) => mlx::find_python(args.python.as_deref()).map(|python| {
                Box::new(Mlx::new(python, dir.clone(), scratch.to_path_buf())) as Box<dyn Arm>
            }),
        },
    };
    let runtime = if name == "fak-native" {
        "native"
    } else {
        "reference"
    };
    let mut arm = match arm {
        Ok(arm) => arm,
        Err(NotInstalled(reason)) => {
            eprintln!("threeway: {name} skipped: {reason}");
            let record = ArmRecord::skipped(name, runtime, reason, args.n_ctx, args.n_out);
            raw.write(&record)?;
            return Ok(record);
        }
    };
    let mut record = ArmRecord::new(arm.as_ref(), args.n_ctx, args.n_out);
    let plan = Plan {
        warmup: &prompts.warmup,
        prompts: &prompts.timed,
        n_out: args.n_out,
        reference,
    };
    runner::run_arm(arm.as_mut(), &plan, &mut record, &raw)?;
    if let Some(q) = &record.quality {
        let path = out.join(format!("{name}-quality.json"));
        std::fs::write(&path, serde_json::to_vec_pretty(q)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(record)
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
            kind: "none".into(),
            weights: String::new(),
            weights_sha256: String::new(),
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
        let mut arm = FakNative::new(
            "fak-reference",
            weights.clone(),
            context,
            scratch.to_path_buf(),
        );
        arm.start()?;
        let rows = quality::arm_reference(&mut arm, prompts, args.quality_tail);
        arm.stop();
        rows?
    };
    let info = ReferenceInfo {
        kind: if cpu { "cpu-reference" } else { "fak-f32-gpu" }.into(),
        weights: weights.display().to_string(),
        weights_sha256: sha256_of(weights)?,
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

fn parity(records: &[ArmRecord], tie_margin: f32) -> Option<quality::Parity> {
    let find = |name: &str| {
        records
            .iter()
            .find(|r| r.arm == name)
            .and_then(|r| r.quality.as_ref())
    };
    let (a, b) = (find("fak-native")?, find("llama.cpp")?);
    Some(quality::parity(
        ("fak-native", a),
        ("llama.cpp", b),
        tie_margin,
    ))
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
    let text = std::fs::read_to_string(&out_path).map_err(|e| {
        process.died(&format!(
            "wrote no result {} ({e}); {}",
            out_path.display(),
            exit.status
        ))
    })?;
    let result: Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", out_path.display()))?;
    if result["pass"] != json!(true) {
        eprintln!("threeway: selftest FAILED on this adapter (recorded in the packet)");
    }
    Ok(result)
}

mod packet;
