//! `harness threeway --scenario multi-agent`: A agents share one P-token preamble; each sends T
//! turns — turn t's prompt is the preamble, the agent's earlier turns and replies, and S new
//! tokens — and gets n_out tokens back. The agents run concurrently: every turn 1 is sent at
//! once (or staggered by a stated interval), and an agent's next turn is sent the moment its
//! reply is complete. Each engine runs twice, its prefix cache on and off, each run in a fresh
//! process after one uncounted warm-up request (a prompt sharing nothing page-sized with the
//! preamble); every turn's TTFT, prompt tokens computed and reused go into
//! `multi-agent-<arm>-raw.json`, and the packet's `scenario` section is built from them.
//!
//! A later turn carries the agent's earlier replies: by default replies scripted before any arm
//! runs (`--replies scripted`: n_out corpus ids per reply, the same for every arm), so every arm
//! is sent the same prompts and does the same work whatever it answered, and no arm's next turn
//! waits on ids its server did not stream (llama-server's withheld tokens); or each engine's
//! own answer (`--replies own`), as an agent appending the model's reply would.

use super::envelope::{Prompts, corpus_runs};
use super::{Args, engine_info, weights};
use crate::arms::fak_native::{FakNative, ServeOptions};
use crate::arms::fak_serve::FakServe;
use crate::arms::jsonl::JsonlArm;
use crate::arms::llama_cpp::{self, LlamaCpp, Workload};
use crate::arms::mlx::{self, Mlx};
use crate::arms::process::{Interrupted, gpu_memory_bytes, interrupted, now_ns};
use crate::arms::{Arm, Done, NotInstalled};
use crate::models::{Models, sha256_of};
use anyhow::{Context, Result, bail};
use fak_harness::packet::scenario::{
    Arrival, MULTI_AGENT, Replies, ScenarioArmHeader, ScenarioSpec, Serving, TurnSample,
};
use fak_harness::packet::{self, Envelope, MemoryPeak, PacketWriter, ScenarioRecorder};
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

/// How long an arm may go without any answer before it is declared stuck.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(900);

/// The scenario's token ids, built once and sent unchanged to every arm.
struct Script {
    spec: ScenarioSpec,
    preamble: Vec<u32>,
    /// `suffixes[agent][turn]`, both from 0.
    suffixes: Vec<Vec<Vec<u32>>>,
    /// With scripted replies, `replies[agent][turn]` (both from 0): what the agent's later
    /// prompts carry as its answer to that turn, whatever the engine answered. None: each
    /// engine's own answer.
    replies: Option<Vec<Vec<Vec<u32>>>>,
    /// The uncounted warm-up prompt.
    warmup: Vec<u32>,
}

impl Script {
    fn build(args: &Args, tokenizer: &fak::tokenizer::Tokenizer) -> Result<Script> {
        let (agents, turns) = (args.agents, args.turns);
        if agents == 0 || turns == 0 || args.preamble == 0 || args.n_out == 0 {
            bail!(
                "--agents, --turns, --preamble and --n-out must each be at least 1 (got {agents}, \
                 {turns}, {}, {})",
                args.preamble,
                args.n_out
            );
        }
        // Each flag is bounded; the suffixes held in memory are their product.
        let held = agents
            .saturating_mul(turns)
            .saturating_mul(args.suffix)
            .saturating_add(args.preamble);
        if held > super::MAX_ENVELOPE_TOKENS {
            bail!(
                "--agents {agents} × --turns {turns} × --suffix {} + --preamble {} is {held} \
                 tokens; a run holds at most {}",
                args.suffix,
                args.preamble,
                super::MAX_ENVELOPE_TOKENS
            );
        }
        let preamble = Prompts::build(tokenizer, args.preamble, 1, args.seed)?
            .timed
            .remove(0);
        let mut runs = corpus_runs(tokenizer, args.suffix, agents * turns, args.seed + 1)?;
        let suffixes: Vec<Vec<Vec<u32>>> =
            (0..agents).map(|_| runs.drain(..turns).collect()).collect();
        // Every turn but the last is answered into a later prompt.
        let replies = match args.replies {
            RepliesMode::Own => None,
            RepliesMode::Scripted => {
                let mut runs =
                    corpus_runs(tokenizer, args.n_out, agents * (turns - 1), args.seed + 2)?;
                Some(
                    (0..agents)
                        .map(|_| runs.drain(..turns - 1).collect())
                        .collect(),
                )
            }
        };
        // The preamble backwards (BOS kept first): the same length and ids, no shared prefix
        // beyond BOS, so the warm-up heats the engine but not its cache.
        let bos = usize::from(tokenizer.adds_bos() && tokenizer.bos().is_some());
        let mut warmup = preamble[..bos].to_vec();
        warmup.extend(preamble[bos..].iter().rev());
        warmup.extend(std::iter::repeat_n(warmup[warmup.len() - 1], args.suffix));
        let arrival = match args.arrival {
            ArrivalMode::Together => Arrival::Together,
            ArrivalMode::Staggered => Arrival::Staggered {
                interval_s: args.stagger_ms as f64 * 1e-3,
            },
        };
        let mut spec = ScenarioSpec {
            kind: MULTI_AGENT.into(),
            agents,
            preamble_tokens: args.preamble,
            suffix_tokens: args.suffix,
            turns,
            n_out: args.n_out,
            arrival,
            think_s: args.think_ms as f64 * 1e-3,
            preamble_sha256: packet::prompt_sha256(&preamble),
            prompt_source: format!(
                "harness/threeway/corpus.txt tokenized by the model: the preamble from a ChaCha8 \
                 offset (seed {}), each agent's turn suffixes from offsets seeded {}",
                args.seed,
                args.seed + 1
            ),
            replies: Replies::Own,
        };
        let mut script = Script {
            spec: spec.clone(),
            preamble,
            suffixes,
            replies,
            warmup,
        };
        if script.replies.is_some() {
            let prompt_sha256 = (0..agents)
                .map(|a| {
                    (0..turns)
                        .map(|t| packet::prompt_sha256(&script.scripted_prompt(a, t)))
                        .collect()
                })
                .collect();
            spec.replies = Replies::Scripted {
                source: format!(
                    "harness/threeway/corpus.txt tokenized by the model: each reply n_out ids \
                     from an offset seeded {}, agent by agent, turn by turn",
                    args.seed + 2
                ),
                prompt_sha256,
            };
            script.spec = spec;
        }
        Ok(script)
    }

    /// Agent a's prompt at turn t (both from 0) under scripted replies: the preamble, then per
    /// earlier turn its suffix and scripted reply, then turn t's suffix.
    fn scripted_prompt(&self, agent: usize, turn: usize) -> Vec<u32> {
        let replies = self.replies.as_ref().expect("scripted replies");
        let mut prompt = self.preamble.clone();
        for (suffix, reply) in self.suffixes[agent].iter().zip(&replies[agent]).take(turn) {
            prompt.extend(suffix);
            prompt.extend(reply);
        }
        prompt.extend(&self.suffixes[agent][turn]);
        prompt
    }

    /// What agent a's later prompts carry as its answer to turn t (both from 0, t before the
    /// last turn): the script's reply, or the engine's own.
    fn reply<'a>(&'a self, agent: usize, turn: usize, answered: &'a [u32]) -> &'a [u32] {
        match &self.replies {
            Some(replies) => &replies[agent][turn],
            None => answered,
        }
    }

    /// Agent a's turn-1 prompt (a from 0).
    fn first_prompt(&self, agent: usize) -> Vec<u32> {
        [self.preamble.as_slice(), &self.suffixes[agent][0]].concat()
    }

    /// The longest sequence an agent's conversation reaches (its last prompt and reply).
    fn max_tokens(&self) -> usize {
        self.spec.prompt_tokens(self.spec.turns) + self.spec.n_out
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ScenarioKind {
    MultiAgent,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ArrivalMode {
    Together,
    Staggered,
}

/// What a later turn carries as the agent's earlier replies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RepliesMode {
    /// Replies drawn from the corpus before any arm runs: the same prompts for every arm.
    Scripted,
    /// Each engine's own answer.
    Own,
}

pub fn run(args: &Args, models: &Models, out: &Path) -> Result<()> {
    let scratch = out.join("logs");
    let gguf = fak::gguf::Gguf::open(&models.gguf)?;
    let tokenizer = fak::tokenizer::Tokenizer::from_gguf(&gguf)?;
    let script = Script::build(args, &tokenizer)?;
    let context = script.max_tokens() + 1;
    let plan = fak::model::DevicePlan::of(&gguf, Some(context), 256)?;
    let (decode_step_bytes, prefill_flops_per_token) = super::spec_floors(&gguf);
    drop(gguf);
    let cache_mem = args
        .cache_mem
        .unwrap_or_else(|| default_cache_mem(&plan, args.page_size, &script.spec, context));
    let selftest = super::selftest_or_skip(args, &scratch)?;
    let digests: Vec<String> = (0..args.agents)
        .map(|a| packet::prompt_sha256(&script.first_prompt(a)))
        .collect();
    let envelope = Envelope {
        model_path: models.gguf.display().to_string(),
        model_sha256: sha256_of(&models.gguf)?,
        model_bytes: std::fs::metadata(&models.gguf)?.len(),
        decode_step_bytes,
        n_ctx: script.spec.prompt_tokens(1),
        n_out: args.n_out,
        n_prompts: args.agents,
        prompt_source: format!(
            "the multi-agent scenario's turn-1 prompts, one per agent: {}",
            script.spec.prompt_source
        ),
        prompt_set_sha256: packet::prompt_set_sha256(&digests),
        prompt_sha256: digests,
        greedy: true,
        ignore_eos: true,
        warmup_requests: 1,
        model_origin: super::model_origin(args),
        prefill_flops_per_token,
    };
    let mut writer = PacketWriter::create(out)?;
    writer.set_scenario(script.spec.clone());
    let mut failed = Vec::new();
    let mut adapter = selftest["adapter"].clone();
    for engine in &args.arms {
        for cache in [true, false] {
            if interrupted() {
                break;
            }
            let label = arm_label(engine, cache);
            let setup = ArmSetup {
                args,
                models,
                scratch: &scratch,
                context,
                cache_mem,
                cache,
            };
            let facts = run_arm(engine, label, &setup, &script, &envelope, &mut writer)
                .map_err(|e| (label, e));
            match facts {
                Ok(facts) if engine == "fak-native" && adapter.is_null() => {
                    adapter = facts["adapter"].clone();
                }
                Ok(_) => {}
                Err((label, e)) if e.downcast_ref::<Interrupted>().is_none() => {
                    failed.push(label);
                    eprintln!("threeway: {label} failed: {e:#}");
                }
                Err(_) => {}
            }
        }
    }
    super::finish_packet(writer, args, &adapter, &selftest, envelope, out)?;
    if interrupted() {
        eprintln!(
            "threeway: interrupted; what was measured is in {}",
            out.display()
        );
        std::process::exit(130);
    }
    if !failed.is_empty() {
        bail!(
            "scenario arm(s) {} failed (see the packet and {})",
            failed.join(", "),
            scratch.display()
        );
    }
    Ok(())
}

/// Enough for every agent's whole conversation: its KV pages (f32, the larger element), the
/// partly filled last page each turn leaves, and, for a hybrid model, a recurrent-state snapshot
/// at three points of every turn (its branch point, its prompt's last page boundary, its end).
fn default_cache_mem(
    plan: &fak::model::DevicePlan,
    page_size: Option<u32>,
    spec: &ScenarioSpec,
    context: usize,
) -> u64 {
    let page = u64::from(page_size.unwrap_or(fak::model::DevicePlan::PAGE_SIZE));
    let turns = spec.turns as u64;
    let tokens = ((context as u64).div_ceil(page) + turns) * page;
    let agents = spec.agents as u64;
    agents * tokens * plan.kv_elems_per_token * 4 + agents * turns * 3 * plan.state_bytes
}

/// `<engine>-cache` or `<engine>-nocache`.
fn arm_label(engine: &str, cache: bool) -> &'static str {
    match (engine, cache) {
        ("fak-native", true) => "fak-native-cache",
        ("fak-native", false) => "fak-native-nocache",
        ("fak-serve", true) => "fak-serve-cache",
        ("fak-serve", false) => "fak-serve-nocache",
        ("llama.cpp", true) => "llama.cpp-cache",
        ("llama.cpp", false) => "llama.cpp-nocache",
        (_, true) => "mlx-cache",
        (_, false) => "mlx-nocache",
    }
}

/// What every scenario arm's engine is built from.
struct ArmSetup<'a> {
    args: &'a Args,
    models: &'a Models,
    scratch: &'a Path,
    /// Tokens one agent's conversation needs.
    context: usize,
    cache_mem: u64,
    cache: bool,
}

/// The engine with its cache on or off, how that cache works, and where the computed and
/// reused prompt-token counts come from.
fn make_arm(
    engine: &str,
    label: &'static str,
    s: &ArmSetup,
) -> Result<(Box<dyn Arm>, String, &'static str), NotInstalled> {
    let agents = s.args.agents;
    let scratch = s.scratch.to_path_buf();
    match engine {
        "fak-native" => {
            let mut arm = FakNative::new(label, s.models.gguf.clone(), s.context, scratch);
            arm.serve = ServeOptions {
                cache_mem: if s.cache { s.cache_mem } else { 0 },
                max_seqs: agents,
                page_size: s.args.page_size,
            };
            let page = s
                .args
                .page_size
                .unwrap_or(fak::model::DevicePlan::PAGE_SIZE);
            let how = match s.cache {
                true => format!(
                    "radix tree over token ids, whole pages of {page} tokens shared across \
                     sequences, LRU eviction under a budget of {} bytes (--cache-mem); a prompt \
                     reuses at most floor((len − 1) / page) pages",
                    s.cache_mem
                ),
                false => "off (--cache-mem 0): every prompt is prefilled whole".into(),
            };
            Ok((
                Box::new(JsonlArm::new(arm)),
                how,
                "the engine: its prefix-cache hit (Started::cached_tokens) per request",
            ))
        }
        "fak-serve" => {
            let mut arm = FakServe::new(label, s.models.gguf.clone(), s.context, scratch);
            arm.cache_mem = if s.cache { s.cache_mem } else { 0 };
            arm.max_seqs = agents;
            arm.page_size = s.args.page_size;
            arm.trace_steps = Some(step_trace_log(s.scratch, label));
            let how = match s.cache {
                true => format!(
                    "fak serve --cache-mem {}: the engine's radix prefix cache, shared by every \
                     request (whole pages), as in fak-native",
                    s.cache_mem
                ),
                false => "off (--cache-mem 0): every prompt is prefilled whole".into(),
            };
            Ok((
                Box::new(arm),
                how,
                "the server: usage.prompt_tokens_details.cached_tokens of each answer",
            ))
        }
        "llama.cpp" => {
            let server = llama_cpp::find_server(s.args.llama_server.as_deref())?;
            let mut arm = LlamaCpp::new(
                server,
                s.models.gguf.clone(),
                s.context * agents,
                s.args.flash_attn.clone(),
                super::quality::N_PROBS,
                scratch,
            );
            arm.parallel = agents;
            arm.cache_prompt = s.cache;
            arm.log_name = label;
            arm.workload = if s.cache {
                Workload::PrefixReuse
            } else {
                Workload::NoReuse
            };
            arm.extra_args = super::llama_args(s.args);
            // Scripted replies: no later prompt holds this arm's answer, so a withheld id the
            // stream's text cannot name is recorded as unnamed rather than replayed.
            arm.replay_withheld = s.args.replies == RepliesMode::Own;
            let how = match s.cache {
                true => format!(
                    "cache_prompt: true on every request, {agents} slots (--parallel): each slot \
                     reuses the longest common prefix of its own last prompt; the host-RAM \
                     prompt cache (--cache-ram 8192) keeps a conversation a slot gives up, and \
                     context checkpoints (--ctx-checkpoints 32) let a hybrid model reuse a prefix"
                ),
                false => format!(
                    "cache_prompt: false on every request, {agents} slots (--parallel), no \
                     host-RAM prompt cache or checkpoints (--cache-ram 0 --ctx-checkpoints 0): \
                     every prompt is prefilled whole"
                ),
            };
            Ok((
                Box::new(arm),
                how,
                "llama-server: the final chunk's timings.prompt_n (computed) and cache_n (reused)",
            ))
        }
        _ => {
            let Some(dir) = &s.models.mlx else {
                return Err(NotInstalled(
                    "no MLX model directory: pass --mlx-model (e.g. from mlx_lm.convert -q)".into(),
                ));
            };
            let python = mlx::find_python(s.args.python.as_deref())?;
            let mut arm = Mlx::new(python, dir.clone(), scratch);
            arm.log_name = label;
            arm.prompt_cache = s.cache.then_some(agents.max(10));
            let how = match arm.prompt_cache {
                Some(n) => format!(
                    "mlx_lm.models.cache.LRUPromptCache(max_size={n}) as mlx_lm.server keeps it: \
                     the nearest cached prefix (trimmed where the KV cache can be), prompt + reply \
                     inserted after each request; an exact hit recomputes the last prompt token"
                ),
                None => "none: each request starts from make_prompt_cache(model)".into(),
            };
            Ok((
                Box::new(JsonlArm::new(arm)),
                how,
                "the driver: prompt ids mlx_lm's prompt cache did not cover (prefilled) and those it did",
            ))
        }
    }
}

/// The scenario arm header for engine `name`.
fn scenario_header(
    label: &str,
    engine: &str,
    arm: Option<&dyn Arm>,
    facts: &Value,
    s: &ArmSetup,
    envelope: &Envelope,
    how: (&str, &str),
) -> Result<ScenarioArmHeader> {
    let serving = match engine {
        "fak-native" => Serving {
            concurrent: facts["max_seqs"].as_u64().unwrap_or(1) as usize,
            how: facts["serving"]
                .as_str()
                .unwrap_or("unknown: the engine did not start")
                .into(),
        },
        "fak-serve" => Serving {
            concurrent: facts["max_seqs"].as_u64().unwrap_or(1) as usize,
            how: format!(
                "fak serve over HTTP (/v1/completions, streamed): continuous batching, up to {} \
                 sequences per decode step, each joining between steps after its own prefill; \
                 more queue first come, first served",
                facts["max_seqs"]
            ),
        },
        "llama.cpp" => Serving {
            concurrent: s.args.agents,
            how: format!(
                "{} server slots (--parallel), one request per slot, decoded together",
                s.args.agents
            ),
        },
        _ => Serving {
            concurrent: 1,
            how: "one request at a time in arrival order: the driver is a single loop over \
                  mlx_lm's generate_step, so requests sent together queue (their wait is in \
                  their TTFT)"
                .into(),
        },
    };
    Ok(ScenarioArmHeader {
        arm: label.into(),
        engine: engine_info(engine, arm, facts),
        weights: weights(engine, s.models, envelope)?,
        prefix_cache: s.cache,
        cache_how: how.0.into(),
        serving,
        prefill_counted_by: how.1.into(),
    })
}

/// One scenario arm start to end; returns the engine's facts.
fn run_arm(
    engine: &str,
    label: &'static str,
    s: &ArmSetup,
    script: &Script,
    envelope: &Envelope,
    writer: &mut PacketWriter,
) -> Result<Value> {
    let (mut arm, cache_how, counted_by) = match make_arm(engine, label, s) {
        Ok(made) => made,
        Err(NotInstalled(reason)) => {
            eprintln!("threeway: {label} skipped: {reason}");
            let header = scenario_header(
                label,
                engine,
                None,
                &Value::Null,
                s,
                envelope,
                ("not run", "not run"),
            )?;
            writer.skip_scenario_arm(header, &reason)?;
            return Ok(Value::Null);
        }
    };
    let started = arm.start();
    let facts = started.as_ref().ok().cloned().unwrap_or(Value::Null);
    let header = scenario_header(
        label,
        engine,
        Some(arm.as_ref()),
        &facts,
        s,
        envelope,
        (&cache_how, counted_by),
    )?;
    let mut rec = writer.begin_scenario_arm(header)?;
    let result = started.and_then(|_| {
        eprintln!("threeway: {label} started (pid {})", arm.pid().unwrap_or(0));
        drive(arm.as_mut(), label, script, &mut rec)
    });
    let gpu = arm.pid().and_then(gpu_memory_bytes);
    let exit = arm.stop();
    rec.set_memory(MemoryPeak {
        resident_bytes: exit.peak_rss_bytes,
        gpu_bytes: gpu,
        how: "resident: ru_maxrss of the engine process (wait4); GPU: nvidia-smi per-process accounting at the end of the run where present, else not reported".into(),
    })?;
    if let Err(e) = &result {
        let text = format!("{e:#}");
        rec.fault(super::runner::fault_record(None, &text))?;
    }
    rec.finish()?;
    if engine == "fak-serve" {
        keep_step_trace(writer, &step_trace_log(s.scratch, label), label)?;
    }
    result.map(|()| facts)
}

/// Where the fak-serve arm's server writes its step trace while it runs.
fn step_trace_log(scratch: &Path, label: &str) -> std::path::PathBuf {
    scratch.join(format!("{label}-steps.jsonl"))
}

/// The arm's step trace beside its raw file (`multi-agent-<arm>-steps.jsonl`), with its
/// summary per request, each named by agent and turn (`multi-agent-<arm>-steps.md`, as
/// `harness steps` prints it); both listed in the manifest. A trace that cannot be read is
/// said on stderr and left in the logs: it is a diagnosis, not a measurement.
fn keep_step_trace(writer: &mut PacketWriter, log: &Path, label: &str) -> Result<()> {
    use fak_harness::report::steps;
    let Ok(text) = std::fs::read_to_string(log) else {
        eprintln!("threeway: {label}: no step trace at {}", log.display());
        return Ok(());
    };
    let name = format!("{MULTI_AGENT}-{label}-steps");
    writer.write_file(&format!("{name}.jsonl"), text.as_bytes())?;
    let raw = writer
        .dir()
        .join(fak_harness::packet::scenario::scenario_raw_file_name(label));
    let summary = fak::runtime::trace::parse_trace(&text)
        .map_err(anyhow::Error::msg)
        .and_then(|lines| steps::summarize(&lines))
        .and_then(|s| Ok(steps::render(&s, &steps::request_names(&raw)?)));
    match summary {
        Ok(md) => {
            writer.write_file(&format!("{name}.md"), md.as_bytes())?;
        }
        Err(e) => eprintln!("threeway: {label}: the step trace does not read: {e:#}"),
    }
    Ok(())
}

/// One agent's conversation.
struct Agent {
    /// The last prompt sent and the reply, once answered: the next turn appends to it.
    conversation: Vec<u32>,
    /// Turns answered.
    answered: usize,
    /// When its next turn goes out (ns), if it is due; None while one is in flight or when done.
    due_ns: Option<u64>,
    /// The request in flight: id, prompt, when the scenario sent it.
    in_flight: Option<(u64, Vec<u32>)>,
}

/// The warm-up, then every agent's turns, each answer recorded as it arrives.
fn drive(arm: &mut dyn Arm, name: &str, script: &Script, rec: &mut ScenarioRecorder) -> Result<()> {
    let spec = &script.spec;
    arm.submit(0, &script.warmup, spec.n_out)?;
    let warm = wait(arm)?;
    rec.record_warmup(sample(
        0,
        0,
        &script.warmup,
        warm.timed.sent_ns,
        &warm,
        spec,
    )?)?;
    let t0 = now_ns();
    let interval_ns = match spec.arrival {
        Arrival::Together => 0,
        Arrival::Staggered { interval_s } => (interval_s * 1e9) as u64,
    };
    let mut agents: Vec<Agent> = (0..spec.agents)
        .map(|a| Agent {
            conversation: script.preamble.clone(),
            answered: 0,
            due_ns: Some(t0 + a as u64 * interval_ns),
            in_flight: None,
        })
        .collect();
    let mut next_id = 1;
    while agents.iter().any(|a| a.answered < spec.turns) {
        let now = now_ns();
        for (i, agent) in agents.iter_mut().enumerate() {
            if agent.due_ns.is_some_and(|due| due <= now) {
                let mut prompt = std::mem::take(&mut agent.conversation);
                prompt.extend(&script.suffixes[i][agent.answered]);
                arm.submit(next_id, &prompt, spec.n_out)?;
                agent.in_flight = Some((next_id, prompt));
                agent.due_ns = None;
                next_id += 1;
            }
        }
        let next_due = agents.iter().filter_map(|a| a.due_ns).min();
        let timeout = next_due.map_or(ANSWER_TIMEOUT, |due| {
            Duration::from_nanos(due.saturating_sub(now_ns()))
        });
        let Some(done) = arm.next_done(timeout)? else {
            if next_due.is_none() {
                bail!("{name}: no answer within {} s", ANSWER_TIMEOUT.as_secs());
            }
            continue;
        };
        let Some(i) = agents
            .iter()
            .position(|a| a.in_flight.as_ref().is_some_and(|(id, _)| *id == done.id))
        else {
            bail!("{name}: answered request {}, which no agent sent", done.id);
        };
        let agent = &mut agents[i];
        let (_, prompt) = agent.in_flight.take().expect("found in flight");
        agent.answered += 1;
        let turn = sample(i + 1, agent.answered, &prompt, t0, &done, spec)?;
        eprintln!(
            "threeway: {name} agent {} turn {}: {} prompt tokens, {} computed, TTFT {:.2} ms",
            turn.agent,
            turn.turn,
            turn.prompt_tokens,
            turn.prefill_computed,
            turn.ttft_s * 1e3
        );
        rec.record(turn)?;
        if agent.answered < spec.turns {
            let reply = script.reply(i, agent.answered - 1, &done.timed.tokens);
            agent.conversation = [prompt.as_slice(), reply].concat();
            agent.due_ns = Some(now_ns() + (spec.think_s * 1e9) as u64);
        }
    }
    Ok(())
}

/// The next answer, however long the engine takes (up to [`ANSWER_TIMEOUT`]).
fn wait(arm: &mut dyn Arm) -> Result<Done> {
    arm.next_done(ANSWER_TIMEOUT)?.with_context(|| {
        format!(
            "{}: no answer within {} s",
            arm.name(),
            ANSWER_TIMEOUT.as_secs()
        )
    })
}

/// The raw file's form of one answered turn; the engine's own count of the prompt must be the
/// prompt sent, and exactly n_out tokens must have come back.
fn sample(
    agent: usize,
    turn: usize,
    prompt: &[u32],
    t0_ns: u64,
    done: &Done,
    spec: &ScenarioSpec,
) -> Result<TurnSample> {
    let t = &done.timed;
    if done.prompt_tokens != prompt.len() {
        bail!(
            "agent {agent} turn {turn}: the engine counted {} prompt tokens ({} computed + {} \
             reused), {} were sent",
            done.prompt_tokens,
            done.computed_tokens,
            done.cached_tokens,
            prompt.len()
        );
    }
    if t.tokens.len() != spec.n_out {
        bail!(
            "agent {agent} turn {turn}: {} tokens came back, not {}",
            t.tokens.len(),
            spec.n_out
        );
    }
    let s = |ns: u64| ns as f64 * 1e-9;
    let token_times_s: Vec<f64> = t.token_ns.iter().map(|&ns| s(ns - t.sent_ns)).collect();
    Ok(TurnSample {
        agent,
        turn,
        prompt_tokens: prompt.len(),
        prompt_sha256: packet::prompt_sha256(prompt),
        sent_s: s(t.sent_ns.saturating_sub(t0_ns)),
        ttft_s: token_times_s[0],
        wall_s: s(t.done_ns - t.sent_ns),
        token_times_s,
        token_ids: t.named_ids(),
        prefill_computed: done.computed_tokens,
        cached_tokens: done.cached_tokens,
        engine_report: Some(json!({"buckets": t.buckets, "engine": t.engine})),
    })
}
