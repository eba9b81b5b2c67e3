//! `harness selftest`: proof, on this machine's own adapter, that fak's kernels compute what the
//! CPU reference computes, plus the adapter's measured read bandwidth.
//!
//! Kernel by kernel: the Gated DeltaNet kernels (ssm_conv, delta_prep, gated_delta,
//! gated_delta_chunk, gated_norm), decode and prefill attention, RMSNorm, the fused norm + RoPE +
//! KV write (rope_kv), the embedding, the elementwise ops, argmax, dequantization, the prefill
//! mat-mul and the decode mat-vec (its integer path too: quantize_q8 and matvec_q8) on every
//! variant the adapter can run (every table type where the kernel has a pipeline per type), on
//! seeded random inputs with NaN-poisoned outputs, measured against the CPU reference under the
//! GPU tests' tolerances (`fak_harness::checks`, the cases the GPU tests assert).
//!
//! Model by model: for every combination of kernel paths the adapter can run
//! (`GpuContext::runnable_paths`: subgroup or not, f16 or not, cooperative matrices where
//! enabled) the engine loads the tiny synthetic Qwen3 and Qwen3.5 — each f32 and in the Q4_K_M
//! recipe, which between them use every weight type and every kernel of both models — with
//! activations, logits and caches NaN-poisoned, and is held to `fak::reference`: teacher-forced
//! logits (prefill steps of 16 rows: the mat-mul, tiled attention, the chunked delta rule) at
//! cosine ≥ 0.99999 on every row, and 4 greedy tokens (decode: mat-vec, decode attention, the
//! recurrent delta rule, GPU argmax) identical. On int-dot paths the oracle rounds the mat-vecs'
//! inputs as the integer path does, and the logits come from decode steps, the only steps that
//! take it (`fak_harness::checks::model`, which runs each check).
//!
//! A fast path (subgroups, f16, cooperative matrices, integer dot products) is trusted only if every check that ran
//! with it passed; `force` is the `FAK_FORCE` value that switches off the others, and the
//! `threeway` fak-native arm runs with it. Then a streaming-read kernel is timed with timestamp
//! queries where the adapter has them (else the wall clock around a blocking submit).

use crate::models::{Models, cache_dir};
use crate::synth;
use anyhow::{Context, Result};
use fak::gpu::kernels::read_probe::{ProbeTiming, ReadProbe};
use fak::gpu::{ContextOptions, Forced, GpuContext, KernelPaths};
use fak::reference::Activations;
use fak_harness::checks::model::{self, MIN_COSINE, ModelCheck, Oracle, PROMPT_TOKENS};
use fak_harness::checks::{self, report::KernelCheck};
use fak_harness::packet::selftest_raw::SelftestBandwidth as Bandwidth;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON result to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// The JSON result's `schema` (`threeway --selftest-json` reads only this).
pub const SCHEMA: &str = "fak.selftest.v1";

/// Timed passes of the read-bandwidth probe (after its own warm-ups).
const BANDWIDTH_PASSES: usize = 7;

pub fn run(args: Args) -> Result<()> {
    let start = Instant::now();
    let qwen3 = Models::synthetic()?;
    let qwen35 = tiny_qwen35()?;
    let options = ContextOptions::from_env()?;
    let ctx = GpuContext::new(&options)?;
    let facts = ctx.facts().clone();
    let paths = every_path(&ctx);
    let kernels = checks::report::run_all(&ctx);
    let bandwidth = measure_bandwidth(&ctx).context("measuring the read bandwidth")?;
    drop(ctx);

    let mut checks = Vec::new();
    let reference = qwen3
        .reference
        .as_deref()
        .expect("the synthetic model has one");
    for model in [reference, qwen3.gguf.as_path(), &qwen35[0], &qwen35[1]] {
        let ids = random_ids(7, PROMPT_TOKENS);
        let f32_oracle = Oracle::cpu(model, &ids, Activations::F32)?;
        // Only where the integer path is taken (the adapter's default, or FAK_INT_DOT=1): its
        // own oracle, every id a decode step so that every projection takes the path.
        let int_dot_oracle = match paths.iter().any(|(_, p)| p.int_dot) {
            true => Some(Oracle::cpu(model, &ids, Activations::Q8Blocks)?),
            false => None,
        };
        for &forced in &paths {
            let oracle = match (forced.1.int_dot, &int_dot_oracle) {
                (true, Some(o)) => o,
                _ => &f32_oracle,
            };
            checks.extend(model::check(model, &options, forced, &ids, oracle));
        }
    }
    let fast_paths = fast_path_verdicts(&paths, &checks, &kernels);
    let force: Vec<&str> = fast_paths
        .iter()
        .filter(|v| v.verdict == "failed")
        .map(|v| v.force)
        .collect();
    let pass = checks.iter().all(|c| c.pass) && kernels.iter().all(|k| k.pass);
    let result = json!({
        "schema": SCHEMA,
        "pass": pass,
        "adapter": facts,
        "paths": paths.iter().map(|f| f.1.name()).collect::<Vec<_>>(),
        "coverage": "kernel by kernel on every variant: the Gated DeltaNet kernels (ssm_conv, delta_prep, gated_delta, gated_delta_chunk, gated_norm), decode and prefill attention, RMSNorm, the fused norm + RoPE + KV write (rope_kv), the embedding and dequantization (every table type), the element-wise ops (SwiGLU, residual add, sigmoid gate), argmax, the prefill mat-mul (every weight type), the decode mat-vec (f32 path with its folded norm and gate/up pairing; on int-dot variants quantize_q8 and the integer product); model by model on every path the adapter can run: every kernel the dense Qwen3 and the hybrid Qwen3.5 run (weight types F32, Q8_0, Q5_0, Q4_K, Q6_K)",
        "threshold_min_cosine": MIN_COSINE,
        "threshold_min_cosine_coop_matrix": checks::COOP_MIN_COSINE,
        "kernels": kernels,
        "checks": checks,
        "fast_paths": fast_paths,
        "force": force.join(","),
        "bandwidth": bandwidth,
        "seconds": start.elapsed().as_secs_f64(),
    });
    if let Some(path) = &args.out {
        std::fs::write(path, serde_json::to_vec_pretty(&result)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        print_table(&result);
    }
    if !pass {
        anyhow::bail!("selftest failed on {}", facts.name);
    }
    Ok(())
}

/// Every runnable path, as the `Forced` that makes the engine take it.
fn every_path(ctx: &GpuContext) -> Vec<(Forced, KernelPaths)> {
    let mut out: Vec<(Forced, KernelPaths)> = Vec::new();
    for p in ctx.runnable_paths() {
        let forced = Forced {
            no_subgroup: !p.subgroup,
            no_f16: !p.f16,
            no_coop_matrix: p.coop_matrix.is_none(),
            no_int_dot: !p.int_dot,
        };
        let taken = ctx.paths().without(forced);
        if !out.iter().any(|(_, q)| *q == taken) {
            out.push((forced, taken));
        }
    }
    out
}

fn random_ids(seed: u64, n: usize) -> Vec<u32> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(0..151_936)).collect()
}

/// The tiny synthetic Qwen3.5 (f32, Q4_K_M), written into the cache on first use the way
/// [`Models::synthetic`] writes the Qwen3: into a folder of this process's own, renamed into
/// place when complete.
fn tiny_qwen35() -> Result<[PathBuf; 2]> {
    let dir = cache_dir()
        .join("selftest")
        .join(format!("qwen35-tiny-seed1-v{}", env!("CARGO_PKG_VERSION")));
    let files = |dir: &Path| {
        [
            dir.join("qwen35-tiny-f32.gguf"),
            dir.join("qwen35-tiny-q4_k_m.gguf"),
        ]
    };
    if dir.is_dir() {
        return Ok(files(&dir));
    }
    let tmp = dir.with_extension(format!("partial-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    eprintln!(
        "selftest: writing the tiny synthetic Qwen3.5 into {}",
        dir.display()
    );
    for (quant, out) in [synth::Quant::F32, synth::Quant::Q4KM]
        .into_iter()
        .zip(files(&tmp))
    {
        synth::write(synth::Args {
            arch: synth::Arch::Qwen35,
            preset: "tiny".into(),
            quant,
            seed: 1,
            vocab: synth::Vocab::Full,
            out,
            hf_dir: None,
            fast_random: false,
            layout_only: false,
            mlx_4bit: None,
            f16_reference: None,
            weights: None,
        })?;
    }
    if std::fs::rename(&tmp, &dir).is_err() {
        // Another run finished first; its model is the same (same seed), keep it.
        let _ = std::fs::remove_dir_all(&tmp);
        anyhow::ensure!(dir.is_dir(), "could not move {} into place", tmp.display());
    }
    Ok(files(&dir))
}

/// Whether one fast path may switch itself on here.
#[derive(Serialize)]
struct FastPath {
    path: &'static str,
    /// `passed` (every check that ran with it passed), `failed`, or `not available`.
    verdict: &'static str,
    /// The `FAK_FORCE` word that switches it off.
    force: &'static str,
    checks_run: usize,
}

/// A fast path's name, its `FAK_FORCE` word, and whether a variant takes it.
type FastPathAxis = (&'static str, &'static str, fn(&KernelPaths) -> bool);

/// A verdict per fast path from every model check (by the paths its engine took) and kernel check
/// (by the variant the kernel ran).
fn fast_path_verdicts(
    paths: &[(Forced, KernelPaths)],
    checks: &[ModelCheck],
    kernels: &[KernelCheck],
) -> Vec<FastPath> {
    let axes: [FastPathAxis; 4] = [
        ("subgroup", "no-subgroup", |p| p.subgroup),
        ("f16", "no-f16", |p| p.f16),
        ("coop_matrix", "no-coop-matrix", |p| p.coop_matrix.is_some()),
        ("int_dot", "no-int-dot", |p| p.int_dot),
    ];
    axes.into_iter()
        .map(|(path, force, uses)| {
            let by_name = |name: &str| {
                paths
                    .iter()
                    .find(|(_, p)| p.name() == name)
                    .map(|(_, p)| *p)
            };
            let model = checks
                .iter()
                .filter(|c| by_name(&c.paths).is_some_and(|p| uses(&p)));
            let kernel = kernels.iter().filter(|k| uses(&k.variant_paths));
            let results: Vec<bool> = model
                .map(|c| c.pass)
                .chain(kernel.map(|k| k.pass))
                .collect();
            let verdict = if results.is_empty() {
                "not available"
            } else if results.iter().all(|&p| p) {
                "passed"
            } else {
                "failed"
            };
            FastPath {
                path,
                verdict,
                force,
                checks_run: results.len(),
            }
        })
        .collect()
}

/// Times the engine's read probe over the largest buffer one binding allows (at most 1 GiB and
/// a quarter of the adapter's memory): its warm-up passes, then [`BANDWIDTH_PASSES`] timed.
fn measure_bandwidth(ctx: &GpuContext) -> Result<Bandwidth> {
    let cap = ctx.facts().memory_bytes.map_or(u64::MAX, |m| m / 4);
    let size = ctx.max_binding_size().min(1 << 30).min(cap);
    let probe = ReadProbe::new(ctx)?.measure(ctx, size, BANDWIDTH_PASSES)?;
    let mut rates: Vec<f64> = probe
        .pass_seconds
        .iter()
        .filter(|&&s| s > 0.0)
        .map(|s| probe.bytes as f64 / s)
        .collect();
    rates.sort_by(f64::total_cmp);
    anyhow::ensure!(
        !rates.is_empty(),
        "no bandwidth pass had a positive duration"
    );
    Ok(Bandwidth {
        method: match probe.timing {
            ProbeTiming::PassTimestamps => "timestamp queries",
            ProbeTiming::HostWall => "wall clock (no timestamp queries)",
        }
        .into(),
        bytes_per_pass: probe.bytes,
        passes: rates.len(),
        best_bytes_per_s: *rates.last().expect("non-empty"),
        median_bytes_per_s: rates[rates.len() / 2],
    })
}

fn print_table(result: &serde_json::Value) {
    println!(
        "selftest on {} ({}): {}",
        result["adapter"]["name"].as_str().unwrap_or("?"),
        result["adapter"]["backend"].as_str().unwrap_or("?"),
        if result["pass"] == json!(true) {
            "PASS"
        } else {
            "FAIL"
        }
    );
    for k in result["kernels"].as_array().into_iter().flatten() {
        println!(
            "  {:<6} {:<18} {:<14} {:<40} {}",
            if k["pass"] == json!(true) {
                "ok"
            } else {
                "FAIL"
            },
            k["kernel"].as_str().unwrap_or(""),
            k["variant"].as_str().unwrap_or(""),
            k["case"].as_str().unwrap_or(""),
            k["measured"]["worst_of_tolerance"]
                .as_f64()
                .map_or(k["error"].as_str().unwrap_or("").to_string(), |v| format!(
                    "{v:.3} of tolerance"
                ))
        );
    }
    for c in result["checks"].as_array().into_iter().flatten() {
        println!(
            "  {:<6} {:<22} {:<18} {:<22} {}",
            if c["pass"] == json!(true) {
                "ok"
            } else {
                "FAIL"
            },
            c["model"].as_str().unwrap_or(""),
            c["paths"].as_str().unwrap_or(""),
            c["check"].as_str().unwrap_or(""),
            c["min_cosine"]
                .as_f64()
                .map_or(c["error"].as_str().unwrap_or("").to_string(), |v| format!(
                    "min cosine {v:.7}"
                ))
        );
    }
    for f in result["fast_paths"].as_array().into_iter().flatten() {
        println!(
            "  fast path {:<12} {}",
            f["path"].as_str().unwrap_or(""),
            f["verdict"].as_str().unwrap_or("")
        );
    }
    let bw = &result["bandwidth"];
    println!(
        "  read bandwidth: {:.1} GB/s best, {:.1} GB/s median ({})",
        bw["best_bytes_per_s"].as_f64().unwrap_or(0.0) / 1e9,
        bw["median_bytes_per_s"].as_f64().unwrap_or(0.0) / 1e9,
        bw["method"].as_str().unwrap_or("")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model_check(paths: &str, pass: bool) -> ModelCheck {
        ModelCheck {
            model: "m.gguf".into(),
            paths: paths.into(),
            check: "greedy tokens",
            min_cosine: None,
            tokens_equal: Some(pass),
            pass,
            error: None,
        }
    }

    /// One failed check on a path with subgroups condemns subgroups (and only them); f16 passed
    /// where every f16 check passed; a path the adapter lacks is not available.
    #[test]
    fn a_fast_path_is_trusted_only_where_every_check_with_it_passed() {
        let path = |subgroup, f16| KernelPaths {
            subgroup,
            f16,
            ..KernelPaths::FALLBACK
        };
        let forced = |p: KernelPaths| (Forced::default(), p);
        let paths = [
            forced(path(false, false)),
            forced(path(true, false)),
            forced(path(false, true)),
        ];
        let checks = [
            model_check("fallback", true),
            model_check("subgroup", false),
            model_check("f16", true),
        ];
        let verdicts = fast_path_verdicts(&paths, &checks, &[]);
        let verdict = |name: &str| verdict_of(&verdicts, name);
        assert_eq!(verdict("subgroup"), ("failed", 1));
        assert_eq!(verdict("f16"), ("passed", 1));
        assert_eq!(verdict("coop_matrix"), ("not available", 0));
    }

    /// The verdict on fast path `name` and how many checks it rests on.
    fn verdict_of(verdicts: &[FastPath], name: &str) -> (&'static str, usize) {
        verdicts
            .iter()
            .find(|v| v.path == name)
            .map(|v| (v.verdict, v.checks_run))
            .unwrap()
    }

    fn kernel_check(kernel: &'static str, variant: KernelPaths, pass: bool) -> KernelCheck {
        KernelCheck {
            kernel,
            variant: variant.name(),
            variant_paths: variant,
            path: variant.name(),
            case: "case".into(),
            tolerance: checks::Tolerance::EXACT,
            measured: None,
            pass,
            error: None,
        }
    }

    /// Kernel checks count by the variant the kernel ran: a failed f16 rope_kv condemns f16 even
    /// where every model passed, a failed fallback variant condemns no fast path, and a kernel
    /// whose variant ignores a fast path (embed) does not count for it.
    #[test]
    fn a_failed_kernel_variant_condemns_the_fast_paths_it_took() {
        let path = |subgroup, f16| KernelPaths {
            subgroup,
            f16,
            coop_matrix: None,
            int_dot: false,
        };
        let paths = [
            (Forced::default(), path(false, false)),
            (Forced::default(), path(true, true)),
        ];
        let checks = [
            model_check("fallback", true),
            model_check("subgroup+f16", true),
        ];
        let kernels = [
            kernel_check("rope_kv", path(false, true), false),
            kernel_check("rope_kv", path(true, false), true),
            kernel_check("argmax", path(false, false), false),
            kernel_check("embed", path(false, false), true),
        ];
        assert_eq!(paths[1].1.name(), "subgroup+f16");
        let verdicts = fast_path_verdicts(&paths, &checks, &kernels);
        let verdict = |name: &str| verdict_of(&verdicts, name);
        assert_eq!(verdict("f16"), ("failed", 2));
        assert_eq!(verdict("subgroup"), ("passed", 2));
        assert_eq!(verdict("coop_matrix"), ("not available", 0));
    }
}
