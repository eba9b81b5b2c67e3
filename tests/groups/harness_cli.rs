//! The harness as a command: threeway and its scenarios, bench, validate, the trained models.
//!
//! One test binary for the files below (they stay where they are): each binary links the engine,
//! wgpu and naga, so fewer of them keep the target small. CI runs one file's module at a time
//! (`ci/test.sh` `run_tests`); `tests/common/groups.rs` checks that every test file is in a group.

/// harness threeway (all three arms for real), selftest, synth --mlx-4bit against mx.quantize, and
/// the runs that go wrong: missing model, llama-server exiting at start, unknown MLX architecture,
/// engines killed mid-run, Ctrl-C.
#[path = "../threeway.rs"]
mod threeway;

/// harness threeway --scenario multi-agent: agents sharing a preamble on every engine, cache on
/// and off; the packet validates and the report has the shared-TTFT table.
#[path = "../multi_agent.rs"]
mod multi_agent;

/// harness bench: per-op profile, bytes, roofline and decode rate, checked for internal consistency.
#[path = "../harness_bench.rs"]
mod harness_bench;

/// harness validate as a command: exit codes and the JSON answer.
#[path = "../packet_cli.rs"]
mod packet_cli;

/// The trained tiny models and their cut vocabulary: closed BPE, llama-tokenize agreeing, trained
/// enough (held-out margins, greedy agreement with llama.cpp on every quantization), and
/// `harness quantize` against llama-quantize.
#[path = "../trained_models.rs"]
mod trained_models;
