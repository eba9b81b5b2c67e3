//! The report's multi-agent section: the shared-TTFT table (per arm: turn-1 and later-turn TTFT,
//! their ratio, prompt tokens computed and reused) and, per engine, its cache on against off.

use super::{ms, ratio_cell};
use crate::packet::ArmStatus;
use crate::packet::scenario::{Arrival, Replies, Scenario, ScenarioArmEntry, TurnGroup};
use std::fmt::Write;

pub fn section(md: &mut String, s: &Scenario) {
    let arrival = match s.spec.arrival {
        Arrival::Together => "every agent's turn 1 sent at once".to_owned(),
        Arrival::Staggered { interval_s } => {
            format!("turn 1 staggered by {} ms per agent", ms(interval_s))
        }
    };
    let next = match s.spec.think_s {
        0.0 => "each next turn sent when its reply is complete".to_owned(),
        think => format!(
            "each next turn sent {} ms after its reply is complete (think time)",
            ms(think)
        ),
    };
    let replies = match s.spec.replies {
        Replies::Own => {
            "A later turn carries the engine's own replies, so arms whose answers differ are sent \
             different later prompts."
        }
        Replies::Scripted { .. } => {
            "A later turn carries scripted replies (corpus ids fixed before any arm ran), so every \
             arm is sent the same prompts: no engine's cache holds a reply from its own decoding, \
             and every engine prefills the replies as prompt tokens."
        }
    };
    let _ = writeln!(
        md,
        "## Multi-agent shared preamble\n\n{} agents share a {}-token preamble; each sends {} \
         turns of {} new tokens (turn t's prompt: the preamble, the agent's earlier turns and \
         replies, then the new tokens; P + t·S + (t − 1)·n_out tokens) and gets n_out = {} back; \
         {arrival}, {next}. TTFT is the client's: sent → \
         first token, queueing included; every first token comes from logits computed in its own \
         request. Prompt tokens computed are the engine's own count (see each arm's source below). \
         {replies}\n",
        s.spec.agents, s.spec.preamble_tokens, s.spec.turns, s.spec.suffix_tokens, s.spec.n_out
    );
    md.push_str(
        "| arm | prefix cache | served at once | turn-1 TTFT p50 (ms) | later-turn TTFT p50 (ms) \
         | turn 1 / later | prefill computed, turn 1 | prefill computed, later turns | cache hits |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for a in &s.arms {
        row(md, a);
    }
    md.push('\n');
    if !s.cache_effect.is_empty() {
        md.push_str(
            "| engine | turn-1 TTFT, cache off / on | later-turn TTFT, cache off / on | prefill \
             computed, off / on |\n|---|---|---|---|\n",
        );
        for e in &s.cache_effect {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} |",
                e.engine,
                ratio_cell(Some(e.turn1_ttft_ratio)),
                ratio_cell(e.later_ttft_ratio),
                ratio_cell(Some(e.prefill_computed_ratio))
            );
        }
        md.push('\n');
    }
    requests(md, s);
    md.push_str(
        "How each arm serves concurrent requests, its cache, and where its counts come from:\n\n",
    );
    for a in &s.arms {
        let _ = writeln!(
            md,
            "- **{}** ({} {}): {}; cache: {}; counts: {}.",
            a.arm,
            a.engine.name,
            a.engine.version,
            a.serving.how,
            a.cache_how,
            a.prefill_counted_by
        );
    }
    md.push('\n');
}

/// Every measured request in the order answered, with the idle time before it: a GPU left
/// idle can answer later, so a TTFT is read with the gap that preceded it.
fn requests(md: &mut String, s: &Scenario) {
    if s.arms.iter().all(|a| a.turns.is_empty()) {
        return;
    }
    md.push_str(
        "Every request, as answered (idle before: seconds the arm had no request in flight \
         before this one was sent):\n\n| arm | agent | turn | sent (s) | idle before (s) | TTFT \
         (ms) | prompt tokens | computed | cached |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for a in &s.arms {
        for t in &a.turns {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {:.3} | {:.3} | {} | {} | {} | {} |",
                a.arm,
                t.agent,
                t.turn,
                t.sent_s,
                t.idle_before_s,
                ms(t.ttft_s),
                t.prompt_tokens,
                t.prefill_computed,
                t.cached_tokens
            );
        }
    }
    md.push('\n');
}

fn row(md: &mut String, a: &ScenarioArmEntry) {
    let cache = if a.prefix_cache { "on" } else { "off" };
    let Some(sum) = &a.summary else {
        let why = match &a.status {
            ArmStatus::Skipped { reason } => format!("skipped: {reason}"),
            ArmStatus::Faulted { faults, .. } => format!(
                "failed: {}",
                faults
                    .first()
                    .map_or("no reason recorded", |f| f.what.as_str())
            ),
            _ => "no turn measured".into(),
        };
        let _ = writeln!(
            md,
            "| {} | {cache} | — | {why} | — | — | — | — | — |",
            a.arm
        );
        return;
    };
    let computed = |g: &TurnGroup| {
        format!(
            "{} of {} ({:.1} per request)",
            g.prefill_computed,
            g.prompt_tokens,
            g.prefill_computed as f64 / g.requests as f64
        )
    };
    let hits = sum.turn1.cache_hits + sum.later.as_ref().map_or(0, |l| l.cache_hits);
    let requests = sum.turn1.requests + sum.later.as_ref().map_or(0, |l| l.requests);
    let faulted = match &a.status {
        ArmStatus::Faulted { .. } => " (faulted: partial)",
        _ => "",
    };
    let _ = writeln!(
        md,
        "| {}{faulted} | {cache} | {} | {} | {} | {} | {} | {} | {hits} of {requests} |",
        a.arm,
        a.serving.concurrent,
        ms(sum.turn1.ttft_p50_s),
        sum.later.as_ref().map_or("—".into(), |l| ms(l.ttft_p50_s)),
        ratio_cell(sum.ttft_turn1_over_later),
        computed(&sum.turn1),
        sum.later.as_ref().map_or("—".into(), computed),
    );
}
