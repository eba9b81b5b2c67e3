//! The multi-agent shared-preamble scenario (`harness threeway --scenario multi-agent`): its raw
//! files, the packet's `scenario` section built from them, and the checks `harness validate`
//! runs on both.
//!
//! A agents share one P-token preamble; each sends T turns, turn t's prompt being the preamble,
//! the agent's earlier turns and replies, and S new tokens (P + t·S + (t − 1)·n_out tokens), and
//! gets n_out tokens back. Each arm is one engine with its prefix cache on or off; its
//! `multi-agent-<arm>-raw.json` ([`ScenarioRaw`]) holds every turn of every agent as measured:
//! when it was sent, its first-token time, the prompt tokens the engine computed and those it
//! reused. The packet's section ([`Scenario`]) is rebuilt from those files by [`build_scenario`]
//! (the writer and the validator call the same function).

use super::FileDigest;
use super::metrics::{close, percentile};
use super::raw::{ArmStatus, EngineInfo, MemoryPeak, Weights};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The schema of `multi-agent-<arm>-raw.json`.
pub const SCENARIO_RAW_SCHEMA: &str = "fak.macbench.scenario-raw.v1";

/// The scenario's name in the packet.
pub const MULTI_AGENT: &str = "multi-agent";

/// `multi-agent-<arm>-raw.json`.
pub fn scenario_raw_file_name(arm: &str) -> String {
    format!("{MULTI_AGENT}-{arm}-raw.json")
}

/// How the agents' first turns arrive.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "lowercase")]
pub enum Arrival {
    /// Every agent's turn 1 is sent at once.
    Together,
    /// Agent a's turn 1 is sent (a − 1) · interval after agent 1's.
    Staggered { interval_s: f64 },
}

/// What the scenario is, fixed before any arm runs; every arm's raw file repeats it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScenarioSpec {
    /// [`MULTI_AGENT`].
    pub kind: String,
    pub agents: usize,
    pub preamble_tokens: usize,
    pub suffix_tokens: usize,
    pub turns: usize,
    pub n_out: usize,
    pub arrival: Arrival,
    /// Seconds an agent waits between an answer and its next turn (0: at once).
    #[serde(default)]
    pub think_s: f64,
    /// [`super::prompt_sha256`] of the preamble's ids.
    pub preamble_sha256: String,
    /// How the preamble and the suffixes were drawn (corpus, seed).
    pub prompt_source: String,
    /// What an agent's later turns carry as its earlier replies. Absent means each engine's
    /// own (written so, packets from before the choice existed stay what they were).
    #[serde(default, skip_serializing_if = "Replies::is_own")]
    pub replies: Replies,
}

/// What an agent's later turn carries as the replies to its earlier turns.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "lowercase")]
pub enum Replies {
    /// The ids the arm's engine answered (so each arm's later prompts are its own).
    #[default]
    Own,
    /// Replies fixed before any arm ran, the same ids for every arm: every arm is sent the same
    /// prompt at every turn, whatever it answered.
    Scripted {
        /// How the replies were drawn.
        source: String,
        /// `prompt_sha256[a][t]`: [`super::prompt_sha256`] of agent a + 1's turn t + 1 prompt.
        prompt_sha256: Vec<Vec<String>>,
    },
}

impl Replies {
    pub fn is_own(&self) -> bool {
        *self == Replies::Own
    }

    /// The prompt digest the script fixes for (agent, turn), both from 1; None with own replies.
    pub fn scripted_prompt(&self, agent: usize, turn: usize) -> Option<&String> {
        match self {
            Replies::Own => None,
            Replies::Scripted { prompt_sha256, .. } => prompt_sha256
                .get(agent.checked_sub(1)?)?
                .get(turn.checked_sub(1)?),
        }
    }
}

impl ScenarioSpec {
    /// Turn t's prompt length (t from 1): the preamble, t suffixes and t − 1 replies. Saturating:
    /// a spec read from a packet may hold any counts, and a length past `usize` matches no prompt.
    pub fn prompt_tokens(&self, turn: usize) -> usize {
        self.preamble_tokens
            .saturating_add(turn.saturating_mul(self.suffix_tokens))
            .saturating_add(turn.saturating_sub(1).saturating_mul(self.n_out))
    }
}

/// How an engine serves requests that arrive together.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Serving {
    /// Requests it works on at once (fak: sequences per batched decode step; llama.cpp: slots;
    /// 1: one at a time, the rest queue and their queueing counts in their TTFT).
    pub concurrent: usize,
    pub how: String,
}

/// One scenario arm, before it runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScenarioArmHeader {
    /// e.g. `fak-native-cache`, `llama.cpp-nocache`.
    pub arm: String,
    pub engine: EngineInfo,
    pub weights: Weights,
    /// Whether the engine's prefix (prompt) cache was on.
    pub prefix_cache: bool,
    /// What that cache is and its limits, in words.
    pub cache_how: String,
    pub serving: Serving,
    /// Where the computed and reused prompt-token counts come from.
    pub prefill_counted_by: String,
}

/// One turn of one agent, as measured. Times are seconds on the harness's clock.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnSample {
    /// 1 ..= agents.
    pub agent: usize,
    /// 1 ..= turns.
    pub turn: usize,
    pub prompt_tokens: usize,
    /// [`super::prompt_sha256`] of the ids sent.
    pub prompt_sha256: String,
    /// When the request was sent, since the arm's scenario began.
    pub sent_s: f64,
    /// Sent → first output token received: the first token's logits are computed in this
    /// request (no engine here answers from a cached reply).
    pub ttft_s: f64,
    /// Sent → whole answer received.
    pub wall_s: f64,
    /// Per output token: seconds since the request was sent.
    pub token_times_s: Vec<f64>,
    /// The answer's ids; `null` for a token the engine streamed no id for and the arm could not
    /// name without running the request again (llama-server's withheld tokens, with scripted
    /// replies: nothing depends on them, so no replay is sent).
    pub token_ids: Vec<Option<u32>>,
    /// Prompt tokens the engine computed for this request.
    pub prefill_computed: usize,
    /// Prompt tokens whose KV it reused from its cache.
    pub cached_tokens: usize,
    /// What the engine reported about the request (llama-server `timings`, the child's
    /// counters), verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_report: Option<Value>,
}

/// `multi-agent-<arm>-raw.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScenarioRaw {
    pub schema: String,
    #[serde(flatten)]
    pub header: ScenarioArmHeader,
    pub spec: ScenarioSpec,
    pub status: ArmStatus,
    pub memory: Option<MemoryPeak>,
    /// The uncounted warm-up request (a prompt that shares no page-sized prefix with the
    /// preamble), when it ran.
    pub warmup: Option<TurnSample>,
    pub turns: Vec<TurnSample>,
}

/// The packet's `scenario` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Scenario {
    #[serde(flatten)]
    pub spec: ScenarioSpec,
    pub arms: Vec<ScenarioArmEntry>,
    /// Per engine run with its cache on and off: how much sooner first tokens come with it.
    pub cache_effect: Vec<CacheEffect>,
}

/// One scenario arm as the packet reports it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScenarioArmEntry {
    pub arm: String,
    pub engine: EngineInfo,
    pub weights: Weights,
    pub prefix_cache: bool,
    pub cache_how: String,
    pub serving: Serving,
    pub prefill_counted_by: String,
    pub status: ArmStatus,
    pub memory: Option<MemoryPeak>,
    pub raw_file: FileDigest,
    /// Absent when no turn was measured.
    pub summary: Option<ScenarioSummary>,
    /// Every measured turn, in the order the answers arrived.
    pub turns: Vec<TurnRow>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnRow {
    pub agent: usize,
    pub turn: usize,
    pub prompt_tokens: usize,
    pub prefill_computed: usize,
    pub cached_tokens: usize,
    pub sent_s: f64,
    /// Seconds before this request was sent with no other request of the arm in flight
    /// (counted from the scenario's start, when the warm-up had answered; 0 when one was). A
    /// GPU left idle can answer its next request later (experiments/NOTES.md, 2026-12-04:
    /// ~180 ms more after ≥ 3 s on an H200), which the TTFTs carry.
    pub idle_before_s: f64,
    pub ttft_s: f64,
    pub wall_s: f64,
}

/// Turn 1 against later turns.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScenarioSummary {
    pub turn1: TurnGroup,
    /// Turns 2 ..= T (absent when T = 1).
    pub later: Option<TurnGroup>,
    /// turn-1 TTFT p50 / later-turn TTFT p50: above 1, later first tokens come sooner.
    pub ttft_turn1_over_later: Option<f64>,
}

/// Requests of one group of turns.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnGroup {
    pub requests: usize,
    pub ttft_p50_s: f64,
    pub ttft_mean_s: f64,
    pub ttft_max_s: f64,
    /// Sums over the group's requests.
    pub prompt_tokens: usize,
    pub prefill_computed: usize,
    pub cached_tokens: usize,
    /// Requests that reused at least one cached token.
    pub cache_hits: usize,
}

/// One engine with its cache off against on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CacheEffect {
    pub engine: String,
    pub cache_arm: String,
    pub no_cache_arm: String,
    /// Turn-1 TTFT p50 without the cache / with it.
    pub turn1_ttft_ratio: f64,
    /// Later-turn TTFT p50 without the cache / with it (absent when T = 1).
    pub later_ttft_ratio: Option<f64>,
    /// Prompt tokens computed over every turn without the cache / with it.
    pub prefill_computed_ratio: f64,
}

/// The section from the spec and the arms' raw files (with their digests), in run order.
pub fn build_scenario(spec: ScenarioSpec, raws: &[(ScenarioRaw, FileDigest)]) -> Scenario {
    let arms: Vec<ScenarioArmEntry> = raws.iter().map(|(r, d)| arm_entry(r, d)).collect();
    let cache_effect = cache_effects(&arms);
    Scenario {
        spec,
        arms,
        cache_effect,
    }
}

fn arm_entry(raw: &ScenarioRaw, digest: &FileDigest) -> ScenarioArmEntry {
    let h = &raw.header;
    ScenarioArmEntry {
        arm: h.arm.clone(),
        engine: h.engine.clone(),
        weights: h.weights.clone(),
        prefix_cache: h.prefix_cache,
        cache_how: h.cache_how.clone(),
        serving: h.serving.clone(),
        prefill_counted_by: h.prefill_counted_by.clone(),
        status: raw.status.clone(),
        memory: raw.memory.clone(),
        raw_file: digest.clone(),
        summary: summary(&raw.turns),
        turns: raw
            .turns
            .iter()
            .enumerate()
            .map(|(i, t)| TurnRow {
                agent: t.agent,
                turn: t.turn,
                prompt_tokens: t.prompt_tokens,
                prefill_computed: t.prefill_computed,
                cached_tokens: t.cached_tokens,
                sent_s: t.sent_s,
                idle_before_s: idle_before(&raw.turns, i),
                ttft_s: t.ttft_s,
                wall_s: t.wall_s,
            })
            .collect(),
    }
}

/// [`TurnRow::idle_before_s`] of `turns[i]`: from the end of the last request answered before
/// it was sent (or the scenario's start) to its sending; 0 when one sent earlier was still in
/// flight (requests sent at the same instant do not count for each other).
fn idle_before(turns: &[TurnSample], i: usize) -> f64 {
    let sent = turns[i].sent_s;
    let mut idle_since = 0f64;
    for (j, other) in turns.iter().enumerate() {
        if j == i || other.sent_s >= sent {
            continue;
        }
        let answered = other.sent_s + other.wall_s;
        if answered > sent {
            return 0.0;
        }
        idle_since = idle_since.max(answered);
    }
    sent - idle_since
}

fn summary(turns: &[TurnSample]) -> Option<ScenarioSummary> {
    let first: Vec<&TurnSample> = turns.iter().filter(|t| t.turn == 1).collect();
    let later: Vec<&TurnSample> = turns.iter().filter(|t| t.turn > 1).collect();
    let turn1 = group(&first)?;
    let later = group(&later);
    let ttft_turn1_over_later = later.as_ref().map(|l| turn1.ttft_p50_s / l.ttft_p50_s);
    Some(ScenarioSummary {
        turn1,
        later,
        ttft_turn1_over_later,
    })
}

fn group(turns: &[&TurnSample]) -> Option<TurnGroup> {
    let ttft: Vec<f64> = turns.iter().map(|t| t.ttft_s).collect();
    Some(TurnGroup {
        requests: turns.len(),
        ttft_p50_s: percentile(&ttft, 0.5)?,
        ttft_mean_s: ttft.iter().sum::<f64>() / ttft.len() as f64,
        ttft_max_s: ttft.iter().copied().fold(f64::MIN, f64::max),
        // Saturating: the counts come from a packet file, which may hold anything.
        prompt_tokens: saturating_sum(turns.iter().map(|t| t.prompt_tokens)),
        prefill_computed: saturating_sum(turns.iter().map(|t| t.prefill_computed)),
        cached_tokens: saturating_sum(turns.iter().map(|t| t.cached_tokens)),
        cache_hits: turns.iter().filter(|t| t.cached_tokens > 0).count(),
    })
}

fn saturating_sum(values: impl Iterator<Item = usize>) -> usize {
    values.fold(0, usize::saturating_add)
}

/// For each engine with a summarised cache-on and cache-off arm, off over on.
fn cache_effects(arms: &[ScenarioArmEntry]) -> Vec<CacheEffect> {
    let mut out = Vec::new();
    for on in arms.iter().filter(|a| a.prefix_cache) {
        let Some(off) = arms
            .iter()
            .find(|a| !a.prefix_cache && a.engine.name == on.engine.name)
        else {
            continue;
        };
        let (Some(s_on), Some(s_off)) = (&on.summary, &off.summary) else {
            continue;
        };
        let computed = |s: &ScenarioSummary| {
            (s.turn1.prefill_computed)
                .saturating_add(s.later.as_ref().map_or(0, |l| l.prefill_computed))
        };
        out.push(CacheEffect {
            engine: on.engine.name.clone(),
            cache_arm: on.arm.clone(),
            no_cache_arm: off.arm.clone(),
            turn1_ttft_ratio: s_off.turn1.ttft_p50_s / s_on.turn1.ttft_p50_s,
            later_ttft_ratio: match (&s_off.later, &s_on.later) {
                (Some(off), Some(on)) => Some(off.ttft_p50_s / on.ttft_p50_s),
                _ => None,
            },
            prefill_computed_ratio: computed(s_off) as f64 / computed(s_on) as f64,
        });
    }
    out
}

/// Everything a scenario raw file must hold beyond what rebuilding the section checks: the
/// packet's spec, every turn of every agent (or a status saying why not), each turn's own
/// consistency (prompt length, computed ≤ prompt, TTFT > 0, timestamps), and the arrival order.
pub fn check_raw(spec: &ScenarioSpec, turn1_digests: &[String], raw: &ScenarioRaw) -> Vec<String> {
    let arm = &raw.header.arm;
    let mut errs = Vec::new();
    if raw.schema != SCENARIO_RAW_SCHEMA {
        errs.push(format!(
            "scenario arm {arm}: schema {:?}, expected {SCENARIO_RAW_SCHEMA}",
            raw.schema
        ));
    }
    if raw.spec != *spec {
        errs.push(format!(
            "scenario arm {arm}: ran {:?}, the packet's scenario is {spec:?}",
            raw.spec
        ));
    }
    if raw.header.serving.concurrent == 0 {
        errs.push(format!(
            "scenario arm {arm}: serves 0 requests at once (serving.concurrent)"
        ));
    }
    errs.extend(check_status(spec, raw));
    let mut seen = std::collections::BTreeSet::new();
    for t in &raw.turns {
        if !seen.insert((t.agent, t.turn)) {
            errs.push(format!(
                "scenario arm {arm}: agent {} turn {} recorded twice",
                t.agent, t.turn
            ));
        }
        for e in check_turn(spec, turn1_digests, t) {
            errs.push(format!(
                "scenario arm {arm}, agent {} turn {}: {e}",
                t.agent, t.turn
            ));
        }
    }
    if let Some(w) = &raw.warmup {
        for e in check_timing(spec, w) {
            errs.push(format!("scenario arm {arm}, warm-up: {e}"));
        }
    }
    errs.extend(check_order(spec, raw));
    errs
}

/// Missing turns named one by one up to this many; more are counted.
const MISSING_NAMED: usize = 16;

/// `ran` needs every (agent, turn); `skipped` none; `faulted` carries its faults.
fn check_status(spec: &ScenarioSpec, raw: &ScenarioRaw) -> Vec<String> {
    let arm = &raw.header.arm;
    let mut errs = Vec::new();
    match &raw.status {
        ArmStatus::Running { .. } => errs.push(format!(
            "scenario arm {arm}: raw file still says running (the run never finished this arm)"
        )),
        ArmStatus::Skipped { .. } if !raw.turns.is_empty() => errs.push(format!(
            "scenario arm {arm}: skipped but holds {} turns",
            raw.turns.len()
        )),
        ArmStatus::Ran => {
            // The spec's counts come from the packet: compared with what was recorded before
            // any loop over them (agents = 2^64 − 1 once made validation loop for ever). The
            // missing turns are named when a few are missing, counted otherwise.
            let present: std::collections::BTreeSet<(usize, usize)> = raw
                .turns
                .iter()
                .filter(|t| (1..=spec.agents).contains(&t.agent))
                .filter(|t| (1..=spec.turns).contains(&t.turn))
                .map(|t| (t.agent, t.turn))
                .collect();
            match spec.agents.checked_mul(spec.turns) {
                // No turns to run (a spec of 0 agents or turns, reported elsewhere).
                Some(0) => {}
                // Both counts are at most the product here, so the loops are short.
                Some(expected) if expected <= present.len() + MISSING_NAMED => {
                    for agent in 1..=spec.agents {
                        for turn in 1..=spec.turns {
                            if !present.contains(&(agent, turn)) {
                                errs.push(format!(
                                    "scenario arm {arm}: ran, but agent {agent} turn {turn} is \
                                     missing"
                                ));
                            }
                        }
                    }
                }
                _ => errs.push(format!(
                    "scenario arm {arm}: ran, but holds {} of the {} agents × {} turns",
                    present.len(),
                    spec.agents,
                    spec.turns
                )),
            }
        }
        _ => {}
    }
    errs
}

/// One turn against the spec and its own clocks.
fn check_turn(spec: &ScenarioSpec, turn1_digests: &[String], t: &TurnSample) -> Vec<String> {
    let mut errs = Vec::new();
    if t.agent == 0 || t.agent > spec.agents || t.turn == 0 || t.turn > spec.turns {
        errs.push(format!(
            "outside the scenario's {} agents × {} turns",
            spec.agents, spec.turns
        ));
        return errs;
    }
    let want = spec.prompt_tokens(t.turn);
    if t.prompt_tokens != want {
        errs.push(format!(
            "prompt of {} tokens; turn {} of P {} + S {} with replies of {} is {want}",
            t.prompt_tokens, t.turn, spec.preamble_tokens, spec.suffix_tokens, spec.n_out
        ));
    }
    if t.turn == 1 && turn1_digests.get(t.agent - 1) != Some(&t.prompt_sha256) {
        errs.push(format!(
            "turn-1 prompt {} is not the envelope's prompt for agent {}",
            t.prompt_sha256, t.agent
        ));
    }
    if let Replies::Scripted { .. } = spec.replies
        && spec.replies.scripted_prompt(t.agent, t.turn) != Some(&t.prompt_sha256)
    {
        errs.push(format!(
            "prompt {} is not the scripted prompt of agent {} turn {} (scripted replies: every \
             arm is sent the same prompts)",
            t.prompt_sha256, t.agent, t.turn
        ));
    }
    if t.prefill_computed > t.prompt_tokens {
        errs.push(format!(
            "{} prompt tokens computed, more than the prompt's {}",
            t.prefill_computed, t.prompt_tokens
        ));
    }
    if t.prefill_computed == 0 {
        errs.push("no prompt token computed: the first token must come from this request".into());
    }
    if t.prefill_computed.checked_add(t.cached_tokens) != Some(t.prompt_tokens) {
        errs.push(format!(
            "{} computed + {} reused ≠ the prompt's {} tokens",
            t.prefill_computed, t.cached_tokens, t.prompt_tokens
        ));
    }
    errs.extend(check_timing(spec, t));
    errs
}

/// n_out tokens with ordered timestamps; TTFT positive and equal to the first token's time; the
/// answer ends after the last token.
fn check_timing(spec: &ScenarioSpec, t: &TurnSample) -> Vec<String> {
    let mut errs = Vec::new();
    if t.token_ids.len() != spec.n_out || t.token_times_s.len() != spec.n_out {
        errs.push(format!(
            "{} token ids and {} timestamps, n_out is {}",
            t.token_ids.len(),
            t.token_times_s.len(),
            spec.n_out
        ));
    }
    let finite = |x: f64| x.is_finite() && x >= 0.0;
    if !(t.ttft_s.is_finite() && t.ttft_s > 0.0) {
        errs.push(format!("TTFT {} is not positive", t.ttft_s));
    }
    if !finite(t.sent_s) || !finite(t.wall_s) || !t.token_times_s.iter().all(|&x| finite(x)) {
        errs.push("a time is negative or not finite".into());
    }
    if t.token_times_s.windows(2).any(|w| w[1] < w[0]) {
        errs.push("token timestamps go backwards".into());
    }
    if let Some(&first) = t.token_times_s.first()
        && !close(first, t.ttft_s)
    {
        errs.push(format!(
            "TTFT {} s, but the first token arrived at {first} s",
            t.ttft_s
        ));
    }
    if let Some(&last) = t.token_times_s.last()
        && last > t.wall_s
    {
        errs.push(format!(
            "last token at {last} s, after the answer ended at {} s",
            t.wall_s
        ));
    }
    errs
}

/// Each agent's next turn is sent after its previous answer ended; staggered first turns are
/// sent no sooner than their slot.
fn check_order(spec: &ScenarioSpec, raw: &ScenarioRaw) -> Vec<String> {
    let arm = &raw.header.arm;
    let mut errs = Vec::new();
    let find = |agent, turn| {
        raw.turns
            .iter()
            .find(|t| t.agent == agent && t.turn == turn)
    };
    // Over the agents that recorded turns, not 1..=spec.agents: the spec's counts may be
    // anything.
    // Agent 0 is out of range, which check_turn reports.
    let agents: std::collections::BTreeSet<usize> = raw
        .turns
        .iter()
        .map(|t| t.agent)
        .filter(|&a| a > 0)
        .collect();
    for agent in agents {
        let turns: std::collections::BTreeSet<usize> = raw
            .turns
            .iter()
            .filter(|t| t.agent == agent && t.turn >= 2)
            .map(|t| t.turn)
            .collect();
        for turn in turns {
            if let (Some(prev), Some(next)) = (find(agent, turn - 1), find(agent, turn))
                && next.sent_s < prev.sent_s + prev.wall_s
            {
                errs.push(format!(
                    "scenario arm {arm}: agent {agent} turn {turn} sent at {} s, before turn {} \
                     ended at {} s",
                    next.sent_s,
                    turn - 1,
                    prev.sent_s + prev.wall_s
                ));
            }
        }
        if let (Arrival::Staggered { interval_s }, Some(first)) = (spec.arrival, find(agent, 1)) {
            let slot = (agent - 1) as f64 * interval_s;
            if first.sent_s < slot {
                errs.push(format!(
                    "scenario arm {arm}: agent {agent} turn 1 sent at {} s, before its slot at \
                     {slot} s",
                    first.sent_s
                ));
            }
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_before_counts_from_the_last_answer_and_is_zero_with_one_in_flight() {
        let turn = |sent_s: f64, wall_s: f64| TurnSample {
            sent_s,
            wall_s,
            ..crate::packet::testkit::write_scenario_turn()
        };
        // Sent at 0.25 into an idle scenario; sent while the first is in flight; sent 1.5 s
        // after both had answered (at 1.25 and 1.5); sent at the same instant as that one.
        let turns = [
            turn(0.25, 1.0),
            turn(0.5, 1.0),
            turn(3.0, 0.5),
            turn(3.0, 0.5),
        ];
        let idle: Vec<f64> = (0..turns.len()).map(|i| idle_before(&turns, i)).collect();
        assert_eq!(idle, [0.25, 0.0, 1.5, 1.5]);
    }
}
