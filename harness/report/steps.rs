//! `harness steps <trace.jsonl> [--raw multi-agent-<arm>-raw.json]`: a step trace (`fak serve
//! --trace-steps`, `fak::runtime::trace`) read per request — the steps its prompt went through,
//! why each of its portions ended short of the prompt, and how long it waited behind steps that
//! were not its own between its arrival and its first token. With the scenario's raw file each
//! request is named by its agent and turn (the server gives its trace id in `usage.timings`).

use crate::packet::scenario::{ScenarioRaw, TurnSample};
use anyhow::{Context, Result, bail};
use fak::runtime::trace::{StepRecord, StepRole, TraceLine, parse_trace};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// The step trace (one JSON line per step).
    pub trace: PathBuf,
    /// The scenario arm's raw file, to name requests by agent and turn.
    #[arg(long)]
    pub raw: Option<PathBuf>,
}

pub fn run(args: &Args) -> Result<()> {
    let text = std::fs::read_to_string(&args.trace)
        .with_context(|| format!("reading {}", args.trace.display()))?;
    let lines = parse_trace(&text).map_err(anyhow::Error::msg)?;
    let names = match &args.raw {
        Some(raw) => request_names(raw)?,
        None => BTreeMap::new(),
    };
    print!("{}", render(&summarize(&lines)?, &names));
    Ok(())
}

/// Why a portion of a prompt ended before the prompt did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cuts {
    /// At a recurrent-state snapshot due there (the next snapshot due ends a portion that took
    /// one in passing; before each prompt of a step had a spare slot of its own, also where
    /// another portion of the step had taken the one spare).
    pub snapshot: usize,
    /// Elsewhere: the tick's prompt budget or the step's rows ran out.
    pub room: usize,
}

/// One request as the trace saw it. Times in ns since the trace began.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestSteps {
    pub request: u64,
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    pub submit_ns: u64,
    pub admit_ns: Option<u64>,
    pub started_ns: Option<u64>,
    /// The prefill steps its prompt went through (trace step numbers) and the tokens each ran.
    pub own_steps: Vec<(u64, usize)>,
    pub cuts: Cuts,
    /// Steps without it between its arrival and its first token: how many, and their time
    /// inside that span.
    pub behind_prefill: (usize, u64),
    pub behind_decode: (usize, u64),
    /// Its own steps' time.
    pub own_ns: u64,
}

impl RequestSteps {
    /// Prompt tokens its steps ran.
    pub fn computed(&self) -> usize {
        self.own_steps.iter().map(|&(_, n)| n).sum()
    }

    /// Arrival → first token, when it started.
    pub fn ttft_ns(&self) -> Option<u64> {
        self.started_ns.map(|s| s.saturating_sub(self.submit_ns))
    }
}

/// What the whole trace holds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepsSummary {
    pub requests: Vec<RequestSteps>,
    pub prefill_steps: usize,
    pub decode_steps: usize,
    /// Prefill steps that ran one request's prompt while other admitted requests' prompts
    /// were not done (they had to wait for a later step).
    pub lone_prefill_steps: usize,
}

/// Reads a trace's lines into one record per request. Fails on a trace that contradicts
/// itself: a step number out of order, a request admitted or started twice or never submitted.
pub fn summarize(lines: &[TraceLine]) -> Result<StepsSummary> {
    let mut requests: BTreeMap<u64, RequestSteps> = BTreeMap::new();
    let mut steps: Vec<(u64, &StepRecord)> = Vec::new();
    for line in lines {
        match line {
            TraceLine::Submit {
                request,
                t_ns,
                prompt_tokens,
            } => {
                let r = RequestSteps {
                    request: *request,
                    prompt_tokens: *prompt_tokens,
                    submit_ns: *t_ns,
                    ..RequestSteps::default()
                };
                if requests.insert(*request, r).is_some() {
                    bail!("request {request} is submitted twice");
                }
            }
            TraceLine::Admit {
                request,
                t_ns,
                cached_tokens,
                ..
            } => {
                let r = known(&mut requests, *request)?;
                if r.admit_ns.replace(*t_ns).is_some() {
                    bail!("request {request} is admitted twice");
                }
                r.cached_tokens = *cached_tokens;
            }
            TraceLine::Started { request, t_ns } => {
                if known(&mut requests, *request)?
                    .started_ns
                    .replace(*t_ns)
                    .is_some()
                {
                    bail!("request {request} is started twice");
                }
            }
            TraceLine::Step { step, record, .. } => {
                if steps.last().is_some_and(|&(last, ..)| *step <= last) {
                    bail!(
                        "step {step} follows step {}",
                        steps.last().map_or(0, |s| s.0)
                    );
                }
                steps.push((*step, record));
            }
        }
    }
    let mut summary = StepsSummary::default();
    for &(_, record) in &steps {
        match record.kind {
            StepRole::Prefill => {
                summary.prefill_steps += 1;
                if let [one] = record.portions.as_slice() {
                    let prefilling = |r: &&RequestSteps| {
                        Some(r.request) != one.request
                            && r.admit_ns.is_some_and(|a| a <= record.start_ns)
                            && r.started_ns.is_none_or(|s| s > record.end_ns)
                    };
                    if requests.values().any(|r| prefilling(&r)) {
                        summary.lone_prefill_steps += 1;
                    }
                }
            }
            StepRole::Decode => summary.decode_steps += 1,
        }
    }
    for r in requests.values_mut() {
        let end = r.started_ns.unwrap_or(u64::MAX);
        for &(step, record) in &steps {
            let mine = record
                .portions
                .iter()
                .find(|p| p.request == Some(r.request));
            match (mine, record.kind) {
                (Some(p), StepRole::Prefill) => {
                    r.own_steps.push((step, p.len));
                    r.own_ns += record.end_ns - record.start_ns;
                    let end = p.pos + p.len;
                    if end < r.prompt_tokens {
                        match p.snapshots.contains(&end) {
                            true => r.cuts.snapshot += 1,
                            false => r.cuts.room += 1,
                        }
                    }
                }
                (Some(_), StepRole::Decode) => {}
                (None, kind) => {
                    let from = record.start_ns.max(r.submit_ns);
                    let to = record.end_ns.min(end);
                    if to > from {
                        let behind = match kind {
                            StepRole::Prefill => &mut r.behind_prefill,
                            StepRole::Decode => &mut r.behind_decode,
                        };
                        behind.0 += 1;
                        behind.1 += to - from;
                    }
                }
            }
        }
    }
    summary.requests = requests.into_values().collect();
    Ok(summary)
}

fn known(requests: &mut BTreeMap<u64, RequestSteps>, id: u64) -> Result<&mut RequestSteps> {
    requests
        .get_mut(&id)
        .with_context(|| format!("request {id} appears before it is submitted"))
}

/// Trace request id → "agent A turn T" (the warm-up: "warm-up"), from the ids `fak serve` gave
/// in each answer's `usage.timings.request`.
pub fn request_names(raw: &Path) -> Result<BTreeMap<u64, String>> {
    let text =
        std::fs::read_to_string(raw).with_context(|| format!("reading {}", raw.display()))?;
    let raw: ScenarioRaw =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", raw.display()))?;
    let id = |t: &TurnSample| {
        let report = t.engine_report.as_ref()?;
        report["engine"]["usage"]["timings"]["request"].as_u64()
    };
    let mut names = BTreeMap::new();
    if let Some(warm) = &raw.warmup
        && let Some(id) = id(warm)
    {
        names.insert(id, "warm-up".to_owned());
    }
    for t in &raw.turns {
        if let Some(id) = id(t) {
            names.insert(id, format!("agent {} turn {}", t.agent, t.turn));
        }
    }
    Ok(names)
}

/// The summary as a markdown table, one row per request, then the totals.
pub fn render(s: &StepsSummary, names: &BTreeMap<u64, String>) -> String {
    let ms = |ns: u64| ns as f64 * 1e-6;
    let mut out = String::new();
    out.push_str(
        "| request | who | prompt | cached | computed | queued ms | TTFT ms | its prefill steps \
         (step:tokens) | cut at snapshot / room | behind prefill steps (ms) | behind decode \
         steps (ms) | own steps ms |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in &s.requests {
        let queued = r.admit_ns.map(|a| ms(a.saturating_sub(r.submit_ns)));
        let steps: Vec<String> = r
            .own_steps
            .iter()
            .map(|(s, n)| format!("{s}:{n}"))
            .collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {} ({:.1}) | {} ({:.1}) | {:.1} |",
            r.request,
            names.get(&r.request).map_or("", String::as_str),
            r.prompt_tokens,
            r.cached_tokens,
            r.computed(),
            queued.map_or("—".into(), |q| format!("{q:.1}")),
            r.ttft_ns().map_or("—".into(), |t| format!("{:.1}", ms(t))),
            steps.join(" "),
            r.cuts.snapshot,
            r.cuts.room,
            r.behind_prefill.0,
            ms(r.behind_prefill.1),
            r.behind_decode.0,
            ms(r.behind_decode.1),
            ms(r.own_ns),
        );
    }
    let several = s.requests.iter().filter(|r| r.own_steps.len() > 1).count();
    let total = |f: fn(&Cuts) -> usize| s.requests.iter().map(|r| f(&r.cuts)).sum::<usize>();
    let _ = writeln!(
        out,
        "\n{} requests; {} prefill steps ({} of one prompt while other admitted prompts were not \
         done), {} decode steps; {several} requests' prompts took more than one step; portions cut at a \
         snapshot: {}, by the budget or the step's rows: {}.",
        s.requests.len(),
        s.prefill_steps,
        s.lone_prefill_steps,
        s.decode_steps,
        total(|c| c.snapshot),
        total(|c| c.room),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use fak::runtime::trace::{PortionRecord, TickCounts};

    fn portion(request: u64, pos: usize, len: usize, snapshots: &[usize]) -> PortionRecord {
        PortionRecord {
            seq: request as u32,
            request: Some(request),
            pos,
            len,
            snapshots: snapshots.to_vec(),
        }
    }

    fn step(
        step: u64,
        kind: StepRole,
        (start, end): (u64, u64),
        portions: Vec<PortionRecord>,
    ) -> TraceLine {
        TraceLine::Step {
            step,
            tick: step,
            counts: TickCounts::default(),
            record: StepRecord {
                kind,
                start_ns: start,
                end_ns: end,
                waited: true,
                portions,
            },
        }
    }

    /// Two requests of 100 prompt tokens, 60 cached: the first runs 40 alone; the second is cut
    /// at its snapshot (80) in a step it shares, waits behind a decode step, then runs its last
    /// 20 alone while nothing else prefills.
    #[test]
    fn a_request_cut_at_a_snapshot_takes_two_steps_and_waits_behind_the_decode_between() {
        use StepRole::{Decode, Prefill};
        let submit = |request, t_ns| TraceLine::Submit {
            request,
            t_ns,
            prompt_tokens: 100,
        };
        let admit = |request, t_ns| TraceLine::Admit {
            request,
            t_ns,
            seq: request as u32,
            cached_tokens: 60,
        };
        let lines = vec![
            submit(0, 0),
            submit(1, 5),
            admit(0, 10),
            admit(1, 10),
            step(
                1,
                Prefill,
                (20, 100),
                vec![portion(0, 60, 40, &[64]), portion(1, 60, 20, &[80])],
            ),
            TraceLine::Started {
                request: 0,
                t_ns: 101,
            },
            step(2, Decode, (110, 130), vec![portion(0, 100, 1, &[])]),
            step(3, Prefill, (140, 170), vec![portion(1, 80, 20, &[])]),
            TraceLine::Started {
                request: 1,
                t_ns: 171,
            },
        ];
        let s = summarize(&lines).unwrap();
        assert_eq!(
            (s.prefill_steps, s.decode_steps, s.lone_prefill_steps),
            (2, 1, 0)
        );
        let (a, b) = (&s.requests[0], &s.requests[1]);
        assert_eq!(
            (a.computed(), a.own_steps.len(), a.cuts),
            (40, 1, Cuts::default())
        );
        assert_eq!(b.own_steps, [(1, 20), (3, 20)]);
        assert_eq!(
            b.cuts,
            Cuts {
                snapshot: 1,
                room: 0
            }
        );
        assert_eq!(
            (b.behind_prefill, b.behind_decode, b.own_ns),
            ((0, 0), (1, 20), 110)
        );
        assert_eq!(b.ttft_ns(), Some(166));
        let md = render(&s, &BTreeMap::from([(1, "agent 2 turn 1".to_owned())]));
        assert!(
            md.contains("| 1 | agent 2 turn 1 | 100 | 60 | 40 |"),
            "{md}"
        );
        // A trace that contradicts itself is refused: a request started twice.
        let mut twice = lines.clone();
        twice.push(TraceLine::Started {
            request: 1,
            t_ns: 200,
        });
        assert!(summarize(&twice).is_err());
    }
}
