//! One arm's run: start, one uncounted warm-up (the first envelope prompt), the timed requests
//! (each sample written to `<arm>-raw.json` by the packet writer the moment it arrives, each
//! followed by a plain client's request on the same prompt where the arm has one), the untimed
//! quality pass, stop. An engine that dies is restarted once — the restart is charged
//! to the lost request's `recovery` bucket — and the request is sent again; a second death ends
//! the arm with what it has measured.

use super::quality::{self, ArmRows, OwnRows, ReferenceRows};
use crate::arms::process::{Interrupted, gpu_memory_bytes, now_ns};
use crate::arms::{Arm, ExitInfo, Timed};
use anyhow::Result;
use fak::gguf::Gguf;
use fak_harness::packet::rounding::OwnRoundingPlan;
use fak_harness::packet::{self, ArmRecorder, Fault, MemoryPeak, PlainClient, RequestSample};
use std::path::Path;

pub struct Plan<'a> {
    pub prompts: &'a [Vec<u32>],
    pub n_out: usize,
    /// Reference rows for the quality prompts (the first `reference.len()` prompts).
    pub reference: Option<&'a [ReferenceRows]>,
    /// The arm's own-rounding reference on the envelope's weights (`weights`), or why it has
    /// none; `None` where the quality pass has no CPU reference.
    pub own: Option<OwnReference<'a>>,
}

/// How the quality pass runs an arm's own-rounding reference.
pub struct OwnReference<'a> {
    pub plan: Result<OwnRoundingPlan, String>,
    pub weights: &'a Path,
}

/// How an arm ended, beyond what its raw file says.
#[derive(Default)]
pub struct Outcome {
    /// Why the arm stopped early (None: every request measured).
    pub failed: Option<String>,
    pub interrupted: bool,
    /// The quality rows, or why there are none.
    pub quality: Option<Result<ArmRows, String>>,
}

/// Runs one started arm to the end (or to its second death, or Ctrl-C), recording into `rec`.
pub fn run_arm(arm: &mut dyn Arm, plan: &Plan, rec: &mut ArmRecorder) -> Result<Outcome> {
    let mut state = State {
        restarts: 0,
        peak_rss: None,
        peak_gpu: None,
    };
    let mut outcome = Outcome::default();
    let result = drive(arm, plan, rec, &mut state, &mut outcome);
    let exit = arm.stop();
    state.exited(&exit);
    rec.set_memory(MemoryPeak {
        resident_bytes: state.peak_rss,
        gpu_bytes: state.peak_gpu,
        how: "resident: ru_maxrss of each engine process (wait4); GPU: nvidia-smi per-process accounting where present, else not reported".into(),
    })?;
    if let Err(e) = result {
        if e.downcast_ref::<Interrupted>().is_some() {
            outcome.interrupted = true;
            rec.fault(Fault {
                request_index: None,
                what: "interrupted (Ctrl-C or SIGTERM): the run stopped here".into(),
                stderr_tail: None,
            })?;
        } else {
            eprintln!("threeway: {} failed: {e:#}", arm.name());
            outcome.failed = Some(format!("{e:#}"));
        }
    }
    Ok(outcome)
}

struct State {
    restarts: usize,
    peak_rss: Option<u64>,
    peak_gpu: Option<u64>,
}

impl State {
    fn exited(&mut self, exit: &ExitInfo) {
        self.peak_rss = self.peak_rss.max(exit.peak_rss_bytes);
    }
}

fn drive(
    arm: &mut dyn Arm,
    plan: &Plan,
    rec: &mut ArmRecorder,
    state: &mut State,
    outcome: &mut Outcome,
) -> Result<()> {
    let name = arm.name();
    let mut plain: Option<PlainClient> = None;
    // The warm-up is the first envelope prompt, recorded but not counted.
    let requests = std::iter::once((0, true)).chain((0..plan.prompts.len()).map(|p| (p, false)));
    for (prompt_index, warmup) in requests {
        let prompt = &plan.prompts[prompt_index];
        let index = rec.next_index();
        let first_sent = now_ns();
        let mut crashed = false;
        let timed = loop {
            match arm.generate(prompt, plan.n_out) {
                Ok(t) => break t,
                Err(e) => {
                    fault(rec, Some(index), &e)?;
                    restart(arm, rec, state, plan)?;
                    crashed = true;
                }
            }
        };
        if timed.tokens.len() != plan.n_out {
            let e = anyhow::anyhow!("returned {} tokens, not {}", timed.tokens.len(), plan.n_out);
            fault(rec, Some(index), &e)?;
        }
        // Time lost to the crash and the restart (with its warm-up) belongs to this request.
        let recovery = if crashed {
            timed.sent_ns - first_sent
        } else {
            0
        };
        let sample = sample(index, prompt_index, warmup, prompt, &timed, recovery);
        eprintln!(
            "threeway: {name} {} {}/{}: {} tokens, TTFT {:.2} ms, decode {:.2} ms",
            if warmup { "warm-up" } else { "request" },
            if warmup { 0 } else { prompt_index + 1 },
            plan.prompts.len(),
            timed.tokens.len(),
            sample.buckets.ttft() * 1e3,
            sample.buckets.decode_s * 1e3
        );
        rec.record(sample)?;
        if warmup {
            sample_gpu_memory(arm, state);
        } else {
            plain_client(arm, prompt, plan.n_out, &mut plain);
        }
    }
    sample_gpu_memory(arm, state);
    if let Some(plain) = plain {
        rec.set_plain_client(plain)?;
    }
    if let Some(reference) = plan.reference {
        outcome.quality = Some(match quality_pass(arm, reference, plan.own.as_ref()) {
            Ok(rows) => Ok(rows),
            Err(e) if e.downcast_ref::<Interrupted>().is_some() => return Err(e),
            Err(e) => {
                fault(rec, None, &e)?;
                Err(format!("the quality pass failed: {e:#}"))
            }
        });
    }
    Ok(())
}

/// The plain client's TTFT on the prompt the arm just ran, where the arm has one; after its
/// first failure it is asked no more and the failure is recorded.
fn plain_client(arm: &mut dyn Arm, prompt: &[u32], n_out: usize, plain: &mut Option<PlainClient>) {
    if plain.as_ref().is_some_and(|p| p.error.is_some()) {
        return;
    }
    let Some(result) = arm.plain_client_ttft(prompt, n_out) else {
        return;
    };
    let p = plain.get_or_insert_with(|| PlainClient {
        how: PLAIN_CLIENT_HOW.into(),
        ttft_s: Vec::new(),
        prompt_s: Vec::new(),
        error: None,
    });
    match result {
        Ok((ttft, prompt)) => {
            p.ttft_s.push(ttft);
            p.prompt_s.push(prompt);
        }
        Err(e) => {
            eprintln!("threeway: {}: the plain client failed: {e:#}", arm.name());
            p.error = Some(format!("{e:#}"));
        }
    }
}

const PLAIN_CLIENT_HOW: &str = "harness/arms/plain_client.py (Python, standard library only), \
    run right after each counted request on the same prompt against the same server: the arm's \
    request body, TTFT from just before the request is written to the first streamed line with a \
    token, and the server's timings.prompt_ms of that request";

fn quality_pass(
    arm: &mut dyn Arm,
    reference: &[ReferenceRows],
    own: Option<&OwnReference>,
) -> Result<ArmRows> {
    let mut prompts = Vec::with_capacity(reference.len());
    let mut top_k = false;
    let own_plan = match own.map(|o| (&o.plan, o.weights)) {
        Some((Ok(plan), weights)) => Some((plan, Gguf::open(weights)?)),
        _ => None,
    };
    let mut own_rows = own_plan.as_ref().map(|(plan, _)| OwnRows {
        plan: (*plan).clone(),
        prompts: Vec::new(),
        reference: Vec::new(),
    });
    for rows in reference {
        let logits = arm.logits(&rows.ids)?;
        top_k |= matches!(logits, crate::arms::Logits::TopK(_));
        prompts.push(quality::compare(rows, &logits)?);
        if let (Some((plan, gguf)), Some(own)) = (&own_plan, own_rows.as_mut()) {
            let (own_reference, at_top) = quality::own_reference(plan, gguf, rows)?;
            own.prompts.push(quality::compare(&own_reference, &logits)?);
            own.reference.push(at_top);
        }
    }
    let own = match own.map(|o| &o.plan) {
        None => None,
        Some(Err(why)) => Some(Err(why.clone())),
        Some(Ok(_)) => own_rows.map(Ok),
    };
    Ok(ArmRows {
        top_k,
        prompts,
        own,
    })
}

/// The raw file's form of a request: seconds; token times from the (last) send.
fn sample(
    index: usize,
    prompt_index: usize,
    warmup: bool,
    prompt: &[u32],
    t: &Timed,
    recovery_ns: u64,
) -> RequestSample {
    let s = |ns: u64| ns as f64 * 1e-9;
    let b = &t.buckets;
    RequestSample {
        index,
        prompt_index,
        warmup,
        prompt_sha256: packet::prompt_sha256(prompt),
        buckets: packet::Buckets {
            queue_s: s(b.queue),
            setup_s: s(b.setup),
            prefill_s: s(b.prefill),
            decode_s: s(b.decode),
            verification_s: s(b.verification),
            recovery_s: s(recovery_ns),
            other_s: s(b.other),
        },
        wall_s: s(t.done_ns - t.sent_ns + recovery_ns),
        token_times_s: t.token_ns.iter().map(|&ns| s(ns - t.sent_ns)).collect(),
        token_ids: t.named_ids(),
        engine_timings: (!t.engine.is_null()).then(|| t.engine.clone()),
    }
}

/// Records a fault; an interruption is not a fault of the engine and propagates as is.
fn fault(rec: &mut ArmRecorder, request: Option<usize>, e: &anyhow::Error) -> Result<()> {
    if e.downcast_ref::<Interrupted>().is_some() {
        return Err(Interrupted.into());
    }
    let text = format!("{e:#}");
    eprintln!("threeway: fault: {text}");
    rec.fault(fault_record(request, &text))?;
    Ok(())
}

/// A fault as the raw file keeps it; the engine's last log lines, which `EngineProcess::died`
/// appends to its message, go to `stderr_tail`.
pub fn fault_record(request: Option<usize>, text: &str) -> Fault {
    let (what, tail) = match text.split_once("; last lines of ") {
        Some((what, tail)) => (what.to_string(), Some(tail.to_string())),
        None => (text.to_string(), None),
    };
    Fault {
        request_index: request,
        what,
        stderr_tail: tail,
    }
}

/// The one restart an arm gets: stop what is left, start fresh, warm up again.
fn restart(arm: &mut dyn Arm, rec: &mut ArmRecorder, state: &mut State, plan: &Plan) -> Result<()> {
    let exit = arm.stop();
    state.exited(&exit);
    if state.restarts > 0 {
        anyhow::bail!("{} died again after its one restart", arm.name());
    }
    state.restarts += 1;
    arm.start()?;
    eprintln!(
        "threeway: {} started (pid {})",
        arm.name(),
        arm.pid().unwrap_or(0)
    );
    rec.restarted()?;
    arm.generate(&plan.prompts[0], plan.n_out)?;
    Ok(())
}

fn sample_gpu_memory(arm: &dyn Arm, state: &mut State) {
    if let Some(bytes) = arm.pid().and_then(gpu_memory_bytes) {
        state.peak_gpu = state.peak_gpu.max(Some(bytes));
    }
}
