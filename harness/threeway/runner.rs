//! One arm's run: start, one uncounted warm-up, the timed requests (each sample written to the
//! raw file the moment it arrives), the untimed quality pass, stop. An engine that dies is
//! restarted once — the restart is charged to the lost request's `recovery` bucket — and the
//! request is sent again; a second death ends the arm with what it has measured.

use super::quality::{self, ArmQuality, ReferenceRows};
use crate::arms::process::{Interrupted, gpu_memory_bytes, now_ns};
use crate::arms::{Arm, Buckets, ExitInfo, Timed};
use anyhow::Result;
use serde::Serialize;
use std::path::PathBuf;

/// What happened to an arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Every timed request measured.
    Ran,
    /// Not installed here, with the reason; nothing measured or estimated.
    Skipped,
    /// The engine failed (at start, or twice during the run): what was measured is kept.
    Failed,
    /// Ctrl-C or SIGTERM stopped the run: what was measured is kept.
    Interrupted,
}

/// One timed request as the raw file records it.
#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    /// Index of the prompt in the envelope.
    pub prompt: usize,
    #[serde(flatten)]
    pub timed: Timed,
    /// The request's wall clock: done − sent (ns); the buckets sum to it.
    pub wall_ns: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Fault {
    /// `start`, `warmup`, `request 3`, `quality`.
    pub during: String,
    pub error: String,
    pub at_ns: u64,
}

/// Everything one arm produced; written as `<arm>-raw.json` after every change.
#[derive(Clone, Debug, Serialize)]
pub struct ArmRecord {
    pub arm: String,
    pub runtime: String,
    pub status: Status,
    pub reason: Option<String>,
    pub flags: serde_json::Value,
    pub facts: serde_json::Value,
    pub bucket_methods: Buckets<String>,
    pub n_ctx: usize,
    pub n_out: usize,
    pub warmup: Option<Sample>,
    pub samples: Vec<Sample>,
    pub faults: Vec<Fault>,
    pub restarts: usize,
    /// Peak resident memory of each engine process this arm started (getrusage via wait4).
    pub exits: Vec<ExitInfo>,
    pub peak_rss_bytes: Option<u64>,
    /// Largest GPU memory the OS reported for the engine process (None: not reported).
    pub peak_gpu_bytes: Option<u64>,
    pub gpu_memory_source: String,
    #[serde(skip)]
    pub quality: Option<ArmQuality>,
}

impl ArmRecord {
    pub fn new(arm: &dyn Arm, n_ctx: usize, n_out: usize) -> ArmRecord {
        let m = arm.bucket_methods();
        let s = |v: &str| v.to_string();
        ArmRecord {
            arm: arm.name().into(),
            runtime: arm.runtime().into(),
            status: Status::Ran,
            reason: None,
            flags: arm.flags(),
            facts: serde_json::Value::Null,
            bucket_methods: Buckets {
                queue: s(m.queue),
                setup: s(m.setup),
                prefill: s(m.prefill),
                decode: s(m.decode),
                verification: s(m.verification),
                recovery: s(m.recovery),
                other: s(m.other),
            },
            n_ctx,
            n_out,
            warmup: None,
            samples: Vec::new(),
            faults: Vec::new(),
            restarts: 0,
            exits: Vec::new(),
            peak_rss_bytes: None,
            peak_gpu_bytes: None,
            gpu_memory_source: "nvidia-smi per-process accounting; not reported elsewhere".into(),
            quality: None,
        }
    }

    pub fn skipped(name: &str, runtime: &str, reason: String, n_ctx: usize, n_out: usize) -> Self {
        ArmRecord {
            arm: name.into(),
            runtime: runtime.into(),
            status: Status::Skipped,
            reason: Some(reason),
            flags: serde_json::Value::Null,
            facts: serde_json::Value::Null,
            bucket_methods: Buckets::default(),
            n_ctx,
            n_out,
            warmup: None,
            samples: Vec::new(),
            faults: Vec::new(),
            restarts: 0,
            exits: Vec::new(),
            peak_rss_bytes: None,
            peak_gpu_bytes: None,
            gpu_memory_source: String::new(),
            quality: None,
        }
    }
}

/// Where the raw file goes and how it is written (whole, through a temporary file, so a reader
/// never sees half a file and a crash leaves the last complete version).
pub struct RawFile {
    pub path: PathBuf,
}

impl RawFile {
    pub fn write(&self, record: &ArmRecord) -> Result<()> {
        let tmp = self.path.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(record)?)?;
        std::fs::rename(&tmp, &self.path)?;
        Ok(())
    }
}

pub struct Plan<'a> {
    pub warmup: &'a [u32],
    pub prompts: &'a [Vec<u32>],
    pub n_out: usize,
    /// Reference rows for the quality prompts (the first `reference.len()` prompts).
    pub reference: Option<&'a [ReferenceRows]>,
}

/// Runs one arm to the end (or to its second death, or Ctrl-C).
pub fn run_arm(
    arm: &mut dyn Arm,
    plan: &Plan,
    record: &mut ArmRecord,
    raw: &RawFile,
) -> Result<()> {
    let name = arm.name();
    let result = drive(arm, plan, record, raw);
    let exit = arm.stop();
    record.peak_rss_bytes = record.peak_rss_bytes.max(exit.peak_rss_bytes);
    if exit.status.is_empty() {
        // Never started: nothing to record.
    } else {
        record.exits.push(exit);
    }
    if let Err(e) = result {
        if e.downcast_ref::<Interrupted>().is_some() {
            record.status = Status::Interrupted;
            record.reason = Some("interrupted (Ctrl-C or SIGTERM)".into());
        } else {
            record.status = Status::Failed;
            record.reason = Some(format!("{e:#}"));
            eprintln!("threeway: {name} failed: {e:#}");
        }
    }
    raw.write(record)?;
    Ok(())
}

fn drive(arm: &mut dyn Arm, plan: &Plan, record: &mut ArmRecord, raw: &RawFile) -> Result<()> {
    let name = arm.name();
    start(arm, record, "start")?;
    let warm = arm.generate(plan.warmup, plan.n_out);
    match warm {
        Ok(t) => record.warmup = Some(sample(usize::MAX, t)),
        Err(e) => {
            fault(record, "warmup", &e)?;
            restart(arm, record, plan)?;
        }
    }
    sample_gpu_memory(arm, record);
    raw.write(record)?;
    for (i, prompt) in plan.prompts.iter().enumerate() {
        let first_sent = now_ns();
        let mut crashed = false;
        let mut timed = loop {
            match arm.generate(prompt, plan.n_out) {
                Ok(t) => break t,
                Err(e) => {
                    fault(record, &format!("request {i}"), &e)?;
                    raw.write(record)?;
                    restart(arm, record, plan)?;
                    crashed = true;
                }
            }
        };
        if crashed {
            // Time lost to the crash and the restart (with its warm-up) belongs to this request.
            timed.buckets.recovery = timed.sent_ns - first_sent;
            timed.sent_ns = first_sent;
        }
        if timed.tokens.len() != plan.n_out {
            let e = anyhow::anyhow!("returned {} tokens, not {}", timed.tokens.len(), plan.n_out);
            fault(record, &format!("request {i}"), &e)?;
        }
        let s = sample(i, timed);
        if s.timed.buckets.total() != s.wall_ns {
            let e = anyhow::anyhow!(
                "buckets sum to {} ns, the wall clock says {} ns",
                s.timed.buckets.total(),
                s.wall_ns
            );
            fault(record, &format!("request {i}"), &e)?;
        }
        eprintln!(
            "threeway: {name} request {}/{}: {} tokens, TTFT {:.2} ms, decode {:.2} ms",
            i + 1,
            plan.prompts.len(),
            s.timed.tokens.len(),
            (s.timed.buckets.queue + s.timed.buckets.setup + s.timed.buckets.prefill) as f64 / 1e6,
            s.timed.buckets.decode as f64 / 1e6
        );
        record.samples.push(s);
        raw.write(record)?;
    }
    sample_gpu_memory(arm, record);
    if let Some(reference) = plan.reference {
        match quality_pass(arm, reference) {
            Ok(q) => record.quality = Some(q),
            Err(e) => {
                fault(record, "quality", &e)?;
            }
        }
    }
    Ok(())
}

fn quality_pass(arm: &mut dyn Arm, reference: &[ReferenceRows]) -> Result<ArmQuality> {
    let mut prompts = Vec::with_capacity(reference.len());
    let mut over = "full-logits";
    for rows in reference {
        let logits = arm.logits(&rows.ids)?;
        if matches!(logits, crate::arms::Logits::TopK(_)) {
            over = "top-k";
        }
        prompts.push(quality::compare(rows, &logits)?);
    }
    Ok(quality::summarize(over, prompts))
}

fn sample(prompt: usize, timed: Timed) -> Sample {
    Sample {
        prompt,
        wall_ns: timed.done_ns - timed.sent_ns,
        timed,
    }
}

fn start(arm: &mut dyn Arm, record: &mut ArmRecord, during: &str) -> Result<()> {
    match arm.start() {
        Ok(facts) => {
            eprintln!(
                "threeway: {} started (pid {})",
                arm.name(),
                arm.pid().unwrap_or(0)
            );
            record.facts = facts;
            Ok(())
        }
        Err(e) => {
            fault(record, during, &e)?;
            Err(e)
        }
    }
}

/// Records a fault; an interruption is not a fault of the engine and propagates as is.
fn fault(record: &mut ArmRecord, during: &str, e: &anyhow::Error) -> Result<()> {
    if e.downcast_ref::<Interrupted>().is_some() {
        return Err(Interrupted.into());
    }
    eprintln!("threeway: {} fault during {during}: {e:#}", record.arm);
    record.faults.push(Fault {
        during: during.into(),
        error: format!("{e:#}"),
        at_ns: now_ns(),
    });
    Ok(())
}

/// The one restart an arm gets: stop what is left, start fresh, warm up again.
fn restart(arm: &mut dyn Arm, record: &mut ArmRecord, plan: &Plan) -> Result<()> {
    let exit = arm.stop();
    record.peak_rss_bytes = record.peak_rss_bytes.max(exit.peak_rss_bytes);
    record.exits.push(exit);
    if record.restarts > 0 {
        anyhow::bail!("{} died again after its one restart", arm.name());
    }
    record.restarts += 1;
    start(arm, record, "restart")?;
    if let Err(e) = arm.generate(plan.warmup, plan.n_out) {
        fault(record, "restart warm-up", &e)?;
        return Err(e);
    }
    Ok(())
}

fn sample_gpu_memory(arm: &dyn Arm, record: &mut ArmRecord) {
    if let Some(bytes) = arm.pid().and_then(gpu_memory_bytes) {
        record.peak_gpu_bytes = record.peak_gpu_bytes.max(Some(bytes));
    }
}
