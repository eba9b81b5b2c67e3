//! `harness`: fak's command-line front end and benchmark driver.

use clap::{Parser, Subcommand};
use fak_harness::packet::validate;
use fak_harness::{inspect, report};

mod arms;
mod bench;
mod devices;
mod reference;
mod run;
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
    /// Check a comparison packet: its JSON Schema, then every figure recomputed from the raw files
    /// (exit 0 valid, 1 not valid, 2 unreadable).
    Validate(validate::Args),
    /// Write a packet's report: markdown tables, roofline, reproduction, SVG plots.
    Report(report::Args),
    /// What moved between two packets (p50s outside each other's bootstrap intervals).
    Compare(report::compare::Args),
    /// Run the matched envelope on fak-native, llama.cpp and MLX and write a comparison packet.
    Threeway(threeway::Args),
    /// Check every kernel path this adapter runs against the CPU reference; measure bandwidth.
    Selftest(selftest::Args),
    /// The fak-native arm's engine process (JSON lines on stdin/stdout; used by threeway).
    #[command(hide = true)]
    ServeArm(serve_arm::Args),
    /// Decode speed op by op at several cache depths: GPU time, bytes, GB/s, % of the roofline.
    Bench(bench::Args),
}

fn main() {
    // SAFETY: first thing in main, before any thread exists.
    unsafe { fak::gpu::skip_display_probe() };
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Threeway(_)) {
        end_quietly_on_closed_stdout();
    }
    let result = match cli.command {
        Command::Inspect(args) => inspect::run(args),
        Command::Devices(args) => devices::run(args),
        Command::Tokenize(args) => tokenize::run(args),
        Command::Run(args) => run::run(args),
        Command::Synth(args) => synth::run(args),
        Command::Reference(args) => reference::run(args),
        Command::Validate(args) => std::process::exit(validate::run(&args)),
        Command::Report(args) => report::run(&args),
        Command::Compare(args) => report::compare::run(&args),
        Command::Threeway(args) => threeway::run(args),
        Command::Selftest(args) => selftest::run(args),
        Command::ServeArm(args) => serve_arm::run(args),
        Command::Bench(args) => bench::run(args),
    };
    if let Err(err) = result {
        // One clear line (with its causes), no backtrace unless RUST_BACKTRACE asks for one.
        eprintln!("error: {err:#}");
        std::process::exit(1);
    }
}

/// Rust ignores SIGPIPE, so printing to a closed pipe (`harness inspect x.gguf | head -1`)
/// fails, and `println!` panics on the failure. Like any Unix filter, the commands instead end
/// at once by the signal (status 141 in a shell) when their reader goes away. Not `threeway`:
/// it writes to its engines' pipes, where a dead engine must be an error it reports, not the
/// end of the run.
fn end_quietly_on_closed_stdout() {
    #[cfg(unix)]
    // SAFETY: called before any thread starts; SIG_DFL is a valid disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
