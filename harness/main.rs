//! `harness`: fak's command-line front end and benchmark driver.

use clap::{Parser, Subcommand};

mod bench;
mod devices;
mod inspect;
mod run;
mod synth;
mod tokenize;

#[derive(Parser)]
#[command(
    name = "harness",
    version,
    about = "fak tools: inspect, synth, devices, benchmarks"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print a GGUF file's metadata, tensors and the bytes a decode step reads.
    Inspect(inspect::Args),
    /// List the GPU adapters: backend, type, driver, features, limits, subgroup sizes.
    Devices(devices::Args),
    /// Print the token ids of texts or files (one line of ids per input).
    Tokenize(tokenize::Args),
    /// Generate from a prompt on the GPU, streaming text, with load/prefill/decode timings.
    Run(run::Args),
    /// Write a synthetic model (seeded random weights, real shapes and tokenizer) as GGUF.
    Synth(synth::Args),
    /// Decode speed op by op at several cache depths: GPU time, bytes, GB/s, % of the roofline.
    Bench(bench::Args),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Inspect(args) => inspect::run(args),
        Command::Devices(args) => devices::run(args),
        Command::Tokenize(args) => tokenize::run(args),
        Command::Run(args) => run::run(args),
        Command::Synth(args) => synth::run(args),
        Command::Bench(args) => bench::run(args),
    };
    if let Err(err) = result {
        // One clear line (with its causes), no backtrace unless RUST_BACKTRACE asks for one.
        eprintln!("error: {err:#}");
        std::process::exit(1);
    }
}
