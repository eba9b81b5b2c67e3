//! `fak`: serve a GGUF model over an OpenAI-compatible API, or generate from a prompt.

use clap::{Parser, Subcommand};
use fak_cli::{run, serve};

#[derive(Parser)]
#[command(
    name = "fak",
    version,
    about = "fak: portable GPU inference for Qwen3-class models"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve a model over HTTP: /v1/chat/completions, /v1/completions, /v1/models, /health,
    /// /metrics (OpenAI-compatible, streaming over server-sent events).
    Serve(serve::Args),
    /// Generate from a prompt on the GPU, streaming text, with load/prefill/decode timings.
    Run(run::Args),
}

fn main() {
    // SAFETY: first thing in main, before any thread exists.
    unsafe { fak::gpu::skip_display_probe() };
    let result = match Cli::parse().command {
        Command::Serve(args) => serve::run(args),
        Command::Run(args) => {
            fak_cli::end_quietly_on_closed_stdout();
            run::run(args)
        }
    };
    if let Err(err) = result {
        eprintln!("error: {err:#}");
        std::process::exit(1);
    }
}
