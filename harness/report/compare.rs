//! `harness compare <a.json> <b.json>`: what moved between two packets. A p50 moved when its
//! bootstrap 95 % intervals in the two packets do not overlap; anything else is within noise.
//! What differs in the setup (machine, model, envelope, engine builds) is listed first, since it
//! explains — or invalidates — the rest.

use super::require_valid;
use crate::packet::validate::validate;
use crate::packet::{ArmSummary, Packet};
use anyhow::{Context, Result};
use serde::Serialize;
use std::fmt::Write;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// The earlier packet.
    pub a: PathBuf,
    /// The later packet.
    pub b: PathBuf,
    /// Print JSON instead of markdown.
    #[arg(long)]
    pub json: bool,
    /// Compare even if a packet does not validate (the output then names it as not valid).
    #[arg(long)]
    pub unvalidated: bool,
}

/// One p50 in both packets.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Change {
    pub arm: String,
    pub metric: &'static str,
    pub a_p50: f64,
    pub a_ci: [f64; 2],
    pub b_p50: f64,
    pub b_ci: [f64; 2],
    /// (b − a) / a.
    pub relative_change: f64,
    /// The two intervals do not overlap.
    pub moved: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    /// Setup that differs: `what: a → b`.
    pub setup_changes: Vec<String>,
    pub changes: Vec<Change>,
    /// Arms with figures in only one packet.
    pub only_in_a: Vec<String>,
    pub only_in_b: Vec<String>,
    /// Packets `harness validate` rejected, compared anyway (`--unvalidated`): `path (n errors)`.
    pub not_valid: Vec<String>,
}

pub fn run(args: &Args) -> Result<()> {
    let mut not_valid = Vec::new();
    for path in [&args.a, &args.b] {
        let validation = validate(path);
        require_valid(path, &validation, args.unvalidated)?;
        if !validation.valid {
            let n = validation.errors.len();
            let plural = if n == 1 { "" } else { "s" };
            not_valid.push(format!("{} ({n} error{plural})", path.display()));
        }
    }
    let a = read(&args.a)?;
    let b = read(&args.b)?;
    let c = Comparison {
        not_valid,
        ..compare(&a, &b)
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&c)?);
    } else {
        print!("{}", markdown(&c, &args.a, &args.b));
    }
    Ok(())
}

fn read(path: &Path) -> Result<Packet> {
    let bytes = super::read_file(path, "packet", super::MAX_PACKET_BYTES)?;
    serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not a comparison packet", path.display()))
}

/// The p50s an arm's summary offers, with their intervals: times in seconds, rates in tok/s.
fn metrics(s: &ArmSummary) -> Vec<(&'static str, f64, [f64; 2])> {
    let mut m = vec![
        ("TTFT", s.ttft_s.p50, s.ttft_s.p50_ci),
        ("prefill tok/s", s.prefill_tok_s.p50, s.prefill_tok_s.p50_ci),
        ("total", s.total_s.p50, s.total_s.p50_ci),
    ];
    if let Some(d) = &s.decode_tok_s {
        m.push(("decode tok/s", d.p50, d.p50_ci));
    }
    if let Some(d) = &s.itl_s {
        m.push(("ITL", d.p50, d.p50_ci));
    }
    m
}

/// A p50 and its interval as the table shows it: rates in tok/s, times in ms.
fn cell(metric: &str, p50: f64, ci: [f64; 2]) -> String {
    if metric.ends_with("tok/s") {
        format!("{p50:.1} [{:.1}–{:.1}] tok/s", ci[0], ci[1])
    } else {
        format!(
            "{:.2} [{:.2}–{:.2}] ms",
            p50 * 1e3,
            ci[0] * 1e3,
            ci[1] * 1e3
        )
    }
}

pub fn compare(a: &Packet, b: &Packet) -> Comparison {
    let mut setup_changes = Vec::new();
    let mut differs = |what: &str, x: String, y: String| {
        if x != y {
            setup_changes.push(format!("{what}: {x} → {y}"));
        }
    };
    differs("host", a.hardware.host.clone(), b.hardware.host.clone());
    differs(
        "GPU",
        a.hardware.gpu.adapter.clone(),
        b.hardware.gpu.adapter.clone(),
    );
    differs(
        "GPU driver",
        a.hardware.gpu.driver_info.clone(),
        b.hardware.gpu.driver_info.clone(),
    );
    differs(
        "model sha256",
        a.envelope.model_sha256.clone(),
        b.envelope.model_sha256.clone(),
    );
    differs(
        "n_ctx",
        a.envelope.n_ctx.to_string(),
        b.envelope.n_ctx.to_string(),
    );
    differs(
        "n_out",
        a.envelope.n_out.to_string(),
        b.envelope.n_out.to_string(),
    );
    differs(
        "N prompts",
        a.envelope.n_prompts.to_string(),
        b.envelope.n_prompts.to_string(),
    );
    differs(
        "prompt set",
        a.envelope.prompt_set_sha256.clone(),
        b.envelope.prompt_set_sha256.clone(),
    );
    differs(
        "harness",
        format!("{} {:?}", a.harness.version, a.harness.commit),
        format!("{} {:?}", b.harness.version, b.harness.commit),
    );
    for arm_a in &a.arms {
        if let Some(arm_b) = b.arms.iter().find(|x| x.arm == arm_a.arm) {
            differs(
                &format!("{} engine", arm_a.arm),
                arm_a.engine.version.clone(),
                arm_b.engine.version.clone(),
            );
            differs(
                &format!("{} flags", arm_a.arm),
                arm_a.engine.flags.join(" "),
                arm_b.engine.flags.join(" "),
            );
            differs(
                &format!("{} weights", arm_a.arm),
                arm_a.weights.sha256.clone(),
                arm_b.weights.sha256.clone(),
            );
        }
    }
    let mut changes = Vec::new();
    let mut only_in_a = Vec::new();
    for arm_a in &a.arms {
        let Some(sa) = &arm_a.summary else { continue };
        let Some(sb) = b
            .arms
            .iter()
            .find(|x| x.arm == arm_a.arm)
            .and_then(|x| x.summary.as_ref())
        else {
            only_in_a.push(arm_a.arm.clone());
            continue;
        };
        let mb = metrics(sb);
        for (metric, a_p50, a_ci) in metrics(sa) {
            let Some(&(_, b_p50, b_ci)) = mb.iter().find(|m| m.0 == metric) else {
                continue;
            };
            changes.push(Change {
                arm: arm_a.arm.clone(),
                metric,
                a_p50,
                a_ci,
                b_p50,
                b_ci,
                relative_change: (b_p50 - a_p50) / a_p50,
                moved: a_ci[1] < b_ci[0] || b_ci[1] < a_ci[0],
            });
        }
    }
    let only_in_b = b
        .arms
        .iter()
        .filter(|x| x.summary.is_some())
        .filter(|x| !a.arms.iter().any(|y| y.arm == x.arm && y.summary.is_some()))
        .map(|x| x.arm.clone())
        .collect();
    Comparison {
        setup_changes,
        changes,
        only_in_a,
        only_in_b,
        not_valid: Vec::new(),
    }
}

pub fn markdown(c: &Comparison, a: &Path, b: &Path) -> String {
    let mut md = format!("# {} → {}\n\n", a.display(), b.display());
    for packet in &c.not_valid {
        let _ = writeln!(
            md,
            "**NOT VALID**: {packet} does not pass `harness validate`; its figures are the \
             packet's claims.\n"
        );
    }
    md.push_str("## Setup\n\n");
    if c.setup_changes.is_empty() {
        md.push_str("Same machine, model, envelope and engine builds.\n");
    }
    for s in &c.setup_changes {
        let _ = writeln!(md, "- {s}");
    }
    md.push_str("\n## p50s (95 % bootstrap intervals; **moved** = intervals do not overlap)\n\n");
    md.push_str("| arm | metric | before | after | change | |\n|---|---|---|---|---|---|\n");
    for ch in &c.changes {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {:+.1} % | {} |",
            ch.arm,
            ch.metric,
            cell(ch.metric, ch.a_p50, ch.a_ci),
            cell(ch.metric, ch.b_p50, ch.b_ci),
            ch.relative_change * 100.0,
            if ch.moved {
                "**moved**"
            } else {
                "within noise"
            }
        );
    }
    for arm in &c.only_in_a {
        let _ = writeln!(md, "\n{arm}: figures only in the first packet.");
    }
    for arm in &c.only_in_b {
        let _ = writeln!(md, "\n{arm}: figures only in the second packet.");
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::testkit::{self, Scratch};

    fn packet_with_fak_speed(name: &str, prefill: f64, itl: f64) -> (Scratch, Packet) {
        let s = Scratch::new(name);
        let p = testkit::write_run_with(s.path(), prefill, itl);
        (s, p)
    }

    #[test]
    fn the_same_run_moves_nothing() {
        let (_s, p) = packet_with_fak_speed("cmp-same", 4000.0, 0.010);
        let c = compare(&p, &p);
        assert!(c.setup_changes.is_empty());
        assert_eq!(c.changes.len(), 3 * 5, "five p50s for each of three arms");
        assert!(
            c.changes
                .iter()
                .all(|ch| !ch.moved && ch.relative_change == 0.0)
        );
    }

    #[test]
    fn a_faster_decode_is_flagged_and_its_size_reported() {
        let (_a, before) = packet_with_fak_speed("cmp-a", 4000.0, 0.010);
        let (_b, after) = packet_with_fak_speed("cmp-b", 4000.0, 0.005);
        let c = compare(&before, &after);
        let find = |arm: &str, metric: &str| {
            c.changes
                .iter()
                .find(|ch| ch.arm == arm && ch.metric == metric)
                .unwrap()
                .clone()
        };
        let decode = find("fak-native", "decode tok/s");
        let a = before.arms[0]
            .summary
            .as_ref()
            .unwrap()
            .decode_tok_s
            .clone()
            .unwrap();
        let b = after.arms[0]
            .summary
            .as_ref()
            .unwrap()
            .decode_tok_s
            .clone()
            .unwrap();
        assert_eq!((decode.a_p50, decode.b_p50), (a.p50, b.p50));
        assert!((decode.relative_change - (b.p50 - a.p50) / a.p50).abs() < 1e-12);
        assert!(decode.moved, "halving ITL is far outside the intervals");
        assert!(find("fak-native", "ITL").moved);
        // The other arms did not change.
        assert!(!find("llama.cpp", "decode tok/s").moved);
        let md = markdown(&c, Path::new("a.json"), Path::new("b.json"));
        let row = md
            .lines()
            .find(|l| l.starts_with("| fak-native | decode tok/s |"))
            .unwrap();
        assert!(
            row.contains(&cell("decode tok/s", a.p50, a.p50_ci)),
            "{row}"
        );
        assert!(row.ends_with("| **moved** |"), "{row}");
        assert_eq!(
            cell("ITL", 0.0101, [0.0099, 0.0105]),
            "10.10 [9.90–10.50] ms"
        );
    }

    #[test]
    fn setup_differences_are_listed() {
        let (_a, before) = packet_with_fak_speed("cmp-setup-a", 4000.0, 0.010);
        let mut after = before.clone();
        after.hardware.host = "other".into();
        after.arms[1].engine.version = "b9999".into();
        after.arms.remove(2);
        let c = compare(&before, &after);
        assert!(
            c.setup_changes
                .contains(&"host: testhost → other".to_string())
        );
        assert!(
            c.setup_changes
                .iter()
                .any(|s| s.starts_with("llama.cpp engine:"))
        );
        assert_eq!(c.only_in_a, ["mlx"]);
    }
}
