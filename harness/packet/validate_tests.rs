//! One test per invariant: a valid synthetic run, then the same run tampered to break exactly
//! that invariant (digests refreshed where the test is about something else).

use super::*;
use crate::packet::scenario::{ScenarioRaw, scenario_raw_file_name};
use crate::packet::testkit::{self, Scratch};
use crate::packet::{
    BucketKinds, NATIVE_ARM, PlainClient, WithheldPosition, quality_file_name, raw_file_name,
};
use serde_json::json;

/// A freshly written valid run.
fn run(name: &str) -> Scratch {
    let scratch = Scratch::new(name);
    testkit::write_run(scratch.path());
    scratch
}

fn packet_path(s: &Scratch) -> PathBuf {
    s.path().join(PACKET_FILE)
}

fn load(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn store(path: &Path, v: &Value) {
    std::fs::write(path, serde_json::to_vec_pretty(v).unwrap()).unwrap();
}

/// Recomputes every digest (raw and quality files into the packet, all files into the
/// manifest), so only the tampered invariant is broken.
fn refresh_digests(s: &Scratch) {
    let dir = s.path();
    let digest = |name: &str| {
        serde_json::to_value(FileDigest::of(
            name,
            &std::fs::read(dir.join(name)).unwrap(),
        ))
        .unwrap()
    };
    let mut packet = load(&packet_path(s));
    for arm in packet["arms"].as_array_mut().unwrap() {
        let name = arm["raw_file"]["name"].as_str().unwrap().to_owned();
        arm["raw_file"] = digest(&name);
    }
    for q in packet["quality"].as_array_mut().unwrap() {
        let name = q["file"]["name"].as_str().unwrap().to_owned();
        q["file"] = digest(&name);
    }
    if let Some(arms) = packet
        .get_mut("scenario")
        .and_then(|s| s["arms"].as_array_mut())
    {
        for arm in arms {
            let name = arm["raw_file"]["name"].as_str().unwrap().to_owned();
            arm["raw_file"] = digest(&name);
        }
    }
    store(&packet_path(s), &packet);
    let mut manifest = load(&dir.join(MANIFEST_FILE));
    for f in manifest["files"].as_array_mut().unwrap() {
        let name = f["name"].as_str().unwrap().to_owned();
        *f = digest(&name);
    }
    store(&dir.join(MANIFEST_FILE), &manifest);
}

fn tamper_packet(s: &Scratch, f: impl FnOnce(&mut Value)) {
    let mut v = load(&packet_path(s));
    f(&mut v);
    store(&packet_path(s), &v);
    refresh_digests(s);
}

fn tamper_raw(s: &Scratch, arm: &str, f: impl FnOnce(&mut ArmRaw)) {
    let path = s.path().join(raw_file_name(arm));
    let mut raw: ArmRaw = serde_json::from_value(load(&path)).unwrap();
    f(&mut raw);
    store(&path, &serde_json::to_value(&raw).unwrap());
    refresh_digests(s);
}

fn tamper_quality(s: &Scratch, arm: &str, f: impl FnOnce(&mut ArmQuality)) {
    let path = s.path().join(quality_file_name(arm));
    let mut q: ArmQuality = serde_json::from_value(load(&path)).unwrap();
    f(&mut q);
    store(&path, &serde_json::to_value(&q).unwrap());
    refresh_digests(s);
}

/// Validates and asserts the outcome: the exit code and an error containing `needle`.
fn expect(s: &Scratch, code: i32, needle: &str) -> Validation {
    let v = validate(&packet_path(s));
    assert_eq!(v.exit_code(), code, "errors: {:#?}", v.errors);
    assert!(
        v.errors.iter().any(|e| e.contains(needle)),
        "no error mentions {needle:?}: {:#?}",
        v.errors
    );
    v
}

#[test]
fn a_written_run_is_valid() {
    let s = run("valid");
    let v = validate(&packet_path(&s));
    assert!(v.valid, "{:#?}", v.errors);
    assert_eq!(v.exit_code(), 0);
    let bytes = std::fs::read(packet_path(&s)).unwrap();
    assert_eq!(
        v.packet_sha256.as_deref(),
        Some(sha256_hex(&bytes).as_str())
    );
    let out = serde_json::to_value(&v).unwrap();
    assert_eq!(out["schema"], VALIDATION_SCHEMA);
    assert_eq!(out["valid"], true);
    assert_eq!(out["errors"], json!([]));
}

#[test]
fn the_writer_output_satisfies_the_json_schema() {
    let s = run("schema-ok");
    assert_eq!(
        json_schema_errors(&load(&packet_path(&s))),
        Vec::<String>::new()
    );
}

#[test]
fn a_missing_required_field_breaks_the_schema() {
    let s = run("schema-missing");
    tamper_packet(&s, |p| {
        p["hardware"].as_object_mut().unwrap().remove("host");
    });
    expect(&s, 1, "schema: at \"/hardware\"");
}

#[test]
fn a_wrongly_typed_field_breaks_the_schema() {
    let s = run("schema-type");
    tamper_packet(&s, |p| p["envelope"]["n_ctx"] = json!("128"));
    expect(&s, 1, "/envelope/n_ctx");
}

#[test]
fn a_newer_schema_is_refused() {
    let s = run("newer");
    tamper_packet(&s, |p| p["schema"] = json!("fak.macbench.comparison.v2"));
    expect(&s, 1, "newer than this harness supports");
}

#[test]
fn a_missing_packet_is_unreadable() {
    let s = Scratch::new("no-packet");
    let v = expect(&s, 2, "cannot read");
    assert_eq!(v.packet_sha256, None);
}

#[test]
fn a_corrupt_packet_is_unreadable() {
    let s = run("corrupt-packet");
    std::fs::write(packet_path(&s), b"{\"schema\": ").unwrap();
    expect(&s, 2, "not JSON");
}

#[test]
fn a_missing_raw_file_is_unreadable() {
    let s = run("missing-raw");
    std::fs::remove_file(s.path().join(raw_file_name("mlx"))).unwrap();
    expect(&s, 2, "mlx-raw.json");
}

#[test]
fn a_corrupt_raw_file_is_unreadable() {
    let s = run("corrupt-raw");
    let path = s.path().join(raw_file_name("llama.cpp"));
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    expect(&s, 2, "corrupt");
}

#[test]
fn a_missing_manifest_is_unreadable() {
    let s = run("missing-manifest");
    std::fs::remove_file(s.path().join(MANIFEST_FILE)).unwrap();
    expect(&s, 2, "manifest.json");
}

#[test]
fn an_edited_raw_file_breaks_its_digest() {
    let s = run("raw-digest");
    let path = s.path().join(raw_file_name("llama.cpp"));
    let mut raw = load(&path);
    raw["engine"]["version"] = json!("b9999");
    store(&path, &raw);
    expect(&s, 1, "llama.cpp-raw.json has sha256");
}

#[test]
fn an_edited_packet_breaks_the_manifest() {
    let s = run("packet-digest");
    let mut p = load(&packet_path(&s));
    p["hardware"]["host"] = json!("elsewhere");
    store(&packet_path(&s), &p);
    expect(&s, 1, "manifest.json: packet.json has sha256");
}

#[test]
fn an_edited_quality_file_breaks_its_digest() {
    let s = run("quality-digest");
    let path = s.path().join(quality_file_name(NATIVE_ARM));
    let mut q = load(&path);
    q["output_positions"] = json!(5);
    store(&path, &q);
    expect(&s, 1, "fak-native-quality.json has sha256");
}

#[test]
fn bucket_sum_must_match_the_wall_clock() {
    let s = run("sum");
    // Half a second of the request went unmeasured.
    tamper_raw(&s, "llama.cpp", |raw| raw.requests[2].wall_s += 0.5);
    let v = expect(&s, 1, "arm llama.cpp, request 2: bucket sum");
    assert!(
        v.errors
            .iter()
            .any(|e| e.contains("arms[1].requests[2].wall_s"))
    );
}

#[test]
fn a_bucket_may_not_be_negative() {
    let s = run("negative");
    tamper_raw(&s, "mlx", |raw| {
        raw.requests[1].buckets.other_s = -0.0003;
        raw.requests[1].wall_s -= 0.0006;
    });
    expect(&s, 1, "bucket other is -0.0003");
}

#[test]
fn ttft_must_be_the_sum_of_its_buckets() {
    let s = run("ttft");
    tamper_packet(&s, |p| {
        let v = p["arms"][0]["requests"][3]["ttft_s"].as_f64().unwrap();
        p["arms"][0]["requests"][3]["ttft_s"] = json!(v * 0.9);
    });
    expect(&s, 1, "arms[0].requests[3].ttft_s: packet says");
}

#[test]
fn ttft_must_match_the_first_token_time() {
    let s = run("ttft-clock");
    tamper_raw(&s, NATIVE_ARM, |raw| {
        // Prefill claimed 5 ms shorter than the first token's arrival says.
        raw.requests[4].buckets.prefill_s -= 0.005;
        raw.requests[4].buckets.other_s += 0.005;
    });
    expect(&s, 1, "TTFT (queue + setup + prefill)");
}

#[test]
fn decode_must_span_first_to_last_token() {
    let s = run("decode-span");
    tamper_raw(&s, NATIVE_ARM, |raw| {
        raw.requests[2].buckets.decode_s -= 0.01;
        raw.requests[2].buckets.other_s += 0.01;
    });
    expect(&s, 1, "decode bucket");
}

#[test]
fn token_timestamps_must_not_go_backwards() {
    let s = run("backwards");
    tamper_raw(&s, "mlx", |raw| raw.requests[3].token_times_s.swap(2, 3));
    expect(&s, 1, "token timestamps go backwards");
}

#[test]
fn every_percentile_is_recomputed() {
    let s = run("p95");
    tamper_packet(&s, |p| {
        p["arms"][1]["summary"]["ttft_s"]["p95"] = json!(0.001)
    });
    expect(&s, 1, "arms[1].summary.ttft_s.p95: packet says 0.001");
}

#[test]
fn every_rate_is_recomputed() {
    let s = run("rate");
    tamper_packet(&s, |p| {
        let r = &mut p["arms"][0]["summary"]["decode_tok_s"]["p50"];
        *r = json!(r.as_f64().unwrap() * 1.1);
    });
    expect(&s, 1, "arms[0].summary.decode_tok_s.p50");
}

#[test]
fn itl_is_recomputed_from_the_timestamps() {
    let s = run("itl");
    tamper_packet(&s, |p| {
        let r = &mut p["arms"][2]["summary"]["itl_s"]["p50"];
        *r = json!(r.as_f64().unwrap() * 0.5);
    });
    expect(&s, 1, "arms[2].summary.itl_s.p50");
}

#[test]
fn every_bootstrap_interval_is_recomputed() {
    let s = run("ci");
    tamper_packet(&s, |p| {
        p["arms"][0]["summary"]["prefill_tok_s"]["p50_ci"][0] = json!(1.0);
    });
    expect(&s, 1, "arms[0].summary.prefill_tok_s.p50_ci[0]");
}

#[test]
fn every_ratio_is_recomputed() {
    let s = run("ratio");
    tamper_packet(&s, |p| {
        p["ratios"]["by_arm"]["fak-native"]["decode_tok_s_p50"] = json!(3.0)
    });
    expect(
        &s,
        1,
        "ratios.by_arm.fak-native.decode_tok_s_p50: packet says 3.0",
    );
}

#[test]
fn the_reference_arm_must_exist() {
    let s = run("reference-arm");
    tamper_packet(&s, |p| p["method"]["reference_arm"] = json!("vllm"));
    expect(&s, 1, "reference_arm vllm is not an arm");
}

#[test]
fn arms_must_run_the_same_n_ctx() {
    let s = run("n-ctx");
    tamper_raw(&s, "mlx", |raw| raw.header.envelope.n_ctx = 32);
    expect(&s, 1, "arm mlx: ran n_ctx 32, the envelope says 16");
}

#[test]
fn arms_must_produce_n_out_tokens() {
    let s = run("n-out");
    tamper_raw(&s, "llama.cpp", |raw| {
        raw.requests[1].token_ids.pop();
    });
    expect(
        &s,
        1,
        "7 token ids and 8 timestamps, the envelope says n_out 8",
    );
}

#[test]
fn arms_must_run_all_n_prompts() {
    let s = run("n-prompts");
    tamper_raw(&s, "llama.cpp", |raw| {
        raw.requests.pop();
    });
    expect(&s, 1, "ran 5 counted requests, the envelope has N = 6");
}

#[test]
fn arms_must_send_the_envelope_prompts() {
    let s = run("prompt-digest");
    tamper_raw(&s, NATIVE_ARM, |raw| {
        raw.requests[1].prompt_sha256 = crate::packet::prompt_sha256(&[1, 2, 3]);
    });
    expect(&s, 1, "but the envelope's prompt 0 is");
}

#[test]
fn arms_must_run_the_same_prompt_set() {
    let s = run("prompt-set");
    tamper_raw(&s, "llama.cpp", |raw| {
        raw.header.envelope.prompt_set_sha256 = sha256_hex(b"other prompts");
    });
    expect(&s, 1, "arm llama.cpp: ran prompt set");
}

#[test]
fn the_prompt_set_digest_must_match_its_prompts() {
    let s = run("prompt-set-self");
    tamper_packet(&s, |p| {
        p["envelope"]["prompt_sha256"][0] = json!(sha256_hex(b"x"))
    });
    expect(&s, 1, "envelope.prompt_set_sha256 is");
}

#[test]
fn same_weights_claims_must_carry_the_model_digest() {
    let s = run("weights");
    tamper_raw(&s, "llama.cpp", |raw| {
        raw.header.weights.sha256 = sha256_hex(b"another gguf");
    });
    expect(&s, 1, "arm llama.cpp: claims the envelope's weights");
}

#[test]
fn only_fak_is_native() {
    let s = run("runtime");
    tamper_raw(&s, "mlx", |raw| raw.header.runtime = Runtime::Native);
    expect(&s, 1, "arm mlx: runtime label native, must be reference");
}

#[test]
fn an_unfinished_arm_is_invalid() {
    let s = run("running");
    tamper_raw(&s, "mlx", |raw| {
        raw.status = ArmStatus::Running {
            faults: vec![],
            restarts: 0,
        }
    });
    expect(&s, 1, "arm mlx: raw file still says running");
}

#[test]
fn quality_claims_are_recomputed_from_the_receipts() {
    let s = run("quality-claim");
    tamper_quality(&s, NATIVE_ARM, |q| {
        // A real mismatch (margin 2.0) hidden behind a claimed pass.
        q.comparisons[1].receipts[7].greedy_arm = 99;
    });
    let v = expect(&s, 1, "comparison 1: summary.mismatches");
    assert!(v.errors.iter().any(|e| e.contains("summary.passed")));
}

#[test]
fn parity_thresholds_are_those_of_v1() {
    let s = run("quality-thresholds");
    tamper_quality(&s, NATIVE_ARM, |q| {
        let c = &mut q.comparisons[1];
        c.rule = QualityRule::StrictTokenParityV1 {
            min_cosine: 0.999,
            near_tie_margin: 0.1,
        };
        c.summary = summarize(&c.rule, &c.receipts);
    });
    expect(&s, 1, "strict-token-parity-v1 with thresholds");
}

#[test]
fn parity_is_never_claimed_across_different_weights() {
    let s = run("quality-weights");
    tamper_quality(&s, NATIVE_ARM, |q| {
        q.comparisons[1].against = Against::Arm { arm: "mlx".into() };
    });
    expect(&s, 1, "did not both run the envelope's weights");
}

/// An own-rounding reference is the one the arm's engine and device give, on the envelope's
/// weights, judging that very arm; each forgery alone fails.
#[test]
fn own_rounding_claims_are_the_arms_own() {
    type Forgery = (&'static str, fn(&mut Against), &'static str);
    let forgeries: [Forgery; 3] = [
        (
            "own-rounding-rules",
            |a| {
                if let Against::OwnRounding { rounding, .. } = a {
                    rounding[0].attention = "f32".into();
                }
            },
            "is not what fak-native's engine and device give",
        ),
        (
            "own-rounding-weights",
            |a| {
                if let Against::OwnRounding { weights_sha256, .. } = a {
                    *weights_sha256 = sha256_hex(b"other weights");
                }
            },
            "not the envelope's",
        ),
        (
            "own-rounding-arm",
            |a| {
                if let Against::OwnRounding { rounds_as, .. } = a {
                    *rounds_as = "llama.cpp".into();
                }
            },
            "rounding as llama.cpp judges fak-native",
        ),
    ];
    for (name, forge, needle) in forgeries {
        let s = run(name);
        tamper_quality(&s, NATIVE_ARM, |q| forge(&mut q.comparisons[2].against));
        expect(&s, 1, needle);
    }
}

/// The cross-engine budget keeps v1's thresholds and judges two arms on the same weights only.
#[test]
fn the_cross_engine_budget_is_v1_between_arms() {
    let s = run("cross-engine-thresholds");
    tamper_quality(&s, NATIVE_ARM, |q| {
        let c = &mut q.comparisons[1];
        c.rule = QualityRule::CrossEngineWithinRoundingV1 {
            min_cosine: 0.99,
            near_tie_margin: 0.1,
        };
        c.summary = summarize(&c.rule, &c.receipts);
    });
    expect(&s, 1, "cross-engine-within-rounding-v1 with thresholds");
    let s = run("cross-engine-against");
    tamper_quality(&s, NATIVE_ARM, |q| {
        let c = &mut q.comparisons[2];
        c.rule = QualityRule::cross_engine_v1();
        c.summary = summarize(&c.rule, &c.receipts);
    });
    expect(&s, 1, "claimed against something other than an arm");
}

#[test]
fn the_packet_quality_summary_is_the_files() {
    let s = run("quality-packet");
    tamper_packet(&s, |p| {
        p["quality"][0]["comparisons"][0]["summary"]["min_cosine"] = json!(0.9999);
    });
    expect(&s, 1, "quality[0].comparisons[0].summary.min_cosine");
}

#[test]
fn selftest_status_must_match_its_counts() {
    let s = run("selftest");
    tamper_packet(&s, |p| {
        p["selftest"]["checks_failed"] = json!(2);
        p["selftest"]["failures"] = json!(["matvec_q4k subgroup"]);
    });
    expect(&s, 1, "selftest says Passed");
}

#[test]
fn the_tolerance_is_fixed_by_the_schema_version() {
    let s = run("tolerance");
    tamper_packet(&s, |p| p["method"]["tolerance"]["rel"] = json!(0.5));
    expect(&s, 1, "method.tolerance");
}

#[test]
fn a_short_bootstrap_is_refused() {
    let s = run("resamples");
    tamper_packet(&s, |p| p["method"]["bootstrap"]["resamples"] = json!(10));
    let v = expect(&s, 1, "method.bootstrap.resamples is 10");
    // The intervals were computed with 2000 resamples, so they no longer recompute either.
    assert!(v.errors.iter().any(|e| e.contains("p50_ci")));
}

#[test]
fn the_command_exits_0_valid_1_invalid_2_unreadable() {
    let s = run("exit-codes");
    let args = |json| Args {
        packet: packet_path(&s),
        json,
    };
    assert_eq!(super::run(&args(true)), 0);
    assert_eq!(super::run(&args(false)), 0);
    tamper_packet(&s, |p| p["envelope"]["n_out"] = json!(9));
    assert_eq!(super::run(&args(true)), 1);
    std::fs::remove_file(s.path().join(raw_file_name(NATIVE_ARM))).unwrap();
    assert_eq!(super::run(&args(false)), 2);
}

#[test]
fn a_skipped_reference_and_a_faulted_arm_still_make_a_valid_packet() {
    use crate::packet::{Fault, PacketWriter};
    let s = Scratch::new("skipped-faulted");
    let mut writer = PacketWriter::create(s.path()).unwrap();
    {
        // fak-native dies after its third counted request, is restarted, and runs one more.
        let mut arm = writer.begin_arm(testkit::header(NATIVE_ARM)).unwrap();
        let samples = testkit::samples(4000.0, 0.01, 1);
        for sample in &samples[..4] {
            arm.record(sample.clone()).unwrap();
        }
        arm.fault(Fault {
            request_index: Some(4),
            what: "exit status 134".into(),
            stderr_tail: Some("abort".into()),
        })
        .unwrap();
        arm.restarted().unwrap();
        arm.record(samples[4].clone()).unwrap();
        arm.finish().unwrap();
    }
    writer
        .skip_arm(
            testkit::header("llama.cpp"),
            "llama-server not found on PATH",
        )
        .unwrap();
    let packet = writer.finish(testkit::meta()).unwrap();
    let v = validate(&packet_path(&s));
    assert!(v.valid, "{:#?}", v.errors);
    assert_eq!(packet.arms[0].summary.as_ref().unwrap().requests, 4);
    assert!(packet.arms[1].summary.is_none());
    assert!(packet.ratios.by_arm.is_empty());
    assert!(packet.ratios.note.as_deref().unwrap().contains("llama.cpp"));
    // A skipped arm that still holds requests is not.
    tamper_raw(&s, "llama.cpp", |raw| {
        raw.requests = testkit::samples(3000.0, 0.01, 2);
    });
    expect(&s, 1, "arm llama.cpp: skipped but holds 7 requests");
}

/// A freshly written valid scenario run (multi-agent, two arms ran, one skipped).
fn scenario_run(name: &str) -> Scratch {
    let scratch = Scratch::new(name);
    testkit::write_scenario_run(scratch.path());
    scratch
}

fn tamper_scenario_raw(s: &Scratch, arm: &str, f: impl FnOnce(&mut ScenarioRaw)) {
    let path = s.path().join(scenario_raw_file_name(arm));
    let mut raw: ScenarioRaw = serde_json::from_value(load(&path)).unwrap();
    f(&mut raw);
    store(&path, &serde_json::to_value(&raw).unwrap());
    refresh_digests(s);
}

/// The turn of `agent` and `turn` in a scenario raw file.
fn turn_of(
    raw: &mut ScenarioRaw,
    agent: usize,
    turn: usize,
) -> &mut crate::packet::scenario::TurnSample {
    raw.turns
        .iter_mut()
        .find(|t| t.agent == agent && t.turn == turn)
        .unwrap()
}

#[test]
fn a_written_scenario_run_is_valid_and_satisfies_the_schema() {
    let s = scenario_run("scenario-valid");
    let v = validate(&packet_path(&s));
    assert!(v.valid, "{:#?}", v.errors);
    assert_eq!(
        json_schema_errors(&load(&packet_path(&s))),
        Vec::<String>::new()
    );
    let packet = load(&packet_path(&s));
    let effect = &packet["scenario"]["cache_effect"][0];
    assert_eq!(effect["cache_arm"], "fak-native-cache");
    // Later turns: 0.05 s without the cache, 0.01 s with it.
    assert!((effect["later_ttft_ratio"].as_f64().unwrap() - 5.0).abs() < 1e-9);
}

#[test]
fn a_scenario_arm_that_computed_more_than_its_prompt_is_invalid() {
    let s = scenario_run("scenario-computed");
    tamper_scenario_raw(&s, "fak-native-cache", |r| {
        let t = turn_of(r, 1, 2);
        t.prefill_computed = t.prompt_tokens + 1;
    });
    expect(&s, 1, "more than the prompt's");
}

#[test]
fn computed_plus_reused_must_be_the_prompt() {
    let s = scenario_run("scenario-reused");
    tamper_scenario_raw(&s, "fak-native-cache", |r| {
        turn_of(r, 2, 2).cached_tokens += 3
    });
    expect(&s, 1, "reused ≠ the prompt's");
}

#[test]
fn a_turn_with_nothing_computed_is_invalid() {
    let s = scenario_run("scenario-cached-reply");
    tamper_scenario_raw(&s, "fak-native-cache", |r| {
        let t = turn_of(r, 1, 2);
        t.cached_tokens = t.prompt_tokens;
        t.prefill_computed = 0;
    });
    expect(&s, 1, "the first token must come from this request");
}

#[test]
fn a_ran_scenario_arm_missing_a_turn_is_invalid() {
    let s = scenario_run("scenario-missing");
    tamper_scenario_raw(&s, "fak-native-nocache", |r| {
        r.turns.retain(|t| !(t.agent == 2 && t.turn == 2));
    });
    expect(&s, 1, "agent 2 turn 2 is missing");
}

#[test]
fn a_skipped_scenario_arm_needs_a_reason_and_no_turns() {
    let s = scenario_run("scenario-skipped");
    tamper_packet(&s, |p| {
        p["scenario"]["arms"][2]["status"] = json!({"state": "skipped", "reason": ""});
    });
    expect(&s, 1, "schema: at \"/scenario/arms/2/status\"");
    let s = scenario_run("scenario-skipped-turns");
    tamper_scenario_raw(&s, "mlx-cache", |r| {
        r.turns.push(testkit::write_scenario_turn());
    });
    expect(&s, 1, "skipped but holds 1 turns");
}

#[test]
fn a_zero_ttft_is_invalid() {
    let s = scenario_run("scenario-ttft");
    tamper_scenario_raw(&s, "fak-native-cache", |r| {
        let t = turn_of(r, 1, 1);
        t.ttft_s = 0.0;
        t.token_times_s[0] = 0.0;
    });
    expect(&s, 1, "TTFT 0 is not positive");
}

#[test]
fn a_ttft_that_is_not_the_first_token_time_is_invalid() {
    let s = scenario_run("scenario-ttft-first");
    tamper_scenario_raw(&s, "fak-native-cache", |r| turn_of(r, 2, 1).ttft_s *= 0.5);
    expect(&s, 1, "but the first token arrived at");
}

#[test]
fn a_turn_sent_before_the_previous_answer_ended_is_invalid() {
    let s = scenario_run("scenario-order");
    tamper_scenario_raw(&s, "fak-native-nocache", |r| {
        turn_of(r, 1, 2).sent_s = 0.001
    });
    expect(&s, 1, "before turn 1 ended");
}

#[test]
fn a_wrong_prompt_length_or_turn_1_prompt_is_invalid() {
    let s = scenario_run("scenario-prompt");
    tamper_scenario_raw(&s, "fak-native-cache", |r| {
        let t = turn_of(r, 2, 2);
        t.prompt_tokens += 1;
        t.prefill_computed += 1;
    });
    expect(&s, 1, "turn 2 of P 16 + S 4");
    let s = scenario_run("scenario-prompt-digest");
    tamper_scenario_raw(&s, "fak-native-cache", |r| {
        turn_of(r, 1, 1).prompt_sha256 = sha256_hex(b"another prompt");
    });
    expect(&s, 1, "is not the envelope's prompt for agent 1");
}

/// With scripted replies every arm is sent the script's prompt at every turn: a later turn
/// whose prompt is another is invalid. With each engine's own replies (the packet says so, as
/// packets from before the choice do by omission) later prompts are the arm's own.
#[test]
fn a_later_turn_off_the_scripted_prompts_is_invalid() {
    let off_script = |r: &mut ScenarioRaw| {
        turn_of(r, 2, 2).prompt_sha256 = sha256_hex(b"the engine's own reply");
    };
    let s = scenario_run("scenario-scripted");
    tamper_scenario_raw(&s, "fak-native-nocache", off_script);
    let v = expect(&s, 1, "is not the scripted prompt of agent 2 turn 2");
    assert_eq!(v.errors.len(), 1, "{:#?}", v.errors);

    let s = scenario_run("scenario-own-replies");
    tamper_packet(&s, |p| {
        p["scenario"]
            .as_object_mut()
            .unwrap()
            .remove("replies")
            .expect("the packet states its scripted replies");
    });
    for arm in ["fak-native-cache", "fak-native-nocache", "mlx-cache"] {
        tamper_scenario_raw(&s, arm, |r| r.spec.replies = Default::default());
    }
    tamper_scenario_raw(&s, "fak-native-nocache", off_script);
    let v = validate(&packet_path(&s));
    assert!(v.valid, "{:#?}", v.errors);
}

#[test]
fn scenario_ratios_and_sums_are_recomputed_from_the_samples() {
    let s = scenario_run("scenario-ratio");
    tamper_packet(&s, |p| {
        p["scenario"]["arms"][0]["summary"]["ttft_turn1_over_later"] = json!(40.0);
    });
    expect(
        &s,
        1,
        "scenario.arms[0].summary.ttft_turn1_over_later: packet says 40",
    );
    let s = scenario_run("scenario-effect");
    tamper_packet(&s, |p| {
        p["scenario"]["cache_effect"][0]["prefill_computed_ratio"] = json!(9.0);
    });
    expect(&s, 1, "scenario.cache_effect[0].prefill_computed_ratio");
    let s = scenario_run("scenario-sum");
    tamper_packet(&s, |p| {
        p["scenario"]["arms"][1]["summary"]["later"]["prefill_computed"] = json!(1);
    });
    expect(&s, 1, "scenario.arms[1].summary.later.prefill_computed");
}

#[test]
fn a_scenario_raw_file_that_ran_another_scenario_is_invalid() {
    let s = scenario_run("scenario-spec");
    tamper_scenario_raw(&s, "fak-native-nocache", |r| r.spec.turns = 3);
    expect(&s, 1, "the packet's scenario is");
}

#[test]
fn a_tampered_scenario_raw_file_fails_its_digest() {
    let s = scenario_run("scenario-digest");
    let path = s.path().join(scenario_raw_file_name("fak-native-cache"));
    let mut raw = load(&path);
    raw["turns"][0]["ttft_s"] = json!(0.5);
    store(&path, &raw);
    expect(
        &s,
        1,
        "scenario arm fak-native-cache: multi-agent-fak-native-cache-raw.json has sha256",
    );
}

#[test]
fn a_packet_with_neither_arms_nor_scenario_is_invalid() {
    let s = scenario_run("scenario-none");
    tamper_packet(&s, |p| {
        p.as_object_mut().unwrap().remove("scenario");
    });
    expect(&s, 1, "no arms and no scenario");
}

#[test]
fn weights_without_a_digest_are_only_for_a_skipped_arm() {
    let s = scenario_run("scenario-no-weights");
    tamper_scenario_raw(&s, "mlx-cache", |r| {
        r.header.weights.sha256 = "none".into();
        r.header.weights.same_as_envelope = false;
    });
    tamper_packet(&s, |p| {
        p["scenario"]["arms"][2]["weights"]["sha256"] = json!("none");
        p["scenario"]["arms"][2]["weights"]["same_as_envelope"] = json!(false);
    });
    let v = validate(&packet_path(&s));
    assert!(v.valid, "a skipped arm without weights: {:#?}", v.errors);
    let s = scenario_run("scenario-ran-no-weights");
    tamper_scenario_raw(&s, "fak-native-nocache", |r| {
        r.header.weights.sha256 = "none".into();
        r.header.weights.same_as_envelope = false;
    });
    tamper_packet(&s, |p| {
        p["scenario"]["arms"][1]["weights"]["sha256"] = json!("none");
        p["scenario"]["arms"][1]["weights"]["same_as_envelope"] = json!(false);
    });
    expect(&s, 1, "ran weights without a digest");
}

#[test]
fn a_withheld_position_has_no_receipt_and_the_packet_counts_it() {
    let s = run("quality-withheld");
    tamper_quality(&s, NATIVE_ARM, |q| {
        let c = &mut q.comparisons[1];
        let r = &c.receipts[3];
        c.withheld.push(WithheldPosition {
            prompt_index: r.prompt_index,
            position: r.position,
        });
    });
    let v = expect(&s, 1, "has a receipt");
    assert!(
        v.errors.iter().any(|e| e.contains("withheld_positions")),
        "the packet's count no longer matches the file: {:#?}",
        v.errors
    );
}

#[test]
fn bootstrap_resamples_past_the_maximum_break_the_schema_before_any_redraw() {
    let s = run("resamples-max");
    let too_many = crate::packet::MAX_BOOTSTRAP_RESAMPLES + 1;
    tamper_packet(&s, |p| {
        p["method"]["bootstrap"]["resamples"] = json!(too_many)
    });
    expect(&s, 1, "/method/bootstrap/resamples");
    // 2^64 − 1 resamples once sized a vector of that capacity.
    tamper_packet(&s, |p| {
        p["method"]["bootstrap"]["resamples"] = json!(u64::MAX)
    });
    expect(&s, 1, "/method/bootstrap/resamples");
}

// Physics: a packet rewritten consistently still cannot claim what the hardware cannot do.

/// A physical run (H200, every bound applicable) with fak's prefill rate, ITL and the
/// selftest's bandwidth given.
fn physical_run(name: &str, fak_prefill: f64, fak_itl: f64, bandwidth: f64) -> Scratch {
    let scratch = Scratch::new(name);
    testkit::write_physical_run(scratch.path(), fak_prefill, fak_itl, bandwidth);
    scratch
}

/// Asserts the only errors are those containing `needle`.
fn expect_only(s: &Scratch, needle: &str) {
    let v = expect(s, 1, needle);
    let others: Vec<&String> = v.errors.iter().filter(|e| !e.contains(needle)).collect();
    assert!(others.is_empty(), "errors besides {needle:?}: {others:#?}");
}

#[test]
fn a_physical_run_is_valid_with_every_bound_applied() {
    let s = physical_run("physical-valid", 4000.0, 0.010, 4.0e12);
    let v = validate(&packet_path(&s));
    assert!(v.valid, "{:#?}", v.errors);
    assert_eq!(
        v.notes,
        Vec::<String>::new(),
        "every physical check applied"
    );
}

#[test]
fn decode_above_the_memory_bound_is_impossible() {
    // 2 ms a token is 500 tok/s; a 16 GB step at 4.8 TB/s allows 300.
    let s = physical_run("physical-decode", 4000.0, 0.002, 4.0e12);
    expect_only(&s, "one sequence can reach");
}

#[test]
fn prefill_below_the_compute_floor_is_impossible() {
    // 16 tokens in 0.16 ms; 16 × 5.4e10 FLOPs take 0.44 ms at 1,979 TFLOPS.
    let s = physical_run("physical-prefill", 100_000.0, 0.010, 4.0e12);
    expect_only(&s, "below the");
}

#[test]
fn a_bandwidth_above_the_gpus_peak_is_impossible() {
    let s = physical_run("physical-bandwidth", 4000.0, 0.010, 6.0e12);
    expect_only(&s, "exceeds the NVIDIA H200 peak");
}

#[test]
fn the_hardware_entry_is_what_the_selftest_measured() {
    let s = physical_run("physical-hardware", 4000.0, 0.010, 4.0e12);
    tamper_packet(&s, |p| {
        p["hardware"]["bandwidth"]["bytes_per_s"] = json!(4.5e12);
    });
    expect_only(&s, "hardware.bandwidth (against the selftest's output)");
    let s = physical_run("physical-adapter", 4000.0, 0.010, 4.0e12);
    tamper_packet(&s, |p| {
        p["hardware"]["gpu"]["adapter"] = json!("NVIDIA H200 NVL");
    });
    expect_only(&s, "hardware.gpu.adapter");
}

#[test]
fn the_selftest_summary_is_what_its_output_says() {
    let s = physical_run("physical-selftest", 4000.0, 0.010, 4.0e12);
    tamper_packet(&s, |p| {
        p["selftest"]["checks_run"] = json!(277);
    });
    expect_only(&s, "selftest (against its output).checks_run");
}

#[test]
fn a_cached_ttft_below_one_decode_step_is_impossible() {
    // A 16 GB step at 4.8 TB/s takes 3.3 ms: a turn that computed 6 tokens cannot answer in 0.5.
    let s = Scratch::new("physical-cached-ttft");
    testkit::write_scenario_run_with(s.path(), 0.0005);
    expect_only(&s, "below one decode step");
    let s = Scratch::new("physical-cached-ttft-ok");
    testkit::write_scenario_run_with(s.path(), 0.004);
    let v = validate(&packet_path(&s));
    assert!(v.valid, "{:#?}", v.errors);
}

#[test]
fn a_bucket_stated_as_zero_must_hold_zero() {
    let s = run("zero-bucket");
    let zero = |kinds: &mut Option<BucketKinds>| {
        kinds.as_mut().unwrap().verification = BucketKind::Zero;
    };
    tamper_raw(&s, "llama.cpp", |raw| {
        zero(&mut raw.header.bucket_methods.kinds)
    });
    tamper_packet(&s, |p| {
        p["arms"][1]["bucket_methods"]["kinds"]["verification"] = json!("zero");
    });
    expect_only(&s, "bucket verification is stated as set to 0");
}

/// The quality verdict against its receipt rows: `quality_claims_are_recomputed_from_the_receipts`
/// above. The plain client's verdict against its raw TTFTs:
#[test]
fn the_plain_client_verdict_is_recomputed() {
    let s = run("plain-client");
    tamper_raw(&s, "llama.cpp", |raw| {
        raw.plain_client = Some(PlainClient {
            how: "test client".into(),
            ttft_s: vec![0.0060; 6],
            prompt_s: vec![0.0050; 6],
            error: None,
        });
    });
    // The raw file now has a plain client the packet does not state.
    expect(&s, 1, "plain_client");
}
