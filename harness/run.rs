//! `harness run`: generate from a prompt on the GPU, streaming text, with timings.
//!
//! Timing runs read back nothing but tokens. `--logits-out` adds a separate, untimed quality
//! pass afterwards: the prompt and the generated tokens teacher-forced, every position's logits
//! written as raw little-endian f32 `[rows, n_vocab]` with a JSON sidecar `<file>.json`
//! (`{"n_vocab", "rows", "token_ids"}`: row i holds the logits after `token_ids[i]`).

use anyhow::{Context, Result, bail};
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
    let sampling = SamplingParams::new(args.temp, args.top_k, args.top_p, args.seed)
        .context("--temp/--top-k/--top-p")?;
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

/// `--tokens`: ids separated by commas or whitespace.
pub fn parse_token_ids(list: &str) -> Result<Vec<u32>> {
    list.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<u32>()
                .with_context(|| format!("--tokens: {s:?} is not a token id"))
        })
        .collect()
}

fn write_logits(engine: &mut Engine, ids: &[u32], path: &PathBuf) -> Result<()> {
    let logits = engine.teacher_forced_logits(ids)?;
    write_logits_file(&logits, ids, path)
}

/// Writes `logits` (row i: after `ids[i]`) as raw f32 with the JSON sidecar `<file>.json`.
pub fn write_logits_file(logits: &[Vec<f32>], ids: &[u32], path: &PathBuf) -> Result<()> {
    let n_vocab = logits.first().map_or(0, Vec::len);
    let mut file = std::io::BufWriter::new(
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
    );
    for row in logits {
        for v in row {
            file.write_all(&v.to_le_bytes())?;
        }
    }
    file.flush()?;
    let sidecar = serde_json::json!({ "n_vocab": n_vocab, "rows": logits.len(), "token_ids": ids });
    let meta = path.with_extension(format!(
        "{}json",
        path.extension()
            .map_or(String::new(), |e| format!("{}.", e.to_string_lossy()))
    ));
    std::fs::write(&meta, serde_json::to_vec_pretty(&sidecar)?)
        .with_context(|| format!("writing {}", meta.display()))?;
    Ok(())
}

/// A token-count flag (a context, a prompt or output length): `min` up to the longest context a
/// model may declare ([`fak::model::bounds::Size::Context`]), so nothing is sized from
/// `--n-out 18446744073709551615` and sums of counts cannot overflow.
pub fn tokens(min: u64) -> impl Fn(&str) -> Result<usize, String> + Clone + Send + Sync {
    ranged(min, *fak::model::bounds::Size::Context.range().end() as u64)
}

/// A count of requests, prompts, agents, turns or steps: `min` to 100 000.
pub fn count(min: u64) -> impl Fn(&str) -> Result<usize, String> + Clone + Send + Sync {
    ranged(min, 100_000)
}

/// A whole number in `min..=max`; anything else (negative, too large, not a number) is refused
/// with the range.
fn ranged(min: u64, max: u64) -> impl Fn(&str) -> Result<usize, String> + Clone + Send + Sync {
    move |text: &str| {
        let v: i128 = text
            .trim()
            .parse()
            .map_err(|_| format!("{text:?} is not a whole number in {min}..={max}"))?;
        match u64::try_from(v) {
            Ok(v) if (min..=max).contains(&v) => Ok(v as usize),
            _ => Err(format!("{v} is not in {min}..={max}")),
        }
    }
}

/// A byte count: digits with an optional K, M or G (×1024ⁿ; `KiB`, `MB` and the like read the
/// same) suffix.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(digits);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a byte count (e.g. 1073741824, 512M, 2G)"))?;
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        _ => return Err(format!("{text:?}: unknown unit {unit:?} (use K, M or G)")),
    };
    number
        .checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{text:?} overflows 64 bits"))
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn byte_counts_take_binary_suffixes() {
        assert_eq!(parse_bytes("0"), Ok(0));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("512M"), Ok(512 << 20));
        assert_eq!(parse_bytes("2g"), Ok(2 << 30));
        assert_eq!(parse_bytes("3 KiB"), Ok(3 << 10));
        assert!(parse_bytes("1.5G").is_err());
        assert!(parse_bytes("12X").is_err());
        assert!(parse_bytes("99999999999G").is_err());
    }
}
