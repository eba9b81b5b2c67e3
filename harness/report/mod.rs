//! `harness report` and `harness compare`: what a packet says, for people.
//!
//! Every number comes from the packet (and, for the ITL plot, the raw files beside it); the
//! report states whether the packet validated, so a reader never takes an invalid packet's
//! figures at face value.

pub mod compare;
mod scenario;
pub mod steps;
pub mod svg;

use crate::inspect;
use crate::packet::validate::{Validation, validate};
use crate::packet::{
    Against, ArmEntry, ArmRaw, ArmStatus, Buckets, PACKET_FILE, Packet, QualityRule, QualityStatus,
    QualitySummary, RateDist, ReferenceEngine, Runtime, SelftestStatus, TimeDist,
    metrics::itl_gaps,
};
use anyhow::{Context, Result};
use std::collections::BTreeSet;
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// `harness report <packet.json> [--out <dir>]`.
#[derive(clap::Args)]
pub struct Args {
    pub packet: PathBuf,
    /// Where report.md and the SVG plots go (default: beside the packet).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Write the report even if the packet does not validate (it then says NOT VALID at the
    /// top, and its figures are the packet's claims).
    #[arg(long)]
    pub unvalidated: bool,
}

/// The report's files: `report.md` and its plots.
pub struct Report {
    pub markdown: String,
    /// `(file name, SVG text)`.
    pub plots: Vec<(String, String)>,
}

pub fn run(args: &Args) -> Result<()> {
    let validation = validate(&args.packet);
    require_valid(&args.packet, &validation, args.unvalidated)?;
    let (packet, raws) = load(&args.packet)?;
    let report = build(&args.packet, &packet, &raws, &validation);
    let out = match &args.out {
        Some(dir) => dir.clone(),
        None => folder_of(&args.packet),
    };
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    for (name, text) in
        std::iter::once(("report.md".to_owned(), report.markdown)).chain(report.plots)
    {
        let path = out.join(&name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        println!("{}", path.display());
    }
    Ok(())
}

/// Refuses a packet `harness validate` rejects unless `unvalidated` asks to go on: a report of
/// figures nobody could recompute must not look like a result.
pub fn require_valid(path: &Path, validation: &Validation, unvalidated: bool) -> Result<()> {
    if validation.valid || unvalidated {
        return Ok(());
    }
    let n = validation.errors.len();
    anyhow::bail!(
        "{} does not validate ({n} error{}, the first: {}); `harness validate {0}` lists them, \
         --unvalidated goes on anyway",
        path.display(),
        if n == 1 { "" } else { "s" },
        validation
            .errors
            .first()
            .map_or("none given", String::as_str)
    )
}

/// The largest packet.json (or raw file without a listed size) read: a real one is a few MB.
const MAX_PACKET_BYTES: u64 = 256 << 20;

/// A packet's file, a regular file of at most `cap` bytes.
fn read_file(path: &Path, role: &'static str, cap: u64) -> Result<Vec<u8>> {
    Ok(fak::files::read_capped(
        path,
        role,
        cap,
        "bytes the packet allows",
    )?)
}

fn folder_of(packet: &Path) -> PathBuf {
    packet
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// The packet and the raw files of its arms (an arm whose raw file cannot be read gets none:
/// its ITL plot row says so).
pub fn load(path: &Path) -> Result<(Packet, Vec<Option<ArmRaw>>)> {
    let bytes = read_file(path, "packet", MAX_PACKET_BYTES)?;
    let packet: Packet = serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not a comparison packet", path.display()))?;
    let dir = folder_of(path);
    let raws = packet
        .arms
        .iter()
        .map(|a| {
            read_file(&dir.join(&a.raw_file.name), "raw file", a.raw_file.bytes)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
        })
        .collect();
    Ok((packet, raws))
}

pub fn build(
    path: &Path,
    packet: &Packet,
    raws: &[Option<ArmRaw>],
    validation: &Validation,
) -> Report {
    let mut md = String::new();
    let h = &packet.hardware;
    let _ = writeln!(
        md,
        "# fak vs reference engines: {} ({}), {}\n",
        h.host, h.gpu.adapter, packet.created_utc
    );
    let _ = writeln!(
        md,
        "Packet `{}` (sha256 `{}`): **{}** by `harness validate`.\n",
        path.file_name()
            .map_or(PACKET_FILE.into(), |n| n.to_string_lossy()),
        validation.packet_sha256.as_deref().unwrap_or("unreadable"),
        if validation.valid {
            "valid".to_owned()
        } else {
            let n = validation.errors.len();
            format!(
                "NOT VALID ({n} error{}; the figures below are the packet's claims)",
                if n == 1 { "" } else { "s" }
            )
        }
    );
    if packet.arms.is_empty() {
        // A scenario-only run: its section, the machine, how to reproduce it.
        md.push_str("## Key takeaways\n\n");
        honesty(&mut md, packet, validation);
        if let Some(s) = &packet.scenario {
            scenario::section(&mut md, s);
        }
        machine(&mut md, packet);
        reproduction(&mut md, path, packet);
        return Report {
            markdown: md,
            plots: Vec::new(),
        };
    }
    takeaways(&mut md, packet, validation);
    machine(&mut md, packet);
    envelope(&mut md, packet);
    prefill_table(&mut md, packet);
    decode_table(&mut md, packet);
    decomposition(&mut md, packet);
    quality(&mut md, packet);
    roofline(&mut md, packet);
    if let Some(s) = &packet.scenario {
        scenario::section(&mut md, s);
    }
    reproduction(&mut md, path, packet);
    md.push_str("## Plots\n\n![TTFT per request](ttft.svg)\n\n![Inter-token latency](itl.svg)\n\n![Mean buckets per request](decomposition.svg)\n");
    Report {
        markdown: md,
        plots: plots(packet, raws),
    }
}

fn ms(s: f64) -> String {
    format!("{:.2}", s * 1e3)
}

fn rate(r: f64) -> String {
    format!("{r:.1}")
}

fn time_cell(d: &TimeDist) -> String {
    format!("{} [{}–{}]", ms(d.p50), ms(d.p50_ci[0]), ms(d.p50_ci[1]))
}

fn rate_cell(d: &RateDist) -> String {
    format!(
        "{} [{}–{}]",
        rate(d.p50),
        rate(d.p50_ci[0]),
        rate(d.p50_ci[1])
    )
}

fn ratio_cell(r: Option<f64>) -> String {
    r.map_or("—".into(), |r| format!("{r:.2}×"))
}

fn status_text(a: &ArmEntry) -> String {
    status_text_of(&a.status)
}

fn status_text_of(status: &ArmStatus) -> String {
    match status {
        ArmStatus::Ran => "ran".into(),
        ArmStatus::Skipped { reason } => format!("skipped: {reason}"),
        ArmStatus::Faulted { faults, restarts } => format!(
            "faulted {} time(s), restarted {restarts}: {}",
            faults.len(),
            faults
                .iter()
                .map(|f| f.what.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        ),
        ArmStatus::Running { .. } => "never finished".into(),
    }
}

/// Who measured what, on what: the lines a reader needs before any figure. Which arm is fak's
/// own and which a reference, where each ran (a software GPU is not a GPU), whose weights (random
/// weights make quality figures test plumbing), what the arms ran differently, fast paths forced
/// off, arms skipped or faulted, the selftest, the plain-client check, and the physical bounds
/// `harness validate` could not apply.
fn honesty(md: &mut String, p: &Packet, validation: &Validation) {
    md.push_str("### Who measured what, on what\n\n");
    let h = &p.hardware;
    let gpu = match h.gpu.adapter.as_str() {
        "unknown" => "no GPU adapter recorded (neither fak nor the selftest ran)".to_string(),
        adapter => format!("GPU {adapter} ({}, {})", h.gpu.device_type, h.gpu.backend),
    };
    let _ = writeln!(
        md,
        "- Measured by `harness` {}{} on {} ({}): {gpu}, CPU {}.",
        p.harness.version,
        p.harness
            .commit
            .as_deref()
            .map_or(String::new(), |c| format!(" (commit {c})")),
        h.host,
        h.os,
        h.cpu_model
    );
    let _ = writeln!(
        md,
        "- Weights: {}.",
        p.envelope.model_origin.as_deref().unwrap_or(
            "origin not stated (threeway --model-origin says it): read quality figures knowing \
             random weights give near-flat logits"
        )
    );
    for a in &p.arms {
        let role = match a.runtime {
            Runtime::Native => "fak's own engine (native)",
            Runtime::Reference => "a reference engine",
        };
        let on = a
            .device
            .as_ref()
            .map_or("its device not recorded".into(), |d| {
                format!("ran on {}: {}", d.name, d.kind.label())
            });
        let weights = if a.weights.same_as_envelope {
            "the envelope's file".to_string()
        } else {
            format!("{} (other weights: never called parity)", a.weights.format)
        };
        let status = match &a.status {
            ArmStatus::Ran => String::new(),
            other => format!(" — **{}**", status_text_of(other)),
        };
        let _ = writeln!(
            md,
            "- **{}**: {role}, {} {}; {on}; weights: {weights}{}{status}.",
            a.arm,
            a.engine.name,
            a.engine.version,
            precision(a)
        );
    }
    for a in p.scenario.iter().flat_map(|s| &s.arms) {
        let role = match Runtime::for_arm(&a.engine.name) {
            Runtime::Native => "fak's own engine (native)",
            Runtime::Reference => "a reference engine",
        };
        let status = match &a.status {
            ArmStatus::Ran => String::new(),
            other => format!(" — **{}**", status_text_of(other)),
        };
        let _ = writeln!(
            md,
            "- **{}** (scenario): {role}, {} {}, prefix cache {}{status}.",
            a.arm,
            a.engine.name,
            a.engine.version,
            if a.prefix_cache { "on" } else { "off" }
        );
    }
    let devices: BTreeSet<String> = p
        .arms
        .iter()
        .filter(|a| matches!(a.status, ArmStatus::Ran))
        .filter_map(|a| a.device.as_ref())
        .map(|d| format!("{} ({})", d.name, d.kind.label()))
        .collect();
    if devices.len() > 1 {
        let _ = writeln!(
            md,
            "- The arms did not share one device ({}): their speed ratios compare devices as much as engines.",
            devices.into_iter().collect::<Vec<_>>().join("; ")
        );
    }
    for a in p.arms.iter().filter(|a| !a.engine.tuning.is_empty()) {
        let flags: Vec<&str> = a.engine.tuning.iter().map(|t| t.flag.as_str()).collect();
        let _ = writeln!(
            md,
            "- {} ran with `{}` for this workload (why: under Reproduction).",
            a.arm,
            flags.join(" ")
        );
    }
    let forced: Vec<String> = p
        .arms
        .iter()
        .flat_map(|a| {
            a.engine
                .flags
                .iter()
                .filter(|f| f.starts_with("FAK_FORCE=") && *f != "FAK_FORCE=null")
                .map(move |f| format!("{}: {f}", a.arm))
        })
        .collect();
    let _ = writeln!(
        md,
        "- Fast paths forced off: {}.",
        if forced.is_empty() {
            "none".to_string()
        } else {
            forced.join("; ")
        }
    );
    let s = &p.selftest;
    let _ = writeln!(
        md,
        "- Selftest on {}: {} ({} checks, {} failed{}).",
        s.adapter,
        match s.status {
            SelftestStatus::Passed => "passed",
            SelftestStatus::Failed => "FAILED",
            SelftestStatus::Skipped => "skipped",
        },
        s.checks_run,
        s.checks_failed,
        s.reason
            .as_deref()
            .map_or(String::new(), |r| format!("; {r}"))
    );
    for a in &p.arms {
        let Some(c) = &a.plain_client else { continue };
        let line = match (c.arm_ttft_p50_s, c.plain_ttft_p50_s, c.within) {
            (Some(arm), Some(plain), Some(within)) => {
                format!(
                    "{}'s TTFT p50 {} ms vs {} ms from a plain client on the same server ({} requests): {}",
                    a.arm,
                    ms(arm),
                    ms(plain),
                    c.requests,
                    if within {
                        "within 5 % or 3 ms"
                    } else {
                        "**NOT within 5 % or 3 ms**"
                    }
                ) + &match (c.arm_beyond_prompt_p50_s, c.plain_beyond_prompt_p50_s) {
                    (Some(arm), Some(plain)) => format!(
                        "; beyond the server's own prompt time {} ms vs {} ms",
                        ms(arm),
                        ms(plain)
                    ),
                    _ => String::new(),
                }
            }
            _ => format!(
                "{}: the plain-client check did not run ({})",
                a.arm,
                c.error.as_deref().unwrap_or("no figures")
            ),
        };
        let _ = writeln!(md, "- {line}.");
    }
    if !validation.notes.is_empty() {
        let _ = writeln!(
            md,
            "- Physical bounds `harness validate` could not apply: {}.",
            validation.notes.join("; ")
        );
    }
    md.push('\n');
}

/// MLX's stated precision: its float dtype and whether float32 matmuls ran full or TF32-class.
fn precision(a: &ArmEntry) -> String {
    let Some(p) = a.engine.build.as_ref().map(|b| &b["precision"]) else {
        return String::new();
    };
    match (p["float_parameters"].as_array(), p["f32_matmul"].as_str()) {
        (Some(floats), Some(matmul)) => format!(
            "; computed in {} with {matmul} matmuls (MLX_ENABLE_TF32: {})",
            floats
                .iter()
                .filter_map(|f| f.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            p["MLX_ENABLE_TF32"].as_str().unwrap_or("?")
        ),
        _ => String::new(),
    }
}

fn takeaways(md: &mut String, p: &Packet, validation: &Validation) {
    md.push_str("## Key takeaways\n\n");
    honesty(md, p, validation);
    md.push_str("### Figures\n\n");
    let reference = &p.ratios.reference_arm;
    let ref_summary = p
        .arms
        .iter()
        .find(|a| &a.arm == reference)
        .and_then(|a| a.summary.as_ref());
    for a in &p.arms {
        let Some(s) = &a.summary else {
            let _ = writeln!(md, "- **{}**: {}; no figures.", a.arm, status_text(a));
            continue;
        };
        let r = p.ratios.by_arm.get(&a.arm);
        let is_reference = &a.arm == reference;
        // ", 1.14× llama.cpp's 85.5 tok/s" — or nothing for the reference arm itself.
        let versus = |ratio: Option<f64>, theirs: Option<String>| match (ratio, theirs) {
            (Some(r), Some(t)) if !is_reference => format!(" ({r:.2}× {reference}'s {t})"),
            _ if is_reference => " (the reference arm)".to_owned(),
            _ => String::new(),
        };
        if let Some(d) = &s.decode_tok_s {
            let _ = writeln!(
                md,
                "- **{}** decode: {} tok/s p50 [95 % CI {}–{}]{}.",
                a.arm,
                rate(d.p50),
                rate(d.p50_ci[0]),
                rate(d.p50_ci[1]),
                versus(
                    r.and_then(|r| r.decode_tok_s_p50),
                    ref_summary
                        .and_then(|s| s.decode_tok_s.as_ref())
                        .map(|d| format!("{} tok/s", rate(d.p50)))
                )
            );
        }
        let _ = writeln!(
            md,
            "- **{}** prefill: {} tok/s p50{}; TTFT {} ms p50{}.",
            a.arm,
            rate(s.prefill_tok_s.p50),
            versus(
                r.map(|r| r.prefill_tok_s_p50),
                ref_summary.map(|s| format!("{} tok/s", rate(s.prefill_tok_s.p50)))
            ),
            ms(s.ttft_s.p50),
            versus(
                r.map(|r| r.ttft_p50),
                ref_summary.map(|s| format!("{} ms", ms(s.ttft_s.p50)))
            )
        );
        if !matches!(a.status, ArmStatus::Ran) {
            let _ = writeln!(md, "- **{}**: {}.", a.arm, status_text(a));
        }
    }
    if let Some(note) = &p.ratios.note {
        let _ = writeln!(md, "- {note}.");
    }
    for q in &p.quality {
        for c in &q.comparisons {
            let verdict = match c.summary.passed {
                Some(true) => "passed",
                Some(false) => "FAILED",
                None => "reported",
            };
            let _ = writeln!(
                md,
                "- Quality, {} vs {} ({}): {verdict}; min cosine {:.6}, greedy agreement {:.1} %.",
                q.arm,
                against_text(&c.against),
                rule_text(&c.rule),
                c.summary.min_cosine,
                c.summary.greedy_agreement * 100.0
            );
        }
    }
    md.push('\n');
}

fn machine(md: &mut String, p: &Packet) {
    let h = &p.hardware;
    let c = &h.cores;
    let opt = |v: Option<u32>| v.map_or("—".into(), |v| v.to_string());
    md.push_str("## Machine\n\n| | |\n|---|---|\n");
    let _ = writeln!(md, "| host | {} |", h.host);
    let _ = writeln!(
        md,
        "| CPU | {} ({} logical, {} physical, {} performance + {} efficiency) |",
        h.cpu_model,
        c.logical,
        opt(c.physical),
        opt(c.performance),
        opt(c.efficiency)
    );
    let _ = writeln!(
        md,
        "| memory | {:.1} GiB |",
        h.memory_bytes as f64 / (1u64 << 30) as f64
    );
    let _ = writeln!(md, "| OS | {} |", h.os);
    let _ = writeln!(
        md,
        "| GPU | {} ({}, {}; driver {} {}; {} GPU cores) |",
        h.gpu.adapter,
        h.gpu.backend,
        h.gpu.device_type,
        h.gpu.driver,
        h.gpu.driver_info,
        opt(h.gpu.cores)
    );
    let _ = writeln!(
        md,
        "| read bandwidth | {} |",
        h.bandwidth
            .as_ref()
            .map_or("not measured".into(), |b| format!(
                "{:.1} GB/s ({})",
                b.bytes_per_s / 1e9,
                b.how
            ))
    );
    for (key, value) in &h.catalog {
        let _ = writeln!(md, "| {} | {value} |", key.replace('_', " "));
    }
    for (tool, version) in &p.toolchain {
        let _ = writeln!(md, "| {tool} | {version} |");
    }
    md.push('\n');
}

fn envelope(md: &mut String, p: &Packet) {
    let e = &p.envelope;
    let _ = writeln!(
        md,
        "## Envelope\n\nModel `{}` (sha256 `{}`, {} bytes). {} prompts of n_ctx = {} tokens ({}; set sha256 `{}`), n_out = {} tokens each, greedy, end-of-sequence {}, {} uncounted warm-up request(s) per arm. Arms ran one after another, each engine in its own process.\n",
        e.model_path,
        e.model_sha256,
        e.model_bytes,
        e.n_prompts,
        e.n_ctx,
        e.prompt_source,
        e.prompt_set_sha256,
        e.n_out,
        if e.ignore_eos { "ignored" } else { "honoured" },
        e.warmup_requests
    );
    md.push_str("| arm | runtime | engine | weights | status |\n|---|---|---|---|---|\n");
    for a in &p.arms {
        let _ = writeln!(
            md,
            "| {} | {} | {} {} | {}{} | {} |",
            a.arm,
            a.runtime.label(),
            a.engine.name,
            a.engine.version,
            a.weights.format,
            if a.weights.same_as_envelope {
                " (the envelope's file)"
            } else {
                " (other weights: never called parity)"
            },
            status_text(a)
        );
    }
    md.push('\n');
}

fn prefill_table(md: &mut String, p: &Packet) {
    md.push_str("## Prefill\n\nTTFT = queue + setup + prefill. Rates: p50 = tokens / p50(time); p95 is the slow tail, tokens / p95(time). Brackets: bootstrap 95 % interval of the p50.\n\n");
    md.push_str("| arm | runtime | TTFT p50 ms [95 % CI] | TTFT p95 ms | prefill tok/s p50 [95 % CI] | prefill tok/s p95 | TTFT vs ref | prefill vs ref |\n|---|---|---|---|---|---|---|---|\n");
    for a in &p.arms {
        let Some(s) = &a.summary else { continue };
        let r = p.ratios.by_arm.get(&a.arm);
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            a.arm,
            a.runtime.label(),
            time_cell(&s.ttft_s),
            ms(s.ttft_s.p95),
            rate_cell(&s.prefill_tok_s),
            rate(s.prefill_tok_s.p95),
            ratio_cell(r.map(|r| r.ttft_p50)),
            ratio_cell(r.map(|r| r.prefill_tok_s_p50))
        );
    }
    md.push('\n');
}

fn decode_table(md: &mut String, p: &Packet) {
    md.push_str("## Decode\n\nDecode tok/s = (n_out − 1) / decode; ITL = gaps between consecutive output tokens, pooled over requests.\n\n");
    md.push_str("| arm | decode tok/s p50 [95 % CI] | decode tok/s p95 | ITL p50 ms [95 % CI] | ITL p95 ms | ITL p99 ms | decode vs ref |\n|---|---|---|---|---|---|---|\n");
    for a in &p.arms {
        let Some(s) = &a.summary else { continue };
        let r = p.ratios.by_arm.get(&a.arm);
        let (d50, d95) = s
            .decode_tok_s
            .as_ref()
            .map_or(("—".into(), "—".into()), |d| {
                (rate_cell(d), rate(d.p95))
            });
        let (i50, i95, i99) = s
            .itl_s
            .as_ref()
            .map_or(("—".into(), "—".into(), "—".into()), |d| {
                (time_cell(d), ms(d.p95), ms(d.p99))
            });
        let _ = writeln!(
            md,
            "| {} | {d50} | {d95} | {i50} | {i95} | {i99} | {} |",
            a.arm,
            ratio_cell(r.and_then(|r| r.decode_tok_s_p50))
        );
    }
    md.push('\n');
}

fn decomposition(md: &mut String, p: &Packet) {
    md.push_str("## Request-boundary decomposition\n\nMean ms per counted request; total = their sum, checked against the wall clock. A bucket is measured (a clock reading or the engine's counter) unless its method below says **derived** (computed from other readings, and from which) or **set to 0** (not measured: the engine has no such phase).\n\n");
    md.push_str("| arm |");
    for n in Buckets::NAMES {
        let _ = write!(md, " {n} |");
    }
    md.push_str(" total (sum) | total p50 |\n|---|");
    md.push_str(&"---|".repeat(Buckets::NAMES.len() + 2));
    md.push('\n');
    for a in &p.arms {
        let Some(s) = &a.summary else { continue };
        let _ = write!(md, "| {} |", a.arm);
        for v in s.buckets_mean.values() {
            let _ = write!(md, " {} |", ms(v));
        }
        let _ = writeln!(
            md,
            " {} | {} |",
            ms(s.buckets_mean.total()),
            ms(s.total_s.p50)
        );
    }
    md.push_str("\nHow each bucket is obtained:\n\n");
    for a in &p.arms {
        let m = &a.bucket_methods;
        let kinds = m.kinds.map(|k| k.values());
        let _ = writeln!(md, "- **{}**", a.arm);
        for (i, (name, how)) in Buckets::NAMES
            .iter()
            .zip([
                &m.queue,
                &m.setup,
                &m.prefill,
                &m.decode,
                &m.verification,
                &m.recovery,
                &m.other,
            ])
            .enumerate()
        {
            let kind = kinds.map_or("kind not stated".into(), |k| k[i].label().to_string());
            let _ = writeln!(md, "  - {name} ({kind}): {how}");
        }
    }
    md.push('\n');
}

fn against_text(a: &Against) -> String {
    match a {
        Against::Reference {
            engine,
            weights,
            label,
            ..
        } => match label {
            Some(label) => format!("{} on {weights} weights ({label})", engine.label()),
            None => format!("{} on {weights} weights", engine.label()),
        },
        Against::Arm { arm } => arm.clone(),
        Against::OwnRounding { rounds_as, .. } => format!(
            "{} on the envelope's weights, rounding as {rounds_as} does (own-rounding reference)",
            ReferenceEngine::CpuReference.label()
        ),
    }
}

fn rule_text(r: &QualityRule) -> String {
    match r {
        QualityRule::StrictTokenParityV1 {
            min_cosine,
            near_tie_margin,
        } => format!(
            "strict-token-parity-v1: cosine ≥ {min_cosine}, near-tie margin < {near_tie_margin}"
        ),
        QualityRule::QuantizationCost => "quantization cost, reported".into(),
        QualityRule::OwnRoundingParityV1 {
            max_median_gap,
            min_cosine,
            near_tie_margin,
        } => format!(
            "own-rounding-parity-v1: median 1 − cosine ≤ {max_median_gap:e}, every cosine ≥ {min_cosine}, near-tie margin < {near_tie_margin}"
        ),
        QualityRule::CrossEngineWithinRoundingV1 {
            min_cosine,
            near_tie_margin,
        } => format!(
            "cross-engine-within-rounding-v1: angle ≤ the two own-rounding references' angle + 2·acos({min_cosine}), near-tie margin < {near_tie_margin}"
        ),
    }
}

fn quality(md: &mut String, p: &Packet) {
    md.push_str("## Quality\n\nTeacher-forced, untimed; cosine of logits and greedy agreement per position.\n\n");
    md.push_str("| arm | against | rule | compared over | positions | min cosine | mean cosine | greedy agreement | mismatches | near-tie flips | verdict |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    for q in &p.quality {
        if let QualityStatus::Skipped { reason } = &q.status {
            let _ = writeln!(
                md,
                "| {} | — | — | — | — | — | — | — | — | — | skipped: {reason} |",
                q.arm
            );
        }
        for c in &q.comparisons {
            let s = &c.summary;
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {:.6} | {:.6} | {:.1} % | {} | {} | {} |",
                q.arm,
                against_text(&c.against),
                rule_text(&c.rule),
                c.top_k.map_or("full vocabulary".into(), |k| format!(
                    "reference top-{k} only"
                )),
                match c.withheld_positions {
                    0 => s.positions.to_string(),
                    w => format!("{} (+{w} withheld by the engine)", s.positions),
                },
                s.min_cosine,
                s.mean_cosine,
                s.greedy_agreement * 100.0,
                s.mismatches,
                s.near_tie_mismatches,
                verdict(s)
            );
        }
    }
    md.push('\n');
    own_rounding_notes(md, p);
}

/// A comparison's verdict cell; a cross-engine one says how its budget went.
fn verdict(s: &QualitySummary) -> String {
    let word = match s.passed {
        Some(true) => "pass",
        Some(false) => "FAIL",
        None => "—",
    };
    if let Some(gap) = s.median_gap {
        return format!("{word} (median 1 − cosine {gap:.1e})");
    }
    match (s.beyond_budget, s.min_budget_cosine) {
        (Some(beyond), Some(budget)) => format!(
            "{word} ({beyond} positions beyond the rounding budget; references' min cosine {budget:.6}, {} greedy flips both references make)",
            s.rounding_flips.unwrap_or(0)
        ),
        _ => word.into(),
    }
}

/// What each own-rounding reference mirrored, and which arms have none.
fn own_rounding_notes(md: &mut String, p: &Packet) {
    let mut lines = String::new();
    for q in &p.quality {
        if let Some(why) = &q.own_rounding_skipped {
            let _ = writeln!(
                lines,
                "- **{}**: no own-rounding reference, so its own-rounding parity is not judged: {why}.",
                q.arm
            );
        }
        for c in &q.comparisons {
            if let Against::OwnRounding { rounding, why, .. } = &c.against {
                let rules: Vec<String> = rounding
                    .iter()
                    .map(|r| {
                        format!(
                            "{}: inputs {}, attention {}",
                            r.rows, r.activations, r.attention
                        )
                    })
                    .collect();
                let _ = writeln!(
                    lines,
                    "- **{}** is judged against the CPU reference rounding as it does ({}). Why: {why}.",
                    q.arm,
                    rules.join("; ")
                );
            }
        }
    }
    if !lines.is_empty() {
        md.push_str("Own-rounding references (each engine's tight budget is against the same weights computed as that engine rounds; the cross-engine budget adds what the two roundings move apart):\n\n");
        md.push_str(&lines);
        md.push('\n');
    }
}

/// The weight bytes a decode step reads: the packet's figure, else `harness inspect`'s on the
/// model file where it is still there.
fn decode_step_bytes(p: &Packet) -> Option<(u64, &'static str)> {
    if let Some(b) = p.envelope.decode_step_bytes {
        return Some((b, "the packet"));
    }
    let model = fak::gguf::Gguf::open(Path::new(&p.envelope.model_path)).ok()?;
    Some((
        inspect::decode_step_bytes(&model).ok()?.bytes,
        "harness inspect on the model file",
    ))
}

fn roofline(md: &mut String, p: &Packet) {
    md.push_str("## Roofline\n\n");
    let bandwidth = p.hardware.bandwidth.as_ref();
    let bytes = decode_step_bytes(p);
    let (Some(bw), Some((bytes, source))) = (bandwidth, bytes) else {
        let _ = writeln!(
            md,
            "No decode ceiling: {}.\n",
            match (bandwidth, bytes) {
                (None, None) =>
                    "neither the read bandwidth nor the bytes of a decode step are known",
                (None, _) => "the read bandwidth was not measured",
                _ =>
                    "the bytes of a decode step are unknown (no figure in the packet, model file not readable)",
            }
        );
        return;
    };
    let ceiling = bw.bytes_per_s / bytes as f64;
    let _ = writeln!(
        md,
        "A decode step reads {bytes} bytes of weights ({source}; KV cache not included). At the measured {:.1} GB/s the ceiling is **{} tok/s**. Arms on other weights read other bytes; their share is against the envelope's weights.\n",
        bw.bytes_per_s / 1e9,
        rate(ceiling)
    );
    md.push_str("| arm | decode tok/s p50 | share of ceiling |\n|---|---|---|\n");
    for a in &p.arms {
        if let Some(d) = a.summary.as_ref().and_then(|s| s.decode_tok_s.as_ref()) {
            let _ = writeln!(
                md,
                "| {} | {} | {:.1} % |",
                a.arm,
                rate(d.p50),
                100.0 * d.p50 / ceiling
            );
        }
    }
    md.push('\n');
}

fn shell_quote(arg: &str) -> String {
    if !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

fn reproduction(md: &mut String, path: &Path, p: &Packet) {
    let command: Vec<String> = p.harness.command.iter().map(|a| shell_quote(a)).collect();
    let packet = shell_quote(&path.display().to_string());
    let _ = writeln!(
        md,
        "## Reproduction\n\nharness {}{}, on the machine above:\n\n```sh\n{}\nharness validate {packet}\nharness report {packet}\n```\n",
        p.harness.version,
        p.harness
            .commit
            .as_deref()
            .map_or(String::new(), |c| format!(" (commit {c})")),
        command.join(" ")
    );
    md.push_str("Each engine as it ran:\n\n");
    for a in &p.arms {
        let _ = writeln!(
            md,
            "- **{}** ({} {}): `{}`",
            a.arm,
            a.engine.name,
            a.engine.version,
            a.engine
                .flags
                .iter()
                .map(|f| shell_quote(f))
                .collect::<Vec<_>>()
                .join(" ")
        );
        for t in &a.engine.tuning {
            let _ = writeln!(md, "  - `{}`: {}", t.flag, t.why);
        }
    }
    md.push('\n');
}

fn plots(p: &Packet, raws: &[Option<ArmRaw>]) -> Vec<(String, String)> {
    let ttft: Vec<(String, Vec<f64>)> = p
        .arms
        .iter()
        .map(|a| {
            let v = a
                .requests
                .iter()
                .filter(|r| !r.warmup)
                .map(|r| r.ttft_s * 1e3)
                .collect();
            (a.arm.clone(), v)
        })
        .collect();
    let itl: Vec<(String, Vec<f64>)> = p
        .arms
        .iter()
        .zip(raws)
        .map(|(a, raw)| {
            let v = raw.as_ref().map_or_else(Vec::new, |raw| {
                raw.counted()
                    .flat_map(|r| itl_gaps(&r.token_times_s))
                    .map(|g| g * 1e3)
                    .collect()
            });
            (a.arm.clone(), v)
        })
        .collect();
    let bars: Vec<(String, Vec<f64>)> = p
        .arms
        .iter()
        .filter_map(|a| {
            let s = a.summary.as_ref()?;
            Some((
                a.arm.clone(),
                s.buckets_mean.values().iter().map(|v| v * 1e3).collect(),
            ))
        })
        .collect();
    vec![
        (
            "ttft.svg".into(),
            svg::distribution_plot("Time to first token per request", "ms", &ttft),
        ),
        (
            "itl.svg".into(),
            svg::distribution_plot("Inter-token latency, all gaps pooled", "ms", &itl),
        ),
        (
            "decomposition.svg".into(),
            svg::stacked_bars("Mean buckets per request", "ms", &Buckets::NAMES, &bars),
        ),
    ]
}

#[cfg(test)]
mod tests;
