//! The step trace (`fak serve --trace-steps FILE`, `harness serve-arm --trace-steps FILE`): what
//! the continuous-batching scheduler did, one JSON line per forward step, so a request's time to
//! first token can be read as the steps its prompt went through and the steps it waited behind.
//!
//! The engine notes each step of its sequence API ([`StepRecord`]: prefill or decode, each
//! sequence's positions and the recurrent-state snapshots taken) with two host timestamps taken
//! where the step already is: before its inputs are written, and when the host is done with it —
//! after the wait for its result where the step waits for one (a decode step, a step of several
//! prompts, a prompt's last step), else at its submit (`waited: false`: the GPU may still be
//! running it, and the next wait covers it). Nothing is waited for that the step would not wait
//! for, so the trace can stay on in a benchmark. The scheduler adds which request holds each
//! sequence, the tick and its queue counts, and writes the lines once per tick ([`TraceLine`]).

use serde::{Deserialize, Serialize};
use std::time::Instant;

/// What a step's tokens were.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepRole {
    /// Prompt tokens of one sequence or of several.
    Prefill,
    /// One token of each sequence decoding.
    Decode,
}

/// One sequence's share of a step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortionRecord {
    /// The sequence's page-table row (rows are reused: `request` says whose it was).
    pub seq: u32,
    /// The scheduler's id of the request holding the sequence (None outside the scheduler).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<u64>,
    /// Its first token's position, and how many tokens it ran.
    pub pos: usize,
    pub len: usize,
    /// Positions whose recurrent state the step kept for the prefix cache (hybrid models): one
    /// inside the portion (its spare slot's) and its end, each where due.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub snapshots: Vec<usize>,
}

/// One forward step, timestamps in nanoseconds since the trace began (host, monotonic).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRecord {
    pub kind: StepRole,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Whether `end_ns` is after the wait for the step's result (else it is the submit).
    pub waited: bool,
    pub portions: Vec<PortionRecord>,
}

impl StepRecord {
    /// Tokens the step ran (padding rows between prompts not counted).
    pub fn tokens(&self) -> usize {
        self.portions.iter().map(|p| p.len).sum()
    }
}

/// The steps the engine ran since they were last taken, while a trace is on.
pub(crate) struct StepLog {
    epoch: Instant,
    pub(crate) steps: Vec<StepRecord>,
}

impl StepLog {
    pub(crate) fn new(epoch: Instant) -> StepLog {
        StepLog {
            epoch,
            steps: Vec::new(),
        }
    }

    /// Nanoseconds from the trace's start to `at`.
    pub(crate) fn ns(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.epoch).as_nanos() as u64
    }
}

/// The requests and sequences in a tick, counted after admission (before its steps; again
/// after requests admitted between its prefill steps, for the steps after them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TickCounts {
    /// Requests waiting for a sequence.
    pub waiting: usize,
    /// Sequences whose prompt is not all prefilled.
    pub prefilling: usize,
    /// Sequences decoding.
    pub decoding: usize,
}

/// One line of the trace file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum TraceLine {
    /// A request reached the server at `t_ns` (its caller's receive time: the HTTP body read,
    /// the JSON line read). The line is written where the scheduler took it from the server's
    /// channel (between ticks, or between a tick's prefill steps), so it may follow steps that
    /// ended after `t_ns`: the step in flight when it came.
    Submit {
        request: u64,
        t_ns: u64,
        prompt_tokens: usize,
    },
    /// It took a sequence (its prefill starts at `cached_tokens`).
    Admit {
        request: u64,
        t_ns: u64,
        seq: u32,
        cached_tokens: usize,
    },
    /// Its prompt is prefilled and its first token known (sent to the client now).
    Started { request: u64, t_ns: u64 },
    /// A forward step: the `step`-th of the trace, in tick `tick`.
    Step {
        step: u64,
        tick: u64,
        counts: TickCounts,
        #[serde(flatten)]
        record: StepRecord,
    },
}

/// Reads a trace file's lines (an unfinished last line, from a server still writing, is left
/// out). Errors name the line.
pub fn parse_trace(text: &str) -> Result<Vec<TraceLine>, String> {
    let complete = match text.rfind('\n') {
        Some(end) => &text[..end],
        None => "",
    };
    complete
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            serde_json::from_str(line).map_err(|e| format!("step trace line {}: {e}", i + 1))
        })
        .collect()
}
