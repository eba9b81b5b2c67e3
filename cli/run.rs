//! `fak run` (and `harness run`, the same code): generate from a prompt on the GPU, streaming
//! text, with timings.
//!
//! Timing runs read back nothing but tokens. `--logits-out` adds a separate, untimed quality
//! pass afterwards: the prompt and the generated tokens teacher-forced, every position's logits
//! written to a [`crate::logits_file`].

use crate::flag_values::{parse_bytes, parse_token_ids, ranged, tokens};
use crate::logits_file::write_logits_file;
use anyhow::{Result, bail};
use fak::runtime::{Engine, EngineOptions, SamplingParams};
use fak::tokenizer::ChatMessage;
use serde::Serialize;
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// The GGUF model.
    #[arg(long)]
    pub model: PathBuf,
    /// Prompt text (special tokens such as <|im_start|> are parsed).
    #[arg(long, conflicts_with = "tokens", required_unless_present = "tokens")]
    pub prompt: Option<String>,
    /// Prompt as token ids, comma- or space-separated.
    #[arg(long)]
    pub tokens: Option<String>,
    /// Tokens to generate.
    #[arg(short = 'n', long = "n-out", default_value_t = 64, value_parser = tokens(0))]
    pub n_out: usize,
    /// Wrap --prompt in the model's chat template as one user message.
    #[arg(long, requires = "prompt")]
    pub chat: bool,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temp: f32,
    /// Keep the k most likely tokens (0: all).
    #[arg(long, default_value_t = 0, value_parser = ranged(0, *fak::model::bounds::Size::Vocab.range().end() as u64))]
    pub top_k: usize,
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Drop tokens less likely than this times the most likely one; 0 keeps all.
    #[arg(long, default_value_t = 0.0)]
    pub min_p: f32,
    /// Repetition penalty over prompt and output tokens; 1 is none.
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Subtracted once from the logit of every token already generated.
    #[arg(long, default_value_t = 0.0)]
    pub presence_penalty: f32,
    /// Subtracted from a token's logit per time it was generated.
    #[arg(long, default_value_t = 0.0)]
    pub frequency_penalty: f32,
    /// Keep generating past end-of-generation tokens.
    #[arg(long)]
    pub ignore_eos: bool,
    /// KV-cache length (default: min(training context, 4096)).
    #[arg(long, value_parser = tokens(1))]
    pub max_context: Option<usize>,
    /// GPU memory for the prefix cache's KV pages and state snapshots (bytes, or with a K, M
    /// or G suffix: 512M, 2G); 0 turns the cache off.
    #[arg(long, default_value = "0", value_parser = parse_bytes)]
    pub cache_mem: u64,
    /// Print one JSON object (tokens, text, timings) instead of streaming text.
    #[arg(long)]
    pub json: bool,
    /// Write every position's logits (untimed quality pass) to this file.
    #[arg(long)]
    pub logits_out: Option<PathBuf>,
}

#[derive(Serialize)]
struct Report {
    model: String,
    adapter: String,
    prompt_tokens: Vec<u32>,
    /// Prompt tokens whose KV came from the prefix cache.
    cached_tokens: usize,
    tokens: Vec<u32>,
    text: String,
    stop: fak::runtime::StopReason,
    load_s: f64,
    prefill_s: f64,
    decode_s: f64,
    prefill_tokens_per_s: f64,
    decode_tokens_per_s: Option<f64>,
    prefill_step_dispatches: usize,
    decode_step_dispatches: usize,
}

pub fn run(args: Args) -> Result<()> {
    // Checked before the model loads: a bad value fails at once, with its range.
    let sampling = SamplingParams {
        temperature: args.temp,
        top_k: args.top_k,
        top_p: args.top_p,
        seed: args.seed,
        min_p: args.min_p,
        repetition_penalty: args.repeat_penalty,
        presence_penalty: args.presence_penalty,
        frequency_penalty: args.frequency_penalty,
    }
    .validated()?;
    let mut options = EngineOptions::from_env()?;
    options.max_context = args.max_context;
    options.cache_mem = args.cache_mem;
    let mut engine = Engine::load(&args.model, &options)?;
    let prompt = prompt_ids(&args, &engine)?;
    let tokenizer = engine.tokenizer.clone();
    let mut decoder = tokenizer.stream_decoder(false);
    let mut text = String::new();
    let mut stdout = std::io::stdout();
    let mut decode_error = None;
    let stats = {
        let stream = !args.json;
        let mut on_token = |id: u32| match decoder.push(id) {
            Ok(Some(piece)) => {
                if stream {
                    let _ = write!(stdout, "{piece}").and_then(|_| stdout.flush());
                }
                text.push_str(&piece);
            }
            Ok(None) => {}
            Err(e) => decode_error = Some(e),
        };
        engine.generate(
            &prompt,
            args.n_out,
            &sampling,
            args.ignore_eos,
            &mut on_token,
        )?
    };
    if let Some(e) = decode_error {
        return Err(e.into());
    }
    let tail = decoder.finish();
    text.push_str(&tail);
    let report = Report {
        model: args.model.display().to_string(),
        adapter: engine.ctx.facts().name.clone(),
        prompt_tokens: prompt.clone(),
        cached_tokens: stats.cached_tokens,
        tokens: stats.tokens.clone(),
        text,
        stop: stats.stop,
        load_s: engine.load_time.as_secs_f64(),
        prefill_s: stats.prefill.as_secs_f64(),
        decode_s: stats.decode.as_secs_f64(),
        prefill_tokens_per_s: stats.prefill_tokens_per_second(),
        decode_tokens_per_s: stats.decode_tokens_per_second(),
        prefill_step_dispatches: stats.prefill_step_dispatches,
        decode_step_dispatches: stats.decode_step_dispatches,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{tail}");
        eprintln!(
            "load {:.2} s · prompt {} tokens, prefill {:.1} tok/s · {} generated, decode {} · {}",
            report.load_s,
            prompt.len(),
            report.prefill_tokens_per_s,
            report.tokens.len(),
            report
                .decode_tokens_per_s
                .map_or("n/a".into(), |r| format!("{r:.1} tok/s")),
            report.adapter
        );
    }
    if let Some(path) = &args.logits_out {
        let ids: Vec<u32> = prompt.iter().chain(&stats.tokens).copied().collect();
        write_logits(&mut engine, &ids, path)?;
    }
    Ok(())
}

fn prompt_ids(args: &Args, engine: &Engine) -> Result<Vec<u32>> {
    if let Some(list) = &args.tokens {
        return parse_token_ids(list);
    }
    let text = args.prompt.as_deref().unwrap_or_default();
    let text = if args.chat {
        let messages = [ChatMessage::new("user", text)];
        engine
            .tokenizer
            .apply_chat_template(&messages, true, false)?
    } else {
        text.to_owned()
    };
    let ids = engine.tokenizer.encode(&text, true);
    if ids.is_empty() {
        bail!("the prompt is empty");
    }
    Ok(ids)
}

fn write_logits(engine: &mut Engine, ids: &[u32], path: &PathBuf) -> Result<()> {
    let logits = engine.teacher_forced_logits(ids)?;
    write_logits_file(&logits, ids, path)
}
