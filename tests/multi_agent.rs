//! `harness threeway --scenario multi-agent` end to end on the tiny synthetic Qwen3: two agents
//! sharing a 64-token preamble, two turns each, every engine for real (fak on the present
//! adapter, llama-server from the peer build, mlx_lm on CPU), each with its prefix cache on and
//! off. The packet must validate, the report must show the shared-TTFT table, and the counts the
//! engines report must show what their caches did.

use fak_tests::harness::harness;
use fak_tests::{llama_cpp_tool, python};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const PREAMBLE: usize = 64;
const SUFFIX: usize = 8;
const N_OUT: usize = 4;
/// fak's KV page in these runs: the prefix cache shares whole pages.
const PAGE: usize = 16;

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("multi-agent")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Two agents, two turns, the synthetic model from the threeway tests' cache (written once).
fn scenario(out: &Path) -> Command {
    let mut c = harness();
    c.args(["threeway", "--scenario", "multi-agent", "--no-selftest"])
        .args(["--agents", "2", "--turns", "2"])
        .args(["--preamble", &PREAMBLE.to_string()])
        .args(["--suffix", &SUFFIX.to_string()])
        .args(["--n-out", &N_OUT.to_string()])
        .args(["--page-size", &PAGE.to_string()])
        .args(["--python", &python()])
        .arg("--llama-server")
        .arg(llama_cpp_tool("llama-server"))
        .arg("--out")
        .arg(out)
        .env(
            "FAK_CACHE",
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("threeway-cache"),
        );
    c
}

fn run(c: &mut Command) {
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn packet(out: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(out.join("packet.json")).unwrap()).unwrap()
}

fn arm<'a>(packet: &'a Value, name: &str) -> &'a Value {
    packet["scenario"]["arms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["arm"] == name)
        .unwrap_or_else(|| panic!("no scenario arm {name}"))
}

/// Every turn of an arm as (agent, turn, prompt tokens, computed, reused).
fn turns(packet: &Value, name: &str) -> Vec<(u64, u64, u64, u64, u64)> {
    arm(packet, name)["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let n = |k: &str| t[k].as_u64().unwrap();
            (
                n("agent"),
                n("turn"),
                n("prompt_tokens"),
                n("prefill_computed"),
                n("cached_tokens"),
            )
        })
        .collect()
}

/// Prompt tokens an arm computed over its turn-1 or its later requests.
fn computed(packet: &Value, name: &str, later: bool) -> u64 {
    turns(packet, name)
        .iter()
        .filter(|t| (t.1 > 1) == later)
        .map(|t| t.3)
        .sum()
}

/// The fak-serve arm's step trace, kept beside its raw file, reads per request: each turn (named
/// by the trace id its answer carried) computed in the trace's prefill steps exactly the prompt
/// tokens the server counted as computed, and started; the summary names every turn.
fn assert_step_trace_counts_each_turn(out: &Path, name: &str) {
    use fak_harness::report::steps::{request_names, summarize};
    let text = std::fs::read_to_string(out.join(format!("multi-agent-{name}-steps.jsonl")))
        .unwrap_or_else(|e| panic!("{name}: the step trace: {e}"));
    let summary = summarize(&fak::runtime::trace::parse_trace(&text).unwrap()).unwrap();
    let raw = out.join(format!("multi-agent-{name}-raw.json"));
    let names = request_names(&raw).unwrap();
    // The warm-up and every turn.
    assert_eq!(names.len(), 1 + 2 * 2, "{name}: {names:?}");
    let raw: Value = serde_json::from_slice(&std::fs::read(&raw).unwrap()).unwrap();
    for t in raw["turns"].as_array().unwrap() {
        let id = t["engine_report"]["engine"]["usage"]["timings"]["request"]
            .as_u64()
            .unwrap();
        let r = summary
            .requests
            .iter()
            .find(|r| r.request == id)
            .unwrap_or_else(|| panic!("{name}: request {id} is not in the trace"));
        assert_eq!(r.computed() as u64, t["prefill_computed"].as_u64().unwrap());
        assert_eq!(r.prompt_tokens as u64, t["prompt_tokens"].as_u64().unwrap());
        assert!(r.started_ns.is_some(), "{name}: request {id} never started");
    }
    let md = std::fs::read_to_string(out.join(format!("multi-agent-{name}-steps.md"))).unwrap();
    assert!(md.contains("agent 2 turn 2"), "{name}: {md}");
}

/// The most sequences one of fak's (cache-on) batched decode steps served.
fn largest_step(out: &Path) -> Option<u64> {
    let raw: Value = serde_json::from_slice(
        &std::fs::read(out.join("multi-agent-fak-native-cache-raw.json")).unwrap(),
    )
    .unwrap();
    raw["turns"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["engine_report"]["engine"]["largest_step"].as_u64())
        .max()
}

/// Every turn of fak's cache arm says where its host time until the first token went: five
/// phases (ns) that add up to no more than its TTFT; and how many snapshot buffers were created.
fn assert_phases_within_ttft(out: &Path) {
    let raw: Value = serde_json::from_slice(
        &std::fs::read(out.join("multi-agent-fak-native-cache-raw.json")).unwrap(),
    )
    .unwrap();
    for t in raw["turns"].as_array().unwrap() {
        let engine = &t["engine_report"]["engine"];
        let phases = engine["prefill_phases_ns"]
            .as_object()
            .expect("prefill_phases_ns");
        assert_eq!(phases.len(), 5, "{phases:?}");
        let sum_s = phases.values().map(|v| v.as_u64().unwrap()).sum::<u64>() as f64 * 1e-9;
        let ttft_s = t["ttft_s"].as_f64().unwrap();
        assert!(
            sum_s > 0.0 && sum_s <= ttft_s,
            "phases {sum_s} s, TTFT {ttft_s} s"
        );
        assert!(
            engine["snapshot_stats"]["created"].as_u64().unwrap() > 0,
            "{engine}"
        );
    }
}

fn validate_and_report(out: &Path) -> String {
    let validate = harness()
        .arg("validate")
        .arg(out.join("packet.json"))
        .output()
        .unwrap();
    assert!(
        validate.status.success(),
        "{}{}",
        String::from_utf8_lossy(&validate.stdout),
        String::from_utf8_lossy(&validate.stderr)
    );
    run(harness().arg("report").arg(out.join("packet.json")));
    std::fs::read_to_string(out.join("report.md")).unwrap()
}

/// All six arms run every turn of every agent. fak's cache shares the preamble across agents
/// (one agent's turn 1 reuses its 4 whole pages) and each agent's own conversation across
/// turns (its last, partly filled page by copy), so it computes fewer prompt tokens than
/// without it on later turns and fewer than llama.cpp's per-slot cache over the whole run; on a
/// later turn it computes no more than llama.cpp. MLX's prompt cache saves tokens too.
#[test]
fn agents_sharing_a_preamble_reuse_it_through_the_prefix_caches() {
    let out = scratch("together");
    run(&mut scenario(&out));
    let p = packet(&out);
    // Scripted replies (the default): every arm is sent the same prompt at every turn.
    assert_eq!(p["scenario"]["replies"]["mode"], "scripted");
    let names = [
        "fak-native-cache",
        "fak-native-nocache",
        "llama.cpp-cache",
        "llama.cpp-nocache",
        "mlx-cache",
        "mlx-nocache",
    ];
    for name in names {
        let a = arm(&p, name);
        assert_eq!(a["status"]["state"], "ran", "{name}: {}", a["status"]);
        let mut seen: Vec<(u64, u64)> = turns(&p, name).iter().map(|t| (t.0, t.1)).collect();
        seen.sort();
        assert_eq!(seen, [(1, 1), (1, 2), (2, 1), (2, 2)], "{name}");
        for t in turns(&p, name) {
            let want = (PREAMBLE + t.1 as usize * SUFFIX + (t.1 as usize - 1) * N_OUT) as u64;
            assert_eq!((t.2, t.3 + t.4), (want, want), "{name}: {t:?}");
            assert!(
                t.3 >= 1,
                "{name}: every request computes its last token: {t:?}"
            );
        }
        let raw: Value = serde_json::from_slice(
            &std::fs::read(out.join(format!("multi-agent-{name}-raw.json"))).unwrap(),
        )
        .unwrap();
        for t in raw["turns"].as_array().unwrap() {
            let (agent, turn) = (t["agent"].as_u64().unwrap(), t["turn"].as_u64().unwrap());
            let scripted =
                &p["scenario"]["replies"]["prompt_sha256"][agent as usize - 1][turn as usize - 1];
            assert!(scripted.is_string(), "{name}: agent {agent} turn {turn}");
            assert_eq!(
                &t["prompt_sha256"], scripted,
                "{name}: agent {agent} turn {turn}"
            );
        }
        let uncached = !name.ends_with("-cache");
        if uncached {
            assert!(turns(&p, name).iter().all(|t| t.4 == 0), "{name}");
        }
    }
    // Turn 1 arrives together: one agent prefills the preamble, the other reuses its pages.
    let mut turn1_reused: Vec<u64> = turns(&p, "fak-native-cache")
        .iter()
        .filter(|t| t.1 == 1)
        .map(|t| t.4)
        .collect();
    turn1_reused.sort();
    assert_eq!(turn1_reused, [0, (PREAMBLE / PAGE * PAGE) as u64]);
    assert!(
        computed(&p, "fak-native-cache", true) < computed(&p, "fak-native-nocache", true),
        "{}",
        p["scenario"]
    );
    let total = |name| computed(&p, name, false) + computed(&p, name, true);
    assert!(total("fak-native-cache") < total("llama.cpp-cache"));
    for (agent, turn, _, fak, _) in turns(&p, "fak-native-cache") {
        if turn > 1 {
            let llama = turns(&p, "llama.cpp-cache")
                .iter()
                .find(|t| (t.0, t.1) == (agent, turn))
                .unwrap()
                .3;
            assert!(
                fak <= llama,
                "agent {agent} turn {turn}: fak computed {fak}, llama.cpp {llama}"
            );
        }
    }
    assert_eq!(
        largest_step(&out),
        Some(2),
        "both agents in one decode step"
    );
    assert!(total("llama.cpp-cache") < total("llama.cpp-nocache"));
    assert!(total("mlx-cache") < total("mlx-nocache"));
    assert_eq!(arm(&p, "llama.cpp-cache")["serving"]["concurrent"], 2);
    assert_eq!(arm(&p, "mlx-cache")["serving"]["concurrent"], 1);
    let report = validate_and_report(&out);
    assert!(
        report.contains("## Multi-agent shared preamble"),
        "{report}"
    );
    for name in names {
        assert!(report.contains(&format!("| {name} |")), "{name}: {report}");
    }
}

/// Staggered arrival: agent 2's first turn goes out no sooner than its slot, and the packet
/// records the interval; fak alone, so the run stays short.
#[test]
fn staggered_agents_start_no_sooner_than_their_slot() {
    let out = scratch("staggered");
    run(scenario(&out).args([
        "--arms",
        "fak-native",
        "--arrival",
        "staggered",
        "--stagger-ms",
        "300",
    ]));
    let p = packet(&out);
    assert_eq!(
        p["scenario"]["arrival"],
        serde_json::json!({"mode": "staggered", "interval_s": 0.3})
    );
    let a = arm(&p, "fak-native-cache");
    let sent = |agent: u64| {
        a["turns"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["agent"] == agent && t["turn"] == 1)
            .unwrap()["sent_s"]
            .as_f64()
            .unwrap()
    };
    assert!(sent(2) - sent(1) >= 0.3, "{} vs {}", sent(1), sent(2));
    validate_and_report(&out);
}

/// A hybrid (Qwen3.5) model's engine serves agents that arrive together in one batched decode
/// step (a recurrent-state slot per sequence), the packet says so, and the prefix cache serves
/// the second agent's preamble (resumed from the recurrent-state snapshot at its page boundary)
/// and, with each engine's own replies, each agent's whole first turn on its second (resumed
/// from the snapshot at its end, its partly filled last page copied): a later turn computes only
/// its new tokens and the last reply token.
#[test]
fn a_hybrid_model_decodes_concurrent_agents_together() {
    let out = scratch("hybrid");
    let model = fak_tests::harness::synth_model(
        &PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("multi-agent-models"),
        "qwen35-tiny-q8_0.gguf",
        &[
            "--arch", "qwen35", "--preset", "tiny", "--vocab", "cut", "--quant", "q8_0", "--seed",
            "1",
        ],
    );
    run(scenario(&out).arg("--model").arg(&model).args([
        "--arms",
        "fak-native",
        "--replies",
        "own",
    ]));
    let p = packet(&out);
    for name in ["fak-native-cache", "fak-native-nocache"] {
        let serving = &arm(&p, name)["serving"];
        assert_eq!(serving["concurrent"], 2, "{name}: {serving}");
        assert!(
            serving["how"].as_str().unwrap().contains("batched decode"),
            "{name}: {serving}"
        );
    }
    assert_eq!(
        largest_step(&out),
        Some(2),
        "both agents in one decode step"
    );
    for (agent, turn, _, computed, _) in turns(&p, "fak-native-cache") {
        if turn > 1 {
            assert_eq!(
                computed,
                (SUFFIX + 1) as u64,
                "agent {agent} turn {turn}: the new suffix and the last reply token"
            );
        }
    }
    let mut turn1_reused: Vec<u64> = turns(&p, "fak-native-cache")
        .iter()
        .filter(|t| t.1 == 1)
        .map(|t| t.4)
        .collect();
    turn1_reused.sort();
    assert_eq!(turn1_reused, [0, (PREAMBLE / PAGE * PAGE) as u64]);
    assert!(computed(&p, "fak-native-cache", true) < computed(&p, "fak-native-nocache", true));
    assert_phases_within_ttft(&out);
    validate_and_report(&out);
}

/// With scripted replies (the default) a hybrid model's later turn cannot resume from the end of
/// its own answer (the prompt carries another reply): fak resumes from the recurrent-state
/// snapshot at the previous prompt's last page boundary, so each later turn computes the
/// scripted reply and the new suffix, plus at most a page of the previous prompt, and reuses the
/// rest; every turn's prompt is the script's.
#[test]
fn a_hybrid_model_resumes_scripted_replies_from_the_previous_prompt() {
    let out = scratch("hybrid-scripted");
    let model = fak_tests::harness::synth_model(
        &PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("multi-agent-models"),
        "qwen35-tiny-q8_0.gguf",
        &[
            "--arch", "qwen35", "--preset", "tiny", "--vocab", "cut", "--quant", "q8_0", "--seed",
            "1",
        ],
    );
    run(scenario(&out)
        .arg("--model")
        .arg(&model)
        .args(["--arms", "fak-native"]));
    let p = packet(&out);
    assert_eq!(p["scenario"]["replies"]["mode"], "scripted");
    for (agent, turn, prompt, computed, reused) in turns(&p, "fak-native-cache") {
        if turn > 1 {
            let new = (N_OUT + SUFFIX) as u64;
            assert!(
                computed >= new && computed <= new + PAGE as u64 && reused > 0,
                "agent {agent} turn {turn}: {computed} computed, {reused} reused of {prompt}"
            );
        }
    }
    assert!(computed(&p, "fak-native-cache", true) < computed(&p, "fak-native-nocache", true));
    validate_and_report(&out);
}

/// `fak serve` as a scenario arm, driven over HTTP like llama-server: every turn of both agents
/// runs with its cache on and off, the server's usage counts add up to each prompt, the cache
/// shares the preamble and each agent's conversation, and with think time an agent's next turn
/// goes out no sooner than that long after its answer.
#[test]
fn the_fak_server_arm_serves_the_agents_over_http_with_think_time() {
    let out = scratch("fak-serve");
    run(scenario(&out).args(["--arms", "fak-serve", "--think-ms", "250"]));
    let p = packet(&out);
    assert_eq!(p["scenario"]["think_s"], 0.25);
    for name in ["fak-serve-cache", "fak-serve-nocache"] {
        let a = arm(&p, name);
        assert_eq!(a["status"]["state"], "ran", "{name}: {}", a["status"]);
        assert_eq!(a["serving"]["concurrent"], 2, "{name}");
        for t in turns(&p, name) {
            let want = (PREAMBLE + t.1 as usize * SUFFIX + (t.1 as usize - 1) * N_OUT) as u64;
            assert_eq!((t.2, t.3 + t.4), (want, want), "{name}: {t:?}");
        }
        let timed = |agent: u64, turn: u64| {
            let t = a["turns"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["agent"] == agent && t["turn"] == turn)
                .unwrap();
            (t["sent_s"].as_f64().unwrap(), t["wall_s"].as_f64().unwrap())
        };
        for agent in [1, 2] {
            let ((sent1, wall1), (sent2, _)) = (timed(agent, 1), timed(agent, 2));
            assert!(
                sent2 - (sent1 + wall1) >= 0.25,
                "{name}: agent {agent} thought {} s",
                sent2 - (sent1 + wall1)
            );
        }
    }
    assert!(turns(&p, "fak-serve-nocache").iter().all(|t| t.4 == 0));
    assert!(computed(&p, "fak-serve-cache", true) < computed(&p, "fak-serve-nocache", true));
    for name in ["fak-serve-cache", "fak-serve-nocache"] {
        assert_step_trace_counts_each_turn(&out, name);
    }
    let report = validate_and_report(&out);
    assert!(report.contains("think time"), "{report}");
}
