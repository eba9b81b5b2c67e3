//! The report's structure and numbers, taken from the packet it reports (not a golden text).

use super::*;
use crate::packet::testkit::{self, Scratch};
use crate::packet::{NATIVE_ARM, raw_file_name};

fn built(name: &str) -> (Scratch, Packet, Report) {
    let s = Scratch::new(name);
    testkit::write_run(s.path());
    let path = s.path().join(PACKET_FILE);
    let (packet, raws) = load(&path).unwrap();
    let report = build(&path, &packet, &raws, &validate(&path));
    (s, packet, report)
}

/// The text of one `## ` section, up to the next.
fn section<'a>(md: &'a str, title: &str) -> &'a str {
    let start = md
        .find(title)
        .unwrap_or_else(|| panic!("no section {title}"));
    let rest = &md[start + title.len()..];
    &md[start..start + title.len() + rest.find("\n## ").unwrap_or(rest.len())]
}

fn row<'a>(md: &'a str, title: &str, arm: &str) -> &'a str {
    section(md, title)
        .lines()
        .find(|l| l.starts_with(&format!("| {arm} |")))
        .unwrap_or_else(|| panic!("no row for {arm} in {title}"))
}

#[test]
fn the_report_has_every_section_in_order() {
    let (_s, _p, r) = built("report-sections");
    let sections = [
        "## Key takeaways",
        "## Machine",
        "## Envelope",
        "## Prefill",
        "## Decode",
        "## Request-boundary decomposition",
        "## Quality",
        "## Roofline",
        "## Reproduction",
        "## Plots",
    ];
    let positions: Vec<usize> = sections
        .iter()
        .map(|s| r.markdown.find(s).unwrap_or_else(|| panic!("missing {s}")))
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
    assert!(r.markdown.contains("**valid** by `harness validate`"));
    let names: Vec<&str> = r.plots.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["ttft.svg", "itl.svg", "decomposition.svg"]);
}

#[test]
fn tables_carry_the_packets_figures() {
    let (_s, p, r) = built("report-numbers");
    let md = &r.markdown;
    let fak = p.arms[0].summary.as_ref().unwrap();
    let prefill = row(md, "## Prefill", NATIVE_ARM);
    assert!(prefill.contains(&time_cell(&fak.ttft_s)), "{prefill}");
    assert!(
        prefill.contains(&rate_cell(&fak.prefill_tok_s)),
        "{prefill}"
    );
    let ratios = &p.ratios.by_arm[NATIVE_ARM];
    assert!(prefill.contains(&format!("{:.2}×", ratios.prefill_tok_s_p50)));
    let decode = row(md, "## Decode", NATIVE_ARM);
    assert!(
        decode.contains(&rate_cell(fak.decode_tok_s.as_ref().unwrap())),
        "{decode}"
    );
    assert!(
        decode.contains(&time_cell(fak.itl_s.as_ref().unwrap())),
        "{decode}"
    );
    assert!(decode.contains(&format!("{:.2}×", ratios.decode_tok_s_p50.unwrap())));
    // The reference arm's own ratios are 1.
    assert!(row(md, "## Decode", "llama.cpp").contains("| 1.00× |"));
    let buckets = row(md, "## Request-boundary decomposition", NATIVE_ARM);
    assert!(buckets.contains(&format!("| {} |", ms(fak.buckets_mean.prefill_s))));
    assert!(buckets.contains(&format!("| {} |", ms(fak.buckets_mean.total()))));
    assert!(md.contains("  - queue: send to engine start"));
}

#[test]
fn takeaways_state_each_arm_against_the_reference() {
    let (_s, p, r) = built("report-takeaways");
    let take = section(&r.markdown, "## Key takeaways");
    let fak = p.arms[0].summary.as_ref().unwrap();
    let llama = p.arms[1].summary.as_ref().unwrap();
    let ratios = &p.ratios.by_arm[NATIVE_ARM];
    let decode = format!(
        "- **fak-native** decode: {} tok/s p50 [95 % CI {}–{}] ({:.2}× llama.cpp's {} tok/s).",
        rate(fak.decode_tok_s.as_ref().unwrap().p50),
        rate(fak.decode_tok_s.as_ref().unwrap().p50_ci[0]),
        rate(fak.decode_tok_s.as_ref().unwrap().p50_ci[1]),
        ratios.decode_tok_s_p50.unwrap(),
        rate(llama.decode_tok_s.as_ref().unwrap().p50)
    );
    assert!(take.contains(&decode), "{take}");
    assert!(take.contains(&format!(
        "TTFT {} ms p50 ({:.2}× llama.cpp's {} ms)",
        ms(fak.ttft_s.p50),
        ratios.ttft_p50,
        ms(llama.ttft_s.p50)
    )));
    assert!(take.contains("- **llama.cpp** decode:") && take.contains("(the reference arm)"));
    assert!(take.contains("Selftest on Test GPU: passed (42 checks, 0 failed)"));
}

#[test]
fn the_quality_table_states_rule_scope_and_verdict() {
    let (_s, p, r) = built("report-quality");
    let rows: Vec<&str> = section(&r.markdown, "## Quality")
        .lines()
        .filter(|l| l.starts_with("| fak-native |"))
        .collect();
    assert_eq!(rows.len(), 2);
    let parity = &p.quality[0].comparisons[1].summary;
    assert!(rows[1].contains("strict-token-parity-v1: cosine ≥ 0.9999"));
    assert!(rows[1].contains("reference top-20 only"));
    assert!(rows[1].contains(&format!("| {:.6} |", parity.min_cosine)));
    assert!(rows[1].ends_with("| 0 | 1 | pass |"), "{}", rows[1]);
    assert!(rows[0].contains("cpu-reference on f32 weights") && rows[0].ends_with("| — |"));
}

#[test]
fn the_roofline_divides_bandwidth_by_decode_bytes() {
    let (_s, p, r) = built("report-roofline");
    // 150 GB/s over 900 000 bytes a step.
    let ceiling = 150e9 / 900_000.0;
    assert!(r.markdown.contains(&format!("**{} tok/s**", rate(ceiling))));
    let fak = p.arms[0]
        .summary
        .as_ref()
        .unwrap()
        .decode_tok_s
        .as_ref()
        .unwrap();
    let line = row(&r.markdown, "## Roofline", NATIVE_ARM);
    assert!(
        line.contains(&format!("{:.1} %", 100.0 * fak.p50 / ceiling)),
        "{line}"
    );
    let mut unknown = p.clone();
    unknown.hardware.bandwidth = None;
    let mut md = String::new();
    roofline(&mut md, &unknown);
    assert!(md.contains("the read bandwidth was not measured"));
}

#[test]
fn reproduction_gives_the_exact_commands() {
    let (_s, _p, r) = built("report-repro");
    let repro = section(&r.markdown, "## Reproduction");
    assert!(repro.contains("```sh\nharness threeway\nharness validate "));
    assert!(repro.contains("- **llama.cpp** (llama.cpp test 1.0): `--greedy`"));
    assert_eq!(shell_quote("a b"), "'a b'");
    assert_eq!(shell_quote("it's"), r"'it'\''s'");
}

#[test]
fn plots_draw_every_counted_sample() {
    let (_s, _p, r) = built("report-plots");
    let svg = |name: &str| &r.plots.iter().find(|(n, _)| n == name).unwrap().1;
    let per_arm = testkit::N_PROMPTS;
    assert_eq!(svg("ttft.svg").matches("<circle").count(), 3 * per_arm);
    assert_eq!(
        svg("itl.svg").matches("<circle").count(),
        3 * per_arm * (testkit::N_OUT - 1)
    );
    // Background, 7 legend swatches, 7 segments for each of 3 arms.
    assert_eq!(
        svg("decomposition.svg").matches("<rect").count(),
        1 + 7 + 3 * 7
    );
}

#[test]
fn an_invalid_packet_is_reported_as_such() {
    let s = Scratch::new("report-invalid");
    testkit::write_run(s.path());
    std::fs::remove_file(s.path().join(raw_file_name("mlx"))).unwrap();
    let path = s.path().join(PACKET_FILE);
    let (packet, raws) = load(&path).unwrap();
    assert!(raws[2].is_none());
    let r = build(&path, &packet, &raws, &validate(&path));
    assert!(
        r.markdown.contains("NOT VALID (1 error;"),
        "{}",
        &r.markdown[..400]
    );
    assert!(
        r.plots[1].1.contains("no samples"),
        "mlx's ITL row has no raw file"
    );
}

#[test]
fn run_writes_the_report_beside_the_packet_or_into_out() {
    let s = Scratch::new("report-run");
    testkit::write_run(s.path());
    let out = s.path().join("report");
    run(&Args {
        packet: s.path().join(PACKET_FILE),
        out: Some(out.clone()),
        unvalidated: false,
    })
    .unwrap();
    for f in ["report.md", "ttft.svg", "itl.svg", "decomposition.svg"] {
        assert!(out.join(f).is_file(), "{f}");
    }
    let err = run(&Args {
        packet: s.path().join("nope.json"),
        out: None,
        unvalidated: false,
    })
    .unwrap_err();
    assert!(format!("{err:#}").contains("nope.json"));
}

#[test]
fn run_refuses_an_invalid_packet_unless_asked_and_then_says_not_valid() {
    let s = Scratch::new("report-run-invalid");
    testkit::write_run(s.path());
    std::fs::remove_file(s.path().join(raw_file_name("mlx"))).unwrap();
    let out = s.path().join("report");
    let args = |unvalidated| Args {
        packet: s.path().join(PACKET_FILE),
        out: Some(out.clone()),
        unvalidated,
    };
    let err = format!("{:#}", run(&args(false)).unwrap_err());
    assert!(err.contains("does not validate (1 error"), "{err}");
    assert!(err.contains("--unvalidated"), "{err}");
    assert!(!out.join("report.md").exists());
    run(&args(true)).unwrap();
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("NOT VALID (1 error;"), "{}", &md[..400]);
}

#[test]
fn a_scenario_packet_reports_the_shared_ttft_table() {
    let s = Scratch::new("report-scenario");
    let packet = testkit::write_scenario_run(s.path());
    let path = s.path().join(PACKET_FILE);
    let (_, raws) = load(&path).unwrap();
    let r = build(&path, &packet, &raws, &validate(&path));
    let md = &r.markdown;
    assert!(md.contains("**valid**"), "{md}");
    let title = "## Multi-agent shared preamble";
    let cache = row(md, title, "fak-native-cache");
    let scenario = packet.scenario.as_ref().unwrap();
    let sum = scenario.arms[0].summary.as_ref().unwrap();
    let later = sum.later.as_ref().unwrap();
    // TTFTs in ms, the ratio and the computed counts, as the packet has them.
    assert!(
        cache.contains(&format!("| {} |", ms(sum.turn1.ttft_p50_s))),
        "{cache}"
    );
    assert!(
        cache.contains(&format!("| {} |", ms(later.ttft_p50_s))),
        "{cache}"
    );
    assert!(
        cache.contains(&ratio_cell(sum.ttft_turn1_over_later)),
        "{cache}"
    );
    assert!(
        cache.contains(&format!(
            "{} of {}",
            later.prefill_computed, later.prompt_tokens
        )),
        "{cache}"
    );
    assert!(row(md, title, "mlx-cache").contains("skipped: no mlx_lm here"));
    let effect = &scenario.cache_effect[0];
    assert!(section(md, title).contains(&format!(
        "| fak-native | {} | {} |",
        ratio_cell(Some(effect.turn1_ttft_ratio)),
        ratio_cell(effect.later_ttft_ratio)
    )));
    // Every request with the idle time before it, as the packet has them.
    let last = scenario.arms[0].turns.last().unwrap();
    assert!(
        section(md, title).contains(&format!(
            "| fak-native-cache | {} | {} | {:.3} | {:.3} | {} |",
            last.agent,
            last.turn,
            last.sent_s,
            last.idle_before_s,
            ms(last.ttft_s)
        )),
        "{md}"
    );
    // A scenario-only packet has no envelope tables and no plots.
    assert!(!md.contains("## Prefill"));
    assert!(r.plots.is_empty());
}
