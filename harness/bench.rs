//! `harness bench`: where a prefill's and a decode step's time go, op by op, against the memory
//! roofline.
//!
//! First one untimed request of the first depth's length (pipelines built on first use, first
//! allocations). Then for each cache depth: a prompt of `depth` seeded random token ids is prefilled, `n_out` tokens
//! are decoded greedily the way `harness run` does (GPU-resident, steps in flight) for the decode
//! rate, the host's encode time and the submits per token; then the prompt is prefilled once
//! more, chunk by chunk as that prefill ran, with a GPU timestamp after every op (each chunk one
//! step, waited for), and its ops' times are summed over the chunks; then `--profile-steps`
//! single decode steps after the prompt are run the same way, and the median of each op's time
//! is reported; and `--suffix` more tokens, profiled in that same prefill right after the
//! prompt's chunks, are reported apart as the steps a prefix-cache hit on the prompt computes
//! (the restore of its cached state and the cache's bookkeeping are not in it). With
//! `--cache-mem`, the prompt's timed request fills the prefix cache and the prompt + suffix then
//! runs as a request right after it: a cache hit timed as `harness run` times a request (TTFT),
//! with the host time of its phases
//! (open, steps, snapshots, insert, wait: `fak::runtime::PrefillPhases`) — the whole request
//! path beside the resumed steps' GPU time, back to back, with no idle gap before it.
//! Each op comes with the bytes it moves and, for weight products, its FLOPs
//! (2 · rows · cols · tokens), as its kernels' `encode` reported them (`fak::gpu::profile::
//! Recorded`), hence GB/s and TFLOP/s. Ops are grouped by name and kernel: a
//! prefill whose last chunk is short enough for mat-vecs shows both kernels of a product.
//!
//! Roofline: a step must read every weight tensor it uses (the embedding table: one row) and the
//! KV cache at its depth; those bytes over the read bandwidth this device's own probe measured
//! (`read_probe`, run first) is the fastest the step can be. Each op's `roofline_fraction` is its
//! bytes' time at that bandwidth over its measured time.
//!
//! Without timestamps inside passes (Apple GPUs) there is no per-op time: the report says so and
//! gives whole-step host times instead.
//!
//! With `--probe` (a measurement, not a form: `fak::gpu::profile::DecodeProbe`), each depth's
//! decode also runs unprofiled under each probe — an op class recorded twice (`ffn_gate_up*2`)
//! or left out (`ffn_norm*0`) in every layer — interleaved with the default over
//! `--probe-rounds` rounds on the same loaded model; the difference in µs a token is what that
//! op costs in its place, without the timestamps that inflate a profile. A probe that keeps the
//! default's bits (`DecodeProbe::keeps_bits`: repeated ops that only overwrite their outputs)
//! must decode the default's tokens, and the default the same tokens in every round, or the
//! bench fails before it reports.

use anyhow::{Context, Result, bail};
use fak::gpu::kernels::read_probe::{ReadBandwidth, ReadProbe};
use fak::gpu::profile::{DecodeProbe, OpRecord};
use fak::runtime::{
    Engine, EngineOptions, GenerationStats, RuntimeError, SamplingParams, StepProfile,
};
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args)]
pub struct Args {
    /// The GGUF model.
    #[arg(long)]
    pub model: PathBuf,
    /// Cache depths (prompt tokens) to measure at, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "128,2048,8192", value_parser = crate::flag_values::tokens(1))]
    pub depths: Vec<usize>,
    /// Tokens decoded at each depth for the decode rate.
    #[arg(long = "n-out", default_value_t = 64, value_parser = crate::flag_values::tokens(1))]
    pub n_out: usize,
    /// Decode steps profiled op by op at each depth (each op's median is reported).
    #[arg(long, default_value_t = 5, value_parser = crate::flag_values::count(1))]
    pub profile_steps: usize,
    /// Most prompt tokens one prefill step runs (the engine's default when not given).
    #[arg(long)]
    pub prefill_chunk: Option<u32>,
    /// MiB the bandwidth probe streams (at most one binding of the device).
    #[arg(long, default_value_t = 1024)]
    pub probe_mib: u64,
    /// Tokens after each depth's prompt prefilled as a prefix-cache hit computes them (resumed
    /// at the depth, attending to it), profiled op by op; 0 skips it.
    #[arg(long, default_value_t = 128, value_parser = crate::flag_values::tokens(0))]
    pub suffix: usize,
    /// GPU memory for the prefix cache (bytes, or with a K, M or G suffix); above 0, each
    /// depth's prompt + suffix also runs as a timed prefix-cache hit.
    #[arg(long, default_value = "0", value_parser = crate::flag_values::parse_bytes)]
    pub cache_mem: u64,
    /// Token slots per KV page (the prefix cache reuses whole pages); the engine's by default.
    #[arg(long)]
    pub page_size: Option<u32>,
    /// Above 1: at each depth, also this many sequences of `depth` prompt tokens decode
    /// together (one batched step serves them all, weights read once) for the aggregate decode
    /// rate, as llama-batched-bench's S_TG measures it. The engine then holds that many
    /// sequences (`max_seqs`); at 1 it holds one, as `harness run` does.
    #[arg(long, default_value_t = 1, value_parser = crate::flag_values::count(1))]
    pub sequences: usize,
    /// Seed of the prompt token ids.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// A decode probe timed beside the default at each depth, unprofiled (`op*count,…`; the
    /// flag once per probe: `--probe ffn_gate_up*2 --probe ffn_norm*0`).
    #[arg(long = "probe")]
    pub probes: Vec<String>,
    /// Rounds of the probes, each the default then every probe in order.
    #[arg(long, default_value_t = 2, value_parser = crate::flag_values::count(1))]
    pub probe_rounds: usize,
    /// Print the report as JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON report to this file.
    #[arg(long)]
    pub json_out: Option<PathBuf>,
}

#[derive(Serialize)]
struct Report {
    model: String,
    adapter: String,
    backend: String,
    /// The kernel paths the engine took (`KernelPaths::name`: subgroup, f16, cooperative
    /// matrices, the integer mat-vec), so a figure says which kernels made it.
    paths: String,
    /// `gpu_timestamps` (per op, inside the pass) or `host_wall_per_step`.
    op_timing: &'static str,
    bandwidth: ReadBandwidth,
    depths: Vec<DepthReport>,
}

#[derive(Serialize)]
struct DepthReport {
    depth: usize,
    n_out: usize,
    /// The prompt's prefill (all of it, host-timed as `harness run` does).
    prefill_tokens_per_s: f64,
    /// Dispatches the timed prefill's last chunk recorded.
    prefill_step_dispatches: usize,
    /// The prompt's prefill again, op by op.
    prefill: PrefillReport,
    /// `--suffix` more tokens prefilled after the prompt, op by op: the steps a request
    /// extending this prompt runs after a prefix-cache hit (None with `--suffix 0`).
    resumed: Option<PrefillReport>,
    /// The prompt + suffix as a timed request right after the prompt's (with `--cache-mem`).
    cache_hit: Option<CacheHitReport>,
    decode_tokens_per_s: f64,
    /// `--sequences` sequences decoding together (None at 1).
    batched: Option<BatchedDecodeReport>,
    /// Host time recording + finishing one decode step's commands, and submits per token.
    encode_us_per_token: f64,
    submits_per_token: f64,
    /// The `--profile-steps` decode steps after the prompt, op by op.
    #[serde(flatten)]
    step: ProfiledStep,
    /// The profiled steps' cache length (depth + 1: the first decode step after the prompt).
    profiled_kv_len: u32,
    /// step_weight_bytes at the probe's bandwidth.
    roofline_us: f64,
    /// 1 / decode rate, in µs.
    decode_us_per_token: f64,
    /// roofline_us / decode_us_per_token.
    decode_roofline_fraction: f64,
    /// `--probe`'s arms, the default first (empty without `--probe`).
    probes: Vec<ProbeRow>,
}

/// One arm of `--probe`: the depth's decode, unprofiled, under one probe, in every round.
#[derive(Serialize)]
struct ProbeRow {
    /// `default`, or the probe (`ffn_gate_up*2`).
    probe: String,
    dispatches_per_token: usize,
    /// µs a decoded token in each round.
    us_per_token: Vec<f64>,
    /// Their median (the upper one of an even count).
    median_us: f64,
    /// median_us − the default's median_us: what the probe added (or, below 0, removed).
    delta_us: f64,
    /// dispatches_per_token − the default's.
    delta_dispatches: i64,
    /// Host time recording a token's step (the last round's): where it nears median_us, the
    /// host, not the GPU, sets the rate and delta_us says nothing about the GPU.
    encode_us_per_token: f64,
    /// Whether the probe computes the default's bits (`DecodeProbe::keeps_bits`), and whether
    /// every round decoded the default's tokens.
    keeps_bits: bool,
    same_tokens: bool,
}

/// One profiled prefill of the prompt: every chunk a step timed op by op (one run, not a
/// median), the ops summed over the chunks.
#[derive(Serialize)]
struct PrefillReport {
    tokens: usize,
    chunks: Vec<ChunkRow>,
    /// Over all chunks: dispatches, ops recorded, their bytes and FLOPs.
    dispatches: usize,
    op_count: usize,
    weight_bytes: u64,
    activation_bytes: u64,
    flops: u64,
    /// Σ of the ops' GPU times (None without timestamps).
    gpu_us: Option<f64>,
    /// Σ of the chunks' host times from submit to completion.
    wall_us: f64,
    /// tokens / gpu time: the rate of the prefill's ops alone, one after another.
    gpu_tokens_per_s: Option<f64>,
    ops: Vec<OpRow>,
}

/// One profiled prefill chunk.
#[derive(Serialize)]
struct ChunkRow {
    tokens: u32,
    /// Positions its attention covers (the cache before it + its tokens).
    kv_len: u32,
    dispatches: usize,
    gpu_us: Option<f64>,
    wall_us: f64,
}

/// All ops of one name and kernel in a step or prefill (`attn_q` of every layer), summed.
#[derive(Serialize)]
struct OpRow {
    name: &'static str,
    kernel: &'static str,
    /// Ops of this name and kernel, and their dispatches.
    count: usize,
    dispatches: usize,
    weight_bytes: u64,
    activation_bytes: u64,
    /// FLOPs of weight products (2 · rows · cols · tokens); 0 for other ops.
    flops: u64,
    gpu_us: Option<f64>,
    /// (weight + activation bytes) / gpu time, GB/s.
    gb_per_s: Option<f64>,
    /// flops / gpu time, TFLOP/s (None for ops without FLOPs).
    tflop_per_s: Option<f64>,
    /// weight bytes at the probe's bandwidth / gpu time.
    roofline_fraction: Option<f64>,
    /// Share of the step's (or prefill's) GPU time.
    share: Option<f64>,
}

/// `sequences` sequences of `depth` random prompt tokens each, started one after another, then
/// `steps` batched decode steps serving all of them, timed on the host from the first step's
/// submit to the last step's tokens read back, each step waiting for its tokens (the scheduler's
/// loop); then `steps` more with two steps in flight (`Engine::submit_decode`: each step
/// recorded while the one before it runs, as `harness run` decodes one sequence).
#[derive(Serialize)]
struct BatchedDecodeReport {
    sequences: usize,
    steps: usize,
    /// sequences · steps / time: every sequence's tokens together (each step waited for).
    aggregate_tokens_per_s: f64,
    ms_per_step: f64,
    /// The same with two steps in flight.
    aggregate_in_flight_tokens_per_s: f64,
    ms_per_step_in_flight: f64,
    /// Then `--profile-steps` batched steps of all the sequences (the first after their
    /// timed steps, each sequence put back after it) profiled op by op, as the one-sequence
    /// step is.
    #[serde(flatten)]
    step: ProfiledStep,
}

/// Profiled decode steps of one shape summarized: each op's median GPU time as rows, and the
/// step's totals (written into the report that holds it under the names below).
#[derive(Serialize)]
struct ProfiledStep {
    #[serde(rename = "dispatches_per_step")]
    dispatches: usize,
    /// Ops recorded per step (each a dependent stage of the step).
    #[serde(rename = "ops_per_step")]
    op_count: usize,
    /// Roofline bytes of one step: weights (one embedding row a sequence) + KV cache at the
    /// profiled depth.
    #[serde(rename = "step_weight_bytes")]
    weight_bytes: u64,
    #[serde(rename = "step_activation_bytes")]
    activation_bytes: u64,
    /// Positions the step attends over (the depth report writes it as `profiled_kv_len`).
    #[serde(skip)]
    kv_len: u32,
    /// Σ of the ops' median GPU times (None without timestamps).
    gpu_us: Option<f64>,
    /// Median host time of a profiled step from submit to completion.
    #[serde(rename = "step_wall_us")]
    wall_us: f64,
    ops: Vec<OpRow>,
}

impl ProfiledStep {
    fn of(profiles: &[StepProfile], gb_per_s: f64) -> ProfiledStep {
        let first = &profiles[0];
        let op_ns =
            (0..first.ops.len()).map(|i| median(profiles.iter().filter_map(|p| p.op_ns[i])));
        let ops = op_rows(first.ops.iter().zip(op_ns), gb_per_s);
        ProfiledStep {
            dispatches: first.ops.iter().map(|o| o.dispatches).sum(),
            op_count: first.ops.len(),
            weight_bytes: first.ops.iter().map(|o| o.weight_bytes).sum(),
            activation_bytes: first.ops.iter().map(|o| o.activation_bytes).sum(),
            kv_len: first.kv_len,
            gpu_us: total_us(&ops),
            wall_us: median(profiles.iter().map(|p| p.wall.as_secs_f64() * 1e6))
                .expect("at least one profiled step"),
            ops,
        }
    }
}

/// A request served from the prefix cache, timed on the host: TTFT and where it went.
#[derive(Serialize)]
struct CacheHitReport {
    cached_tokens: usize,
    computed_tokens: usize,
    /// Request start → first token known (the prefill bucket of `harness run`).
    ttft_us: f64,
    /// Host time of each phase (`fak::runtime::PrefillPhases`); they add up to about the TTFT.
    open_us: f64,
    steps_us: f64,
    snapshots_us: f64,
    insert_us: f64,
    wait_us: f64,
}

impl CacheHitReport {
    fn of(stats: &GenerationStats) -> CacheHitReport {
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        let p = &stats.prefill_phases;
        CacheHitReport {
            cached_tokens: stats.cached_tokens,
            computed_tokens: stats.prompt_tokens - stats.cached_tokens,
            ttft_us: us(stats.prefill),
            open_us: us(p.open),
            steps_us: us(p.steps),
            snapshots_us: us(p.snapshots),
            insert_us: us(p.insert),
            wait_us: us(p.wait),
        }
    }
}

pub fn run(args: Args) -> Result<()> {
    if args.depths.is_empty() || args.depths.contains(&0) {
        bail!("--depths: give positive prompt lengths");
    }
    if args.n_out < 2 || args.profile_steps == 0 {
        bail!("--n-out must be at least 2 and --profile-steps at least 1");
    }
    let probes = args
        .probes
        .iter()
        .map(|spec| DecodeProbe::parse(spec).map_err(|e| anyhow::anyhow!("--probe {e}")))
        .collect::<Result<Vec<_>>>()?;
    let deepest = *args.depths.iter().max().expect("non-empty");
    let mut options = EngineOptions::from_env()?;
    // Room for the decode after the prompt (the batched decode's two timed runs, one after the
    // other), and for the cache hit's one token after the suffix.
    let decode = match args.sequences {
        1 => args.n_out + 1,
        _ => 2 * args.n_out,
    };
    options.max_context = Some(deepest + decode.max(args.suffix + 1));
    if let Some(chunk) = args.prefill_chunk {
        options.prefill_chunk = chunk;
    }
    if let Some(page) = args.page_size {
        options.page_size = page;
    }
    options.cache_mem = args.cache_mem;
    if args.sequences > 1 {
        options.max_seqs = args.sequences;
    }
    let mut engine = Engine::load(&args.model, &options)
        .with_context(|| format!("loading {}", args.model.display()))?;
    let bandwidth = ReadProbe::new(&engine.ctx)?
        .measure(&engine.ctx, args.probe_mib << 20, 5)
        .context("the read-bandwidth probe")?;
    let n_vocab = engine.n_vocab() as u32;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(args.seed);
    let mut random_ids =
        |n: usize| -> Vec<u32> { (0..n).map(|_| rng.random_range(0..n_vocab)).collect() };
    // A request of the first depth's shape first, untimed: the pipelines built on first use
    // (and the first allocations) are not the first depth's prefill time.
    let warmup = random_ids(args.depths[0]);
    engine.generate(&warmup, 2, &SamplingParams::greedy(), true, &mut |_| {})?;
    let mut depths = Vec::new();
    for &depth in &args.depths {
        let prompt = random_ids(depth + args.suffix);
        let mut report = measure_depth(&mut engine, &args, &prompt, bandwidth.gb_per_s)?;
        if !probes.is_empty() {
            let prompt = &prompt[..depth];
            report.probes = probe_decode(&mut engine, &probes, prompt, &args)?;
        }
        if args.sequences > 1 {
            let prompts: Vec<Vec<u32>> = (0..args.sequences).map(|_| random_ids(depth)).collect();
            report.batched = Some(batched_decode(
                &mut engine,
                &prompts,
                &args,
                bandwidth.gb_per_s,
            )?);
        }
        depths.push(report);
    }
    let facts = engine.ctx.facts();
    let report = Report {
        model: args.model.display().to_string(),
        adapter: facts.name.clone(),
        backend: facts.backend.clone(),
        paths: engine.ctx.paths().name(),
        op_timing: if engine.times_ops() {
            "gpu_timestamps"
        } else {
            "host_wall_per_step"
        },
        bandwidth,
        depths,
    };
    let json = serde_json::to_string_pretty(&report)?;
    if let Some(path) = &args.json_out {
        std::fs::write(path, &json).with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        println!("{json}");
    } else {
        print_tables(&report);
    }
    Ok(())
}

/// One depth: `request` is the depth's prompt followed by the `--suffix` tokens.
fn measure_depth(
    engine: &mut Engine,
    args: &Args,
    request: &[u32],
    gb_per_s: f64,
) -> Result<DepthReport> {
    let (prompt, suffix) = request.split_at(request.len() - args.suffix);
    let stats = greedy_decode(engine, prompt, args.n_out)?;
    let decode_rate = stats
        .decode_tokens_per_second()
        .context("the decode produced fewer than two tokens")?;
    let steps = stats.decode_steps.max(1) as f64;
    // The prompt's request above filled the cache: the whole request resumes from it.
    let cache_hit = match args.cache_mem > 0 && !suffix.is_empty() {
        true => {
            let hit = engine.generate(request, 1, &SamplingParams::greedy(), true, &mut |_| {})?;
            Some(CacheHitReport::of(&hit))
        }
        false => None,
    };
    // One prefill of the request: the prompt's chunks, then the suffix's.
    let (prefill, resumed) = match suffix.is_empty() {
        true => (engine.profile_prefill(prompt, 0)?.1, None),
        false => {
            let (prompt_chunks, suffix_chunks) = engine.profile_prefill(request, prompt.len())?;
            (
                prompt_chunks,
                Some(prefill_report(&suffix_chunks, gb_per_s)),
            )
        }
    };
    let prefill = prefill_report(&prefill, gb_per_s);
    // The profiled steps decode after the same prompt (a prefix-cache hit: only its last page
    // is prefilled again), at the depth the timed decode started from.
    let started = engine.start(prompt, 2, false)?;
    let profiles = (0..args.profile_steps)
        .map(|_| engine.profile_step(started.seq))
        .collect::<Result<Vec<StepProfile>, _>>();
    engine.finish(started.seq)?;
    let step = ProfiledStep::of(&profiles?, gb_per_s);
    let roofline_us = step.weight_bytes as f64 / gb_per_s / 1e3;
    let decode_us = 1e6 / decode_rate;
    Ok(DepthReport {
        depth: prompt.len(),
        n_out: args.n_out,
        prefill_tokens_per_s: stats.prefill_tokens_per_second(),
        prefill_step_dispatches: stats.prefill_step_dispatches,
        prefill,
        resumed,
        cache_hit,
        decode_tokens_per_s: decode_rate,
        batched: None,
        encode_us_per_token: stats.decode_encode.as_secs_f64() * 1e6 / steps,
        submits_per_token: stats.decode_submits as f64 / steps,
        profiled_kv_len: step.kv_len,
        step,
        roofline_us,
        decode_us_per_token: decode_us,
        decode_roofline_fraction: roofline_us / decode_us,
        probes: Vec::new(),
    })
}

/// `--probe`: the default and each probe decode `n_out` tokens after `prompt`, unprofiled, in
/// `--probe-rounds` interleaved rounds; fails where a probe that keeps the default's bits (or
/// the default in a later round) decodes other tokens than the default's first round.
fn probe_decode(
    engine: &mut Engine,
    probes: &[DecodeProbe],
    prompt: &[u32],
    args: &Args,
) -> Result<Vec<ProbeRow>> {
    let arms: Vec<DecodeProbe> = std::iter::once(DecodeProbe::default())
        .chain(probes.iter().cloned())
        .collect();
    let mut times = vec![Vec::new(); arms.len()];
    let mut dispatches = vec![0; arms.len()];
    let mut encode = vec![0.0; arms.len()];
    let mut same = vec![true; arms.len()];
    let mut expected: Option<Vec<u32>> = None;
    for _ in 0..args.probe_rounds {
        for (i, arm) in arms.iter().enumerate() {
            engine.set_decode_probe(arm.clone());
            let stats = greedy_decode(engine, prompt, args.n_out);
            engine.set_decode_probe(DecodeProbe::default());
            let stats = stats.with_context(|| format!("the decode under probe {arm}"))?;
            let rate = stats
                .decode_tokens_per_second()
                .context("the decode produced fewer than two tokens")?;
            times[i].push(1e6 / rate);
            dispatches[i] = stats.decode_step_dispatches;
            encode[i] = stats.decode_encode.as_secs_f64() * 1e6 / stats.decode_steps.max(1) as f64;
            let expected = expected.get_or_insert_with(|| stats.tokens.clone());
            same[i] &= stats.tokens == *expected;
            if !same[i] && (i == 0 || arm.keeps_bits()) {
                bail!(
                    "probe {arm} keeps the default's bits but decoded other tokens than the \
                     default's first round"
                );
            }
        }
    }
    let medians: Vec<f64> = times
        .iter()
        .map(|t| median(t.iter().copied()).expect("at least one round"))
        .collect();
    Ok(arms
        .iter()
        .enumerate()
        .map(|(i, arm)| ProbeRow {
            probe: arm.to_string(),
            dispatches_per_token: dispatches[i],
            us_per_token: times[i].clone(),
            median_us: medians[i],
            delta_us: medians[i] - medians[0],
            delta_dispatches: dispatches[i] as i64 - dispatches[0] as i64,
            encode_us_per_token: encode[i],
            keeps_bits: i == 0 || arm.keeps_bits(),
            same_tokens: same[i],
        })
        .collect())
}

/// Starts one sequence per prompt, times `n_out - 1` decode steps serving them all (each
/// sequence's first token came from its prefill), each waited for, then as many with two steps
/// in flight; profiles `--profile-steps` more batched steps op by op (each sequence put back
/// after each), then finishes them.
fn batched_decode(
    engine: &mut Engine,
    prompts: &[Vec<u32>],
    args: &Args,
    gb_per_s: f64,
) -> Result<BatchedDecodeReport> {
    let n_out = args.n_out;
    let mut seqs = Vec::with_capacity(prompts.len());
    let mut run = || -> Result<BatchedDecodeReport> {
        for prompt in prompts {
            // Room for both timed runs' tokens and the profiled steps' one position (each is
            // put back).
            seqs.push(engine.start(prompt, 2 * n_out, false)?.seq);
        }
        let steps = n_out - 1;
        let started = std::time::Instant::now();
        for _ in 0..steps {
            engine.step(&seqs)?;
        }
        let seconds = started.elapsed().as_secs_f64();
        let started = std::time::Instant::now();
        engine.submit_decode(&seqs)?;
        for step in 1..=steps {
            if step < steps {
                engine.submit_decode(&seqs)?;
            }
            engine.take_decode()?;
        }
        let in_flight = started.elapsed().as_secs_f64();
        let profiles = (0..args.profile_steps)
            .map(|_| engine.profile_batch_step(&seqs))
            .collect::<Result<Vec<StepProfile>, _>>()?;
        Ok(BatchedDecodeReport {
            sequences: seqs.len(),
            steps,
            aggregate_tokens_per_s: (seqs.len() * steps) as f64 / seconds,
            ms_per_step: seconds * 1e3 / steps as f64,
            aggregate_in_flight_tokens_per_s: (seqs.len() * steps) as f64 / in_flight,
            ms_per_step_in_flight: in_flight * 1e3 / steps as f64,
            step: ProfiledStep::of(&profiles, gb_per_s),
        })
    };
    let report = run();
    for seq in seqs {
        engine.finish(seq)?;
    }
    report.context("the batched decode")
}

/// A prefill profiled chunk by chunk, its ops summed over the chunks.
fn prefill_report(chunks: &[StepProfile], gb_per_s: f64) -> PrefillReport {
    let all_ops = || chunks.iter().flat_map(|c| &c.ops);
    let sum = |bytes: fn(&OpRecord) -> u64| all_ops().map(bytes).sum::<u64>();
    let op_ns = chunks.iter().flat_map(|c| c.op_ns.iter().copied());
    let ops = op_rows(all_ops().zip(op_ns), gb_per_s);
    let gpu_us = total_us(&ops);
    let tokens = chunks.iter().map(|c| c.tokens as usize).sum::<usize>();
    PrefillReport {
        tokens,
        chunks: chunks
            .iter()
            .map(|c| ChunkRow {
                tokens: c.tokens,
                kv_len: c.kv_len,
                dispatches: c.ops.iter().map(|o| o.dispatches).sum(),
                gpu_us: c
                    .op_ns
                    .iter()
                    .copied()
                    .sum::<Option<f64>>()
                    .map(|ns| ns / 1e3),
                wall_us: c.wall.as_secs_f64() * 1e6,
            })
            .collect(),
        dispatches: all_ops().map(|o| o.dispatches).sum(),
        op_count: all_ops().count(),
        weight_bytes: sum(|o| o.weight_bytes),
        activation_bytes: sum(|o| o.activation_bytes),
        flops: sum(|o| o.flops),
        gpu_us,
        wall_us: chunks.iter().map(|c| c.wall.as_secs_f64() * 1e6).sum(),
        gpu_tokens_per_s: gpu_us.map(|us| tokens as f64 / us * 1e6),
        ops,
    }
}

/// Ops with their GPU nanoseconds (None without timestamps) grouped by name and kernel, in
/// order of first appearance, with rates and each row's share of the whole.
fn op_rows<'a>(
    ops: impl Iterator<Item = (&'a OpRecord, Option<f64>)>,
    gb_per_s: f64,
) -> Vec<OpRow> {
    let mut rows: Vec<OpRow> = Vec::new();
    for (op, ns) in ops {
        let us = ns.map(|ns| ns / 1e3);
        match rows
            .iter_mut()
            .find(|r| r.name == op.name && r.kernel == op.kernel)
        {
            Some(row) => {
                row.count += 1;
                row.dispatches += op.dispatches;
                row.weight_bytes += op.weight_bytes;
                row.activation_bytes += op.activation_bytes;
                row.flops += op.flops;
                row.gpu_us = row.gpu_us.zip(us).map(|(a, b)| a + b);
            }
            None => rows.push(OpRow {
                name: op.name,
                kernel: op.kernel,
                count: 1,
                dispatches: op.dispatches,
                weight_bytes: op.weight_bytes,
                activation_bytes: op.activation_bytes,
                flops: op.flops,
                gpu_us: us,
                gb_per_s: None,
                tflop_per_s: None,
                roofline_fraction: None,
                share: None,
            }),
        }
    }
    let total = total_us(&rows);
    for row in &mut rows {
        let bytes = (row.weight_bytes + row.activation_bytes) as f64;
        row.gb_per_s = row.gpu_us.map(|us| bytes / us / 1e3);
        row.tflop_per_s = row
            .gpu_us
            .filter(|_| row.flops > 0)
            .map(|us| row.flops as f64 / us / 1e6);
        row.roofline_fraction = row
            .gpu_us
            .map(|us| row.weight_bytes as f64 / gb_per_s / 1e3 / us);
        row.share = row.gpu_us.zip(total).map(|(a, b)| a / b);
    }
    rows
}

/// Σ of the rows' GPU times; None when any row has none.
fn total_us(rows: &[OpRow]) -> Option<f64> {
    rows.iter().map(|r| r.gpu_us).sum()
}

/// The median of the values (the upper one of an even count); None when there are none.
fn median(values: impl Iterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

fn print_tables(r: &Report) {
    println!(
        "{} · {} ({}) · paths {}",
        r.model, r.adapter, r.backend, r.paths
    );
    println!(
        "read bandwidth: {:.1} GB/s ({} MiB, {:?}); op times: {}",
        r.bandwidth.gb_per_s,
        r.bandwidth.bytes >> 20,
        r.bandwidth.timing,
        r.op_timing
    );
    let us = |v: Option<f64>| v.map_or("n/a".into(), |us| format!("{us:.0}"));
    for d in &r.depths {
        println!();
        println!(
            "depth {}: decode {:.1} tok/s ({:.0} µs/token, {:.1} % of the {:.0} µs roofline) · \
             {} dispatches, {} ops, {:.2} submits per token · encode {:.0} µs/token · \
             profiled at kv {}: GPU {} µs, wall {:.0} µs",
            d.depth,
            d.decode_tokens_per_s,
            d.decode_us_per_token,
            100.0 * d.decode_roofline_fraction,
            d.roofline_us,
            d.step.dispatches,
            d.step.op_count,
            d.submits_per_token,
            d.encode_us_per_token,
            d.profiled_kv_len,
            us(d.step.gpu_us),
            d.step.wall_us,
        );
        print_ops(&d.step.ops);
        print_probes(d.depth, &d.probes);
        if let Some(b) = &d.batched {
            println!(
                "depth {} batched decode: {} sequences, {:.1} tok/s aggregate ({:.2} ms per step \
                 of {} steps), {:.1} with two steps in flight ({:.2} ms) · profiled step: {} \
                 dispatches, {} ops, GPU {} µs, wall {:.0} µs",
                d.depth,
                b.sequences,
                b.aggregate_tokens_per_s,
                b.ms_per_step,
                b.steps,
                b.aggregate_in_flight_tokens_per_s,
                b.ms_per_step_in_flight,
                b.step.dispatches,
                b.step.op_count,
                us(b.step.gpu_us),
                b.step.wall_us,
            );
            print_ops(&b.step.ops);
        }
        let p = &d.prefill;
        let largest = p.chunks.iter().map(|c| c.tokens).max().unwrap_or(0);
        println!(
            "depth {} prefill: {:.0} tok/s timed · profiled chunks: {} of ≤ {} tokens, \
             {} dispatches, {} ops, {:.3} TFLOP of products · GPU {} µs ({} tok/s), wall {:.0} µs",
            d.depth,
            d.prefill_tokens_per_s,
            p.chunks.len(),
            largest,
            p.dispatches,
            p.op_count,
            p.flops as f64 / 1e12,
            us(p.gpu_us),
            us(p.gpu_tokens_per_s),
            p.wall_us,
        );
        print_ops(&p.ops);
        if let Some(r) = &d.resumed {
            println!(
                "depth {} + {} resumed (a prefix-cache hit's steps): {} chunks, {} dispatches · \
                 GPU {} µs ({} tok/s), wall {:.0} µs",
                d.depth,
                r.tokens,
                r.chunks.len(),
                r.dispatches,
                us(r.gpu_us),
                us(r.gpu_tokens_per_s),
                r.wall_us,
            );
            print_ops(&r.ops);
        }
        if let Some(h) = &d.cache_hit {
            println!(
                "depth {} + suffix as a prefix-cache hit: {} tokens reused, {} computed · TTFT \
                 {:.0} µs (host phases: open {:.0}, steps {:.0}, snapshots {:.0}, insert {:.0}, \
                 wait {:.0})",
                d.depth,
                h.cached_tokens,
                h.computed_tokens,
                h.ttft_us,
                h.open_us,
                h.steps_us,
                h.snapshots_us,
                h.insert_us,
                h.wait_us,
            );
        }
    }
}

/// `--probe`'s arms as a table (nothing without them).
fn print_probes(depth: usize, rows: &[ProbeRow]) {
    if rows.is_empty() {
        return;
    }
    println!("depth {depth} decode probes (unprofiled µs a token, rounds interleaved):");
    println!(
        "  {:>6} {:>6} {:>10} {:>9} {:>8} {:>8} {:>5} {:>5}  {:<24} probe",
        "disp", "Δdisp", "µs/token", "Δµs", "Δµs/Δd", "encode", "bits", "same", "rounds"
    );
    for r in rows {
        let rounds: Vec<String> = r.us_per_token.iter().map(|us| format!("{us:.1}")).collect();
        // What one added (or removed) dispatch cost, where the probe changed the count.
        let per_dispatch = match r.delta_dispatches {
            0 => "-".to_string(),
            d => format!("{:.2}", r.delta_us / d as f64),
        };
        println!(
            "  {:>6} {:>6} {:>10.1} {:>9.1} {:>8} {:>8.1} {:>5} {:>5}  {:<24} {}",
            r.dispatches_per_token,
            r.delta_dispatches,
            r.median_us,
            r.delta_us,
            per_dispatch,
            r.encode_us_per_token,
            r.keeps_bits,
            r.same_tokens,
            rounds.join(" "),
            r.probe,
        );
    }
}

/// One profile's rows as a table.
fn print_ops(rows: &[OpRow]) {
    println!(
        "  {:<12} {:<18} {:>5} {:>6} {:>12} {:>10} {:>10} {:>7} {:>9} {:>8} {:>7}",
        "op",
        "kernel",
        "count",
        "disp",
        "weight MB",
        "act MB",
        "µs",
        "share %",
        "GB/s",
        "TFLOP/s",
        "roof %"
    );
    let opt = |v: Option<f64>, scale: f64, digits: usize| {
        v.map_or("n/a".into(), |v| format!("{:.digits$}", v * scale))
    };
    for o in rows {
        let tflop = match o.flops {
            0 => "-".into(),
            _ => opt(o.tflop_per_s, 1.0, 2),
        };
        println!(
            "  {:<12} {:<18} {:>5} {:>6} {:>12.2} {:>10.3} {:>10} {:>7} {:>9} {:>8} {:>7}",
            o.name,
            o.kernel,
            o.count,
            o.dispatches,
            o.weight_bytes as f64 / 1e6,
            o.activation_bytes as f64 / 1e6,
            opt(o.gpu_us, 1.0, 1),
            opt(o.share, 100.0, 1),
            opt(o.gb_per_s, 1.0, 1),
            tflop,
            opt(o.roofline_fraction, 100.0, 1),
        );
    }
}

/// `n_out` greedy tokens after `prompt` (end of sequence ignored), as every bench arm decodes.
fn greedy_decode(
    engine: &mut Engine,
    prompt: &[u32],
    n_out: usize,
) -> Result<GenerationStats, RuntimeError> {
    engine.generate(prompt, n_out, &SamplingParams::greedy(), true, &mut |_| {})
}
