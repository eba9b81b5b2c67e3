//! The report's structure and numbers, taken from the packet it reports (not a golden text).

use super::*;
use crate::packet::testkit::{self, Scratch};
use crate::packet::{
    ArmDevice, DeviceKind, Fault, FlagChoice, NATIVE_ARM, PLAIN_CLIENT_RULE, PlainClientCheck,
    raw_file_name,
};

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
    assert!(md.contains("  - queue (measured): send to engine start"));
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
    assert_eq!(rows.len(), 3);
    let parity = &p.quality[0].comparisons[1].summary;
    assert!(rows[1].contains("strict-token-parity-v1: cosine ≥ 0.9999"));
    assert!(rows[1].contains("reference top-20 only"));
    assert!(rows[1].contains(&format!("| {:.6} |", parity.min_cosine)));
    assert!(rows[1].ends_with("| 0 | 1 | pass |"), "{}", rows[1]);
    assert!(rows[0].contains("cpu-reference on f32 weights") && rows[0].ends_with("| — |"));
    // The own-rounding comparison states its rule, its median, and what was mirrored.
    let own = &p.quality[0].comparisons[2].summary;
    assert!(
        rows[2].contains("rounding as fak-native does"),
        "{}",
        rows[2]
    );
    assert!(rows[2].contains("own-rounding-parity-v1: median 1 − cosine ≤ 1e-5"));
    assert!(rows[2].ends_with(&format!(
        "| pass (median 1 − cosine {:.1e}) |",
        own.median_gap.unwrap()
    )));
    let notes = section(&r.markdown, "## Quality");
    assert!(notes.contains(
        "- **fak-native** is judged against the CPU reference rounding as it does (steps of 9 to 21 ids (mat-mul): inputs f32, attention f16-cache;"
    ));
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
    assert!(
        md.contains("carries scripted replies") && md.contains("sent the same prompts"),
        "{md}"
    );
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

/// The key takeaways open with who measured what, on what: fak as the native engine on a
/// software GPU, llama.cpp as a reference natively on the CPU, the arms not sharing a device,
/// random weights, llama.cpp's tuned flags, MLX on other weights with its precision, a faulted
/// arm, fast paths forced off, the plain-client check and the bounds validate could not apply.
#[test]
fn the_takeaways_open_with_an_honesty_header() {
    let s = Scratch::new("report-honesty");
    testkit::write_run(s.path());
    let path = s.path().join(PACKET_FILE);
    let (mut p, raws) = load(&path).unwrap();
    p.envelope.model_origin = Some("synthetic: seeded random weights, not trained".into());
    let device = |name: &str, kind| {
        Some(ArmDevice {
            name: name.into(),
            kind,
            selftest_adapter: kind != DeviceKind::Cpu,
        })
    };
    p.arms[0].device = device(
        "llvmpipe (LLVM 15.0.6, 256 bits) (vulkan)",
        DeviceKind::SoftwareGpu,
    );
    p.arms[0].engine.flags.push("FAK_FORCE=no-subgroup".into());
    p.arms[1].device = device(
        "CPU (the llama.cpp build lists no GPU device)",
        DeviceKind::Cpu,
    );
    p.arms[1].engine.tuning = vec![FlagChoice {
        flag: "--cache-ram 0".into(),
        why: "distinct prompts never hit the prompt cache".into(),
    }];
    p.arms[1].plain_client = Some(PlainClientCheck {
        how: "test".into(),
        rule: PLAIN_CLIENT_RULE.into(),
        requests: 6,
        plain_ttft_p50_s: Some(0.0205),
        arm_ttft_p50_s: Some(0.0210),
        within: Some(true),
        plain_beyond_prompt_p50_s: Some(0.0011),
        arm_beyond_prompt_p50_s: Some(0.0008),
        error: None,
    });
    p.arms[2].engine.build = Some(serde_json::json!({"precision": {
        "float_parameters": ["float32"], "f32_matmul": "full float32",
        "MLX_ENABLE_TF32": "unset (MLX's default: 1)"}}));
    p.arms[2].status = ArmStatus::Faulted {
        faults: vec![Fault {
            request_index: Some(3),
            what: "mlx exited (signal 9)".into(),
            stderr_tail: None,
        }],
        restarts: 1,
    };
    let mut validation = validate(&path);
    validation.notes = vec!["prefill above the compute floor: not checked (test)".into()];
    let md = build(&path, &p, &raws, &validation).markdown;
    let header = section(&md, "## Key takeaways");
    let header = &header[..header
        .find("### Figures")
        .expect("figures after the header")];
    for line in [
        "### Who measured what, on what",
        "- Weights: synthetic: seeded random weights, not trained.",
        "- **fak-native**: fak's own engine (native)",
        "ran on llvmpipe (LLVM 15.0.6, 256 bits) (vulkan): a software GPU on the CPU",
        "- **llama.cpp**: a reference engine",
        "ran on CPU (the llama.cpp build lists no GPU device): the CPU, natively",
        "The arms did not share one device",
        "- llama.cpp ran with `--cache-ram 0` for this workload",
        "(other weights: never called parity); computed in float32 with full float32 matmuls",
        "**faulted 1 time(s), restarted 1: mlx exited (signal 9)**",
        "- Fast paths forced off: fak-native: FAK_FORCE=no-subgroup.",
        "llama.cpp's TTFT p50 21.00 ms vs 20.50 ms from a plain client on the same server (6 requests): within 5 % or 3 ms; beyond the server's own prompt time 0.80 ms vs 1.10 ms.",
        "could not apply: prefill above the compute floor: not checked (test).",
    ] {
        assert!(header.contains(line), "{line:?} not in:\n{header}");
    }
    let repro = section(&md, "## Reproduction");
    assert!(repro.contains("  - `--cache-ram 0`: distinct prompts never hit the prompt cache"));
}

/// The machine section lists the hardware catalog the OS gave.
#[test]
fn the_machine_section_lists_the_catalog() {
    let (s, mut p, _) = built("report-catalog");
    p.hardware.catalog = std::collections::BTreeMap::from([
        ("machine_model".to_string(), "Mac15,9".to_string()),
        ("metal_family".to_string(), "metal3".to_string()),
    ]);
    let path = s.path().join(PACKET_FILE);
    let (_, raws) = load(&path).unwrap();
    let md = build(&path, &p, &raws, &validate(&path)).markdown;
    let machine = section(&md, "## Machine");
    assert!(machine.contains("| machine model | Mac15,9 |"), "{machine}");
    assert!(machine.contains("| metal family | metal3 |"), "{machine}");
}
