//! `harness serve-arm` (hidden): the fak-native arm's engine process. Loads the model on the GPU
//! with `fak::runtime::Engine` and answers the JSON-lines protocol of `arms::jsonl` on
//! stdin/stdout until stdin closes. Timestamps are CLOCK_MONOTONIC, shared with the harness.

use crate::arms::process::now_ns;
use anyhow::{Context, Result, bail};
use fak::runtime::{Engine, EngineOptions, SamplingParams};
use serde::Deserialize;
use serde_json::{Value, json};
use std::io::{BufRead, Write};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long)]
    pub model: PathBuf,
    #[arg(long)]
    pub max_context: Option<usize>,
}

#[derive(Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Request {
    Generate { prompt: Vec<u32>, n_out: usize },
    Logits { ids: Vec<u32>, out: PathBuf },
}

pub fn run(args: Args) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    let mut engine = match load(&args) {
        Ok(engine) => engine,
        Err(e) => {
            let msg = json!({"ready": false, "error": format!("{e:#}")});
            writeln!(stdout, "{msg}")?;
            return Err(e);
        }
    };
    let facts = json!({
        "engine": "fak",
        "version": env!("CARGO_PKG_VERSION"),
        "adapter": engine.ctx.facts(),
        "kernel_paths": engine.ctx.paths().name(),
        "load_s": engine.load_time.as_secs_f64(),
        "max_context": engine.max_context(),
    });
    writeln!(stdout, "{}", json!({"ready": true, "facts": facts}))?;
    stdout.flush()?;
    for line in std::io::stdin().lock().lines() {
        let line = line.context("reading a request")?;
        let recv_ns = now_ns();
        let answer = match serve(&mut engine, &line, recv_ns) {
            Ok(answer) => answer,
            Err(e) => json!({"ok": false, "error": format!("{e:#}")}),
        };
        writeln!(stdout, "{answer}")?;
        stdout.flush()?;
    }
    Ok(())
}

fn load(args: &Args) -> Result<Engine> {
    let mut options = EngineOptions::from_env()?;
    options.max_context = args.max_context;
    Ok(Engine::load(&args.model, &options)?)
}

fn serve(engine: &mut Engine, line: &str, recv_ns: u64) -> Result<Value> {
    let request: Request = serde_json::from_str(line).context("parsing the request")?;
    match request {
        Request::Generate { prompt, n_out } => {
            let mut token_ns = Vec::with_capacity(n_out);
            let start_ns = now_ns();
            let stats =
                engine.generate(&prompt, n_out, &SamplingParams::greedy(), true, &mut |_| {
                    token_ns.push(now_ns())
                })?;
            let reply_ns = now_ns();
            Ok(json!({
                "ok": true, "tokens": stats.tokens, "recv_ns": recv_ns, "start_ns": start_ns,
                "token_ns": token_ns, "reply_ns": reply_ns,
            }))
        }
        Request::Logits { ids, out } => {
            let rows = engine.teacher_forced_logits(&ids)?;
            let n_vocab = rows.first().map_or(0, Vec::len);
            if rows.len() != ids.len() {
                bail!("{} rows of logits for {} ids", rows.len(), ids.len());
            }
            let mut file = std::io::BufWriter::new(
                std::fs::File::create(&out)
                    .with_context(|| format!("creating {}", out.display()))?,
            );
            for row in &rows {
                file.write_all(bytemuck::cast_slice(row))?;
            }
            file.flush()?;
            Ok(json!({"ok": true, "rows": rows.len(), "n_vocab": n_vocab}))
        }
    }
}
