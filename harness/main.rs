//! `harness`: fak's command-line front end and benchmark driver.

use clap::{Parser, Subcommand};
use fak_cli::{flag_values, logits_file, run};
use fak_harness::packet::validate;
use fak_harness::{inspect, report};

mod arms;
mod bench;
mod devices;
mod models;
mod quantize;
mod reference;
mod selftest;
mod serve_arm;
mod synth;
mod threeway;
mod tokenize;

#[derive(Parser)]
#[command(
    name = "harness",
    version,
    about = "fak tools: inspect, synth, devices, selftest, threeway benchmarks"
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
    /// Run fak's CPU reference on token ids and write its logits (harness run's format).
    Reference(reference::Args),
    /// Write a synthetic model (seeded random weights, real shapes and tokenizer) as GGUF.
    Synth(synth::Args),
    /// Quantize a GGUF as llama-quantize does (its per-tensor type rules), with fak's quantizers.
    Quantize(quantize::Args),
    /// Check a comparison packet: its JSON Schema, then every figure recomputed from the raw files
    /// (exit 0 valid, 1 not valid, 2 unreadable).
    Validate(validate::Args),
    /// Write a packet's report: markdown tables, roofline, reproduction, SVG plots.
    Report(report::Args),
    /// What moved between two packets (p50s outside each other's bootstrap intervals).
    Compare(report::compare::Args),
    /// A step trace (`fak serve --trace-steps`) per request: its prefill steps, why its
    /// prompt was cut, the steps it waited behind.
    Steps(report::steps::Args),
    /// Run the matched envelope on fak-native, llama.cpp and MLX and write a comparison packet.
    Threeway(Box<threeway::Args>),
    /// Check every kernel path this adapter runs against the CPU reference; measure bandwidth.
    Selftest(selftest::Args),
    /// The fak-native arm's engine process (JSON lines on stdin/stdout; used by threeway).
    #[command(hide = true)]
    ServeArm(serve_arm::Args),
    /// `fak serve` (the fak-serve arm's server; the same code as the `fak` binary's).
    #[command(hide = true)]
    FakServe(fak_cli::serve::Args),
    /// Decode speed op by op at several cache depths: GPU time, bytes, GB/s, % of the roofline.
    Bench(bench::Args),
}

fn main() {
    // SAFETY: first thing in main, before any thread exists.
    unsafe { fak::gpu::skip_display_probe() };
    let cli = Cli::parse();
    // Not threeway (it writes to its engines' pipes) nor the server.
    if !matches!(cli.command, Command::Threeway(_) | Command::FakServe(_)) {
        fak_cli::end_quietly_on_closed_stdout();
    }
    let result = match cli.command {
        Command::Inspect(args) => inspect::run(args),
        Command::Devices(args) => devices::run(args),
        Command::Tokenize(args) => tokenize::run(args),
        Command::Run(args) => run::run(args),
        Command::Synth(args) => synth::run(args),
        Command::Quantize(args) => quantize::run(args),
        Command::Reference(args) => reference::run(args),
        Command::Validate(args) => std::process::exit(validate::run(&args)),
        Command::Report(args) => report::run(&args),
        Command::Compare(args) => report::compare::run(&args),
        Command::Steps(args) => report::steps::run(&args),
        Command::Threeway(args) => threeway::run(*args),
        Command::Selftest(args) => selftest::run(args),
        Command::ServeArm(args) => serve_arm::run(args),
        Command::FakServe(args) => fak_cli::serve::run(args),
        Command::Bench(args) => bench::run(args),
    };
    if let Err(err) = result {
        // One clear line (with its causes), no backtrace unless RUST_BACKTRACE asks for one.
        eprintln!("error: {err:#}");
        std::process::exit(1);
    }
}
